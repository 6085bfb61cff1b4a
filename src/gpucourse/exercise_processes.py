"""Grade collectives that a student writes in a notebook, on real processes.

Week 4's exercises ask for the ring reduce-scatter, all-gather and all-reduce
written from ``torch.distributed``'s point-to-point calls. The test cells
run the student's function on 2, 3 and 4 gloo processes on this machine::

    from gpucourse.exercise_processes import check_collective
    check_collective(my_all_reduce, "all_reduce", world_sizes=(2, 3), lengths=(10, 2))

``time_all_reduce`` times the student's all-reduce, and
``expect_alpha_beta_fit`` checks the student's least-squares fit of the
alpha-beta model to those timings against ``numpy.linalg.lstsq`` on the same
data (``least_squares_alpha_beta``); ``example_timings`` stands in for
timings of an all-reduce that cannot be timed yet.

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

**What is refused.** The exercise is to build collectives, so the student's
function may not call one. Two checks enforce it:

* before any process starts, ``check_point_to_point_only`` reads the names
  the function's code refers to (and those of the notebook functions it
  calls) and fails on any collective's name (``all_reduce``,
  ``reduce_scatter_tensor``, ``all_gather``, ``broadcast``, ``barrier``, ...)
  and on any use of the course's package (``gpucourse.verify.expect_own_work``);
* in each rank, while the student's function runs, every collective of
  ``torch.distributed`` (the module functions and the methods of the process
  group they end in) and the course's own ring raise "use point-to-point
  calls". This catches what the names do not show (``getattr(dist, name)``).

The point-to-point calls are counted on their way through the process group
(``dist.send``, ``recv``, ``isend``, ``irecv`` and ``batch_isend_irecv`` all
end in its ``send`` and ``recv``), and the grader checks that each rank sent
only to the next rank on the ring and received only from the previous one,
in no more messages than the ring has steps, and exactly the elements the
ring moves.

**Inputs.** Each rank draws its own random tensor after the fork and reports
it with its result, so that no rank can read another's input from memory it
shares with the grader; the grader computes the reference (a float64 sum, or
the gathered chunks) from what the ranks report, with NumPy operations that a
student's cell cannot replace, and compares with ``gpucourse.verify``.
"""

from __future__ import annotations

import builtins
import faulthandler
import os
import signal
import statistics
import sys
import tempfile
import time
import traceback
import types
import warnings
from contextlib import contextmanager
from datetime import timedelta

import numpy as np

from gpucourse import collectives as _collectives
from gpucourse.distributed import _rendezvous_store
from gpucourse.verify import (_plain_float, expect_array, expect_float, expect_own_work,
                              visible_names)

# Captured at import, before any student code runs in the notebook (as in
# gpucourse.verify): the grader's references use these, not whatever
# numpy.linalg.lstsq or gpucourse.collectives.chunk_bounds are by then.
_lstsq = np.linalg.lstsq
_np_array = np.array
_float64 = np.float64
_chunk_bounds = _collectives.chunk_bounds
_alpha_beta_terms = _collectives.alpha_beta_terms
_isinstance = builtins.isinstance
_float = builtins.float
_type = builtins.type
_len = builtins.len

COLLECTIVES = ("reduce_scatter", "all_gather", "all_reduce")
DTYPES = ("float64", "float32")
# All-reduce timings for the alpha-beta fit: float32 tensors of 8 B to 1 MiB.
TIMED_SIZES_BYTES = (8, 128, 2048, 32768, 262144, 1048576)

# What a function built from point-to-point calls may not name: the
# collectives of torch.distributed (and of its process groups, and of
# torch.ops.c10d), whatever module they are reached through.
COLLECTIVE_NAMES = frozenset({
    "all_reduce", "allreduce", "allreduce_", "all_reduce_coalesced", "allreduce_coalesced",
    "reduce_scatter", "reduce_scatter_", "reduce_scatter_tensor", "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "all_gather", "allgather", "allgather_", "all_gather_into_tensor", "_all_gather_base",
    "all_gather_object", "all_gather_coalesced", "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "all_to_all", "all_to_all_single", "alltoall", "alltoall_base",
    "broadcast", "broadcast_", "broadcast_object_list",
    "reduce_scatter_multigpu", "all_reduce_multigpu", "all_gather_multigpu",
    "scatter_object_list", "gather_object", "barrier", "monitored_barrier",
    "_functional_collectives", "functional_collectives",
})
# The same, as functions of torch.distributed refused at run time (plain
# "reduce", "gather" and "scatter" too: by name they are too common to refuse).
_REFUSED_FUNCTIONS = sorted(COLLECTIVE_NAMES | {"reduce", "gather", "scatter"})
# ... and as methods of the process group that those functions call.
_REFUSED_METHODS = ("allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced",
                    "allgather_into_tensor_coalesced", "_allgather_base", "reduce_scatter",
                    "reduce_scatter_tensor_coalesced", "_reduce_scatter_base", "broadcast",
                    "reduce", "gather", "scatter", "alltoall", "alltoall_base", "barrier",
                    "monitored_barrier")
