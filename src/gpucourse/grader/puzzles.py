"""The checks behind the GPU puzzles (chapter 8's on-ramp): their inputs and three checks.

The puzzles are small Numba-CUDA kernels that the student writes in
``exercises/08_gpu_puzzles``. Each is graded three ways, by the helpers here
and in :mod:`gpucourse.grader.tracing` and :mod:`gpucourse.grader.ptx`:

* **by value**: :func:`check_puzzle` launches the kernel on Numba's simulator
  and compares its output with the float64 NumPy reference that the test cell
  computed (this module holds no answers);
* **by what each thread touches**: the same launch counts, per thread, the
  elements read and written in global and shared memory, and fails a kernel
  that reads more than the puzzle allows, naming the thread and what it read;
* **by what a GPU would run**: :func:`check_compiles` compiles the kernel for
  a real GPU (PTX, on the CPU) and checks for shared memory and barriers
  where the puzzle is about them.

The chapter's pictures of the programming model, and the listing of the
puzzles' points, are presentation and live in :mod:`gpucourse.chapters.puzzles`.
"""

from __future__ import annotations

import dis
import types

import numpy as np

from gpucourse.grader.expect import expect_array
from gpucourse.grader.own_work import expect_own_work as _expect_own_work
from gpucourse.grader import ptx, tracing
# Shared with the other kernel checks (and the puzzles' own: `puzzles.blocks`,
# `puzzles.random_vector`, `puzzles.random_matrix`).
from gpucourse.grader.launches import (_whole, blocks, random_matrix,  # noqa: F401
                                       random_vector, traced)

# Where a puzzle's output starts: a float element no thread writes stays NaN,
# an integer one stays -1.
UNWRITTEN_INT = -1
# How many offending elements or threads a message lists.
SHOWN = 4


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def random_counts(n: int, seed: int, high: int = 10) -> np.ndarray:
    """``n`` int32 counts drawn uniformly from 0 to ``high`` (inclusive)."""
    n = _whole("n", n)
    seed = _whole("seed", seed, 0)
    high = _whole("high", high)
    return np.random.default_rng(seed).integers(0, high + 1, n).astype(np.int32)


