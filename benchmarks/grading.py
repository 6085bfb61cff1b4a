"""How long does grading take: time per submission by chapter, and the speed-up of JOBS workers.

A CPU benchmark (not a test) of the instructor's ``grade`` command
(gpucourse.grader.instructor.grade), on the machine at hand. Each chapter's
submissions are copies of its source notebook in solutions/ (its model
answers; nbgrader puts its own test cells back when it grades), graded in a
scratch copy of the course whose gradebook already records the chapter (a
first, untimed run records it, as a course's first grading does):

* per chapter, ``--per-chapter`` submissions graded with one worker: the wall
  time per submission;
* for ``--speedup-chapter``, ``--students`` submissions graded with each of
  ``--jobs`` workers: the wall time and the speed-up over one worker.

From these it projects the time to grade a class of ``--class-size`` students
on every chapter measured, with the most workers measured: the sum over the
chapters of the wall time per submission, times the class, over that speed-up.
It writes benchmarks/results/grading-cpu-<date>.json in the shape of
CONVENTIONS.md, with a "machine" field for the CPU instead of "gpu".

    python benchmarks/grading.py [--chapters NAME ...] [--per-chapter 2]
                                 [--speedup-chapter 01_hpc_foundations] [--students 8]
                                 [--jobs 1 2] [--class-size 200]
"""

from __future__ import annotations

import io
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from _common import benchmark_parser, record_start, write_json
from network_scale import cpu_name

from gpucourse.grader.instructor import grade
from gpucourse.grader.release import chapters
from gpucourse.grader.workers import default_jobs

ROOT = Path(__file__).resolve().parents[1]


def recorded_course(folder: Path, chapter: str) -> Path:
    """A scratch course whose gradebook records ``chapter`` (one untimed grading)."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / chapter, folder / "solutions" / chapter)
    warm_up = class_of(folder.parent / f"warm-up-{chapter}", chapter, 1)
    grade(warm_up, folder, jobs=1, progress=io.StringIO())
    for kind in ("submitted", "autograded", "feedback"):
        shutil.rmtree(folder / kind, ignore_errors=True)
    return folder


def class_of(folder: Path, chapter: str, students: int) -> Path:
    """A folder of ``students`` submissions of ``chapter``: its model answers."""
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(students):
        shutil.copy(ROOT / "solutions" / chapter / f"{chapter}.ipynb",
                    folder / f"student{number:03d}.ipynb")
    return folder


def timed_grading(course: Path, submissions: Path, jobs: int, scratch: Path) -> dict:
    """Grade ``submissions`` in a fresh copy of ``course`` with ``jobs`` workers."""
    copy = scratch / f"course-{jobs}-{time.monotonic_ns()}"
    shutil.copytree(course, copy)
    started = time.perf_counter()
    report = grade(submissions, copy, jobs=jobs, progress=io.StringIO())
    wall = time.perf_counter() - started
    assert not report.skipped, report.skipped
    seconds = sorted(r.seconds for r in report.results)
    return {"wall_s": round(wall, 2), "submissions": len(report.results),
            "median_submission_s": round(seconds[len(seconds) // 2], 2)}


def main(argv=None) -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--chapters", nargs="+", default=None,
                        help="chapters to time (default: all of solutions/)")
    parser.add_argument("--per-chapter", type=int, default=2)
    parser.add_argument("--speedup-chapter", default="01_hpc_foundations")
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--jobs", type=int, nargs="+", default=None,
                        help="worker counts to compare (default: 1 up to the cores)")
    parser.add_argument("--class-size", type=int, default=200)
    args = parser.parse_args(argv)
    chapter_names = args.chapters or chapters(ROOT)
    jobs_list = args.jobs or list(range(1, default_jobs() + 1))
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpucourse-grading-benchmark-") as scratch:
        scratch = Path(scratch)
        for chapter in chapter_names:
            course = recorded_course(scratch / f"course-{chapter}", chapter)
            submissions = class_of(scratch / f"class-{chapter}", chapter, args.per_chapter)
            row = {"chapter": chapter, "jobs": 1, **timed_grading(course, submissions, 1,
                                                                  scratch)}
            row["per_submission_s"] = round(row["wall_s"] / row["submissions"], 2)
            rows.append(row)
            print(row, flush=True)
        chapter = args.speedup_chapter
        course = recorded_course(scratch / f"speedup-{chapter}", chapter)
        submissions = class_of(scratch / f"speedup-class-{chapter}", chapter, args.students)
        speedups = []
        for jobs in jobs_list:
            row = {"chapter": chapter, "jobs": jobs,
                   **timed_grading(course, submissions, jobs, scratch)}
            speedups.append(row)
            print(row, flush=True)
    single = next(r["wall_s"] for r in speedups if r["jobs"] == 1) if 1 in jobs_list else None
    for row in speedups:
        row["speedup"] = round(single / row["wall_s"], 2) if single else None
    best = max(speedups, key=lambda r: r["jobs"])
    # The wall time per submission, the run's fixed start (a few seconds) included:
    # an upper bound, since a class spreads that start over many submissions.
    per_student_s = sum(r["per_submission_s"] for r in rows)
    projection = {"class_size": args.class_size, "chapters": [r["chapter"] for r in rows],
                  "jobs": best["jobs"], "speedup": best["speedup"],
                  "one_worker_hours": round(per_student_s * args.class_size / 3600, 2),
                  "hours": round(per_student_s * args.class_size / 3600
                                 / (best["speedup"] or 1), 2)}
    record = record_start("grading", "", {"python": platform.python_version()},
                          "wall clock (time.perf_counter) of gpucourse.grader.instructor.grade "
                          "on copies of the model answers, the chapter recorded beforehand; "
                          "one run each", machine=cpu_name(), cores=os.cpu_count(),
                          usable_cores=default_jobs(), results=rows + speedups,
                          projection=projection)
    del record["gpu"]
    path = write_json(Path(args.out) / f"grading-cpu-{record['date']}.json", record)
    print(projection)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
