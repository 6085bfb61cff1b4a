"""The checks behind chapter 8's SGEMM exercises (exercises/08_sgemm), level by level.

The student writes every level of the chapter's ladder; the graded test cells
check each kernel three ways, none of which needs a GPU:

* **by value** (:func:`expect_product`): the kernel runs on the launch its
  exercise states, on ragged shapes, a single row, K = 1, and matrices holding
  NaN and Inf, against NumPy in float64 (``grader.expect.expect_array``);
* **by what each thread touches** (:func:`expect_accesses`): on the
  simulator, with :func:`gpucourse.grader.tracing.trace`, each thread's
  reads of A and B, its shared-memory reads and the elements of C it writes
  must be what the level is about (a tile per step of K, a column or a patch
  of outputs per thread);
* **by what a GPU would run** (:func:`expect_level_structure`): the kernel is
  compiled to PTX for a real GPU target and must show the level's idea (shared
  memory and barriers from level 3, several accumulators from 4a, 128-bit
  global loads at level 5).

Each level's launch is written once, in :func:`launch_shape`, from the
contracts the exercises' docstrings state. :class:`RecordingFactory` grades
the level-6 search: it stands in for the student's level-5 kernel factory,
records what the search builds, launches and times, and feeds it timings.

Every check raises ``AssertionError`` with a message for the student, and
``ValueError`` for a bad argument of its own. The module is one of the
grader's three kernel-exercise modules (with :mod:`gpucourse.grader.puzzles`
and :mod:`gpucourse.grader.attention`): each knows its own exercises'
contract, and all three use the same tracing and PTX tools.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda
from gpucourse.grader.expect import expect_array
from gpucourse.grader.own_work import expect_own_work as _expect_own_work
from gpucourse.grader import ptx, tracing
# Shared by the three kernel-exercise modules (and re-exported: `check.blocks`,
# `check.random_matrix`); an index outside an array fails naming the array, block and thread.
from gpucourse.grader.launches import (_quiet, _stopping, _whole, blocks, naming_out_of_bounds,
                                       random_matrix, traced)
from numba import float32  # noqa: E402 (after gpucourse.device, which configures Numba)

LEVELS = ("1", "2", "3", "4a", "4b", "5")
# Levels 1 and 2 run 16 x 16 threads per block, one per element of C; level 3
# stages TILE x TILE tiles (the exercise's TILE).
BLOCK_SIDE = 16
TILE = 16
# float32 sums of up to ~50 products of standard normal values, against float64.
REL, ABS = 1e-5, 1e-5
# What the level-6 search counts as a correct candidate: max |C - ref| <= this * max |ref|.
TUNING_TOLERANCE = 1e-4
CONFIG_FIELDS = ("bm", "bn", "bk", "tm", "tn")
# What each level's PTX must show, beyond compiling for a GPU.
STRUCTURE = {
    "1": {"shared": False},
    "2": {"shared": False},
    "3": {"shared": True, "barriers": True},
    "4a": {"shared": True, "barriers": True},
    "4b": {"shared": True, "barriers": True},
    "5": {"shared": True, "barriers": True, "vector_global_loads": True,
          "max_scalar_global_loads": 0},
}


def _level(level) -> str:
    key = str(level)
    if key not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    return key


def _config(level: str, config) -> tuple:
    """The level's tile configuration as a tuple of ints: (bm, bn, bk, tm) for 4a,
    (bm, bn, bk, tm, tn) for 4b and 5, () for levels 1-3."""
    fields = {"4a": 4, "4b": 5, "5": 5}.get(level, 0)
    if not fields:
        if config is not None:
            raise ValueError(f"config applies to levels 4a, 4b and 5, got {config!r} for "
                             f"level {level}")
        return ()
    if not isinstance(config, tuple) or len(config) != fields:
        names = ", ".join(CONFIG_FIELDS[:fields])
        raise ValueError(f"config of level {level} must be a tuple ({names}), got {config!r}")
    values = tuple(_whole(name, v) for name, v in zip(CONFIG_FIELDS, config))
    bm, bn, bk, tm = values[:4]
    tn = values[4] if fields == 5 else 1
    if bm % tm or bn % tn:
        raise ValueError(f"config must have tm dividing bm and tn dividing bn, got {config}")
    threads = (bm // tm) * (bn // tn)
    width = 4 if level == "5" else 1
    if (bm * bk) % (threads * width) or (bk * bn) % (threads * width):
        raise ValueError(f"config must let the {threads} threads load the tiles in equal "
                         f"shares of {width} floats, got {config}")
    if level == "5" and (bk % 4 or bn % 4 or tm % 4 or tn % 4):
        raise ValueError(f"config of level 5 must have bk, bn, tm and tn multiples of 4, "
                         f"got {config}")
    return values


def threads_per_block(level, config=None) -> int:
    """Threads in one block of `level` (with `config` for levels 4a-5)."""
    key = _level(level)
    values = _config(key, config)
    if key in ("1", "2", "3"):
        return BLOCK_SIDE * BLOCK_SIDE
    bm, bn, _, tm = values[:4]
    tn = values[4] if len(values) == 5 else 1
    return (bm // tm) * (bn // tn)


def launch_shape(level, m: int, n: int, config=None) -> tuple[tuple, tuple]:
    """(grid, block) of `level` for an M x N matrix C, as the exercises state them.

    Levels 1-2: 16 x 16 threads, one per element of C; level 1's x index is
    the row of C, level 2's the column. Level 3: TILE x TILE threads, grid x
    over columns. Levels 4a-5: one dimension of threads, a block per bm x bn
    tile of C, grid x over the columns of C.
    """
    key = _level(level)
    m, n = _whole("m", m), _whole("n", n)
    values = _config(key, config)
    if key == "1":
        return (blocks(m, BLOCK_SIDE), blocks(n, BLOCK_SIDE)), (BLOCK_SIDE, BLOCK_SIDE)
    if key == "2":
        return (blocks(n, BLOCK_SIDE), blocks(m, BLOCK_SIDE)), (BLOCK_SIDE, BLOCK_SIDE)
    if key == "3":
        return (blocks(n, TILE), blocks(m, TILE)), (TILE, TILE)
    bm, bn = values[:2]
    return (blocks(n, bn), blocks(m, bm)), (threads_per_block(key, config),)


def run(kernel, a: np.ndarray, b: np.ndarray, grid, block) -> np.ndarray:
    """kernel[grid, block](a, b, c) on the device (the simulator or a GPU); returns C.
    C starts as NaN, so an element the kernel never writes shows up as NaN."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
            raise ValueError(f"{name} must be a 2D float32 numpy array, got {x!r}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a's columns must match b's rows, got {a.shape} and {b.shape}")
    host_c = np.full((a.shape[0], b.shape[1]), np.nan, dtype=np.float32)
    c = cuda.to_device(host_c)
    with naming_out_of_bounds(kernel, grid, block, a, b, host_c), _quiet(), _stopping():
        kernel[grid, block](cuda.to_device(a), cuda.to_device(b), c)
    return c.copy_to_host()


