"""Tensor cores from Numba: one warp-wide matrix instruction, written by hand.

numba-cuda has no tensor-core functions: nothing like CUDA C++'s ``wmma`` or
the ``mma`` instructions. It does let a library emit any PTX instruction
through an LLVM intrinsic, the way ``_vector_load`` emits 128-bit loads. This
module does that for one instruction:

    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32

A warp of 32 threads multiplies a 16 x 16 matrix A by a 16 x 8 matrix B (both
fp16) and adds a 16 x 8 matrix C (fp32): D = A B + C, with products and sums
in at least fp32. No thread holds a whole matrix. Each holds a *fragment*: 8
elements of A, 4 of B and 4 of C and D, at places fixed by the PTX ISA
("Matrix fragments for mma.m16n8k16 with floating point type"). With
``g = lane // 4`` and ``t = lane % 4``:

* A (row-major): a0, a1 at row g, columns 2t and 2t+1; a2, a3 at row g+8,
  the same columns; a4, a5 at row g, columns 2t+8 and 2t+9; a6, a7 at row g+8,
  columns 2t+8 and 2t+9;
* B (column-major, "col"): b0, b1 at rows 2t and 2t+1, column g; b2, b3 at
  rows 2t+8 and 2t+9, column g;
* C and D: c0, c1 at row g, columns 2t and 2t+1; c2, c3 at row g+8, the same
  columns.

``A_FRAGMENT``, ``B_FRAGMENT`` and ``C_FRAGMENT`` list those places; level 1
of ``hgemm`` reads and writes its fragments with them, level 2 writes the
same rules out as arithmetic on g and t, and the simulator's stand-in uses
the lists to put the warp's matrices back together (so a kernel that breaks
the rules gives wrong answers there).

**Status: run on a GPU; correct there, speed not yet measured.** On
2026-11-25 tests/test_tensor_cores.py ran on an NVIDIA H100 80GB HBM3
(``GPUCOURSE_DEVICE=gpu``, numba-cuda 0.30.4, torch 2.11.0+cu130) and all 7
tests it then held passed: the two checks of the fragment places (each covers
its matrix once; lanes 5 and 31 as the ISA writes them), ``hgemm`` against
NumPy at 16 x 8 x 16 and 32 x 16 x 48 (rtol and atol 1e-5),
``test_hgemm_on_a_gpu_at_a_real_size`` (256 x 512 by 512 x 128 against
float64, rtol 1e-4, atol 1e-3), the input checks, and the sm_90 PTX (one
``mma.sync``, no local memory, ptxas reports no spills). So the fragment
places above, taken from the PTX ISA, are confirmed by hardware. That run
tested level 1 only: level 2 of ``hgemm`` (a block of four warps sharing
tiles in shared memory) was written afterwards and has run on the simulator
and compiled for sm_90 (tests/test_tensor_cores.py), not yet on a GPU. What
remains unmeasured is speed: how fast either level is beside cuBLAS in fp16
on tensor cores and in fp32 on CUDA cores, and beside the course's own SGEMM;
``benchmarks/tensor_cores.py`` measures it.

Under Numba's simulator, ``mma_m16n8k16`` is a stand-in that gathers the
warp's fragments through a shared scratch area and a block-wide barrier (the
simulator has no warp shuffles), so every thread of a block must call it the
same number of times; it checks that kernels place their fragments
consistently with the lists above, not what the hardware does.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba.types import float16, float32  # noqa: E402 (after gpucourse.device)

WARP = 32
M, N, K = 16, 8, 16  # the shape of one instruction


def _places():
    """(A, B, C) fragment places: for each lane, the (row, column) of each of
    its 8, 4 and 4 elements, from the PTX ISA's rules."""
    a_places, b_places, c_places = [], [], []
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        a_places.append([(g + 8 * ((i // 2) % 2), 2 * t + (i % 2) + 8 * (i // 4)) for i in range(8)])
        b_places.append([(2 * t + (i % 2) + 8 * (i // 2), g) for i in range(4)])
        c_places.append([(g + 8 * (i // 2), 2 * t + (i % 2)) for i in range(4)])
    return (np.array(a_places, dtype=np.int32), np.array(b_places, dtype=np.int32),
            np.array(c_places, dtype=np.int32))


# A_FRAGMENT[lane, i] = (row, column) of element i of lane's fragment of A; likewise B and C.
A_FRAGMENT, B_FRAGMENT, C_FRAGMENT = _places()
_PTX = ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")


if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    @intrinsic
    def mma_m16n8k16(typingctx, a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, c0, c1, c2,
                     c3):
        """D = A B + C for this lane's fragments: a0..a7 and b0..b3 float16,
        c0..c3 float32; returns (d0, d1, d2, d3), float32. Every lane of the
        warp must call it together (the instruction is warp-wide)."""
        halves, floats = (a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3), (c0, c1, c2, c3)
        if not all(x == types.float16 for x in halves) or not all(x == types.float32
                                                                   for x in floats):
            raise NumbaTypeError(f"mma_m16n8k16 takes 12 float16 (A, B) and 4 float32 (C) "
                                 f"values, got {halves + floats}")
        signature = types.UniTuple(types.float32, 4)(*halves, *floats)

        def codegen(context, builder, sig, args):
            i32, f32 = ir.IntType(32), ir.FloatType()

            def bits(value):  # Numba keeps a float16 as its 16 bits (i16 or half)
                if isinstance(value.type, ir.HalfType):
                    value = builder.bitcast(value, ir.IntType(16))
                return builder.zext(value, i32)

            def pack(low, high):  # two halves in one 32-bit register, the first in the low bits
                return builder.or_(bits(low), builder.shl(bits(high), i32(16)))

            a = [pack(args[2 * i], args[2 * i + 1]) for i in range(4)]
            b = [pack(args[8 + 2 * i], args[9 + 2 * i]) for i in range(2)]
            result = ir.LiteralStructType([f32] * 4)
            asm = ir.InlineAsm(ir.FunctionType(result, [i32] * 6 + [f32] * 4), _PTX,
                               "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=True)
            out = builder.call(asm, a + b + list(args[12:]))
            lanes = [builder.extract_value(out, i) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return signature, codegen

else:
    # The simulator's stand-in: each lane leaves its fragments in a scratch area
    # of its warp, the block waits, each lane rebuilds its warp's A, B and C
    # from the fragment places, multiplies in float32 and takes its part of D;
    # the block waits again before the scratch area is written again.
    _SCRATCH: dict = {}
    _A_ROWS, _A_COLS = A_FRAGMENT[..., 0], A_FRAGMENT[..., 1]  # (lane, element) -> place
    _B_ROWS, _B_COLS = B_FRAGMENT[..., 0], B_FRAGMENT[..., 1]
    _C_ROWS, _C_COLS = C_FRAGMENT[..., 0], C_FRAGMENT[..., 1]

    @cuda.jit(device=True)
    def mma_m16n8k16(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, c0, c1, c2, c3):
        """D = A B + C for this lane's fragments (see the module's docstring)."""
        block = (cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z)
        flat = (cuda.threadIdx.z * cuda.blockDim.y + cuda.threadIdx.y) * cuda.blockDim.x \
            + cuda.threadIdx.x
        warp, lane = flat // WARP, flat % WARP
        key = block + (warp,)
        scratch = _SCRATCH.setdefault(key, {})
        scratch[lane] = (a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, c0, c1, c2, c3)
        cuda.syncthreads()
        parts = np.array([scratch[other] for other in range(WARP)], dtype=np.float32)
        a = np.zeros((M, K), dtype=np.float32)
        b = np.zeros((K, N), dtype=np.float32)
        c = np.zeros((M, N), dtype=np.float32)
        a[_A_ROWS, _A_COLS] = parts[:, :8]  # lane l's element i goes to its place
        b[_B_ROWS, _B_COLS] = parts[:, 8:12]
        c[_C_ROWS, _C_COLS] = parts[:, 12:]
        d = a @ b + c
        cuda.syncthreads()  # all have read before any lane writes its next fragments
        return tuple(np.float32(x) for x in d[_C_ROWS[lane], _C_COLS[lane]])


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


@cuda.jit
def _hgemm_shared_kernel(a, b, c):
    """C = A B for fp16 A (M x K) and B (K x N), fp32 C, any sizes: level 2
    (see the constants above). Fragment places as in A_FRAGMENT, B_FRAGMENT
    and C_FRAGMENT, written out with g = lane // 4 and t = lane % 4."""
    m, depth = a.shape
    n = b.shape[1]
    thread = cuda.threadIdx.x
    warp, lane = thread // WARP, thread % WARP
    g, t = lane // 4, lane % 4
    row0, col0 = cuda.blockIdx.y * BLOCK_M, cuda.blockIdx.x * BLOCK_N
    warp_row = (warp // WARPS_N) * (TILES_M * M)  # the warp's part, within the block's tile
    warp_col = (warp % WARPS_N) * (TILES_N * N)
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
            if row0 + row < m and k0 + kk < depth:
                a_tile[row, kk] = a[row0 + row, k0 + kk]
            else:
                a_tile[row, kk] = float16(0.0)
        for i in range(_B_LOADS):
            index = i * THREADS_2 + thread
            kk, col = index // BLOCK_N, index % BLOCK_N
            if k0 + kk < depth and col0 + col < n:
                b_tile[col, kk] = b[k0 + kk, col0 + col]
            else:
                b_tile[col, kk] = float16(0.0)
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
    for tm in range(TILES_M):
        for tn in range(TILES_N):
            for i in range(4):  # C_FRAGMENT: row g (+8), column 2t (+1)
                row = row0 + warp_row + tm * M + g + 8 * (i // 2)
                col = col0 + warp_col + tn * N + 2 * t + i % 2
                if row < m and col < n:
                    c[row, col] = acc[(tm * TILES_N + tn) * 4 + i]


LEVELS = (1, 2)


def _device_places():
    """A_FRAGMENT, B_FRAGMENT and C_FRAGMENT on the device (level 1 reads them)."""
    return [cuda.to_device(p) for p in (A_FRAGMENT, B_FRAGMENT, C_FRAGMENT)]


def _launch(a, b, c, level, places=None):
    """Launch level `level`'s kernel on device arrays a (M x K fp16), b (K x N
    fp16) and c (M x N fp32), unchecked (hgemm checks; benchmarks/tensor_cores.py
    times the kernel alone with this). Level 1 needs `places` (_device_places())."""
    m, n = c.shape
    if not on_gpu():
        _SCRATCH.clear()
    if level == 1:
        tiles = (m // M) * (n // N)
        blocks = (tiles + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK
        _hgemm_kernel[blocks, WARPS_PER_BLOCK * WARP](a, b, c, *places)
    else:
        grid = ((n + BLOCK_N - 1) // BLOCK_N, (m + BLOCK_M - 1) // BLOCK_M)
        _hgemm_shared_kernel[grid, THREADS_2](a, b, c)


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
    a, b = np.asarray(a), np.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.dtype != np.float16 or x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D float16 array, got {x.dtype} of shape "
                             f"{x.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k2} x {n}")
    if not (m and n and k):
        raise ValueError(f"M, N and K must be positive; got {m}, {n} and {k}")
    if level == 1 and (m % M or n % N or k % K):
        raise ValueError(f"level 1 needs M, N and K positive multiples of {M}, {N} and {K} "
                         f"(level 2 takes any sizes); got {m}, {n} and {k}")
    c = cuda.device_array((m, n), dtype=np.float32)
    _launch(cuda.to_device(np.ascontiguousarray(a)), cuda.to_device(np.ascontiguousarray(b)),
            c, level, _device_places() if level == 1 else None)
    return c.copy_to_host()