# The course's own collectives (gpucourse.collectives), refused in the ranks.
_COURSE_COLLECTIVES = ("ring_all_reduce", "naive_all_reduce", "ring_reduce_scatter",
                       "ring_all_gather", "_ring_reduce_scatter_flat", "_ring_all_gather_flat",
                       "_exchange")
POINT_TO_POINT = "dist.send, dist.recv, dist.isend, dist.irecv or dist.batch_isend_irecv"

# How long the ranks may take to start and join their process group; the
# deadline of a run (timeout_s) counts from when they all have.
JOIN_TIMEOUT_S = 60.0
# How much of each rank's log a failure message shows.
_LOG_LINES = 15
# How tracebacks and faulthandler start a line about a frame of this module.
_OWN_FRAME = f'  File "{__file__}"'


# -----------------------------------------------------------------------------
# Reading what a function refers to


def referenced_names(function) -> set[str]:
    """Every name that ``function``'s code refers to: globals, attributes,
    imports, in nested functions and comprehensions too, and in every function
    of the same module that it calls, however deep (the helpers a student
    writes beside it in the notebook). A global or captured name also brings
    in the ``__name__`` of the object it is bound to, so that an alias
    (``from torch.distributed import all_reduce as add_up``) shows its real name."""
    if not callable(function):
        raise ValueError(f"function must be a function, got {function!r}")
    home = getattr(function, "__module__", None)
    names: set[str] = set()
    seen: set[int] = set()

    def visit(fn) -> None:
        code = getattr(fn, "__code__", None)
        if code is None or id(code) in seen:
            return
        seen.add(id(code))
        scope = visible_names(fn)
        own = _code_names(code)
        names.update(own)
        for name in own:
            value = scope.get(name)
            if value is None or _isinstance(value, types.ModuleType):
                continue
            try:
                real_name = getattr(value, "__name__", None)
            except Exception:  # an object whose attributes misbehave
                real_name = None
            if _isinstance(real_name, str):
                names.add(real_name)
            if _isinstance(value, types.FunctionType) and value.__module__ == home:
                visit(value)

    visit(function)
    return names


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    # String constants that name something: getattr(dist, "all_reduce").
    for constant in code.co_consts:
        if _isinstance(constant, types.CodeType):
            names |= _code_names(constant)
        elif _isinstance(constant, str) and constant.isidentifier():
            names.add(constant)
    return names


def expect_no_names(function, names, advice: str) -> None:
    """Fail (AssertionError) when ``function`` refers to any of ``names``
    (see ``referenced_names``); ``advice`` says what to do instead."""
    if _isinstance(names, str):
        raise ValueError("names must be a collection of names, not one string")
    found = sorted(referenced_names(function) & set(names))
    if found:
        raise AssertionError(f"{getattr(function, '__name__', function)} uses "
                             f"{', '.join(found)}: {advice}")


def check_point_to_point_only(function) -> None:
    """Fail when ``function`` names a collective of torch.distributed or uses
    the course's package: the ring must be built from point-to-point calls."""
    expect_no_names(function, COLLECTIVE_NAMES,
                    f"a collective does the work for you; build it from point-to-point calls "
                    f"({POINT_TO_POINT})")
    expect_own_work(function, forbidden=("gpucourse",))


# -----------------------------------------------------------------------------
# Running a function on N forked processes


class _Rank:
    """What a rank knows about itself while the student's function runs."""

    student_running = False
    messages: list = []  # ("send" or "recv", peer group rank, elements) in call order


@contextmanager
def _student_code():
    """Mark the student's function as running: collectives refuse, messages count."""
    _Rank.student_running = True
    try:
        yield
    finally:
        _Rank.student_running = False


