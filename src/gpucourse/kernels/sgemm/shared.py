"""Level 3: a block stages 32 x 32 tiles of A and B in shared memory and every
thread reads its 32 values from the on-chip copy.

What it adds over level 2: each value fetched from global memory is used 32
times, so global traffic falls 32-fold, at the price of two barriers per tile.
Measured on the H100 at 4096^3 (benchmarks/results/sgemm-h100-2026-11-22.json):
8.81 TFLOP/s, 17.0% of cuBLAS (level 2: 1.98, 3.8%). Shared memory, not
arithmetic, is now the limit: two shared loads per multiply-add.

The tile size is captured by a small factory, because a shared array's shape
must be a compile-time constant.
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.config import ZERO, _u
from numba import float32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)


# -----------------------------------------------------------------------------
# Level 3: shared-memory tiles.
# Levels 1-2 read every element of A N times and of B M times from global
# memory. Here a 32 x 32 block first copies a 32 x 32 tile of A and one of B
# into shared memory (one element per thread), waits at a barrier, and then
# every thread reads the 32 values it needs from the on-chip copy. Each value
# fetched from global memory is used 32 times: global traffic falls 32-fold.


def _make_shared_kernel(tile: int):
    tile_elements = tile * tile  # a literal size for cuda.shared.array
    T = _u(tile)

    @cuda.jit
    def sgemm_shared(a, b, c):
        a_tile = cuda.shared.array(tile_elements, float32)
        b_tile = cuda.shared.array(tile_elements, float32)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tx = uint64(cuda.threadIdx.x)  # column within the tile
        ty = uint64(cuda.threadIdx.y)  # row within the tile
        row = uint64(cuda.blockIdx.y) * T + ty
        col = uint64(cuda.blockIdx.x) * T + tx
        acc = float32(0.0)
        for k0 in range(ZERO, k, T):
            # Each thread loads one element of each tile; zeros past the edges.
            a_tile[ty * T + tx] = a[row, k0 + tx] if row < m and k0 + tx < k else float32(0.0)
            b_tile[ty * T + tx] = b[k0 + ty, col] if k0 + ty < k and col < n else float32(0.0)
            cuda.syncthreads()
            for i in range(T):
                acc += a_tile[ty * T + i] * b_tile[i * T + tx]
            cuda.syncthreads()  # nobody overwrites a tile while others still read it
        if row < m and col < n:
            c[row, col] = acc

    return sgemm_shared
