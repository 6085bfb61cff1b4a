"""What the attention kernels' shared-memory tiles have in common.

Both forward kernels keep their Q and K tiles in shared memory as rows padded
past head_dim, and both move their tiles to dynamic shared memory once they
outgrow the 48 KiB a block may declare statically: ``PaddedTiles`` holds
those rules once, and each tile shape (``config.FlashConfig``,
``tensor_cores.TensorCoreConfig``) says only how much it pads and why. The
CUDA-core forward kernel and the backward's versions 3 and 4 also read runs
of neighbouring floats out of their tiles into registers, four at a time:
``float4_run_loader`` builds that device function for a run's length. It is
a module of its own so that the tile shapes and the kernels can build on it
without importing each other.
"""

from __future__ import annotations

from functools import cached_property

from gpucourse.device import cuda
from gpucourse.kernels._vector_load import load_float4_flat
from gpucourse.kernels.attention.limits import STATIC_SHARED_LIMIT_BYTES, _INLINE, unsigned


class PaddedTiles:
    """The shared rows of Q and K and the dynamic-shared-memory switch of a
    tile shape: a base for frozen dataclasses that have ``head_dim`` and
    ``shared_bytes`` and say, as the class attribute ``ROW_PADDING``, how many
    floats pad each row of Q and K. (It declares no fields and no
    ``__slots__``: the dataclass's fields, equality, hashing and repr are its
    own, and ``cached_property`` keeps its values in the instance's
    ``__dict__``.)"""

    ROW_PADDING = 0  # floats past head_dim in a row of the Q and K tiles

    @property
    def q_row(self) -> int:
        return self.head_dim + self.ROW_PADDING

    @property
    def k_row(self) -> int:
        return self.head_dim + self.ROW_PADDING

    @cached_property
    def dynamic_shared(self) -> bool:
        """Tiles past the 48 KiB a block may declare statically live in
        dynamic shared memory, which the launch sizes and opts in to."""
        return self.shared_bytes > STATIC_SHARED_LIMIT_BYTES


def float4_run_loader(length: int):
    """A device function ``load_run(dst, tile, at)``: dst[0 .. length] = the
    ``length`` neighbouring floats of the flat shared tile from ``at``, four
    per 128-bit load (``length`` a multiple of four). The length is captured
    here as a constant, so that the loop unrolls and ``dst`` (a local array)
    stays in registers. The forward's value_step reads a key's probabilities
    with it, the backward's dkdv_row and dq_row their rows of P and dS."""
    LOADS = length // 4

    @cuda.jit(device=True, **_INLINE)
    def load_run(dst, tile, at):
        for a in range(LOADS):
            x0, x1, x2, x3 = load_float4_flat(tile, at + unsigned(4 * a))
            dst[4 * a] = x0
            dst[4 * a + 1] = x1
            dst[4 * a + 2] = x2
            dst[4 * a + 3] = x3
    return load_run
