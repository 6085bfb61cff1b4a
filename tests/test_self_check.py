"""The self-check's report (`make check`): each failing cell's message in full
under its score, the first lines of other errors, tracebacks with VERBOSE=1,
the same as JupyterLab shows under the cell."""

from __future__ import annotations

import nbformat

from gpucourse.grader.commands import grading_main
from gpucourse.grader.self_check import OTHER_ERROR_LINES, CellScore, format_scores, score_notebook

DIAGNOSIS = ("the kernel must synchronise its block twice per key tile: block (1, 0, 0) read "
             "k[0, 0, 4] before any thread wrote it\nfix: put cuda.syncthreads() after the "
             "loads of each tile\nand before the next tile's loads")


def graded(source: str, grade_id: str, points: float = 2) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": points,
                                 "locked": True, "schema_version": 3, "solution": False,
                                 "task": False}
    return cell


def test_a_failed_checks_whole_message_is_printed_under_its_score():
    scores = [CellScore("test_ok", 2, 2, None),
              CellScore("test_barriers", 0, 3, f"AssertionError: {DIAGNOSIS}", "Traceback ..."),
              CellScore("test_other", 0, 1,
                        "ValueError: " + "\n".join(f"line {i}" for i in range(9)))]
    report = format_scores("nb.ipynb", scores)
    lines = report.splitlines()
    assert lines[1].split() == ["test_ok", "2", "/", "2", "passed"]
    assert lines[2].split()[-1] == "AssertionError"
    for line in DIAGNOSIS.splitlines():  # every line of the diagnosis, none cut short
        assert f"      {line}" in lines
    assert "      line 0" in lines and f"      line {OTHER_ERROR_LINES - 1}" in lines
    assert "      line 8" not in lines and any("4 more lines" in line for line in lines)
    assert "Traceback" not in report
    assert "Traceback ..." in format_scores("nb.ipynb", scores, verbose=True)
    # An exercise not yet written says so, once, under its score.
    untouched = format_scores("nb.ipynb", [CellScore("test_x", 0, 2, "NotImplementedError")])
    assert untouched.splitlines()[2].strip().startswith("not written yet")
    assert lines[-1].split()[:4] == ["total", "2", "/", "6"]


# A kernel whose barrier only the first five threads reach, launched by the notebook
# itself, not by a grader: under make check the sanitizer catches it all the same.
BARRIER_IN_A_GUARD = """
from gpucourse.device import cuda  # first: it chooses the simulator before Numba loads
from gpucourse.grader import tracing  # as every kernel chapter's setup does, through its grader

import numpy as np
from numba import float32


@cuda.jit
def reverse_first(x, out):
    staged = cuda.shared.array(8, float32)
    t = cuda.threadIdx.x
    if t < x.size:
        staged[t] = x[t]
        cuda.syncthreads()
        out[t] = staged[x.size - 1 - t]


reverse_first[1, 8](np.arange(5, dtype=np.float32), np.zeros(5, np.float32))
"""


def test_make_check_shows_what_the_cell_said(tmp_path, capsys):
    notebook = nbformat.v4.new_notebook(cells=[
        graded(f"assert False, {DIAGNOSIS!r}", "test_barriers"),
        graded("assert 1 + 1 == 2", "test_ok"),
        graded(BARRIER_IN_A_GUARD, "test_sanitized")])
    path = tmp_path / "exercise.ipynb"
    nbformat.write(notebook, path)
    scores = {s.grade_id: s for s in score_notebook(path)}
    assert scores["test_ok"].error is None and scores["test_barriers"].points == 0
    sanitized = scores["test_sanitized"]
    assert sanitized.points == 0 and sanitized.error.startswith("SanitizerError: reverse_first")
    assert "synccheck: block (0, 0, 0)" in sanitized.error
    assert "threads (5, 0, 0) to (7, 0, 0) had finished the kernel" in sanitized.error
    assert "\x1b[" not in scores["test_barriers"].traceback  # no terminal colours
    assert grading_main(["check", "--verbose", str(path)]) == 0
    printed = capsys.readouterr().out
    assert all(line in printed for line in DIAGNOSIS.splitlines())
    report = format_scores(path, list(scores.values()))  # a SanitizerError is shown in full
    said = sanitized.error.split(": ", 1)[1].splitlines()
    assert all(f"      {line}" in report for line in said)
    assert "assert False" in printed  # the traceback's line of code, with --verbose
