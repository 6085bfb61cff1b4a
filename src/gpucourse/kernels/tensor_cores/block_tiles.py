"""What the tensor-core GEMMs share: the checks of their operands and the shape of a block's work.

``hgemm`` level 2 and ``tf32gemm`` split C the same way. A block of warps
computes one tile of C; each warp computes a part of that tile, a few
instruction tiles of 16 x 8 down and across; each lane holds its fragments
of those, at the places of ``C_FRAGMENT`` (the fp16 and the TF32 instruction
place C alike). What differs between them is what a block copies into shared
memory and how a lane reads its fragments of A and B: those stay in each
kernel, deliberate variants for their instructions. What is the same lives
here, once: which part of C a thread works on (``make_block_tile``'s
``thread_places``), how a lane writes its sums to C (``store_c``), how many
blocks cover C (``grid``), an element of a matrix or zero beyond its edges
(``element_or_zero``), and the check of the operands that both entry points
make (``_check_operands``). The fast GEMMs (``hgemm_ladder``, ``tf32_fast``)
share the order in which blocks walk C (``make_block_order``).
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda
from gpucourse.kernels.tensor_cores.fragments import WARP, M, N


def _check_operands(a, b, dtype):
    """a and b as numpy arrays, with (M, N, K), if they are 2-D arrays of
    `dtype` whose inner dimensions match and are all positive; else
    ValueError naming what was wrong."""
    a, b = np.asarray(a), np.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.dtype != dtype or x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D {np.dtype(dtype).name} array, got {x.dtype} "
                             f"of shape {x.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k2} x {n}")
    if not (m and n and k):
        raise ValueError(f"M, N and K must be positive; got {m}, {n} and {k}")
    return a, b, (m, n, k)


@cuda.jit(device=True)
def element_or_zero(x, row, col, zero):
    """x[row, col], or `zero` (of x's element type) beyond x's edges: the
    shared tiles are padded with zeros, so that any M, N and K work."""
    if row < x.shape[0] and col < x.shape[1]:
        return x[row, col]
    return zero


def make_block_tile(block_m, block_n, warps_n, tiles_m, tiles_n):
    """The pieces of a GEMM kernel in which a block computes a block_m x
    block_n tile of C, its warps in rows of `warps_n`, each warp tiles_m x
    tiles_n instruction tiles of M x N (16 x 8): returns (thread_places,
    store_c, grid)."""

    @cuda.jit(device=True)
    def thread_places():
        """(thread, g, t, row0, col0, warp_row, warp_col) of the calling
        thread: its index in the block, its lane's group g = lane // 4 and
        place in the group t = lane % 4 (the fragment maps' g and t), the
        block's tile of C at (row0, col0) and the warp's part within it at
        (warp_row, warp_col)."""
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        row0, col0 = cuda.blockIdx.y * block_m, cuda.blockIdx.x * block_n
        warp_row = (warp // warps_n) * (tiles_m * M)  # the warp's part, within the block's tile
        warp_col = (warp % warps_n) * (tiles_n * N)
        return thread, g, t, row0, col0, warp_row, warp_col

    @cuda.jit(device=True)
    def store_c(c, acc, row0, col0, warp_row, warp_col, g, t):
        """Write the lane's sums acc (4 per instruction tile, tile (tm, tn) at
        (tm * tiles_n + tn) * 4) to C, within C's edges."""
        m, n = c.shape
        for tm in range(tiles_m):
            for tn in range(tiles_n):
                for i in range(4):  # C_FRAGMENT: row g (+8), column 2t (+1)
                    row = row0 + warp_row + tm * M + g + 8 * (i // 2)
                    col = col0 + warp_col + tn * N + 2 * t + i % 2
                    if row < m and col < n:
                        c[row, col] = acc[(tm * tiles_n + tn) * 4 + i]

    def grid(m, n):
        """The blocks that cover an m x n C: (across, down)."""
        return ((n + block_n - 1) // block_n, (m + block_m - 1) // block_m)

    return thread_places, store_c, grid


def make_block_order(bm: int, bn: int, group_m: int):
    """The device function (m, n) -> (row0, col0): the tile of an m x n C
    that block blockIdx.x computes, with tiles of bm x bn. Blocks walk C in
    groups of group_m rows of tiles, column by column within a group, so
    that the blocks running together read a few rows of A and columns of B,
    which stay in L2 (group_m = 1: row by row). The fast GEMMs (hgemm_ladder,
    tf32_fast) launch one-dimensional grids and call it first."""

    @cuda.jit(device=True, inline=True)
    def block_tile(m, n):
        blocks_m, blocks_n = (m + bm - 1) // bm, (n + bn - 1) // bn
        block = cuda.blockIdx.x
        in_group = group_m * blocks_n
        first = (block // in_group) * group_m
        rows = min(blocks_m - first, group_m)
        return (first + (block % in_group) % rows) * bm, ((block % in_group) // rows) * bn

    return block_tile
