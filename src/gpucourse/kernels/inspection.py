"""Look inside a kernel: what each thread touches, and what a GPU would run.

Value tests alone do not prove a kernel. On Numba's simulator a kernel is
ordinary Python, so a "kernel" whose first thread calls NumPy on the whole
array gives the right answer. The course's graders therefore look at a
kernel two more ways, neither of which needs a GPU:

**What each thread reads and writes** (:func:`trace`). The kernel runs on the
simulator with its arrays wrapped in :class:`CountingArray`, which records
every element each thread reads or writes, and so are the shared arrays the
kernel declares. :meth:`Trace.expect` then fails a kernel whose threads read
more than the exercise allows, naming the thread and what it read::

    run = trace(add_ten, 1, 8, a, out)            # grid, block, then the arguments
    run.expect(reads={"a": 1}, writes={"out": 1})

Numpy-in-disguise shows up here: a thread that hands a whole array to NumPy
is recorded as reading every element of it.

**What the GPU would run** (:func:`ptx` and :func:`expect_structure`). The
kernel is compiled for a real GPU target (compute capability 9.0 by default)
into PTX, NVIDIA's assembly, with NVVM from the ``numba-cuda[cu13]`` wheels.
That works on a machine with no GPU and no driver. The PTX says whether the
kernel declares shared memory, issues 128-bit loads, keeps several
accumulators (one ``fma`` per accumulator in its inner loop), or needs a
large local buffer; :func:`expect_structure` turns each such property into
a check with a message that says what to change. A kernel that Numba cannot
compile for a GPU fails with the compiler's own complaint.

Under the simulator, ``numba.cuda`` cannot compile for a GPU in the same
process, so :func:`ptx` hands the kernel's source (and the constants and
device functions it uses) to a compiler process that runs without the
simulator; it starts on first use (about two seconds) and then compiles a
kernel in a fraction of a second. On a GPU machine the kernel is compiled in
the notebook's own process.
"""

from __future__ import annotations

import ast
import atexit
import inspect
import json
import linecache
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import types
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.verify import global_names, visible_names

DEFAULT_CC = (9, 0)
# Library helpers a kernel may call: 128-bit loads and stores.
ALLOWED_HELPER_MODULES = ("gpucourse.kernels.vector", "gpucourse.kernels._vector_load",
                          "gpucourse.kernels._vector_store")
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


def thread_name(key: tuple) -> str:
    """How a thread is named in messages: block (0, 0, 0), thread (3, 0, 0)."""
    if key == ("host",):
        return "the host"
    block, index = key
    return f"block {block}, thread {index}"


class CountingArray:
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

    def __len__(self):
        return self.shape[0]

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

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(x) if isinstance(x, CountingArray) else x for x in inputs]
        return getattr(ufunc, method)(*plain, **kwargs)


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


def _shared_name(frame) -> str:
    """The variable a ``cuda.shared.array`` call is assigned to, from its source line."""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    match = re.match(r"\s*([A-Za-z_]\w*)\s*=", line)
    return f"shared {match.group(1) if match else f'line {frame.f_lineno}'}"


@contextmanager
def _counting_shared_arrays(found: dict):
    """While active, the simulator's shared arrays are CountingArrays, listed in ``found``."""
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    original = shared.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            made = self._allocations.get(caller)
            if made is None:
                if shape == 0:
                    data = np.frombuffer(self._dynshared.data, dtype=dtype,
                                         count=self._dynshared_size // dtype.itemsize)
                else:
                    data = np.zeros(shape, dtype)
                name = _shared_name(frame)
                while name in found and found[name].data is not data:
                    name += "'"
                made = self._allocations[caller] = found.setdefault(name,
                                                                    CountingArray(data, name))
        return made

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
        for thread in threading.enumerate():
            if thread in before or not isinstance(thread, BlockThread) or not thread.is_alive():
                continue
            thread.abort = True  # a thread waiting at a barrier raises when woken
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                       ctypes.py_object(SystemExit))
            thread.syncthreads_event.set()
        raise


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
    with _trace_lock, _counting_shared_arrays(shared), \
            _device_functions_simulated(simulated.fn), stopping_simulated_threads():
        simulated[grid, block](*wrapped)
    threads = [(b, t) for b in np.ndindex(*grid) for t in np.ndindex(*block)]
    threads = [(tuple(int(i) for i in b), tuple(int(i) for i in t)) for b, t in threads]
    arrays.update(sorted(shared.items()))
    return Trace(arrays=arrays, threads=threads, block=block, grid=grid)


