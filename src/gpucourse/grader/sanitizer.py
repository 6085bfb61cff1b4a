"""A sanitizer for Numba's CUDA simulator: the mistakes it lets pass and a GPU punishes.

The simulator runs each CUDA thread as a Python thread, and it is kinder than
a GPU in three ways that hide real bugs (compute-sanitizer's initcheck,
synccheck and racecheck find them on a GPU):

* **initcheck.** Its shared memory starts as zeros, so a softmax whose extra
  threads never write their slots still sums the right numbers; on a GPU
  those slots hold garbage. Here each shared array starts as NaN (floats) and
  every slot is tracked: reading one that no thread of the block has written
  is reported, with the thread, the block and the array.
* **synccheck.** Its barrier waits only for the threads still running, so a
  ``cuda.syncthreads()`` inside ``if tid < n:``, or a ``return`` before a
  barrier, runs as if nothing were wrong; on a GPU the block hangs or reads
  half-written memory. Here each thread's barriers are recorded, and a block
  whose threads did not reach the same barriers is reported, naming which
  threads reached which.
* **racecheck.** Its threads interleave in whatever order Python's scheduler
  picks, so a missing barrier shows up only sometimes. Here each access to a
  shared slot is recorded with the thread's barrier count: two threads
  touching one slot between the same two barriers, one of them writing, is a
  race, reported with the slot, both threads and the lines (a thread writing the
  value another thread wrote, as when every thread copies the same tile, is
  not: the slot ends the same whichever goes first).

An index outside a shared array (the simulator wraps negative ones around) is
an IndexError naming the array, the thread and the block. Use it as::

    with sanitized():                       # raises SanitizerError at the first bad block
        kernel[grid, block](x, out)
    with sanitized(raise_errors=False) as found:
        kernel[grid, block](x, out)
    print(found.report())                   # or collect everything

The graders run every simulated launch of a student's kernel under it
(:func:`gpucourse.grader.tracing.simulated_launch`). With the environment
variable ``GPUCOURSE_SANITIZE=1`` (``make check`` sets it), importing this
module sanitizes every simulated launch of the process, the notebook's own
cells included. It patches the simulator only while active; only shared
memory is checked (global arrays are the tracer's business), atomics never
race with each other, and aliasing between calls that view the dynamic
shared buffer (``cuda.shared.array(0, ...)``) is not tracked.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

ENV_VAR = "GPUCOURSE_SANITIZE"
CHECKS = ("synccheck", "racecheck", "initcheck")  # the order a report lists them in
SHOWN_FINDINGS = 4  # findings a message spells out; the rest are counted


class SanitizerError(AssertionError):
    """A kernel did something on the simulator that a GPU would punish."""


# --------------------------------------------------------------------------
# Naming threads, lines and arrays in messages
# --------------------------------------------------------------------------

def thread_name(key: tuple) -> str:
    """How a thread is named in messages: block (0, 0, 0), thread (3, 0, 0)."""
    if key == ("host",):
        return "the host"
    block, index = key
    return f"block {block}, thread {index}"


def shared_array_name(frame) -> str:
    """The variable a ``cuda.shared.array`` call is assigned to, from its source line."""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    match = re.match(r"\s*([A-Za-z_]\w*)\s*=", line)
    return f"shared {match.group(1) if match else f'line {frame.f_lineno}'}"


def _where(site) -> str:
    """'line 14 of softmax (`best[t] = ...`)' for a (code, line number) site."""
    code, line = site
    text = linecache.getline(code.co_filename, line).strip()
    return f"line {line} of {code.co_name}" + (f" (`{text}`)" if text else "")


def _threads(indices) -> str:
    """A few thread indices in words: a run along x as a range, else listed."""
    indices = sorted(indices, key=lambda t: (t[2], t[1], t[0]))
    if len(indices) == 1:
        return f"thread {indices[0]}"
    xs = [t[0] for t in indices]
    if len({t[1:] for t in indices}) == 1 and xs == list(range(xs[0], xs[0] + len(xs))):
        return f"threads {indices[0]} to {indices[-1]}"
    shown = ", ".join(map(str, indices[:4]))
    return f"threads {shown}" + (f" and {len(indices) - 4} more" if len(indices) > 4 else "")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# --------------------------------------------------------------------------
# What was found
# --------------------------------------------------------------------------

@dataclass
class Finding:
    """One problem: which check, where (a key that repeats of it share), the
    message, and the place of the occurrence it spells out among its repeats
    (``order``: the lowest block, slot and threads, whatever order the
    simulator's threads ran in)."""

    check: str
    key: tuple
    message: str
    times: int = 1
    order: tuple = ()


@dataclass
class Sanitizer:
    """What the checks found while a :func:`sanitized` block was active."""

    raise_errors: bool = True
    findings: list = field(default_factory=list)
    _seen: dict = field(default_factory=dict)

    def add(self, check: str, key: tuple, message: str, order: tuple = ()) -> None:
        """Record a finding; a repeat of one already seen (same check and key) is
        counted, and the message kept is that of the occurrence first in
        `order`, so that a report reads the same from one run to the next."""
        found = self._seen.get((check, key))
        if found is not None:
            found.times += 1
            if order < found.order:
                found.message, found.order = message, order
            return
        self._seen[(check, key)] = finding = Finding(check, key, message, order=order)
        self.findings.append(finding)

    def report(self, findings=None, kernel: str = "the kernel") -> str:
        """The findings as a message, synccheck first, then racecheck, initcheck."""
        findings = sorted(self.findings if findings is None else findings,
                          key=lambda f: CHECKS.index(f.check))
        if not findings:
            return f"the sanitizer found nothing wrong in {kernel}"
        lines = [f"{kernel} works on Numba's simulator only by luck; on a GPU it would not. "
                 "The sanitizer found:"]
        for finding in findings[:SHOWN_FINDINGS]:
            again = f" (and {finding.times - 1} more times)" if finding.times > 1 else ""
            lines.append(f"- {finding.check}: {finding.message}{again}")
        if len(findings) > SHOWN_FINDINGS:
            lines.append(f"- and {len(findings) - SHOWN_FINDINGS} more problems of these kinds")
        return "\n".join(lines)


_current_thread = threading.current_thread
_getframe = sys._getframe
_lock = threading.RLock()
_active: list[Sanitizer] = []  # the innermost last
_everywhere: list[Sanitizer] = []  # the process-wide one, under GPUCOURSE_SANITIZE=1
_undo: list = []  # (object, attribute, original) of the patches in place


def active() -> bool:
    """Whether simulated launches are being sanitized now."""
    return bool(_active)


def _report(check: str, key: tuple, message: str, order: tuple = ()) -> None:
    with _lock:
        if _active:
            _active[-1].add(check, key, message, order)


# --------------------------------------------------------------------------
# Shared memory that remembers who wrote and read each slot
# --------------------------------------------------------------------------

class WatchedArray:
    """What the arrays that watch a kernel's accesses share: ``len``, iteration element by
    element (each one an access), and NumPy's functions, which read the whole array
    through ``__array__``."""

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(x) if isinstance(x, WatchedArray) else x for x in inputs]
        return getattr(ufunc, method)(*plain, **kwargs)


