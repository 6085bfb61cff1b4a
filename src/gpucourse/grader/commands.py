"""The grader's two command lines: their arguments, and which function does the work.

``python -m gpucourse.grading`` (``exercises``, ``check``) and
``python -m gpucourse.instructor`` (``grade``, ``merge``) read their arguments here and
call :mod:`gpucourse.grader.release`, :mod:`gpucourse.grader.self_check` and
:mod:`gpucourse.grader.instructor`; the old module names run them. Keeping
the argument parsing apart leaves each of those modules a plain library a
test (or a notebook) can call.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpucourse.grader import instructor
from gpucourse.grader.instructor import format_report, grade, merge_shards, parse_shard
from gpucourse.grader.release import generate_exercises
from gpucourse.grader.self_check import format_scores, score_notebook

# The help of `python -m gpucourse.grading`.
EXERCISES_AND_CHECK = """Exercises and grading, on nbgrader's own machinery.

Two jobs live here:

* ``exercises``: regenerate the student notebooks in ``exercises/`` from the
  nbgrader source notebooks in ``solutions/`` (``nbgrader generate_assignment``
  on a throw-away gradebook, so the instructor's gradebook is never touched).
* ``check``: the students' self-check. It runs a notebook the way the grader
  does (each cell with a time limit, errors recorded rather than fatal) and
  prints the points each graded test cell earned, with what each failing
  cell said under it in full (``--verbose``: its traceback too). Only the
  visible tests run; the instructor's grading adds hidden tests.

Both are command lines::

    python -m gpucourse.grading exercises [--root DIR] [--into DIR] [--only CHAPTER ...]
    python -m gpucourse.grading check [--verbose] NOTEBOOK [NOTEBOOK ...]
"""


def grading_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse.grading",
                                     description=EXERCISES_AND_CHECK,
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
    check.add_argument("--verbose", action="store_true",
                       help="print each failing cell's traceback too")
    args = parser.parse_args(argv)

    if args.command == "exercises":
        target = generate_exercises(args.root, args.into, args.only)
        print(f"student notebooks written to {target}")
        return 0
    for path in args.notebooks:
        print(format_scores(path, score_notebook(path), verbose=args.verbose))
    return 0


def instructor_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse.instructor",
                                     description=instructor.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    grading = commands.add_parser("grade", help="grade a folder or zip of submissions")
    grading.add_argument("submissions", type=Path, help="a folder or a .zip file")
    grading.add_argument("--root", type=Path, default=Path.cwd(), help="course folder")
    grading.add_argument("--chapter", nargs="+", default=None, metavar="CHAPTER",
                         help="grade only notebooks of these chapters (folder names in solutions/)")
    grading.add_argument("--csv", type=Path, default=None, help="default: ROOT/grades.csv")
    grading.add_argument("--timeout", type=int, default=None, metavar="SECONDS",
                         help="time limit per cell (default: nbgrader_config.py's)")
    grading.add_argument("--jobs", type=int, default=None, metavar="N",
                         help="worker processes (default: the machine's cores)")
    grading.add_argument("--shard", default=None, metavar="K/N",
                         help="grade the K-th of N shares into ROOT/shards/K-of-N")
    merging = commands.add_parser("merge", help="merge the shares of sharded runs")
    merging.add_argument("shares", nargs="+", type=Path, help="folders ROOT/shards/K-of-N")
    merging.add_argument("--root", type=Path, default=Path.cwd(), help="course folder")
    merging.add_argument("--csv", type=Path, default=None, help="default: ROOT/grades.csv")
    args = parser.parse_args(argv)

    try:
        if args.command == "merge":
            merged = merge_shards(args.root, args.shares, args.csv)
            print(f"Merged {merged} submission(s) from {len(args.shares)} share(s) into "
                  f"{args.csv or args.root / 'grades.csv'} and the gradebook")
            return 0
        report = grade(args.submissions, args.root, args.chapter, args.csv, args.timeout,
                       args.jobs, parse_shard(args.shard))
    except ValueError as error:
        parser.error(str(error))
    print(format_report(report))
    return 0 if report.results else 1