def _refusing(original, what: str):
    def refuse(*args, **kwargs):
        if _Rank.student_running:
            raise RuntimeError(f"{what} is not allowed in this exercise: use point-to-point "
                               f"calls ({POINT_TO_POINT})")
        return original(*args, **kwargs)

    refuse.__name__ = getattr(original, "__name__", what)
    return refuse


def _counting(original, kind: str):
    def count(self, tensors, peer, *args, **kwargs):
        _Rank.messages.append((kind, int(peer), sum(int(t.numel()) for t in tensors)))
        return original(self, tensors, peer, *args, **kwargs)

    return count


def _counting_any_source(original):
    def count(self, tensors, *args, **kwargs):  # a receive from any rank: peer -1
        _Rank.messages.append(("recv", -1, sum(int(t.numel()) for t in tensors)))
        return original(self, tensors, *args, **kwargs)

    return count


def _install_guards() -> None:
    """In a rank: refuse collectives and the course's ring while the student's
    code runs, and count every point-to-point message."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    group_class = distributed_c10d.ProcessGroup  # every call below ends in its methods
    for method in _REFUSED_METHODS:
        if hasattr(group_class, method):
            setattr(group_class, method, _refusing(getattr(group_class, method),
                                                   f"a collective (process group .{method})"))
    group_class.send = _counting(group_class.send, "send")
    group_class.recv = _counting(group_class.recv, "recv")
    group_class.recv_anysource = _counting_any_source(group_class.recv_anysource)
    for module in (dist, distributed_c10d):
        for name in _REFUSED_FUNCTIONS:
            if callable(getattr(module, name, None)):
                setattr(module, name, _refusing(getattr(module, name),
                                                f"a collective (dist.{name})"))
    for name in _COURSE_COLLECTIVES:
        setattr(_collectives, name, _refusing(getattr(_collectives, name),
                                              f"the course's own {name}; write the ring "
                                              "yourself"))


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


# -----------------------------------------------------------------------------
# The collectives, checked


def _check_dtype(dtype) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def _check_sizes(name, values, minimum, maximum):
    if _isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a sequence of whole numbers, got {values!r}")
    values = tuple(values)
    if not values or not all(type(v) is int and minimum <= v <= maximum for v in values):
        raise ValueError(f"{name} must be whole numbers from {minimum} to {maximum}, "
                         f"got {values!r}")
    return values


def expected_messages(collective: str, length: int, world_size: int, rank: int):
    """(most messages, elements sent, elements received) of ``rank`` in the ring
    ``collective`` on a tensor of ``length`` elements, cut as
    ``gpucourse.collectives.chunk_bounds`` cuts it.

    The ring has N - 1 steps per phase and each rank sends one chunk per step,
    always to the next rank. A reduce-scatter ends with chunk r complete on
    rank r, so each chunk starts at the rank after its owner and rank r sends
    every chunk but its own (and receives every chunk but rank r - 1's); an
    all-gather starts from chunk r on rank r, so rank r passes on every chunk
    but the one it receives last, chunk r + 1's (and receives every chunk but
    its own). An all-reduce is one of each.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, "
                         f"got {collective!r}")
    sizes = [stop - start for start, stop in _chunk_bounds(length, world_size)]
    n = world_size
    reduce_scatter = (n - 1, length - sizes[rank], length - sizes[(rank - 1) % n])
    all_gather = (n - 1, length - sizes[(rank + 1) % n], length - sizes[rank])
    if collective == "reduce_scatter":
        return reduce_scatter
    if collective == "all_gather":
        return all_gather
    return tuple(a + b for a, b in zip(reduce_scatter, all_gather))