class SanitizedShared(WatchedArray):
    """A shared array as a kernel sees it, checking each access (see the module's notes).

    Per slot it keeps whether a thread of the current block wrote it, and the
    last writer and the readers since the last barrier, each with its barrier
    count. The state starts afresh (and float data as NaN) when a new block's
    threads first touch the array: the simulator runs blocks one at a time and
    keeps one array per launch.
    """

    def __init__(self, inner, data: np.ndarray, name: str, fill: bool = True):
        self.inner = inner  # what accesses go to: the data, or a tracer's CountingArray
        self.data = data
        # NaN where no thread wrote; not in the dynamic buffer, which other views share.
        self.fill = fill and data.dtype.kind in "fc"
        self.name = name
        self.shape = data.shape
        self.size = data.size
        self.ndim = data.ndim
        self.dtype = data.dtype
        self._lock = threading.Lock()
        self._manager = None
        self._start_block(None)

    def _start_block(self, manager) -> None:
        n = self.size
        self.written = bytearray(n)
        self.writer = [-1] * n
        self.write_epoch = [-1] * n
        self.write_site = [None] * n
        self.write_value = [None] * n
        self.reader = [-1] * n
        self.read_epoch = [-1] * n
        self.read_site = [None] * n
        self.many_readers = bytearray(n)
        if manager is not None and self.fill:
            self.data[...] = np.nan  # what a GPU leaves there is garbage
        self._manager = manager  # last: a thread that sees it sees the fresh state

    def __repr__(self):
        return f"SanitizedShared({self.name!r}, shape={self.shape}, dtype={self.dtype})"

    def _flat(self, index, thread) -> list:
        """The flat positions an index names; an index outside the array raises."""
        key = index if type(index) is tuple else (index,)
        if len(key) == self.ndim:
            flat = 0
            for axis, n in enumerate(self.shape):
                i = key[axis]
                if type(i) is not int:
                    if not hasattr(i, "__index__"):
                        break  # a slice or an index array
                    i = i.__index__()
                if not 0 <= i < n:
                    self._outside(key, axis, thread)
                flat = flat * n + i
            else:
                return (flat,)
        # A slice, a partial index or an index array: every element it covers.
        return [int(p) for p in np.ravel(np.arange(self.size).reshape(self.shape)[index])]

    def _outside(self, key, axis, thread):
        who = thread_name((tuple(thread.blockIdx), tuple(thread.threadIdx)))
        raise IndexError(f"{who} used index {tuple(int(j) for j in key)} of {self.name}, whose "
                         f"shape is {self.shape}: axis {axis} must be in [0, {self.shape[axis]}) "
                         "(check your bounds test)")

    def _element(self, flat: int) -> str:
        position = np.unravel_index(flat, self.shape)
        return f"{self.name}[{', '.join(str(int(i)) for i in position)}]"

    def _check(self, index, writing: bool, site, value=None) -> None:
        thread = _current_thread()
        try:
            me, epoch, atomic = thread.thread_id, thread._sanitizer_epoch, thread._sanitizer_atomic
        except AttributeError:
            return  # the host, or a thread of a launch begun before the sanitizer
        flats = self._flat(index, thread)
        if thread._manager is not self._manager:
            with self._lock:  # the first access of a new block starts afresh, once
                if thread._manager is not self._manager:
                    self._start_block(thread._manager)
        # No lock per access (Python's own lock keeps each step whole): two threads
        # updating a slot at the same moment are racing anyway, and one of them is seen.
        if writing:
            for flat in flats:
                self._write(flat, thread, epoch, me, site, atomic, value)
            return
        for flat in flats:
            self._read(flat, thread, epoch, me, site, atomic)

    def _race(self, flat, thread, other: int, other_site, verbs: str, site) -> None:
        block = tuple(thread.blockIdx)
        mine = tuple(thread.threadIdx)
        theirs = tuple(int(i) for i in np.unravel_index(other, thread._manager._block_dim[::-1])
                       )[::-1] if other >= 0 else None
        key = (self.name, verbs, other_site, site)
        if verbs == "wrote/wrote" and theirs is not None and mine < theirs:
            # Two writes read the same either way round: the lower thread first,
            # whichever the simulator happened to run first.
            theirs, mine, other_site, site = mine, theirs, site, other_site
        first, second = verbs.split("/")
        who = f"thread {theirs}" if theirs is not None else "another thread"
        message = (f"block {block}: {who} {first} {self._element(flat)} at "
                   f"{_where(other_site) if other_site else 'an earlier line'}, and thread "
                   f"{mine} {second} it at {_where(site)}, with no cuda.syncthreads() "
                   "between them: which one goes first is left to chance (put a barrier "
                   "between the write and the other thread's access)")
        _report("racecheck", key, message, (block, flat, theirs or (), mine))

    def _read(self, flat, thread, epoch, me, site, atomic) -> None:
        if not self.written[flat]:
            block = tuple(thread.blockIdx)
            message = (f"block {block}, thread {tuple(thread.threadIdx)} read "
                       f"{self._element(flat)} at {_where(site)}, which no thread of the "
                       "block had written: on a GPU it holds garbage (the simulator gives "
                       "zeros). Write every slot a thread reads, or do not read it")
            _report("initcheck", (self.name, site), message, (block, flat, tuple(thread.threadIdx)))
        if atomic:
            return
        if self.write_epoch[flat] == epoch and self.writer[flat] != me:
            self._race(flat, thread, self.writer[flat], self.write_site[flat], "wrote/read",
                       site)
        if self.read_epoch[flat] != epoch:
            self.read_epoch[flat] = epoch
            self.reader[flat] = me
            self.read_site[flat] = site
            self.many_readers[flat] = 0
        elif self.reader[flat] != me:
            self.many_readers[flat] = 1

    def _write(self, flat, thread, epoch, me, site, atomic, value) -> None:
        self.written[flat] = 1
        if atomic:
            return
        if self.write_epoch[flat] == epoch and self.writer[flat] != me:
            if np.size(value) == 1 and self.write_value[flat] == value:
                return  # the same value again: whichever goes first, the slot ends the same
            self._race(flat, thread, self.writer[flat], self.write_site[flat], "wrote/wrote",
                       site)
        elif self.read_epoch[flat] == epoch and (self.reader[flat] != me
                                                 or self.many_readers[flat]):
            other = self.reader[flat] if self.reader[flat] != me else -1
            self._race(flat, thread, other, self.read_site[flat], "read/wrote", site)
        self.write_value[flat] = value  # before the writer: whoever sees this writer sees it
        self.writer[flat] = me
        self.write_epoch[flat] = epoch
        self.write_site[flat] = site

    def _scalar(self, index):
        """The flat position of an index of whole numbers (Python's or NumPy's) inside the
        array, else None (_check reads slices, and raises for indexes outside)."""
        try:
            if type(index) is not tuple or len(index) == 1:
                if self.ndim == 1:
                    i = (index[0] if type(index) is tuple else index).__index__()
                    return i if 0 <= i < self.size else None
            elif len(index) == 2 == self.ndim:
                i, j = index[0].__index__(), index[1].__index__()
                rows, columns = self.shape
                return i * columns + j if 0 <= i < rows and 0 <= j < columns else None
        except (AttributeError, TypeError):
            pass
        return None

    def __getitem__(self, index):
        # The common case inline (a whole-number index, a thread of the current block,
        # a slot written before the last barrier): this runs at every shared read.
        thread = _current_thread()
        flat = self._scalar(index)
        if flat is not None:
            try:
                manager, epoch = thread._manager, thread._sanitizer_epoch
            except AttributeError:
                return self.inner[index]  # the host, or a launch begun before the sanitizer
            if manager is self._manager and self.written[flat] \
                    and self.write_epoch[flat] != epoch and not thread._sanitizer_atomic:
                if self.read_epoch[flat] != epoch:
                    caller = _getframe(1)
                    self.read_epoch[flat] = epoch
                    self.reader[flat] = thread.thread_id
                    self.read_site[flat] = (caller.f_code, caller.f_lineno)
                    self.many_readers[flat] = 0
                elif self.reader[flat] != thread.thread_id:
                    self.many_readers[flat] = 1
                return self.inner[index]
        caller = _getframe(1)
        self._check(index, False, (caller.f_code, caller.f_lineno))
        return self.inner[index]

    def __setitem__(self, index, value):
        caller = _getframe(1)
        self._check(index, True, (caller.f_code, caller.f_lineno), value)
        self.inner[index] = value

    def __array__(self, dtype=None, copy=None):
        caller = sys._getframe(1)
        self._check(Ellipsis, False, (caller.f_code, caller.f_lineno))
        data = np.asarray(self.inner)
        return data if dtype is None else data.astype(dtype)



