"""Atomic additions of two or four neighbouring float32 in one instruction.

The companion of ``_vector_load`` and ``_vector_store`` for results that
several blocks add to the same place: attention's dQ (FlashAttention-2's
backward) and SGEMM's split-K and stream-K pieces. From sm_90 on, PTX has
vector reductions (PTX ISA, "red", vector types): ``red.global.add.v2.f32``
and ``red.global.add.v4.f32`` add 8 or 16 bytes in one instruction. A warp
whose lanes each add four neighbours then changes whole 32-byte sectors of L2
with a quarter of the instructions of scalar atomics, each of which changes 4
bytes of a sector.

Two ways in:

* ``add_two(array, index, x0, x1)`` and ``add_four(array, index, x0, .., x3)``
  add to ``array[index:index + 2]`` or ``[index:index + 4]`` of a 1D float32
  array; the caller promises the alignment (index a multiple of 2 or 4 of a
  16-byte-aligned array);
* ``add_row_four(array, row, col, width, x0, .., x3)`` adds to
  ``array[row, col:col + 4]`` of a 2D float32 array, those of the four with a
  column below ``width``, and promises nothing: it reads the first one's
  address and takes the widest reductions that address allows: one v4 where
  it is 16-byte aligned, two v2 where it is 8-byte aligned, else four scalars
  (a scalar, a v2 and a scalar would do, but in SGEMM's split-K kernel under
  two blocks' register cap that third way spilled 8 bytes, ptxas 13.5). Rows
  of a ragged width start at every alignment, so this is what adds a ragged
  C's outputs four at a time where they line up;
  ``add_row_four_aligned(array, row, col, x0, .., x3)`` is the one v4, where
  the caller promises the alignment (rows a multiple of 4 floats).

Under Numba's CUDA simulator there is no LLVM code generation: the same names
are scalar ``cuda.atomic.add`` calls.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba import uint64  # noqa: E402 (after gpucourse.device)

# Unsigned 64-bit constants: uint64 plus a Python int would be a float in Numba.
_ZERO, _ONE, _TWO, _THREE, _FOUR, _EIGHT, _SIXTEEN = (np.uint64(v) for v in (0, 1, 2, 3, 4, 8, 16))
_INLINE = {"forceinline": True} if on_gpu() else {}
_RED_VECTOR = {2: "red.global.add.v2.f32 [$0], {$1, $2};",
               4: "red.global.add.v4.f32 [$0], {$1, $2, $3, $4};"}

if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    def _reduce(builder, address, values):
        """Emit one red.global.add of len(values) floats at the 64-bit address."""
        count = len(values)
        f32 = ir.FloatType()
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)] + [f32] * count),
                           _RED_VECTOR[count], "l" + ",f" * count + ",~{memory}",
                           side_effect=True)
        builder.call(asm, [address, *values])

    def _floats(context, builder, sig, args, first):
        return [context.cast(builder, v, t, types.float32)
                for v, t in zip(args[first:], sig.args[first:])]

    def _element_address(context, builder, array_type, array_value, indices):
        data = context.make_array(array_type)(context, builder, value=array_value)
        pointer = cgutils.get_item_pointer(context, builder, array_type, data, indices,
                                           wraparound=False)
        return builder.ptrtoint(pointer, ir.IntType(64))

    def _vector_add(array, index, values):
        """The signature and code of adding len(values) neighbours of a 1D array at once."""
        count = len(values)
        if not (isinstance(array, types.Array) and array.ndim == 1
                and array.dtype == types.float32 and isinstance(index, types.Integer)):
            raise NumbaTypeError(f"adding {count} neighbours atomically takes a 1D float32 "
                                 f"array and an index, got {array}, {index}")

        def codegen(context, builder, sig, args):
            offset = context.cast(builder, args[1], sig.args[1], types.intp)
            address = _element_address(context, builder, sig.args[0], args[0], [offset])
            _reduce(builder, address, _floats(context, builder, sig, args, 2))
            return context.get_dummy_value()

        return types.void(array, index, *values), codegen

    @intrinsic
    def add_two(typingctx, array, index, first, second):
        """array[index] += first and array[index + 1] += second, atomically, in
        one instruction; array a 1D float32 array in global memory, index even
        (the pair's 8 bytes aligned)."""
        return _vector_add(array, index, (first, second))

    @intrinsic
    def add_four(typingctx, array, index, first, second, third, fourth):
        """The same for four neighbours, index a multiple of 4 (16 bytes
        aligned)."""
        return _vector_add(array, index, (first, second, third, fourth))

    @intrinsic
    def element_address(typingctx, array, row, col):
        """The address of array[row, col] as a uint64 (no bounds checked)."""
        if not (isinstance(array, types.Array) and array.ndim == 2
                and isinstance(row, types.Integer) and isinstance(col, types.Integer)):
            raise NumbaTypeError(f"element_address takes a 2D array and two integer "
                                 f"indices, got {array}, {row}, {col}")

        def codegen(context, builder, sig, args):
            indices = [context.cast(builder, args[i], sig.args[i], types.intp) for i in (1, 2)]
            return _element_address(context, builder, sig.args[0], args[0], indices)

        return types.uint64(array, row, col), codegen

    def _reduce_at(count):
        def typer(typingctx, address, *values):
            if not isinstance(address, types.Integer) or len(values) != count:
                raise NumbaTypeError(f"a reduction of {count} floats takes an address and "
                                     f"{count} values, got {address}, {values}")

            def codegen(context, builder, sig, args):
                address = context.cast(builder, args[0], sig.args[0], types.uint64)
                _reduce(builder, address, _floats(context, builder, sig, args, 1))
                return context.get_dummy_value()

            return types.void(address, *values), codegen
        return typer

    @intrinsic
    def _add_two_at(typingctx, address, first, second):
        return _reduce_at(2)(typingctx, address, first, second)

    @intrinsic
    def _add_four_at(typingctx, address, first, second, third, fourth):
        return _reduce_at(4)(typingctx, address, first, second, third, fourth)

    @cuda.jit(device=True, **_INLINE)
    def add_row_four(array, row, col, width, x0, x1, x2, x3):
        """array[row, col + q] += xq atomically for the q < 4 with col + q < width,
        in as few reductions as the address of array[row, col] allows (a
        row-major array's: its columns are neighbours in memory)."""
        row, col, width = uint64(row), uint64(col), uint64(width)
        if col + _THREE < width and array.strides[1] == 4:
            at = element_address(array, row, col)
            if at % _SIXTEEN == _ZERO:
                _add_four_at(at, x0, x1, x2, x3)
            elif at % _EIGHT == _ZERO:
                _add_two_at(at, x0, x1)
                _add_two_at(at + _EIGHT, x2, x3)
            else:
                _add_scalars(array, row, col, width, x0, x1, x2, x3)
        else:
            _add_scalars(array, row, col, width, x0, x1, x2, x3)

    @cuda.jit(device=True, **_INLINE)
    def add_row_four_aligned(array, row, col, x0, x1, x2, x3):
        """array[row, col:col + 4] += (x0, .., x3) in one reduction; the caller
        promises a row-major array whose element (row, col) is 16-byte aligned
        (rows a multiple of 4 floats, col a multiple of 4) and all four inside."""
        _add_four_at(element_address(array, row, col), x0, x1, x2, x3)
else:
    @cuda.jit(device=True)
    def add_two(array, index, first, second):
        """The simulator's stand-in: two atomic additions."""
        cuda.atomic.add(array, index, first)
        cuda.atomic.add(array, index + 1, second)

    @cuda.jit(device=True)
    def add_four(array, index, first, second, third, fourth):
        """The simulator's stand-in: four atomic additions."""
        cuda.atomic.add(array, index, first)
        cuda.atomic.add(array, index + 1, second)
        cuda.atomic.add(array, index + 2, third)
        cuda.atomic.add(array, index + 3, fourth)

    @cuda.jit(device=True)
    def add_row_four(array, row, col, width, x0, x1, x2, x3):
        """The simulator's stand-in: scalar atomic additions, those inside."""
        _add_scalars(array, uint64(row), uint64(col), uint64(width), x0, x1, x2, x3)

    @cuda.jit(device=True)
    def add_row_four_aligned(array, row, col, x0, x1, x2, x3):
        """The simulator's stand-in: four atomic additions."""
        _add_scalars(array, uint64(row), uint64(col), uint64(col) + _FOUR, x0, x1, x2, x3)


@cuda.jit(device=True, **_INLINE)
def _add_scalars(array, row, col, width, x0, x1, x2, x3):
    """array[row, col + q] += xq, one atomic addition each, for col + q < width
    (row, col and width uint64)."""
    if col < width:
        cuda.atomic.add(array, (row, col), x0)
    if col + _ONE < width:
        cuda.atomic.add(array, (row, col + _ONE), x1)
    if col + _TWO < width:
        cuda.atomic.add(array, (row, col + _TWO), x2)
    if col + _THREE < width:
        cuda.atomic.add(array, (row, col + _THREE), x3)
