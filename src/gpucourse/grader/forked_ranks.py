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
* a rank raised, or exited without reporting (``os._exit``, a crash, a
  signal): the others' outcomes are collected for a moment (``SETTLE_S``),
  then one failure is reported, chosen so that the message is the same
  however the ranks raced: the lowest rank that failed on its own account.
  A rank whose error is gloo's "Connection reset/closed by peer" only lost
  its partner; if every failure is of that kind, the message says what each
  rank left waiting was waiting for;
* the deadline: the message says which rank waited in which send or receive,
  for which peer, and the cycle they form, and every rank still running
  prints its Python stack into its log (``faulthandler`` on SIGUSR1), which
  the message shows too;
* the grader itself is interrupted (nbgrader's cell timeout, a KeyboardInterrupt).

**What the ranks post.** Each rank's sends and receives (every point-to-point
call of torch.distributed ends in the process group's ``send``, ``recv`` and
``recv_anysource``) go through :func:`_track_point_to_point`, which writes on
memory shared with the grader (:class:`_Boards`) what the rank waits in, and
pairs each message with its peer's as gloo does (in order, per pair of
ranks). A send and receive that disagree on the size or the dtype never
reach gloo, which would abort the receiving rank from a thread of its own
(and its peers would see only a lost connection): the launch fails with the
first such pair, by sender and receiver, naming both tensors.

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
import re
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
# How long, after a rank fails, the others' outcomes are still collected.
SETTLE_S = 0.5
# How much of each rank's log a failure message shows.
_LOG_LINES = 15
# gloo's words for a lost connection: what a rank says when a peer failed, not a cause.
_CONSEQUENCE = re.compile(r"Connection (reset|closed) by peer|Broken pipe|Connection refused|"
                          r"ECONNRESET|EPIPE|Socket closed")
# gloo's words when a message is longer than the buffer it arrives in.
_SIZE_MISMATCH = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+)")
# Per rank, on a board shared with the grader: what it waits in (0 nothing, 1 a send,
# 2 a receive), the peer (-1 any), the elements.
_BOARD_FIELDS = 3
_WAIT_KINDS = {1: "send", 2: "recv"}
# How many of the latest sends and receives between two ranks are kept for pairing,
# and the dtypes a message is described by (others are compared by their bytes).
_SLOTS = 32
_CHANNEL_FIELDS = 2 + 2 * _SLOTS * 3
_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
           "uint8", "bool", "complex64", "complex128")
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
               parent_pid, boards):
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
        _track_point_to_point(boards, rank)
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


class MessageMismatch(RuntimeError):
    """A send and the receive it meets disagree on the size or the dtype of the message."""


class _Boards:
    """Memory shared by the ranks and the grader (made before the fork).

    ``waits``: per rank, what it waits in (kind, peer, elements; see _WAIT_KINDS).
    ``channels``: per (sender, receiver), how many sends and receives each side has
    posted, and the dtype and size of the last _SLOTS of each, so that whichever
    side posts second compares its message with the other's, as gloo pairs them
    (in order, per pair of ranks), before gloo sees it. ``any_source``: ranks that
    received from any rank, whose receives cannot be paired so. One lock for all.
    """

    def __init__(self, context, world_size: int):
        self.world_size = world_size
        self.waits = context.RawArray("l", _BOARD_FIELDS * world_size)
        self.channels = context.RawArray("l", world_size * world_size * _CHANNEL_FIELDS)
        self.any_source = context.RawArray("b", world_size)
        self.lock = context.Lock()

    def _slot(self, base: int, side: int, index: int) -> int:
        return base + 2 + side * _SLOTS * 3 + (index % _SLOTS) * 3

    def posted(self, kind: int, me: int, peer: int, tensor) -> str | None:
        """Record a send (kind 1) or receive (2) of ``tensor`` between ``me`` and ``peer``;
        returns what is wrong if it does not fit what the other side posted, else None."""
        sender, receiver = (me, peer) if kind == 1 else (peer, me)
        dtype = str(tensor.dtype).removeprefix("torch.")
        mine = (_DTYPES.index(dtype) + 1 if dtype in _DTYPES else 0, int(tensor.numel()),
                int(tensor.element_size()))
        base = (sender * self.world_size + receiver) * _CHANNEL_FIELDS
        own, other = (0, 1) if kind == 1 else (1, 0)
        with self.lock:
            index = self.channels[base + own]
            at = self._slot(base, own, index)
            self.channels[at:at + 3] = mine
            self.channels[base + own] = index + 1  # after the entry: a reader sees it whole
            paired = 0 < self.channels[base + other] - index <= _SLOTS
            at = self._slot(base, other, index)
            theirs = tuple(self.channels[at:at + 3]) if paired else None
        if theirs is None or self.any_source[receiver]:
            return None
        sent, received = (mine, theirs) if kind == 1 else (theirs, mine)
        return None if _fits(sent, received) else _mismatch(sender, receiver, index, sent,
                                                             received)

    def first_mismatch(self) -> str | None:
        """The first send and receive posted so far that do not fit (by sender, receiver,
        then order), whichever side posted last: the same, however the ranks raced."""
        channels = self.channels
        for sender in range(self.world_size):
            for receiver in range(self.world_size):
                if self.any_source[receiver]:
                    continue
                base = (sender * self.world_size + receiver) * _CHANNEL_FIELDS
                both = min(channels[base], channels[base + 1])
                for index in range(max(0, both - _SLOTS), both):
                    at, other = self._slot(base, 0, index), self._slot(base, 1, index)
                    sent, received = tuple(channels[at:at + 3]), tuple(channels[other:other + 3])
                    if not _fits(sent, received):
                        return _mismatch(sender, receiver, index, sent, received)
        return None