def shared_data(fake_shared, shape, dtype) -> np.ndarray:
    """The memory of a new shared array of the simulator's launch ``fake_shared``: a
    view of the dynamic buffer for shape 0, else zeros."""
    if shape == 0:
        return np.frombuffer(fake_shared._dynshared.data, dtype=dtype,
                             count=fake_shared._dynshared_size // dtype.itemsize)
    return np.zeros(shape, dtype)


def watched(inner, data: np.ndarray, frame, dynamic: bool = False) -> SanitizedShared:
    """``inner`` (a shared array, or a tracer's CountingArray over ``data``) as a kernel
    sees it while sanitizing; ``frame`` is that of the ``cuda.shared.array`` call,
    ``dynamic`` whether it views the dynamic shared buffer."""
    return SanitizedShared(inner, data, shared_array_name(frame), fill=not dynamic)


# --------------------------------------------------------------------------
# Barriers and blocks
# --------------------------------------------------------------------------

def _simulator_folder() -> str:
    from numba.cuda import simulator

    return os.path.dirname(simulator.__file__)


def _patches():
    """[(object, attribute, replacement)] that make the simulator sanitize."""
    from gpucourse import device
    from gpucourse import simulator as simulator_fixes

    device.get_cuda()  # the choice of simulator or GPU is made before Numba loads
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.kernel import BlockManager, BlockThread

    simulator = _simulator_folder()
    sync, run_thread, run_block = BlockThread.syncthreads, BlockThread.run, BlockManager.run

    def syncthreads(self):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(simulator):
            frame = frame.f_back
        site = (frame.f_code, frame.f_lineno) if frame is not None else None
        self.__dict__.setdefault("_sanitizer_barriers", []).append(site)
        sync(self)
        self._sanitizer_epoch += 1

    def thread_run(self):
        self._sanitizer_epoch, self._sanitizer_atomic = 0, False
        try:
            run_thread(self)
        finally:
            self._manager._sanitizer_threads.append(
                (tuple(self.threadIdx), self.__dict__.get("_sanitizer_barriers", [])))

    def block_run(self, grid_point, *args):
        with _lock:
            sanitizer = _active[-1] if _active else None
        before = len(sanitizer.findings) if sanitizer else 0
        self._sanitizer_threads = []
        kernel = getattr(self._f, "__name__", "the kernel")
        try:
            run_block(self, grid_point, *args)
        except BaseException as error:
            if sanitizer is not None and len(sanitizer.findings) > before:
                raise SanitizerError(sanitizer.report(sanitizer.findings[before:], kernel)
                                     + f"\nThen a thread failed: {error}") from error
            raise
        _check_barriers(tuple(int(i) for i in grid_point), self._sanitizer_threads)
        if sanitizer is not None and sanitizer.raise_errors and len(sanitizer.findings) > before:
            raise SanitizerError(sanitizer.report(sanitizer.findings[before:], kernel))

    def shared_array(fake_shared, shape, dtype, frame):
        data = shared_data(fake_shared, shape, dtype)
        return watched(data, data, frame, dynamic=shape == 0)

    patched = [(BlockThread, "syncthreads", syncthreads), (BlockThread, "run", thread_run),
               (BlockManager, "run", block_run),
               (kernelapi.FakeCUDAShared, "array",
                simulator_fixes.shared_array_by_calling_line(shared_array))]
    atomic = kernelapi.FakeCUDAAtomic
    for name in [n for n in vars(atomic) if not n.startswith("_")]:
        patched.append((atomic, name, _atomic(getattr(atomic, name))))
    return patched


def _atomic(operation):
    """An atomic operation whose accesses do not count as racing."""
    def run(self, *args):
        thread = threading.current_thread()
        thread._sanitizer_atomic = True
        try:
            return operation(self, *args)
        finally:
            thread._sanitizer_atomic = False
    return run


def _check_barriers(block: tuple, threads: list) -> None:
    """Report a block whose threads did not all pass through the same barriers."""
    if not threads:
        return
    longest = max(len(barriers) for _, barriers in threads)
    for step in range(longest):
        at = {}
        for index, barriers in threads:
            at.setdefault(barriers[step] if step < len(barriers) else None, []).append(index)
        if len(at) == 1:
            continue
        parts = []
        for site, indices in sorted(at.items(), key=lambda item: item[0] is None):
            if site is None:
                parts.append(f"{_threads(indices)} had finished the kernel without reaching it "
                             "(an early return, or a barrier inside an `if` they skipped)")
            else:
                parts.append(f"{_threads(indices)} waited at {_where(site)}")
        message = (f"block {block}: at the block's {_ordinal(step + 1)} barrier, "
                   + "; ".join(parts) + ". On a GPU every thread of a block must reach every "
                   "cuda.syncthreads(), or the block hangs or reads half-written shared "
                   "memory: keep the barrier outside any `if` that threads disagree on, and "
                   "no `return` before it")
        _report("synccheck", (frozenset(at),), message)
        return


# --------------------------------------------------------------------------
# Switching it on
# --------------------------------------------------------------------------

def _install() -> None:
    for owner, name, replacement in _patches():
        _undo.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, replacement)


