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

A cp.async ring (``TileConfig.stages``, ``pipelined``) copies A a float at a
time, so only B's rows need 16 bytes: where N is ragged, or B or C does not
start on 16 bytes, B alone is copied, into k x n4 (``padded_b``), and A is
read as given whatever K is.

The padded buffers live in one scratch buffer per GPU that grows to the
largest product seen and is reused: every launch goes to the same stream,
so a copy never overwrites operands that an earlier product still reads.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels._async_copy import grid_dependents_may_start
from gpucourse.kernels._vector_store import store_float4
from gpucourse.kernels.sgemm.config import _shape
from numba import float32, uint64  # noqa: E402

# The kernel mode for padded operands (kernel_choice): 128-bit loads, single stores.
LOADS_ONLY = "loads"
# The kernel mode of a cp.async ring reading B as given where its rows and
# C's are an even number of floats long (n % 4 == 2) and start on 8 bytes:
# 8-byte copies of B and 64-bit stores into C, half the instructions of one
# float at a time (entry_point's _ring_plan; rings only, kernel_choice).
PAIRS = "pairs"
# A ring's B read as given in 16-byte chunks of its memory wherever its rows
# start, then moved into place in shared memory (pipelined.make_realign), C
# stored a float at a time: no copy of B first, and 16-byte loads in the loop
# (entry_point.RING_SHIFTED).
SHIFTED = "shifted"
PAD_BLOCK = (32, 8)


def _make_pad_copy(early: bool):
    """pad_copy; with `early`, one that first lets a dependent launch after it
    start its blocks (``grid_dependents_may_start``: compute capability 9.0)."""
    EARLY = bool(early)

    @cuda.jit
    def pad_copy(source, padded):
        """padded[row, col] = source[row, col] inside source, 0 beyond it."""
        if EARLY:
            grid_dependents_may_start()
        col = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
        row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
        if row < uint64(padded.shape[0]) and col < uint64(padded.shape[1]):
            inside = row < uint64(source.shape[0]) and col < uint64(source.shape[1])
            padded[row, col] = source[row, col] if inside else float32(0.0)
    return pad_copy


