"""The algorithm in float64 numpy: the yardstick every kernel is tested against.

``reference_attention`` computes softmax(s Q K^T) V the plain way, the whole
score matrix at once. ``online_softmax`` and ``online_softmax_step`` show the
idea FlashAttention rests on (Milakov and Gimelshein 2018): a running maximum
and a running sum, rescaled whenever the maximum grows, so that a row can be
read a block at a time. ``tiled_attention`` is the tiled kernel's loop order
written in numpy, and ``causal_key_tiles`` counts the key tiles that a causal
mask lets a query tile skip. ``reference_attention_backward`` computes the
gradients from the whole matrix of probabilities.

These models are slow and exact. They are the code to read before the
kernels, and what the tests compare the kernels with; none of them touches a
GPU.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from gpucourse.kernels.attention.arguments import (_check_cross_shapes, _check_flag,
                                                   _check_scale, _count)


def reference_attention(q, k, v, causal=False, scale=None, return_lse=False):
    """softmax(scale * q k^T) v in float64 numpy, with an optional causal mask.

    q: shape (..., seq, head_dim); k and v: one shape (..., key_seq, head_dim),
    q's but for the sequence length (cross-attention when key_seq differs);
    any real dtype (converted to float64). The causal mask is PyTorch's
    ``is_causal``: query i sees keys 0..i, aligned at the top left when the
    lengths differ. Returns a float64 array of q's shape, and with
    ``return_lse`` also the log-sum-exp of each row of scaled scores, of shape
    (..., seq).
    """
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    arrays = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        a = np.asarray(x)
        if a.dtype.kind not in "iuf":
            raise ValueError(f"{name} must hold real numbers, got dtype {a.dtype}")
        if a.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., seq, head_dim), "
                             f"got shape {a.shape}")
        arrays.append(a.astype(np.float64))
    q64, k64, v64 = arrays
    _check_cross_shapes(q64.shape, k64.shape, v64.shape)
    seq, head_dim = q64.shape[-2:]
    s = _check_scale(scale, head_dim)
    scores = s * (q64 @ np.swapaxes(k64, -1, -2))
    if causal:
        # Query i sees keys 0..i: everything above the diagonal is masked
        # (with more keys than queries, the diagonal starts at the top left).
        scores = np.where(np.tri(seq, k64.shape[-2], dtype=bool), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - row_max)
    row_sum = weights.sum(axis=-1, keepdims=True)
    out = (weights / row_sum) @ v64
    if return_lse:
        return out, (row_max + np.log(row_sum))[..., 0]
    return out


# -----------------------------------------------------------------------------
# The algorithm in numpy: online softmax, one tile step, the causal tile skip


def online_softmax(x, block=4):
    """softmax(x) along the last axis, reading x in blocks of ``block`` columns.

    One pass keeps a running maximum m and a running sum l = sum exp(x - m);
    when a block raises the maximum from m to m', the sum so far is multiplied
    by exp(m - m'), which makes it exactly the sum it would have been with m'
    from the start. A second pass writes exp(x - m) / l. Computed in float64.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have at least one element along its last axis, "
                         f"got shape {x.shape}")
    block = _count("block", block)
    row_max = np.full(x.shape[:-1], -np.inf)
    row_sum = np.zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block):
        chunk = x[..., start:start + block]
        new_max = np.maximum(row_max, chunk.max(axis=-1))
        shift = np.where(np.isneginf(new_max), 0.0, new_max)
        row_sum = row_sum * np.exp(row_max - shift) + np.exp(chunk - shift[..., None]).sum(axis=-1)
        row_max = new_max
    return np.exp(x - row_max[..., None]) / row_sum[..., None]


def online_softmax_step(row_max, row_sum, acc, scores, values):
    """One key/value tile of the tiled kernel, for a tile of query rows (numpy).

    row_max, row_sum: shape (rows,), the statistics so far (start at -inf, 0).
    acc: shape (rows, head_dim), the unnormalized output so far (starts at 0).
    scores: shape (rows, cols), this tile's scaled scores; -inf where masked.
    values: shape (cols, head_dim), this tile's rows of V.
    Returns the new (row_max, row_sum, acc); the output is acc / row_sum once
    every tile has been seen.
    """
    row_max, row_sum = np.asarray(row_max, float), np.asarray(row_sum, float)
    acc, scores, values = (np.asarray(a, float) for a in (acc, scores, values))
    if scores.ndim != 2 or values.ndim != 2 or acc.ndim != 2:
        raise ValueError("scores, values and acc must be 2-D (rows x cols, cols x head_dim, "
                         "rows x head_dim)")
    rows, cols = scores.shape
    if row_max.shape != (rows,) or row_sum.shape != (rows,):
        raise ValueError(f"row_max and row_sum must have shape ({rows},) to match scores, "
                         f"got {row_max.shape} and {row_sum.shape}")
    if values.shape[0] != cols or acc.shape != (rows, values.shape[1]):
        raise ValueError(f"values must have {cols} rows and acc shape ({rows}, head_dim), "
                         f"got values {values.shape} and acc {acc.shape}")
    new_max = np.maximum(row_max, scores.max(axis=1))
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # a row with nothing seen yet
    alpha = np.exp(row_max - shift)
    p = np.exp(scores - shift[:, None])
    return new_max, row_sum * alpha + p.sum(axis=1), acc * alpha[:, None] + p @ values


