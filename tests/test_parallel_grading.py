"""Grading a class in parallel and in shares, with nbgrader's real autograde.

One run with two workers grades a correct, a blank, a looping and a malformed
submission beside one that kills the worker grading it. The merged gradebook
and grades.csv must hold exactly the right grades of the others, nothing of
the killed one (which is reported), and the summary each submission's time;
the progress bar counts every submission. Then two shares of part of the same
class, graded apart as a cluster's jobs would and merged, must give the very
rows of grades.csv that the one run gave.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import nbformat
import pytest
from test_grading import exercises_of, filled_in, release_notebook, source_notebook, written_answers

from gpucourse.grader.commands import instructor_main
from gpucourse.grader.instructor import (InstructorGradebook, format_report, grade, merge_shards,
                                         parse_shard)

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "01_hpc_foundations"  # the cheapest chapter to execute
TEST_TIMEOUT_S = 10  # per cell (the course's own limit is longer)
LOOPING = {"amdahl_solution": "def amdahl_speedup(parallel_fraction, workers):\n"
                              "    import time\n    while True:\n        time.sleep(0.05)\n"}
# The notebook's kernel is a child of the worker that grades it: this ends the worker.
KILLER = {"amdahl_solution": "import os\nimport signal\n\nos.kill(os.getppid(), signal.SIGKILL)\n"}


def _course(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(ROOT / "solutions" / CHAPTER, folder / "solutions" / CHAPTER)
    return folder


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One grading run with two workers, its course, report and progress output."""
    course = _course(tmp_path_factory.mktemp("parallel") / "course")
    submissions = tmp_path_factory.mktemp("class")
    nbformat.write(filled_in(CHAPTER), submissions / "correct.ipynb")
    nbformat.write(release_notebook(CHAPTER), submissions / "blank.ipynb")
    nbformat.write(filled_in(CHAPTER, replace=LOOPING), submissions / "looping.ipynb")
    nbformat.write(filled_in(CHAPTER, replace=KILLER), submissions / "killer.ipynb")
    whole = nbformat.writes(filled_in(CHAPTER))
    (submissions / "malformed.ipynb").write_text(whole[: len(whole) // 2])
    progress = io.StringIO()
    report = grade(submissions, course, timeout_s=TEST_TIMEOUT_S, jobs=2, progress=progress)
    return {"course": course, "report": report, "progress": progress.getvalue(),
            "rows": {row["student"]: row for row in _rows(course / "grades.csv")}}


def expected_points() -> dict[str, tuple[float, float]]:
    """{student: (points, max_points)} that the solutions' nbgrader metadata give."""
    groups = exercises_of(source_notebook(CHAPTER))
    points = {test: p for group in groups.values() for test, p in group["tests"].items()}
    total = sum(points.values())
    maximum = total + sum(written_answers(source_notebook(CHAPTER)).values())
    amdahl = sum(points[test] for test in groups["amdahl_solution"]["tests"])
    return {"correct": (total, maximum), "blank": (0.0, maximum),
            "looping": (total - amdahl, maximum)}


@pytest.mark.slow
def test_the_csv_and_gradebook_hold_exactly_the_right_grades(graded):
    expected = expected_points()
    rows = graded["rows"]
    assert {s: (float(r["points"]), float(r["max_points"])) for s, r in rows.items()} == expected
    assert rows["looping"]["timed_out_cells"] == "test_amdahl"
    from nbgrader.api import Gradebook

    gradebook = InstructorGradebook.of(graded["course"])
    with Gradebook(gradebook.url, gradebook.course_id) as grades:
        students = {student.id for student in grades.students}
        submissions = grades.find_assignment(CHAPTER).submissions
        scores = {s.student.id: (s.score, s.max_score) for s in submissions}
    # No grade lost or doubled: one submission each, and nothing of the killed one.
    assert students == set(expected) and len(submissions) == len(expected)
    assert scores == expected
    for student in expected:
        for kind in ("submitted", "autograded"):
            assert (graded["course"] / kind / student / CHAPTER / f"{CHAPTER}.ipynb").is_file()
        assert (graded["course"] / rows[student]["feedback"]).is_file()
    assert not (graded["course"] / "autograded" / "killer").exists()


@pytest.mark.slow
def test_a_killed_worker_costs_only_its_submission(graded):
    skipped = {s.name: s.reason for s in graded["report"].skipped}
    assert set(skipped) == {"killer.ipynb", "malformed.ipynb"}
    assert "the grading worker stopped while grading it (exit code -9)" in skipped["killer.ipynb"]
    assert skipped["malformed.ipynb"].startswith("not a readable notebook")


@pytest.mark.slow
def test_progress_and_each_submissions_time_are_shown(graded):
    lines = graded["progress"].strip().splitlines()
    assert [line.split("] ")[1].split(" done")[0] for line in lines] == \
        ["1/4", "2/4", "3/4", "4/4"]
    assert all(" left" in line and "elapsed" in line for line in lines)
    summary = format_report(graded["report"])
    times = summary.split("Time per submission:\n")[1].split("\n\n")[0].splitlines()
    assert [line.split(":")[0].strip() for line in times] == \
        [f"{student} {CHAPTER}" for student in ("blank", "correct", "looping")]
    seconds = {r.student: r.seconds for r in graded["report"].results}
    # The looping one waited out its cell's time limit. (Not compared with the
    # blank one's time: on a loaded machine, starting a kernel and running the
    # other cells can take as long as the limit.)
    assert seconds["looping"] >= TEST_TIMEOUT_S and seconds["blank"] > 0


@pytest.mark.slow
def test_shares_merge_to_what_one_run_gives(graded, tmp_path):
    from nbgrader.api import Gradebook

    # A course whose gradebook has the chapter recorded and no submissions yet.
    course = _course(tmp_path / "course")
    shutil.copy(graded["course"] / "gradebook.db", course / "gradebook.db")
    gradebook = InstructorGradebook.of(course)
    with Gradebook(gradebook.url, gradebook.course_id) as grades:
        for student in ("blank", "correct", "looping"):
            grades.remove_submission(CHAPTER, student)
            grades.remove_student(student)
    submissions = tmp_path / "class"
    submissions.mkdir()
    nbformat.write(filled_in(CHAPTER), submissions / "correct.ipynb")
    nbformat.write(release_notebook(CHAPTER), submissions / "blank.ipynb")
    for k in (1, 2):
        share = grade(submissions, course, timeout_s=TEST_TIMEOUT_S, jobs=1, shard=(k, 2),
                      progress=io.StringIO())
        assert len(share.results) == 1
    assert not (course / "grades.csv").exists()  # a share leaves the course alone
    assert instructor_main(["merge", str(course / "shards" / "1-of-2"),
                            str(course / "shards" / "2-of-2"), "--root", str(course)]) == 0
    one_run = (graded["course"] / "grades.csv").read_text().splitlines()
    merged = (course / "grades.csv").read_text().splitlines()
    assert merged == [line for line in one_run if not line.startswith("looping,")]
    with Gradebook(gradebook.url, gradebook.course_id) as grades:
        scores = {s.student.id: (s.score, s.max_score)
                  for s in grades.find_assignment(CHAPTER).submissions}
    expected = expected_points()
    assert scores == {student: expected[student] for student in ("blank", "correct")}
    # Merging a share twice would double its grades: refused.
    with pytest.raises(ValueError, match="graded in two shares"):
        merge_shards(course, [course / "shards" / "1-of-2", course / "shards" / "1-of-2"])


def test_bad_shards_and_jobs_are_named(tmp_path):
    for text in ("3/2", "0/2", "1", "a/b"):
        with pytest.raises(ValueError, match="shard must be k/n"):
            parse_shard(text)
    assert parse_shard("2/4") == (2, 4) and parse_shard(None) is None
    course = _course(tmp_path / "course")
    with pytest.raises(ValueError, match="jobs must be a whole number >= 1"):
        grade(tmp_path, course, jobs=0)
    with pytest.raises(ValueError, match="shares must be folders"):
        merge_shards(course, [tmp_path])
