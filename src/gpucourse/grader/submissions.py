"""Finding the submissions in a folder or zip: who wrote each notebook, and for which chapter.

The first half of the instructor's ``grade`` command, before nbgrader sees
anything: read the three layouts that :mod:`gpucourse.grader.instructor`
describes (nbgrader's own, a flat folder of notebooks, a folder per student
as learning platforms export them), name each student, recognise each
notebook's chapter from its nbgrader cells (never from its name), and set
aside, with the reason, whatever is not a submission. It is a module of its
own because none of it runs nbgrader: it can be read, and tested, without a
gradebook.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpucourse.grader.release import chapters, refuse_unknown_chapters


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
    """Read a folder of submissions in any of the layouts gpucourse.grader.instructor describes.

    Returns the submissions to grade and what was skipped, with the reason.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be an existing folder of submissions, got {folder}")
    cell_ids = chapter_cell_ids(root)
    if only:
        refuse_unknown_chapters(only, list(cell_ids))

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