def _fits(sent, received) -> bool:
    """Whether a message fits its receive: the same dtype and elements (bytes for a dtype
    not in _DTYPES)."""
    if sent[0] and received[0]:
        return sent[:2] == received[:2]
    return sent[1] * sent[2] == received[1] * received[2]


def _mismatch(sender, receiver, index, sent, received) -> str:
    return (f"message {index + 1} of those from rank {sender} to rank {receiver} does "
            f"not fit its receive: rank {sender} sends {_described(sent)}, and rank "
            f"{receiver} receives it into {_described(received)}. The tensor a rank receives "
            "into must have the same number of elements and the same dtype as the tensor its "
            "peer sends (torch.empty and torch.zeros make float32 unless given dtype=...)")


def _described(entry) -> str:
    code, elements, size = entry
    dtype = _DTYPES[code - 1] if code else "elements"
    return f"{elements} {dtype} element{'s' if elements != 1 else ''} ({elements * size} bytes)"


class _Refused:
    """The handle of a send or receive that does not fit its peer's: waiting raises."""

    def __init__(self, message: str):
        self.message = message

    def wait(self, *args, **kwargs):
        raise MessageMismatch(self.message)

    def is_completed(self) -> bool:
        return False


class _TrackedWork:
    """A send's or receive's handle that writes on the board while a rank waits on it."""

    def __init__(self, work, entry, board, offset):
        self._work, self._entry, self._board, self._offset = work, entry, board, offset

    def wait(self, *args, **kwargs):
        board, offset = self._board, self._offset
        board[offset + 1], board[offset + 2] = self._entry[1:]
        board[offset] = self._entry[0]
        result = self._work.wait(*args, **kwargs)
        board[offset] = 0  # left as it is when the wait fails: the grader says what it was
        return result

    def __getattr__(self, name):
        return getattr(self._work, name)


def _track_point_to_point(boards: _Boards, rank: int) -> None:
    """In a rank: every send and receive (all of torch.distributed's point-to-point calls
    end in the process group's) is first paired with its peer's (MessageMismatch when
    they disagree), and returns a handle that records, on the board the grader reads
    at a hang, what the rank waits in."""
    from torch.distributed import distributed_c10d

    group_class = distributed_c10d.ProcessGroup

    def tracking(original, kind: int, any_source: bool):
        def call(self, tensors, *args, **kwargs):
            peer = -1 if any_source else int(
                args[0] if args else kwargs.get("dstRank", kwargs.get("srcRank", -1)))
            tag = args[-1] if len(args) > (0 if any_source else 1) else kwargs.get("tag", 0)
            wrong = None
            if any_source:
                boards.any_source[rank] = 1  # from here on, its receives cannot be paired
            elif tag == 0 and len(tensors) == 1 and 0 <= peer < boards.world_size:
                wrong = boards.posted(kind, rank, peer, tensors[0])
            entry = (kind, peer, sum(int(t.numel()) for t in tensors))
            # A message that does not fit never reaches gloo, which would abort the rank
            # that receives it: its wait raises instead, and the rank posts on meanwhile.
            work = _Refused(wrong) if wrong else original(self, tensors, *args, **kwargs)
            return _TrackedWork(work, entry, boards.waits, _BOARD_FIELDS * rank)
        return call

    group_class.send = tracking(group_class.send, 1, False)
    group_class.recv = tracking(group_class.recv, 2, False)
    group_class.recv_anysource = tracking(group_class.recv_anysource, 2, True)


