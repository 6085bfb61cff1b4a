"""Tensor cores from Numba: one warp-wide matrix instruction, written by hand.

numba-cuda has no tensor-core functions: nothing like CUDA C++'s ``wmma`` or
the ``mma`` instructions. It does let a library emit any PTX instruction
through an LLVM intrinsic, the way ``_vector_load`` emits 128-bit loads. This
module does that, first for one instruction:

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

The module also has the TF32 instruction

    mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32

(A 16 x 8 and B 8 x 8 in TF32, C and D 16 x 8 in fp32; places in
``A_FRAGMENT_TF32``, ``B_FRAGMENT_TF32`` and ``C_FRAGMENT_TF32``), the
conversion ``cvt.rna.tf32.f32`` (``cvt_rna_tf32``, and ``round_to_tf32``, the
same rule in numpy) and ``tf32gemm``, an fp32 GEMM on them: plain TF32
(``passes=1``) or 3xTF32 (``passes=3``, the default), CUTLASS's "fast fp32"
that PyTorch's memory-efficient attention uses, each fp32 input split into a
big and a small TF32 part and three TF32 products per fp32 product, for about
fp32's accuracy. The notes above ``round_to_tf32`` say where the fragment
places and the rounding rule come from and why the small products have their
own sums.

**Status.** ``hgemm``: run on a GPU, correct there, speed measured once. On
2026-11-25 tests/test_tensor_cores.py ran on an NVIDIA H100 80GB HBM3
(``GPUCOURSE_DEVICE=gpu``, numba-cuda 0.30.4, torch 2.11.0+cu130) and all 16
tests it then held passed: the fragment places (each covers its matrix once;
lanes 5 and 31 as the ISA writes them), both levels against NumPy and float64
(level 2 also at the ragged 1000 x 1030 x 777), the input checks and the sm_90
PTX. So the fp16 fragment places above, taken from the PTX ISA, are confirmed
by hardware. ``benchmarks/tensor_cores.py --quick`` then timed the kernels
alone at 4096^3 (results/tensor_cores-h100-2026-11-25-quick.json): level 1
11.9 TFLOP/s, level 2 15.4, against cuBLAS fp16 656 and cuBLAS fp32 (TF32
off) 50. The TF32 part (``cvt_rna_tf32``, ``mma_m16n8k8_tf32``,
``tf32gemm``) ran on the H100 on 2026-11-26: all 27 tests of
tests/test_tensor_cores.py passed there, among them the rounding of
``cvt.rna.tf32.f32`` against ``round_to_tf32`` on edge cases and tf32gemm
against float64 at 256 x 256 x 512 and 1000 x 1030 x 777, so the TF32
fragment places are confirmed by hardware too. ``attention_tensor_cores``
builds the attention forward pass on this instruction. tf32gemm itself is
slow (results/tensor_cores-h100-2026-11-26.json, the kernel alone at 4096^3):
16.5 TFLOP/s in one pass, 11.1 in three, against cuBLAS's 352 with TF32
in the same run; like ``hgemm`` it loads every fragment for the
instruction it feeds, one 32-bit load each.

Under Numba's simulator, ``mma_m16n8k16`` is a stand-in that gathers the
warp's fragments through a shared scratch area and a block-wide barrier (the
simulator has no warp shuffles), so every thread of a block must call it the
same number of times; it checks that kernels place their fragments
consistently with the lists above, not what the hardware does.
``mma_m16n8k8_tf32``'s stand-in works the same way (one barrier per call)
and also reads its A and B operands as TF32; ``cvt_rna_tf32``'s is
``round_to_tf32``.
"""

from __future__ import annotations

import threading

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


