"""What every attention kernel is built on: the GPU's limits and lean index types.

The forward kernels (on the CUDA cores and on the tensor cores) and the
backward kernels size their tiles against the same hardware: a warp of 32
threads, 48 KiB of shared memory that a block may declare statically, and up
to 227 KiB that it may opt in to. Their inner loops also share two habits,
set here once: shared-memory indices are unsigned on a GPU, and small device
functions are inlined. This module imports nothing else of the package, so
that every other module can build on it.
"""

from __future__ import annotations

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels import launch
from numba import int64, uint32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)

# Inside the tiled kernel, shared-memory indices are unsigned on a GPU: Numba
# then skips the fix-up it applies to negative, Python-style indices, which
# costs integer instructions on every access of the inner loops. Numba's
# simulator runs the kernel as Python, where a plain int is the fast choice.
unsigned = uint32 if on_gpu() else int
# 64-bit for offsets into the whole q, k, v arrays, and where an index's
# neighbours are read too (one address, several offsets: a 32-bit index
# plus 1 may wrap, so the compiler cannot make it an offset).
unsigned64 = uint64 if on_gpu() else int
signed = int64 if on_gpu() else int  # an unsigned quotient made signed again
# The tiled kernel's small device functions are inlined into it on a GPU.
_INLINE = {"forceinline": True} if on_gpu() else {}

# The shared memory a block may declare statically: kernels.launch's, which
# decides when a launch opts in to more.
STATIC_SHARED_LIMIT_BYTES = launch.STATIC_SHARED_LIMIT_BYTES
# Past 48 KiB a block's shared memory must be dynamic, and the kernel must opt
# in to it; 227 KiB is the most a block may have on compute capability 9.0
# (H100, H200).
DYNAMIC_SHARED_LIMIT_BYTES = 227 * 1024
WARP_SIZE = 32
FLOAT32_BYTES = 4


# Which tile a block takes. A launch has one block per tile along x and per
# head along y (and per batch along z), and the GPU starts blocks in that
# order, x fastest. Without a mask every tile is the same work, and a head's
# tiles, started side by side, share its data in L2. Under a causal mask the
# work of a tile grows along the sequence (key tile j walks the queries from
# j on; query tile i the keys up to i), and in that order each head's
# heaviest tile starts 1/heads of the way later than the last head's: the
# last head's starts near the end and runs alone on the GPU after the rest
# has finished (64 tiles of 64 heads on 264 blocks at once: 8% over a
# perfect share of the work, by chapters.attention.causal_launch_tail; 16
# tiles, 30%). So under a mask the blocks take the tiles heaviest first,
# and the light ones fill the gaps at the end (0.2% and 3%).
#
# Heaviest first over every head at once, though, the blocks that run
# together come from every head, and each streams its head's other side (a
# key tile all the head's queries, a query tile all its keys): 64 heads of
# the fp32 backward at head dimension 128, N 4096, stream 384 MiB that way,
# where blockIdx's order kept a few heads' in L2. So the heads go in groups,
# each group's streamed data within a share of L2, heaviest first inside a
# group. A group of at least GROUP_MIN_BLOCKS blocks still ends with a short
# tail: its light tiles fill the gaps while the next group's heavy ones
# start, and the last group's light ones end the launch. Measured on an H200
# (benchmarks/causal_order.py, 2026-11-29): the groups took 0.93-0.98 of the
# time of blockIdx's order at 6 of 7 kernels and shapes, 0.70-1.0 of every
# head at once; version 4 at head dim 128, N 4096 took 1.03, in groups or
# not (so not L2; not understood).
L2_SHARE_BYTES = 24 * 1024 * 1024  # half the L2 of an H100 or H200 (50 MiB)
GROUP_MIN_BLOCKS = 256  # about a round of 2 blocks an SM on 132 SMs


def head_group(tiles: int, heads: int, tile_bytes: int) -> int:
    """How many heads take their tiles heaviest first together: as many as
    stream, together, at most L2_SHARE_BYTES (a head streams tiles x
    tile_bytes: its other side's bytes along one tile of the block's side),
    but at least enough for GROUP_MIN_BLOCKS blocks; at most `heads`."""
    # Each quotient of two unsigned 32-bit numbers, made a plain int again: a
    # 64-bit division is a subroutine on a GPU, and its registers made a
    # kernel at 255 spill. A head that streams more than the whole share is
    # a group of one, and its bytes are capped first so that they fit in 32
    # bits (4096 tiles of 1 MiB would wrap to 0).
    streamed = min(tiles * tile_bytes, L2_SHARE_BYTES + 1)
    by_cache = signed(unsigned(L2_SHARE_BYTES) // unsigned(streamed))
    by_tail = signed(unsigned(GROUP_MIN_BLOCKS + tiles - 1) // unsigned(tiles))
    return min(heads, max(1, by_cache, by_tail))


def heaviest_first(start: int, tiles: int, heads: int, heavy_last: bool, group: int) -> tuple:
    """(head, tile) of the block that starts `start`-th (0 first) among tiles x
    heads blocks: the heads in groups of `group` (the last group may be
    smaller), and in a group each head's tiles heaviest first, the group's
    tile of one weight together; heavy_last: the last tile is the heaviest
    (else the first). Every (head, tile) once."""
    first = signed(unsigned(start) // unsigned(group * tiles)) * group  # 32-bit, as above
    members = min(group, heads - first)
    rest = start - first * tiles
    order = signed(unsigned(rest) // unsigned(members))
    return first + rest - order * members, (tiles - 1 - order) if heavy_last else order


_head_group = cuda.jit(device=True, **_INLINE)(head_group)
_heaviest_first = cuda.jit(device=True, **_INLINE)(heaviest_first)


@cuda.jit(device=True, **_INLINE)
def block_place(causal, heavy_last, tile_bytes):
    """(batch x heads index, tile) of this block in a launch of (tiles, heads,
    batch) blocks (or (tiles, batch x heads)): blockIdx's own without a mask,
    ``heaviest_first`` in groups of ``head_group`` heads under a causal one
    (see above). tile_bytes: what the block streams of its head's other side
    per tile of its own side (``head_group``)."""
    tiles = cuda.gridDim.x
    bh = cuda.blockIdx.z * cuda.gridDim.y + cuda.blockIdx.y
    if causal:
        heads = cuda.gridDim.y * cuda.gridDim.z
        return _heaviest_first(bh * tiles + cuda.blockIdx.x, tiles, heads, heavy_last,
                               _head_group(tiles, heads, tile_bytes))
    return bh, cuda.blockIdx.x
