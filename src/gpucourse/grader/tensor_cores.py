"""The checks behind week 11's tensor-core exercises (exercises/11_tensor_cores).

The student writes the fragment map of ``mma.sync.m16n8k16``, a warp's
16 x 8 x 16 product and an HGEMM kernel on the course's mma intrinsic, the
XOR swizzle of a shared tile, a precision lab and one FlashAttention tile
step in half precision. The checks, none of which needs a GPU:

* **The fragment map** (:func:`expect_fragment_map`) is compared, place by
  place, with the PTX ISA's rules as :mod:`gpucourse.kernels.tensor_cores.fragments`
  lists them; while the student's function runs, the package's tables are
  scrambled, so that an answer reading them (by any route) gets them wrong,
  and an answer reading a copy of them is refused (:func:`expect_no_tables`).
* **The kernels** run on the simulator with every access counted
  (:mod:`gpucourse.grader.tracing`): each lane of the warp product must read
  exactly its fragments, and the HGEMM must read A and B from global memory
  no more often than its tiles allow; their values are compared with float64
  products, and their PTX, compiled for an H100 on this CPU, must hold
  ``mma.sync`` (and, for the HGEMM, shared memory and barriers). A kernel may
  call the course's instructions (``mma_m16n8k16`` and the others of
  :mod:`gpucourse.kernels.tensor_cores.intrinsics`) and nothing else of the
  package. On a GPU the counting is skipped (the instruction is then not
  Python) and the values are checked on the GPU.
* **The swizzle** (:func:`expect_swizzle`) is counted with
  :mod:`gpucourse.kernels.tensor_cores.banks`: every ``ldmatrix`` read of a
  tile and every 16-byte store into it must be free of bank conflicts.
* **The NumPy exercises** are compared with references built from other
  means than the answer's: the package's bf16 rounding, NumPy's float16,
  the package's ``round_to_tf32`` and
  its half-precision softmax step
  (:mod:`gpucourse.kernels.tensor_cores.half_step`). A reference that does an
  exercise's work lives in the package, never here: the run-time watch lets an
  answer run the grader's code, not the package's.

The HGEMM's tile constants live here, so that the exercise, the launch and
the access limits cannot drift apart. Every check raises ``AssertionError``
with a message for the student.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.grader import ptx, tracing
from gpucourse.grader.expect import expect_array
from gpucourse.grader.launches import _quiet, _stopping, _whole, blocks
from gpucourse.grader.own_work import expect_own_work as _expect_own_work
from gpucourse.grader.own_work import global_names, visible_names
from gpucourse.kernels.tensor_cores import fragments
from gpucourse.kernels.tensor_cores.banks import CHUNK_BYTES, bank_conflicts, ldmatrix_x4_rows
from gpucourse.kernels.tensor_cores.intrinsics import forget_earlier_calls, round_to_tf32

# What a kernel or a function of these exercises may call in the course's package.
INSTRUCTION_MODULES = ("gpucourse.kernels.tensor_cores.intrinsics",)
MMA_PTX = "mma.sync.aligned.m16n8k16"
WARP, M, N, K = fragments.WARP, fragments.M, fragments.N, fragments.K

# The HGEMM exercise: a block of 2 x 2 warps computes a BM x BN tile of C, each
# warp one 16 x 8 instruction tile; per step of BK along K the block stages a
# BM x BK tile of A and a BK x BN tile of B in shared memory.
WARPS_M, WARPS_N = 2, 2
BM, BN, BK = WARPS_M * M, WARPS_N * N, K
THREADS = WARPS_M * WARPS_N * WARP
A_LOADS, B_LOADS = BM * BK // THREADS, BK * BN // THREADS  # a thread's copies per step

# fp16 products of values near 1 summed in float32, against float64.
REL, ABS = 1e-5, 1e-5


def expect_own_work(function) -> None:
    """``own_work.expect_own_work``, allowing the course's tensor-core instructions
    (:data:`INSTRUCTION_MODULES`) and nothing else of the package."""
    _expect_own_work(function, allowed=INSTRUCTION_MODULES)


# --------------------------------------------------------------------------
# The fragment map
# --------------------------------------------------------------------------

_TABLES = {"A": fragments.A_FRAGMENT, "B": fragments.B_FRAGMENT, "C": fragments.C_FRAGMENT}
# The shapes of the operands: A is 16 x 16, B 16 x 8, C and D 16 x 8.
SHAPES = {"A": (M, K), "B": (K, N), "C": (M, N)}


def _all_tables() -> list:
    return [fragments.A_FRAGMENT, fragments.B_FRAGMENT, fragments.C_FRAGMENT,
            fragments.A_FRAGMENT_TF32, fragments.B_FRAGMENT_TF32]


@contextmanager
def _tables_scrambled():
    """While active, the package's fragment tables hold other lanes' places (lane l
    holds lane 31 - l's), in place, so that code reading them by any route is wrong."""
    tables = _all_tables()
    saved = [table.copy() for table in tables]
    try:
        for table, original in zip(tables, saved):
            table[...] = original[::-1]
        yield
    finally:
        for table, original in zip(tables, saved):
            table[...] = original


def expect_no_tables(function) -> None:
    """Fail when ``function`` (or a notebook function it calls) reads a copy of the
    package's fragment tables: an array or sequence whose values are a table's."""
    wanted = [(table.shape, table) for table in _all_tables()]
    seen: set = set()

    def visit(fn) -> None:
        fn = getattr(fn, "py_func", fn)
        code = getattr(fn, "__code__", None)
        if code is None or id(code) in seen:
            return
        seen.add(id(code))
        scope = visible_names(fn)
        for name in dict.fromkeys(global_names(code) + list(code.co_freevars)):
            value = scope.get(name)
            if isinstance(value, (np.ndarray, list, tuple)):
                try:
                    array = np.asarray(value)
                except (ValueError, TypeError):
                    continue
                if any(array.shape == shape and np.array_equal(array, table)
                       for shape, table in wanted):
                    raise AssertionError(
                        f"{fn.__name__} reads {name}, a copy of the course's fragment table: "
                        "work each place out from the lane and the index yourself")
            if callable(value) and getattr(value, "__module__", None) == fn.__module__:
                visit(value)

    visit(function)


def expect_fragment_map(fragment_place, operands=("A", "B", "C"), lanes=range(WARP)) -> None:
    """Compare ``fragment_place(operand, lane, index)`` with the PTX ISA's places
    for every index of every lane in ``lanes`` of each operand: it must return
    a tuple of two ints, (row, column) of that element of the lane's fragment."""
    for operand in operands:
        if operand not in _TABLES:
            raise ValueError(f"operands must be among 'A', 'B', 'C', got {operand!r}")
    expected = {operand: _TABLES[operand].copy() for operand in operands}
    expect_no_tables(fragment_place)
    found = {}
    with _tables_scrambled():
        for operand in operands:
            for lane in lanes:
                for index in range(expected[operand].shape[1]):
                    found[operand, lane, index] = fragment_place(operand, lane, index)
    for (operand, lane, index), place in found.items():
        if type(place) is not tuple or len(place) != 2 or not all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in place):
            raise AssertionError(f"fragment_place({operand!r}, {lane}, {index}) must return a "
                                 f"tuple of two ints (row, column), got {place!r}")
        want = tuple(int(x) for x in expected[operand][lane, index])
        if tuple(int(x) for x in place) != want:
            name = f"{operand.lower()}{index}"
            raise AssertionError(
                f"fragment_place({operand!r}, {lane}, {index}) returned {place}; element "
                f"{name} of lane {lane} (g = lane // 4 = {lane // 4}, t = lane % 4 = "
                f"{lane % 4}) is at (row, column) {want}")


