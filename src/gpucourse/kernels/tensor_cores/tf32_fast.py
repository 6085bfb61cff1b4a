"""fp32 GEMM through TF32 on the HGEMM ladder's machinery: ``tf32_matmul``, in one pass or three.

``tf32gemm`` shows the TF32 instruction (``mma.sync.m16n8k8`` with .tf32) with
hgemm level 2's structure and reaches 3% of cuBLAS. This module builds the
same product on the pieces that took the half-precision GEMM to half of
cuBLAS (``hgemm_ladder`` level 7): tiles of 128 x 128, 16 deep, copied by
``cp.async`` four stages ahead into swizzled shared memory, 8 warps of 64 x
32, blocks in groups of rows for L2, every address worked out before the
walk along K. (Chosen so that ptxas keeps everything in registers without
spilling; 32-deep tiles or 4 warps of 64 x 64 spill.) On an H200 it ran at
91 TFLOP/s in one pass (0.22-0.24 of cuBLAS TF32) and 44-45 in three
(results/hgemm-h200-2026-11-28.json); Nsight Compute found its warps
issuing integer instructions, two thirds of the total, for 9% mma
(results/half_precision_ncu-h200-2026-11-28.json), most of them the
addresses of B's reads. Those are now planned once per tile (one_step):
0.24-0.26 of cuBLAS TF32 in the next run, so they were not what held it
back. What remains around each mma is the rounding: every value of A is
rounded to TF32 as a warp reads it, once for each column of blocks (32
times at 4096^3), and ``cvt.rna.tf32.f32`` is several instructions on
sm_90. In one pass ``tf32_matmul`` therefore rounds A and B once, in a
pass of their own (``round_to_tf32_kernel``, one read and one write of
each), and the GEMM kernel (``rounded=True``) hands the values to the
tensor cores as they are: 24 of the 40 instructions of a warp's step
around its 16 mma go. Same rounding, same sums: the same bits as before.
Timed: 0.27-0.29 of cuBLAS TF32 at 4096^3 and 8192^3 (predicted 0.35-0.45),
so the rounding was a part of the gap, not most of it. Then the tiles: at
128 x 128 with 8 warps a thread needs 166 registers, so an SM holds one block,
8 warps; 128 x 64 with 4 warps needs 164, and an SM holds three blocks, 12
warps, to hide each other's waits. It became one pass's default
(ONE_PASS_DEFAULT): 0.31-0.32 of cuBLAS TF32 at both sizes, where 128 x 128
took 0.28-0.29 in the same run (results/hgemm-h200-2026-11-28.json). Nsight
Compute on it still finds about two thirds of the executed instructions
integer ones (IMAD, IADD3, ISETP, SHF, LOP3, LEA) for 12% mma, with the
issue slots 58% busy. Most of them were B's reads: an index into a float32
view of shared memory (smemf[i]) worked its address out again at each read,
with Python's wrap-around for negative indices, four to six instructions a
read. ``shared_word(address, offset)`` reads at a constant offset from an
address worked out once a tile, and the copies compare 32-bit positions:
the main loop went from 253 to 150 instructions for its 32 mma (ptxas's
sm_90 code read with nvdisasm), and one pass rose to 0.37-0.38 of cuBLAS
TF32. With fewer instructions per mma, a deeper step along K paid: 128 x 64
x 32 (210 registers, two blocks an SM, three stages) took 0.39-0.40 in the
same run, and became the default (0.385 and 0.401 when timed again as
the default). Nsight Compute's samples per instruction then put a fifth of
the main loop's stalls on the first mma after each group of loads, and
B's loads were 32 of the 48 a tile: each lane read its two values of a
column one at a time. So B now goes in transposed: ``tf32_matmul``
writes B^T (N x K) in the pass that rounds B (``TRANSPOSE_KERNELS``, through
shared memory, both its reads and its writes rows), and the GEMM kernel
reads B^T's tile exactly as it reads A's, by ``ldmatrix``: 24 reads a tile
instead of 48, the main loop 203 SASS instructions for 64 mma instead of
231, 164 registers instead of 210 (ptxas 13.5, sm_90). Timed: 0.410 of
cuBLAS TF32 at 4096^3 and 0.399 at 8192^3 (results/hgemm-h200-2026-11-29.json).
What differs from the HGEMM is the element, 4 bytes instead of 2:

* A's fragments still come from ``ldmatrix``: an 8 x 8 matrix of 16-bit
  halves is an 8 x 4 matrix of float32, and the four of an ``.x4`` read are
  exactly the TF32 A fragment (rows g and g + 8, columns t and t + 4; see
  ``fragments``). A's rows are 128 bytes, swizzled like the HGEMM's.
* B's fragment (rows t and t + 4 of K, column g) is a column of B, and
  ``ldmatrix.trans`` transposes 16-bit elements, not 32-bit ones: read
  from a row-major B, each lane would need two 32-bit loads. In B^T it is
  a row, like A's: rows g of B^T at columns t and t + 4, so one ``.x4``
  read brings the fragments of two n-tiles, its four matrices ordered so
  that each tile's two registers come out side by side, as the mma takes
  them. B^T's rows are swizzled as A's.
* Each value is rounded to TF32 (``cvt.rna.tf32.f32``) before the GEMM, by
  the pass over A and B (one pass), or as it is read; with passes=3 (3xTF32)
  it is split into big = tf32(x) (``tf32_big_part``: on the bits, two
  instructions where the conversion takes four) and small = tf32(x - big),
  and each product is a_small b_big + a_big b_small + a_big b_big, three
  instructions (small ones first, as CUTLASS's OpMultiplyAddFastF32 does),
  for about fp32's accuracy. Those sums start from zero at each tile of K
  and are added to C's by ordinary float32 adds: the tensor cores truncate
  each sum they make, and one chain of them along the whole of K (three per
  step of 8) drifted to 25 times cuBLAS fp32's error at 4096^3 on an H200.

A and B^T travel as uint16 views of their float32 bits (the copies move bits;
``moves``). K must be a multiple of 4 (16 bytes); ``tf32_matmul`` pads other
shapes (and N to a multiple of 4, for C's rows). Runs on Numba's simulator
with the instructions' stand-ins, at small tiles.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba import float32, int32, uint16, uint32, uint64  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.tensor_cores.block_tiles import make_block_order
from gpucourse.kernels.tensor_cores.fragments import WARP
from gpucourse.kernels.tensor_cores.half_matmul import _padded_to
from gpucourse.kernels.tensor_cores.hgemm_ladder import _swizzle
from gpucourse.kernels.tensor_cores.intrinsics import (cvt_rna_tf32, mma_m16n8k8_tf32,
                                                      round_to_tf32, tf32_big_part)
from gpucourse.kernels.tensor_cores.moves import (as_float32, cp_async_16, cp_async_commit,
                                                 cp_async_wait, forget_earlier_moves,
                                                 global_address, ldmatrix_x4, shared_address)

FLOATS = 4  # float32s in 16 bytes
DEFAULT = dict(bm=128, bn=128, bk=16, warps_m=2, warps_n=4, stages=4, group_m=8)
# One pass's tiles, 128 x 64 x 32 with 4 warps: three blocks an SM (the module's
# docstring says why; results/hgemm-h200-2026-11-28.json, rows tf32_matmul1
# and the other tiles' tf32_matmul1_<name>).
ONE_PASS_DEFAULT = dict(bm=128, bn=64, bk=32, warps_m=2, warps_n=2, stages=3, group_m=8)
SIMULATOR = dict(bm=32, bn=32, bk=8, warps_m=1, warps_n=2, stages=2, group_m=1)
PASSES = (1, 3)
MAX_K = 2**31 - 64  # the copies compare positions along K as 32-bit numbers


def make_tf32_kernel(passes=3, bm=128, bn=128, bk=32, warps_m=2, warps_n=2, stages=3,
                     group_m=8, rounded=False):
    """The kernel for a configuration: kernel(a, bt, c), a (M x 2K) and bt (at
    least N x 2K) the uint16 views of float32 A and of B transposed (B^T, N x
    K: TRANSPOSE_KERNELS's), c float32 M x N; K a multiple of 4. rounded (one
    pass only): A and B hold TF32 values already (round_to_tf32_kernel's and
    TRANSPOSE_KERNELS[1]'s), read without rounding them again. Attributes
    threads, shared_bytes and blocks(m, n)."""
    threads = warps_m * warps_n * WARP
    wm, wn = bm // warps_m, bn // warps_n
    tiles_m, tiles_n = wm // 16, wn // 8
    chunks = bk // FLOATS  # 16-byte chunks along K in a row of A's or B^T's tile
    loads_a, loads_b = bm * chunks // threads, bn * chunks // threads
    if passes not in PASSES or wm % 16 or wn % 16 or bk % 8 or bk > 32 \
            or (bm * chunks) % threads or (bn * chunks) % threads or stages < 2 \
            or rounded not in (False, True) or (rounded and passes != 1):
        raise ValueError(f"invalid tf32 configuration: passes {passes}, tiles {bm} x {bn} x "
                         f"{bk}, warps {warps_m} x {warps_n}, stages {stages}, rounded "
                         f"{rounded!r} (rounded inputs take one pass)")
    shift, mod = _swizzle(chunks)
    stage_a = bm * bk  # floats
    stage = stage_a + bn * bk
    steps = bk // 8
    acc_size, a_size, b_size = tiles_m * tiles_n * 4, tiles_m * 4, tiles_n * 2
    part_size = acc_size if passes == 3 else 1
    tile_bytes = 16 * bk * 4  # 16 rows of A's or B^T's tile
    pairs_n = tiles_n // 2  # B's n-tiles are read two at a time
    wait = cp_async_wait(stages - 2)
    block_tile = make_block_order(bm, bn, group_m)

    @cuda.jit(device=True, inline=True)
    def place(row, col):
        """A row of A's or B^T's tile (floats): chunk swizzled as the HGEMM's.
        B^T's tile lies after A's (stage_a floats further)."""
        return row * bk + (((col // FLOATS) ^ ((row // shift) % mod)) * FLOATS) \
            + col % FLOATS

    @cuda.jit(device=True, inline=True)
    def tf32_parts(x, big, small, i):
        """x rounded to TF32 into big[i] (as it is, where the inputs were
        rounded before the launch); with 3 passes its remainder into small[i]."""
        if rounded:
            big[i] = x
        elif passes == 3:  # rounded on the bits: a NaN is kept by the small part
            high = tf32_big_part(x)
            big[i] = high
            small[i] = cvt_rna_tf32(x - high)
        else:
            big[i] = cvt_rna_tf32(x)

    @cuda.jit(device=True, inline=True)
    def one_step(ks, read, a_reads, b_reads, acc, a_big, a_small, b_big, b_small):
        """acc += the warp's product for the 8 of K at ks * 8 in the stage at
        `read` (floats): A's and B's fragments by ldmatrix, one for 16 rows
        of A, one for two n-tiles of B^T, each value rounded (and split, with
        3 passes) to TF32. The four matrices of B's read are ordered so that
        each n-tile's pair of registers (its rows t and t + 4 of K) comes out
        side by side, as the mma takes them."""
        for tm in range(tiles_m):
            x = ldmatrix_x4(a_reads[ks] + uint32(4 * read + tm * tile_bytes))
            for j in range(4):
                tf32_parts(as_float32(x[j]), a_big, a_small, tm * 4 + j)
        for p in range(pairs_n):
            x = ldmatrix_x4(b_reads[ks] + uint32(4 * read + p * tile_bytes))
            for j in range(4):  # n-tile 2p + j // 2, its value j % 2
                tf32_parts(as_float32(x[j]), b_big, b_small, p * 4 + j)
        for tm in range(tiles_m):
            for tn in range(tiles_n):
                n0, a0, b0 = (tm * tiles_n + tn) * 4, tm * 4, tn * 2
                if passes == 3:
                    d = mma_m16n8k8_tf32(a_small[a0], a_small[a0 + 1], a_small[a0 + 2],
                                         a_small[a0 + 3], b_big[b0], b_big[b0 + 1], acc[n0],
                                         acc[n0 + 1], acc[n0 + 2], acc[n0 + 3])
                    d = mma_m16n8k8_tf32(a_big[a0], a_big[a0 + 1], a_big[a0 + 2],
                                         a_big[a0 + 3], b_small[b0], b_small[b0 + 1], d[0],
                                         d[1], d[2], d[3])
                    d = mma_m16n8k8_tf32(a_big[a0], a_big[a0 + 1], a_big[a0 + 2],
                                         a_big[a0 + 3], b_big[b0], b_big[b0 + 1], d[0], d[1],
                                         d[2], d[3])
                else:
                    d = mma_m16n8k8_tf32(a_big[a0], a_big[a0 + 1], a_big[a0 + 2],
                                         a_big[a0 + 3], b_big[b0], b_big[b0 + 1], acc[n0],
                                         acc[n0 + 1], acc[n0 + 2], acc[n0 + 3])
                for e in range(4):
                    acc[n0 + e] = d[e]

    @cuda.jit
    def kernel(a, bt, c):
        m = a.shape[0]
        k, n = a.shape[1] // 2, c.shape[1]
        smem = cuda.shared.array(0, uint16)
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        row0, col0 = block_tile(m, n)  # blocks in groups of group_m rows, as the HGEMM's
        warp_row, warp_col = (warp // warps_n) * wm, (warp % warps_n) * wn
        # The copies, planned once (16 bytes, 4 floats each), and the pipeline
        # below: hgemm_ladder's plan_copies and stages for 4-byte elements, a
        # deliberate variant (its tiles' rows, steps and B's swizzle differ).
        a_to = cuda.local.array(loads_a, uint32)
        a_from = cuda.local.array(loads_a, uint64)
        a_limit = cuda.local.array(loads_a, int32)
        b_to = cuda.local.array(loads_b, uint32)
        b_from = cuda.local.array(loads_b, uint64)
        b_limit = cuda.local.array(loads_b, int32)
        for i in range(loads_a):
            index = i * threads + thread
            row, col = index // chunks, (index % chunks) * FLOATS
            a_to[i] = shared_address(smem, 2 * place(row, col))
            a_from[i] = global_address(a, min(row0 + row, m - 1), 2 * col)
            a_limit[i] = k - col if row0 + row < m else 0
        for i in range(loads_b):  # B^T's rows are B's columns, read as A's rows are
            index = i * threads + thread
            row, col = index // chunks, (index % chunks) * FLOATS
            b_to[i] = shared_address(smem, 2 * (stage_a + place(row, col)))
            b_from[i] = global_address(bt, min(col0 + row, bt.shape[0] - 1), 2 * col)
            b_limit[i] = k - col if col0 + row < n else 0
        # The ldmatrix addresses per step of 8 along K (m-tiles and pairs of
        # n-tiles 16 rows apart). A's four matrices: rows 0-7 and 8-15 at K
        # 0-3, then at 4-7 (a0-a3 of the fragment); B^T's: rows 0-7 at K 0-3
        # and 4-7, then rows 8-15 (b0, b1 of one n-tile, then of the next).
        a_reads = cuda.local.array(steps, uint32)
        b_reads = cuda.local.array(steps, uint32)
        for ks in range(steps):
            a_reads[ks] = shared_address(smem, 2 * place(warp_row + lane % 16,
                                                         ks * 8 + (lane // 16) * FLOATS))
            b_reads[ks] = shared_address(smem, 2 * (stage_a + place(
                warp_col + lane % 8 + 8 * (lane // 16), ks * 8 + (lane // 8) % 2 * FLOATS)))
        acc = cuda.local.array(acc_size, float32)
        a_big = cuda.local.array(a_size, float32)
        a_small = cuda.local.array(a_size, float32)
        b_big = cuda.local.array(b_size, float32)
        b_small = cuda.local.array(b_size, float32)
        part = cuda.local.array(part_size, float32)
        for i in range(acc_size):
            acc[i] = float32(0.0)
        a_advance = b_advance = uint64(4 * bk)
        k_tiles = (k + bk - 1) // bk
        a_step, b_step = uint64(0), uint64(0)
        for s in range(stages - 1):
            if s < k_tiles:
                for i in range(loads_a):
                    cp_async_16(a_to[i] + uint32(4 * s * stage), a_from[i] + a_step,
                                s * bk < a_limit[i])
                for i in range(loads_b):
                    cp_async_16(b_to[i] + uint32(4 * s * stage), b_from[i] + b_step,
                                s * bk < b_limit[i])
            cp_async_commit()
            a_step += a_advance
            b_step += b_advance
        read, fill = 0, (stages - 1) * stage
        for kt in range(k_tiles):
            wait()
            cuda.syncthreads()
            ahead = kt + stages - 1
            if ahead < k_tiles:
                for i in range(loads_a):
                    cp_async_16(a_to[i] + uint32(4 * fill), a_from[i] + a_step,
                                int32(ahead * bk) < a_limit[i])
                for i in range(loads_b):
                    cp_async_16(b_to[i] + uint32(4 * fill), b_from[i] + b_step,
                                int32(ahead * bk) < b_limit[i])
            cp_async_commit()
            a_step += a_advance
            b_step += b_advance
            # The steps of 8 along K written out (bk <= 32: at most four), so
            # that each step's addresses and fragments are constants the
            # compiler keeps in registers (a loop over them it would not unroll).
            # With 3 passes they sum into `part`, which starts from zero each
            # tile and is then added to acc by ordinary float32 adds: the
            # tensor cores truncate each sum they make, at the size of the
            # sum, so a long chain of them inside the mma (K / 8 x 3 of
            # them) drifts towards zero; a tile's short chain, then rounded
            # adds, keeps 3xTF32 near fp32's accuracy.
            into = acc
            if passes == 3:
                into = part
                for i in range(part_size):
                    part[i] = float32(0.0)
            one_step(0, read, a_reads, b_reads, into, a_big, a_small, b_big, b_small)
            if steps > 1:
                one_step(1, read, a_reads, b_reads, into, a_big, a_small, b_big, b_small)
            if steps > 2:
                one_step(2, read, a_reads, b_reads, into, a_big, a_small, b_big, b_small)
            if steps > 3:
                one_step(3, read, a_reads, b_reads, into, a_big, a_small, b_big, b_small)
            if passes == 3:
                for i in range(part_size):
                    acc[i] += part[i]
            read = read + stage if read + stage < stages * stage else 0
            fill = fill + stage if fill + stage < stages * stage else 0
        for tm in range(tiles_m):
            for tn in range(tiles_n):
                n0 = (tm * tiles_n + tn) * 4
                for e in range(4):  # C_FRAGMENT: row g (+8), column 2t (+1)
                    row = row0 + warp_row + tm * 16 + g + 8 * (e // 2)
                    col = col0 + warp_col + tn * 8 + 2 * t + e % 2
                    if row < m and col < n:
                        c[row, col] = acc[n0 + e]

    def blocks(m: int, n: int) -> int:
        return ((m + bm - 1) // bm) * ((n + bn - 1) // bn)

    kernel.threads, kernel.shared_bytes, kernel.blocks = threads, stages * stage * 4, blocks
    return kernel


ROUND_THREADS = 256


@cuda.jit
def round_to_tf32_kernel(x, out):
    """out[i] = x[i] rounded to TF32 (cvt.rna.tf32.f32), flat float32 arrays of
    one length: one pass over A or B before a one-pass tf32_matmul."""
    i = cuda.grid(1)
    if i < x.size:
        out[i] = cvt_rna_tf32(x[i])


TRANSPOSE_TILE = 32  # the transposing kernels' tiles, TRANSPOSE_TILE^2 floats a block
_TRANSPOSE_SHARED = (TRANSPOSE_TILE, TRANSPOSE_TILE + 1)  # a column more: no bank conflicts


def _make_transpose_kernel(rounded: bool):
    @cuda.jit
    def kernel(x, out):
        """out = x^T (x K x N, out N x K, float32), through shared memory
        a 32 x 32 tile a block so that both the reads and the writes are
        rows; with rounded, each value rounded to TF32 on the way."""
        tile = cuda.shared.array(_TRANSPOSE_SHARED, float32)
        k, n = x.shape
        tiles_n = (n + TRANSPOSE_TILE - 1) // TRANSPOSE_TILE
        row0 = (cuda.blockIdx.x // tiles_n) * TRANSPOSE_TILE
        col0 = (cuda.blockIdx.x % tiles_n) * TRANSPOSE_TILE
        lane, step = cuda.threadIdx.x % TRANSPOSE_TILE, cuda.threadIdx.x // TRANSPOSE_TILE
        rows_a_pass = cuda.blockDim.x // TRANSPOSE_TILE
        for r in range(step, TRANSPOSE_TILE, rows_a_pass):
            if row0 + r < k and col0 + lane < n:
                value = x[row0 + r, col0 + lane]
                tile[r, lane] = cvt_rna_tf32(value) if rounded else value
        cuda.syncthreads()
        for r in range(step, TRANSPOSE_TILE, rows_a_pass):
            if col0 + r < n and row0 + lane < k:
                out[col0 + r, row0 + lane] = tile[lane, r]

    return kernel


# B^T for tf32_matmul: one pass rounds it to TF32 as it goes, three do not.
TRANSPOSE_KERNELS = {1: _make_transpose_kernel(True), 3: _make_transpose_kernel(False)}

_KERNELS: dict = {}
_SIGNATURE = (uint16[:, ::1], uint16[:, ::1], float32[:, ::1])  # A's and B's bits, C
_ROUND_SIGNATURE = (float32[::1], float32[::1])
_TRANSPOSE_SIGNATURE = (float32[:, ::1], float32[:, ::1])


def _kernel(passes: int, config: dict):
    """The GEMM kernel of tf32_matmul: in one pass, for inputs rounded first."""
    key = (passes, tuple(sorted(config.items())))
    if key not in _KERNELS:
        _KERNELS[key] = make_tf32_kernel(passes, **config, rounded=passes == 1)
    return _KERNELS[key]


def _rounded_torch(x):
    """A CUDA float32 tensor's values rounded to TF32, into a new tensor."""
    import torch

    from gpucourse.kernels.launch import (compiled_launchable, core_launch, current_gpu,
                                          flat_argument, launch_config)

    out = torch.empty_like(x)
    function, stream = compiled_launchable(round_to_tf32_kernel, _ROUND_SIGNATURE, 0,
                                           current_gpu())
    core_launch()(stream, launch_config(-(-x.numel() // ROUND_THREADS), ROUND_THREADS), function,
                  *flat_argument(x.data_ptr(), x.numel(), 4),
                  *flat_argument(out.data_ptr(), out.numel(), 4))
    return out


def _transposed_torch(x, passes: int):
    """B^T of a CUDA float32 tensor (K x N) into a new N x K tensor, rounded to
    TF32 with one pass."""
    import torch

    from gpucourse.kernels.launch import (compiled_launchable, core_launch, current_gpu,
                                          launch_config, matrix_argument)

    k, n = x.shape
    out = torch.empty((n, k), dtype=torch.float32, device=x.device)
    function, stream = compiled_launchable(TRANSPOSE_KERNELS[passes], _TRANSPOSE_SIGNATURE, 0,
                                           current_gpu())
    blocks = -(-k // TRANSPOSE_TILE) * -(-n // TRANSPOSE_TILE)
    core_launch()(stream, launch_config(blocks, ROUND_THREADS), function,
                  *matrix_argument(x.data_ptr(), k, n), *matrix_argument(out.data_ptr(), n, k))
    return out


def _transposed_array(x, passes: int):
    """B^T of a float32 numpy array (K x N), rounded to TF32 with one pass: by
    the same kernel on the simulator; on a GPU, where the array is still on
    the host, by numpy (round_to_tf32 rounds as cvt.rna.tf32 does)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if on_gpu():
        return np.ascontiguousarray((round_to_tf32(x) if passes == 1 else x).T)
    out = np.empty(x.shape[::-1], np.float32)
    blocks = -(-x.shape[0] // TRANSPOSE_TILE) * -(-x.shape[1] // TRANSPOSE_TILE)
    TRANSPOSE_KERNELS[passes][blocks, ROUND_THREADS](x, out)
    return out


def _rounded_array(x):
    """A float32 numpy array's values rounded to TF32: by the same kernel on the
    simulator; on a GPU, where the array is still on the host, by the same
    rule in numpy (round_to_tf32), rather than a trip to the device and back
    before the GEMM's own copy."""
    if on_gpu():
        return round_to_tf32(x)
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty_like(flat)
    round_to_tf32_kernel[-(-flat.size // ROUND_THREADS), ROUND_THREADS](flat, out)
    return out.reshape(x.shape)


def tf32_matmul(a, b, passes: int = 3, config: dict | None = None):
    """C = A B for float32 A (M x K) and B (K x N) on the tensor cores through
    TF32: passes=3 (the default), 3xTF32, about fp32's accuracy; passes=1,
    plain TF32 (10 fraction bits per input), faster. a and b: float32 CUDA
    torch tensors on a GPU, numpy arrays or CPU torch tensors on the
    simulator (small sizes); C comes back in the same kind. Any positive
    sizes (K and N padded with zeros to multiples of 4). config: tile
    switches of make_tf32_kernel (for benchmarks). Raises ValueError naming
    what is accepted."""
    from gpucourse.kernels.launch import is_torch_tensor

    if isinstance(passes, bool) or passes not in PASSES:
        raise ValueError(f"passes must be 1 or 3, got {passes!r}")
    for name, x in (("a", a), ("b", b)):
        if not (is_torch_tensor(x) or isinstance(x, np.ndarray)) or x.ndim != 2 \
                or str(x.dtype).replace("torch.", "") != "float32":
            raise ValueError(f"{name} must be a 2-D float32 torch tensor or numpy array, got "
                             f"{type(x).__name__} {getattr(x, 'dtype', '')} "
                             f"{tuple(getattr(x, 'shape', ()))}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or not (m and n and k):
        raise ValueError(f"a must be M x K and b K x N, all positive; got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if k > MAX_K:  # the copies' bounds are 32-bit numbers
        raise ValueError(f"K must be at most {MAX_K:,}, got {k:,}")
    default = (ONE_PASS_DEFAULT if passes == 1 else DEFAULT) if on_gpu() else SIMULATOR
    config = dict(config if config is not None else default)
    kernel = _kernel(passes, config)
    kp, np_ = -(-k // FLOATS) * FLOATS, -(-n // FLOATS) * FLOATS
    torch_in = is_torch_tensor(a)
    # B goes in transposed (B^T, N x K), so that its fragments come by ldmatrix
    # as A's do. One pass: A and B rounded to TF32 once, here, not by each block
    # that reads them (the kernel was built with rounded=True); B in the same
    # pass as its transpose.
    if torch_in:
        import torch

        # Padded only where a side is ragged: torch's pad copies even when it
        # adds nothing (two more passes over A and B a call).
        a, b = _padded_to(a, m, kp), _padded_to(b, kp, np_)
        c = torch.empty((m, np_), dtype=torch.float32, device=a.device)
        if a.is_cuda:
            if passes == 1:
                a = _rounded_torch(a)
            _launch_torch(kernel, a, _transposed_torch(b, passes), c)
            return c[:, :n] if np_ != n else c
        a_pad, b_pad, c_out = a.numpy(), b.numpy(), c.numpy()
    else:
        a_pad = np.zeros((m, kp), np.float32)
        a_pad[:, :k] = a
        b_pad = np.zeros((kp, np_), np.float32)
        b_pad[:k, :n] = b
        c = c_out = np.zeros((m, np_), np.float32)
    if passes == 1:
        a_pad = _rounded_array(a_pad)
    a_bits, b_bits = a_pad.view(np.uint16), _transposed_array(b_pad, passes).view(np.uint16)
    from gpucourse.kernels.launch import launch_with_shared

    shape = (kernel.blocks(m, np_), kernel.threads, kernel.shared_bytes)
    if on_gpu():
        out = cuda.to_device(c_out)
        launch_with_shared(kernel, *shape, cuda.to_device(a_bits), cuda.to_device(b_bits), out)
        c_out[:] = out.copy_to_host()
    else:
        forget_earlier_moves()
        from gpucourse.kernels.tensor_cores.intrinsics import forget_earlier_calls

        forget_earlier_calls()
        launch_with_shared(kernel, *shape, a_bits, b_bits, c_out)
    return c[:, :n]


def _launch_torch(kernel, a, b, c):
    """One launch on CUDA tensors, straight to cuda.core."""
    from gpucourse.kernels.launch import (compiled_launchable, core_launch, current_gpu,
                                          launch_config, matrix_argument)

    function, stream = compiled_launchable(kernel, _SIGNATURE, kernel.shared_bytes,
                                           current_gpu())
    m, kp = a.shape
    np_ = c.shape[1]
    core_launch()(stream, launch_config(kernel.blocks(m, np_), kernel.threads,
                                        kernel.shared_bytes),
                  function, *matrix_argument(a.data_ptr(), m, 2 * kp, 2),
                  *matrix_argument(b.data_ptr(), np_, 2 * kp, 2),
                  *matrix_argument(c.data_ptr(), m, np_, 4))
