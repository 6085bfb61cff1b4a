"""The students' self-check: run a notebook the way the grader does and print its points.

It runs a notebook each cell with a time limit, errors recorded rather than
fatal, and scores each graded test cell as nbgrader does. Only the visible
tests run; the instructor's grading adds hidden tests. It is separate from
the instructor's grading (:mod:`gpucourse.grader.instructor`) because it
needs no gradebook, no course folder and no submissions: one notebook in, a
table of points out. The command line is ``python -m gpucourse.grading check
NOTEBOOK [NOTEBOOK ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CELL_TIMEOUT_S = 60


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