def causal_key_tiles(query_tile, block_rows, block_cols, seq):
    """How many key tiles query tile ``query_tile`` visits under a causal mask.

    Its last row is min((query_tile + 1) * block_rows, seq) - 1; key tiles that
    start after that row hold only future keys, so they are skipped.
    """
    block_rows, block_cols, seq = (_count(n, x) for n, x in
                                   (("block_rows", block_rows), ("block_cols", block_cols),
                                    ("seq", seq)))
    if isinstance(query_tile, (bool, np.bool_)) or not isinstance(query_tile, numbers.Integral) \
            or not 0 <= query_tile < -(-seq // block_rows):
        raise ValueError(f"query_tile must be a whole number in [0, {-(-seq // block_rows)}), "
                         f"got {query_tile!r}")
    last_row = min((query_tile + 1) * block_rows, seq) - 1
    return last_row // block_cols + 1


def tiled_attention(q, k, v, *, causal=False, scale=None, block_rows=64, block_cols=32,
                    return_lse=False):
    """The tiled kernel's algorithm in float64 numpy: query tiles outer, key
    tiles inner, ``online_softmax_step`` per tile, one division at the end.

    q, k, v: as ``reference_attention`` takes them. A model to read and to
    test against, not a fast path.
    """
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    block_rows, block_cols = _count("block_rows", block_rows), _count("block_cols", block_cols)
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    _check_cross_shapes(q64.shape, k64.shape, v64.shape)
    seq, head_dim = q64.shape[-2:]
    key_seq = k64.shape[-2]
    key_tiles = -(-key_seq // block_cols)
    s = _check_scale(scale, head_dim)
    out = np.empty_like(q64)
    lse = np.empty(q64.shape[:-1])
    for index in np.ndindex(q64.shape[:-2]):
        for qt in range(-(-seq // block_rows)):
            rows = np.arange(qt * block_rows, min((qt + 1) * block_rows, seq))
            row_max = np.full(len(rows), -np.inf)
            row_sum = np.zeros(len(rows))
            acc = np.zeros((len(rows), head_dim))
            n_tiles = (min(causal_key_tiles(qt, block_rows, block_cols, seq), key_tiles)
                       if causal else key_tiles)
            for kt in range(n_tiles):
                keys = np.arange(kt * block_cols, min((kt + 1) * block_cols, key_seq))
                scores = s * q64[index][rows] @ k64[index][keys].T
                if causal:
                    scores = np.where(keys[None, :] > rows[:, None], -np.inf, scores)
                row_max, row_sum, acc = online_softmax_step(row_max, row_sum, acc, scores,
                                                            v64[index][keys])
            out[index][rows] = acc / row_sum[:, None]
            lse[index][rows] = row_max + np.log(row_sum)
    return (out, lse) if return_lse else out


# -----------------------------------------------------------------------------
# The backward pass in numpy


def reference_attention_backward(q, k, v, dout, *, causal=False, scale=None):
    """dQ, dK and dV of softmax(scale q k^T) v in float64 numpy, from the full
    matrix of probabilities (the naive backward pass). Arrays of shape
    (..., seq, head_dim) for q and dout, (..., key_seq, head_dim) for k and v;
    the causal mask as ``attention.reference_attention``'s."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    _check_cross_shapes(q.shape, k.shape, v.shape)
    if dout.shape != q.shape:
        raise ValueError(f"dout must have q's shape {q.shape}, got {dout.shape}")
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = s * q @ np.swapaxes(k, -1, -2)
    if causal:
        scores = np.where(np.tri(q.shape[-2], k.shape[-2], dtype=bool), scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ dout
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = s * ds @ k
    dk = s * np.swapaxes(ds, -1, -2) @ q
    return dq, dk, dv
