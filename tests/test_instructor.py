"""The two doors into the course, and grading in one command.

- `make lab`, the student's door, starts JupyterLab with nbgrader's instructor
  tools (formgrader, create-assignment, course and assignment lists, the
  Nbgrader menu) and Jupyter's news pop-up turned off, and nbgrader's Validate
  on. In a real headless browser a notebook opens there without those tools,
  while the same checks find them behind `make instructor`, the instructor's
  door, whose formgrader reads the course.
- Neither door writes into the course: the checkpoints JupyterLab makes when it
  opens a notebook (and on every save) go to the user's cache folder, set by
  the doors' jupyter_server_config.py; the tests make one at once through the
  server's API rather than wait for JupyterLab's timers.
- `gpucourse.instructor grade` (what `make grade` runs) grades a folder of a
  correct, a blank, a looping and a malformed submission beside things that
  are not submissions; the CSV, the summary, the feedback pages and the
  gradebook say what nbgrader's own grades and the solutions' points say.
- The submissions are read from nbgrader's layout, flat folders and platform
  zips, and each notebook's chapter is recognised from its nbgrader cells.

Both servers are started by `make` itself (the same command lines and config
as a user's), from this environment, on a free port with a token, in a scratch
copy of the course (so an earlier `make lab` in the checkout cannot change the
outcome); the user's own Jupyter and cache folders are replaced by empty
temporary ones. The other tests read the checkout and write only to temporary
folders.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import NamedTuple

import nbformat
import pytest
from test_book import browser  # noqa: F401 (the headless Chromium fixture, skipped without it)
from test_grading import (exercises_of, filled_in, nbgrader_meta, release_notebook,
                          source_notebook, written_answers)

from gpucourse.grader.commands import instructor_main as main
from gpucourse.grader.instructor import InstructorGradebook, _stale_tests
from gpucourse.grader.release import chapters, nbgrader_command
from gpucourse.grader.submissions import (chapter_cell_ids, find_submissions, opened_submissions,
                                          recognise_chapter)

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "01_hpc_foundations"  # the cheapest chapter to execute
NOTEBOOK = f"{CHAPTER}/{CHAPTER}.ipynb"
# nbgrader's plugins for instructors, and JupyterLab's news pop-up.
INSTRUCTOR_PLUGINS = {f"@jupyter/nbgrader:{name}" for name in
                      ("assignment-list", "course-list", "create-assignment", "formgrader", "menu")}
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"
# A submission whose Amdahl function never returns: its test cell runs into the time limit.
LOOPING = {"amdahl_solution": "def amdahl_speedup(parallel_fraction, workers):\n"
                              "    while True:\n        pass\n"}
# A submission that ends its own kernel: nbgrader cannot grade it at all.
CRASHING = {"amdahl_solution": "import os\nos._exit(1)\n"}
TEST_TIMEOUT_S = 10  # per cell, in these tests (the course's limit is longer)


# ---------------------------------------------------------------------------
# The two doors
# ---------------------------------------------------------------------------

def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def _post_json(url: str, data: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(data).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


# What a door needs of the course to run: its settings, the Makefile that starts
# it, nbgrader's config and the notebooks it serves.
COURSE_PARTS = ("Makefile", "nbgrader_config.py", "jupyter", "exercises", "solutions")


def scratch_course(folder: Path) -> Path:
    """A copy of the parts of the course that the doors serve and read, so that
    what a lab writes in these tests cannot touch the checkout, and what an
    earlier `make lab` left in the checkout cannot change these tests."""
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    folder.mkdir(parents=True)
    for part in COURSE_PARTS:
        source, target = ROOT / part, folder / part
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy2(source, target)
    return folder


class Lab(NamedTuple):
    base: str  # the server's URL
    token: str
    log: Path
    course: Path  # the scratch copy it serves
    cache: Path  # the user's cache folder (XDG_CACHE_HOME) it runs with


@contextlib.contextmanager
def jupyterlab(door: str, tmp: Path, options: str = ""):
    """`make DOOR` running headless on a scratch copy of the course, from a shell
    where the environment is not activated, with the user's Jupyter and cache
    folders replaced by empty temporary ones; yields a `Lab`. When it stops,
    every file of the copy must be as it was: the tree is compared, not `git
    status`, which does not show .ipynb_checkpoints (the .gitignore hides it)."""
    if not shutil.which("make"):
        pytest.skip("the doors are make targets and this machine has no make")
    token, port = secrets.token_hex(16), _free_port()
    options += (f" --no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} "
                f"--ServerApp.port_retries=0 --IdentityProvider.token={token}")
    env = {key: value for key, value in os.environ.items() if key != "JUPYTER_CONFIG_PATH"}
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != here)
    for name, folder in (("JUPYTER_CONFIG_DIR", "home-config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("JUPYTER_DATA_DIR", "data"), ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("XDG_CACHE_HOME", "cache")):
        env[name] = str(tmp / folder)
        (tmp / folder).mkdir(parents=True, exist_ok=True)
    # This user never saves: a notebook left open would otherwise be autosaved
    # (with the kernel's metadata) while other tests run.
    autosave = tmp / "user-settings" / "@jupyterlab" / "docmanager-extension"
    autosave.mkdir(parents=True)
    (autosave / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    course = scratch_course(tmp / "course")
    before = _tree(course)
    log_path = tmp / f"{door}.log"
    # -o: the environment exists (this test runs in it); never reinstall it from here.
    command = ["make", "-s", "-o", ".venv/.installed", door,
               f"BIN={Path(sys.executable).parent}", f"LAB_OPTIONS={options}"]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=course, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, f"make {door} stopped:\n{log_path.read_text()[-4000:]}"
            with contextlib.suppress(OSError):
                if _get(f"{base}/api/status?token={token}")[0] == 200:
                    break
            assert time.monotonic() < deadline, f"make {door} did not answer in 120 s"
            time.sleep(0.5)
        yield Lab(base, token, log_path, course, tmp / "cache")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    after = _tree(course)
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    assert not changed, f"make {door} wrote into the course: {changed}"


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    with jupyterlab("lab", tmp_path_factory.mktemp("student-lab")) as server:
        yield server


@pytest.fixture(scope="module")
def instructor_lab(tmp_path_factory):
    # The formgrader opens (and would create) a gradebook: a temporary one, not the course's.
    tmp = tmp_path_factory.mktemp("instructor-lab")
    options = f"--CourseDirectory.db_url=sqlite:///{tmp / 'gradebook.db'}"
    with jupyterlab("instructor", tmp, options) as server:
        yield server


def checkpoints_in_cache(lab: Lab, door: str, path: str) -> list[Path]:
    """The checkpoint files of the served `path` in the lab's cache folder."""
    folder, _, name = path.rpartition("/")
    stem = name.rsplit(".", 1)[0]
    return sorted(lab.cache.glob(f"gpucourse/*/{door}/checkpoints/{folder}/.ipynb_checkpoints/"
                                 f"{stem}-checkpoint.ipynb"))


