"""What each thread of a kernel reads and writes, counted on the simulator.

Value tests alone do not prove a kernel. On Numba's simulator a kernel is
ordinary Python, so a "kernel" whose first thread calls NumPy on the whole
array gives the right answer. So the graders also look at what each thread
touches (:func:`trace`). The kernel runs on the simulator with its arrays
wrapped in :class:`CountingArray`, which records every element each thread
reads or writes, and so are the shared arrays the kernel declares.
:meth:`Trace.expect` then fails a kernel whose threads read more than the
exercise allows, naming the thread and what it read::

    run = trace(add_ten, 1, 8, a, out)            # grid, block, then the arguments
    run.expect(reads={"a": 1}, writes={"out": 1})

Numpy-in-disguise shows up here: a thread that hands a whole array to NumPy
is recorded as reading every element of it.

This module is apart from :mod:`gpucourse.grader.ptx`, the other way of
looking inside a kernel, because it runs the kernel (on the simulator, in the
notebook's process) where that one compiles it and reads the result. Its
:func:`stopping_simulated_threads` also serves every check that launches a
student's kernel: a launch that fails or is interrupted leaves no simulated
thread running behind it.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

# gpucourse.simulator loads nothing of Numba when imported: gpucourse.device still
# chooses the simulator or the GPU (and installs the simulator's fixes) first.
from gpucourse.simulator import shared_array_by_calling_line
from gpucourse.grader import sanitizer
from gpucourse.grader.own_work import global_names
from gpucourse.grader.sanitizer import shared_array_name, thread_name  # noqa: F401 (re-exported)

# How many accesses of one thread a message lists.
SHOWN_ACCESSES = 6


# --------------------------------------------------------------------------
# What each thread touches: counting arrays on the simulator
# --------------------------------------------------------------------------

def _current_thread() -> tuple:
    """(blockIdx, threadIdx) of the simulated CUDA thread running now."""
    thread = threading.current_thread()
    block = getattr(thread, "blockIdx", None)
    index = getattr(thread, "threadIdx", None)
    if block is None or index is None:
        return ("host",)
    return (tuple(block), tuple(index))


class CountingArray(sanitizer.WatchedArray):
    """A NumPy array that records which elements each simulated thread reads and writes.

    It behaves like the array inside a kernel (indexing, ``shape``, ``size``,
    ``len``). Indices are checked: a negative or out-of-range index is an
    ``IndexError`` naming the thread (on a GPU it would read garbage or crash;
    the simulator alone would silently wrap negative indices). Anything that
    reads many elements at once (a slice, handing the array to NumPy) is
    recorded as reading each of them.
    """

    def __init__(self, data: np.ndarray, name: str):
        if not isinstance(data, np.ndarray):
            raise ValueError(f"data must be a numpy array, got {type(data).__name__}")
        self.data = data
        self.name = name
        self.shape = data.shape
        self.size = data.size
        self.ndim = data.ndim
        self.dtype = data.dtype
        self.reads: dict[tuple, list] = defaultdict(list)
        self.writes: dict[tuple, list] = defaultdict(list)

    def __repr__(self):
        return f"CountingArray({self.name!r}, shape={self.shape}, dtype={self.dtype})"

    def _elements(self, index) -> list[tuple]:
        """The elements an index names, checked against the array's bounds."""
        key = index if isinstance(index, tuple) else (index,)
        if all(isinstance(i, (int, np.integer)) for i in key) and len(key) == self.ndim:
            for axis, (i, n) in enumerate(zip(key, self.shape)):
                if not 0 <= i < n:
                    raise IndexError(
                        f"{thread_name(_current_thread())} used index {tuple(int(j) for j in key)} "
                        f"of {self.name}, whose shape is {self.shape}: axis {axis} must be in "
                        f"[0, {n}) (check your bounds test)")
            return [tuple(int(i) for i in key)]
        # A slice, a partial index or an index array: every element it covers.
        positions = np.arange(self.size).reshape(self.shape)[index]
        return [tuple(int(i) for i in np.unravel_index(p, self.shape))
                for p in np.ravel(positions)]

    def __getitem__(self, index):
        elements = self._elements(index)
        self.reads[_current_thread()].extend(elements)
        return self.data[index]

    def __setitem__(self, index, value):
        elements = self._elements(index)
        self.writes[_current_thread()].extend(elements)
        self.data[index] = value

    def __array__(self, dtype=None, copy=None):
        # Handing the whole array to NumPy reads all of it.
        self.reads[_current_thread()].extend(np.ndindex(*self.shape))
        return self.data if dtype is None else self.data.astype(dtype)



@dataclass
class Access:
    """One array's accesses by one thread."""

    array: str
    kind: str  # "read" or "write"
    elements: list

    @property
    def count(self) -> int:
        return len(self.elements)