def pad_grid(rows: int, cols: int) -> tuple:
    """pad_copy's grid over a rows x cols padded buffer (block PAD_BLOCK)."""
    return (-(-cols // PAD_BLOCK[0]), -(-rows // PAD_BLOCK[1]))


def _make_pad_copy_wide(early: bool):
    """pad_copy_wide; with `early`, as _make_pad_copy's."""
    EARLY = bool(early)

    @cuda.jit
    def pad_copy_wide(source, padded):
        """pad_copy four floats a thread: padded[row, 4q:4q + 4] from source's
        row, zeros beyond it. The four are read one at a time (source's rows
        may start anywhere) and written in one 16-byte store (padded's rows
        are a multiple of 4 floats long and start on 16 bytes): a quarter of
        the threads and of the stores of pad_copy (entry_point.RING_COPY_WIDE)."""
        if EARLY:
            grid_dependents_may_start()
        quad = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
        row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
        col = uint64(4) * quad
        if row < uint64(padded.shape[0]) and col < uint64(padded.shape[1]):
            # Columns at or past `width` read nothing: a row past source's has none.
            width = uint64(source.shape[1]) if row < uint64(source.shape[0]) else uint64(0)
            x0 = source[row, col] if col < width else float32(0.0)
            x1 = source[row, col + uint64(1)] if col + uint64(1) < width else float32(0.0)
            x2 = source[row, col + uint64(2)] if col + uint64(2) < width else float32(0.0)
            x3 = source[row, col + uint64(3)] if col + uint64(3) < width else float32(0.0)
            store_float4(padded, row, col, x0, x1, x2, x3)
    return pad_copy_wide


# The copies, and the same copies for a ring launched to overlap them
# (vectorized.RING_COPY_OVERLAP): {(wide, early): kernel}.
pad_copy, pad_copy_wide = _make_pad_copy(False), _make_pad_copy_wide(False)
PAD_COPIES = {(False, False): pad_copy, (True, False): pad_copy_wide,
              (False, True): _make_pad_copy(True), (True, True): _make_pad_copy_wide(True)}


def pad_grid_wide(rows: int, cols: int) -> tuple:
    """pad_copy_wide's grid over a rows x cols padded buffer (cols a multiple
    of 4; block PAD_BLOCK, each thread four columns)."""
    if cols % 4:
        raise ValueError(f"pad_copy_wide needs rows a multiple of 4 floats long, got {cols}")
    return (-(-(cols // 4) // PAD_BLOCK[0]), -(-rows // PAD_BLOCK[1]))


def rounded_up_to_4(x: int) -> int:
    """x rounded up to a multiple of 4: the rows of a padded buffer (16 bytes
    of floats) that 128-bit loads and copies may read."""
    return -(-x // 4) * 4


def padded_sizes(m: int, n: int, k: int) -> tuple:
    """(k4, n4, pad_a, floats): K and N rounded up to multiples of 4, whether
    A needs a copy (K ragged), and the floats of the two buffers, A's first."""
    k4, n4 = rounded_up_to_4(k), rounded_up_to_4(n)
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


def padded_b(b_dev, device_id=None):
    """B (k x n) copied by pad_copy into a k x n4 buffer (``rounded_up_to_4``)
    of the scratch buffer, zeros beyond column n: what a cp.async ring reads
    where B's rows do not allow 16-byte copies."""
    k, n = b_dev.shape
    n4 = rounded_up_to_4(n)
    b_padded = scratch(device_id, k * n4)[:k * n4].reshape(k, n4)
    pad_copy[pad_grid(k, n4), PAD_BLOCK](b_dev, b_padded)
    return b_padded


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


# What the copies cost (shape_model prices plans with them).
# Copying a ragged operand into a padded buffer (entry_point's padded plans):
# the copy kernel's rate, read and write together, where the GPU's entry
# does not say (an assumption, below what an H100's or H200's memory moves,
# 3.35 and 4.8 TB/s: the next grid run tests it), and the Python of each
# extra launch.
PAD_COPY_GBPS = 2500.0
PAD_CALL_US = 4.0


def padding_us(shape, entry: dict) -> tuple:
    """(copies, microseconds) of padding a ragged product's operands so that
    128-bit loads are legal: B copied into k4 x n4 (k and n rounded up to
    multiples of 4, zeros beyond) whenever k or n is ragged, and A into m x k4
    when k is; each copy reads the operand and writes the padded buffer at
    the entry's "padding" "copy_gbps" (default PAD_COPY_GBPS) and pays a launch
    (gpu_launch_us). (0, 0.0) when nothing is ragged."""
    moved = padding_bytes(shape)
    if not moved:
        return 0, 0.0
    copies = 1 + padded_sizes(*_sizes(shape))[2]
    rate = float((entry.get("padding") or {}).get("copy_gbps", PAD_COPY_GBPS)) * 1e3  # B/us
    return copies, moved / rate + copies * entry["constants"]["gpu_launch_us"]


def padding_bytes(shape) -> int:
    """The bytes that padding a ragged product's operands reads and writes
    (see padding_us): B read and its k4 x n4 buffer written, and A and its m x
    k4 buffer where k is ragged; 0 when nothing is ragged."""
    m, n, k = _sizes(shape)
    if not (k % 4 or n % 4):
        return 0
    k4, n4, pad_a, _ = padded_sizes(m, n, k)
    return 4 * (k * n + k4 * n4) + (4 * (m * k + m * k4) if pad_a else 0)


def ring_copy_us(shape, entry: dict) -> float:
    """Microseconds of copying B into a k x n4 buffer (``padded_b``) before a
    cp.async ring, where n is ragged: B read and the buffer written, 4 k (n +
    n4) bytes, at the entry's measured "ring_copy" line (copy_gbps and
    fixed_us, benchmarks/sgemm_ring_copy.py), else at PAD_COPY_GBPS plus a
    launch (gpu_launch_us); 0.0 where n is a multiple of 4."""
    _, n, k = _sizes(shape)
    if not n % 4:
        return 0.0
    measured = entry.get("ring_copy")
    rate = float(measured["copy_gbps"] if measured else PAD_COPY_GBPS) * 1e3  # bytes a us
    fixed = float(measured["fixed_us"]) if measured else entry["constants"]["gpu_launch_us"]
    return 4 * k * (n + rounded_up_to_4(n)) / rate + fixed


def _sizes(shape) -> tuple:
    """(m, n, k) as whole numbers >= 0 (config._shape), or a ValueError naming the shape."""
    try:
        return _shape(shape)
    except ValueError:
        raise ValueError(f"shape must be a tuple (m, n, k) of whole numbers >= 0, "
                         f"got {shape!r}") from None