def check_collective(function, collective, world_sizes=(2, 3, 4), lengths=(10, 2),
                     dtype="float64", timeout_s=3.0) -> None:
    """Run a student's ring ``collective`` on real processes and check it.

    ``function(tensor)`` must work in place on a 1-d float tensor (see the
    exercise's docstring). For each world size, one launch of gloo processes
    runs it once per length, each rank on a fresh random tensor of ``dtype``:

    * "reduce_scatter": afterwards rank r's chunk r must hold the sum over
      ranks of chunk r (the other chunks may hold anything);
    * "all_gather": rank r starts with chunk r of a tensor and NaN elsewhere,
      and must end with the whole tensor;
    * "all_reduce": every rank must end with the sum of all ranks' tensors.

    Sums are compared with a float64 sum of the inputs (to 1e-12 relative in
    float64, 1e-5 in float32), gathered chunks exactly. The messages each rank
    sent and received are checked against the ring (``expected_messages``).
    Raises AssertionError with what went wrong, on which rank, world size and
    length; bad arguments raise ValueError.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, "
                         f"got {collective!r}")
    if not callable(function):
        raise ValueError(f"function must be a function, got {function!r}")
    world_sizes = _check_sizes("world_sizes", world_sizes, 1, 8)
    lengths = _check_sizes("lengths", lengths, 0, 100_000)
    dtype = _check_dtype(dtype)
    check_point_to_point_only(function)
    name = getattr(function, "__name__", "the function")

    def task(rank, world_size):
        import torch

        # Drawn here, after the fork: no rank can see another's input.
        rng = np.random.default_rng()
        cases = []
        for length in lengths:
            values = rng.normal(size=length).astype(dtype)
            if collective == "all_gather":
                start, stop = _chunk_bounds(length, world_size)[rank]
                values[:start] = np.nan
                values[stop:] = np.nan
            tensor = torch.from_numpy(values.copy())
            _Rank.messages = []
            with _student_code():
                function(tensor)
            cases.append((values, tensor.numpy().copy(), list(_Rank.messages)))
        return cases

    for world_size in world_sizes:
        per_rank = run_forked(task, world_size, timeout_s, name)
        for index, length in enumerate(lengths):
            where = f"{name} on {world_size} processes, a {dtype} tensor of {length} elements"
            inputs = [per_rank[rank][index][0] for rank in range(world_size)]
            for rank in range(world_size):
                _, result, messages = per_rank[rank][index]
                _check_result(collective, inputs, result, length, world_size, rank, dtype,
                              where)
                _check_messages(collective, messages, length, world_size, rank, where)


def _check_result(collective, inputs, result, length, world_size, rank, dtype, where):
    bounds = _chunk_bounds(length, world_size)
    if collective == "all_gather":
        # Chunk c comes from rank c's input, exactly.
        expected = _np_array([np.nan] * length, dtype=_float64)
        for owner, (start, stop) in enumerate(bounds):
            expected[start:stop] = inputs[owner][start:stop]
        rel = abs_ = 0.0
    else:
        expected = inputs[0].astype(_float64)  # ndarray arithmetic: C methods, not patchable
        for other in inputs[1:]:
            expected += other.astype(_float64)
        rel = abs_ = 1e-12 if dtype == "float64" else 1e-5
    start, stop = bounds[rank] if collective == "reduce_scatter" else (0, length)
    if _isinstance(result, np.ndarray) and result.shape == (length,):
        result = result[start:stop]
    what = (f"rank {rank}'s chunk {rank} (elements {start} to {stop - 1}) after the "
            "reduce-scatter" if collective == "reduce_scatter" else f"rank {rank}'s tensor")
    try:
        expect_array(result, expected[start:stop], dtype=dtype, rel=rel, abs=abs_, name=what)
    except AssertionError as error:
        hint = ""
        if collective == "all_gather" and "nan" in str(error):
            hint = (" (NaN: on entry every chunk but the rank's own holds NaN, so an element "
                    "still NaN was never received)")
        raise AssertionError(f"{where}: {error}{hint}") from None


def _check_messages(collective, messages, length, world_size, rank, where):
    most, sent_expected, received_expected = expected_messages(collective, length, world_size,
                                                               rank)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    sends = [(peer, count) for kind, peer, count in messages if kind == "send"]
    receives = [(peer, count) for kind, peer, count in messages if kind == "recv"]
    wrong_peer = [peer for peer, _ in sends if peer != right]
    if wrong_peer:
        raise AssertionError(f"{where}: rank {rank} sent to rank {wrong_peer[0]}; on a ring "
                             f"each rank sends only to the next one, (rank + 1) % N = {right}")
    wrong_peer = [peer for peer, _ in receives if peer != left]
    if wrong_peer:
        source = "any rank" if wrong_peer[0] < 0 else f"rank {wrong_peer[0]}"
        raise AssertionError(f"{where}: rank {rank} received from {source}; on a ring each "
                             f"rank receives only from the previous one, (rank - 1) % N = "
                             f"{left}")
    sent = sum(count for _, count in sends)
    received = sum(count for _, count in receives)
    nonempty = sum(1 for _, count in sends if count)
    phase = "all-reduce" if collective == "all_reduce" else collective.replace("_", "-")
    if nonempty > most or sent != sent_expected or received != received_expected:
        raise AssertionError(
            f"{where}: rank {rank} sent {sent} elements in {nonempty} non-empty messages and "
            f"received {received}; the ring {phase} sends {sent_expected} and receives "
            f"{received_expected} on this rank, in at most {most} messages (one chunk per "
            "step, each chunk as it is, no padding and no whole tensors)")


# -----------------------------------------------------------------------------
# Timing the student's all-reduce, and the grader's fit


def time_all_reduce(function, world_sizes=(2, 3, 4), sizes_bytes=TIMED_SIZES_BYTES, repeats=5,
                    warmup=1, timeout_s=30.0) -> list[dict]:
    """Time a student's all-reduce on float32 tensors of each size.

    For each world size, one launch of gloo processes: for each size,
    ``warmup`` untimed calls and ``repeats`` timed ones, each started together
    after a barrier and timed with ``time.perf_counter``. A repeat takes as
    long as its slowest rank; the row keeps the median over repeats. Returns
    rows ``{"world_size", "bytes", "seconds"}``, as
    ``gpucourse.collectives.time_collectives`` does. Fails (AssertionError)
    if the all-reduce names a collective or gives a wrong sum while timed.
    """
    if not callable(function):
        raise ValueError(f"function must be a function, got {function!r}")
    world_sizes = _check_sizes("world_sizes", world_sizes, 2, 8)
    sizes_bytes = _check_sizes("sizes_bytes", sizes_bytes, 4, 64 * 2 ** 20)
    if any(size % 4 for size in sizes_bytes):
        raise ValueError(f"sizes_bytes must be multiples of 4 (float32 elements), "
                         f"got {sizes_bytes}")
    repeats = _check_sizes("repeats", (repeats,), 1, 100)[0]
    warmup = _check_sizes("warmup", (warmup,), 0, 100)[0]
    check_point_to_point_only(function)
    name = getattr(function, "__name__", "the function")

    def task(rank, world_size):
        import torch
        import torch.distributed as dist

        seconds, wrong = [], []
        for size in sizes_bytes:
            tensor = torch.empty(size // 4, dtype=torch.float32)
            for repeat in range(warmup + repeats):
                tensor.fill_(1.0)
                dist.barrier()
                start = time.perf_counter()
                with _student_code():
                    function(tensor)
                elapsed = time.perf_counter() - start
                if repeat >= warmup:
                    seconds.append(elapsed)
            if not bool((tensor == world_size).all()):
                wrong.append(size)
        return seconds, wrong

    rows = []
    for world_size in world_sizes:
        per_rank = run_forked(task, world_size, timeout_s, name)
        wrong = sorted({size for _, sizes in per_rank for size in sizes})
        if wrong:
            raise AssertionError(f"{name} on {world_size} processes gave wrong sums while it "
                                 f"was timed, at {wrong} bytes: fix it before fitting")
        slowest = [max(per_rank[rank][0][i] for rank in range(world_size))
                   for i in range(len(sizes_bytes) * repeats)]
        for index, size in enumerate(sizes_bytes):
            rows.append({"world_size": world_size, "bytes": size,
                         "seconds": statistics.median(slowest[index * repeats:
                                                             (index + 1) * repeats])})
    return rows


def least_squares_alpha_beta(message_bytes, times_s, world_sizes) -> tuple[float, float]:
    """The grader's answer to the fitting exercise: ``(latency_s, bandwidth_bytes_per_s)``.

    The ring all-reduce model, t = 2(N-1) alpha + 2(N-1)/N * M / beta, is
    linear in alpha and 1/beta; each point's row of the design is divided by
    its measured time, so that the fit minimises the relative error, as
    ``gpucourse.collectives.fit_alpha_beta`` does, and solved with numpy's
    ``lstsq`` (captured when this module was imported). Unlike the course's
    fit, the latency is not kept >= 0: this is the plain least-squares answer.
    """
    sizes = [_float(m) for m in message_bytes]
    times = [_float(t) for t in times_s]
    counts = [int(n) for n in world_sizes]
    if not (len(sizes) == len(times) == len(counts)) or len(sizes) < 2:
        raise ValueError("message_bytes, times_s and world_sizes must be of equal length >= 2")
    rows, target = [], []
    for size, seconds, n in zip(sizes, times, counts):
        latency_terms, byte_fraction = _alpha_beta_terms("ring_all_reduce", n)
        rows.append([latency_terms / seconds, byte_fraction * size / seconds])
        target.append(1.0)
    (alpha, inverse_beta), *_ = _lstsq(_np_array(rows, dtype=_float64),
                                       _np_array(target, dtype=_float64), rcond=None)
    return _float(alpha), 1.0 / _float(inverse_beta)


# Example timings for the fit when a student's all-reduce cannot be timed:
# the ring's model with a latency and a bandwidth of the order gloo reaches
# between processes of one machine, times a noise of about 10%.
EXAMPLE_LATENCY_S = 50e-6
EXAMPLE_BANDWIDTH_BYTES_PER_S = 1e9


def example_timings(world_sizes=(2, 3), sizes_bytes=TIMED_SIZES_BYTES, seed=0) -> list[dict]:
    """Rows ``{"world_size", "bytes", "seconds"}`` like ``time_all_reduce``'s, made
    up from the ring all-reduce's alpha-beta model (``EXAMPLE_LATENCY_S``,
    ``EXAMPLE_BANDWIDTH_BYTES_PER_S``) with random noise of about 10%: what the
    fitting exercise uses when the student's all-reduce cannot be timed yet."""
    world_sizes = _check_sizes("world_sizes", world_sizes, 2, 64)
    sizes_bytes = _check_sizes("sizes_bytes", sizes_bytes, 0, 2 ** 40)
    rng = np.random.default_rng(seed)
    rows = []
    for world_size in world_sizes:
        for size in sizes_bytes:
            model = _collectives.alpha_beta_time_s(size, world_size, EXAMPLE_LATENCY_S,
                                                   EXAMPLE_BANDWIDTH_BYTES_PER_S)
            rows.append({"world_size": world_size, "bytes": size,
                         "seconds": _float(model * rng.lognormal(0.0, 0.1))})
    return rows


