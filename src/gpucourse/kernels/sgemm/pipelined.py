"""The walk along K with cp.async: tiles copied from global to shared memory
several steps ahead, with no round trip through registers (level 6's kernel
with ``TileConfig(..., stages=2 to 5)``; issue 33's work: four rings are
in the H200's menu).

Levels 5-7 fetch the next tiles into registers while they multiply the
current ones, and store them to shared memory after (building_blocks, (4)).
That costs each thread registers for the tiles in flight (a_staged and
b_staged) and two instructions for every float it moves, and it hides one
step of latency. cuBLAS's fp32 kernels on the H100 and H200 (named
``..._stage3_...``) copy instead with ``cp.async`` (``_async_copy``), three
tiles of K ahead.

Here `stages` copies of the shared tiles form a ring. Before the walk, the
first stages - 1 tiles are copied, one group of copies each. Each step then
waits until the oldest group has landed (at most stages - 2 still in flight),
takes a barrier (every thread's copies are in; and every thread is done with
the copy the step overwrites, the one read a step earlier), starts copying the
tile stages - 1 steps ahead into that copy, and multiplies the landed one.
One barrier a step, as with levels 5-7's two copies.

A's tile is stored k-major, as levels 5-7 store it, so each float is copied by
itself (4 bytes), which also means that a row of A needs no alignment: a
ragged K costs nothing here. Its rows in shared memory are bm + 4 floats
apart (A_PAD): a warp's 32 copies cover bk columns of K for 32 / bk rows of A,
and without the pad every copy of one row of A would land in the same bank.
B's tile comes 16 bytes a copy where its rows allow (n a multiple of 4; see
below for the others), else 8 bytes a copy where n is even (``padding.PAIRS``),
else 4. ``config.check_config`` checks that the block's threads share
the copies equally and that the ring fits in shared memory.

What a copy costs besides the copy. Each copy can find its source from its
row and column every step, checked against the matrices' edges
(``COPY_ADDRESSES = "each"``, the default), or work its address out once and
add an offset each step, copying tiles that lie inside the matrices
unchecked ("once": fewer instructions). On the H200 "each" ran 1000^3 in
56.9 us against 62.7 (64 x 128 x 16 tiles of 8 x 8,
results/sgemm_pipelined-h200-2026-11-30.json): fewer instructions did not
make the loop faster. The walk picks its copy of the ring at run time.
Written out once per copy instead (two branches, each naming its copy by a
constant, as levels 5-7 do), the loop issued fewer instructions still but
ran 1000^3 at half the speed (116 against 61 us; benchmarks/NOTES.md). Not
measured why; a plausible reading is the loop's size, two steps of 1,024
FMAs each (about 41 KB of instructions), beyond what the SM's instruction
caches hold, with one block an SM to hide the fetches.

Where n is not a multiple of 4, B's rows do not allow 16-byte copies:
the ring then copies B 4 bytes at a time (8 where n is even and the tile
has at most 64 rows, entry_point.RING_PAIRS, C then stored 8 bytes at a
time too), in the same launch, or matmul
first copies B alone into rows of n rounded up to 4 (entry_point's
``_ring_plan``, ``padding.padded_b``), whichever the shape model prices
cheaper: the loop longer by the ring's measured share, which depends on how
full the busiest SM is (``shape_model.ring_scalar_b_share``), or the copy, timed on its own
(``padding.ring_copy_us``, benchmarks/sgemm_ring_copy.py), and its launch on
the host. At calls of about 20 us the host's second launch decided
(benchmarks/sgemm_kernel_times.py). A is read as given, whatever K is.
A third way, off until a GPU has timed it (entry_point.RING_SHIFTED): copy
each row of B's tile as the 16-byte chunks of memory that hold it, one more
chunk than its floats need, wherever it starts (``_make_shifted_copies``),
then move the rows into an aligned tile between two barriers
(``make_realign``): no copy of B first, and the loop's 16-byte reads kept.

Measured on the H200 (benchmarks/NOTES.md has every run), 16-deep steps in
two stages, as auto runs them in the grid of 2026-11-30
(results/sgemm_grid-h200-2026-11-30.json, with stream-K on rings and B
padded where n is ragged): auto picks a ring at 28 of its 37 shapes (not
at the eight of 512 or less on a side, nor 8192 x 2304 x 768), and every shape with M and N of 512 or more runs at 86% of
cuBLAS or more (1000^3 87%, 1537 x 1023 x 771 86%, 3001 x 2999 x 1009 90%).
With 8-deep steps in three stages, as cuBLAS's kernels run, slower nearly
everywhere (reruns/sgemm_pipelined-h200-2026-11-29-first.json).
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels._async_copy import (copy_float2_async_from, copy_float4_async_from,
                                           copy_float4_async_part, copy_float_async_from,
                                           cp_async_commit, cp_async_wait, grid_dependency_wait,
                                           matrix_address, tile_address)
from gpucourse.kernels._vector_load import load_float4_flat
from gpucourse.kernels._vector_store import store_float4_flat
from gpucourse.kernels.sgemm.config import A_PAD, ONE, ZERO, _INLINE, _u
from gpucourse.kernels.sgemm.padding import SHIFTED
from numba import int64, uint64  # noqa: E402 (after gpucourse.device)

# How a copy finds its source in global memory: "each" (from its row and
# column every step, each copy checked against the edges; the default), or
# "once" (each copy's address worked out before the walk, then an offset a
# step, and tiles inside the matrices copied unchecked). "once" issues fewer
# instructions (74 besides the arithmetic per 1,024 FMAs offline, against
# level 6's 87 per 2,048), yet on the H200 "each" ran 1000^3 in 56.9 us
# against 62.7 (64 x 128 x 16 tiles of 8 x 8; results/sgemm_pipelined-h200-
# 2026-11-30.json, with the FMA orders of vectorized.RING_FMA_ORDER).
COPY_ADDRESSES = "each"
# Whether 4-byte copies of B (a ring reading a ragged B as given) step from
# one address down B's rows, as the 8-byte copies do, rather than each
# working its address out from its row and column. Offline (ptxas 13,
# sm_90) that takes the 64 x 128 ring's loop from 1,384 instructions per
# 1,024 FMAs to 1,324, in 167 registers against 168, no spills. On: on the
# H200 it made the call faster than unstepped copies at 24 of 29 ring shapes,
# by 5.8% at the median (benchmarks/results/reruns/sgemm_ring_pairs-h200-
# 2026-12-01-copy-ways.json, "scalar_stepped" against "scalar"), unlike
# "once" above, where fewer instructions were slower.
STEP_SCALAR_COPIES = True


def a_stride(bm: int) -> int:
    """The floats from one k-row of A's shared tile to the next."""
    return bm + A_PAD


