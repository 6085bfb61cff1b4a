"""The instructor's side: grade a folder of submissions in one command.

::

    python -m gpucourse.instructor grade SUBMISSIONS [--root DIR] [--chapter NAME ...]
                                         [--csv PATH] [--timeout SECONDS]
                                         [--jobs N] [--shard K/N]
    python -m gpucourse.instructor merge SHARE [SHARE ...] [--root DIR] [--csv PATH]

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
``nbgrader_config.py``). It runs in ``--jobs`` worker processes (default: the
machine's cores), each a scratch course with its own copy of the gradebook
(:mod:`gpucourse.grader.workers`), so earlier submissions in the course are
neither graded again nor touched, and ``exercises/`` is never rewritten; a
progress bar shows done/total and the time left. The instructor's gradebook
(``gradebook.db`` at the course root, or the ``db_url`` set in
``nbgrader_config.py``) then receives the grades of every submission graded
(:mod:`gpucourse.grader.gradebooks`), and the chapter itself where it has never
been recorded there; a worker that dies costs only the submission it was
grading, which is reported. Afterwards the course root holds, in nbgrader's
layout, each graded submission in ``submitted/``, the graded notebook in
``autograded/`` and the feedback page in
``feedback/<student>/<chapter>/<chapter>.html``; ``grades.csv`` holds one row
per submission graded in this run, and the command prints a table of points
per student and chapter, the cells that failed or timed out, and the time each
submission took.

Past one machine, ``--shard K/N`` grades only every N-th submission from the
K-th (in the order of chapter and student), into ``shards/K-of-N/`` (its own
gradebook, ``grades.csv`` and files) without touching the instructor's
gradebook, so that N jobs of a cluster can grade a class side by side;
``merge`` then combines the shares into the course as one run would have.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpucourse.grader.gradebooks import (copy_submission, has_chapter, merge_csv, quiet_nbgrader,
                                         read_csv)
from gpucourse.grader.release import chapters, nbgrader_command
from gpucourse.grader.submissions import (Skipped, Submission, _grade_ids, find_submissions,
                                          opened_submissions)
from gpucourse.grader.workers import Outcome, Progress, Task, WorkerSetup, default_jobs, \
    grade_in_workers

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
    seconds: float = 0.0  # how long its grading took


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


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"k/n"`` as (k, n) with 1 <= k <= n; None for None or ""."""
    if not text:
        return None
    try:
        k, n = (int(part) for part in str(text).split("/"))
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        raise ValueError(f"shard must be k/n with 1 <= k <= n (the k-th of n shares), got {text!r}")
    return k, n


def shard_folder(root: Path, shard: tuple[int, int]) -> Path:
    """Where ``make grade SHARD=k/n`` leaves its share: ROOT/shards/k-of-n."""
    return Path(root) / "shards" / f"{shard[0]}-of-{shard[1]}"


