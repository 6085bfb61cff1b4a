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

import argparse
import csv
import re
import shutil
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpucourse.grading import chapters, nbgrader_command

# nbgrader writes this error into a cell that ran past its time limit
# (the default of its Execute.error_on_timeout).
TIMEOUT_ERROR = "CellTimeoutError"
SQLITE = "sqlite:///"
CSV_COLUMNS = ("student", "chapter", "points", "max_points", "failed_cells", "timed_out_cells",
               "feedback")


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one chapter, as found in the submissions."""

    student: str
    chapter: str
    notebook: Path
    name: str  # where it was found, relative to the submissions
    companions: tuple[Path, ...] = ()  # other files beside it in nbgrader's layout


@dataclass(frozen=True)
class Skipped:
    name: str
    reason: str


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
# Finding the submissions
# ---------------------------------------------------------------------------

def _hidden(name: str) -> bool:
    """Dot-files, checkpoint folders and the resource forks macOS puts into zips."""
    return name.startswith(".") or name == "__MACOSX"


def _children(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not _hidden(p.name))


def _files_under(folder: Path) -> list[Path]:
    """Every file under ``folder`` that is not hidden nor in a hidden folder."""
    return [path for path in sorted(folder.rglob("*")) if path.is_file()
            and not any(_hidden(part) for part in path.relative_to(folder).parts)]


def student_id(name: str) -> str:
    """An nbgrader student id made from a file or folder name."""
    cleaned = re.sub(r"[^A-Za-z0-9._@-]", "_", name).lstrip(".")
    if not cleaned:
        raise ValueError(f"name must hold at least one letter or digit, got {name!r}")
    return cleaned


def chapter_cell_ids(root: Path) -> dict[str, frozenset[str]]:
    """The nbgrader grade_ids of each chapter's source notebook in ``solutions/``."""
    import nbformat

    ids = {}
    for chapter in chapters(root):
        source = Path(root) / "solutions" / chapter / f"{chapter}.ipynb"
        if source.is_file():
            ids[chapter] = frozenset(_grade_ids(nbformat.read(source, as_version=4)))
    return ids


def _grade_ids(notebook) -> list[str]:
    return [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
            if "grade_id" in cell.get("metadata", {}).get("nbgrader", {})]


def recognise_chapter(notebook, cell_ids: dict[str, frozenset[str]]) -> str | None:
    """The chapter a notebook belongs to, from its nbgrader cells; None when unclear.

    The chapter is the one whose source notebook shares the most grade_ids with
    the notebook, provided that is at least half of the chapter's own and no
    other chapter shares as many.
    """
    present = set(_grade_ids(notebook))
    shared = sorted(((len(present & ids), chapter) for chapter, ids in cell_ids.items()),
                    reverse=True)
    if not shared or shared[0][0] == 0:
        return None
    best, chapter = shared[0]
    if len(shared) > 1 and shared[1][0] == best:
        return None
    return chapter if 2 * best >= len(cell_ids[chapter]) else None


def _read_notebook(path: Path):
    """The notebook at ``path``, or the reason it is not one."""
    import nbformat

    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # nbformat raises many kinds on a broken file
        return None, f"not a readable notebook ({type(error).__name__}: {error})"[:200]
    if not isinstance(notebook.get("cells"), list):
        return None, "not a notebook (it has no cells)"
    problem = _metadata_problem(notebook)
    return (None, problem) if problem else (notebook, None)


def _metadata_problem(notebook) -> str | None:
    """Why nbgrader would refuse this notebook's cell metadata, if it would.

    nbgrader stops grading every submission after one whose metadata has a
    schema it does not know, so such a notebook is turned away beforehand.
    """
    from nbgrader.nbgraderformat import MetadataValidator

    validator = MetadataValidator()
    for index, cell in enumerate(notebook.cells):
        try:
            validator.validate_cell(cell)
        except Exception as error:  # nbgrader's and jsonschema's errors alike
            name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", f"cell {index}")
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            return f"malformed nbgrader metadata in {name} ({message})"[:200]
    return None


