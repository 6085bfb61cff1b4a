"""Asynchronous copies of float32 from global into shared memory (cp.async).

Levels 5-7 of SGEMM move each tile twice: a 128-bit load from global memory
into registers, and later a store from those registers into shared memory.
The registers that hold the next tile in flight are registers the
accumulators cannot have, and each value costs two instructions. From sm_80
on, ``cp.async`` copies from global to shared memory directly, and the
thread goes on while the copy is in flight (PTX ISA, "Data Movement and
Conversion Instructions: cp.async"):

* ``copy_float_async(tile, index, matrix, row, col, valid)``: 4 bytes,
  ``matrix[row, col]`` into ``tile[index]`` (``cp.async.ca``: the only
  variant that copies fewer than 16 bytes). Four bytes at a time is what
  lets a copy transpose: A's tile is stored k-major, each float to its own
  place, and a row of A need not start on a 16-byte boundary.
* ``copy_float4_async(tile, index, matrix, row, col, valid)``: 16 bytes,
  ``matrix[row, col:col + 4]`` into ``tile[index:index + 4]``
  (``cp.async.cg``, which bypasses L1); the caller promises both 16-byte
  aligned.

When ``valid`` is false nothing is read and the destination gets zeros (a
source size of 0), which pads tiles past the matrices' edges. The copies of
a thread are grouped by ``cp_async_commit()`` and waited for by
``cp_async_wait(n)`` (``tensor_cores.moves``: at most n groups still in
flight); a barrier then makes every thread's copies visible to the block.

On Numba's simulator the copies happen at once, as plain assignments, and
committing and waiting do nothing.
"""

from __future__ import annotations

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels.tensor_cores.moves import cp_async_commit, cp_async_wait

__all__ = ["copy_float_async", "copy_float4_async", "cp_async_commit", "cp_async_wait"]

_COPIES = {4: "cp.async.ca.shared.global [$0], [$1], 4, $2;",
           16: "cp.async.cg.shared.global [$0], [$1], 16, $2;"}

if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from gpucourse.kernels.tensor_cores.moves import _element_pointer, _shared_address

    def _copy(nbytes, name):
        def typer(typingctx, tile, index, matrix, row, col, valid):
            if not (isinstance(tile, types.Array) and tile.ndim == 1
                    and tile.dtype == types.float32 and isinstance(matrix, types.Array)
                    and matrix.ndim == 2 and matrix.dtype == types.float32):
                raise NumbaTypeError(f"{name} copies a 2D float32 matrix's elements into a "
                                     f"1D float32 shared array, got {matrix}, {tile}")

            def codegen(context, builder, sig, args):
                i32, i64 = ir.IntType(32), ir.IntType(64)
                destination = _shared_address(builder, _element_pointer(
                    context, builder, sig.args[0], args[0], [args[1]], [sig.args[1]]))
                source = builder.ptrtoint(_element_pointer(
                    context, builder, sig.args[2], args[2], args[3:5], sig.args[3:5]), i64)
                valid_value = context.cast(builder, args[5], sig.args[5], types.boolean)
                size = builder.select(valid_value, ir.Constant(i32, nbytes), ir.Constant(i32, 0))
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i64, i32]),
                                   _COPIES[nbytes], "r,l,r,~{memory}", side_effect=True)
                builder.call(asm, [destination, source, size])
                return context.get_dummy_value()

            return types.void(tile, index, matrix, row, col, valid), codegen
        return typer

    @intrinsic
    def copy_float_async(typingctx, tile, index, matrix, row, col, valid):
        """tile[index] = matrix[row, col] (0 where not valid), asynchronously."""
        return _copy(4, "copy_float_async")(typingctx, tile, index, matrix, row, col, valid)

    @intrinsic
    def copy_float4_async(typingctx, tile, index, matrix, row, col, valid):
        """tile[index:index + 4] = matrix[row, col:col + 4] (zeros where not
        valid), asynchronously; both 16-byte aligned."""
        return _copy(16, "copy_float4_async")(typingctx, tile, index, matrix, row, col, valid)
else:
    @cuda.jit(device=True)
    def copy_float_async(tile, index, matrix, row, col, valid):
        """The simulator's stand-in: the copy, at once."""
        tile[index] = matrix[row, col] if valid else 0.0

    @cuda.jit(device=True)
    def copy_float4_async(tile, index, matrix, row, col, valid):
        """The simulator's stand-in: the four copies, at once."""
        for j in range(4):
            tile[index + j] = matrix[row, col + j] if valid else 0.0
