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

``A_FRAGMENT``, ``B_FRAGMENT`` and ``C_FRAGMENT`` list those places; kernels
read and write their fragments with them, and the simulator's stand-in uses
the same lists to put the warp's matrices back together.

**Status: written and compiled, not yet run on a GPU.** On this course's CPU
machine the intrinsic compiles to PTX for compute capability 8.0 and 9.0, and
ptxas accepts it (tests/test_tensor_cores.py). The fragment places above are
taken from the PTX ISA; only a run on a GPU, against NumPy, proves them, and
that run is the first thing the next GPU session does
(``benchmarks/NOTES.md``). Under Numba's simulator, ``mma_m16n8k16`` is a
stand-in that gathers the warp's fragments through a shared scratch area and
a block-wide barrier (the simulator has no warp shuffles), so every thread of
a block must call it the same number of times; it checks that kernels place
their fragments consistently with the lists above, not what the hardware does.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba.types import float16  # noqa: E402 (after gpucourse.device)

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

    @cuda.jit(device=True)
    def mma_m16n8k16(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, c0, c1, c2, c3):
        """D = A B + C for this lane's fragments (see the module's docstring)."""
        block = (cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z)
        flat = (cuda.threadIdx.z * cuda.blockDim.y + cuda.threadIdx.y) * cuda.blockDim.x \
            + cuda.threadIdx.x
        warp, lane = flat // WARP, flat % WARP
        key = block + (warp,)
        scratch = _SCRATCH.setdefault(key, {})
        scratch[lane] = ((a0, a1, a2, a3, a4, a5, a6, a7), (b0, b1, b2, b3), (c0, c1, c2, c3))
        cuda.syncthreads()
        a = np.zeros((M, K), dtype=np.float32)
        b = np.zeros((K, N), dtype=np.float32)
        c = np.zeros((M, N), dtype=np.float32)
        for other in range(WARP):
            a_part, b_part, c_part = scratch[other]
            for i in range(8):
                a[A_FRAGMENT[other, i, 0], A_FRAGMENT[other, i, 1]] = a_part[i]
            for i in range(4):
                b[B_FRAGMENT[other, i, 0], B_FRAGMENT[other, i, 1]] = b_part[i]
                c[C_FRAGMENT[other, i, 0], C_FRAGMENT[other, i, 1]] = c_part[i]
        d = a @ b + c
        cuda.syncthreads()  # all have read before any lane writes its next fragments
        return tuple(np.float32(d[C_FRAGMENT[lane, i, 0], C_FRAGMENT[lane, i, 1]])
                     for i in range(4))


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


def hgemm(a, b):
    """C = A B on tensor cores, one mma_m16n8k16 per 16 x 8 x 16 step: the
    plainest kernel that uses the instruction (fragments loaded straight from
    global memory, no shared memory), to check the fragment places and to
    measure the instruction, not a fast GEMM.

    a: fp16 numpy array M x K, b: fp16 K x N, with M a multiple of 16, N of 8
    and K of 16. Returns C, float32 M x N, the products summed in float32.
    """
    a, b = np.asarray(a), np.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.dtype != np.float16 or x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D float16 array, got {x.dtype} of shape "
                             f"{x.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k2} x {n}")
    if m % M or n % N or k % K or not (m and n and k):
        raise ValueError(f"M, N and K must be positive multiples of {M}, {N} and {K}; got "
                         f"{m}, {n} and {k}")
    c = cuda.device_array((m, n), dtype=np.float32)
    tiles = (m // M) * (n // N)
    blocks = (tiles + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK
    places = [cuda.to_device(p) for p in (A_FRAGMENT, B_FRAGMENT, C_FRAGMENT)]
    if not on_gpu():
        _SCRATCH.clear()
    _hgemm_kernel[blocks, WARPS_PER_BLOCK * WARP](cuda.to_device(a), cuda.to_device(b), c,
                                                  *places)
    return c.copy_to_host()
