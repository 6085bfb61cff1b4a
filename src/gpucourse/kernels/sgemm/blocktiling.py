"""Levels 4a and 4b: each thread computes several outputs from values it keeps
in registers (register blocking).

Level 4a adds, over level 3, a column of TM outputs per thread: one value of
B's tile, loaded once from shared memory, serves TM multiply-adds. Level 4b
gives each thread a TM x TN patch: per step of K it loads TM values of A and
TN of B and does TM*TN multiply-adds, 16 loads for 64 FMAs. Measured on the
H100 at 4096^3 (benchmarks/results/sgemm-h100-2026-11-22.json): level 4a
11.01 TFLOP/s (21.3% of cuBLAS), level 4b 23.91 TFLOP/s (46.2%), against
level 3's 8.81 (17.0%).

Both take their tile sizes from a ``TileConfig`` (CONFIG_4A and CONFIG_4B by
default, the worklog's own) through a factory that captures them as
constants. They load tiles one float at a time and share nothing with the
levels above, whose building blocks (``building_blocks``) start from here.
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.config import ZERO, _INLINE, TileConfig, _u
from numba import float32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)


# -----------------------------------------------------------------------------
# Level 4a: 1D register blocking.
# At level 3 every multiply-add needs two shared-memory loads, and shared
# memory, not arithmetic, is the limit. Now each thread computes TM outputs
# stacked in a column: it loads one value of B's tile into a register and
# reuses it TM times. The block's tile grows to BM x BN (64 x 64) and K is
# walked BK (8) at a time; the TM partial sums live in registers.
# Each thread loads a fixed number of elements of each tile (check_config
# guarantees the tiles divide evenly), so those loops have constant trip
# counts and unroll, with no division at run time (`_make_tile_loads`, which
# level 4b shares).


def _make_tile_loads(config: TileConfig):
    """The loads levels 4a and 4b share: a device function `load_tiles(a, b,
    a_tile, b_tile, tid, row0, col0, k0, m, n, k)` that copies the block's
    BM x BK tile of A (rows row0..., columns k0...) and BK x BN tile of B (rows
    k0..., columns col0...) into shared memory, one float per load, zeros past
    the edges of the matrices; thread `tid` loads its equal share of each, rows
    threads / BK (or threads / BN) apart."""
    threads = config.threads
    a_elements, b_elements = config.bm * config.bk, config.bk * config.bn
    BN, BK = _u(config.bn, config.bk)
    A_LOADS, B_LOADS = _u(a_elements // threads, b_elements // threads)
    A_ROW_STRIDE, B_ROW_STRIDE = _u(threads // config.bk, threads // config.bn)

    @cuda.jit(device=True, **_INLINE)
    def load_tiles(a, b, a_tile, b_tile, tid, row0, col0, k0, m, n, k):
        a_row, a_col = tid // BK, tid % BK  # where this thread loads in A's tile
        b_row, b_col = tid // BN, tid % BN
        for s in range(A_LOADS):
            r = a_row + s * A_ROW_STRIDE
            inside = row0 + r < m and k0 + a_col < k
            a_tile[r * BK + a_col] = a[row0 + r, k0 + a_col] if inside else float32(0.0)
        for s in range(B_LOADS):
            r = b_row + s * B_ROW_STRIDE
            inside = k0 + r < k and col0 + b_col < n
            b_tile[r * BN + b_col] = b[k0 + r, col0 + b_col] if inside else float32(0.0)

    return load_tiles


def _make_block_start(config: TileConfig):
    """The first lines levels 4a and 4b share: a device function
    `block_start(a, b)` returning the sizes m, k, n of the product, the
    thread's index in its block, and the first row and column of C that the
    block computes (its tile is BM x BN)."""
    BM, BN = _u(config.bm, config.bn)

    @cuda.jit(device=True, **_INLINE)
    def block_start(a, b):
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM  # first row of C this block computes
        col0 = uint64(cuda.blockIdx.x) * BN
        return m, k, n, tid, row0, col0

    return block_start


def _make_1d_kernel(config: TileConfig):
    a_elements, b_elements, tm = config.bm * config.bk, config.bk * config.bn, config.tm
    BN, BK, TM = _u(config.bn, config.bk, config.tm)
    load_tiles = _make_tile_loads(config)
    block_start = _make_block_start(config)

    @cuda.jit
    def sgemm_1d_tiling(a, b, c):
        a_tile = cuda.shared.array(a_elements, float32)
        b_tile = cuda.shared.array(b_elements, float32)
        m, k, n, tid, row0, col0 = block_start(a, b)
        thread_col = tid % BN
        thread_row = tid // BN  # this thread owns rows thread_row*TM ... + TM - 1
        acc = cuda.local.array(tm, float32)
        for i in range(TM):
            acc[i] = 0.0
        for k0 in range(ZERO, k, BK):
            load_tiles(a, b, a_tile, b_tile, tid, row0, col0, k0, m, n, k)
            cuda.syncthreads()
            for dot in range(BK):
                b_value = b_tile[dot * BN + thread_col]  # one load, reused TM times
                for i in range(TM):
                    acc[i] += a_tile[(thread_row * TM + i) * BK + dot] * b_value
            cuda.syncthreads()
        col = col0 + thread_col
        for i in range(TM):
            row = row0 + thread_row * TM + i
            if row < m and col < n:
                c[row, col] = acc[i]

    return sgemm_1d_tiling


# -----------------------------------------------------------------------------
# Level 4b: 2D register blocking.
# Each thread now computes a TM x TN (8 x 8) patch. Per step of K it loads TM
# values of A and TN values of B from shared memory into registers and does
# TM*TN multiply-adds with them: 16 loads for 64 FMAs instead of 9 for 8
# (level 4a) or 2 for 1 (level 3). The block's tile grows to 128 x 128, so
# each value read from global memory is reused 128 times.
# Its kernel opens as level 4a's does (a deliberate variant: the same tiles,
# loads and start, so that the two read side by side) and differs from the
# thread's layout on.


def _make_2d_kernel(config: TileConfig):
    a_elements, b_elements = config.bm * config.bk, config.bk * config.bn
    tm, tn, patch = config.tm, config.tn, config.tm * config.tn
    BN, BK, TM, TN = _u(config.bn, config.bk, config.tm, config.tn)
    THREADS_PER_ROW = _u(config.bn // config.tn)
    load_tiles = _make_tile_loads(config)
    block_start = _make_block_start(config)

    @cuda.jit
    def sgemm_2d_tiling(a, b, c):
        a_tile = cuda.shared.array(a_elements, float32)
        b_tile = cuda.shared.array(b_elements, float32)
        m, k, n, tid, row0, col0 = block_start(a, b)
        thread_row = tid // THREADS_PER_ROW  # this thread owns a TM x TN patch of C
        thread_col = tid % THREADS_PER_ROW
        acc = cuda.local.array(patch, float32)
        a_frag = cuda.local.array(tm, float32)
        b_frag = cuda.local.array(tn, float32)
        for i in range(patch):
            acc[i] = 0.0
        for k0 in range(ZERO, k, BK):
            load_tiles(a, b, a_tile, b_tile, tid, row0, col0, k0, m, n, k)
            cuda.syncthreads()
            for dot in range(BK):
                for i in range(TM):
                    a_frag[i] = a_tile[(thread_row * TM + i) * BK + dot]
                for j in range(TN):
                    b_frag[j] = b_tile[dot * BN + thread_col * TN + j]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += a_frag[i] * b_frag[j]
            cuda.syncthreads()
        for i in range(TM):
            row = row0 + thread_row * TM + i
            if row < m:
                for j in range(TN):
                    col = col0 + thread_col * TN + j
                    if col < n:
                        c[row, col] = acc[i * TN + j]

    return sgemm_2d_tiling