@dataclass
class Trace:
    """Who touched what in one simulated launch.

    ``arrays`` maps each counted array's name (the kernel's argument names,
    and ``shared <name>`` for each shared array) to its CountingArray.
    ``threads`` lists every thread of the launch, as (blockIdx, threadIdx).
    """

    arrays: dict
    threads: list
    block: tuple
    grid: tuple

    def accesses(self, name: str, kind: str = "read") -> dict:
        """{thread: [elements]} of one array, for ``kind`` "read" or "write"."""
        if name not in self.arrays:
            raise ValueError(f"name must be one of {sorted(self.arrays)}, got {name!r}")
        if kind not in ("read", "write"):
            raise ValueError(f"kind must be 'read' or 'write', got {kind!r}")
        array = self.arrays[name]
        return dict(array.reads if kind == "read" else array.writes)

    def counts(self, name: str, kind: str = "read") -> dict:
        """{thread: how many accesses} for every thread of the launch (0 included)."""
        seen = self.accesses(name, kind)
        return {thread: len(seen.get(thread, ())) for thread in self.threads}

    def most(self, name: str, kind: str = "read") -> tuple:
        """(largest count of one thread, that thread)."""
        counts = self.counts(name, kind)
        thread = max(self.threads, key=lambda t: counts[t])  # the first, in launch order
        return counts[thread], thread

    def total(self, name: str, kind: str = "read") -> int:
        return sum(self.counts(name, kind).values())

    def shared_names(self) -> list[str]:
        return sorted(n for n in self.arrays if n.startswith("shared "))

    def element_counts(self, name: str, kind: str = "read") -> np.ndarray:
        """How many times each element of the array was accessed, by all threads."""
        array = self.arrays[name]
        grid = np.zeros(array.shape, dtype=np.int64)
        for elements in (array.reads if kind == "read" else array.writes).values():
            for element in elements:
                grid[element] += 1
        return grid

    def expect(self, reads: dict | None = None, writes: dict | None = None,
               shared_reads: int | None = None, shared_writes: int | None = None,
               uses_shared: bool | None = None, host_reads_ok: bool = True) -> None:
        """Fail (AssertionError) when a thread accesses more than allowed.

        ``reads``/``writes``: {argument name: the most elements one thread may
        read/write}. ``shared_reads``/``shared_writes``: the most accesses of
        one thread, over all shared arrays together. ``uses_shared``: True if
        the kernel must stage data in shared memory, False if it must not.
        The message names the thread that went over and what it touched.
        """
        problems = []
        for kind, limits in (("read", reads or {}), ("write", writes or {})):
            for name, limit in limits.items():
                if name not in self.arrays:
                    raise ValueError(f"{kind}s names {name!r}, which is not an argument of "
                                     f"the launch ({', '.join(self.arrays)})")
                count, thread = self.most(name, kind)
                if count > limit:
                    elements = self.accesses(name, kind)[thread]
                    problems.append(self._over(name, kind, count, limit, thread, elements))
        shared = self.shared_names()
        if uses_shared is True and not shared:
            problems.append("the kernel must stage its data in shared memory "
                            "(cuda.shared.array), and it declares none")
        if uses_shared is False and shared:
            problems.append(f"the kernel must not use shared memory; it declares "
                            f"{', '.join(shared)}")
        for kind, limit in (("read", shared_reads), ("write", shared_writes)):
            if limit is None:
                continue
            per_thread = Counter()
            for name in shared:
                for thread, n in self.counts(name, kind).items():
                    per_thread[thread] += n
            if per_thread:
                thread = max(self.threads, key=lambda t: per_thread[t])
                count = per_thread[thread]
                if count > limit:
                    detail = ", ".join(f"{self.counts(n, kind)[thread]} of {n}" for n in shared
                                       if self.counts(n, kind)[thread])
                    problems.append(f"{thread_name(thread)} made {count} shared-memory "
                                    f"{kind}s ({detail}); at most {limit} allowed")
        if problems:
            raise AssertionError("; ".join(problems))

    def _over(self, name, kind, count, limit, thread, elements) -> str:
        shown = ", ".join(f"{name}[{', '.join(map(str, e))}]" for e in elements[:SHOWN_ACCESSES])
        more = f" and {len(elements) - SHOWN_ACCESSES} more" if len(elements) > SHOWN_ACCESSES else ""
        verb = "read" if kind == "read" else "wrote"
        times = "element" if limit == 1 else "elements"
        return (f"{thread_name(thread)} {verb} {count} elements of {name} ({shown}{more}); "
                f"each thread may {kind} at most {limit} {times} of {name}")

    def table(self) -> str:
        """A short text summary: per array, the most and the total accesses of one thread."""
        lines = [f"{'array':<22}{'reads: most/thread':>20}{'total':>8}"
                 f"{'writes: most/thread':>21}{'total':>8}"]
        for name in self.arrays:
            lines.append(f"{name:<22}{self.most(name, 'read')[0]:>20}{self.total(name, 'read'):>8}"
                         f"{self.most(name, 'write')[0]:>21}{self.total(name, 'write'):>8}")
        return "\n".join(lines)

    def draw(self, names=None):
        """A figure per array: how many times each element was read (top) and written."""
        import matplotlib.pyplot as plt

        names = list(self.arrays) if names is None else list(names)
        unknown = [name for name in names if name not in self.arrays]
        if not names or unknown:
            raise ValueError(f"names must be some of {sorted(self.arrays)}, got {names!r}")
        if all(self.arrays[name].ndim == 1 for name in names):
            # Vectors: a strip each, as wide as it is long, not a tall square.
            longest = max(self.arrays[name].size for name in names)
            size = (max(2.8, 0.35 * longest + 1.2) * len(names), 2.4)
        else:
            size = (2.8 * len(names), 4.2)
        fig, axes = plt.subplots(2, len(names), figsize=size, squeeze=False)
        for column, name in enumerate(names):
            for row, kind in enumerate(("read", "write")):
                counts = self.element_counts(name, kind)
                shown = counts.reshape(1, -1) if counts.ndim == 1 else counts.reshape(
                    counts.shape[0], -1)
                ax = axes[row][column]
                image = ax.imshow(shown, cmap="Blues", vmin=0, vmax=max(1, shown.max()),
                                  aspect="auto")
                ax.set_title(f"{name}: {kind}s", fontsize=9)
                ax.set_xticks([])
                ax.set_yticks([])
                if shown.size <= 64:
                    for (i, j), value in np.ndenumerate(shown):
                        ax.text(j, i, str(value), ha="center", va="center", fontsize=7,
                                color="white" if value > shown.max() / 2 else "black")
                fig.colorbar(image, ax=ax, fraction=0.046)
        fig.tight_layout()
        return fig


