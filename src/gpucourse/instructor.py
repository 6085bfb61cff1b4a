"""The instructor's ``grade`` command; kept for old imports and ``python -m gpucourse.instructor``.

::

    python -m gpucourse.instructor grade SUBMISSIONS [--root DIR] [--chapter NAME ...]
                                         [--csv PATH] [--timeout SECONDS]

Finding the submissions is in :mod:`gpucourse.grader.submissions`, grading
and reporting in :mod:`gpucourse.grader.instructor` (whose description is
the command's help), the arguments in :mod:`gpucourse.grader.commands`.
"""

import sys

from gpucourse.grader.commands import instructor_main as main
from gpucourse.grader.instructor import (CSV_COLUMNS, SQLITE, TIMEOUT_ERROR, CellProblem,
                                         GradingReport, InstructorGradebook, Result,
                                         format_report, grade)
from gpucourse.grader.submissions import (Skipped, Submission, chapter_cell_ids,
                                          find_submissions, opened_submissions,
                                          recognise_chapter, student_id)

__all__ = ["CSV_COLUMNS", "SQLITE", "TIMEOUT_ERROR", "CellProblem", "GradingReport", "InstructorGradebook", "Result",
           "Skipped", "Submission", "chapter_cell_ids", "find_submissions", "format_report",
           "grade", "main", "opened_submissions", "recognise_chapter", "student_id"]

if __name__ == "__main__":
    sys.exit(main())
