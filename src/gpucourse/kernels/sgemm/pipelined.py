"""The walk along K with cp.async: tiles copied from global to shared memory
several steps ahead, with no round trip through registers (level 6's kernel
with ``TileConfig(..., stages=2 to 5)``; issue 33's work, not yet in auto's
menu).

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
B's tile comes 16 bytes a copy where its rows allow (n a multiple of 4), else
4 bytes a copy.

Measured on the H200 against auto's plan (which walks through registers) and
cuBLAS, as matmul launches them (results/sgemm_pipelined-h200-2026-11-29.json;
benchmarks/NOTES.md has the runs before it). With 16-deep steps in two
stages: 1000^3 on 64 x 128 x 16 tiles of 8 x 8 (128 threads) at 86% of
cuBLAS, auto's plan 82%; 1537 x 1023 x 771 on 128 x 128 x 16 (uncapped) at
81%, auto 76%; 4096^3 on 64 x 256 x 16 of 8 x 16 at 91%, auto 90%. Slower
than auto where auto runs two blocks an SM or splits K (3001 x 2999 x 1009,
1024 x 1024 x 16384). With 8-deep steps in three stages, slower nearly
everywhere. Not yet in auto's menu: the shape model needs each tile's
measured rates first. ``config.check_config`` checks that the block's threads share
the copies equally and that the ring fits in shared memory.
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels._async_copy import (copy_float4_async, copy_float_async, cp_async_commit,
                                           cp_async_wait)
from gpucourse.kernels.sgemm.config import A_PAD, ONE, ZERO, _INLINE, _u

def a_stride(bm: int) -> int:
    """The floats from one k-row of A's shared tile to the next."""
    return bm + A_PAD


def make_tile_copies(bm: int, bn: int, bk: int, threads: int, vectorized: bool):
    """copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k,
    a_base, b_base): start copying the tiles at column k_next of A (rows row0
    ...) and row k_next of B (columns col0 ...) into the copy at a_base and
    b_base; zeros past the matrices' edges, K ending at k. A k-major
    (a_tile[kk * (bm + A_PAD) + r]), B as is (b_tile[kk * bn + col])."""
    A_COPIES, BK, BN, A_STRIDE, THREADS = _u(bm * bk // threads, bk, bn, a_stride(bm), threads)
    B_WIDTH = _u(4 if vectorized else 1)
    B_COPIES, B_PER_ROW = _u(bk * bn // (4 if vectorized else 1) // threads,
                             bn // (4 if vectorized else 1))
    VECTOR = bool(vectorized)

    @cuda.jit(device=True, **_INLINE)
    def copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k, a_base, b_base):
        # A: element e = tid + s * threads of the tile is row e // bk, column
        # e % bk: a warp's lanes read bk neighbours of each of 32 / bk rows.
        for s in range(A_COPIES):
            e = tid + s * THREADS
            r, kk = e // BK, e % BK
            row, col = row0 + r, k_next + kk
            copy_float_async(a_tile, a_base + kk * A_STRIDE + r, a, row, col, row < m and col < k)
        # B: element (or four) e is row e // (bn / width), its place in the row next.
        for s in range(B_COPIES):
            e = tid + s * THREADS
            kk, j = e // B_PER_ROW, (e % B_PER_ROW) * B_WIDTH
            row, col = k_next + kk, col0 + j
            if VECTOR:  # n % 4 == 0: the four are all inside or all outside
                copy_float4_async(b_tile, b_base + kk * BN + j, b, row, col, row < k and col < n)
            else:
                copy_float_async(b_tile, b_base + kk * BN + j, b, row, col, row < k and col < n)

    return copy_tiles


def make_k_loop(copy_tiles, multiply_tile, bk: int, a_elements: int, b_elements: int,
                stages: int):
    """The walk along K for columns k_start <= kk < k_end (the whole of K, a
    split-K slice or a stream-K piece), with the same signature as
    building_blocks' ``_make_k_loop``'s (its a_next and b_next unused): a ring
    of `stages` copies of the tiles (a_elements and b_elements floats each),
    filled by cp.async stages - 1 steps ahead (the module's note)."""
    BK, A_ELEMENTS, B_ELEMENTS, STAGES_U = _u(bk, a_elements, b_elements, stages)
    AHEAD = _u(stages - 1)
    wait_oldest = cp_async_wait(stages - 2)
    wait_all = cp_async_wait(0)

    @cuda.jit(device=True, **_INLINE)
    def walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, p, q):
        for s in range(ZERO, AHEAD):  # the first stages - 1 tiles, a group each
            k_next = k_start + s * BK
            if k_next < k_end:
                copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k_end,
                           s * A_ELEMENTS, s * B_ELEMENTS)
            cp_async_commit()
        read, write = ZERO, AHEAD  # the copy multiplied this step, the one refilled
        for k_now in range(k_start, k_end, BK):
            wait_oldest()  # this thread's copies of tile k_now have landed
            cuda.syncthreads()  # everyone's have; nobody still reads copy `write`
            k_next = k_now + AHEAD * BK
            if k_next < k_end:
                copy_tiles(a, b, a_tile, b_tile, tid, row0, col0, k_next, m, n, k_end,
                           write * A_ELEMENTS, write * B_ELEMENTS)
            cp_async_commit()
            multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, read * A_ELEMENTS,
                          read * B_ELEMENTS)
            read = ZERO if read + ONE == STAGES_U else read + ONE
            write = ZERO if write + ONE == STAGES_U else write + ONE
        # Nothing in flight, and nobody reading, before the tiles are written
        # again (stream-K's next piece) or the block ends.
        wait_all()
        cuda.syncthreads()

    return walk_k
