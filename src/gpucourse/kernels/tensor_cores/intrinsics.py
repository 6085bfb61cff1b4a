"""The tensor-core instructions as Numba functions, and their stand-ins on the simulator.

numba-cuda has no tensor-core functions: nothing like CUDA C++'s ``wmma`` or
the ``mma`` instructions. It does let a library emit any PTX instruction
through an LLVM intrinsic, the way ``_vector_load`` emits 128-bit loads. This
module does that for three instructions:

* ``mma_m16n8k16``: ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``, a
  warp's D = A B + C with A 16 x 16 and B 16 x 8 in fp16 and C, D 16 x 8 in
  fp32, products and sums in at least fp32;
* ``mma_m16n8k8_tf32``: ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``
  (A 16 x 8 and B 8 x 8 in TF32, C and D 16 x 8 in fp32);
* ``cvt_rna_tf32``: ``cvt.rna.tf32.f32``, a float32 rounded to TF32, and
  ``round_to_tf32``, the same rule in numpy. The notes above
  ``round_to_tf32`` say where the rounding rule comes from.
* ``tf32_big_part``: the same rounding done on the bits, for a value about
  to be split into big and small parts (3xTF32): add half a TF32 unit and
  keep the top 19 bits, two integer instructions where the conversion takes
  four on sm_90 (it also tests that the value is finite and selects). It
  equals ``cvt_rna_tf32`` on every finite float32 and on the infinities; a
  NaN's big part may come out 0 or another NaN, and its small part x - big
  is then NaN, so the NaN still reaches the sums through the small products.

Each lane passes its fragments, at the places ``fragments`` lists. Under
Numba's simulator, ``mma_m16n8k16`` is a stand-in that gathers the warp's
fragments through a shared scratch area and a block-wide barrier (the
simulator has no warp shuffles), so every thread of a block must call it the
same number of times; it uses the fragment lists to put the warp's matrices
back together, so it checks that kernels place their fragments consistently
with them (a kernel that breaks the rules gives wrong answers there), not
what the hardware does. ``mma_m16n8k8_tf32``'s stand-in works the same way
(one barrier per call) and also reads its A and B operands as TF32;
``cvt_rna_tf32``'s is ``round_to_tf32``. The instructions live apart from
the GEMMs built on them because every tensor-core kernel of the course (the
GEMMs here, the attention forward pass) calls the same few instructions.
"""

from __future__ import annotations

import threading

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels.tensor_cores.fragments import (
    A_FRAGMENT, A_FRAGMENT_TF32, B_FRAGMENT, B_FRAGMENT_TF32, C_FRAGMENT, TF32_K, TF32_M, TF32_N,
    WARP, K, M, N)

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
    def _warp_and_lane():
        """(key, lane): the calling thread's warp, named by its block and its
        number in the block (block x, y, z, warp), and its lane in the warp."""
        block = (cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z)
        flat = (cuda.threadIdx.z * cuda.blockDim.y + cuda.threadIdx.y) * cuda.blockDim.x \
            + cuda.threadIdx.x
        warp, lane = flat // WARP, flat % WARP
        return block + (warp,), lane

    @cuda.jit(device=True)
    def mma_m16n8k16(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, c0, c1, c2, c3):
        """D = A B + C for this lane's fragments (see the module's docstring)."""
        key, lane = _warp_and_lane()
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


# ---------------------------------------------------------------------------
# TF32: the conversion and the instruction
# ---------------------------------------------------------------------------
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

TF32_MASK = 0xFFFFE000  # the bits of a float32 that a TF32 keeps (sign, exponent, 10 of fraction)
_TF32_HALF = 0x1000  # half a TF32 unit in the last place, in the float32's bits
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
    def tf32_big_part(typingctx, x):
        """x (float32) rounded to TF32 on its bits: (bits + half a unit) with
        the low 13 bits cleared, as a float32 (see the module's docstring)."""
        if x != types.float32:
            raise NumbaTypeError(f"tf32_big_part takes a float32, got {x}")

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            bits = builder.add(builder.bitcast(args[0], i32), ir.Constant(i32, _TF32_HALF))
            kept = builder.and_(bits, ir.Constant(i32, TF32_MASK))
            return builder.bitcast(kept, ir.FloatType())

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
    def tf32_big_part(x):
        """x rounded to TF32 on its bits (add half a unit, wrapping at 32 bits;
        keep the top 19), as the GPU's tf32_big_part does."""
        bits = np.array([x], dtype=np.float32).view(np.uint32)
        return ((bits + np.uint32(_TF32_HALF)) & np.uint32(TF32_MASK)).view(np.float32)[0]

    @cuda.jit(device=True)
    def cvt_rna_tf32(x):
        """x rounded to TF32 (see round_to_tf32)."""
        return round_to_tf32(np.float32(x))[()]

    @cuda.jit(device=True)
    def mma_m16n8k8_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """D = A B + C for this lane's fragments (see the notes above)."""
        key, lane = _warp_and_lane()
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


def forget_earlier_calls():
    """Forget the simulator stand-ins' record of earlier calls (their scratch
    areas, counts of calls and results), before a launch; on a GPU there is
    nothing to forget. Every kernel that calls the stand-ins launches after
    this."""
    if not on_gpu():
        for state in (_SCRATCH, _SCRATCH_TF32, _TF32_CALLS, _TF32_RESULTS):
            state.clear()