# --------------------------------------------------------------------------
# What a GPU would run: PTX compiled on the CPU
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class PTXFacts:
    """What one kernel's PTX shows (counts are of instructions in the text, not executed)."""

    shared_bytes: int          # static shared memory declared
    dynamic_shared: bool       # declares extern (dynamic) shared memory
    shared_loads: int          # ld.shared
    shared_stores: int         # st.shared
    vector_shared_loads: int   # ld.shared.v4 / .v2
    global_loads: int          # loads from global memory (ld.global and generic ld)
    vector_global_loads: int   # 128-bit loads from global memory (v4 of 32-bit)
    vector_global_stores: int
    barriers: int              # bar.sync / barrier.sync
    fma: int                   # fma.rn.f32
    local_bytes: int           # the thread's local-memory stack (spilled arrays)
    registers_f32: int         # .reg .f32 declared
    text: str = field(repr=False, default="")


_LOAD = re.compile(r"^\s*(?:@%p\d+\s+)?ld(\.global|\.shared|\.local|\.param|\.const)?"
                   r"((?:\.nc|\.ca|\.cg|\.cs|\.lu|\.cv|\.volatile|\.relaxed\.\w+)*)"
                   r"(\.v[24])?\.(\w+)", re.M)
_STORE = re.compile(r"^\s*(?:@%p\d+\s+)?st(\.global|\.shared|\.local|\.param)?"
                    r"((?:\.wb|\.cg|\.cs|\.wt|\.volatile)*)(\.v[24])?\.(\w+)", re.M)


def ptx_facts(text: str) -> PTXFacts:
    """Read the properties the graders check out of a kernel's PTX text."""
    if not isinstance(text, str) or ".entry" not in text:
        raise ValueError("text must be the PTX of a kernel (it has no .entry)")
    shared_bytes = sum(int(n) for n in re.findall(
        r"^\s*(?:\.visible\s+|\.global\s+)?\.shared\s+\.align\s+\d+\s+\.b8\s+\S+\[(\d+)\]", text,
        re.M))
    dynamic = bool(re.search(r"\.extern\s+\.shared", text))
    local_bytes = sum(int(n) for n in re.findall(
        r"^\s*\.local\s+\.align\s+\d+\s+\.b8\s+\S+\[(\d+)\]", text, re.M))
    shared_loads = vector_shared = global_loads = vector_global = 0
    for space, _, vector, kind in _LOAD.findall(text):
        if space == ".shared":
            shared_loads += 1
            vector_shared += bool(vector)
        elif space in ("", ".global"):  # Numba addresses arrays generically
            global_loads += 1
            vector_global += vector == ".v4" and kind in ("f32", "b32", "u32", "s32")
    shared_stores = vector_global_stores = 0
    for space, _, vector, kind in _STORE.findall(text):
        if space == ".shared":
            shared_stores += 1
        elif space in ("", ".global"):
            vector_global_stores += vector == ".v4" and kind in ("f32", "b32", "u32", "s32")
    registers = sum(int(n) for n in re.findall(r"\.reg\s+\.f32\s+%f<(\d+)>", text))
    return PTXFacts(
        shared_bytes=shared_bytes, dynamic_shared=dynamic, shared_loads=shared_loads,
        shared_stores=shared_stores, vector_shared_loads=vector_shared,
        global_loads=global_loads, vector_global_loads=vector_global,
        vector_global_stores=vector_global_stores,
        barriers=len(re.findall(r"^\s*(?:@%p\d+\s+)?(?:bar|barrier)\.sync", text, re.M)),
        fma=len(re.findall(r"^\s*(?:@%p\d+\s+)?fma\.rn\.f32", text, re.M)),
        local_bytes=local_bytes, registers_f32=registers, text=text)


def _argument_types(args) -> list:
    """A description of each example argument that the compiler process turns into a Numba type."""
    described = []
    for position, value in enumerate(args):
        if isinstance(value, np.ndarray):
            layout = "C" if value.flags.c_contiguous else ("F" if value.flags.f_contiguous else "A")
            described.append(["array", value.dtype.str, value.ndim, layout])
        elif isinstance(value, (bool, np.bool_)):
            described.append(["scalar", "bool"])
        elif isinstance(value, (int, np.integer)):
            described.append(["scalar", "int64" if isinstance(value, int) else value.dtype.name])
        elif isinstance(value, (float, np.floating)):
            described.append(["scalar", "float64" if isinstance(value, float)
                              else value.dtype.name])
        else:
            raise ValueError(f"argument {position} must be a numpy array or a number (an "
                             f"example of what the kernel is launched with), got "
                             f"{type(value).__name__}")
    return described


