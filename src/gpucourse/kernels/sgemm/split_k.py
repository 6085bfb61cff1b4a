"""Split-K: cutting K into slices so that a product with few tiles of C and a
deep K still gives every SM work, and adding the slices' products up.

The kernels of levels 5 to 7 each come in a split variant (their factories'
``split=True``) that walks one slice of K, taken from blockIdx.z, and adds its
outputs into C with atomic adds, and a stream-K variant (``split="stream"``)
whose blocks each walk an equal run of all the tiles' steps of K. This module
holds what is theirs: how K is cut (``split_ranges``, ``stream_arguments``),
the kernel that zeroes C first (``zero_matrix``) and the one that adds
partial products in order (``sum_splits``), the argument checks, and
``split_kernel_for`` and ``stream_kernel_for``, the kernel, grid and block of
one launch. The entry point (``entry_point``) makes the launches. The notes
below say when each way of adding pays.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.config import (STREAM, TileConfig, WarpTileConfig, _blocks,
                                            _level, _whole_or_zero)
from gpucourse.kernels.sgemm.kernel_choice import _default_config, _kernel_for
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

# -----------------------------------------------------------------------------
# Stream-K (splits="stream"). Split-K cuts every tile's K the same way, so a
# product whose tiles are one wave short of the SMs (104 tiles of 128 x 128
# for 1537 x 1023 x 771 on 132 SMs) still leaves SMs idle, and one a little
# over a whole number of waves pays for a nearly empty last wave. Stream-K
# lays all the tiles' steps of K end to end, tile after tile, and gives each
# of `workers` blocks (as many as the GPU holds at once: one wave, no tail)
# an equal run of them. A run starts partway through one tile and may end
# partway through another; each piece is a walk along that part of the
# tile's K, added into C (zeroed first) with atomic adds, as split-K's
# slices are, and a run's whole tiles are stored. So each SM does the same
# number of steps, whatever the number of tiles, for atomic additions on
# the tiles that two runs share (at most one where each run ends). Its
# splits value is config.STREAM.
# On the simulator, where blocks run one after another, a few workers: enough
# for runs that cross tiles.
SIMULATOR_WORKERS = 3


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


def _check_splits(splits, key) -> int | str:
    if splits is None:
        return None
    if key not in ("5", "6", "7", "auto"):
        raise ValueError(f"splits applies to levels 5, 6, 7 and auto only, got level {key!r}")
    if isinstance(splits, str) and splits == STREAM:
        return STREAM
    if isinstance(splits, (bool, np.bool_)) or not isinstance(splits, (int, np.integer)) \
            or not 1 <= splits <= 64:
        raise ValueError(f"splits must be a whole number from 1 to 64 or {STREAM!r} "
                         f"(stream-K), got {splits!r}")
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
    if splits is None or splits == STREAM:
        raise ValueError(f"splits must be a whole number from 1 to 64, got {splits!r} "
                         f"(stream-K's launch: stream_kernel_for)")
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


def stream_kernel_for(level, shape, vectorized=True,
                      config: TileConfig | WarpTileConfig | None = None,
                      workers: int | None = None):
    """The stream-K kernel matmul launches with splits="stream" for `level`
    (5, 6, 7 or "auto") at shape (m, n, k).

    Returns (kernel, grid, block, arguments): `workers` blocks (default: as
    many as the GPU holds at once, ``stream_workers``; at most one per step
    of K of all the tiles), each adding its run of steps into C, so C must be
    zeroed first: zero_matrix[...](c), then kernel[grid, block](a, b, c,
    *arguments), the arguments five numpy.uint64 (see ``stream_arguments``).
    """
    key = _level(level, auto_ok=True)
    _check_splits(STREAM, key)
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    m, n, k = (_whole_or_zero(name, v) for name, v in zip("mnk", shape))
    if workers is not None and (isinstance(workers, (bool, np.bool_))
                                or not isinstance(workers, (int, np.integer)) or workers < 1):
        raise ValueError(f"workers must be a whole number of at least 1, got {workers!r}")
    if key == "auto":
        key, config = "6", config or auto_config((m, n, k))
    return _stream_kernel(key, m, n, k, vectorized, config, workers)


def _stream_kernel(key, m, n, k, vectorized, config, workers=None) -> tuple:
    kernel, grid, block = _kernel_for(key, m, n, vectorized, config, split=STREAM)
    if workers is None:
        workers = stream_workers(kernel, block)
    tiles = config if config is not None else _default_config(key)
    arguments = stream_arguments(m, n, k, grid, tiles, workers)
    return kernel, (int(arguments[-1]),), block, arguments


def stream_arguments(m: int, n: int, k: int, grid: tuple, config, workers: int) -> tuple:
    """The stream-K kernel's last five arguments, as numpy.uint64: tiles
    across C (grid[0]), steps of K a tile (each `step` columns: the tile's bk,
    at least 16, so that every piece starts on 16 floats), step, all the
    tiles' steps, and the workers (at most one per step)."""
    step = max(SPLIT_ALIGN, config.bk)
    steps = max(1, -(-k // step))
    total = grid[0] * grid[1] * steps
    return tuple(np.uint64(x) for x in (grid[0], steps, step, total, min(workers, total)))


def stream_workers(kernel, block) -> int:
    """As many blocks of `kernel` (compiled for STREAM_SIGNATURE) as the GPU
    runs at once: its SMs times the blocks that fit on one (registers, shared
    memory, threads), on the current GPU. On the simulator, SIMULATOR_WORKERS."""
    if not on_gpu():
        return SIMULATOR_WORKERS
    compiled = kernel.compile(STREAM_SIGNATURE)
    return max(1, compiled.max_cooperative_grid_blocks(block))


# Numba's types of the launch path's arguments (see entry_point): a C-contiguous
# float32 matrix, any float32 matrix (a slice of K of A), and the partial
# products' (slices, m, n) buffer.
C_MATRIX = types.Array(float32, 2, "C")
A_MATRIX = types.Array(float32, 2, "A")
C_BLOCK = types.Array(float32, 3, "C")
# The split-K kernel's arguments: A, B, C and the slice length.
SPLIT_SIGNATURE = (C_MATRIX, C_MATRIX, C_MATRIX, types.uint64)
# The stream-K kernel's: A, B, C, tiles across, steps a tile, step, total steps, workers.
STREAM_SIGNATURE = (C_MATRIX, C_MATRIX, C_MATRIX) + (types.uint64,) * 5