def _waits(board, world_size) -> dict:
    """{rank: (kind, peer, elements)} of the ranks waiting in a send or a receive now."""
    found = {}
    for rank in range(world_size):
        kind, peer, elements = board[_BOARD_FIELDS * rank:_BOARD_FIELDS * (rank + 1)]
        if kind in _WAIT_KINDS:
            found[rank] = (_WAIT_KINDS[kind], peer, elements)
    return found


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
        boards = _Boards(context, world_size)  # what each rank posts and waits in
        processes = [context.Process(target=_rank_main, daemon=True,
                                     args=(rank, world_size, ports[rank][0], task,
                                           pipes[rank][1], logs[rank], timeout_s, os.getpid(),
                                           boards))
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
                            timeout_s, name, wait, boards)
        finally:
            _stop(processes)
            for connection in [reader for reader, _ in pipes] + [end for pair in ports
                                                                   for end in pair]:
                connection.close()
            del store
    return [values[rank] for rank in range(world_size)]


def _wait_for_ranks(processes, readers, values, logs, timeout_s, name, wait, boards):
    world_size = len(processes)
    settling = False
    pending = dict(enumerate(readers))
    joined: set[int] = set()
    # Until every rank has joined the process group, only a generous limit for the
    # start-up; from then on, timeout_s for the task (the student's code).
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    failures = []  # (clock, rank, text)
    while pending:
        remaining = deadline - time.monotonic()
        if not settling and (failures or boards.first_mismatch()):
            # Every rank's outcome, and every message posted, is collected for a moment:
            # the rank whose own error started it may report after those that only lost
            # their connection to it, and a message that does not fit may have others.
            settling = True
            deadline = min(deadline, time.monotonic() + SETTLE_S)
            remaining = deadline - time.monotonic()
        if remaining <= 0:
            if settling:
                break  # the ranks still running wait for one that failed
            if len(joined) < world_size:
                raise AssertionError(
                    f"{name} on {world_size} processes: ranks "
                    f"{sorted(set(range(world_size)) - joined)} did not join the process group "
                    f"within {JOIN_TIMEOUT_S:g} s, before any of your code ran (is the machine "
                    f"overloaded?); every process was stopped: run the cell again"
                    f"{_logs(logs, sorted(set(range(world_size)) - joined))}")
            _report_hang(processes, sorted(pending), logs, timeout_s, name,
                         _waits(boards.waits, world_size), set(values))
        sentinels = {processes[rank].sentinel: rank for rank in pending}
        ready = wait(list(pending.values()) + list(sentinels),
                     timeout=min(remaining, 0.1 if settling else 0.5))
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
                if len(joined) == world_size and not settling:
                    deadline = time.monotonic() + timeout_s
                continue
            del pending[rank]
            if status == "ok":
                values[rank] = value
            elif status == "died":
                processes[rank].join(timeout=1)
                failures.append((clock, rank, _died(rank, world_size, processes[rank].exitcode,
                                                    logs[rank])))
            else:
                failures.append((clock, rank, f"rank {rank} of {world_size} raised an error in "
                                              f"{name}:\n{_student_part(value)}"))
    mismatch = boards.first_mismatch()
    if mismatch:
        raise AssertionError(f"{name} on {world_size} processes: {mismatch}\nEvery process "
                             "was stopped.")
    if failures:
        raise AssertionError(_first_failure(failures, world_size, name, logs,
                                            _waits(boards.waits, world_size), set(values),
                                            set(pending)))