class KernelSourceError(ValueError):
    """The kernel refers to something that cannot be compiled for a GPU."""


def _is_jitted(value) -> bool:
    return hasattr(value, "py_func") and (hasattr(value, "targetoptions")
                                          or type(value).__name__ == "FakeCUDAKernel")


def _is_device_function(value) -> bool:
    if type(value).__name__ == "FakeCUDAKernel":
        return bool(value._device)
    return bool(getattr(value, "targetoptions", {}).get("device"))


def kernel_module_source(kernel) -> tuple[str, str]:
    """(source of a module that defines the kernel, the kernel's name).

    The module holds the kernel's own source, the device functions it calls
    (their sources, first), the numeric constants it reads (as literals) and
    imports of the modules and Numba types it names. A kernel made by a
    factory (a function that computes tile sizes and defines the kernel
    inside it) works too: the values it captured become the module's
    constants. Anything else a kernel refers to cannot run on a GPU and is a
    :class:`KernelSourceError`, and so is one name that two of the functions
    see with different values.
    """
    import numba

    function = getattr(kernel, "py_func", None)
    if function is None or not isinstance(function, types.FunctionType):
        raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__}")
    # `_real_cuda` is provided by the compiler process (see _ptx_compiler).
    header = ["import math", "import numpy", "import numba"]
    constants, sources = [], []
    defined: dict[str, str] = {}  # each name's line in the module, to catch two values
    done: set[str] = set()

    def define(fn, used: str, line: str) -> None:
        if defined.setdefault(used, line) != line:
            raise KernelSourceError(
                f"{fn.__name__} sees {used} as `{line}`, another function of the kernel as "
                f"`{defined[used]}`; give the two different names")
        constants.append(line)

    def add(fn, name: str) -> None:
        if name in done:
            return
        done.add(name)
        scope = visible_names(fn)
        for used in dict.fromkeys(global_names(fn.__code__) + list(fn.__code__.co_freevars)):
            if used not in scope or (used in done and used not in defined):
                continue
            value = scope[used]
            if isinstance(value, types.ModuleType):
                if value.__name__ in ("numba.cuda", "gpucourse.device") or \
                        value.__name__.startswith("numba.cuda.simulator"):
                    define(fn, used, f"{used} = _real_cuda")
                elif value.__name__ in ("math", "numpy", "numba", "cmath", "operator"):
                    define(fn, used, f"import {value.__name__} as {used}")
                elif value.__name__ in ALLOWED_HELPER_MODULES:
                    define(fn, used, f"import {value.__name__} as {used}")
                else:
                    raise KernelSourceError(
                        f"{fn.__name__} uses the module {value.__name__} ({used}); a GPU "
                        "kernel can only use cuda, math and the course's vector helpers")
            elif isinstance(value, (bool, int, float, complex)) or value is None:
                define(fn, used, f"{used} = {value!r}")
            elif isinstance(value, np.generic):
                define(fn, used, f"{used} = numpy.{value.dtype.name}({value.item()!r})")
            elif isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
                define(fn, used, f"{used} = {value!r}")
            elif isinstance(value, numba.core.types.Type):
                if getattr(numba, str(value), None) is value:
                    define(fn, used, f"{used} = numba.{value}")
                else:
                    define(fn, used, f"{used} = numba.types.{value}")
            elif _is_jitted(value):
                if not _is_device_function(value):
                    raise KernelSourceError(f"{fn.__name__} calls {used}, a kernel; a kernel "
                                            "can only call device functions "
                                            "(@cuda.jit(device=True))")
                if used not in done:
                    add(value.py_func, used)
                    sources.append(_function_source(value.py_func, used, device=True))
                continue
            elif getattr(value, "__module__", "") in ALLOWED_HELPER_MODULES:
                define(fn, used, f"from {value.__module__} import {value.__name__} as {used}")
            elif used in ("range", "len", "min", "max", "abs", "float", "int", "bool", "round"):
                continue
            else:
                module = getattr(value, "__module__", None) or type(value).__module__
                raise KernelSourceError(
                    f"{fn.__name__} uses {used}, a {type(value).__name__} from {module}, "
                    "which a GPU kernel cannot call; a kernel may use numbers, cuda, math, "
                    "its own device functions (@cuda.jit(device=True)) and the course's "
                    "vector helpers")
            done.add(used)

    add(function, function.__name__)
    sources.append(_function_source(function, function.__name__))
    body = "\n".join(header + sorted(set(constants), key=constants.index)) + "\n\n"
    return body + "\n\n".join(sources) + "\n", function.__name__


