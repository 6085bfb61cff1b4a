"""Exercises and the self-check; kept for old imports and ``python -m gpucourse.grading``.

::

    python -m gpucourse.grading exercises [--root DIR] [--into DIR] [--only CHAPTER ...]
    python -m gpucourse.grading check NOTEBOOK [NOTEBOOK ...]

The work is in :mod:`gpucourse.grader.release` (``exercises``) and
:mod:`gpucourse.grader.self_check` (``check``), the arguments in
:mod:`gpucourse.grader.commands`; the chapters' table of exercises in
:mod:`gpucourse.chapters.exercises`.
"""

import sys

from gpucourse.chapters.exercises import exercise_listing, format_listing
from gpucourse.grader.commands import grading_main as main
from gpucourse.grader.release import (chapters, generate_exercises, nbgrader_command,
                                      release_in_course)
from gpucourse.grader.self_check import CELL_TIMEOUT_S, CellScore, format_scores, score_notebook

__all__ = ["CELL_TIMEOUT_S", "CellScore", "chapters", "exercise_listing", "format_listing",
           "format_scores", "generate_exercises", "main", "nbgrader_command",
           "release_in_course", "score_notebook"]

if __name__ == "__main__":
    sys.exit(main())
