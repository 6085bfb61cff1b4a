"""Grading submissions in N worker processes, each with its own scratch course and gradebook.

nbgrader grades one notebook at a time, and most of that time one core runs
the student's code while the others wait. Here N processes grade side by
side. Each worker is a scratch nbgrader course of its own: the course's
``nbgrader_config.py``, the chapters' source notebooks, and a copy of a
template gradebook in which every chapter is recorded; it takes the next
submission from a shared queue, grades it with nbgrader's own ``autograde``
and ``generate_feedback`` (through ``NbGraderAPI``, so nbgrader is imported
once per worker, not once per submission), and reports back. Nothing a worker
does touches the instructor's gradebook: the caller merges what the workers
report as graded (:mod:`gpucourse.grader.gradebooks`).

A worker that dies mid-run (the machine's memory killer, a submission that
kills its grader) costs only the submission it was grading, which is
reported with the reason; a fresh worker takes its place for the rest. The
progress bar on stderr shows done/total and the time left.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpucourse.grader.gradebooks import quiet_nbgrader

SQLITE = "sqlite:///"
# How often the parent looks at its workers while it waits for a report.
POLL_S = 0.2


@dataclass(frozen=True)
class Task:
    """One submission to grade: where it is and where it goes."""

    index: int
    student: str
    chapter: str
    notebook: Path
    companions: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What became of one task."""

    task: Task
    graded: bool
    seconds: float
    course: Path | None  # the worker's scratch course holding the graded files
    error: str = ""  # why it was not graded


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker's scratch course is made of."""

    root: Path  # the course: nbgrader_config.py and solutions/
    chapters: tuple[str, ...]
    template_db: Path  # a sqlite gradebook in which every chapter is recorded
    timeout_s: int | None  # per-cell time limit, None for nbgrader_config.py's


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _prepare_course(setup: WorkerSetup, course: Path) -> str:
    """Make a worker's scratch course; returns its gradebook's URL."""
    course.mkdir(parents=True)
    shutil.copy(setup.root / "nbgrader_config.py", course)
    for chapter in setup.chapters:
        shutil.copytree(setup.root / "solutions" / chapter, course / "solutions" / chapter,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    shutil.copy(setup.template_db, course / "gradebook.db")
    return SQLITE + str(course / "gradebook.db")


def _first_error(result: dict) -> str:
    """nbgrader's first error in an NbGraderAPI result, on one line."""
    lines = [line.split("]", 1)[1].strip() for line in result.get("log", "").splitlines()
             if line.startswith("[ERROR]")]
    specific = [line for line in lines if not line.startswith("There was an error")]
    text = (specific or lines or [result.get("error") or "no error logged"])[0]
    return " ".join(text.split())[:300]


def _work(setup: WorkerSetup, course: Path, tasks, reports) -> None:
    """A worker's life: grade tasks from ``tasks`` until a None, reporting each
    start and end to ``reports``."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    db_url = _prepare_course(setup, course)
    # nbgrader calls its environment's `alembic` by name (see release.nbgrader_command).
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    os.chdir(course)  # the worker's own process: nbgrader reads paths from here
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = db_url
    config.Application.log_level = "WARN"
    if setup.timeout_s is not None:
        config.Execute.timeout = setup.timeout_s
    api = NbGraderAPI(config=config)
    with quiet_nbgrader():  # for this worker's life: nbgrader's SQLAlchemy warnings
        while (task := tasks.get()) is not None:
            reports.put(("start", task.index, os.getpid()))
            started = time.monotonic()
            target = course / "submitted" / task.student / task.chapter
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(task.notebook, target / f"{task.chapter}.ipynb")
            for companion in task.companions:
                destination = target / companion.relative_to(task.notebook.parent)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(companion, destination)
            result = api.autograde(task.chapter, task.student, force=True, create=True)
            graded = (course / "autograded" / task.student / task.chapter
                      / f"{task.chapter}.ipynb").is_file() and result.get("success", False)
            error = "" if graded else f"nbgrader could not grade it: {_first_error(result)}"
            if graded:
                api.generate_feedback(task.chapter, task.student, force=True)
            reports.put(("done", task.index, graded, time.monotonic() - started, error))


class Progress:
    """A one-line progress bar on a stream: done/total, elapsed and time left."""

    def __init__(self, total: int, stream=None, width: int = 30):
        self.total, self.width, self.done = total, width, 0
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.live = getattr(self.stream, "isatty", lambda: False)()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        filled = self.width * self.done // max(self.total, 1)
        left = (f"{_clock(elapsed / self.done * (self.total - self.done))} left"
                if self.done else "time left unknown")
        return (f"grading [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{self.done}/{self.total} done, {_clock(elapsed)} elapsed, {left}")

    def advance(self) -> None:
        self.done += 1
        # A terminal redraws one line; a log file gets one line per submission.
        self.stream.write(("\r" if self.live else "") + self.line()
                          + ("" if self.live and self.done < self.total else "\n"))
        self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def grade_in_workers(tasks: list[Task], setup: WorkerSetup, jobs: int, scratch: Path,
                     progress: Progress | None = None) -> list[Outcome]:
    """Grade ``tasks`` in ``jobs`` worker processes whose courses live under ``scratch``.

    Returns one Outcome per task, in the tasks' order. A task whose worker
    died while grading it is not graded, and says so; the other tasks are
    graded by the remaining workers and a replacement.
    """
    if not (isinstance(jobs, int) and jobs >= 1):
        raise ValueError(f"jobs must be a whole number >= 1, got {jobs!r}")
    context = multiprocessing.get_context("spawn")  # no locks or threads inherited
    todo, reports = context.Queue(), context.Queue()
    for task in tasks:
        todo.put(task)
    workers = {}  # process -> its course
    grading: dict[int, tuple[int, float]] = {}  # pid -> (task index, start time)
    outcomes: dict[int, Outcome] = {}
    by_index = {task.index: task for task in tasks}
    course_of_pid: dict[int, Path] = {}

    def start_worker() -> None:
        course = scratch / f"worker-{len(workers) + 1}"
        process = context.Process(target=_work, args=(setup, course, todo, reports),
                                  daemon=True)
        process.start()
        workers[process] = course
        course_of_pid[process.pid] = course

    began_work: set[int] = set()  # pids of the workers that took a task

    def read(report) -> None:
        if report[0] == "start":
            grading[report[2]] = (report[1], time.monotonic())
            began_work.add(report[2])
            return
        _, index, graded, seconds, error = report
        pid = next(pid for pid, (i, _) in grading.items() if i == index)
        del grading[pid]
        outcomes[index] = Outcome(by_index[index], graded, seconds, course_of_pid[pid], error)
        if progress:
            progress.advance()

    for _ in range(min(jobs, len(tasks))):
        start_worker()
        todo.put(None)
    try:
        while len(outcomes) < len(tasks):
            try:
                read(reports.get(timeout=POLL_S))
                continue
            except queue.Empty:
                pass
            for process in [p for p in workers if p.exitcode is not None and p.pid in course_of_pid]:
                while True:  # what it reported before it died
                    try:
                        read(reports.get(timeout=POLL_S))
                    except queue.Empty:
                        break
                course_of_pid.pop(process.pid)
                if process.exitcode != 0 and process.pid not in began_work:
                    raise RuntimeError(f"a grading worker failed as it started (exit code "
                                       f"{process.exitcode}); its error is printed above")
                if process.pid in grading:
                    index, began = grading.pop(process.pid)
                    outcomes[index] = Outcome(
                        by_index[index], False, time.monotonic() - began, None,
                        f"the grading worker stopped while grading it (exit code "
                        f"{process.exitcode}); the other submissions stand: grade it again")
                    if progress:
                        progress.advance()
                # A worker that ends well found the queue empty; one that died leaves
                # its share of the queue to a new one.
                if process.exitcode != 0 and len(outcomes) + len(grading) < len(tasks):
                    start_worker()
                    todo.put(None)
            if not course_of_pid and len(outcomes) < len(tasks):
                raise RuntimeError("every grading worker stopped before the work was done")
    finally:
        for process in workers:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
    return [outcomes[task.index] for task in tasks]