# ---------------------------------------------------------------------------
# TF32: fp32 inputs on the tensor cores, and "3xTF32" for fp32-like accuracy
# ---------------------------------------------------------------------------
#
# The instruction (PTX ISA, sm_80+):
#
#     mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
#
# D = A B + C with A 16 x 8 and B 8 x 8 in TF32 (8 exponent bits like fp32, 10
# fraction bits like fp16), C and D 16 x 8 in fp32. Each lane holds 4 elements
# of A and 2 of B, one per 32-bit register, and 4 of C and D. Fragment places,
# from the PTX ISA's "Matrix Fragments for mma.m16n8k8", the .tf32 cases
# (section 9.7.14.5.7 of PTX ISA 9.0, Figures 72, 75 and 77;
# docs.nvidia.com/cuda/parallel-thread-execution/#warp-level-matrix-fragment-mma-1688;
# read in the ISA's text as mirrored in the public repository
# jIab-b/nvfp4_gemv-kernel, kernel_thing/ptx_llm/sections/
# 9-7-14-5-7-matrix-fragments-for-mma-m16n8k8.md), with g = lane // 4 and
# t = lane % 4:
#
# * A (row-major): row g for a0 and a2, g + 8 for a1 and a3; column t for a0
#   and a1, t + 4 for a2 and a3. Note the order differs from the fp16
#   instruction's: here the second register is 8 rows down, not 1 column on;
# * B (column-major): row t for b0, t + 4 for b1; column g;
# * C and D: as for m16n8k16 (C_FRAGMENT): row g for c0 and c1, g + 8 for c2
#   and c3; column 2t + (i % 2).
#
# The same places appear in public kernels that issue this instruction in
# inline assembly (a CUDA C++ FlashAttention's fragment loaders; a Mojo test
# kernel citing the same ISA section: row_a0_a2 = groupId, row_a1_a3 =
# groupId + 8, col_a0_a1 = threadIdInGroup, col_a2_a3 = threadIdInGroup + 4).
#
# The conversion: cvt.rna.tf32.f32 (sm_80+). The PTX ISA (9.7.9.21 "Data
# Movement and Conversion Instructions: cvt", Floating Point Notes; the same
# mirror, 9-7-9-21-data-movement-and-conversion-instructions-cvt.md) defines
# .rna as "rounding to nearest, with ties away from zero" and puts the result
# in a .b32 register; its 5.2.3 says the internal layout of tf32 is
# implementation defined, and it says nothing of NaN for .rna without
# .satfinite. What the hardware does is public: the SASS that
# cvt.rna.tf32.f32 compiles to (sm_86, read with cuobjdump in the note
# enp1s0.github.io/blog/cuda/2023/01/08/tf32-rna.html) adds
# 0x1000 to the float's bits when |x| is finite and then keeps the top 19 bits
# (AND 0xffffe000): the fp32 bit pattern with the low 13 fraction bits zero.
# ``round_to_tf32`` below does exactly that in numpy. Adding 0x1000 (half of
# the dropped part's range) to the magnitude's bits and truncating rounds to
# nearest with ties away from zero, carries into the exponent when the
# fraction overflows, rounds subnormals correctly and sends values from the
# half-way point between the largest TF32 number and 2^128 up to infinity (an
# sm_90 GPU's rounding is checked against this by tests/test_tensor_cores.py,
# which passed on an H100 on 2026-11-26); infinities stay as they are; a NaN
# is only truncated (a quiet NaN stays a NaN). So a TF32 value here is a float32 whose low 13
# bits are zero, which is how CUTLASS's tfloat32_t holds it too, and
# ``x - tf32(x)`` is exact in fp32.
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

TF32_M, TF32_N, TF32_K = 16, 8, 8  # the shape of one TF32 instruction
TF32_MASK = 0xFFFFE000  # the bits of a float32 that a TF32 keeps (sign, exponent, 10 of fraction)
_TF32_HALF = 0x1000  # half a TF32 unit in the last place, in the float32's bits