def _inputs(m, n, k, seed, special: bool):
    a, b = random_matrix(m, k, seed), random_matrix(k, n, seed + 1)
    if special:
        # A NaN in A makes a row of C NaN; an Inf in B makes a column of C +-Inf,
        # except where the row of A holds a zero there (0 * Inf is NaN).
        a[m // 2, k // 2] = np.nan
        b[k - 1, n // 2] = np.inf
        if m > 1:
            a[m - 1, k - 1] = 0.0
    return a, b


def expect_product(kernel, level, m: int, n: int, k: int, config=None, *, seed: int = 0,
                   special: bool = False) -> np.ndarray:
    """Run `kernel` as `level` on an M x K by K x N product and compare C with NumPy's
    float64 product. ``special``: A holds a NaN, B an Inf and a zero meets the Inf,
    which C must propagate as NumPy does. Returns C."""
    key = _level(level)
    m, n, k = _whole("m", m), _whole("n", n), _whole("k", k)
    grid, block = launch_shape(key, m, n, config)
    a, b = _inputs(m, n, k, seed, special)
    with np.errstate(invalid="ignore"):
        expected = a.astype(np.float64) @ b.astype(np.float64)
    c = run(kernel, a, b, grid, block)
    shown = f" ({', '.join(f'{f}={v}' for f, v in zip(CONFIG_FIELDS, config))})" if config else ""
    what = f"C of level {key}{shown} at M, N, K = {m}, {n}, {k}, grid {grid}, block {block}"
    if special:
        what += " with a NaN in A and an Inf in B"
    if np.isnan(c).all() and not np.isnan(expected).all():
        raise AssertionError(f"{what}: no element of C was written (C starts as NaN). Check "
                             "the launch the exercise states and the bounds test")
    expect_array(c, expected, dtype=np.float32, rel=REL, abs=ABS, name=what)
    return c


def trace_level(kernel, level, m: int, n: int, k: int, config=None, *, seed: int = 0):
    """The :class:`~gpucourse.grader.tracing.Trace` of `kernel` run as `level` on the
    simulator, with A, B and C counted (under the kernel's own names for them)."""
    key = _level(level)
    grid, block = launch_shape(key, m, n, config)
    a, b = _inputs(_whole("m", m), _whole("n", n), _whole("k", k), seed, special=False)
    c = np.full((m, n), np.nan, dtype=np.float32)
    _parameters(kernel)
    with _quiet():
        return traced(kernel, grid, block, a, b, c)


def _parameters(kernel) -> tuple[str, str, str]:
    """The kernel's names for A, B and C."""
    function = getattr(kernel, "py_func", None)
    if function is None:
        raise ValueError(f"kernel must be a @cuda.jit kernel, got {type(kernel).__name__}")
    code = function.__code__
    if code.co_argcount != 3:
        raise AssertionError(f"{function.__name__} must take three arguments (a, b, c), "
                             f"takes {code.co_argcount}")
    return code.co_varnames[:3]


def access_limits(level, k: int, config=None) -> dict:
    """What one thread of `level` may touch for a product with K = k, as the exercise
    states it: {"a": reads of A, "b": reads of B, "shared": shared-memory reads,
    "c": elements of C written, "rows": distinct rows of C, "cols": distinct columns}.
    ``shared`` is None where the level uses no shared memory."""
    key = _level(level)
    k = _whole("k", k)
    values = _config(key, config)
    if key in ("1", "2"):
        return {"a": k, "b": k, "shared": None, "c": 1, "rows": 1, "cols": 1}
    if key == "3":
        steps = blocks(k, TILE)
        return {"a": steps, "b": steps, "shared": 2 * TILE * steps, "c": 1, "rows": 1, "cols": 1}
    bm, bn, bk, tm = values[:4]
    tn = values[4] if len(values) == 5 else 1
    threads = threads_per_block(key, config)
    steps = blocks(k, bk)
    # Each step of K: an equal share of each tile from global memory; then, per
    # column of the tile, tm values of A and tn of B from shared memory (4a:
    # tm values of A and one of B).
    return {"a": steps * (bm * bk // threads), "b": steps * (bk * bn // threads),
            "shared": steps * bk * (tm + tn), "c": tm * tn, "rows": tm, "cols": tn}


def expect_accesses(kernel, level, m: int, n: int, k: int, config=None, *,
                    seed: int = 0) -> None:
    """Trace `kernel` as `level` on the simulator and fail when a thread reads or writes
    more than the level allows (:func:`access_limits`), or, at levels 1 and 2, writes
    another element of C than its own."""
    key = _level(level)
    values = _config(key, config)
    if values and (m < values[0] or n < values[1]):
        raise ValueError(f"m and n must be at least bm and bn (whole tiles of C, so that "
                         f"whole patches can be checked), got m={m}, n={n} for {config}")
    trace = trace_level(kernel, key, m, n, k, config, seed=seed)
    limits = access_limits(key, k, config)
    a, b, c = _parameters(kernel)
    what = f"level {key}"
    try:
        trace.expect(reads={a: limits["a"], b: limits["b"]}, writes={c: limits["c"]},
                     shared_reads=limits["shared"],
                     uses_shared=None if limits["shared"] is None else True)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}. {_why(key, k, config, limits)}") from None
    if key in ("1", "2"):
        _expect_own_element(trace, c, key, m, n)
    else:
        _expect_patch(trace, c, key, limits)


def _why(level: str, k: int, config, limits: dict) -> str:
    if level in ("1", "2"):
        return (f"At level {level} a thread computes one element of C from one row of A and "
                f"one column of B: K = {k} reads of each, one write")
    if level == "3":
        return (f"At level 3 a thread copies one element of A and one of B into the shared "
                f"tiles per step of K ({blocks(k, TILE)} steps for K = {k}) and reads "
                f"2 x TILE values from shared memory per step")
    tn = "1" if level == "4a" else "tn"
    return (f"At level {level} a thread loads an equal share of each tile per step of K (at "
            f"most {limits['a']} elements of A and {limits['b']} of B in all for K = {k}), "
            f"reads tm + {tn} values from shared memory per column of the tile (at most "
            f"{limits['shared']} in all), and writes its {limits['rows']} x {limits['cols']} "
            "outputs of C once each")


def _expect_own_element(trace, c_name: str, level: str, m: int, n: int) -> None:
    """Levels 1 and 2: each thread writes exactly its own element of C, or nothing
    outside C. Level 1's x index is the row, level 2's the column."""
    for thread, elements in sorted(trace.accesses(c_name, "write").items()):
        if thread == ("host",):
            continue
        (bx, by, _), (tx, ty, _) = thread
        x, y = bx * BLOCK_SIDE + tx, by * BLOCK_SIDE + ty
        row, col = (x, y) if level == "1" else (y, x)
        if list(elements) != [(row, col)]:
            shown = ", ".join(f"{c_name}[{r}, {c}]" for r, c in elements)
            index = "x index is the row" if level == "1" else "x index is the column"
            raise AssertionError(
                f"level {level}: {tracing.thread_name(thread)} wrote "
                f"{shown}; it must write "
                f"{c_name}[{row}, {col}] once (at level {level} the thread's {index} of C)")
    written = {e for elements in trace.accesses(c_name, "write").values() for e in elements}
    if len(written) != m * n:
        raise AssertionError(f"level {level}: only {len(written)} of the {m * n} elements of "
                             "C were written")


def _expect_patch(trace, c_name: str, level: str, limits: dict) -> None:
    """Levels 3-5: each thread's outputs lie in at most `rows` rows and `cols` columns of C
    (a column of tm outputs at level 4a, a tm x tn patch at 4b and 5); and some thread
    writes a whole patch (a kernel that spreads the work thinner is another level)."""
    most = 0
    for thread, elements in sorted(trace.accesses(c_name, "write").items()):
        rows, cols = {e[0] for e in elements}, {e[1] for e in elements}
        most = max(most, len(elements))
        if len(rows) > limits["rows"] or len(cols) > limits["cols"]:
            shape = ("a column of tm outputs" if level == "4a" else
                     "a tm x tn patch of outputs" if level in ("4b", "5") else "one output")
            raise AssertionError(
                f"level {level}: {tracing.thread_name(thread)} wrote C in rows "
                f"{sorted(rows)} and columns {sorted(cols)}; at level {level} a thread "
                f"computes {shape}: at most {limits['rows']} rows and {limits['cols']} columns")
    if most < limits["c"]:
        raise AssertionError(f"level {level}: no thread wrote more than {most} elements of C; "
                             f"each thread must compute {limits['rows']} x {limits['cols']} "
                             "outputs (the product was chosen so that whole tiles fit in C)")


def _example_arguments():
    matrix = np.zeros((8, 8), dtype=np.float32)
    return matrix, matrix.copy(), matrix.copy()


def expect_level_structure(kernel, level, config=None):
    """Compile `kernel` for a GPU (compute capability 9.0, on this CPU) and fail when its
    PTX lacks what `level` is about (:data:`STRUCTURE`; levels 4a-5 also need at least
    tm or tm x tn fused multiply-adds, one per accumulator). Returns the PTX facts."""
    key = _level(level)
    values = _config(key, config)
    wanted = dict(STRUCTURE[key])
    if values:
        wanted["min_fma"] = values[3] * (values[4] if len(values) == 5 else 1)
    return ptx.expect_structure(kernel, *_example_arguments(), what=f"level {key}",
                                **wanted)


# A deliberate variant of gpucourse.grader.own_work.expect_own_work (which the puzzles
# and the attention kernels use as it is): SGEMM's levels 5 and 6 may call the
# course's 128-bit load and store helpers.
def expect_own_work(function) -> None:
    """``own_work.expect_own_work``, allowing the course's 128-bit load and store helpers."""
    _expect_own_work(function, allowed=ptx.ALLOWED_HELPER_MODULES)


# --------------------------------------------------------------------------
# Level 6: grading a search over tile configurations
# --------------------------------------------------------------------------

def _make_patch_kernel(bm: int, bn: int, tm: int, tn: int, offset: float, writes: bool):
    """A plain kernel on level 5's launch: each thread computes its tm x tn patch of C
    straight from global memory, adds `offset` (0 for a correct kernel) and writes it,
    unless `writes` is False (then C is left as it was)."""
    threads_per_row = bn // tn
    add = np.float32(offset)

    @cuda.jit
    def patch_kernel(a, b, c):
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * bm + (t // threads_per_row) * tm
        col0 = cuda.blockIdx.x * bn + (t % threads_per_row) * tn
        for i in range(tm):
            for j in range(tn):
                row, col = row0 + i, col0 + j
                if writes and row < c.shape[0] and col < c.shape[1]:
                    acc = float32(0.0)
                    for q in range(a.shape[1]):
                        acc += a[row, q] * b[q, col]
                    c[row, col] = acc + add

    return patch_kernel


class _RecordedKernel:
    """A kernel that notes each launch (its configuration) before running it."""

    def __init__(self, kernel, config: tuple, launches: list):
        self._kernel, self._config, self._launches = kernel, config, launches

    def __getitem__(self, launch):
        configured = self._kernel[launch]

        def launched(*args):
            self._launches.append(self._config)
            return configured(*args)

        return launched


class RecordingFactory:
    """Stands in for a student's level-5 kernel factory while a tile search is graded.

    Calling it as ``factory(bm, bn, bk, tm, tn)`` makes a kernel with level 5's launch
    that computes C correctly (each thread its tm x tn patch, from global memory) and
    notes the configuration in ``made``; each launch is noted in ``launches``. The
    configurations in ``wrong`` get a kernel that writes a wrong C (plus one) and
    those in ``unwritten`` one that writes nothing (C stays NaN). ``time_s(run)`` is
    a timing function for the search: it calls run() once, checks that it launched a
    candidate, notes which in ``timed`` and returns ``seconds[config]``.
    """

    def __init__(self, seconds: dict, wrong=(), unwritten=()):
        if not isinstance(seconds, dict) or not all(
                isinstance(c, tuple) and len(c) == 5 and isinstance(s, (int, float))
                for c, s in seconds.items()):
            raise ValueError("seconds must map (bm, bn, bk, tm, tn) tuples to numbers, got "
                             f"{seconds!r}")
        self.seconds = dict(seconds)
        self.wrong, self.unwritten = set(wrong), set(unwritten)
        self.made: list[tuple] = []
        self.launches: list[tuple] = []
        self.timed: list[tuple] = []

    def __call__(self, bm, bn, bk, tm, tn):
        config = tuple(_whole(name, v) for name, v in zip(CONFIG_FIELDS, (bm, bn, bk, tm, tn)))
        self.made.append(config)
        if bm % tm or bn % tn:
            raise ValueError(f"the factory was given {config}, where tm does not divide bm "
                             "or tn does not divide bn")
        kernel = _make_patch_kernel(bm, bn, tm, tn, 1.0 if config in self.wrong else 0.0,
                                    config not in self.unwritten)
        return _RecordedKernel(kernel, config, self.launches)

    def time_s(self, run) -> float:
        if not callable(run):
            raise AssertionError(f"time_s must be given a function that runs the candidate "
                                 f"once, got {run!r}")
        before = len(self.launches)
        run()
        if len(self.launches) == before:
            raise AssertionError("the function handed to time_s must launch the candidate's "
                                 "kernel (it launched nothing)")
        config = self.launches[-1]
        self.timed.append(config)
        if config not in self.seconds:
            raise AssertionError(f"the search timed {config}, which it should not have")
        return float(self.seconds[config])