def _function_source(function, name: str, device: bool = False) -> str:
    """The function's source without its decorators, defined under `name`; a device
    function is made one again with ``cuda.jit(device=True)``. (A decorator may name
    things the compiler process does not have, such as a module's option dict.)"""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as error:
        raise KernelSourceError(f"the source of {name} cannot be found ({error}); define it "
                                "in a notebook cell or a file") from None
    tree = ast.parse(source)
    definition = next((node for node in tree.body
                       if isinstance(node, ast.FunctionDef) and node.name == function.__name__),
                      None)
    if definition is not None:
        source = "\n".join(source.splitlines()[definition.lineno - 1:]) + "\n"
    if device:
        source += f"\n{function.__name__} = _real_cuda.jit(device=True)({function.__name__})\n"
    if function.__name__ != name:
        source += f"\n{name} = {function.__name__}\n"
    return source


class _Compiler:
    """A process that compiles kernels to PTX, without the simulator; one per session."""

    def __init__(self):
        self._process = None
        self._lock = threading.Lock()

    def _start(self):
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "GPUCOURSE_DEVICE": "auto"}
        # In a session of its own: interrupting a notebook's cell signals the kernel's
        # whole process group, and the compiler, which serves every later cell, must
        # outlive that (it ends when its input closes, as the kernel exits).
        self._process = subprocess.Popen(
            [sys.executable, "-u", "-m", "gpucourse.kernels._ptx_compiler"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, start_new_session=True)
        atexit.register(self.close)

    def start(self):
        """Start the process if it is not running (it then loads Numba in the background)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()

    def compile(self, request: dict, timeout_s: float) -> dict:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            try:
                self._process.stdin.write(json.dumps(request) + "\n")
                self._process.stdin.flush()
                reply = _read_line(self._process.stdout, timeout_s)
            except BaseException:
                # Interrupted (a cell's time limit, Ctrl-C) while waiting: the reply
                # would arrive for the next request instead, so start afresh.
                self.close()
                raise
            if reply is None:
                error = ""
                if self._process.poll() is not None:
                    error = self._process.stderr.read()[-2000:]
                self.close()
                raise RuntimeError(f"the PTX compiler did not answer within {timeout_s:g} s"
                                   + (f":\n{error}" if error else ""))
            return json.loads(reply)

    def close(self):
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None


def _read_line(stream, timeout_s: float):
    line: list = []
    reader = threading.Thread(target=lambda: line.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return line[0] if line and line[0] else None


_compiler = _Compiler()


def start_compiler() -> None:
    """Start the compiler behind :func:`ptx` now, in the background, so that the first
    kernel compiled later does not wait the two seconds it takes to load (a notebook
    calls this in its set-up cell). On a GPU machine, where kernels compile in the
    notebook's own process, it does nothing."""
    if not on_gpu():
        _compiler.start()


def ptx(kernel, *example_args, cc=DEFAULT_CC, timeout_s: float = 120.0) -> str:
    """The PTX a GPU of compute capability ``cc`` would run for ``kernel``.

    ``example_args``: arguments like those the kernel is launched with (NumPy
    arrays, numbers); only their types, dimensions and layouts matter. Raises
    :class:`KernelSourceError` when the kernel uses something a GPU cannot
    run, and AssertionError carrying the compiler's message when Numba
    cannot compile it for a GPU.
    """
    if not (isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(x, int) for x in cc)
            and cc >= (5, 0)):
        raise ValueError(f"cc must be a compute capability such as (9, 0), got {cc!r}")
    argument_types = _argument_types(example_args)
    if on_gpu():
        from gpucourse.kernels._ptx_compiler import numba_type

        function = getattr(kernel, "py_func", None)
        if function is None:
            raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__}")
        signature = tuple(numba_type(t) for t in argument_types)
        try:
            text, _ = cuda.compile_ptx(function, signature, cc=cc)
        except Exception as error:  # the compiler's own complaint, for the student
            raise AssertionError(_compile_message(function.__name__, str(error))) from None
        return text
    source, name = kernel_module_source(kernel)
    reply = _compiler.compile({"source": source, "kernel": name, "types": argument_types,
                               "cc": list(cc)}, timeout_s)
    if "error" in reply:
        raise AssertionError(_compile_message(name, reply["error"]))
    return reply["ptx"]