def blank(shape, dtype=np.float32) -> np.ndarray:
    """An output array that shows what no thread wrote: NaN (floats) or -1 (integers)."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if not dims or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                           and d >= 1 for d in dims):
        raise ValueError(f"shape must be a whole number >= 1 or a tuple of them, got {shape!r}")
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return np.full(dims, np.nan, dtype=kind)
    if kind.kind == "i":
        return np.full(dims, UNWRITTEN_INT, dtype=kind)
    raise ValueError(f"dtype must be a float or signed integer dtype, got {kind}")


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def _name(kernel) -> str:
    return getattr(getattr(kernel, "py_func", kernel), "__name__", "the kernel")


def _check_kernel(kernel) -> types.FunctionType:
    function = getattr(kernel, "py_func", None)
    if not isinstance(function, types.FunctionType):
        raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__} "
                         "(did you forget the @cuda.jit line?)")
    return function


# A deliberate variant of gpucourse.grader.own_work.global_names: the names a kernel
# loads, without the modules it imports, each once (a kernel's own `import numpy`
# is not a use of the notebook's global of that name).
def _globals_read(function) -> list[str]:
    """The global names a function's code loads (attribute names excluded)."""
    names = []

    def visit(code):
        names.extend(i.argval for i in dis.get_instructions(code)
                     if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                visit(constant)

    visit(function.__code__)
    return list(dict.fromkeys(names))


def numpy_uses(kernel) -> list[str]:
    """The NumPy names a kernel (or a device function it calls) uses, as "name (in fn)"."""
    found, seen = [], set()

    def visit(function):
        if id(function) in seen:
            return
        seen.add(id(function))
        scope = function.__globals__
        for name in _globals_read(function):
            value = scope.get(name)
            if value is None:
                continue
            module = value.__name__ if isinstance(value, types.ModuleType) else \
                getattr(value, "__module__", None)
            if isinstance(module, str) and (module == "numpy" or module.startswith("numpy.")):
                found.append(f"{name} (in {function.__name__})")
            elif isinstance(getattr(value, "py_func", None), types.FunctionType):
                visit(value.py_func)

    visit(_check_kernel(kernel))
    return found


def expect_no_numpy(kernel) -> None:
    """Fail a kernel that calls NumPy: a puzzle's threads do the work themselves."""
    uses = numpy_uses(kernel)
    if uses:
        raise AssertionError(
            f"{_name(kernel)} uses NumPy ({', '.join(uses)}). On the simulator a kernel is "
            "plain Python, so NumPy would run there, but a puzzle's threads must do the work "
            "themselves, element by element; use numbers, math and numba's float32")


def _elements(elements) -> str:
    return ", ".join("[" + ", ".join(map(str, e)) + "]" for e in elements)


def expect_each_written_once(run: tracing.Trace, output: str) -> None:
    """Fail unless every element of ``output`` was written by exactly one thread."""
    counts = run.element_counts(output, "write")
    never = [tuple(int(i) for i in e) for e in np.argwhere(counts == 0)]
    if never:
        shown = ", ".join(f"{output}{_elements([e])}" for e in never[:SHOWN])
        more = f" and {len(never) - SHOWN} more" if len(never) > SHOWN else ""
        raise AssertionError(
            f"no thread wrote {shown}{more} ({len(never)} of {counts.size} elements of "
            f"{output} were never written): every element needs a thread; check that the "
            "launch covers it and that your bounds test lets it through")
    twice = [tuple(int(i) for i in e) for e in np.argwhere(counts > 1)]
    if twice:
        element = twice[0]
        writers = [tracing.thread_name(t) for t, seen in run.accesses(output, "write").items()
                   if element in seen]
        raise AssertionError(
            f"{output}{_elements([element])} was written {counts[element]} times (by "
            f"{'; '.join(writers[:SHOWN])}): each element must be written by exactly one "
            "thread, once")


def expect_not_read(run: tracing.Trace, name: str, mask, why: str = "") -> None:
    """Fail when any thread read an element of ``name`` where ``mask`` is True."""
    if name not in run.arrays:
        raise ValueError(f"name must be one of {sorted(run.arrays)}, got {name!r}")
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != run.arrays[name].shape:
        raise ValueError(f"mask must be a boolean array of {name}'s shape "
                         f"{run.arrays[name].shape}, got {mask.dtype} {mask.shape}")
    for thread, elements in sorted(run.accesses(name, "read").items()):
        bad = [e for e in elements if mask[e]]
        if bad:
            raise AssertionError(
                f"{tracing.thread_name(thread)} read {name}{_elements(bad[:SHOWN])}"
                f"{' and more' if len(bad) > SHOWN else ''}, which no thread may read"
                + (f" ({why})" if why else ""))


def expect_coalesced(run: tracing.Trace, name: str, kind: str = "read") -> None:
    """Fail unless threads next to each other in x touch neighbouring elements of a row.

    For each block and each (threadIdx.y, threadIdx.z), the first element of
    ``name`` that each thread reads (or writes) must sit in the same row as its
    neighbour's, one column (last index) further per step of threadIdx.x. That
    is what lets the 32 threads of a warp share a few memory transactions.
    """
    first = {thread: elements[0] for thread, elements in run.accesses(name, kind).items()
             if elements and thread != ("host",)}
    for (block, index), element in sorted(first.items()):
        neighbour = (block, (index[0] + 1,) + index[1:])
        if neighbour not in first:
            continue
        other = first[neighbour]
        if other[:-1] != element[:-1] or other[-1] != element[-1] + 1:
            verb = "read" if kind == "read" else "wrote"
            raise AssertionError(
                f"in block {block}, thread {index} {verb} {name}{_elements([element])} and "
                f"thread {neighbour[1]} {verb} {name}{_elements([other])}: threads next to "
                f"each other in x (threadIdx.x) must {kind} elements next to each other in a "
                f"row of {name} (the last index), so that a warp's accesses coalesce into few "
                "memory transactions")


def expect_total(run: tracing.Trace, name: str, limit: int, kind: str = "read",
                 why: str = "") -> None:
    """Fail when all threads together access ``name`` more than ``limit`` times."""
    limit = _whole("limit", limit, 0)
    total = run.total(name, kind)
    if total > limit:
        raise AssertionError(
            f"the threads {'read' if kind == 'read' else 'wrote'} {name} {total} times in all; "
            f"at most {limit} allowed" + (f" ({why})" if why else ""))


def check_puzzle(kernel, grid, block, args, expected, *, output: str = "out",
                 reads: dict | None = None, writes: dict | None = None,
                 shared_reads: int | None = None, shared_writes: int | None = None,
                 uses_shared: bool | None = None, total_reads: dict | None = None,
                 coalesced: dict | None = None, not_read: dict | None = None,
                 compiles: dict | None = None, rel: float = 1e-5,
                 abs: float = 1e-5) -> tracing.Trace:
    """Launch a puzzle's kernel on the simulator and check its answer and its accesses.

    ``kernel[grid, block](*args)`` runs with each array argument counted (see
    :func:`tracing.trace`); ``output`` names the kernel's parameter that
    holds the result, which must come in as :func:`blank` so that unwritten
    elements show. Checks, the most precise first, each failing with an
    AssertionError that says what to fix:

    1. the kernel uses no NumPy, and no thread indexes outside an array (the
       message names the array, the block and the thread);
    2. no thread reads or writes more than ``reads``/``writes``
       ({parameter: most elements per thread}), ``shared_reads``/
       ``shared_writes`` (per thread, all shared arrays together), and shared
       memory is used (or not) as ``uses_shared`` says;
    3. ``total_reads`` ({parameter: most reads by all threads together});
       ``coalesced`` ({parameter: "read" or "write"}) see :func:`expect_coalesced`;
       ``not_read`` ({parameter: boolean mask, or (mask, why)}) elements no
       thread may read;
    4. ``compiles`` ({"what": ..., "shared": True, "barriers": True}, the
       arguments of :func:`check_compiles`): the kernel compiled for a GPU, on
       ``args``, has what the puzzle is about (a missing barrier is named here,
       before the values it spoils); compiled once per kernel and argument types;
    5. every element of ``output`` is written by exactly one thread;
    6. ``output`` equals ``expected`` (float64, computed by the test cell) to
       ``rel``/``abs`` (exactly, for integer outputs), with the output's dtype.

    Returns the :class:`tracing.Trace` for further checks.
    """
    function = _check_kernel(kernel)
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args must be a tuple of the kernel's arguments, got "
                         f"{type(args).__name__}")
    names = list(function.__code__.co_varnames[:function.__code__.co_argcount])
    if output not in names:
        raise ValueError(f"output must name one of {_name(kernel)}'s parameters "
                         f"({', '.join(names)}), got {output!r}")
    if len(args) != len(names):
        raise ValueError(f"args must hold the {len(names)} arguments of {_name(kernel)} "
                         f"({', '.join(names)}), got {len(args)}")
    result = args[names.index(output)]
    if not isinstance(result, np.ndarray):
        raise ValueError(f"the argument {output} must be a numpy array made by blank(), "
                         f"got {type(result).__name__}")
    reference = np.asarray(expected, dtype=np.float64)
    if reference.shape != result.shape:
        raise ValueError(f"expected must have the shape of {output}, {result.shape}, "
                         f"got {reference.shape}")
    for label, table in (("total_reads", total_reads), ("coalesced", coalesced),
                         ("not_read", not_read)):
        unknown = sorted(set(table or {}) - set(names))
        if unknown:
            raise ValueError(f"{label} names {', '.join(unknown)}, which "
                             f"{'is' if len(unknown) == 1 else 'are'} not a parameter of "
                             f"{_name(kernel)} ({', '.join(names)})")

    for name, kind in (coalesced or {}).items():
        if kind not in ("read", "write"):
            raise ValueError(f"coalesced[{name!r}] must be 'read' or 'write', got {kind!r}")

    expect_no_numpy(kernel)
    run = traced(kernel, grid, block, *args)
    # The most precise failure first: what a thread touched, then what was written,
    # and the values last (a wrong access usually explains a wrong value).
    run.expect(reads=reads, writes=writes, shared_reads=shared_reads,
               shared_writes=shared_writes, uses_shared=uses_shared)
    for name, limit in (total_reads or {}).items():
        expect_total(run, name, limit)
    for name, kind in (coalesced or {}).items():
        expect_coalesced(run, name, kind)
    for name, rule in (not_read or {}).items():
        mask, why = rule if isinstance(rule, tuple) else (rule, "")
        expect_not_read(run, name, mask, why)
    if compiles is not None:
        _compiled_once(kernel, args, compiles)
    expect_each_written_once(run, output)
    exact = result.dtype.kind in "iu"
    expect_array(result, reference, dtype=result.dtype, rel=0.0 if exact else rel,
                        abs=0.0 if exact else abs, name=f"{output} of {_name(kernel)}")
    return run


