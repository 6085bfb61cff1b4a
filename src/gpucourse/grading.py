"""Exercises and grading, on nbgrader's own machinery.

Two jobs live here:

* ``exercises``: regenerate the student notebooks in ``exercises/`` from the
  nbgrader source notebooks in ``solutions/`` (``nbgrader generate_assignment``
  on a throw-away gradebook, so the instructor's gradebook is never touched).
* ``check``: the students' self-check. It runs a notebook the way the grader
  does (each cell with a time limit, errors recorded rather than fatal) and
  prints the points each graded test cell earned. Only the visible tests run;
  the instructor's grading adds hidden tests.

Both are command lines::

    python -m gpucourse.grading exercises [--root DIR] [--into DIR] [--only CHAPTER ...]
    python -m gpucourse.grading check NOTEBOOK [NOTEBOOK ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CELL_TIMEOUT_S = 60


def chapters(root: Path) -> list[str]:
    """The assignment names: one folder per chapter under ``solutions/``."""
    solutions = Path(root) / "solutions"
    if not solutions.is_dir():
        raise ValueError(f"root must be the course folder holding solutions/, got {root}")
    return sorted(p.name for p in solutions.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


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
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise ValueError(f"only must name chapters in solutions/ ({', '.join(names)}), "
                             f"got {', '.join(unknown)}")
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


@dataclass(frozen=True)
class CellScore:
    grade_id: str
    points: float
    max_points: float
    error: str | None


def score_notebook(path: Path, timeout_s: int = CELL_TIMEOUT_S) -> list[CellScore]:
    """Run a notebook as the grader would and score its graded test cells."""
    import nbformat
    from nbclient import NotebookClient
    from nbgrader.utils import determine_grade, is_grade

    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be an existing .ipynb file, got {path}")
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout_s, allow_errors=True,
                            interrupt_on_timeout=True, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    client.execute()
    scores = []
    for cell in notebook.cells:
        if not is_grade(cell) or cell.cell_type != "code":
            continue
        points, max_points = determine_grade(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        error = f"{errors[0]['ename']}: {errors[0]['evalue']}".strip(": ") if errors else None
        scores.append(CellScore(cell.metadata["nbgrader"]["grade_id"], points or 0.0,
                                max_points, error))
    return scores


def format_scores(path: Path, scores: list[CellScore]) -> str:
    """The self-check's report: one line per graded cell, then the total."""
    width = max([len(s.grade_id) for s in scores] + [5])
    lines = [str(path)]
    for s in scores:
        verdict = "passed" if s.error is None else s.error.splitlines()[0][:70]
        lines.append(f"  {s.grade_id:<{width}}  {s.points:g} / {s.max_points:g}  {verdict}")
    earned = sum(s.points for s in scores)
    possible = sum(s.max_points for s in scores)
    lines.append(f"  {'total':<{width}}  {earned:g} / {possible:g}  "
                 "(visible tests only; hidden tests are added when your work is graded)")
    return "\n".join(lines)


_SECTION = re.compile(r"^## (.+?)\s*\((\d+(?:\.\d+)?) points?(?:, graded by hand)?\)\s*$", re.M)


def exercise_listing(notebook) -> list[dict]:
    """What a student writes in an nbgrader notebook, section by section, with the points.

    Each exercise is a heading ``## Title (P points)``; what follows up to the
    next such heading belongs to it: the functions (and classes) its solution cells define,
    the points of its graded test cells (scored by the autograder) and of its
    graded markdown cells (written answers, scored by a person). Returns one
    dict per exercise: ``title``, ``functions`` (names), ``points``,
    ``autograded`` and ``written`` (the written answers' count). A heading
    that states other points than its cells give is an error, so the book's
    tables cannot drift from the notebooks.
    """
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be an existing .ipynb file, got {notebook}")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found: list[dict] = []
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        meta = cell.get("metadata", {}).get("nbgrader", {})
        heading = _SECTION.search(source) if cell["cell_type"] == "markdown" else None
        if heading and not meta.get("grade"):
            found.append({"title": heading.group(1), "stated": float(heading.group(2)),
                          "functions": [], "points": 0.0, "autograded": 0.0, "written": 0})
        if not found or not meta:
            continue
        if meta.get("solution") and cell["cell_type"] == "code":
            found[-1]["functions"] += [name for name in re.findall(r"^(?:def|class)\s+(\w+)",
                                                                   source, re.M)
                                       if not name.startswith("_")]  # given helpers
        if meta.get("grade"):
            points = float(meta.get("points", 0))
            found[-1]["points"] += points
            if cell["cell_type"] == "code":
                found[-1]["autograded"] += points
            else:
                found[-1]["written"] += 1
    for exercise in found:
        if exercise.pop("stated") != exercise["points"]:
            raise ValueError(f"the heading of {exercise['title']!r} states other points than "
                             f"its graded cells give ({exercise['points']:g})")
    return found


def format_listing(listing) -> str:
    """A Markdown table of exercise_listing's rows, with the totals."""
    rows = ["| Exercise | You write | Points |", "|---|---|---|"]
    for exercise in listing:
        if exercise["written"]:
            what = f"{exercise['written']} written answers, graded by hand"
        else:
            what = ", ".join(f"`{name}`" for name in exercise["functions"])
        rows.append(f"| {exercise['title']} | {what} | {exercise['points']:g} |")
    autograded = sum(e["autograded"] for e in listing)
    by_hand = sum(e["points"] - e["autograded"] for e in listing)
    rows.append(f"| **Total** | {autograded:g} points graded automatically, {by_hand:g} by hand "
                f"| {autograded + by_hand:g} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse.grading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    release = commands.add_parser("exercises", help="regenerate exercises/ from solutions/")
    release.add_argument("--root", type=Path, default=Path.cwd(), help="course folder")
    release.add_argument("--into", type=Path, default=None,
                         help="write here instead of ROOT/exercises")
    release.add_argument("--only", nargs="+", default=None, metavar="CHAPTER",
                         help="regenerate only these chapters (folder names in solutions/)")
    check = commands.add_parser("check", help="run notebooks and print points per exercise")
    check.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)

    if args.command == "exercises":
        target = generate_exercises(args.root, args.into, args.only)
        print(f"student notebooks written to {target}")
        return 0
    for path in args.notebooks:
        print(format_scores(path, score_notebook(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
