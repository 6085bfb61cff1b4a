"""128-bit loads and stores for kernels: four float32 in one instruction.

The public names behind ``_vector_load`` and ``_vector_store``, for the
course's own kernels and for students' (level 5 of SGEMM loads A and B with
these)::

    from gpucourse.kernels.vector import load_float4, load_float4_flat, store_float4

``load_float4(array, row, col)`` returns ``array[row, col:col + 4]`` as four
floats; ``load_float4_flat(array, i)`` does the same for a 1-D array (a
shared tile); ``store_float4(array, row, col, x0, x1, x2, x3)`` and
``store_float4_flat(array, i, x0, x1, x2, x3)`` write four. On a GPU each is
one ``ld``/``st`` ``.v4.f32`` instruction, and the caller promises what the
hardware needs: ``col`` (or ``i``) a multiple of 4, rows a multiple of 4 long,
the data 16-byte aligned; shared arrays read this way are declared with
``alignment=SHARED_ALIGNMENT`` (``None`` on the simulator, which refuses the
argument). On the simulator they are plain Python doing four accesses.
"""

from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4, load_float4_flat
from gpucourse.kernels._vector_store import store_float4, store_float4_flat

__all__ = ["SHARED_ALIGNMENT", "load_float4", "load_float4_flat", "store_float4",
           "store_float4_flat"]
