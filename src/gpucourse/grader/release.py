"""The student notebooks: nbgrader's command line, and ``exercises/`` generated from ``solutions/``.

The course's notebooks are written once, with their solutions, in
``solutions/``; nbgrader cuts the solutions out to make the students'
versions in ``exercises/`` (``nbgrader generate_assignment`` on a throw-away
gradebook, so the instructor's gradebook is never touched). This module
holds that step and the two helpers every other nbgrader run of the course
uses: the list of chapters and ``nbgrader_command``. It is separate from the
self-check and from the instructor's grading because both of those build on
it, and it on neither.

The command line is ``python -m gpucourse.grading exercises [--root DIR]
[--into DIR] [--only CHAPTER ...]`` (see :mod:`gpucourse.grader.commands`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

def chapters(root: Path) -> list[str]:
    """The assignment names: one folder per chapter under ``solutions/``."""
    solutions = Path(root) / "solutions"
    if not solutions.is_dir():
        raise ValueError(f"root must be the course folder holding solutions/, got {root}")
    return sorted(p.name for p in solutions.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def refuse_unknown_chapters(only, names) -> None:
    """Raise ValueError unless every chapter in ``only`` is one of ``names``."""
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise ValueError(f"only must name chapters in solutions/ ({', '.join(names)}), "
                         f"got {', '.join(unknown)}")


def nbgrader_command(args: list[str], cwd: Path, timeout_s: float | None = None):
    """Run ``nbgrader ARGS`` from this environment in ``cwd``.

    nbgrader calls the ``alembic`` program of its own environment by name, so
    that environment's ``bin`` folder goes first on PATH even when it is not
    activated (as under ``make``).
    """
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def _nbgrader(args: list[str], cwd: Path) -> None:
    """Run one nbgrader command and fail with its output if it fails."""
    done = nbgrader_command(args, cwd)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def release_in_course(root: Path, course: Path, chapter: str) -> Path:
    """Make ``course`` (a scratch folder) an nbgrader course of the chapters in
    ``root/solutions`` and generate ``chapter``'s student version in it, as
    ``nbgrader generate_assignment`` does, with the gradebook in
    ``course/gradebook.db``. Returns the student notebook's path,
    ``course/exercises/<chapter>/<chapter>.ipynb``."""
    root, course = Path(root).resolve(), Path(course)
    if not (course / "nbgrader_config.py").exists():
        shutil.copy(root / "nbgrader_config.py", course)
        shutil.copytree(root / "solutions", course / "solutions",
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    _nbgrader(["generate_assignment", chapter, "--force", f"--CourseDirectory.db_url="
               f"sqlite:///{course / 'gradebook.db'}", "--log-level=WARN"], cwd=course)
    return course / "exercises" / chapter / f"{chapter}.ipynb"


def generate_exercises(root: Path, into: Path | None = None,
                       only: list[str] | None = None) -> Path:
    """Write the student version of every chapter's notebook (or of ``only`` these).

    With ``into=None`` the result replaces ``root/exercises``; otherwise it is
    written to ``into`` (a folder that then holds one sub-folder per chapter),
    which is how the tests check that ``exercises/`` is up to date.
    """
    root = Path(root).resolve()
    names = chapters(root)
    if only:
        refuse_unknown_chapters(only, names)
        names = [name for name in names if name in only]
    target = (root / "exercises") if into is None else Path(into).resolve()
    with tempfile.TemporaryDirectory(prefix="gpucourse-release-") as scratch:
        course = Path(scratch)
        for name in names:
            release_in_course(root, course, name)
        for name in names:
            destination = target / name
            if destination.exists():
                shutil.rmtree(destination)
            shutil.copytree(course / "exercises" / name, destination)
    return target
