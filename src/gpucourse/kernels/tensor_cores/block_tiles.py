"""What the tensor-core GEMMs share: the checks of their operands.

``hgemm`` and ``tf32gemm`` take the same kind of input, two 2-D numpy arrays
of one element type whose inner dimensions match, and refuse the rest the
same way; the check lives here, once, beside the GEMMs' common block-tile
structure.
"""

from __future__ import annotations

import numpy as np

def _check_operands(a, b, dtype):
    """a and b as numpy arrays, with (M, N, K), if they are 2-D arrays of
    `dtype` whose inner dimensions match and are all positive; else
    ValueError naming what was wrong."""
    a, b = np.asarray(a), np.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.dtype != dtype or x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D {np.dtype(dtype).name} array, got {x.dtype} "
                             f"of shape {x.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k2} x {n}")
    if not (m and n and k):
        raise ValueError(f"M, N and K must be positive; got {m}, {n} and {k}")
    return a, b, (m, n, k)
