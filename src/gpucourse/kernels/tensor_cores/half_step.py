"""One tile step of FlashAttention-2 as the half-precision kernels compute it, in NumPy.

Week 9's ``online_softmax_step`` (``gpucourse.kernels.attention.reference``)
works in float64. On the tensor cores the statistics and the accumulator
stay in float32, but the probabilities P are rounded to float16 before the P V
product, where they meet the float16 values. :func:`half_online_softmax_step`
does exactly that, so that the error this rounding costs can be measured
against float64 and a student's step checked against it (week 11's
exercise). It lives in the package, not in the grader, because a grader
helper is code a student's answer may run; the course's package is not.
"""

from __future__ import annotations

import numpy as np


def half_online_softmax_step(row_max, row_sum, acc, scores, values):
    """One key/value tile of the online softmax as the half-precision kernels do it.

    row_max, row_sum: shape (rows,); acc: (rows, head_dim); scores: (rows,
    cols), -inf where masked; all taken as float32. values: (cols, head_dim),
    float16. The new maximum, the rescaling and P = exp(scores - max) are
    float32; the sum adds the unrounded P; P is rounded to float16 for the
    P values product, whose products are exact and whose sum is rounded once
    to float32 (the tensor cores sum in at least float32). A row that has seen
    only -inf subtracts 0. Returns float32 (row_max, row_sum, acc). Raises
    ValueError when values is not float16 or the shapes do not match.
    """
    values = np.asarray(values)
    if values.dtype != np.float16 or values.ndim != 2:
        raise ValueError(f"values must be a 2-D float16 array, got {values.dtype} with shape "
                         f"{values.shape}")
    row_max, row_sum, acc, scores = (np.asarray(x, dtype=np.float32)
                                     for x in (row_max, row_sum, acc, scores))
    rows, cols = scores.shape if scores.ndim == 2 else (-1, -1)
    if cols != values.shape[0] or row_max.shape != (rows,) or row_sum.shape != (rows,) \
            or acc.shape != (rows, values.shape[1]):
        raise ValueError(f"scores must be rows x cols with cols = values' {values.shape[0]} "
                         f"rows, row_max and row_sum (rows,), acc (rows, {values.shape[1]}); "
                         f"got scores {scores.shape}, row_max {row_max.shape}, row_sum "
                         f"{row_sum.shape}, acc {acc.shape}")
    new_max = np.maximum(row_max, scores.max(axis=1))
    shift = np.where(np.isneginf(new_max), np.float32(0), new_max)
    alpha = np.exp(row_max - shift)
    p = np.exp(scores - shift[:, None])
    pv = p.astype(np.float16).astype(np.float64) @ values.astype(np.float64)
    return (new_max, alpha * row_sum + p.sum(axis=1, dtype=np.float32),
            alpha[:, None] * acc + pv.astype(np.float32))
