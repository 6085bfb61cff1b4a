"""The students' self-check: run a notebook the way the grader does and print its points.

It runs a notebook each cell with a time limit, errors recorded rather than
fatal, and scores each graded test cell as nbgrader does. Every simulated
kernel launch of the notebook runs under the sanitizer
(:mod:`gpucourse.grader.sanitizer`, switched on by ``GPUCOURSE_SANITIZE=1`` in
the notebook's kernel), so that a kernel which works on the simulator only by
luck (an uninitialised shared read, a barrier some threads skip, a race)
fails here as it would on a GPU. Only the visible
tests run; the instructor's grading adds hidden tests. It is separate from
the instructor's grading (:mod:`gpucourse.grader.instructor`) because it
needs no gradebook, no course folder and no submissions: one notebook in, a
table of points out. The command line is ``python -m gpucourse.grading check
[--verbose] NOTEBOOK [NOTEBOOK ...]``.

Under each failing cell's score the report prints what the cell said: the
whole message of an AssertionError (the checks' diagnoses span several
lines: deadlocks, coalescing, barriers, read budgets), the first lines of
any other error, and with ``verbose`` the traceback too. So what a student
reads at the terminal is what JupyterLab shows under the cell.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

CELL_TIMEOUT_S = 60
OTHER_ERROR_LINES = 5  # lines shown of an error that is not an AssertionError
# Errors whose whole message is a diagnosis, shown in full.
FULL_MESSAGES = ("AssertionError", "SanitizerError")
NOT_WRITTEN = "      not written yet: replace `raise NotImplementedError()` with your code"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of IPython's tracebacks


@dataclass(frozen=True)
class CellScore:
    grade_id: str
    points: float
    max_points: float
    error: str | None
    traceback: str | None = None  # the cell's traceback, without colours


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
    from gpucourse.grader.sanitizer import ENV_VAR

    client.execute(env={**os.environ, ENV_VAR: "1"})
    scores = []
    for cell in notebook.cells:
        if not is_grade(cell) or cell.cell_type != "code":
            continue
        points, max_points = determine_grade(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        error = f"{errors[0]['ename']}: {errors[0]['evalue']}".strip(": ") if errors else None
        trace = _ANSI.sub("", "\n".join(errors[0].get("traceback", []))) if errors else None
        scores.append(CellScore(cell.metadata["nbgrader"]["grade_id"], points or 0.0,
                                max_points, error, trace))
    return scores


def _said(score: CellScore, verbose: bool) -> list[str]:
    """What a failing cell said, as the report's indented lines: an
    AssertionError's (or SanitizerError's) whole message, the first
    OTHER_ERROR_LINES lines of another error; with verbose, the traceback
    (which ends in the message)."""
    if verbose and score.traceback:
        lines = score.traceback.splitlines()
    else:  # the error's name is in the score's line already
        name = score.error.split(":")[0]
        lines = score.error[len(name):].lstrip(": ").splitlines()
        if not lines:
            return [NOT_WRITTEN] if name == "NotImplementedError" else []
        if name not in FULL_MESSAGES and len(lines) > OTHER_ERROR_LINES:
            lines = lines[:OTHER_ERROR_LINES] + [f"... ({len(lines) - OTHER_ERROR_LINES} more "
                                                 f"lines: make check VERBOSE=1 shows all)"]
    return [f"      {line}" for line in lines]


def format_scores(path: Path, scores: list[CellScore], verbose: bool = False) -> str:
    """The self-check's report: a line per graded cell, what each failing cell
    said under it (in full; see _said), then the total."""
    width = max([len(s.grade_id) for s in scores] + [5])
    lines = [str(path)]
    for s in scores:
        verdict = "passed" if s.error is None else s.error.splitlines()[0].split(":")[0]
        lines.append(f"  {s.grade_id:<{width}}  {s.points:g} / {s.max_points:g}  {verdict}")
        if s.error is not None:
            lines += _said(s, verbose)
    earned = sum(s.points for s in scores)
    possible = sum(s.max_points for s in scores)
    lines.append(f"  {'total':<{width}}  {earned:g} / {possible:g}  "
                 "(visible tests only; hidden tests are added when your work is graded)")
    return "\n".join(lines)
