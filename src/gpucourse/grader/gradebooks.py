"""Merging grades from one nbgrader gradebook into another, and grades.csv files into one.

Parallel grading (:mod:`gpucourse.grader.workers`) leaves each submission's
grades in its worker's scratch gradebook; a sharded run
(``make grade SHARD=k/n``) leaves a share's grades in the share's own
folder. Both end here: each graded submission is copied into the
instructor's gradebook, replacing an earlier grading of the same submission
(never adding a second one), with every grade and comment nbgrader
recorded. Only submissions named are copied, so a half-graded submission
that a dead worker left behind never reaches the instructor.
"""

from __future__ import annotations

import csv
import warnings
from contextlib import contextmanager
from pathlib import Path

# The columns nbgrader records per row, copied as they are.
_GRADE_FIELDS = ("auto_score", "manual_score", "extra_credit", "needs_manual_grade")
_COMMENT_FIELDS = ("auto_comment", "manual_comment")
_STUDENT_FIELDS = ("first_name", "last_name", "email", "lms_user_id")


def copy_submission(source, target, chapter: str, student: str) -> None:
    """Copy ``student``'s submission of ``chapter`` from the nbgrader Gradebook
    ``source`` into ``target`` (both open; ``target`` must have the chapter recorded)."""
    from nbgrader.api import MissingEntry

    submitted = source.find_submission(chapter, student)
    known = submitted.student
    target.update_or_create_student(student, **{f: getattr(known, f) for f in _STUDENT_FIELDS})
    try:
        copy = target.find_submission(chapter, student)
        copy.timestamp = submitted.timestamp
    except MissingEntry:
        copy = target.add_submission(chapter, student, timestamp=submitted.timestamp)
    copy.extension = submitted.extension
    for notebook in submitted.notebooks:
        their = target.find_submission_notebook(notebook.name, chapter, student)
        their.flagged = notebook.flagged
        their.late_submission_penalty = notebook.late_submission_penalty
        for grade in notebook.grades:
            row = target.find_grade(grade.name, notebook.name, chapter, student)
            for field in _GRADE_FIELDS:
                setattr(row, field, getattr(grade, field))
        for comment in notebook.comments:
            row = target.find_comment(comment.name, notebook.name, chapter, student)
            for field in _COMMENT_FIELDS:
                setattr(row, field, getattr(comment, field))
    target.db.commit()


@contextmanager
def quiet_nbgrader():
    """Hide the warnings SQLAlchemy 2 gives about nbgrader's own add_submission (its
    rows are built through back-references that SQLAlchemy no longer follows;
    they are saved all the same, as in nbgrader's autograde)."""
    from sqlalchemy.exc import SAWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=SAWarning)
        yield


def has_chapter(gradebook, chapter: str) -> bool:
    """Whether the open Gradebook has ``chapter`` (and its notebook) recorded."""
    from nbgrader.api import MissingEntry

    try:
        gradebook.find_notebook(chapter, chapter)
    except MissingEntry:
        return False
    return True


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    """A grades.csv's header and rows."""
    with open(path, newline="") as stream:
        rows = list(csv.reader(stream))
    if not rows:
        raise ValueError(f"{path} is empty: expected a grades.csv with a header row")
    return rows[0], rows[1:]


def merge_csv(paths: list[Path], destination: Path) -> int:
    """Write the rows of the grades.csv files ``paths`` into one at ``destination``,
    sorted by student and chapter as one run writes them; a (student, chapter)
    graded in two of them is an error. Returns the number of rows."""
    header, merged = None, {}
    for path in paths:
        columns, rows = read_csv(path)
        if header is not None and columns != header:
            raise ValueError(f"{path} has the columns {columns}, the others {header}")
        header = columns
        for row in rows:
            key = (row[0], row[1])
            if key in merged:
                raise ValueError(f"{row[0]}'s {row[1]} is graded in two shares "
                                 f"({merged[key][1]} and {path}): merge each share once")
            merged[key] = (row, path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with open(destination, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(header)
        for key in sorted(merged):
            writer.writerow(merged[key][0])
    return len(merged)