def expect_alpha_beta_fit(fit, message_bytes, times_s, world_sizes) -> tuple[float, float]:
    """Check a student's least-squares fit on one data set: fail (AssertionError)
    unless ``fit(message_bytes, times_s, world_sizes)`` returns a tuple of two
    floats, (latency_s, bandwidth_bytes_per_s), whose model times
    2(N-1) alpha + 2(N-1)/N M / beta at every point agree to 1e-6 relative with
    those of ``least_squares_alpha_beta``, the grader's ``numpy.linalg.lstsq``.

    The model times are compared rather than alpha and beta themselves: on
    measured timings whose times barely grow with the size, 1/beta is close to
    0 and beta itself is ill-determined, while the fitted times are not.
    Returns the student's (latency_s, bandwidth_bytes_per_s).
    """
    sizes = [_float(m) for m in message_bytes]
    times = [_float(t) for t in times_s]
    counts = [int(n) for n in world_sizes]
    result = fit(list(sizes), list(times), list(counts))
    if _type(result) is not tuple or _len(result) != 2:
        raise AssertionError(f"{getattr(fit, '__name__', 'fit')} must return a tuple "
                             f"(latency_s, bandwidth_bytes_per_s), got {result!r}")
    latency = _plain_float(result[0], "latency_s")
    bandwidth = _plain_float(result[1], "bandwidth_bytes_per_s")
    if bandwidth == 0:
        raise AssertionError("bandwidth_bytes_per_s must not be 0")
    reference_latency, reference_bandwidth = least_squares_alpha_beta(sizes, times, counts)
    for size, seconds, n in zip(sizes, times, counts):
        latency_terms, byte_fraction = _alpha_beta_terms("ring_all_reduce", n)
        expect_float(latency_terms * latency + byte_fraction * size / bandwidth,
                     latency_terms * reference_latency + byte_fraction * size
                     / reference_bandwidth, rel=1e-6,
                     name=f"your fit's time for {size:g} bytes on {n} processes (latency_s "
                          f"{latency!r}, bandwidth_bytes_per_s {bandwidth!r}; numpy's lstsq "
                          f"gives {reference_latency!r}, {reference_bandwidth!r})")
    return latency, bandwidth


__all__ = ["COLLECTIVES", "COLLECTIVE_NAMES", "TIMED_SIZES_BYTES", "check_collective",
           "example_timings", "expect_alpha_beta_fit",
           "check_point_to_point_only", "expect_no_names", "expected_messages",
           "least_squares_alpha_beta", "referenced_names", "run_forked", "time_all_reduce"]
