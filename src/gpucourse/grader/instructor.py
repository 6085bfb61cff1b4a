"""The instructor's side: grade a folder of submissions in one command.

::

    python -m gpucourse.instructor grade SUBMISSIONS [--root DIR] [--chapter NAME ...]
                                         [--csv PATH] [--timeout SECONDS]

``SUBMISSIONS`` is a folder or a ``.zip`` file. Three layouts are read, and may
be mixed in one folder:

* nbgrader's own: ``<student>/<chapter>/<chapter>.ipynb``, with any other files
  of that folder (``timestamp.txt``), for example the course's ``submitted/``;
* a flat folder of ``<student>.ipynb`` files;
* one folder per student holding the notebook under any name, as learning
  platforms export them (``<student>/<anything>.ipynb``).

The student is the name of the top-level folder, or of the top-level file
without ``.ipynb``, with every character other than letters, digits, ``.``,
``_``, ``-`` and ``@`` replaced by ``_``. A zip whose entries all sit in one
folder that is not a student's (its sub-folders are not chapters) is read from
inside that folder, as platforms wrap their exports.

The chapter of a notebook is read from the notebook, never from its name: every
cell the course's notebooks grade or lock carries an nbgrader ``grade_id``, and
the chapter is the one in ``solutions/`` whose source notebook shares the most
of them with the submission, and at least half of its own. A tie, or fewer, is
an unknown chapter. Where a folder names a chapter (nbgrader's layout) and the
notebook is of another one, or ``--chapter`` limits the run and the notebook is
of another chapter, the notebook is skipped.

What is not a submission is reported by name and skipped, and never stops the
others: a file that is not a notebook, a notebook of an unknown or another
chapter, a student's folder with no notebook, two notebooks of one chapter for
one student, a notebook nbgrader cannot grade.

Grading is nbgrader's own (``autograde``: locked and test cells restored from
the gradebook, hidden tests put back, each cell under the time limit of
``nbgrader_config.py``). It runs in a scratch course folder that holds only
these submissions, so earlier submissions in the course are neither graded
again nor touched, and ``exercises/`` is never rewritten. The instructor's
gradebook (``gradebook.db`` at the course root, or the ``db_url`` set in
``nbgrader_config.py``) receives the grades, and the chapter itself where it
has never been recorded there. Afterwards the course root holds, in nbgrader's
layout, each graded submission in ``submitted/``, the graded notebook in
``autograded/`` and the feedback page in
``feedback/<student>/<chapter>/<chapter>.html``; ``grades.csv`` holds one row
per submission graded in this run, and the command prints a table of points
per student and chapter and the cells that failed or timed out.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpucourse.grader.release import chapters, nbgrader_command
from gpucourse.grader.submissions import (Skipped, Submission, _grade_ids, find_submissions,
                                          opened_submissions)

# nbgrader writes this error into a cell that ran past its time limit
# (the default of its Execute.error_on_timeout).
TIMEOUT_ERROR = "CellTimeoutError"
SQLITE = "sqlite:///"
CSV_COLUMNS = ("student", "chapter", "points", "max_points", "failed_cells", "timed_out_cells",
               "feedback")


@dataclass(frozen=True)
class CellProblem:
    grade_id: str
    error: str  # the error's name, or "timed out" for a cell stopped at the time limit


@dataclass(frozen=True)
class Result:
    student: str
    chapter: str
    points: float
    max_points: float
    failed: tuple[CellProblem, ...]  # graded cells that earned less than their points
    timed_out: tuple[str, ...]  # grade_ids (or "cell N") of cells stopped at the time limit
    feedback: Path


@dataclass(frozen=True)
class GradingReport:
    results: list[Result]
    skipped: list[Skipped]
    notes: list[str]
    csv_path: Path | None  # None when nothing was graded (and no CSV written)
    gradebook: str


# ---------------------------------------------------------------------------
# Grading
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class InstructorGradebook:
    """Where the instructor's grades live, as nbgrader_config.py says."""

    url: str
    course_id: str

    @classmethod
    def of(cls, root: Path) -> "InstructorGradebook":
        """nbgrader_config.py's db_url, else gradebook.db at the course root."""
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
        settings = config.get("CourseDirectory", {})
        url = settings.get("db_url") or "sqlite:///gradebook.db"
        if url.startswith(SQLITE):  # a relative file is relative to the course, not to us
            url = SQLITE + str(Path(root).resolve() / url[len(SQLITE):])
        return cls(url, settings.get("course_id", ""))

    def exists(self) -> bool:
        return not self.url.startswith(SQLITE) or Path(self.url[len(SQLITE):]).is_file()

    def open(self):
        """nbgrader's Gradebook on it (the same course as nbgrader's commands use)."""
        from nbgrader.api import Gradebook as NbgraderGradebook

        return NbgraderGradebook(self.url, self.course_id)