def find_submissions(folder: Path, root: Path, only: list[str] | None = None
                     ) -> tuple[list[Submission], list[Skipped]]:
    """Read a folder of submissions in any of the layouts the module describes.

    Returns the submissions to grade and what was skipped, with the reason.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be an existing folder of submissions, got {folder}")
    cell_ids = chapter_cell_ids(root)
    if only:
        unknown = sorted(set(only) - set(cell_ids))
        if unknown:
            raise ValueError(f"only must name chapters in solutions/ ({', '.join(cell_ids)}), "
                             f"got {', '.join(unknown)}")

    candidates = []  # (student, notebook, name, chapter the folder names, companions)
    skipped = []
    for entry in _children(folder):
        if entry.is_file():
            if entry.suffix == ".ipynb":
                candidates.append((entry.stem, entry, entry.name, None, ()))
            else:
                skipped.append(Skipped(entry.name, "not a notebook"))
            continue
        files = _files_under(entry)
        notebooks = [f for f in files if f.suffix == ".ipynb"]
        if not notebooks:
            skipped.append(Skipped(f"{entry.name}/", "a student's folder with no notebook"))
            continue
        for path in files:
            inside = path.relative_to(entry).parts
            # nbgrader's layout: <student>/<chapter>/..., whose other files travel along.
            named = inside[0] if len(inside) > 1 and inside[0] in cell_ids else None
            name = f"{entry.name}/{'/'.join(inside)}"
            if path.suffix == ".ipynb":
                companions = tuple(f for f in files if named and f.suffix != ".ipynb"
                                   and f.relative_to(entry).parts[0] == named)
                candidates.append((entry.name, path, name, named, companions))
            elif not named:
                skipped.append(Skipped(name, "not a notebook"))

    found: dict[tuple[str, str], list[Submission]] = {}
    for student, path, name, named, companions in candidates:
        notebook, problem = _read_notebook(path)
        if problem:
            skipped.append(Skipped(name, problem))
            continue
        chapter = recognise_chapter(notebook, cell_ids)
        if chapter is None:
            skipped.append(Skipped(name, "a notebook of no known chapter (its nbgrader cells "
                                         "match no source notebook in solutions/)"))
        elif named and named != chapter:
            skipped.append(Skipped(name, f"a notebook of {chapter} in the folder of {named}"))
        elif only and chapter not in only:
            skipped.append(Skipped(name, f"a notebook of {chapter}, not of "
                                         f"{', '.join(only)}"))
        else:
            student = student_id(student)
            found.setdefault((student, chapter), []).append(
                Submission(student, chapter, path, name, companions))

    submissions = []
    for (student, chapter), same in sorted(found.items()):
        if len(same) == 1:
            submissions.append(same[0])
            continue
        names = ", ".join(s.name for s in same)
        skipped += [Skipped(s.name, f"one of {len(same)} notebooks of {chapter} for {student} "
                                    f"({names}): keep one and grade again") for s in same]
    return submissions, sorted(skipped, key=lambda s: s.name)


@contextmanager
def opened_submissions(source: Path, chapter_names: set[str]):
    """The folder to read submissions from: ``source`` itself, or a zip unpacked."""
    source = Path(source)
    if source.is_dir():
        yield source
        return
    if not (source.is_file() and zipfile.is_zipfile(source)):
        raise ValueError(f"submissions must be a folder or a .zip file, got {source}")
    with tempfile.TemporaryDirectory(prefix="gpucourse-submissions-") as scratch:
        with zipfile.ZipFile(source) as archive:
            archive.extractall(scratch)  # drops absolute paths and ".." from the names
        yield _unwrapped(Path(scratch), chapter_names)


def _unwrapped(folder: Path, chapter_names: set[str]) -> Path:
    """Inside the one folder that wraps a platform's export, unless that folder is
    a student's in nbgrader's layout (its sub-folders are chapters)."""
    entries = _children(folder)
    if len(entries) == 1 and entries[0].is_dir():
        inner = entries[0]
        if not any(p.is_dir() and p.name in chapter_names for p in _children(inner)):
            return inner
    return folder


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse.instructor", description=__doc__,
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
    args = parser.parse_args(argv)

    try:
        report = grade(args.submissions, args.root, args.chapter, args.csv, args.timeout)
    except ValueError as error:
        parser.error(str(error))
    print(format_report(report))
    return 0 if report.results else 1


if __name__ == "__main__":
    sys.exit(main())