# The same lookup of the block's array by calling line as gpucourse.device's locked
# cuda.shared.array, but the array made is a CountingArray.
@contextmanager
def _counting_shared_arrays(found: dict):
    """While active, the simulator's shared arrays are CountingArrays, listed in ``found``
    (and, while the sanitizer is on, seen by the kernel through its checks)."""
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    original = shared.array

    def counting_array(block, shape, dtype, frame):
        data = sanitizer.shared_data(block, shape, dtype)
        name = shared_array_name(frame)
        while name in found and found[name].data is not data:
            name += "'"
        counting = found.setdefault(name, CountingArray(data, name))
        if sanitizer.active():
            return sanitizer.watched(counting, data, frame, dynamic=shape == 0)
        return counting

    array = shared_array_by_calling_line(counting_array)
    shared.array = array
    try:
        yield
    finally:
        shared.array = original


def _argument_names(kernel, count: int) -> list[str]:
    function = getattr(kernel, "py_func", kernel)
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        names = []
    if len(names) != count:
        raise ValueError(f"the kernel takes {len(names)} arguments "
                         f"({', '.join(names)}), but {count} were given")
    return names


def _as_dim3(name: str, value) -> tuple:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and d >= 1
                                          for d in dims):
        raise ValueError(f"{name} must be a whole number >= 1 or a tuple of 1 to 3 of them, "
                         f"got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _simulated(kernel):
    """A simulator kernel for ``kernel``, also on a GPU machine (where it is a real one)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if isinstance(kernel, FakeCUDAKernel):
        return kernel
    function = getattr(kernel, "py_func", None)
    if function is None:
        raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__}")
    return FakeCUDAKernel(function, device=False)


def _python_load(array, *index):
    """The four neighbours along the last index that a 128-bit load reads, one by one."""
    *lead, last = index
    return tuple(array[(*lead, last + q)] for q in range(4))


def _python_store(array, *index_and_values):
    """The four writes of a 128-bit store, one by one."""
    *index, x0, x1, x2, x3 = index_and_values
    *lead, last = index
    for q, value in enumerate((x0, x1, x2, x3)):
        array[(*lead, last + q)] = value


def _python_vector_helpers() -> dict:
    """{id of a course 128-bit helper: the same access in plain Python}. On a GPU
    machine the helpers are compiler intrinsics, which Python cannot call."""
    from gpucourse.kernels import vector

    return {id(vector.load_float4): _python_load, id(vector.load_float4_flat): _python_load,
            id(vector.store_float4): _python_store, id(vector.store_float4_flat): _python_store}


@contextmanager
def _device_functions_simulated(function):
    """While a kernel is traced, what it calls runs as Python: its device functions (on
    a GPU machine, compiled ones) and the course's 128-bit helpers (there, intrinsics),
    whether named as globals or captured by a kernel factory, and in turn what those
    device functions call."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    helpers = _python_vector_helpers()
    undo: list = []
    seen: set = set()

    def as_python(value):
        if id(value) in helpers:
            return helpers[id(value)]
        if not isinstance(value, FakeCUDAKernel) and hasattr(value, "py_func") and \
                getattr(value, "targetoptions", {}).get("device"):
            return FakeCUDAKernel(value.py_func, device=True)
        return None

    def visit(fn) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        scope = fn.__globals__
        for name in dict.fromkeys(global_names(fn.__code__)):
            replacement = as_python(scope.get(name))
            if replacement is not None:
                undo.append((scope.__setitem__, name, scope[name]))
                scope[name] = replacement
            if isinstance(scope.get(name), FakeCUDAKernel):
                visit(scope[name].fn)
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # not assigned yet
                continue
            replacement = as_python(value)
            if replacement is not None:
                undo.append((lambda _, old, cell=cell: setattr(cell, "cell_contents", old),
                             None, value))
                cell.cell_contents = value = replacement
            if isinstance(value, FakeCUDAKernel):
                visit(value.fn)

    try:
        visit(function)
        yield
    finally:
        for restore, key, value in reversed(undo):
            restore(key, value)


# How long stopping_simulated_threads keeps stopping a failed launch's threads.
STOP_WAIT_S = 5.0


@contextmanager
def stopping_simulated_threads():
    """Stop the simulator's threads that a launch inside leaves running when it fails.

    The simulator runs each CUDA thread as an OS thread. When a launch is
    interrupted (a notebook cell stopped for taking too long) or one thread
    raises, the other threads of the block go on: a kernel stuck in a loop
    would keep running beside every later cell and slow them all. Here, when
    the code inside raises, each simulator thread started inside that is still
    alive gets an exception raised in it (and is woken if it waits at a
    barrier), so it ends; the original exception then propagates.
    """
    import ctypes

    from numba.cuda.simulator.kernel import BlockThread

    before = set(threading.enumerate())
    try:
        yield
    except BaseException:
        started = [thread for thread in threading.enumerate()
                   if thread not in before and isinstance(thread, BlockThread)]
        # Again until they have ended (up to STOP_WAIT_S): a thread blocked in
        # a wait gets its exception only once woken, and one woken at one
        # barrier can reach the next before it sees it.
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            alive = [thread for thread in started if thread.is_alive()]
            if not alive:
                break
            for thread in alive:
                thread.abort = True  # a thread waiting at a barrier raises when woken
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                           ctypes.py_object(SystemExit))
                thread.syncthreads_event.set()
            for thread in alive:
                thread.join(timeout=0.02)
        raise