# {(id of the kernel, argument types, options): (the kernel, its PTX facts)}; the kernel
# is kept so that its id is not reused while the entry lives.
_COMPILED: dict = {}


def _compiled_once(kernel, args, compiles: dict):
    """check_compiles(kernel, *args, **compiles), compiled once per kernel, argument
    types and options (the hidden tests launch one kernel on several sizes)."""
    if not isinstance(compiles, dict) or set(compiles) - {"what", "shared", "barriers"}:
        raise ValueError(f"compiles must be a dict of check_compiles' what, shared and "
                         f"barriers, got {compiles!r}")
    types = tuple((a.dtype.str, a.ndim) if isinstance(a, np.ndarray) else type(a).__name__
                  for a in args)
    key = (id(kernel), types, tuple(sorted(compiles.items())))
    if key not in _COMPILED:
        _COMPILED[key] = (kernel, check_compiles(kernel, *args, **compiles))
    return _COMPILED[key][1]


def check_compiles(kernel, *example_args, what: str | None = None,
                   shared: bool | None = None, barriers: bool | None = None):
    """Compile ``kernel`` for a GPU (PTX, on this CPU) and check its structure.

    ``example_args``: arguments like those of a launch (their types matter).
    ``shared``/``barriers``: the kernel must (True) declare shared memory and
    read it / synchronise its block. Also fails a kernel that calls the
    course's package (:func:`gpucourse.grader.own_work.expect_own_work`). Returns the
    :class:`ptx.PTXFacts`.
    """
    _check_kernel(kernel)
    _expect_own_work(kernel)
    return ptx.expect_structure(kernel, *example_args, what=what or _name(kernel),
                                shared=shared, barriers=barriers)


def _warm_up_kernel(source, target):
    target[0] = source[0]


# A deliberate variant of gpucourse.grader.ptx.start_compiler, which starts the
# process in the background: this one waits until a first kernel has compiled.
def start_compiler() -> None:
    """Start the PTX compiler now (a couple of seconds, once), so graded cells do not wait."""
    from gpucourse.device import cuda

    example = np.zeros(1, dtype=np.float32)
    ptx.ptx(cuda.jit(_warm_up_kernel), example, example)