def _run_nbgrader(args: list[str], course: Path):
    done = nbgrader_command([*args, "--log-level=WARN"], cwd=course)
    return done, f"{done.stdout}\n{done.stderr}"


def _stale_tests(chapter: str, root: Path, gradebook: InstructorGradebook) -> list[str] | None:
    """None if the gradebook has never recorded ``chapter``; else the test cells
    whose source in the gradebook differs from solutions/ (those grades follow)."""
    import nbformat
    from nbgrader.api import MissingEntry

    source = nbformat.read(root / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    # The autograded test cells. A written answer (a graded solution cell) is
    # recorded as the student sees it, its model answer cut, so it never
    # matches solutions/; it is graded by hand and has no test to go stale.
    tests = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in source.cells
             if cell.get("metadata", {}).get("nbgrader", {}).get("grade")
             and not cell.metadata["nbgrader"].get("solution")}
    if not gradebook.exists():
        return None
    with gradebook.open() as grades:
        try:
            grades.find_notebook(chapter, chapter)
        except MissingEntry:
            return None
        stale = []
        for grade_id, text in tests.items():
            try:
                recorded = grades.find_source_cell(grade_id, chapter, chapter).source
            except MissingEntry:
                recorded = None
            if recorded != text:
                stale.append(grade_id)
        return stale


def _record_chapter(chapter: str, course: Path, db_url: str) -> None:
    """Record a chapter (its cells, tests and points) in the gradebook, as nbgrader
    generate_assignment does; the student version it writes stays in the scratch course."""
    done, log = _run_nbgrader(["generate_assignment", chapter, "--force",
                               f"--CourseDirectory.db_url={db_url}"], course)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment {chapter} failed:\n{log[-4000:]}")


def _nbgrader_error(log: str) -> str:
    """The first error nbgrader logged, on one line."""
    records, current = [], None
    for line in log.splitlines():
        if line.startswith("["):
            current = [line.split("]", 1)[1].strip()] if "| ERROR]" in line else None
            if current is not None:
                records.append(current)
        elif current is not None and line.strip():
            current.append(line.strip())
    specific = [" ".join(r) for r in records if not r[0].startswith("There was an error")]
    return ((specific or [" ".join(r) for r in records] or ["no error logged"])[0])[:300]


def _autograde(chapter: str, group: list[Submission], course: Path,
               gradebook: InstructorGradebook, timeout_s: int | None
               ) -> tuple[list[Submission], list[Skipped]]:
    """nbgrader autograde on every submission of a chapter in the scratch course.

    One run grades them all. nbgrader stops at some errors, leaving the
    submissions after the failing one ungraded, so those are graded again one
    by one, and each that still fails is reported with nbgrader's error. What
    nbgrader recorded of a failed submission before it failed (the student, an
    empty submission) is taken out of the gradebook again, unless it was there
    before this run.
    """
    command = ["autograde", chapter, "--force", f"--CourseDirectory.db_url={gradebook.url}"]
    if timeout_s is not None:
        command.append(f"--Execute.timeout={timeout_s}")

    def graded(submission):
        return (course / "autograded" / submission.student / chapter
                / f"{chapter}.ipynb").is_file()

    with gradebook.open() as grades:
        students_before = {student.id for student in grades.students}
        submitted_before = {s.student.id for s in grades.find_assignment(chapter).submissions}

    _run_nbgrader(command, course)
    failures = []
    for submission in [s for s in group if not graded(s)]:
        _, log = _run_nbgrader([*command, f"--CourseDirectory.student_id={submission.student}"],
                               course)
        if not graded(submission):
            failures.append(Skipped(submission.name,
                                    f"nbgrader could not grade it: {_nbgrader_error(log)}"))
            with gradebook.open() as grades:
                if submission.student not in submitted_before:
                    grades.remove_submission(chapter, submission.student)
                if (submission.student not in students_before
                        and not grades.student_submissions(submission.student)):
                    grades.remove_student(submission.student)
    return [s for s in group if graded(s)], failures


