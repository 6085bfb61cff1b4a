"""A 128-bit store: four float32 written in one instruction (and a 64-bit one, two).

The companion of ``_vector_load``: ``store_float4(array, row, col, x0, x1, x2,
x3)`` writes ``array[row, col:col + 4]`` and ``store_float4_flat(array, i,
x0, x1, x2, x3)`` writes ``array[i:i + 4]`` of a 1D array, each as one
``<4 x float>`` store with alignment 16: ``st.global.v4.f32`` into a matrix
in global memory, ``st.shared.v4.f32`` into a shared-memory tile (declared
with ``alignment=SHARED_ALIGNMENT``). Four scalar stores would be four
instructions, and into a shared tile where neighbouring threads write 16
bytes apart, four bank-conflicted ones. ``store_float2(array, row, col, x0,
x1)`` writes two floats as one ``<2 x float>`` store with alignment 8
(``st.global.v2.f32``), for rows an even number of floats long: a cp.async
ring's C where n % 4 == 2 (``padding.PAIRS``).

The caller promises what the hardware needs, as for the loads: C-contiguous
data, a 16-byte-aligned data pointer, rows a multiple of 4 floats long and
``col`` (or ``i``) a multiple of 4. Under Numba's CUDA simulator there is no
LLVM code generation, so the same names are plain Python functions doing four
stores.
"""

from __future__ import annotations

from gpucourse.device import on_gpu

if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    def _store_vector(context, builder, array_type, array_value, indices, values):
        """Store four float32 values at the element `indices` of the array, as one vector."""
        array_struct = context.make_array(array_type)(context, builder, value=array_value)
        element_ptr = cgutils.get_item_pointer(context, builder, array_type, array_struct,
                                               indices, wraparound=False)
        vector_type = ir.VectorType(ir.FloatType(), len(values))
        vector = ir.Constant(vector_type, ir.Undefined)
        for lane, value in enumerate(values):
            vector = builder.insert_element(vector, value, ir.IntType(32)(lane))
        builder.store(vector, builder.bitcast(element_ptr, vector_type.as_pointer()),
                      align=4 * len(values))

    def _check_values(name, values):
        if not all(isinstance(v, types.Float) for v in values):
            raise NumbaTypeError(f"{name} needs four float values, got {values}")

    def _store_into_matrix(name, array, row, col, values):
        """(signature, codegen) of an intrinsic storing `values` (float types)
        into array[row, col:col + len(values)] of a 2D float32 array, as one
        vector store; a NumbaTypeError names what else it was given."""
        if not (isinstance(array, types.Array) and array.ndim == 2
                and array.dtype == types.float32):
            raise NumbaTypeError(f"{name} needs a 2D float32 array, got {array}")
        if not (isinstance(row, types.Integer) and isinstance(col, types.Integer)):
            raise NumbaTypeError(f"{name} needs integer indices, got {row}, {col}")
        _check_values(name, values)
        signature = types.none(array, row, col, *values)

        def codegen(context, builder, sig, args):
            array_type, row_type, col_type = sig.args[:3]
            indices = [context.cast(builder, args[1], row_type, types.intp),
                       context.cast(builder, args[2], col_type, types.intp)]
            stored = [context.cast(builder, v, t, types.float32)
                      for v, t in zip(args[3:], sig.args[3:])]
            _store_vector(context, builder, array_type, args[0], indices, stored)
            return context.get_dummy_value()

        return signature, codegen

    @intrinsic
    def store_float4(typingctx, array, row, col, x0, x1, x2, x3):
        """array[row, col:col + 4] = (x0, x1, x2, x3) in one 128-bit store."""
        return _store_into_matrix("store_float4", array, row, col, (x0, x1, x2, x3))

    @intrinsic
    def store_float2(typingctx, array, row, col, x0, x1):
        """array[row, col:col + 2] = (x0, x1) in one 64-bit store (st.global.v2.f32):
        rows an even number of floats long, 8-byte aligned data, col even."""
        return _store_into_matrix("store_float2", array, row, col, (x0, x1))

    @intrinsic
    def store_float4_flat(typingctx, array, index, x0, x1, x2, x3):
        """array[index:index + 4] = (x0, x1, x2, x3) of a 1D float32 array in one
        128-bit store; into a shared array (alignment=16) this is st.shared.v4.f32."""
        if not (isinstance(array, types.Array) and array.ndim == 1
                and array.dtype == types.float32):
            raise NumbaTypeError(f"store_float4_flat needs a 1D float32 array, got {array}")
        if not isinstance(index, types.Integer):
            raise NumbaTypeError(f"store_float4_flat needs an integer index, got {index}")
        _check_values("store_float4_flat", (x0, x1, x2, x3))
        signature = types.none(array, index, x0, x1, x2, x3)

        def codegen(context, builder, sig, args):
            array_type, index_type = sig.args[:2]
            indices = [context.cast(builder, args[1], index_type, types.intp)]
            values = [context.cast(builder, v, t, types.float32)
                      for v, t in zip(args[2:], sig.args[2:])]
            _store_vector(context, builder, array_type, args[0], indices, values)
            return context.get_dummy_value()

        return signature, codegen

else:

    def _check_aligned(name, array, row, col, nbytes):
        """A GPU faults on a vector store whose address is not a multiple of
        its size; the simulator names it instead (the offset from the array's
        start, which a GPU's allocation keeps aligned)."""
        offset = int(row) * array.strides[0] + int(col) * array.strides[1]
        if offset % nbytes:
            raise ValueError(f"{name} at row {int(row)}, column {int(col)}: {offset} bytes in, "
                             f"not on {nbytes} bytes")

    def store_float4(array, row, col, x0, x1, x2, x3):
        """array[row, col:col + 4] = (x0, x1, x2, x3): the simulator's fallback."""
        _check_aligned("store_float4", array, row, col, 16)
        array[row, col] = x0
        array[row, col + 1] = x1
        array[row, col + 2] = x2
        array[row, col + 3] = x3

    def store_float2(array, row, col, x0, x1):
        """array[row, col:col + 2] = (x0, x1): the simulator's fallback."""
        _check_aligned("store_float2", array, row, col, 8)
        array[row, col] = x0
        array[row, col + 1] = x1

    def store_float4_flat(array, index, x0, x1, x2, x3):
        """array[index:index + 4] = (x0, x1, x2, x3): the simulator's fallback."""
        array[index] = x0
        array[index + 1] = x1
        array[index + 2] = x2
        array[index + 3] = x3