def shifted_row(bn: int) -> int:
    """The floats from one row of a shifted ring's raw tile of B to the next:
    a row's bn floats start anywhere in its first 16 bytes (``SHIFTED``)."""
    return bn + 4


def make_tile_copies(bm: int, bn: int, bk: int, threads: int, vectorized: bool | str,
                     interior: bool = False):
    """copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k, a_to,
    b_to): start copying the tiles at column k_next of A (rows row0 ...) and
    row k_next of B (columns col0 ...) into the copy of the tiles whose first
    floats are at shared addresses a_to and b_to (``_async_copy.tile_address``);
    zeros past the matrices' edges, K ending at k. A k-major (a_tile[kk * (bm +
    A_PAD) + r]), B as is (b_tile[kk * bn + col]). With `interior` (128-bit
    loads only), the caller promises tiles that cover the matrices exactly: no
    copy is checked against the edges.

    A thread's copies of one tile lie a fixed distance apart, in global memory
    and in shared memory, so each is its first's address plus a constant: the
    thread's column of A's tile (tid % bk) is the same in all of them, its
    rows threads / bk apart; B's the same along its rows (or, where a row of B
    takes several of the block's passes, along the row). `vectorized`: True
    (16 bytes of B a copy), "pairs" (8 bytes: rows an even number of floats
    long, on 8 bytes), False (4 bytes) or "shifted" (``padding.SHIFTED``: each
    row of B's tile as the 16-byte chunks of memory that hold it, bn / 4 + 1
    of them, into a raw tile of rows ``shifted_row(bn)`` floats apart, where
    the row's first float lands (its address % 16) / 4 floats in;
    ``make_realign`` then moves the rows into place)."""
    if vectorized == SHIFTED:
        return _make_shifted_copies(bm, bn, bk, threads)
    # check_config has made sure that the threads share each tile's copies
    # equally, in whole rows of the tile or whole passes over a row, four
    # floats of B a copy; so they do two floats a copy.
    width = 2 if vectorized == "pairs" else 4 if vectorized else 1
    per_row = bn // width  # copies a row of B's tile takes
    A_COPIES, A_ROWS_APART, BM, BK, BN, A_STRIDE = _u(bm * bk // threads, threads // bk, bm, bk,
                                                      bn, a_stride(bm))
    B_COPIES, PER_ROW, WIDTH = _u(bk * bn // width // threads, per_row, width)
    ROWS_OF_B = threads % per_row == 0  # a pass covers whole rows of B
    B_ROWS_APART = _u(threads // per_row if ROWS_OF_B else 0)
    PASSES = _u(1 if ROWS_OF_B else per_row // threads)  # passes a row of B takes
    THREADS, FLOAT_BYTES = _u(threads, 4)
    if COPY_ADDRESSES not in ("once", "each"):
        raise ValueError(f"COPY_ADDRESSES must be 'once' or 'each', got {COPY_ADDRESSES!r}")
    EACH = COPY_ADDRESSES == "each"
    # 8-byte copies of B (padding.PAIRS), and 4-byte ones with
    # STEP_SCALAR_COPIES, step from one address down B's rows (below).
    STEP_ROWS = ROWS_OF_B and (width == 2 or (width == 1 and STEP_SCALAR_COPIES))
    INTERIOR = bool(interior and width == 4) and not EACH
    # n % 4 == 0 (n even): a copy's four (two) floats are all inside or all outside.
    copy_b = {4: copy_float4_async_from, 2: copy_float2_async_from}.get(width,
                                                                       copy_float_async_from)

    copy_a_each = _make_a_copies(bm, bk, threads)

    @cuda.jit(device=True, **_INLINE)
    def b_place(tid, s):
        # Copy s of B's tile: its row kb and first column j in the tile.
        if ROWS_OF_B:
            return tid // PER_ROW + s * B_ROWS_APART, (tid % PER_ROW) * WIDTH
        return s // PASSES, (tid + (s % PASSES) * THREADS) * WIDTH

    @cuda.jit(device=True, **_INLINE)
    def copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k, a_to, b_to):
        # Most tiles lie inside the matrices: there (one test for the block,
        # the same in every thread) no copy is checked; at an edge, each is.
        k_inside = INTERIOR or k_next + BK <= k
        # A: the thread's column kk of the tile, rows r, r + threads / bk, ...
        # Each copy's source is its row's address at column kk (the same
        # every step: the compiler works it out once) plus k_next floats.
        kk, r = tid % BK, tid // BK
        col = k_next + kk
        along = k_next * uint64(a.strides[1])
        first = a_to + (kk * A_STRIDE + r) * FLOAT_BYTES
        if EACH:  # every address from its row and column, every copy checked
            copy_a_each(a, a_tile, tid, row0, k_next, m, k, a_to)
            if STEP_ROWS:
                # Copies that step from one address by B's rows: worked out
                # from each copy's row and column, ptxas held the 64 x 128
                # ring's 8-byte addresses in 193 registers (two blocks an
                # SM); so, 162.
                kb0, j = b_place(tid, ZERO)
                base = matrix_address(b, k_next + kb0, col0 + j)
                step = uint64(b.strides[0]) * B_ROWS_APART
                col_in = col0 + j < n
                for s in range(B_COPIES):
                    kb = kb0 + s * B_ROWS_APART
                    copy_b(b_tile, b_to + (kb * BN + j) * FLOAT_BYTES, b, base + s * step,
                           col_in and k_next + kb < k)
                return
            for s in range(B_COPIES):
                kb, j = b_place(tid, s)
                copy_b(b_tile, b_to + (kb * BN + j) * FLOAT_BYTES, b,
                       matrix_address(b, k_next + kb, col0 + j),
                       k_next + kb < k and col0 + j < n)
            return
        if k_inside and (INTERIOR or row0 + BM <= m):
            for s in range(A_COPIES):
                copy_float_async_from(a_tile, first + s * A_ROWS_APART * FLOAT_BYTES, a,
                                      matrix_address(a, row0 + r + s * A_ROWS_APART, kk)
                                      + along, True)
        else:
            for s in range(A_COPIES):
                row = row0 + r + s * A_ROWS_APART
                copy_float_async_from(a_tile, first + s * A_ROWS_APART * FLOAT_BYTES, a,
                                      matrix_address(a, row, kk) + along, row < m and col < k)
        # B: row kb of the tile, its `width` floats from column j; the source
        # its address in the tile's first row of B, plus k_next rows.
        down = k_next * uint64(b.strides[0])
        if k_inside and (INTERIOR or col0 + BN <= n):
            for s in range(B_COPIES):
                kb, j = b_place(tid, s)
                copy_b(b_tile, b_to + (kb * BN + j) * FLOAT_BYTES, b,
                       matrix_address(b, kb, col0 + j) + down, True)
        else:
            for s in range(B_COPIES):
                kb, j = b_place(tid, s)
                copy_b(b_tile, b_to + (kb * BN + j) * FLOAT_BYTES, b,
                       matrix_address(b, kb, col0 + j) + down, k_next + kb < k and col0 + j < n)

    return copy_tiles


def _make_a_copies(bm: int, bk: int, threads: int):
    """copy_a(a, a_tile, tid, row0, k_next, m, k, a_to): a thread's copies of
    A's tile at column k_next (rows row0 ...), a float each, k-major into the
    copy at shared address a_to: its column kk = tid % bk, its rows tid / bk,
    then threads / bk apart; each address from its row and column, each copy
    checked against the edges (zeros past them)."""
    A_COPIES, A_ROWS_APART, BK, A_STRIDE = _u(bm * bk // threads, threads // bk, bk, a_stride(bm))
    FLOAT_BYTES = _u(4)

    @cuda.jit(device=True, **_INLINE)
    def copy_a(a, a_tile, tid, row0, k_next, m, k, a_to):
        kk, r = tid % BK, tid // BK
        col = k_next + kk
        first = a_to + (kk * A_STRIDE + r) * FLOAT_BYTES
        for s in range(A_COPIES):
            row = row0 + r + s * A_ROWS_APART
            copy_float_async_from(a_tile, first + s * A_ROWS_APART * FLOAT_BYTES, a,
                                  matrix_address(a, row, col), row < m and col < k)

    return copy_a


def _shifted_layout(bn: int, bk: int, threads: int) -> tuple:
    """(chunks a row of B's tile takes past its shift, rows between a
    thread's copies): bn / 4 threads copy a row's first bn / 4 chunks, so a
    thread's rows lie threads / (bn / 4) apart, a multiple of 4 rows, and all
    start at the same shift within 16 bytes (4 rows of B are 4 n floats, a
    multiple of 16 bytes); so do every step's (bk rows further on)."""
    per_row = bn // 4
    apart = threads // per_row if threads % per_row == 0 else 0
    if not apart or apart % 4 or bk % apart or bk > threads:
        raise ValueError(f"a shifted ring needs threads a multiple of bn / 4, rows between a "
                         f"thread's copies a multiple of 4 that divides bk, and bk <= threads; "
                         f"got bn {bn}, bk {bk}, {threads} threads")
    return per_row, apart


def shifted_shared_floats(config) -> int:
    """The floats of shared memory a "shifted" ring of `config` declares: its
    ring of A's tiles, of B's raw rows (``shifted_row``), and B's aligned tile."""
    return config.stages * config.bk * (a_stride(config.bm) + shifted_row(config.bn)) \
        + config.bk * config.bn


def shifted_fits(config) -> bool:
    """Whether `config` (a ring) can read B "shifted": the copies' layout
    (``_shifted_layout``) and the 48 KB a block may declare."""
    from gpucourse.kernels.sgemm.config import STATIC_SHARED_LIMIT_BYTES

    try:
        _shifted_layout(config.bn, config.bk, config.threads)
    except ValueError:
        return False
    return bool(config.stages) and 4 * shifted_shared_floats(config) <= STATIC_SHARED_LIMIT_BYTES


def _make_shifted_copies(bm: int, bn: int, bk: int, threads: int):
    """make_tile_copies for "shifted": A as "each" copies it; B's tile rows as
    16-byte chunks of B's memory (``copy_float4_async_part``): the row's
    first bn / 4 chunks by bn / 4 neighbouring threads, its last by thread
    `row` of the block; rows past K's end as zeros. Floats past a row's end
    are the next row's: they meet only C's columns past n, which are never
    stored. Only a step whose last row is B's last may reach past B's end:
    there each chunk is copied in part (to B's last float)."""
    copy_a = _make_a_copies(bm, bk, threads)
    BK = _u(bk)
    per_row, apart = _shifted_layout(bn, bk, threads)
    PER_ROW, ROWS_APART, RAW, B_COPIES = _u(per_row, apart, shifted_row(bn), bk // apart)
    FLOAT_BYTES, SIXTEEN = _u(4, 16)

    @cuda.jit(device=True, **_INLINE)
    def part(source, end, row, k):
        # The bytes of the chunk at `source` to copy: none past K's end or B's.
        left = end - int64(source)
        return min(left, 16) if left > 0 and row < k else 0

    @cuda.jit(device=True, **_INLINE)
    def copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k, a_to, b_to):
        copy_a(a, a_tile, tid, row0, k_next, m, k, a_to)
        kb0, q = tid // PER_ROW, tid % PER_ROW
        start = matrix_address(b, k_next + kb0, col0)
        base = start - start % SIXTEEN + q * SIXTEEN
        step = uint64(b.strides[0]) * ROWS_APART
        if k_next + BK < uint64(b.shape[0]):  # no chunk reaches past B's last row
            for s in range(B_COPIES):
                kb = kb0 + s * ROWS_APART
                copy_float4_async_part(b_tile, b_to + (kb * RAW + q * 4) * FLOAT_BYTES, b,
                                       base + s * step, 16 if k_next + kb < k else 0)
            if tid < BK:  # row tid's last chunk
                start = matrix_address(b, k_next + tid, col0)
                copy_float4_async_part(b_tile, b_to + (tid * RAW + PER_ROW * 4) * FLOAT_BYTES,
                                       b, start - start % SIXTEEN + PER_ROW * SIXTEEN,
                                       16 if k_next + tid < k else 0)
            return
        end = int64(matrix_address(b, uint64(b.shape[0]) - ONE, uint64(b.shape[1])))  # past B
        for s in range(B_COPIES):
            kb = kb0 + s * ROWS_APART
            source = base + s * step
            copy_float4_async_part(b_tile, b_to + (kb * RAW + q * 4) * FLOAT_BYTES, b,
                                   source, part(source, end, k_next + kb, k))
        if tid < BK:
            start = matrix_address(b, k_next + tid, col0)
            source = start - start % SIXTEEN + PER_ROW * SIXTEEN
            copy_float4_async_part(b_tile, b_to + (tid * RAW + PER_ROW * 4) * FLOAT_BYTES, b,
                                   source, part(source, end, k_next + tid, k))

    return copy_tiles


def make_realign(bn: int, bk: int, threads: int, raw_elements: int, aligned_at: int):
    """realign(b, b_tile, tid, col0, k_now, copy): B's tile for step k_now,
    copied "shifted" into raw copy `copy` of the ring (``raw_elements``
    floats each), moved into the aligned tile at `aligned_at` (b_tile[
    aligned_at + kb * bn + col]) that the multiply reads with 16-byte loads:
    four floats a move, each thread the rows it copied (``_shifted_layout``:
    one shift for all of them), read 16 bytes at once where the shift is 0,
    else a float at a time, and written 16 bytes at once. The caller takes a
    barrier before and after."""
    per_row, apart = _shifted_layout(bn, bk, threads)
    MOVES, PER_ROW, ROWS_APART, BN, RAW = _u(bk // apart, per_row, apart, bn, shifted_row(bn))
    RAW_ELEMENTS, ALIGNED, SIXTEEN, FOUR = _u(raw_elements, aligned_at, 16, 4)
    TWO, THREE = _u(2, 3)

    @cuda.jit(device=True, **_INLINE)
    def realign(b, b_tile, tid, col0, k_now, copy):
        kb0, c4 = tid // PER_ROW, tid % PER_ROW
        shift = matrix_address(b, k_now + kb0, col0) % SIXTEEN // FOUR
        for s in range(MOVES):
            kb = kb0 + s * ROWS_APART
            at = copy * RAW_ELEMENTS + kb * RAW + shift + c4 * FOUR
            to = ALIGNED + kb * BN + c4 * FOUR
            if shift == ZERO:  # the same for a warp's threads, or two rows' of them
                x0, x1, x2, x3 = load_float4_flat(b_tile, at)
                store_float4_flat(b_tile, to, x0, x1, x2, x3)
            else:
                store_float4_flat(b_tile, to, b_tile[at], b_tile[at + ONE], b_tile[at + TWO],
                                  b_tile[at + THREE])

    return realign


def make_k_loop(copy_tiles, multiply_tile, bk: int, a_elements: int, b_elements: int,
                stages: int, realign=None, aligned_at: int = 0, after_grid: bool = False):
    """The walk along K for columns k_start <= kk < k_end (the whole of K, a
    split-K slice or a stream-K piece), with the same signature as
    building_blocks' ``_make_k_loop``'s (its a_next and b_next unused): a ring
    of `stages` copies of the tiles (a_elements and b_elements floats each),
    filled by cp.async stages - 1 steps ahead (the module's note). With
    `realign` (``make_realign``; B copied "shifted"), each step first moves
    the landed tile of B into the aligned tile at `aligned_at`, between two
    barriers, and multiplies that. With `after_grid`, it first waits for the
    kernel its launch overlaps (``grid_dependency_wait``: the copy of B that
    a padded ring's launch may overlap, vectorized.RING_COPY_OVERLAP)."""
    REALIGN, ALIGNED, AFTER_GRID = realign is not None, _u(aligned_at), bool(after_grid)
    realign = realign or _no_realign
    BK, A_ELEMENTS, B_ELEMENTS, STAGES_U = _u(bk, a_elements, b_elements, stages)
    A_BYTES, B_BYTES = _u(4 * a_elements, 4 * b_elements)
    AHEAD = _u(stages - 1)
    wait_oldest = cp_async_wait(stages - 2)
    wait_all = cp_async_wait(0)

    @cuda.jit(device=True, **_INLINE)
    def walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, p, q):
        a0, b0 = tile_address(a_tile, ZERO), tile_address(b_tile, ZERO)
        if AFTER_GRID:  # B is the copy kernel's output: nothing is read before it is done
            grid_dependency_wait()
        for s in range(ZERO, AHEAD):  # the first stages - 1 tiles, a group each
            k_next = k_start + s * BK
            if k_next < k_end:
                copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k_end,
                           a0 + s * A_BYTES, b0 + s * B_BYTES)
            cp_async_commit()
        read, write = ZERO, AHEAD  # the copy multiplied this step, the one refilled
        for k_now in range(k_start, k_end, BK):
            wait_oldest()  # this thread's copies of tile k_now have landed
            cuda.syncthreads()  # everyone's have; nobody still reads copy `write`
            k_next = k_now + AHEAD * BK
            if k_next < k_end:
                copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k_end,
                           a0 + write * A_BYTES, b0 + write * B_BYTES)
            cp_async_commit()
            if REALIGN:  # nobody reads the aligned tile now: the barrier above
                realign(b, b_tile, tid, col0, k_now, read)
                cuda.syncthreads()
                multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, read * A_ELEMENTS,
                              ALIGNED)
            else:
                multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, read * A_ELEMENTS,
                              read * B_ELEMENTS)
            read = ZERO if read + ONE == STAGES_U else read + ONE
            write = ZERO if write + ONE == STAGES_U else write + ONE
        # Nothing in flight, and nobody reading, before the tiles are written
        # again (stream-K's next piece) or the block ends.
        wait_all()
        cuda.syncthreads()

    return walk_k


@cuda.jit(device=True, **_INLINE)
def _no_realign(b, b_tile, tid, col0, k_now, copy):
    """make_k_loop's stand-in where B's tiles land in place."""
