"""Running a student's function on N forked gloo processes, and always stopping them.

Week 4's exercises are graded on real processes: ``run_forked`` starts the
ranks, waits for their results and stops every one of them, whatever the
student's code does. It is a module of its own because it is the part of the
grader that deals in processes, signals and pipes, not in collectives; the
checks of what the ranks computed are in
:mod:`gpucourse.grader.collective_exercises`.

**Why fork.** The function is defined in a notebook cell, so it lives in the
``__main__`` of an IPython kernel: a process started with "spawn" (what
``gpucourse.distributed.run_on_processes`` uses) imports the function by name
and cannot find it there. A process started with ``os.fork`` (the "fork"
start method, Linux and macOS) is a copy of the kernel: the function, its
helpers and its closures are already in it, nothing is pickled, and nothing
is imported again, so a launch takes a fraction of a second where spawning
four processes that import torch takes seconds. Forking a process that has
threads (the kernel has a few) is safe here because the child touches none
of what those threads own: before anything else it sends its output to a
file of its own, it uses only torch (whose thread pools are reset at fork),
gloo sockets it opens itself, and one pipe to the grader; it ends with
``os._exit``, running no clean-up inherited from the kernel.

**How a run ends.** Every rank of a launch is a child process in a process
group of its own (set by the child and by the grader, so that there is no
window without it). The grader serves the rendezvous store, sends its port to
the ranks, and waits on their result pipes and exit sentinels. Each rank says
when it has joined the process group; the deadline, ``timeout_s``, counts from
when all have, so that a slow start on a busy machine (allowed
``JOIN_TIMEOUT_S``) does not eat into the time the student's code is given, and
a hang is stopped a few seconds after it begins. The launch ends at the first of:

* every rank reported its result: the results are checked;
* a rank raised: its traceback is reported (the earliest failure, by clock,
  is the cause; the others usually only lost their partner);
* a rank exited without reporting (``os._exit``, a crash, a signal);
* the deadline: every rank still running first prints its Python stack into
  its log (``faulthandler`` on SIGUSR1), which the message shows, so that the
  student sees the ``recv`` each rank waits in;
* the grader itself is interrupted (nbgrader's cell timeout, a KeyboardInterrupt).

In every case the grader then kills each rank's whole process group with
SIGKILL, which no Python code can catch, so whatever the ranks started goes
too, and reaps the ranks. Two backstops cover a grader that is itself killed:
each rank asks Linux to kill it when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), and each sets an alarm (SIGALRM, default
action: terminate) a minute after the deadline. gloo's own timeout is set
past the deadline so that it never fires first.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings
from datetime import timedelta

from gpucourse.distributed import _rendezvous_store
from gpucourse.grader.ring_rules import _install_guards

# How long the ranks may take to start and join their process group; the
# deadline of a run (timeout_s) counts from when they all have.
JOIN_TIMEOUT_S = 60.0
# How much of each rank's log a failure message shows.
_LOG_LINES = 15
# How tracebacks and faulthandler start a line about a frame of the grader's own
# modules (this one, and the task that gpucourse.grader.collective_exercises runs).
_OWN_FRAME = f'  File "{os.path.dirname(__file__)}{os.sep}'


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (a backstop for
    a grader that is itself killed); elsewhere, do nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _rank_main(rank, world_size, port_reader, task, connection, log_path, timeout_s,
               parent_pid):
    """Body of one forked rank: isolate, join the group, run ``task``, report, exit."""
    status, value = "error", "the rank did not start"
    try:
        try:
            os.setpgid(0, 0)  # a process group of its own, killed as a whole
        except OSError:
            pass
        _die_with_parent(parent_pid)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader decides when to stop
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        # Backstop: terminate a minute after the latest deadline the grader can set.
        signal.alarm(int(timeout_s + JOIN_TIMEOUT_S) + 60)
        log = open(log_path, "w", buffering=1)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        faulthandler.register(signal.SIGUSR1, file=log, all_threads=False)

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        # The grader serves the rendezvous store, opened after the fork, and sends
        # its port; each rank joins it as a client.
        port = port_reader.recv()
        # gloo's own timeouts lie past the grader's deadlines, so that they never fire first.
        waits = timedelta(seconds=timeout_s + JOIN_TIMEOUT_S + 30)
        store = dist.TCPStore("127.0.0.1", port, None, False, waits)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=waits)
        _install_guards()
        connection.send(("joined", time.monotonic(), None))  # the deadline starts now
        status, value = "ok", task(rank, world_size)
    except BaseException:  # SystemExit and KeyboardInterrupt included
        status, value = "error", traceback.format_exc()
    try:
        connection.send((status, time.monotonic(), value))
    except BaseException:
        connection.send(("error", time.monotonic(),
                         f"its result could not be sent back:\n{traceback.format_exc()}"))
    finally:
        os._exit(0)


def _tail(path, lines=_LOG_LINES) -> str:
    try:
        with open(path, errors="replace") as file:
            text = file.read().rstrip()
    except OSError:
        return ""
    kept = text.splitlines()[-lines:]
    return "\n".join(kept)


def _logs(paths, ranks) -> str:
    shown = []
    for rank in ranks:
        text = _tail(paths[rank])
        if text:
            shown.append(f"--- rank {rank} printed (last lines) ---\n{text}")
    return ("\n" + "\n".join(shown)) if shown else ""


def _stop(processes) -> None:
    """Kill every rank's process group, then each rank, and reap them."""
    for process in processes:
        if process.pid is None:
            continue
        for kill in (lambda: os.killpg(process.pid, signal.SIGKILL),
                     lambda: os.kill(process.pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    for process in processes:
        if process.pid is not None:
            process.join(timeout=5)


def run_forked(task, world_size: int, timeout_s: float = 10.0, name: str | None = None) -> list:
    """Run ``task(rank, world_size)`` on ``world_size`` forked processes joined by gloo.

    Returns the per-rank return values (which must pickle), in rank order.
    Raises AssertionError, with the rank, its traceback or stack and its
    output, when a rank raises, dies or is still running ``timeout_s`` seconds
    after the start; every process is stopped first (see the module docstring).
    ``name`` is what the messages call the task.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s < 3600:
        raise ValueError(f"timeout_s must be a number of seconds in (0, 3600), got {timeout_s!r}")
    if not callable(task):
        raise ValueError(f"task must be callable, got {task!r}")
    if not hasattr(os, "fork"):
        raise RuntimeError("the exercises' processes are started with fork, which this system "
                           "lacks (Windows): use Linux, macOS or WSL")
    import multiprocessing
    from multiprocessing.connection import wait

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process "
                           "(dist.init_process_group was called here): restart the kernel; "
                           "the grader starts processes of its own")
    name = name or getattr(task, "__name__", "the function")
    context = multiprocessing.get_context("fork")
    values: dict[int, object] = {}
    with tempfile.TemporaryDirectory(prefix="gpucourse-ranks-") as folder:
        logs = [os.path.join(folder, f"rank{rank}.log") for rank in range(world_size)]
        pipes = [context.Pipe(duplex=False) for _ in range(world_size)]  # results
        ports = [context.Pipe(duplex=False) for _ in range(world_size)]  # the store's port
        processes = [context.Process(target=_rank_main, daemon=True,
                                     args=(rank, world_size, ports[rank][0], task,
                                           pipes[rank][1], logs[rank], timeout_s, os.getpid()))
                     for rank in range(world_size)]
        store = None
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns about fork in a process with threads; see the
                # module docstring for why the ranks are safe.
                warnings.filterwarnings("ignore", category=DeprecationWarning,
                                        message=".*fork.*")
                for process in processes:
                    process.start()
                    try:
                        os.setpgid(process.pid, process.pid)
                    except OSError:  # the child did it first, or is gone already
                        pass
            for _, sender in pipes:
                sender.close()
            # The rendezvous store is served here, on a port the system picks (so no
            # other run can take it between choosing and binding), and opened only
            # now: a store's server thread copied into the ranks by the fork made
            # one launch in a hundred hang in init_process_group.
            store = _rendezvous_store(timeout_s + JOIN_TIMEOUT_S)
            for reader, sender in ports:
                reader.close()
                sender.send(store.port)
                sender.close()
            _wait_for_ranks(processes, [reader for reader, _ in pipes], values, logs,
                            timeout_s, name, wait)
        finally:
            _stop(processes)
            for connection in [reader for reader, _ in pipes] + [end for pair in ports
                                                                   for end in pair]:
                connection.close()
            del store
    return [values[rank] for rank in range(world_size)]


def _wait_for_ranks(processes, readers, values, logs, timeout_s, name, wait):
    world_size = len(processes)
    pending = dict(enumerate(readers))
    joined: set[int] = set()
    # Until every rank has joined the process group, only a generous limit for the
    # start-up; from then on, timeout_s for the task (the student's code).
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    failures = []  # (clock, rank, text)
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if len(joined) < world_size:
                raise AssertionError(
                    f"{name} on {world_size} processes: ranks "
                    f"{sorted(set(range(world_size)) - joined)} did not join the process group "
                    f"within {JOIN_TIMEOUT_S:g} s, before any of your code ran (is the machine "
                    f"overloaded?); every process was stopped: run the cell again"
                    f"{_logs(logs, sorted(set(range(world_size)) - joined))}")
            _report_hang(processes, sorted(pending), logs, timeout_s, name)
        sentinels = {processes[rank].sentinel: rank for rank in pending}
        ready = wait(list(pending.values()) + list(sentinels), timeout=min(remaining, 0.5))
        for rank, reader in list(pending.items()):
            if reader in ready or (processes[rank].sentinel in ready and reader.poll()):
                try:
                    status, clock, value = reader.recv()
                except (EOFError, OSError):
                    status, clock, value = "died", time.monotonic(), None
            elif processes[rank].sentinel in ready:
                status, clock, value = "died", time.monotonic(), None
            else:
                continue
            if status == "joined":
                joined.add(rank)
                if len(joined) == world_size:
                    deadline = time.monotonic() + timeout_s
                continue
            del pending[rank]
            if status == "ok":
                values[rank] = value
            elif status == "died":
                processes[rank].join(timeout=1)
                failures.append((clock, rank, f"rank {rank} of {world_size} exited (exit code "
                                              f"{processes[rank].exitcode}) without reporting "
                                              f"a result"))
            else:
                failures.append((clock, rank, f"rank {rank} of {world_size} raised an error in "
                                              f"{name}:\n{_student_part(value)}"))
        if failures:
            # Give the other ranks a moment to report, then name the earliest failure.
            time.sleep(0.1)
            failures.sort()
            _, first_rank, text = failures[0]
            others = sorted({rank for _, rank, _ in failures[1:]})
            also = (f"\n(ranks {others} failed after it, most likely because they lost their "
                    "partner.)") if others else ""
            raise AssertionError(f"{name} on {world_size} processes: {text}{also}\nEvery process "
                                 f"was stopped.{_logs(logs, [first_rank])}")


def _student_part(text: str) -> str:
    """A rank's traceback without the grader's own frames at the top."""
    lines = text.rstrip().splitlines()
    for index, line in enumerate(lines[1:], 1):
        if line.startswith('  File "') and not line.startswith(_OWN_FRAME):
            return "\n".join(lines[:1] + lines[index:])
    return "\n".join(lines)


def _report_hang(processes, running, logs, timeout_s, name):
    # Each rank still running prints its Python stack into its log.
    for rank in running:
        try:
            os.kill(processes[rank].pid, signal.SIGUSR1)
        except (ProcessLookupError, TypeError):
            pass
    time.sleep(0.3)
    stacks = []
    for rank in running:
        stack = _stack_of(logs[rank])
        if stack:
            stacks.append(f"--- rank {rank} was waiting in (most recent call first) ---\n{stack}")
    raise AssertionError(
        f"{name} on {len(processes)} processes did not finish within {timeout_s:g} s: "
        f"ranks {running} were still running and were stopped. A rank that waits forever is "
        "usually a receive with no matching send, or every rank in a blocking dist.send or "
        "dist.recv at once (on gloo, dist.send waits until the receiver posts its recv, at "
        "every size): post the send and the receive together (dist.isend and dist.irecv, or "
        "dist.batch_isend_irecv), then wait on both."
        + ("\n" + "\n".join(stacks) if stacks else ""))


def _stack_of(path) -> str:
    """The frames faulthandler printed, without those of the grader around them."""
    try:
        with open(path, errors="replace") as file:
            text = file.read()
    except OSError:
        return ""
    marker = text.rfind("(most recent call first):")
    if marker < 0:
        return _tail(path)
    frames = [line for line in text[marker:].splitlines()[1:] if line.startswith("  File")]
    # Most recent first: the student's frames (and torch's under them), then the
    # grader's, then the frames the rank inherited from its parent at the fork.
    import torch

    torch_frame = f'  File "{os.path.dirname(torch.__file__)}{os.sep}'
    student = []
    for line in frames:
        if line.startswith(_OWN_FRAME):
            break
        # Of torch's own frames, only the innermost: the call the rank waits in.
        if line.startswith(torch_frame) and student and student[-1].startswith(torch_frame):
            continue
        student.append(line)
    return "\n".join(student[:_LOG_LINES])