def _compile_message(name: str, error: str) -> str:
    lines = [line for line in error.splitlines() if line.strip()]
    first = next((line for line in lines if "Error" in line or "error" in line), lines[0]
                 if lines else "unknown error")
    detail = "\n".join(lines[:12])
    return (f"{name} does not compile for a GPU (Numba-CUDA's compiler said: {first.strip()}). "
            f"On the simulator a kernel is plain Python, so it may run there anyway; on a GPU "
            f"only what Numba-CUDA can compile runs.\n{detail}")


def facts(kernel, *example_args, cc=DEFAULT_CC) -> PTXFacts:
    """:func:`ptx_facts` of the kernel compiled for ``example_args``."""
    return ptx_facts(ptx(kernel, *example_args, cc=cc))


def expect_structure(kernel, *example_args, cc=DEFAULT_CC, what: str = "this kernel",
                     shared: bool | None = None, barriers: bool | None = None,
                     vector_global_loads: bool | None = None,
                     vector_shared_loads: bool | None = None,
                     min_fma: int | None = None, max_local_bytes: int | None = None,
                     max_shared_bytes: int | None = None,
                     max_scalar_global_loads: int | None = None) -> PTXFacts:
    """Compile ``kernel`` for a GPU and fail when its PTX lacks a required property.

    ``what`` names the exercise in messages ("level 5"). ``shared``: must (True)
    or must not (False) declare shared memory; ``barriers``: must synchronise
    the block; ``vector_global_loads``: must read global memory 128 bits at a
    time; ``vector_shared_loads``: must read shared memory in vectors;
    ``min_fma``: the least number of fused multiply-adds in the code (a thread
    keeping N accumulators has at least N, once the compiler unrolls its
    loops); ``max_local_bytes``: the most per-thread local memory (a large
    local buffer is a sign of an array the size of the problem);
    ``max_shared_bytes``: the most static shared memory;
    ``max_scalar_global_loads``: the most loads from global memory that are not
    128 bits wide (0: every load of the inputs is a vector load).
    """
    found = facts(kernel, *example_args, cc=cc)
    problems = []
    if shared is True and not (found.shared_bytes or found.dynamic_shared):
        problems.append(f"{what} must stage tiles in shared memory (cuda.shared.array); "
                        "the compiled kernel declares none")
    if shared is True and (found.shared_bytes or found.dynamic_shared) and not found.shared_loads:
        problems.append(f"{what} declares shared memory but never reads it")
    if shared is False and (found.shared_bytes or found.dynamic_shared):
        problems.append(f"{what} must not use shared memory; the compiled kernel declares "
                        f"{found.shared_bytes} bytes")
    if barriers is True and not found.barriers:
        problems.append(f"{what} must synchronise its block (cuda.syncthreads()) between "
                        "loading a tile and using it; the compiled kernel has no barrier")
    if vector_global_loads is True and not found.vector_global_loads:
        problems.append(f"{what} must load A and B 128 bits at a time (load_float4); your "
                        f"kernel issues only 32-bit loads ({found.global_loads} of them)")
    scalar_loads = found.global_loads - found.vector_global_loads
    said_already = vector_global_loads is True and not found.vector_global_loads
    if max_scalar_global_loads is not None and scalar_loads > max_scalar_global_loads \
            and not said_already:
        problems.append(f"{what} must load its inputs 128 bits at a time (load_float4); your "
                        f"kernel issues {scalar_loads} narrower loads from global memory "
                        f"beside {found.vector_global_loads} 128-bit ones (at most "
                        f"{max_scalar_global_loads} allowed)")
    if vector_shared_loads is True and not found.vector_shared_loads:
        problems.append(f"{what} must read its shared tiles 128 bits at a time "
                        "(load_float4_flat); the compiled kernel issues only scalar "
                        "shared-memory loads")
    if min_fma is not None and found.fma < min_fma:
        problems.append(f"{what} must keep at least {min_fma} accumulators per thread (one "
                        f"fused multiply-add each per step); the compiled kernel has "
                        f"{found.fma} fma instructions. Keep them in cuda.local.array with "
                        "a size and loop bounds that are constants, so the compiler can "
                        "unroll the loops and hold them in registers")
    if max_local_bytes is not None and found.local_bytes > max_local_bytes:
        problems.append(f"{what} keeps {found.local_bytes} bytes of local memory per thread "
                        f"(at most {max_local_bytes} allowed): an array that large does not "
                        "belong in one thread")
    if max_shared_bytes is not None and found.shared_bytes > max_shared_bytes:
        problems.append(f"{what} declares {found.shared_bytes} bytes of shared memory, more "
                        f"than the {max_shared_bytes} allowed")
    if problems:
        raise AssertionError("; ".join(problems))
    return found