def page_config(base: str, token: str) -> dict:
    """The settings JupyterLab's server hands its page (plugins on and off, news)."""
    status, html = _get(f"{base}/lab?token={token}")
    assert status == 200, f"/lab answered {status}"
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                      html, re.S)
    assert found, "the lab page carries no page config"
    return json.loads(found.group(1))


@pytest.mark.slow
def test_the_students_server_turns_the_instructor_tools_and_the_news_off(student_lab):
    base, token = student_lab.base, student_lab.token
    config = page_config(base, token)
    disabled = set(config["disabledExtensions"])
    assert INSTRUCTOR_PLUGINS <= disabled, f"still on: {INSTRUCTOR_PLUGINS - disabled}"
    assert NEWS_PLUGIN in disabled and config["news"]["disabled"]
    assert "@jupyter/nbgrader:validate-assignment" not in disabled
    assert Path(config["serverRoot"]).resolve() == (student_lab.course / "exercises").resolve()
    # nbgrader's instructor pages are not served at all, its Validate service is:
    # an untouched exercise validates with its visible tests failing.
    assert _get(f"{base}/formgrader?token={token}")[0] == 404
    assert _get(f"{base}/assignments?token={token}")[0] == 404
    validated = _post_json(f"{base}/assignments/validate?token={token}", {"path": NOTEBOOK})
    assert validated["success"] and validated["value"]["failed"], validated


