"""Ragged products on 128-bit loads: the operands copied into padded buffers first.

Levels 5 and 6 read four neighbouring floats of a row in one 128-bit load,
which is legal only where every row starts on 16 bytes: where K or N is not
a multiple of 4, matmul falls back to loads of one float, four times the
load instructions for the same tile, and on the H200 about 11% more time
(``shape_model.scalar_load_share``). The other way is to copy the ragged
operands into buffers whose rows are a multiple of 4 long, with zeros
beyond the matrix: B into k4 x n4 (K and N rounded up to multiples of 4)
and, where K is ragged, A into m x k4. The zeros add nothing to the sums,
and the kernel then loads four floats at a time; it stores C one float at a
time where N is ragged (``LOADS_ONLY``), and it bounds its columns by C's,
not the padded B's. The copies cost a read and a write of each operand,
which pays on products large enough that 11% of the multiply exceeds it;
``shape_model.plan_cost`` weighs the two where the GPU's entry allows it
(``shape_model.padding_on``).

The padded buffers live in one scratch buffer per GPU that grows to the
largest product seen and is reused: every launch goes to the same stream,
so a copy never overwrites operands that an earlier product still reads.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from numba import float32, uint64  # noqa: E402

# The kernel mode for padded operands (kernel_choice): 128-bit loads, single stores.
LOADS_ONLY = "loads"
PAD_BLOCK = (32, 8)


@cuda.jit
def pad_copy(source, padded):
    """padded[row, col] = source[row, col] inside source, 0 beyond it."""
    col = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < uint64(padded.shape[0]) and col < uint64(padded.shape[1]):
        inside = row < uint64(source.shape[0]) and col < uint64(source.shape[1])
        padded[row, col] = source[row, col] if inside else float32(0.0)


def pad_grid(rows: int, cols: int) -> tuple:
    """pad_copy's grid over a rows x cols padded buffer (block PAD_BLOCK)."""
    return (-(-cols // PAD_BLOCK[0]), -(-rows // PAD_BLOCK[1]))


def padded_sizes(m: int, n: int, k: int) -> tuple:
    """(k4, n4, pad_a, floats): K and N rounded up to multiples of 4, whether
    A needs a copy (K ragged), and the floats of the two buffers, A's first."""
    k4, n4 = -(-k // 4) * 4, -(-n // 4) * 4
    pad_a = k % 4 != 0
    return k4, n4, pad_a, (m * k4 if pad_a else 0) + k4 * n4


_SCRATCH: dict = {}  # device id -> the largest scratch buffer asked for yet


def scratch(device_id, floats: int):
    """A float32 device buffer of at least `floats` floats on the current GPU,
    kept for the next call (grown, never shrunk)."""
    buffer = _SCRATCH.get(device_id)
    if buffer is None or buffer.size < floats:
        _SCRATCH[device_id] = buffer = cuda.device_array(max(floats, 1), dtype=np.float32)
    return buffer


def padded_operands(a_dev, b_dev, device_id=None) -> tuple:
    """(A, B) ready for 128-bit loads, as Numba device arrays: each ragged one
    copied into the scratch buffer by pad_copy (B whenever K or N is ragged,
    A when K is), the others as given."""
    m, k = a_dev.shape
    n = b_dev.shape[1]
    k4, n4, pad_a, floats = padded_sizes(m, n, k)
    buffer = scratch(device_id, floats)
    if pad_a:
        a_padded = buffer[:m * k4].reshape(m, k4)
        pad_copy[pad_grid(m, k4), PAD_BLOCK](a_dev, a_padded)
        a_dev = a_padded
    start = m * k4 if pad_a else 0
    b_padded = buffer[start:start + k4 * n4].reshape(k4, n4)
    pad_copy[pad_grid(k4, n4), PAD_BLOCK](b_dev, b_padded)
    return a_dev, b_padded
