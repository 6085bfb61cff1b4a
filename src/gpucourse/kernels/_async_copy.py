"""Asynchronous copies of float32 from global into shared memory (cp.async).

Levels 5-7 of SGEMM move each tile twice: a 128-bit load from global memory
into registers, and later a store from those registers into shared memory.
The registers that hold the next tile in flight are registers the
accumulators cannot have, and each value costs two instructions. From sm_80
on, ``cp.async`` copies from global to shared memory directly, and the
thread goes on while the copy is in flight (PTX ISA, "Data Movement and
Conversion Instructions: cp.async").

A kernel copies into the same places step after step, from places a fixed
distance further on each step, so it works out each address once and then
adds offsets:

* ``tile_address(tile, index)``: the shared-memory address, in bytes (32
  bits), of ``tile[index]``;
* ``matrix_address(matrix, row, col)``: the global address, in bytes (64
  bits), of ``matrix[row, col]``;
* ``copy_float_async_from(tile, to, matrix, source, valid)``: the 4 bytes at
  global address ``source`` (in ``matrix``) to shared address ``to`` (in
  ``tile``): ``cp.async.ca``, the only variant that copies fewer than 16
  bytes. Four bytes at a time is what lets a copy transpose (A's tile is
  stored k-major, each float in its own place) and read a row that does not
  start on a 16-byte boundary;
* ``copy_float2_async_from``: the same for 8 bytes (``cp.async.ca``), both
  addresses 8-byte aligned: the rows of a B whose length is even but not a
  multiple of 4;
* ``copy_float4_async_from``: the same for 16 bytes (``cp.async.cg``, which
  bypasses L1), both addresses 16-byte aligned;
* ``copy_float4_async_part``: 16 bytes the same way, of which only the first
  ``nbytes`` (0 to 16, a multiple of 4) are read and the rest are zeros: an
  aligned chunk of a matrix's memory that runs past its last float.

When ``valid`` is false nothing is read and the destination gets zeros (a
source size of 0), which pads tiles past the matrices' edges. The copies of
a thread are grouped by ``cp_async_commit()`` and waited for by
``cp_async_wait(n)`` (at most n groups still in
flight: one function per n, since n must be a constant); a barrier then
makes every thread's copies visible to the block. (The HGEMM ladder's
copies of halves, ``tensor_cores.moves``, commit and wait with these too.)

``grid_dependency_wait()`` (``griddepcontrol.wait``, sm_90) waits until
the kernels this one's launch lets it overlap (programmatic dependent
launch, ``launch.launch_config(..., dependent=True)``) have finished and
their writes are visible; launched without that, it returns at once.
``grid_dependents_may_start()`` (``griddepcontrol.launch_dependents``) is
the other side: once every block of this kernel has called it, a dependent
launch after it may start its blocks (they still wait for this kernel's
writes at their ``grid_dependency_wait``); with no such launch it does
nothing. Both need compute capability 9.0.

On Numba's simulator an address is the element's byte offset in its tile or
matrix (the arrays the copies name), the copies happen at once, as plain
assignments, and committing, waiting and the grid's wait do nothing.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu

SHARED_SPACE = 3  # NVVM's address space of shared memory

_COPIES = {4: "cp.async.ca.shared.global [$0], [$1], 4, $2;",
           8: "cp.async.ca.shared.global [$0], [$1], 8, $2;",
           16: "cp.async.cg.shared.global [$0], [$1], 16, $2;"}

if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    from numba.cuda import cgutils

    def _element_pointer(context, builder, array_type, array_value, indices, index_types):
        """The generic address of array[indices] (no bounds check, no wrap-around)."""
        array = context.make_array(array_type)(context, builder, value=array_value)
        indices = [context.cast(builder, value, kind, types.intp)
                   for value, kind in zip(indices, index_types)]
        return cgutils.get_item_pointer(context, builder, array_type, array, indices,
                                        wraparound=False)

    def _shared_address(builder, pointer):
        """A generic pointer into shared memory as the 32-bit shared-space
        address that ldmatrix and cp.async take (the compiler folds the casts
        when it knows the pointer came from a shared array)."""
        shared = builder.addrspacecast(pointer, ir.PointerType(pointer.type.pointee,
                                                               SHARED_SPACE))
        return builder.ptrtoint(shared, ir.IntType(32))

    def _make_asm_statement(text, name):
        @intrinsic
        def statement(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}",
                                   side_effect=True)
                builder.call(asm, [])
                return context.get_dummy_value()

            return types.void(), codegen

        statement.__name__ = name
        return statement

    cp_async_commit = _make_asm_statement("cp.async.commit_group;", "cp_async_commit")
    _WAITS = {n: _make_asm_statement(f"cp.async.wait_group {n};", f"cp_async_wait_{n}")
              for n in range(8)}
    grid_dependency_wait = _make_asm_statement("griddepcontrol.wait;", "grid_dependency_wait")
    grid_dependents_may_start = _make_asm_statement("griddepcontrol.launch_dependents;",
                                                    "grid_dependents_may_start")

    def _emit_copy(context, builder, sig, args, nbytes, size):
        """The cp.async of `nbytes` from global address args[3] to shared
        address args[1] (of an intrinsic (tile, address, matrix, source, ...)),
        `size` (an i32 value) of them read, the rest zeros."""
        i32, i64 = ir.IntType(32), ir.IntType(64)
        destination = builder.trunc(context.cast(builder, args[1], sig.args[1], types.uint64),
                                    i32)
        from_ = context.cast(builder, args[3], sig.args[3], types.uint64)
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, i64, i32]),
                           _COPIES[nbytes], "r,l,r,~{memory}", side_effect=True)
        builder.call(asm, [destination, from_, size])
        return context.get_dummy_value()

    def _copy_from(nbytes, name):
        def typer(typingctx, tile, address, matrix, source, valid):
            if not (isinstance(address, types.Integer) and isinstance(source, types.Integer)):
                raise NumbaTypeError(f"{name} copies from a global address to a shared one, "
                                     f"got {source}, {address}")

            def codegen(context, builder, sig, args):
                i32 = ir.IntType(32)
                valid_value = context.cast(builder, args[4], sig.args[4], types.boolean)
                size = builder.select(valid_value, ir.Constant(i32, nbytes), ir.Constant(i32, 0))
                return _emit_copy(context, builder, sig, args, nbytes, size)

            return types.void(tile, address, matrix, source, valid), codegen
        return typer

    @intrinsic
    def copy_float4_async_part(typingctx, tile, address, matrix, source, nbytes):
        """The first `nbytes` (0 to 16) of the 16 bytes at global address
        `source` (in `matrix`, 16-byte aligned) to the 16-byte aligned shared
        address (in `tile`), zeros after them, asynchronously."""
        if not all(isinstance(x, types.Integer) for x in (address, source, nbytes)):
            raise NumbaTypeError(f"copy_float4_async_part takes integer addresses and a "
                                 f"byte count, got {address}, {source}, {nbytes}")

        def codegen(context, builder, sig, args):
            size = builder.trunc(context.cast(builder, args[4], sig.args[4], types.uint64),
                                 ir.IntType(32))
            return _emit_copy(context, builder, sig, args, 16, size)

        return types.void(tile, address, matrix, source, nbytes), codegen

    @intrinsic
    def tile_address(typingctx, tile, index):
        """The 32-bit shared-memory address, in bytes, of tile[index] (a 1D
        float32 shared array)."""
        if not (isinstance(tile, types.Array) and tile.ndim == 1
                and tile.dtype == types.float32 and isinstance(index, types.Integer)):
            raise NumbaTypeError(f"tile_address takes a 1D float32 shared array and an "
                                 f"index, got {tile}, {index}")

        def codegen(context, builder, sig, args):
            return _shared_address(builder, _element_pointer(
                context, builder, sig.args[0], args[0], [args[1]], [sig.args[1]]))

        return types.uint32(tile, index), codegen

    @intrinsic
    def matrix_address(typingctx, matrix, row, col):
        """The 64-bit global address, in bytes, of matrix[row, col] (no bounds checked)."""
        if not (isinstance(matrix, types.Array) and matrix.ndim == 2
                and matrix.dtype == types.float32):
            raise NumbaTypeError(f"matrix_address takes a 2D float32 matrix, got {matrix}")

        def codegen(context, builder, sig, args):
            return builder.ptrtoint(_element_pointer(context, builder, sig.args[0], args[0],
                                                     args[1:], sig.args[1:]), ir.IntType(64))

        return types.uint64(matrix, row, col), codegen

    @intrinsic
    def copy_float_async_from(typingctx, tile, address, matrix, source, valid):
        """The float at global address `source` (in `matrix`; 0 where not valid)
        to the shared address (in `tile`), asynchronously."""
        return _copy_from(4, "copy_float_async_from")(typingctx, tile, address, matrix, source,
                                                      valid)

    @intrinsic
    def copy_float2_async_from(typingctx, tile, address, matrix, source, valid):
        """The two floats at global address `source` (in `matrix`, 8-byte
        aligned; zeros where not valid) to the 8-byte aligned shared address
        (in `tile`), asynchronously."""
        return _copy_from(8, "copy_float2_async_from")(typingctx, tile, address, matrix, source,
                                                       valid)

    @intrinsic
    def copy_float4_async_from(typingctx, tile, address, matrix, source, valid):
        """The four floats at global address `source` (in `matrix`, 16-byte
        aligned; zeros where not valid) to the 16-byte aligned shared address
        (in `tile`), asynchronously."""
        return _copy_from(16, "copy_float4_async_from")(typingctx, tile, address, matrix, source,
                                                        valid)
else:
    def cp_async_commit():
        """Nothing to do: the stand-in's copies are done when issued."""

    def _wait():
        """Nothing to wait for on the simulator."""

    _WAITS = {n: _wait for n in range(8)}

    def grid_dependency_wait():
        """Nothing to wait for: the simulator runs one kernel at a time."""

    def grid_dependents_may_start():
        """Nothing to let start: the simulator runs one kernel at a time."""

    @cuda.jit(device=True)
    def tile_address(tile, index):
        """The simulator's stand-in: tile[index]'s byte offset in the tile."""
        return np.uint32(4 * int(index))

    @cuda.jit(device=True)
    def matrix_address(matrix, row, col):
        """The simulator's stand-in: matrix[row, col]'s byte offset in the matrix."""
        return np.uint64(int(row) * matrix.strides[0] + int(col) * matrix.strides[1])

    def _element(matrix, source):
        row, rest = divmod(int(source), matrix.strides[0])
        return row, rest // matrix.strides[1]

    @cuda.jit(device=True)
    def copy_float_async_from(tile, address, matrix, source, valid):
        """The simulator's stand-in: the copy, at once."""
        tile[int(address) // 4] = matrix[_element(matrix, source)] if valid else 0.0

    @cuda.jit(device=True)
    def copy_float2_async_from(tile, address, matrix, source, valid):
        """The simulator's stand-in: the two copies, at once."""
        if int(address) % 8 or (valid and int(source) % 8):
            raise ValueError(f"copy_float2_async_from needs 8-byte aligned addresses, got "
                             f"shared {int(address)} and global {int(source)}")
        row, col = _element(matrix, source) if valid else (0, 0)
        for j in range(2):
            tile[int(address) // 4 + j] = matrix[row, col + j] if valid else 0.0

    @cuda.jit(device=True)
    def copy_float4_async_from(tile, address, matrix, source, valid):
        """The simulator's stand-in: the four copies, at once."""
        row, col = _element(matrix, source) if valid else (0, 0)
        for j in range(4):
            tile[int(address) // 4 + j] = matrix[row, col + j] if valid else 0.0

    @cuda.jit(device=True)
    def copy_float4_async_part(tile, address, matrix, source, nbytes):
        """The simulator's stand-in: the first nbytes // 4 floats from the
        matrix's memory (C-contiguous: float f of it is row f // n, column
        f % n), zeros after them, at once."""
        if int(address) % 16 or int(source) % 16:
            raise ValueError(f"copy_float4_async_part needs 16-byte aligned addresses, got "
                             f"shared {int(address)} and global {int(source)}")
        first, width = int(source) // 4, matrix.shape[1]
        for j in range(4):
            f = first + j
            tile[int(address) // 4 + j] = matrix[f // width, f % width] \
                if j < int(nbytes) // 4 else 0.0


def cp_async_wait(n: int):
    """The device function that waits until at most `n` groups of copies are
    in flight (`cp.async.wait_group n`), for n from 0 to 7."""
    return _WAITS[n]