@pytest.mark.slow
def test_the_instructors_server_has_the_instructor_tools(instructor_lab):
    base, token = instructor_lab.base, instructor_lab.token
    config = page_config(base, token)
    disabled = set(config["disabledExtensions"])
    assert not INSTRUCTOR_PLUGINS & disabled, f"turned off: {INSTRUCTOR_PLUGINS & disabled}"
    assert NEWS_PLUGIN in disabled and config["news"]["disabled"]
    assert Path(config["serverRoot"]).resolve() == instructor_lab.course.resolve()
    assert _get(f"{base}/formgrader?token={token}")[0] in (200, 302)
    # The formgrader reads the course: every chapter in solutions/ is an assignment.
    status, text = _get(f"{base}/formgrader/api/assignments?token={token}")
    assert status == 200, "the formgrader cannot read the course"
    assert sorted(a["name"] for a in json.loads(text)) == chapters(ROOT) == chapters(instructor_lab.course)


# What the page shows: its menu bar, its side-bar tabs, the notebook's toolbar and text.
SHOWN = """
const text = node => (node.textContent + ' ' + (node.title || '')).trim();
return {
  menus: Array.from(document.querySelectorAll('.lm-MenuBar-itemLabel')).map(text),
  tabs: Array.from(document.querySelectorAll('.lm-TabBar-tab')).map(text),
  createAssignment: document.getElementById('nbgrader-create_assignemnt') !== null,
  validate: document.querySelectorAll('.jp-NotebookPanel .validate-button').length,
  cells: document.querySelectorAll('.jp-NotebookPanel .jp-Cell').length,
  notebook: (document.querySelector('.jp-NotebookPanel .jp-Notebook') || {innerText: ''}).innerText,
  toasts: Array.from(document.querySelectorAll('.Toastify__toast')).map(t => t.innerText),
};
"""