def _cell_problems(autograded: Path, grades) -> tuple[tuple[CellProblem, ...], tuple[str, ...]]:
    """The graded cells that lost points, with their error, and the cells that timed out."""
    import nbformat

    notebook = nbformat.read(autograded, as_version=4)
    errors, timed_out = {}, []
    for index, cell in enumerate(notebook.cells):
        names = [o.get("ename", "") for o in cell.get("outputs", [])
                 if o.get("output_type") == "error"]
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", f"cell {index}")
        if TIMEOUT_ERROR in names:
            errors[grade_id] = "timed out"
            timed_out.append(grade_id)
        elif names:
            errors[grade_id] = names[0]
    order = {gid: i for i, gid in enumerate(_grade_ids(notebook))}
    failed = [CellProblem(g.name, "needs manual grading" if g.needs_manual_grade
                          else errors.get(g.name, "no error shown"))
              for g in sorted(grades, key=lambda g: order.get(g.name, len(order)))
              if g.needs_manual_grade or (g.score or 0) < g.max_score]
    return tuple(failed), tuple(timed_out)


def _replace_tree(source: Path, destination: Path) -> None:
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(source, destination)


def grade(submissions: Path, root: Path = Path("."), only: list[str] | None = None,
          csv_path: Path | None = None, timeout_s: int | None = None) -> GradingReport:
    """Grade a folder or zip of submissions; see the module's description.

    ``timeout_s`` overrides the per-cell time limit of nbgrader_config.py.
    """
    root = Path(root).resolve()
    if not (root / "nbgrader_config.py").is_file():
        raise ValueError(f"root must be the course folder holding nbgrader_config.py, got {root}")
    if timeout_s is not None and not (isinstance(timeout_s, int) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive whole number of seconds, got {timeout_s!r}")
    csv_path = Path(csv_path) if csv_path else root / "grades.csv"
    gradebook = InstructorGradebook.of(root)
    db_url = gradebook.url
    notes: list[str] = []
    results: list[Result] = []

    with opened_submissions(submissions, set(chapters(root))) as folder:
        found, skipped = find_submissions(folder, root, only)
        by_chapter: dict[str, list[Submission]] = {}
        for submission in found:
            by_chapter.setdefault(submission.chapter, []).append(submission)

        with tempfile.TemporaryDirectory(prefix="gpucourse-grading-") as scratch:
            course = Path(scratch)
            shutil.copy(root / "nbgrader_config.py", course)
            for chapter, group in sorted(by_chapter.items()):
                shutil.copytree(root / "solutions" / chapter, course / "solutions" / chapter,
                                ignore=shutil.ignore_patterns(".ipynb_checkpoints",
                                                              "__pycache__"))
                stale = _stale_tests(chapter, root, gradebook)
                if stale is None:
                    _record_chapter(chapter, course, db_url)
                elif stale:
                    notes.append(
                        f"{chapter}: the gradebook holds another version of "
                        f"{', '.join(stale)} than solutions/; grades follow the gradebook "
                        f"(to follow solutions/, run `nbgrader generate_assignment {chapter} "
                        "--force` first, see README)")
                for submission in group:
                    target = course / "submitted" / submission.student / chapter
                    target.mkdir(parents=True)
                    shutil.copy(submission.notebook, target / f"{chapter}.ipynb")
                    base = submission.notebook.parent
                    for companion in submission.companions:
                        destination = target / companion.relative_to(base)
                        destination.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(companion, destination)

                graded, failures = _autograde(chapter, group, course, gradebook, timeout_s)
                skipped += failures
                if not graded:
                    continue
                done, log = _run_nbgrader(["generate_feedback", chapter, "--force",
                                           f"--CourseDirectory.db_url={db_url}"], course)
                if done.returncode != 0:
                    notes.append(f"{chapter}: nbgrader generate_feedback reported an error: "
                                 + _nbgrader_error(log))
                results += _collect(chapter, graded, course, root, gradebook)

    results.sort(key=lambda r: (r.student, r.chapter))
    if results:  # a run that graded nothing leaves an earlier grades.csv as it was
        _write_csv(csv_path, results, root)
    return GradingReport(results, sorted(skipped, key=lambda s: s.name), notes,
                         csv_path if results else None, db_url)


def _collect(chapter: str, graded: list[Submission], course: Path, root: Path,
             gradebook: InstructorGradebook) -> list[Result]:
    """Read the grades from the gradebook and move the files into the course root."""
    results = []
    with gradebook.open() as grades:
        for submission in graded:
            student = submission.student
            notebook = grades.find_submission_notebook(chapter, chapter, student)
            autograded = course / "autograded" / student / chapter / f"{chapter}.ipynb"
            failed, timed_out = _cell_problems(autograded, notebook.grades)
            for kind in ("submitted", "autograded", "feedback"):
                destination = root / kind / student / chapter
                # Submissions read from the course's own submitted/ stay as they are.
                if kind == "submitted" and submission.notebook.parent.resolve() == destination:
                    continue
                if (course / kind / student / chapter).is_dir():
                    _replace_tree(course / kind / student / chapter, destination)
            results.append(Result(student, chapter, float(notebook.score),
                                  float(notebook.max_score), failed, timed_out,
                                  root / "feedback" / student / chapter / f"{chapter}.html"))
    return results


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------

def _write_csv(path: Path, results: list[Result], root: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            feedback = r.feedback.relative_to(root).as_posix() if r.feedback.is_file() else ""
            writer.writerow([r.student, r.chapter, f"{r.points:g}", f"{r.max_points:g}",
                             ";".join(c.grade_id for c in r.failed), ";".join(r.timed_out),
                             feedback])


def format_report(report: GradingReport) -> str:
    """The summary: points per student and chapter, the cells that failed or
    timed out, what was skipped and why, and where the files are."""
    lines = []
    students = sorted({r.student for r in report.results})
    chapter_names = sorted({r.chapter for r in report.results})
    points = {(r.student, r.chapter): f"{r.points:g} / {r.max_points:g}" for r in report.results}
    lines.append(f"Graded {len(report.results)} submission(s) into {report.gradebook}")
    if report.results:
        width = max(len(s) for s in ["student", *students])
        widths = [max(len(c), 9) for c in chapter_names]
        lines.append("")
        lines.append("  ".join([f"{'student':<{width}}",
                                *(f"{c:>{w}}" for c, w in zip(chapter_names, widths))]))
        for student in students:
            lines.append("  ".join([f"{student:<{width}}",
                                    *(f"{points.get((student, c), '-'):>{w}}"
                                      for c, w in zip(chapter_names, widths))]))
        problems = [r for r in report.results if r.failed or r.timed_out]
        if problems:
            lines += ["", "Cells that failed or timed out:"]
            for r in problems:
                failed = {c.grade_id for c in r.failed}
                parts = [f"{c.grade_id} ({c.error})" for c in r.failed]
                parts += [f"{name} (timed out)" for name in r.timed_out if name not in failed]
                lines.append(f"  {r.student} {r.chapter}: " + ", ".join(parts))
    if report.skipped:
        lines += ["", "Skipped (not graded):"]
        lines += [f"  {s.name}: {s.reason}" for s in report.skipped]
    if report.notes:
        lines += ["", "Notes:"] + [f"  {note}" for note in report.notes]
    if report.results:
        lines += ["", f"Grades: {report.csv_path}",
                  "Feedback: feedback/<student>/<chapter>/<chapter>.html in the course folder"]
    else:
        lines += ["", "Nothing was graded; grades.csv is left as it was."]
    return "\n".join(lines)