def _template_gradebook(root: Path, gradebook: InstructorGradebook, by_chapter: dict,
                        scratch: Path, shard, notes: list[str]) -> Path:
    """A sqlite gradebook in which every chapter to grade is recorded, for the workers
    to copy: the instructor's own (where it is a sqlite file), with the chapters
    it lacks recorded (in the instructor's gradebook too, unless this is a share
    of a run, which must leave it alone)."""
    template = scratch / "template.db"
    own_file = gradebook.url.startswith(SQLITE)
    recorder = scratch / "recorder"
    recorder.mkdir()
    shutil.copy(root / "nbgrader_config.py", recorder)
    for chapter in sorted(by_chapter):
        shutil.copytree(root / "solutions" / chapter, recorder / "solutions" / chapter,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        stale = _stale_tests(chapter, root, gradebook)
        if stale is None and shard is None:
            _record_chapter(chapter, recorder, gradebook.url)
        elif stale:
            notes.append(
                f"{chapter}: the gradebook holds another version of {', '.join(stale)} than "
                f"solutions/; grades follow the gradebook (to follow solutions/, run "
                f"`nbgrader generate_assignment {chapter} --force` first, see README)")
    missing = sorted(by_chapter)
    if own_file and gradebook.exists():
        shutil.copy(gradebook.url[len(SQLITE):], template)
        missing = _missing_chapters(SQLITE + str(template), gradebook.course_id, missing)
    for chapter in missing:  # a share, or a gradebook that is not a sqlite file
        _record_chapter(chapter, recorder, SQLITE + str(template))
    return template


def _missing_chapters(url: str, course_id: str, wanted) -> list[str]:
    """The chapters of ``wanted`` that the gradebook at ``url`` has not recorded."""
    from nbgrader.api import Gradebook as NbgraderGradebook

    with NbgraderGradebook(url, course_id) as grades:
        return [chapter for chapter in wanted if not has_chapter(grades, chapter)]


def grade(submissions: Path, root: Path = Path("."), only: list[str] | None = None,
          csv_path: Path | None = None, timeout_s: int | None = None, jobs: int | None = None,
          shard: tuple[int, int] | None = None, progress=None) -> GradingReport:
    """Grade a folder or zip of submissions; see the module's description.

    ``timeout_s`` overrides the per-cell time limit of nbgrader_config.py.
    ``jobs``: worker processes (default: this machine's cores). ``shard``:
    (k, n) grades only the k-th of n shares of the submissions, into
    ROOT/shards/k-of-n (its own gradebook, CSV and files), for
    :func:`merge_shards`. ``progress``: the stream of the progress bar
    (default stderr).
    """
    root = Path(root).resolve()
    if not (root / "nbgrader_config.py").is_file():
        raise ValueError(f"root must be the course folder holding nbgrader_config.py, got {root}")
    if timeout_s is not None and not (isinstance(timeout_s, int) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive whole number of seconds, got {timeout_s!r}")
    jobs = default_jobs() if jobs is None else jobs
    if not (isinstance(jobs, int) and jobs >= 1):
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    if shard is not None:
        parse_shard(f"{shard[0]}/{shard[1]}")
    out = root if shard is None else shard_folder(root, shard)
    if shard is not None:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
    csv_path = Path(csv_path) if csv_path else out / "grades.csv"
    gradebook = InstructorGradebook.of(root)
    notes: list[str] = []
    results: list[Result] = []

    with opened_submissions(submissions, set(chapters(root))) as folder:
        found, skipped = find_submissions(folder, root, only)
        found.sort(key=lambda s: (s.chapter, s.student))
        if shard is not None:  # every n-th, so that each share holds every chapter's
            found = found[shard[0] - 1::shard[1]]
        by_chapter: dict[str, list[Submission]] = {}
        for submission in found:
            by_chapter.setdefault(submission.chapter, []).append(submission)

        with tempfile.TemporaryDirectory(prefix="gpucourse-grading-") as scratch:
            scratch = Path(scratch)
            template = _template_gradebook(root, gradebook, by_chapter, scratch, shard, notes)
            target = gradebook
            if shard is not None:  # the share's own gradebook, the chapters recorded
                shutil.copy(template, out / "gradebook.db")
                target = InstructorGradebook(SQLITE + str(out / "gradebook.db"),
                                             gradebook.course_id)
            tasks = [Task(i, s.student, s.chapter, s.notebook, s.companions)
                     for i, s in enumerate(found)]
            setup = WorkerSetup(root, tuple(sorted(by_chapter)), template, timeout_s)
            outcomes = grade_in_workers(tasks, setup, jobs, scratch,
                                        Progress(len(tasks), progress)) if tasks else []
            for submission, outcome in zip(found, outcomes):
                if outcome.graded:
                    results.append(_collect(submission, outcome, out, target))
                else:
                    skipped.append(Skipped(submission.name, outcome.error))

    results.sort(key=lambda r: (r.student, r.chapter))
    # A run that graded nothing leaves an earlier grades.csv as it was; a share
    # always writes one, for the merge.
    if results or shard is not None:
        _write_csv(csv_path, results, out)
    return GradingReport(results, sorted(skipped, key=lambda s: s.name), notes,
                         csv_path if results or shard is not None else None, target.url)


def _collect(submission: Submission, outcome: Outcome, out: Path,
             gradebook: InstructorGradebook) -> Result:
    """Copy a graded submission from its worker's gradebook into ``gradebook`` and its
    files (submitted, autograded, feedback) into ``out``; its Result."""
    from nbgrader.api import Gradebook as NbgraderGradebook

    student, chapter, course = submission.student, submission.chapter, outcome.course
    with quiet_nbgrader(), gradebook.open() as grades, \
            NbgraderGradebook(SQLITE + str(course / "gradebook.db"), gradebook.course_id) as worker:
        copy_submission(worker, grades, chapter, student)
        notebook = grades.find_submission_notebook(chapter, chapter, student)
        autograded = course / "autograded" / student / chapter / f"{chapter}.ipynb"
        failed, timed_out = _cell_problems(autograded, notebook.grades)
        score, max_score = float(notebook.score), float(notebook.max_score)
    for kind in ("submitted", "autograded", "feedback"):
        destination = out / kind / student / chapter
        # Submissions read from the course's own submitted/ stay as they are.
        if kind == "submitted" and submission.notebook.parent.resolve() == destination:
            continue
        if (course / kind / student / chapter).is_dir():
            _replace_tree(course / kind / student / chapter, destination)
    return Result(student, chapter, score, max_score, failed, timed_out,
                  out / "feedback" / student / chapter / f"{chapter}.html", outcome.seconds)


def merge_shards(root: Path, shares: list[Path], csv_path: Path | None = None) -> int:
    """Merge the shares that ``make grade SHARD=k/n`` left (ROOT/shards/k-of-n) into
    the course: each share's graded submissions into the instructor's gradebook
    (recording a chapter it has never seen), their files into submitted/,
    autograded/ and feedback/, and the shares' grades.csv into one at
    ``csv_path`` (default ROOT/grades.csv), as one run would have written it.
    Returns the number of submissions merged."""
    from nbgrader.api import Gradebook as NbgraderGradebook

    root = Path(root).resolve()
    if not (root / "nbgrader_config.py").is_file():
        raise ValueError(f"root must be the course folder holding nbgrader_config.py, got {root}")
    shares = [Path(share) for share in shares]
    for share in shares:
        if not ((share / "gradebook.db").is_file() and (share / "grades.csv").is_file()):
            raise ValueError(f"shares must be folders that `make grade SHARD=k/n` wrote (with "
                             f"gradebook.db and grades.csv), got {share}")
    gradebook = InstructorGradebook.of(root)
    total = merge_csv([share / "grades.csv" for share in shares],
                      Path(csv_path) if csv_path else root / "grades.csv")
    rows = {share: read_csv(share / "grades.csv")[1] for share in shares}
    chapters_seen = sorted({row[1] for share_rows in rows.values() for row in share_rows})
    missing = chapters_seen if not gradebook.exists() else \
        _missing_chapters(gradebook.url, gradebook.course_id, chapters_seen)
    if missing:
        with tempfile.TemporaryDirectory(prefix="gpucourse-merge-") as scratch:
            shutil.copy(root / "nbgrader_config.py", scratch)
            for chapter in missing:
                shutil.copytree(root / "solutions" / chapter, Path(scratch) / "solutions" / chapter)
                _record_chapter(chapter, Path(scratch), gradebook.url)
    for share in shares:
        with quiet_nbgrader(), gradebook.open() as ours, \
                NbgraderGradebook(SQLITE + str(share / "gradebook.db"), gradebook.course_id) as theirs:
            for student, chapter, *_ in rows[share]:
                copy_submission(theirs, ours, chapter, student)
        for student, chapter, *_ in rows[share]:
            for kind in ("submitted", "autograded", "feedback"):
                if (share / kind / student / chapter).is_dir():
                    _replace_tree(share / kind / student / chapter,
                                  root / kind / student / chapter)
    return total


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
    if report.results:
        lines += ["", "Time per submission:"]
        lines += [f"  {r.student} {r.chapter}: {r.seconds:.1f} s" for r in report.results]
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
