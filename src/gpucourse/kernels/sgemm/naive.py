"""Levels 1 and 2: one thread per output of C, reading A and B straight from
global memory.

Level 1 (naive) lets the 32 threads of a warp walk down a column of C, so at
every step of K their loads of A fall in 32 different rows. Level 2
(coalesced) swaps the two thread indices and nothing else: the warp now reads
one value of A and 32 neighbouring values of B, one 128-byte line. Measured on
the H100 at 4096^3 (benchmarks/results/sgemm-h100-2026-11-22.json, cuBLAS
51.7 TFLOP/s): level 1 0.50 TFLOP/s (1.0% of cuBLAS), level 2 1.98 TFLOP/s
(3.8%), four times faster for swapping two indices.

They need none of what the tiled levels share (no tiles, no factories, no
configuration), so they stand alone: the first kernels a student reads.
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from numba import float32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)


# -----------------------------------------------------------------------------
# Level 1: naive.
# One thread per element of C, each computing a full dot product of a row of A
# and a column of B. The thread index x picks the ROW: the 32 threads of a warp
# have consecutive x, so at every step they read 32 different rows of A (32
# separate memory transactions, K*4 bytes apart) and write down a column of C.
# The hardware coalesces a warp's loads only when they fall in the same
# 32-byte sectors, so this mapping wastes most of each transaction.


@cuda.jit
def sgemm_naive(a, b, c):
    m, n, k = uint64(c.shape[0]), uint64(c.shape[1]), uint64(a.shape[1])
    row = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    col = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < m and col < n:
        acc = float32(0.0)
        for i in range(k):
            acc += a[row, i] * b[i, col]
        c[row, col] = acc


# -----------------------------------------------------------------------------
# Level 2: coalesced.
# The same arithmetic with x and y swapped: consecutive threads of a warp now
# take consecutive COLUMNS. At each step the warp reads one value of A (a
# broadcast) and 32 neighbouring values of B (one 128-byte line), and writes
# 32 neighbouring values of C. Nothing else changed: a deliberate copy of
# sgemm_naive but for its two index lines, so that the two read side by side.


@cuda.jit
def sgemm_coalesced(a, b, c):
    m, n, k = uint64(c.shape[0]), uint64(c.shape[1]), uint64(a.shape[1])
    col = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < m and col < n:
        acc = float32(0.0)
        for i in range(k):
            acc += a[row, i] * b[i, col]
        c[row, col] = acc
