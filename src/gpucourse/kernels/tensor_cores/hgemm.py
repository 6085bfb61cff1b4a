"""fp16 GEMM on the tensor cores, level by level: ``hgemm``.

C = A B for fp16 A and B and fp32 C, one ``mma_m16n8k16`` per 16 x 8 x 16
step. Each level opens with what it adds over the last. Level 1 is the
plainest kernel that uses the instruction, one warp per 16 x 8 tile of C,
each lane loading its fragments straight from global memory: it checks the
fragment places and measures the instruction. Level 2 shares tiles of A and B
among the 4 warps of a block in shared memory.

**Status.** Run on a GPU, correct there, speed measured once. On 2026-11-25
tests/test_tensor_cores.py ran on an NVIDIA H100 80GB HBM3
(``GPUCOURSE_DEVICE=gpu``, numba-cuda 0.30.4, torch 2.11.0+cu130) and all 16
tests it then held passed: the fragment places (each covers its matrix once;
lanes 5 and 31 as the ISA writes them), both levels against NumPy and float64
(level 2 also at the ragged 1000 x 1030 x 777), the input checks and the sm_90
PTX. So the fp16 fragment places, taken from the PTX ISA, are confirmed by
hardware. ``benchmarks/tensor_cores.py --quick`` then timed the kernels alone
at 4096^3 (results/tensor_cores-h100-2026-11-25-quick.json): level 1 11.9
TFLOP/s, level 2 15.4, against cuBLAS fp16 656 and cuBLAS fp32 (TF32 off) 50.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda
from numba.types import float16, float32  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.tensor_cores.block_tiles import (_check_operands, element_or_zero,
                                                       make_block_tile)
from gpucourse.kernels.tensor_cores.fragments import (A_FRAGMENT, B_FRAGMENT, C_FRAGMENT, WARP, K,
                                                     M, N)
from gpucourse.kernels.tensor_cores.intrinsics import forget_earlier_calls, mma_m16n8k16


# Level 1: the instruction and nothing else. One warp per block and per 16 x 8
# tile of C; each lane loads its fragments straight from global memory at the
# places A_FRAGMENT, B_FRAGMENT and C_FRAGMENT list, no shared memory. Measured
# on an H100, the kernel alone at 4096^3: 11.9 TFLOP/s
# (benchmarks/results/tensor_cores-h100-2026-11-25-quick.json; 12.0 in
# tensor_cores-h100-2026-11-26.json), against cuBLAS fp16's 656.
@cuda.jit
def _hgemm_kernel(a, b, c, a_places, b_places, c_places):
    """C = A B for fp16 A (M x K) and B (K x N), fp32 C, M, N, K multiples of
    16, 8 and 16: one warp per 16 x 8 tile of C, walking K 16 at a time, each
    lane loading its fragments straight from global memory."""
    lane = cuda.threadIdx.x % WARP
    tile = cuda.blockIdx.x * (cuda.blockDim.x // WARP) + cuda.threadIdx.x // WARP
    tiles_across = c.shape[1] // N
    row0, col0 = (tile // tiles_across) * M, (tile % tiles_across) * N
    a_part = cuda.local.array(8, float16)  # this lane's fragments
    b_part = cuda.local.array(4, float16)
    zero = np.float32(0.0)
    d = (zero, zero, zero, zero)  # this lane's part of C, summed over K
    for k0 in range(0, a.shape[1], K):
        for i in range(8):
            a_part[i] = a[row0 + a_places[lane, i, 0], k0 + a_places[lane, i, 1]]
        for i in range(4):
            b_part[i] = b[k0 + b_places[lane, i, 0], col0 + b_places[lane, i, 1]]
        d = mma_m16n8k16(a_part[0], a_part[1], a_part[2], a_part[3], a_part[4], a_part[5],
                         a_part[6], a_part[7], b_part[0], b_part[1], b_part[2], b_part[3],
                         d[0], d[1], d[2], d[3])
    for i in range(4):
        c[row0 + c_places[lane, i, 0], col0 + c_places[lane, i, 1]] = d[i]


WARPS_PER_BLOCK = 1  # a warp per block: every warp of a block has a tile (the simulator's
# stand-in needs every thread of a block to call the instruction)

# Level 2 adds over level 1: warps share their operands. Where level 1 read
# every element of A and B from global memory once per warp that needs it,
# here the 4 warps of a block read them from a tile in shared memory, copied
# from global memory once per block; and any M, N and K work. Measured on an
# H100, the kernel alone at 4096^3: 15.4 TFLOP/s
# (benchmarks/results/tensor_cores-h100-2026-11-25-quick.json; 15.5 in
# tensor_cores-h100-2026-11-26.json).
#
# Level 2: a block of 2 x 2 warps computes a 64 x 64 tile of C. Per step of 32
# along K the block copies a 64 x 32 tile of A and a 32 x 64 tile of B into
# shared memory (zeros beyond the matrices' edges, so any M, N and K work);
# then each warp computes its 32 x 32 part of the tile, 2 x 4 instructions per
# 16 of K, with fragments read from shared memory. B is stored transposed
# (column by column), so that a lane's two neighbouring elements of B, like
# its two of A, sit side by side; each row of either tile is padded by 8
# halves (16 bytes), which puts the 8 rows a warp reads at once in different
# banks.
BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
WARPS_M, WARPS_N = 2, 2  # the block's warps, each computing a 32 x 32 part of C
TILES_M, TILES_N = 2, 4  # a warp's 16 x 8 tiles of C: 2 down, 4 across
THREADS_2 = WARPS_M * WARPS_N * WARP
SHARED_ROW = BLOCK_K + 8  # halves per row of a shared tile (8 of padding)
_ACCUMULATORS = TILES_M * TILES_N * 4  # a lane's part of its warp's 32 x 32 of C
_A_PARTS = TILES_M * 8  # a lane's fragments of A for one step of 16
_B_PARTS = TILES_N * 4
_A_LOADS = BLOCK_M * BLOCK_K // THREADS_2  # elements each thread copies per tile
_B_LOADS = BLOCK_K * BLOCK_N // THREADS_2
# Which part of C a thread works on, how a lane writes its sums, and the grid:
# the structure tf32gemm shares (block_tiles).
_thread_places, _store_c, _grid = make_block_tile(BLOCK_M, BLOCK_N, WARPS_N, TILES_M, TILES_N)


@cuda.jit
def _hgemm_shared_kernel(a, b, c):
    """C = A B for fp16 A (M x K) and B (K x N), fp32 C, any sizes: level 2
    (see the constants above). Fragment places as in A_FRAGMENT, B_FRAGMENT
    and C_FRAGMENT, written out with g = lane // 4 and t = lane % 4."""
    depth = a.shape[1]
    thread, g, t, row0, col0, warp_row, warp_col = _thread_places()
    a_tile = cuda.shared.array((BLOCK_M, SHARED_ROW), float16)  # a_tile[row, k]
    b_tile = cuda.shared.array((BLOCK_N, SHARED_ROW), float16)  # b_tile[column, k]: transposed
    acc = cuda.local.array(_ACCUMULATORS, float32)
    a_part = cuda.local.array(_A_PARTS, float16)
    b_part = cuda.local.array(_B_PARTS, float16)
    for i in range(_ACCUMULATORS):
        acc[i] = float32(0.0)
    for k0 in range(0, depth, BLOCK_K):
        for i in range(_A_LOADS):  # neighbouring threads read neighbouring elements of a row
            index = i * THREADS_2 + thread
            row, kk = index // BLOCK_K, index % BLOCK_K
            a_tile[row, kk] = element_or_zero(a, row0 + row, k0 + kk, float16(0.0))
        for i in range(_B_LOADS):
            index = i * THREADS_2 + thread
            kk, col = index // BLOCK_N, index % BLOCK_N
            b_tile[col, kk] = element_or_zero(b, k0 + kk, col0 + col, float16(0.0))
        cuda.syncthreads()
        for ks in range(0, BLOCK_K, K):
            for tm in range(TILES_M):
                row = warp_row + tm * M + g
                for i in range(8):  # A_FRAGMENT: row g (+8), column 2t (+1) (+8)
                    a_part[tm * 8 + i] = a_tile[row + 8 * ((i // 2) % 2),
                                                ks + 2 * t + i % 2 + 8 * (i // 4)]
            for tn in range(TILES_N):
                col = warp_col + tn * N + g
                for i in range(4):  # B_FRAGMENT: row 2t (+1) (+8), column g
                    b_part[tn * 4 + i] = b_tile[col, ks + 2 * t + i % 2 + 8 * (i // 2)]
            for tm in range(TILES_M):
                for tn in range(TILES_N):
                    j = (tm * TILES_N + tn) * 4
                    d = mma_m16n8k16(a_part[tm * 8], a_part[tm * 8 + 1], a_part[tm * 8 + 2],
                                     a_part[tm * 8 + 3], a_part[tm * 8 + 4], a_part[tm * 8 + 5],
                                     a_part[tm * 8 + 6], a_part[tm * 8 + 7], b_part[tn * 4],
                                     b_part[tn * 4 + 1], b_part[tn * 4 + 2], b_part[tn * 4 + 3],
                                     acc[j], acc[j + 1], acc[j + 2], acc[j + 3])
                    for i in range(4):
                        acc[j + i] = d[i]
        cuda.syncthreads()  # all warps have read the tiles before they are overwritten
    _store_c(c, acc, row0, col0, warp_row, warp_col, g, t)


LEVELS = (1, 2)


def _device_places():
    """A_FRAGMENT, B_FRAGMENT and C_FRAGMENT on the device (level 1 reads them)."""
    return [cuda.to_device(p) for p in (A_FRAGMENT, B_FRAGMENT, C_FRAGMENT)]


def _launch(a, b, c, level, places=None):
    """Launch level `level`'s kernel on device arrays a (M x K fp16), b (K x N
    fp16) and c (M x N fp32), unchecked (hgemm checks; benchmarks/tensor_cores.py
    times the kernel alone with this). Level 1 needs `places` (_device_places())."""
    m, n = c.shape
    forget_earlier_calls()
    if level == 1:
        tiles = (m // M) * (n // N)
        blocks = (tiles + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK
        _hgemm_kernel[blocks, WARPS_PER_BLOCK * WARP](a, b, c, *places)
    else:
        _hgemm_shared_kernel[_grid(m, n), THREADS_2](a, b, c)



def hgemm(a, b, level=1):
    """C = A B on tensor cores, one mma_m16n8k16 per 16 x 8 x 16 step.

    level 1 (the default): the plainest kernel that uses the instruction, one
    warp per block and per 16 x 8 tile of C, its fragments loaded straight
    from global memory, no shared memory: to check the fragment places and to
    measure the instruction, not a fast GEMM. M must be a multiple of 16, N of
    8 and K of 16.
    level 2: blocks of 4 warps sharing 64 x 32 tiles of A and 32 x 64 tiles of
    B in shared memory, each warp 32 x 32 of C (the constants above); any
    positive M, N and K (the tiles are padded with zeros).

    a: fp16 numpy array M x K, b: fp16 K x N. Returns C, float32 M x N, the
    products summed in float32. Raises ValueError naming what is accepted.
    """
    if isinstance(level, bool) or level not in LEVELS:
        raise ValueError(f"level must be 1 or 2, got {level!r}")
    a, b, (m, n, k) = _check_operands(a, b, np.float16)
    if level == 1 and (m % M or n % N or k % K):
        raise ValueError(f"level 1 needs M, N and K positive multiples of {M}, {N} and {K} "
                         f"(level 2 takes any sizes); got {m}, {n} and {k}")
    c = cuda.device_array((m, n), dtype=np.float32)
    _launch(cuda.to_device(np.ascontiguousarray(a)), cuda.to_device(np.ascontiguousarray(b)),
            c, level, _device_places() if level == 1 else None)
    return c.copy_to_host()
