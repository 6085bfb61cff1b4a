"""Where the course's JupyterLab keeps what it writes besides the notebooks.

A student saves an exercise where the exercise is, and nothing else of the lab
may land in the course: not the checkpoints JupyterLab makes when a notebook
is opened and saved, not the language server's shadow copies. Both doors load
this file from their jupyter_server_config.py and call `configure(c, door)`,
which puts those files in the user's cache folder, one folder per user, per
checkout of the course and per door:

    <user cache>/gpucourse/<checkout folder>-<hash of its path>/<door>/

(`platformdirs.user_cache_dir`: ~/.cache on Linux, honouring XDG_CACHE_HOME).
The rest of what the lab writes already lives in the user's Jupyter folders,
outside the course: workspaces and settings (JUPYTERLAB_WORKSPACES_DIR,
JUPYTERLAB_SETTINGS_DIR), the notebook trust database (the Jupyter data
folder) and the kernels' connection files (JUPYTER_RUNTIME_DIR).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from jupyter_core.utils import ensure_dir_exists
from jupyter_server.services.contents.filecheckpoints import AsyncFileCheckpoints
from platformdirs import user_cache_dir

COURSE = Path(__file__).resolve().parents[1]
DOORS = ("student", "instructor")


def state_dir(door: str, course: Path = COURSE) -> Path:
    """The folder in the user's cache for one door of one checkout."""
    if door not in DOORS:
        raise ValueError(f"door must be one of {', '.join(DOORS)}, got {door!r}")
    course = Path(course).resolve()
    tag = hashlib.sha256(str(course).encode()).hexdigest()[:8]
    return Path(user_cache_dir("gpucourse")) / f"{course.name}-{tag}" / door


class MirroredCheckpoints(AsyncFileCheckpoints):
    """File checkpoints under `root_dir`, in a tree that mirrors the served one.

    Jupyter's own FileCheckpoints put a notebook's checkpoint in a
    .ipynb_checkpoints folder beside it, or, given a root_dir elsewhere, in the
    same place under that root, but only if that folder already exists (else in
    the system's temporary folder). This class creates the folder, so that
    exercises/01/01.ipynb and solutions/01/01.ipynb keep separate checkpoints.
    """

    def checkpoint_path(self, checkpoint_id, path):
        parent = path.strip("/").rpartition("/")[0]
        with self.perm_to_403():
            ensure_dir_exists(self._get_os_path(parent))
        return super().checkpoint_path(checkpoint_id, path)


def configure(c, door: str) -> Path:
    """Point the server's checkpoints and shadow files at `state_dir(door)`."""
    state = state_dir(door)
    c.AsyncContentsManager.checkpoints_class = MirroredCheckpoints
    c.FileCheckpoints.root_dir = str(state / "checkpoints")
    c.LanguageServerManager.virtual_documents_dir = str(state / "virtual_documents")
    return state