@contextmanager
def simulated_launch():
    """What every simulated launch of a student's kernel by the graders runs under: the
    sanitizer (:mod:`gpucourse.grader.sanitizer`: uninitialised shared memory, barriers
    not every thread reaches, races), and :func:`stopping_simulated_threads`."""
    with sanitizer.sanitized(), stopping_simulated_threads():
        yield


_trace_lock = threading.Lock()


def trace(kernel, grid, block, *args) -> Trace:
    """Run ``kernel[grid, block](*args)`` on the simulator, counting each thread's accesses.

    NumPy array arguments are wrapped in CountingArrays named after the
    kernel's parameters; the kernel's results are written into them in place,
    as ``cuda.to_device`` and ``copy_to_host`` would. Other arguments (numbers)
    are passed as they are. Returns the :class:`Trace`.
    """
    grid = _as_dim3("grid", grid)
    block = _as_dim3("block", block)
    simulated = _simulated(kernel)
    names = _argument_names(kernel, len(args))
    wrapped, arrays = [], {}
    for name, value in zip(names, args):
        if isinstance(value, np.ndarray):
            counted = CountingArray(value, name)
            arrays[name] = counted
            wrapped.append(counted)
        else:
            wrapped.append(value)
    shared: dict = {}
    with _trace_lock, simulated_launch(), _counting_shared_arrays(shared), \
            _device_functions_simulated(simulated.fn):
        simulated[grid, block](*wrapped)
    threads = [(b, t) for b in np.ndindex(*grid) for t in np.ndindex(*block)]
    threads = [(tuple(int(i) for i in b), tuple(int(i) for i in t)) for b, t in threads]
    arrays.update(sorted(shared.items()))
    return Trace(arrays=arrays, threads=threads, block=block, grid=grid)