# --------------------------------------------------------------------------
# Running a kernel: on the simulator with its accesses counted, or on the GPU
# --------------------------------------------------------------------------

def random_halves(rows: int, cols: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """A rows x cols float16 matrix of normal values of standard deviation ``scale``."""
    rows, cols = _whole("rows", rows), _whole("cols", cols)
    values = np.random.default_rng(seed).standard_normal((rows, cols)) * scale
    return values.astype(np.float16)


def _run(kernel, grid, block, *args):
    """Launch ``kernel[grid, block](*args)``: traced on the simulator (returns the
    Trace; the arrays are written in place), plainly on a GPU (returns None)."""
    forget_earlier_calls()
    with _quiet():
        if not on_gpu():
            try:
                return tracing.trace(kernel, grid, block, *args)
            except KeyError as error:  # the stand-in found a lane's fragments missing
                lane = str(error).rsplit(" ", 1)[-1].strip("'\"")  # after the simulator's tid
                raise AssertionError(
                    f"a lane of a warp did not call mma_m16n8k16 with the others (the "
                    f"simulator's stand-in missed lane {lane}): every lane of every warp "
                    "must call it, the same number of times, also where its elements lie "
                    "outside the matrices") from None
        with _stopping():
            device = [cuda.to_device(x) if isinstance(x, np.ndarray) else x for x in args]
            kernel[grid, block](*device)
            for host, on_device in zip(args, device):
                if isinstance(host, np.ndarray):
                    host[...] = on_device.copy_to_host()
    return None


def _names(kernel, count: int) -> tuple:
    function = getattr(kernel, "py_func", None)
    if function is None:
        raise AssertionError(f"the kernel must be a @cuda.jit function, got "
                             f"{type(kernel).__name__}")
    code = function.__code__
    if code.co_argcount != count:
        raise AssertionError(f"{function.__name__} must take {count} arguments, takes "
                             f"{code.co_argcount}")
    return code.co_varnames[:count]


def _places(table, lane: int) -> list:
    return sorted(tuple(int(x) for x in place) for place in table[lane])


def _shown(name: str, elements) -> str:
    return ", ".join(f"{name}[{r}, {c}]" for r, c in sorted(elements)[:8])


def expect_mma_in_ptx(kernel, *example_args, what: str) -> None:
    """Compile ``kernel`` for an H100 and fail unless its PTX issues mma.sync.m16n8k16."""
    text = ptx.ptx(kernel, *example_args)
    if MMA_PTX not in text:
        raise AssertionError(f"{what} must multiply on the tensor cores: call mma_m16n8k16; "
                             f"its PTX has no {MMA_PTX}")


# --------------------------------------------------------------------------
# One warp's 16 x 8 x 16 product
# --------------------------------------------------------------------------

def expect_warp_product(kernel, *, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    """Run ``kernel(a, b, c, d)`` with one block of one warp on D = A B + C (A 16 x
    16 and B 16 x 8 float16, C and D 16 x 8 float32, D starting as NaN) and
    compare D with the float64 product; on the simulator, also that each lane
    read exactly its fragments of A, B and C (the PTX ISA's places) and wrote
    exactly its elements of D. Returns D."""
    names = _names(kernel, 4)
    a, b = random_halves(M, K, seed, scale), random_halves(K, N, seed + 1, scale)
    c = (np.random.default_rng(seed + 2).standard_normal((M, N)) * scale).astype(np.float32)
    d = np.full((M, N), np.nan, dtype=np.float32)
    expected = a.astype(np.float64) @ b.astype(np.float64) + c
    run = _run(kernel, 1, WARP, a, b, c, d)
    what = f"D = A B + C (seed {seed}, values of size {scale:g})"
    if np.isnan(d).all():
        raise AssertionError(f"{what}: no element of D was written (D starts as NaN)")
    size = float(np.abs(expected).max())
    expect_array(d, expected, dtype=np.float32, rel=REL, abs=ABS * size, name=what)
    if run is not None:
        for name, table, kind in ((names[0], fragments.A_FRAGMENT, "read"),
                                  (names[1], fragments.B_FRAGMENT, "read"),
                                  (names[2], fragments.C_FRAGMENT, "read"),
                                  (names[3], fragments.C_FRAGMENT, "write")):
            seen = run.accesses(name, kind)
            for lane in range(WARP):
                touched = sorted(seen.get(((0, 0, 0), (lane, 0, 0)), []))
                want = _places(table, lane)
                if touched != want:
                    verb = "read" if kind == "read" else "wrote"
                    raise AssertionError(
                        f"lane {lane} {verb} {len(touched)} elements of {name} "
                        f"({_shown(name, touched) or 'none'}); its fragment is "
                        f"{_shown(name, want)}, each once: load exactly the places of the "
                        "fragment map")
    return d


def expect_warp_structure(kernel) -> None:
    """The warp product compiles for an H100 and issues mma.sync.m16n8k16."""
    _names(kernel, 4)
    half_a, half_b = np.zeros((M, K), np.float16), np.zeros((K, N), np.float16)
    single = np.zeros((M, N), np.float32)
    expect_mma_in_ptx(kernel, half_a, half_b, single, single.copy(), what="the warp product")


# --------------------------------------------------------------------------
# The HGEMM kernel
# --------------------------------------------------------------------------

def hgemm_launch(m: int, n: int) -> tuple[tuple, tuple]:
    """(grid, block) of the HGEMM exercise for an M x N matrix C: a block of
    THREADS threads per BM x BN tile, grid x over the columns of C."""
    return (blocks(_whole("n", n), BN), blocks(_whole("m", m), BM)), (THREADS,)


def hgemm_access_limits(m: int, n: int, k: int) -> dict:
    """What the HGEMM exercise allows: {"a", "b": reads of one thread from global
    memory, "shared": its shared-memory reads, "c": its writes of C, "a_each",
    "b_each": the most times one element of A or B is read, by all blocks}."""
    steps = blocks(k, BK)
    return {"a": steps * A_LOADS, "b": steps * B_LOADS, "shared": steps * (8 + 4), "c": 4,
            "a_each": blocks(n, BN), "b_each": blocks(m, BM)}


def expect_hgemm(kernel, m: int, n: int, k: int, *, seed: int = 0) -> np.ndarray:
    """Run ``kernel(a, b, c)`` on an M x K by K x N product of float16 matrices with
    the exercise's launch (C float32, starting as NaN), compare C with the
    float64 product, and, on the simulator, count its accesses: each thread
    reads at most its share of each tile of A and B per step of K and 12
    values of the shared tiles (its fragments), each element of A is read by
    at most one block per column of blocks (of B, per row), and each element
    of C is written exactly once. Returns C."""
    m, n, k = _whole("m", m), _whole("n", n), _whole("k", k)
    names = _names(kernel, 3)
    a, b = random_halves(m, k, seed), random_halves(k, n, seed + 1)
    c = np.full((m, n), np.nan, dtype=np.float32)
    grid, block = hgemm_launch(m, n)
    run = _run(kernel, grid, block, a, b, c)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    what = f"C at M, N, K = {m}, {n}, {k}, grid {grid}, block {block}"
    if np.isnan(c).all():
        raise AssertionError(f"{what}: no element of C was written (C starts as NaN). Check "
                             "the launch the exercise states and the bounds tests")
    expect_array(c, expected, dtype=np.float32, rel=REL, abs=ABS * float(np.abs(expected).max()),
                 name=what)
    if run is None:
        return c
    limits = hgemm_access_limits(m, n, k)
    try:
        run.expect(reads={names[0]: limits["a"], names[1]: limits["b"]},
                   writes={names[2]: limits["c"]}, shared_reads=limits["shared"],
                   uses_shared=True)
    except AssertionError as error:
        raise AssertionError(
            f"{what}: {error}. Per step of {BK} along K a thread copies {A_LOADS} elements "
            f"of A and {B_LOADS} of B into the shared tiles and reads its 8 + 4 fragment "
            "values from them") from None
    for name, limit, other in ((names[0], limits["a_each"], "column"),
                               (names[1], limits["b_each"], "row")):
        counts = run.element_counts(name)
        if counts.max() > limit:
            where = tuple(int(i) for i in np.unravel_index(int(counts.argmax()), counts.shape))
            raise AssertionError(
                f"{what}: {name}{list(where)} was read {int(counts.max())} times from global "
                f"memory; each block reads it once at most, and {limit} blocks share a "
                f"{other} of blocks: stage the tiles in shared memory and let the warps "
                "share them")
    writes = run.element_counts(names[2], "write")
    if writes.min() != 1 or writes.max() != 1:
        where = tuple(int(i) for i in np.argwhere(writes != 1)[0])
        raise AssertionError(f"{what}: {names[2]}{list(where)} was written "
                             f"{int(writes[where])} times; each element of C exactly once")
    return c


def expect_hgemm_structure(kernel) -> None:
    """The HGEMM compiles for an H100 with shared memory, barriers and mma.sync."""
    _names(kernel, 3)
    half = np.zeros((8, 8), np.float16)
    ptx.expect_structure(kernel, half, half.copy(), np.zeros((8, 8), np.float32),
                         what="the HGEMM", shared=True, barriers=True)
    expect_mma_in_ptx(kernel, half, half.copy(), np.zeros((8, 8), np.float32),
                      what="the HGEMM")


# --------------------------------------------------------------------------
# The swizzle
# --------------------------------------------------------------------------

def _address(place, row: int, chunk: int, chunks_per_row: int) -> int:
    stored = place(row, chunk)
    if isinstance(stored, bool) or not isinstance(stored, (int, np.integer)):
        raise AssertionError(f"the layout must return an int (the stored chunk), got "
                             f"{stored!r} for row {row}, chunk {chunk}")
    return (row * chunks_per_row + int(stored)) * CHUNK_BYTES


def read_conflicts(place, chunks_per_row: int, rows: int = 16) -> int:
    """Bank conflicts of every ldmatrix.x4 that reads a 16 x 16 fragment of A from a
    tile of ``rows`` rows of ``chunks_per_row`` 16-byte chunks, chunk c of row r
    stored at chunk ``place(r, c)`` of its row: summed over the tile's 16-row
    bands and pairs of chunks."""
    total = 0
    for first_row in range(0, rows, 16):
        for first_chunk in range(0, chunks_per_row - 1, 2):
            lanes = ldmatrix_x4_rows(first_row, first_chunk)
            total += bank_conflicts([_address(place, r, c, chunks_per_row) for r, c in lanes],
                                    CHUNK_BYTES)
    return total


def store_conflicts(place, chunks_per_row: int, rows: int = 16) -> int:
    """Bank conflicts of the 16-byte stores that fill the same tile, a warp storing
    32 consecutive chunks (row by row) at a time."""
    chunks = [(i // chunks_per_row, i % chunks_per_row) for i in range(rows * chunks_per_row)]
    total = 0
    for start in range(0, len(chunks), WARP):
        total += bank_conflicts([_address(place, r, c, chunks_per_row)
                                 for r, c in chunks[start:start + WARP]], CHUNK_BYTES)
    return total


def expect_swizzle(swizzled_chunk, chunks_per_row: int, rows: int = 16) -> None:
    """``swizzled_chunk(row, chunk, chunks_per_row)`` must keep each row's chunks
    in the row, each at one place (a permutation), as chunk XOR a value of the
    row, and make every ldmatrix read and every 16-byte store of the tile free
    of bank conflicts."""
    def place(row, chunk):
        return swizzled_chunk(row, chunk, chunks_per_row)

    for row in range(rows):
        stored = [place(row, chunk) for chunk in range(chunks_per_row)]
        if sorted(int(s) if isinstance(s, (int, np.integer)) else -1 for s in stored) != \
                list(range(chunks_per_row)):
            raise AssertionError(
                f"with {chunks_per_row} chunks a row, row {row} stores its chunks at {stored}: "
                f"each of 0 to {chunks_per_row - 1} exactly once (chunks stay in their row)")
        keys = {int(s) ^ chunk for chunk, s in enumerate(stored)}
        if len(keys) != 1:
            raise AssertionError(f"with {chunks_per_row} chunks a row, row {row} stores chunk "
                                 f"c at {stored}: not c XOR one value of the row")
    for name, count in (("ldmatrix reads", read_conflicts(place, chunks_per_row, rows)),
                        ("16-byte stores", store_conflicts(place, chunks_per_row, rows))):
        if count:
            raise AssertionError(f"with {chunks_per_row} chunks a row, the {name} of a "
                                 f"{rows}-row tile still meet {count} bank conflicts: the "
                                 "8 rows an ldmatrix matrix reads must put their chunk in 8 "
                                 "different 16-byte slots of the 128-byte bank line")


# --------------------------------------------------------------------------
# The precision lab
# --------------------------------------------------------------------------

def bf16_reference(x) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest, ties to even), as float32: the
    package's rounding (``gpucourse.chapters.tensor_cores.round_to_bf16``, what
    cvt.rn.bf16.f32 does; imported here, where it is needed, because the
    chapter's module loads the course's results)."""
    from gpucourse.chapters.tensor_cores import round_to_bf16

    return round_to_bf16(np.asarray(x, dtype=np.float32))


def rounded(x, fmt: str) -> np.ndarray:
    """float32 ``x`` rounded to ``fmt`` ("fp16", "bf16" or "tf32"), as float64."""
    x = np.asarray(x, dtype=np.float32)
    if fmt == "fp16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float64)
    if fmt == "bf16":
        return bf16_reference(x).astype(np.float64)
    if fmt == "tf32":
        return round_to_tf32(x).astype(np.float64)
    raise ValueError(f"fmt must be 'fp16', 'bf16' or 'tf32', got {fmt!r}")

