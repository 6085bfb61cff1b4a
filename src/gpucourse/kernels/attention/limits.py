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
from numba import uint32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)

# Inside the tiled kernel, shared-memory indices are unsigned on a GPU: Numba
# then skips the fix-up it applies to negative, Python-style indices, which
# costs integer instructions on every access of the inner loops. Numba's
# simulator runs the kernel as Python, where a plain int is the fast choice.
unsigned = uint32 if on_gpu() else int
unsigned64 = uint64 if on_gpu() else int  # for offsets into the whole q, k, v arrays
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
# every head's, and the light ones fill the gaps at the end (0.2% and 3%).


def heaviest_first(start: int, tiles: int, heads: int, heavy_last: bool) -> tuple:
    """(head, tile) of the block that starts `start`-th (0 first) among tiles x
    heads blocks, each head's tiles taken heaviest first and all heads' tile
    of one weight together; heavy_last: the last tile is the heaviest (else
    the first). Every (head, tile) once."""
    order = start // heads
    return start - order * heads, (tiles - 1 - order) if heavy_last else order


_heaviest_first = cuda.jit(device=True, **_INLINE)(heaviest_first)


@cuda.jit(device=True, **_INLINE)
def block_place(causal, heavy_last):
    """(batch x heads index, tile) of this block in a launch of (tiles, heads,
    batch) blocks (or (tiles, batch x heads)): blockIdx's own without a mask,
    ``heaviest_first`` under a causal one (see above)."""
    tiles = cuda.gridDim.x
    bh = cuda.blockIdx.z * cuda.gridDim.y + cuda.blockIdx.y
    if causal:
        return _heaviest_first(bh * tiles + cuda.blockIdx.x, tiles,
                               cuda.gridDim.y * cuda.gridDim.z, heavy_last)
    return bh, cuda.blockIdx.x
