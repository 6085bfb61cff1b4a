"""Split-K: cutting K into slices so that a product with few tiles of C and a
deep K still gives every SM work, and adding the slices' products up.

The kernels of levels 5 to 7 each come in a split variant (their factories'
``split=True``) that walks one slice of K, taken from blockIdx.z, and adds its
outputs into C with atomic adds. This module holds what is split-K's own:
how K is cut (``split_ranges``), the kernel that zeroes C first
(``zero_matrix``) and the one that adds partial products in order
(``sum_splits``), the argument checks, and ``split_kernel_for``, the kernel,
grid and block of one split launch. The entry point (``entry_point``) makes
the launches. The note below says when each way of adding pays.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.config import (TileConfig, WarpTileConfig, _blocks, _level,
                                            _whole_or_zero)
from gpucourse.kernels.sgemm.kernel_choice import _kernel_for
from gpucourse.kernels.sgemm.tuned_table import auto_config
from numba import float32, types, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)


# -----------------------------------------------------------------------------
# Split-K. A product with few output tiles and a deep K (1024 x 1024 x 8192 is
# 128 tiles of 64 x 128 for the H100's 132 SMs) keeps most SMs idle however
# fast each block is. Cutting K into `splits` slices gives each slice's
# product its own blocks. Slices are whole multiples of 16 columns (the last
# one ragged), so the 128-bit loads of levels 5-7 stay aligned. Two ways to
# add the slices up (matmul's `split_sum`):
#
# * "atomic" (the default): ONE launch. The grid gets a third dimension, one
#   slice per blockIdx.z; each block walks its slice of K (columns z*chunk up
#   to (z+1)*chunk of A) and adds its tile of C into C with float32 atomic
#   adds (`cuda.atomic.add`), C having been zeroed by a small kernel
#   (`zero_matrix`) just before, on the same stream. No buffer of partial
#   products, and one extra launch (the zeroing) whatever the number of
#   slices. The price: each output's slices arrive in whatever order their
#   blocks finish, which can change from call to call, so the last bits of C
#   can differ between two calls on the same inputs.
# * "partials": one launch per slice, each writing a partial C into a
#   (slices, m, n) buffer, then `sum_splits` adding them in order:
#   deterministic, but it writes and reads slices x m x n more floats and
#   pays a launch per slice. On the H200 (benchmarks/NOTES.md) two or four
#   slices this way never beat one.
#
# With splits=1 (what auto has measured best at every shape so far) neither
# runs: one launch, each output summed by one thread and stored once, the
# same bits on every call.

SPLIT_ALIGN = 16
SPLIT_SUMS = ("atomic", "partials")


def _split_chunk(k: int, splits: int) -> int:
    """The length of each slice of K but the last: K / splits rounded up to a
    multiple of 16, and at least 16."""
    return max(SPLIT_ALIGN, -(-k // splits // SPLIT_ALIGN) * SPLIT_ALIGN)


def split_ranges(k: int, splits: int) -> list[tuple[int, int]]:
    """The K ranges [k0, k1) of at most `splits` slices, each a multiple of 16 long
    (but the last); fewer when K is too short to give each slice 16 columns."""
    chunk = _split_chunk(k, splits)
    return [(k0, min(k, k0 + chunk)) for k0 in range(0, k, chunk)]


@cuda.jit
def zero_matrix(c):
    """c[row, col] = 0 everywhere: C before the split-K kernel adds into it."""
    col = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < uint64(c.shape[0]) and col < uint64(c.shape[1]):
        c[row, col] = float32(0.0)


@cuda.jit
def sum_splits(partial, c):
    """c[row, col] = the sum over s of partial[s, row, col]."""
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for s in range(partial.shape[0]):
            acc += partial[s, row, col]
        c[row, col] = acc


SUM_BLOCK = (32, 8)


def _sum_grid(m: int, n: int) -> tuple:
    return (_blocks(n, SUM_BLOCK[0]), _blocks(m, SUM_BLOCK[1]))


def _check_splits(splits, key) -> int:
    if splits is None:
        return None
    if key not in ("5", "6", "7", "auto"):
        raise ValueError(f"splits applies to levels 5, 6, 7 and auto only, got level {key!r}")
    if isinstance(splits, (bool, np.bool_)) or not isinstance(splits, (int, np.integer)) \
            or not 1 <= splits <= 64:
        raise ValueError(f"splits must be a whole number from 1 to 64, got {splits!r}")
    return int(splits)


def _check_split_sum(split_sum) -> str:
    if not isinstance(split_sum, str) or split_sum not in SPLIT_SUMS:
        raise ValueError(f"split_sum must be one of {', '.join(map(repr, SPLIT_SUMS))}, "
                         f"got {split_sum!r}")
    return split_sum


def split_kernel_for(level, shape, splits, vectorized=True,
                     config: TileConfig | WarpTileConfig | None = None):
    """The single-launch split-K kernel matmul launches for `level` (5, 6, 7 or
    "auto") at shape (m, n, k) with K cut into `splits` slices.

    Returns (kernel, grid, block, chunk). The grid's third dimension is the
    number of slices, len(split_ranges(k, splits)); block z multiplies
    columns z*chunk ... (z+1)*chunk of A (chunk a multiple of 16; the last
    slice ends at k) and ADDS its outputs into C with atomic adds, so C must
    be zeroed first: zero_matrix[...](c), then
    kernel[grid, block](a, b, c, numpy.uint64(chunk)).
    """
    key = _level(level, auto_ok=True)
    splits = _check_splits(splits, key)
    if splits is None:
        raise ValueError("splits must be a whole number from 1 to 64, got None")
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    m, n, k = (_whole_or_zero(name, v) for name, v in zip("mnk", shape))
    if key == "auto":
        key, config = "6", config or auto_config((m, n, k))
    return _split_kernel(key, m, n, k, splits, vectorized, config)


def _split_kernel(key, m, n, k, splits, vectorized, config) -> tuple:
    kernel, grid, block = _kernel_for(key, m, n, vectorized, config, split=True)
    chunk = _split_chunk(k, splits)
    return kernel, grid + (max(1, _blocks(k, chunk)),), block, chunk


# Numba's types of the launch path's arguments (see entry_point): a C-contiguous
# float32 matrix, any float32 matrix (a slice of K of A), and the partial
# products' (slices, m, n) buffer.
C_MATRIX = types.Array(float32, 2, "C")
A_MATRIX = types.Array(float32, 2, "A")
C_BLOCK = types.Array(float32, 3, "C")
# The split-K kernel's arguments: A, B, C and the slice length.
SPLIT_SIGNATURE = (C_MATRIX, C_MATRIX, C_MATRIX, types.uint64)