def open_notebook(browser, url: str, heading: str, cells: int = 0) -> dict:  # noqa: F811
    """Open a notebook in JupyterLab and wait until its first heading shows,
    and until it draws at least `cells` cells (for up to a minute: on a
    loaded machine it draws them one after another; the caller asserts the
    count)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 120, poll_frequency=0.5).until(
        lambda d: heading in d.execute_script(SHOWN)["notebook"])
    try:
        WebDriverWait(browser, 60, poll_frequency=0.5).until(
            lambda d: d.execute_script(SHOWN)["cells"] >= cells)
    except TimeoutException:
        pass  # the caller's assertion says how many it drew
    time.sleep(2)  # pop-ups and late plugins have their moment
    return browser.execute_script(SHOWN)


def first_heading() -> str:
    return release_notebook(CHAPTER).cells[0].source.splitlines()[0].lstrip("# ")


@pytest.mark.slow
def test_a_student_opens_a_notebook_without_instructor_tools(student_lab, browser):  # noqa: F811
    base, token = student_lab.base, student_lab.token
    exercise = (student_lab.course / "exercises" / NOTEBOOK).read_bytes()
    # JupyterLab draws only the cells near the window (its windowing mode), so
    # a long notebook shows a screenful of them, not all.
    screenful = min(10, len(release_notebook(CHAPTER).cells))
    shown = open_notebook(browser, f"{base}/lab/tree/{NOTEBOOK}?token={token}", first_heading(),
                          cells=screenful)
    assert (student_lab.course / "exercises" / NOTEBOOK).read_bytes() == exercise, \
        "opening changed the file"
    # JupyterLab checkpoints a notebook it opens that has none: in the cache, not the course
    # (the fixture checks, when the lab stops, that no file of the course changed).
    deadline = time.monotonic() + 30
    while not checkpoints_in_cache(student_lab, "student", NOTEBOOK):
        assert time.monotonic() < deadline, "JupyterLab made no checkpoint in the cache"
        time.sleep(0.5)
    assert not (student_lab.course / "exercises" / CHAPTER / ".ipynb_checkpoints").exists()
    assert shown["cells"] >= screenful, shown["cells"]
    assert not any("Nbgrader" in menu for menu in shown["menus"]), shown["menus"]
    assert not shown["createAssignment"]
    assert not any("Create Assignment" in tab for tab in shown["tabs"]), shown["tabs"]
    assert shown["validate"] == 1, "the notebook has no Validate button"
    assert not any("news" in toast.lower() for toast in shown["toasts"]), shown["toasts"]


@pytest.mark.slow
def test_an_instructor_opens_it_with_the_tools(instructor_lab, browser):  # noqa: F811
    base, token = instructor_lab.base, instructor_lab.token
    shown = open_notebook(browser, f"{base}/lab/tree/exercises/{NOTEBOOK}?token={token}",
                          first_heading())
    assert any("Nbgrader" in menu for menu in shown["menus"]), shown["menus"]
    assert shown["createAssignment"]
    assert any("Create Assignment" in tab for tab in shown["tabs"]), shown["tabs"]


def _checkpoint(lab: Lab, path: str) -> dict:
    """Ask the server for a checkpoint of `path`, as JupyterLab does when it opens
    a notebook that has none and on every save: at once, not on a timer."""
    return _post_json(f"{lab.base}/api/contents/{path}/checkpoints?token={lab.token}", {})


@pytest.mark.slow
def test_the_students_checkpoints_go_to_the_cache_not_the_course(student_lab):
    made = _checkpoint(student_lab, NOTEBOOK)
    assert made["id"] == "checkpoint"
    saved = checkpoints_in_cache(student_lab, "student", NOTEBOOK)
    assert len(saved) == 1, f"no checkpoint in the cache, or several: {saved}"
    assert saved[0].read_bytes() == (student_lab.course / "exercises" / NOTEBOOK).read_bytes()
    assert not list(student_lab.course.rglob(".ipynb_checkpoints"))
    # The server finds it again (it could restore from it).
    status, text = _get(f"{student_lab.base}/api/contents/{NOTEBOOK}/checkpoints?token={student_lab.token}")
    assert status == 200 and [c["id"] for c in json.loads(text)] == ["checkpoint"]


@pytest.mark.slow
def test_the_instructors_checkpoints_keep_exercise_and_solution_apart(instructor_lab):
    # exercises/C/C.ipynb and solutions/C/C.ipynb share a name: their checkpoints must not.
    for folder in ("exercises", "solutions"):
        _checkpoint(instructor_lab, f"{folder}/{NOTEBOOK}")
        saved = checkpoints_in_cache(instructor_lab, "instructor", f"{folder}/{NOTEBOOK}")
        assert len(saved) == 1, f"no checkpoint in the cache, or several: {saved}"
        assert saved[0].read_bytes() == (instructor_lab.course / folder / NOTEBOOK).read_bytes()
    assert not list(instructor_lab.course.rglob(".ipynb_checkpoints"))


def test_the_doors_settings_move_checkpoints_and_without_them_the_course_gets_them(
        tmp_path, monkeypatch):
    """The doors' own config files, loaded as Jupyter loads them, send a
    checkpoint to the user's cache; the same server settings without the
    checkpoint lines write it beside the notebook, into the course. (Cheap: a
    contents manager, no server.)"""
    import asyncio

    from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
    from traitlets.config.loader import PyFileConfigLoader

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    course = tmp_path / "course"
    shutil.copytree(ROOT / "jupyter", course / "jupyter", ignore=shutil.ignore_patterns("__pycache__"))
    (course / "exercises" / CHAPTER).mkdir(parents=True)
    shutil.copy2(ROOT / "exercises" / NOTEBOOK, course / "exercises" / NOTEBOOK)

    def checkpoint_files(config) -> set[str]:
        manager = AsyncLargeFileManager(root_dir=str(course / "exercises"), config=config)
        asyncio.run(manager.create_checkpoint(NOTEBOOK))
        return {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*-checkpoint.ipynb")}

    for door in ("student", "instructor"):
        config = PyFileConfigLoader("jupyter_server_config.py", str(course / "jupyter" / door)).load_config()
        made = checkpoint_files(config)
        [only] = made
        assert only.startswith("cache/gpucourse/"), only
        assert only.endswith(f"/{door}/checkpoints/{CHAPTER}/.ipynb_checkpoints/{CHAPTER}-checkpoint.ipynb")
        shutil.rmtree(tmp_path / "cache")
    # Without the checkpoint settings, Jupyter's default puts it in the course.
    del config.AsyncContentsManager["checkpoints_class"], config.FileCheckpoints["root_dir"]
    assert checkpoint_files(config) == {
        f"course/exercises/{CHAPTER}/.ipynb_checkpoints/{CHAPTER}-checkpoint.ipynb"}


# ---------------------------------------------------------------------------
# Reading submissions
# ---------------------------------------------------------------------------

def test_every_chapter_is_recognised_from_its_cells():
    cell_ids = chapter_cell_ids(ROOT)
    for chapter in chapters(ROOT):
        assert recognise_chapter(release_notebook(chapter), cell_ids) == chapter
        assert recognise_chapter(filled_in(chapter), cell_ids) == chapter
    assert recognise_chapter(nbformat.v4.new_notebook(), cell_ids) is None
    # The cells every chapter has in common name none of them.
    common = release_notebook(CHAPTER)
    common.cells = [c for c in common.cells if nbgrader_meta(c).get("grade_id") in
                    {"intro", "setup"}]
    assert recognise_chapter(common, cell_ids) is None


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _bytes(notebook) -> bytes:
    return nbformat.writes(notebook).encode()


def test_a_platforms_zip_is_read_from_its_wrapping_folder(tmp_path):
    solved, other = _bytes(filled_in(CHAPTER)), _bytes(release_notebook("03_experts_and_zero"))
    export = _zip(tmp_path / "export.zip", {
        "Week 1/Ann Lee_101_assignsubmission_file_/01_hpc_foundations.ipynb": solved,
        "Week 1/Bo_102_assignsubmission_file_/my work.ipynb": solved,
        "Week 1/Bo_102_assignsubmission_file_/report.pdf": b"%PDF-1.4",
        "Week 1/Cy_103_assignsubmission_file_/week3.ipynb": other,
        "Week 1/.DS_Store": b"",
        "__MACOSX/Week 1/._report.pdf": b"",
    })
    with opened_submissions(export, set(chapters(ROOT))) as folder:
        found, skipped = find_submissions(folder, ROOT)
        assert {(s.student, s.chapter) for s in found} == {
            ("Ann_Lee_101_assignsubmission_file_", CHAPTER),
            ("Bo_102_assignsubmission_file_", CHAPTER),
            ("Cy_103_assignsubmission_file_", "03_experts_and_zero")}
        assert [(s.name, s.reason) for s in skipped] == [
            ("Bo_102_assignsubmission_file_/report.pdf", "not a notebook")]
        found, skipped = find_submissions(folder, ROOT, only=[CHAPTER])
        assert len(found) == 2 and "a notebook of 03_experts_and_zero" in skipped[-1].reason


def test_nbgraders_layout_keeps_its_files_and_checks_the_chapter(tmp_path):
    blank = _bytes(release_notebook(CHAPTER))
    export = _zip(tmp_path / "one-student.zip", {
        f"alice/{CHAPTER}/{CHAPTER}.ipynb": blank,
        f"alice/{CHAPTER}/timestamp.txt": b"2026-11-20 10:00:00",
        f"alice/{CHAPTER}/.ipynb_checkpoints/{CHAPTER}-checkpoint.ipynb": blank,
        "alice/03_experts_and_zero/03_experts_and_zero.ipynb": blank,
    })
    # One student's folder in nbgrader's layout is not a wrapper to look inside.
    with opened_submissions(export, set(chapters(ROOT))) as folder:
        found, skipped = find_submissions(folder, ROOT)
        assert [(s.student, s.chapter) for s in found] == [("alice", CHAPTER)]
        assert [p.name for p in found[0].companions] == ["timestamp.txt"]
        assert [s.name for s in skipped] == ["alice/03_experts_and_zero/03_experts_and_zero.ipynb"]
        assert skipped[0].reason == (f"a notebook of {CHAPTER} in the folder of "
                                     "03_experts_and_zero")


def test_two_notebooks_of_one_chapter_for_one_student_are_both_skipped(tmp_path):
    (tmp_path / "dan").mkdir()
    nbformat.write(filled_in(CHAPTER), tmp_path / "dan" / "first.ipynb")
    nbformat.write(release_notebook(CHAPTER), tmp_path / "dan" / "second.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "eve.ipynb")
    found, skipped = find_submissions(tmp_path, ROOT)
    assert found == []
    assert [s.name for s in skipped] == ["dan/first.ipynb", "dan/second.ipynb", "eve.ipynb"]
    assert all("one of 2 notebooks of 01_hpc_foundations for dan" in s.reason
               for s in skipped[:2])
    assert "no known chapter" in skipped[2].reason


def test_metadata_nbgrader_would_refuse_is_reported(tmp_path):
    notebook = filled_in(CHAPTER)
    for cell in notebook.cells:
        if "nbgrader" in cell.metadata:
            cell.metadata["nbgrader"]["schema_version"] = 99  # from a future nbgrader
    nbformat.write(notebook, tmp_path / "future.ipynb")
    found, skipped = find_submissions(tmp_path, ROOT)
    assert found == [] and [s.name for s in skipped] == ["future.ipynb"]
    assert skipped[0].reason.startswith("malformed nbgrader metadata in intro")


def test_bad_arguments_are_named(tmp_path, capsys):
    with pytest.raises(ValueError, match="only must name chapters"):
        find_submissions(tmp_path, ROOT, only=["week_1"])
    (tmp_path / "grades.txt").write_text("not a zip")
    with pytest.raises(ValueError, match="submissions must be a folder or a .zip file"):
        with opened_submissions(tmp_path / "grades.txt", set(chapters(ROOT))):
            pass
    # On the command line, the same errors are a usage message, not a traceback.
    with pytest.raises(SystemExit):
        main(["grade", str(tmp_path / "missing"), "--root", str(tmp_path)])
    assert "root must be the course folder holding nbgrader_config.py" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Grading a folder of submissions
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course with an earlier student in its gradebook grades one folder, once."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "exercises" / CHAPTER, course / "exercises" / CHAPTER)
    done = nbgrader_command(["db", "student", "add", "zoe", "--first-name=Zoe",
                             "--last-name=Earlier", "--log-level=WARN"], cwd=course)
    assert done.returncode == 0, done.stderr
    before = {"exercises": _tree(course / "exercises"), "solutions": _tree(course / "solutions")}

    submissions = tmp_path_factory.mktemp("submissions")
    correct = submissions / "correct" / CHAPTER  # nbgrader's layout
    correct.mkdir(parents=True)
    nbformat.write(filled_in(CHAPTER), correct / f"{CHAPTER}.ipynb")
    (correct / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC")
    nbformat.write(release_notebook(CHAPTER), submissions / "blank.ipynb")  # flat
    nbformat.write(filled_in(CHAPTER, replace=LOOPING), submissions / "looping.ipynb")
    # First in nbgrader's order, so that what follows it must still be graded.
    nbformat.write(filled_in(CHAPTER, replace=CRASHING), submissions / "aaron.ipynb")
    broken = nbformat.writes(filled_in(CHAPTER))
    (submissions / "malformed.ipynb").write_text(broken[: len(broken) // 2])
    (submissions / "notes.txt").write_text("not a notebook\n")
    (submissions / "dora").mkdir()  # a student folder with no notebook
    nbformat.write(release_notebook("02_tensor_and_pipeline_parallelism"),
                   submissions / "other.ipynb")  # a notebook of another chapter

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["grade", str(submissions), "--root", str(course), "--chapter", CHAPTER,
                       "--timeout", str(TEST_TIMEOUT_S)])
    with open(course / "grades.csv", newline="") as stream:
        rows = {row["student"]: row for row in csv.DictReader(stream)}
    return {"course": course, "summary": out.getvalue(), "status": status, "rows": rows,
            "before": before}


def points_of(chapter: str) -> dict[str, float]:
    """Each graded test cell's points, from the source notebook's nbgrader metadata."""
    return {gid: points for group in exercises_of(source_notebook(chapter)).values()
            for gid, points in group["tests"].items()}


def _cells(field: str) -> set[str]:
    return set(field.split(";")) if field else set()


@pytest.mark.slow
def test_grades_csv_has_one_row_per_graded_submission(graded):
    points = points_of(CHAPTER)
    total = sum(points.values())
    # Written answers count in nbgrader's maximum and wait for a person: until then
    # they are listed among the cells without their points.
    written = written_answers(source_notebook(CHAPTER))
    maximum = total + sum(written.values())
    amdahl_tests = set(exercises_of(source_notebook(CHAPTER))["amdahl_solution"]["tests"])
    rows = graded["rows"]
    assert graded["status"] == 0
    assert set(rows) == {"correct", "blank", "looping"}
    assert all(row["chapter"] == CHAPTER and float(row["max_points"]) == maximum
               for row in rows.values())
    assert float(rows["correct"]["points"]) == total
    assert _cells(rows["correct"]["failed_cells"]) == set(written)
    assert rows["correct"]["timed_out_cells"] == ""
    assert float(rows["blank"]["points"]) == 0
    assert _cells(rows["blank"]["failed_cells"]) == set(points) | set(written)
    assert float(rows["looping"]["points"]) == total - sum(points[t] for t in amdahl_tests)
    assert _cells(rows["looping"]["failed_cells"]) == amdahl_tests | set(written)
    assert _cells(rows["looping"]["timed_out_cells"]) == amdahl_tests
    for student, row in rows.items():
        feedback = graded["course"] / row["feedback"]
        assert feedback == (graded["course"] / "feedback" / student / CHAPTER / f"{CHAPTER}.html")
        assert feedback.is_file() and "<html" in feedback.read_text().lower()


@pytest.mark.slow
def test_the_summary_shows_points_failures_and_what_was_skipped(graded):
    summary = graded["summary"]
    total = sum(points_of(CHAPTER).values())
    maximum = total + sum(written_answers(source_notebook(CHAPTER)).values())
    header = f"student  {CHAPTER}"
    assert header in summary
    rows = summary.split(header)[1].split("\n\n")[0].strip().splitlines()
    table = {line.split()[0]: line for line in rows}
    assert set(table) == {"correct", "blank", "looping"}
    assert re.search(rf"^correct\s+{total:g} / {maximum:g}$", table["correct"])
    assert re.search(rf"^blank\s+0 / {maximum:g}$", table["blank"])
    assert "looping 01_hpc_foundations: test_amdahl (timed out)" in summary
    assert "blank 01_hpc_foundations: test_amdahl (NotImplementedError)" in summary
    skipped = summary.split("Skipped (not graded):")[1].split("\n\n")[0]
    for name, reason in [("malformed.ipynb", "not a readable notebook"),
                         ("aaron.ipynb", "nbgrader could not grade it: Kernel died"),
                         ("notes.txt", "not a notebook"),
                         ("dora/", "a student's folder with no notebook"),
                         ("other.ipynb", "a notebook of 02_tensor_and_pipeline_parallelism")]:
        assert re.search(rf"^  {re.escape(name)}: {re.escape(reason)}", skipped, re.M), name


@pytest.mark.slow
def test_the_gradebook_only_gains_grades(graded):
    from nbgrader.api import Gradebook

    course = graded["course"]
    gradebook = InstructorGradebook.of(course)
    with Gradebook(gradebook.url, gradebook.course_id) as grades:
        students = {s.id: (s.first_name, s.last_name) for s in grades.students}
        assert [a.name for a in grades.assignments] == [CHAPTER]
        scores = {s.student.id: s.score for s in grades.find_assignment(CHAPTER).submissions}
    # The earlier student is as they were; the one nbgrader could not grade left no trace.
    assert students.pop("zoe") == ("Zoe", "Earlier")
    assert set(students) == set(scores) == {"correct", "blank", "looping"}
    assert scores == {s: float(graded["rows"][s]["points"]) for s in scores}
    # The course's own folders are as they were; what nbgrader writes lies in its layout.
    assert _tree(course / "exercises") == graded["before"]["exercises"]
    assert _tree(course / "solutions") == graded["before"]["solutions"]
    for student in ("correct", "blank", "looping"):
        for kind in ("submitted", "autograded"):
            assert (course / kind / student / CHAPTER / f"{CHAPTER}.ipynb").is_file()
    assert (course / "submitted" / "correct" / CHAPTER / "timestamp.txt").is_file()


@pytest.mark.slow
def test_a_gradebook_older_than_the_solutions_is_pointed_out(graded, tmp_path):
    changed = tmp_path / "course"
    shutil.copytree(graded["course"] / "solutions", changed / "solutions")
    path = changed / "solutions" / CHAPTER / f"{CHAPTER}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if nbgrader_meta(cell).get("grade_id") == "test_roofline":
            cell.source += "\nassert True"
    nbformat.write(notebook, path)
    gradebook = InstructorGradebook.of(graded["course"])
    assert _stale_tests(CHAPTER, graded["course"], gradebook) == []
    assert _stale_tests(CHAPTER, changed, gradebook) == ["test_roofline"]
