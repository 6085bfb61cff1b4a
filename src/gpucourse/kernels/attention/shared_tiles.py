"""What the attention kernels' shared-memory tiles have in common.

Both forward kernels keep their Q and K tiles in shared memory as rows padded
past head_dim, and both move their tiles to dynamic shared memory once they
outgrow the 48 KiB a block may declare statically: ``PaddedTiles`` holds
those rules once, and each tile shape (``config.FlashConfig``,
``tensor_cores.TensorCoreConfig``) says only how much it pads and why. It is
a module of its own so that both can build on it without importing each
other.
"""

from __future__ import annotations

from functools import cached_property

from gpucourse.kernels.attention.limits import STATIC_SHARED_LIMIT_BYTES


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