def _died(rank, world_size, exit_code, log) -> str:
    """What a rank that exited without a result did, with gloo's own words if it crashed."""
    text = f"rank {rank} of {world_size} exited (exit code {exit_code}) without reporting a result"
    crash = re.search(r"what\(\):\s+(?:\[enforce fail at [^\]]*\]\s*)?(.*)", _tail(log))
    if crash:
        text += f": it crashed in gloo: {crash.group(1).strip()}"
        sizes = _SIZE_MISMATCH.search(crash.group(1))
        if sizes:
            text += (f"\nA message of {sizes.group(1)} bytes arrived in a receive buffer of "
                     f"{sizes.group(2)} bytes. The tensor a rank receives into must have the "
                     "same number of elements and the same dtype as the tensor its peer sends "
                     "(torch.empty and torch.zeros make float32 unless told dtype=...)")
    return text


def _first_failure(failures, world_size, name, logs, waits, finished, pending) -> str:
    """The message for a failed launch, the same whatever order the ranks failed in: the
    lowest rank that failed on its own account, with its output (a rank that lost its
    connection to a peer failed only because of it); if none did, what each rank left
    waiting waited for."""
    own = [f for f in failures if not _CONSEQUENCE.search(f[2])]
    if not own:
        stuck = sorted({rank for _, rank, _ in failures} | pending)
        return (f"{name} on {world_size} processes: ranks {stuck} were left waiting for "
                "peers that had stopped, and were stopped.\n"
                + _who_waited(stuck, waits, finished).rstrip())
    _, first_rank, text = min(own, key=lambda failure: failure[1])
    return (f"{name} on {world_size} processes: {text}\nEvery process was stopped."
            f"{_logs(logs, [first_rank])}")


def _student_part(text: str) -> str:
    """A rank's traceback without the grader's own frames at the top."""
    lines = text.rstrip().splitlines()
    for index, line in enumerate(lines[1:], 1):
        if line.startswith('  File "') and not line.startswith(_OWN_FRAME):
            return "\n".join(lines[:1] + lines[index:])
    return "\n".join(lines)


def _report_hang(processes, running, logs, timeout_s, name, waits, finished):
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
        f"ranks {running} were still running and were stopped.\n"
        + _who_waited(running, waits, finished) +
        "A rank that waits forever is "
        "usually a receive with no matching send, or every rank in a blocking dist.send or "
        "dist.recv at once (on gloo, dist.send waits until the receiver posts its recv, at "
        "every size): post the send and the receive together (dist.isend and dist.irecv, or "
        "dist.batch_isend_irecv), then wait on both."
        + ("\n" + "\n".join(stacks) if stacks else ""))


def _who_waited(running, waits, finished) -> str:
    """Which rank waited on which peer, and the cycle they form, if any."""
    lines = []
    for rank in running:
        if rank not in waits:
            lines.append(f"rank {rank} was running its own code, not waiting in a send or "
                         "a receive")
            continue
        kind, peer, elements = waits[rank]
        whom = "any rank" if peer < 0 else f"rank {peer}"
        what = f"{elements} element{'s' if elements != 1 else ''}"
        if kind == "send":
            line = f"rank {rank} waited in a send of {what} to {whom}"
        else:
            line = f"rank {rank} waited in a receive of {what} from {whom}"
        if peer in finished:
            line += ", which had already returned: nothing will ever match it"
        lines.append(line)
    cycle = _cycle({rank: waits[rank][1] for rank in running if rank in waits})
    if cycle:
        chain = " -> ".join(f"rank {rank}" for rank in cycle + cycle[:1])
        lines.append(f"They wait on each other in a cycle ({chain}, each waiting for the "
                     "next): none can go on until another does")
    return "".join(f"{line}.\n" for line in lines)


def _cycle(waits_on: dict) -> list:
    """The ranks of the first cycle in {rank: the peer it waits on}, from the lowest."""
    for start in sorted(waits_on):
        path, rank = [], start
        while rank in waits_on and rank not in path:
            path.append(rank)
            rank = waits_on[rank]
        if rank in path:
            cycle = path[path.index(rank):]
            lowest = cycle.index(min(cycle))
            return cycle[lowest:] + cycle[:lowest]
    return []


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
            if not student:
                continue  # the handle that records the wait (_TrackedWork.wait)
            break
        # Of torch's own frames, only the innermost: the call the rank waits in.
        if line.startswith(torch_frame) and student and student[-1].startswith(torch_frame):
            continue
        student.append(line)
    return "\n".join(student[:_LOG_LINES])