def _uninstall() -> None:
    while _undo:
        owner, name, original = _undo.pop()
        setattr(owner, name, original)


@contextmanager
def sanitized(raise_errors: bool = True):
    """Sanitize every simulated kernel launch inside; yields the :class:`Sanitizer`.

    With ``raise_errors`` (the default), a launch raises :class:`SanitizerError`
    after the first block in which something was found, the message naming
    each problem; without, the launches run on and ``findings`` collects them.
    """
    if not isinstance(raise_errors, bool):
        raise ValueError(f"raise_errors must be True or False, got {raise_errors!r}")
    sanitizer = Sanitizer(raise_errors)
    with _lock:
        if not _undo:
            _install()
        _active.append(sanitizer)
    try:
        yield sanitizer
    finally:
        with _lock:
            _active.remove(sanitizer)
            if not _active:
                _uninstall()


def sanitize_everywhere() -> None:
    """From now on, sanitize every simulated launch of this process (raising)."""
    with _lock:
        if _everywhere:
            return
        context = sanitized()
        _everywhere.append(context)
        context.__enter__()


def requested() -> bool:
    """Whether ``GPUCOURSE_SANITIZE`` asks for every launch to be sanitized ("1"), or
    not ("0" or unset); anything else is refused."""
    value = os.environ.get(ENV_VAR, "0").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"{ENV_VAR}={value!r} is not understood; accepted values are 1 "
                         "(sanitize every simulated launch) and 0 or unset (only the graders')")
    return value == "1"


if requested():
    sanitize_everywhere()