def _places_tf32():
    """(A, B) fragment places of mma.m16n8k8 with .tf32, from the PTX ISA's rules."""
    a_places, b_places = [], []
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        a_places.append([(g + 8 * (i % 2), t + 4 * (i // 2)) for i in range(4)])
        b_places.append([(t + 4 * i, g) for i in range(2)])
    return np.array(a_places, dtype=np.int32), np.array(b_places, dtype=np.int32)


# A_FRAGMENT_TF32[lane, i] = (row, column) of element i of lane's fragment of A
# (16 x 8); B_FRAGMENT_TF32 likewise for B (8 x 8). C and D: C_FRAGMENT_TF32,
# the same places as the fp16 instruction's C_FRAGMENT.
A_FRAGMENT_TF32, B_FRAGMENT_TF32 = _places_tf32()
C_FRAGMENT_TF32 = C_FRAGMENT
_PTX_TF32 = ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
             "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
_PTX_CVT_TF32 = "cvt.rna.tf32.f32 $0, $1;"


def round_to_tf32(x):
    """What cvt.rna.tf32.f32 does, in numpy: each float32 of `x` rounded to
    TF32 (10 fraction bits), to nearest with ties away from zero, returned as
    float32 with the low 13 bits zero. Finite values: add 0x1000 to the bits,
    keep the top 19 (values from the largest TF32's half-way point up become
    infinity); infinities and NaNs: keep the top 19 bits (see the notes above
    on where this rule comes from). Raises ValueError for anything but float32."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise ValueError(f"x must be float32 (what cvt.rna.tf32.f32 takes), got {x.dtype}")
    bits = x.view(np.uint32)
    carried = np.where(np.isfinite(x), bits + np.uint32(_TF32_HALF), bits)
    return (carried.astype(np.uint32) & np.uint32(TF32_MASK)).view(np.float32)


if on_gpu():
    @intrinsic
    def cvt_rna_tf32(typingctx, x):
        """x (float32) rounded to TF32 by cvt.rna.tf32.f32: a float32 whose low
        13 bits are zero (the instruction's .b32 result seen as a float)."""
        if x != types.float32:
            raise NumbaTypeError(f"cvt_rna_tf32 takes a float32, got {x}")

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), [ir.FloatType()]), _PTX_CVT_TF32,
                               "=r,f")
            return builder.bitcast(builder.call(asm, list(args)), ir.FloatType())

        return types.float32(types.float32), codegen

    @intrinsic
    def mma_m16n8k8_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """D = A B + C for this lane's fragments: a0..a3 and b0..b1 TF32 values
        held as float32 (cvt_rna_tf32's results), c0..c3 float32; returns (d0,
        d1, d2, d3), float32. Every lane of the warp must call it together."""
        operands = (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        if not all(x == types.float32 for x in operands):
            raise NumbaTypeError(f"mma_m16n8k8_tf32 takes 10 float32 values (A and B as TF32), "
                                 f"got {operands}")
        signature = types.UniTuple(types.float32, 4)(*operands)

        def codegen(context, builder, sig, args):
            i32, f32 = ir.IntType(32), ir.FloatType()
            tf32 = [builder.bitcast(value, i32) for value in args[:6]]  # .b32 registers
            result = ir.LiteralStructType([f32] * 4)
            asm = ir.InlineAsm(ir.FunctionType(result, [i32] * 6 + [f32] * 4), _PTX_TF32,
                               "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", side_effect=True)
            out = builder.call(asm, tf32 + list(args[6:]))
            lanes = [builder.extract_value(out, i) for i in range(4)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return signature, codegen

else:
    # The simulator's stand-ins. cvt_rna_tf32 is round_to_tf32 on one value.
    # mma_m16n8k8_tf32 gathers the warp's fragments like mma_m16n8k16's
    # stand-in, reads each A and B operand as its top 19 bits (a TF32; the
    # ISA leaves what the hardware does with the low 13 bits to the
    # implementation, CUTLASS's "round toward zero" big parts count on their
    # being ignored, and the kernels here only pass cvt_rna_tf32's results),
    # sums the exact products and C in float64 and rounds each element of D
    # once to float32. The tensor cores keep fewer extra bits and truncate,
    # so the stand-in is at least as accurate as the hardware; what it does
    # model is the rounding of the inputs to TF32. The simulator's barriers
    # are its cost, so this stand-in waits once per call, not twice: lanes
    # leave their fragments in two areas in turn (by the parity of their
    # count of calls), and the warp's first lane past the barrier computes D
    # for all; an area is written again only two calls later, after the next
    # call's barrier, by when every lane has taken its part of D.
    _SCRATCH_TF32: dict = {}  # (block, warp, call % 2) -> {lane: fragments}
    _TF32_CALLS: dict = {}  # (block, warp, lane) -> calls made
    _TF32_RESULTS: dict = {}  # (block, warp, call) -> D, as [lane, i]
    _TF32_LOCK = threading.Lock()
    _A32_ROWS, _A32_COLS = A_FRAGMENT_TF32[..., 0], A_FRAGMENT_TF32[..., 1]
    _B32_ROWS, _B32_COLS = B_FRAGMENT_TF32[..., 0], B_FRAGMENT_TF32[..., 1]

    def _mma_tf32_of_warp(scratch):
        """D (each lane's 4 elements, float32) from the warp's fragments in scratch."""
        parts = np.array([scratch[lane] for lane in range(WARP)], dtype=np.float32)
        operands = (parts[:, :6].view(np.uint32) & np.uint32(TF32_MASK)).view(np.float32)
        a = np.zeros((TF32_M, TF32_K))
        b = np.zeros((TF32_K, TF32_N))
        c = np.zeros((TF32_M, TF32_N))
        a[_A32_ROWS, _A32_COLS] = operands[:, :4]
        b[_B32_ROWS, _B32_COLS] = operands[:, 4:]
        c[_C_ROWS, _C_COLS] = parts[:, 6:]
        return (a @ b + c).astype(np.float32)[_C_ROWS, _C_COLS]  # [lane, i]

    @cuda.jit(device=True)
    def cvt_rna_tf32(x):
        """x rounded to TF32 (see round_to_tf32)."""
        return round_to_tf32(np.float32(x))[()]

    @cuda.jit(device=True)
    def mma_m16n8k8_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """D = A B + C for this lane's fragments (see the notes above)."""
        block = (cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z)
        flat = (cuda.threadIdx.z * cuda.blockDim.y + cuda.threadIdx.y) * cuda.blockDim.x \
            + cuda.threadIdx.x
        warp, lane = flat // WARP, flat % WARP
        key = block + (warp,)
        call = _TF32_CALLS.get(key + (lane,), 0) + 1  # this lane's count of calls
        _TF32_CALLS[key + (lane,)] = call
        scratch = _SCRATCH_TF32.setdefault(key + (call % 2,), {})  # two areas, in turn
        scratch[lane] = (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        cuda.syncthreads()
        with _TF32_LOCK:  # the warp's first lane here computes D for all
            d = _TF32_RESULTS.get(key + (call,))
            if d is None:
                d = _TF32_RESULTS[key + (call,)] = _mma_tf32_of_warp(scratch)
                _TF32_RESULTS.pop(key + (call - 2,), None)  # read by all lanes by now
        d = d[lane]
        return (np.float32(d[0]), np.float32(d[1]), np.float32(d[2]), np.float32(d[3]))


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
# copy of one row of B writes 32 banks).
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


def _make_tf32gemm_kernel(passes):
    """The TF32 GEMM kernel for `passes` 1 (plain TF32) or 3 (3xTF32), with
    `passes` fixed when it compiles."""
    split = passes == 3

    @cuda.jit
    def kernel(a, b, c):
        """C = A B for fp32 A (M x K) and B (K x N), fp32 C, any sizes (see the
        constants above). Fragment places as in A_FRAGMENT_TF32,
        B_FRAGMENT_TF32 and C_FRAGMENT_TF32, written out with g = lane // 4 and
        t = lane % 4."""
        m, depth = a.shape
        n = b.shape[1]
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        row0, col0 = cuda.blockIdx.y * TF32_BLOCK_M, cuda.blockIdx.x * TF32_BLOCK_N
        warp_row = (warp // TF32_WARPS_N) * (TF32_TILES_M * TF32_M)
        warp_col = (warp % TF32_WARPS_N) * (TF32_TILES_N * TF32_N)
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
                x = float32(0.0)
                if row0 + row < m and k0 + kk < depth:
                    x = a[row0 + row, k0 + kk]
                big = cvt_rna_tf32(x)
                a_big[row, kk] = big
                if split:
                    a_small[row, kk] = cvt_rna_tf32(x - big)
            for i in range(_TF32_B_LOADS):
                index = i * TF32_THREADS + thread
                kk, col = index // TF32_BLOCK_N, index % TF32_BLOCK_N
                x = float32(0.0)
                if k0 + kk < depth and col0 + col < n:
                    x = b[k0 + kk, col0 + col]
                big = cvt_rna_tf32(x)
                b_big[kk, col] = big
                if split:
                    b_small[kk, col] = cvt_rna_tf32(x - big)
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
        for tm in range(TF32_TILES_M):
            for tn in range(TF32_TILES_N):
                for i in range(4):  # C_FRAGMENT_TF32: row g (+8), column 2t (+1)
                    row = row0 + warp_row + tm * TF32_M + g + 8 * (i // 2)
                    col = col0 + warp_col + tn * TF32_N + 2 * t + i % 2
                    if row < m and col < n:
                        j = (tm * TF32_TILES_N + tn) * 4 + i
                        c[row, col] = acc[j] + corr[j]

    return kernel


_TF32GEMM_KERNELS = {passes: _make_tf32gemm_kernel(passes) for passes in PASSES}


def _launch_tf32(a, b, c, passes):
    """Launch the TF32 GEMM (`passes` 1 or 3) on device arrays a (M x K fp32),
    b (K x N fp32) and c (M x N fp32), unchecked (tf32gemm checks;
    benchmarks/tensor_cores.py times the kernel alone with this)."""
    m, n = c.shape
    if not on_gpu():
        for state in (_SCRATCH_TF32, _TF32_CALLS, _TF32_RESULTS):
            state.clear()
    grid = ((n + TF32_BLOCK_N - 1) // TF32_BLOCK_N, (m + TF32_BLOCK_M - 1) // TF32_BLOCK_M)
    _TF32GEMM_KERNELS[passes][grid, TF32_THREADS](a, b, c)


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
