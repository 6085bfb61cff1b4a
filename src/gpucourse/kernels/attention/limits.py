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

from gpucourse.device import on_gpu
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
