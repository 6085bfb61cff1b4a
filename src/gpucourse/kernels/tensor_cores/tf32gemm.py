"""fp32 GEMM on the tensor cores through TF32, in one pass or three: ``tf32gemm``.

C = A B for fp32 A and B on the TF32 instruction ``mma_m16n8k8_tf32``: plain
TF32 (``passes=1``) or 3xTF32 (``passes=3``, the default), CUTLASS's "fast
fp32" that PyTorch's memory-efficient attention uses, each fp32 input split
into a big and a small TF32 part and three TF32 products per fp32 product,
for about fp32's accuracy. The notes below say why the small products have
their own sums. The kernel has hgemm level 2's block-tile structure.

**Status.** Run on an H100 on 2026-11-26: all 27 tests of
tests/test_tensor_cores.py passed there, among them the rounding of
``cvt.rna.tf32.f32`` against ``round_to_tf32`` on edge cases and tf32gemm
against float64 at 256 x 256 x 512 and 1000 x 1030 x 777, so the TF32
fragment places are confirmed by hardware too. tf32gemm itself is slow
(results/tensor_cores-h100-2026-11-26.json, the kernel alone at 4096^3): 16.5
TFLOP/s in one pass, 11.1 in three, against cuBLAS's 352 with TF32 in the
same run; like ``hgemm`` it loads every fragment for the instruction it
feeds, one 32-bit load each.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda
from numba.types import float32  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.tensor_cores.block_tiles import (_check_operands, element_or_zero,
                                                       make_block_tile)
from gpucourse.kernels.tensor_cores.fragments import WARP, TF32_K, TF32_M, TF32_N
from gpucourse.kernels.tensor_cores.intrinsics import (cvt_rna_tf32, forget_earlier_calls,
                                                      mma_m16n8k8_tf32)


# ---------------------------------------------------------------------------
# 3xTF32: fp32-like accuracy from three TF32 products
# ---------------------------------------------------------------------------
#
# 3xTF32 (the idea of CUTLASS's OpMultiplyAddFastF32): each fp32 x is split into
# big = tf32(x) and small = tf32(x - big); then
#     a b = a_big b_big + a_big b_small + a_small b_big + a_small b_small,
# and the last term, about 2^-22 |a b|, is dropped. big carries 11 significant
# bits and small about 11 more, so a and b are represented to about 2^-22
# relative, and each of the three products is exact in the tensor core (11 x 11
# bits). Here the two small terms go into their own accumulators (``corr``),
# added to the big term's once at the end. Fasi, Higham, Mikaitis and Pranesh
# ("Numerical behavior of NVIDIA tensor cores", PeerJ Computer Science 7:e330,
# 2021; V100, T4 and A100, not H100) found that the tensor cores truncate
# (round toward zero) when they add, rather than round to nearest; keeping the
# corrections apart leaves the big term's sum with plain TF32's K/8 truncated
# additions instead of 3K/8. A numpy model in which each instruction's exact
# sum is truncated to fp32 put the error at 1000 x 1030 x 777 (N(0,1) inputs)
# at 2.6e-6 of max|C| this way and 7.9e-6 with one accumulator for all three
# (fp32 fmas rounded to nearest, one k at a time: 1.1e-6). It costs a lane 32
# registers for the sums (ptxas: 122 registers for 3 passes, 76 for 1).
# CUTLASS's own (MmaTensorOpFastF32 in cutlass/gemm/warp/
# mma_tensor_op_fast_f32.h, as vendored in PaddlePaddle/Paddle's cutlass/)
# differs in two ways: it adds all three products into one accumulator, small
# ones first, and it rounds big toward zero (small by adding half a unit and
# truncating), leaving a residual of up to a whole TF32 unit instead of half.

# The TF32 GEMM: hgemm level 2's structure in fp32. A block of 2 x 2 warps
# computes a 64 x 64 tile of C; per step of 32 along K it copies a 64 x 32
# tile of A and a 32 x 64 tile of B into shared memory, rounding each element
# once on the way (big = tf32(x) and, for 3 passes, small = tf32(x - big), each
# in its own tile; zeros beyond the matrices' edges); each warp then computes
# its 32 x 32 part, 2 x 4 tiles of 16 x 8, with 1 or 3 instructions per tile
# per 8 of K. A's tiles are kept row by row with 4 floats of padding (36 per
# row: the 8 rows x 4 columns a warp's fragment reads fall in 32 different
# banks), B's row by row (along K, as B is stored) with 8 floats of padding (72
# per row: the 4 rows x 8 columns of a fragment fall in 32 banks, and a warp's
# copy of one row of B writes 32 banks). Where this kernel differs from level
# 2 (the tiles it copies, rounded and split, B's kept along K, and its
# fragment reads) is deliberate, for its instruction; what is the same (the
# threads' places, the store of C, the grid) comes from block_tiles.
TF32_BLOCK_M, TF32_BLOCK_N, TF32_BLOCK_K = 64, 64, 32
TF32_WARPS_M, TF32_WARPS_N = 2, 2  # the block's warps, each computing a 32 x 32 part of C
TF32_TILES_M, TF32_TILES_N = 2, 4  # a warp's 16 x 8 tiles of C: 2 down, 4 across
TF32_THREADS = TF32_WARPS_M * TF32_WARPS_N * WARP
TF32_A_ROW = TF32_BLOCK_K + 4  # floats per row of a shared tile of A (4 of padding)
TF32_B_ROW = TF32_BLOCK_N + 8  # floats per row of a shared tile of B (8 of padding)
_TF32_ACC = TF32_TILES_M * TF32_TILES_N * 4  # a lane's part of its warp's 32 x 32 of C
_TF32_A_PARTS = TF32_TILES_M * 4  # a lane's fragments of A for one step of 8
_TF32_B_PARTS = TF32_TILES_N * 2
_TF32_A_LOADS = TF32_BLOCK_M * TF32_BLOCK_K // TF32_THREADS  # elements each thread copies
_TF32_B_LOADS = TF32_BLOCK_K * TF32_BLOCK_N // TF32_THREADS
PASSES = (1, 3)
# Which part of C a thread works on, how a lane writes its sums, and the grid:
# hgemm level 2's, for these constants (block_tiles; the TF32 instruction's C
# is 16 x 8 at C_FRAGMENT's places, like the fp16 one's).
_thread_places, _store_c, _grid = make_block_tile(TF32_BLOCK_M, TF32_BLOCK_N, TF32_WARPS_N,
                                                  TF32_TILES_M, TF32_TILES_N)


def _make_tf32gemm_kernel(passes):
    """The TF32 GEMM kernel for `passes` 1 (plain TF32) or 3 (3xTF32), with
    `passes` fixed when it compiles."""
    split = passes == 3

    @cuda.jit(device=True)
    def store_rounded(big_tile, small_tile, row, col, x):
        """x rounded once on its way into shared memory: big = tf32(x) into
        big_tile[row, col] and, for 3 passes, small = tf32(x - big) into
        small_tile[row, col]."""
        big = cvt_rna_tf32(x)
        big_tile[row, col] = big
        if split:
            small_tile[row, col] = cvt_rna_tf32(x - big)

    @cuda.jit
    def kernel(a, b, c):
        """C = A B for fp32 A (M x K) and B (K x N), fp32 C, any sizes (see the
        constants above). Fragment places as in A_FRAGMENT_TF32,
        B_FRAGMENT_TF32 and C_FRAGMENT_TF32, written out with g = lane // 4 and
        t = lane % 4."""
        depth = a.shape[1]
        thread, g, t, row0, col0, warp_row, warp_col = _thread_places()
        a_big = cuda.shared.array((TF32_BLOCK_M, TF32_A_ROW), float32)  # a_big[row, k]
        a_small = cuda.shared.array((TF32_BLOCK_M, TF32_A_ROW), float32)
        b_big = cuda.shared.array((TF32_BLOCK_K, TF32_B_ROW), float32)  # b_big[k, column]
        b_small = cuda.shared.array((TF32_BLOCK_K, TF32_B_ROW), float32)
        acc = cuda.local.array(_TF32_ACC, float32)  # the big products
        corr = cuda.local.array(_TF32_ACC, float32)  # the two small products (3 passes)
        a_hi = cuda.local.array(_TF32_A_PARTS, float32)
        a_lo = cuda.local.array(_TF32_A_PARTS, float32)
        b_hi = cuda.local.array(_TF32_B_PARTS, float32)
        b_lo = cuda.local.array(_TF32_B_PARTS, float32)
        for i in range(_TF32_ACC):
            acc[i] = float32(0.0)
            corr[i] = float32(0.0)
        for k0 in range(0, depth, TF32_BLOCK_K):
            for i in range(_TF32_A_LOADS):  # neighbouring threads read neighbouring elements
                index = i * TF32_THREADS + thread
                row, kk = index // TF32_BLOCK_K, index % TF32_BLOCK_K
                x = element_or_zero(a, row0 + row, k0 + kk, float32(0.0))
                store_rounded(a_big, a_small, row, kk, x)
            for i in range(_TF32_B_LOADS):
                index = i * TF32_THREADS + thread
                kk, col = index // TF32_BLOCK_N, index % TF32_BLOCK_N
                x = element_or_zero(b, k0 + kk, col0 + col, float32(0.0))
                store_rounded(b_big, b_small, kk, col, x)
            cuda.syncthreads()
            for ks in range(0, min(TF32_BLOCK_K, depth - k0), TF32_K):  # not the zeros past K
                for tm in range(TF32_TILES_M):
                    row = warp_row + tm * TF32_M + g
                    for i in range(4):  # A_FRAGMENT_TF32: row g (+8), column t (+4)
                        a_hi[tm * 4 + i] = a_big[row + 8 * (i % 2), ks + t + 4 * (i // 2)]
                        if split:
                            a_lo[tm * 4 + i] = a_small[row + 8 * (i % 2), ks + t + 4 * (i // 2)]
                for tn in range(TF32_TILES_N):
                    col = warp_col + tn * TF32_N + g
                    for i in range(2):  # B_FRAGMENT_TF32: row t (+4), column g
                        b_hi[tn * 2 + i] = b_big[ks + t + 4 * i, col]
                        if split:
                            b_lo[tn * 2 + i] = b_small[ks + t + 4 * i, col]
                for tm in range(TF32_TILES_M):
                    for tn in range(TF32_TILES_N):
                        j, p, q = (tm * TF32_TILES_N + tn) * 4, tm * 4, tn * 2
                        if split:  # small terms first, into their own sums
                            d = mma_m16n8k8_tf32(a_lo[p], a_lo[p + 1], a_lo[p + 2], a_lo[p + 3],
                                                 b_hi[q], b_hi[q + 1],
                                                 corr[j], corr[j + 1], corr[j + 2], corr[j + 3])
                            d = mma_m16n8k8_tf32(a_hi[p], a_hi[p + 1], a_hi[p + 2], a_hi[p + 3],
                                                 b_lo[q], b_lo[q + 1], d[0], d[1], d[2], d[3])
                            for i in range(4):
                                corr[j + i] = d[i]
                        d = mma_m16n8k8_tf32(a_hi[p], a_hi[p + 1], a_hi[p + 2], a_hi[p + 3],
                                             b_hi[q], b_hi[q + 1],
                                             acc[j], acc[j + 1], acc[j + 2], acc[j + 3])
                        for i in range(4):
                            acc[j + i] = d[i]
            cuda.syncthreads()  # all warps have read the tiles before they are overwritten
        for i in range(_TF32_ACC):  # the small products join the big ones once, at the end
            acc[i] += corr[i]
        _store_c(c, acc, row0, col0, warp_row, warp_col, g, t)  # C_FRAGMENT_TF32 = C_FRAGMENT

    return kernel


_TF32GEMM_KERNELS = {passes: _make_tf32gemm_kernel(passes) for passes in PASSES}


def _launch_tf32(a, b, c, passes):
    """Launch the TF32 GEMM (`passes` 1 or 3) on device arrays a (M x K fp32),
    b (K x N fp32) and c (M x N fp32), unchecked (tf32gemm checks;
    benchmarks/tensor_cores.py times the kernel alone with this)."""
    m, n = c.shape
    forget_earlier_calls()
    _TF32GEMM_KERNELS[passes][_grid(m, n), TF32_THREADS](a, b, c)


def tf32gemm(a, b, passes=3):
    """C = A B for fp32 A and B on the tensor cores, through TF32.

    passes 3 (the default), "3xTF32": each element x of A and B is split into
    big = tf32(x) and small = tf32(x - big), and each product is computed as
    a_big b_big + a_big b_small + a_small b_big, three mma.m16n8k8 TF32
    instructions, which is close to fp32's accuracy (the dropped a_small
    b_small is about 2^-22 of the product; see the notes above). The method of
    CUTLASS's OpMultiplyAddFastF32, which PyTorch's memory-efficient attention
    uses for fp32, here with the small products summed apart.
    passes 1: plain TF32, each input rounded to 10 fraction bits (about 3 decimal
    digits, unit roundoff 2^-11), one instruction per product, for comparison.

    Blocks of 4 warps share 64 x 32 and 32 x 64 tiles of A and B in shared
    memory (hgemm level 2's structure); any positive M, N and K. a: float32
    numpy array M x K, b: float32 K x N. Returns C, float32 M x N. Raises
    ValueError naming what is accepted. Inputs that round to infinity in TF32
    (|x| >= (1 - 2^-12) 2^128, the top of float32's range) or are infinite
    give inf or NaN.
    """
    if isinstance(passes, bool) or passes not in PASSES:
        raise ValueError(f"passes must be 1 or 3, got {passes!r}")
    a, b, (m, n, k) = _check_operands(a, b, np.float32)
    c = cuda.device_array((m, n), dtype=np.float32)
    _launch_tf32(cuda.to_device(np.ascontiguousarray(a)), cuda.to_device(np.ascontiguousarray(b)),
                 c, passes)
    return c.copy_to_host()
