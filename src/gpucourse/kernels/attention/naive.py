"""The naive pipeline: three kernels that keep the whole score matrix in memory.

``naive_attention`` computes the scores S = s Q K^T (one thread per score),
the softmax of each row in place (one thread per row) and P V (one thread per
output element), each in a kernel of its own, with the seq x key_seq matrix
in device memory between them. It is the version that FlashAttention
improves on: it moves about 4 seq^2 floats per head to and from memory
(``cost.naive_hbm_bytes``) and runs out of memory at lengths the tiled
kernel handles easily. On an H100 (batch 4, 16 heads, head_dim 64) it took
20.2 ms at seq 1024 and 338 ms at seq 4096, where the tiled kernel on the
CUDA cores took 0.52 and 7.43 ms (benchmarks/results/attention-h100-2026-11-26.json,
rows naive_numba and flash_cuda_cores).
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.device import cuda
from gpucourse.kernels.attention.arguments import _check_flag, _check_qkv, _check_scale
from gpucourse.kernels.launch import empty_like as _empty_like, from_kernel as _from_kernel
from gpucourse.kernels.launch import to_kernel as _to_kernel

NAIVE_TILE = 16  # threads per block side for the scores and P V kernels
NAIVE_ROWS_PER_BLOCK = 64  # threads per block for the softmax, one per row


@cuda.jit(device=True)
def _batch_and_head(block, heads):
    """(b, h) of the head a block works on: the grid's last dimension counts
    batch x heads, batch-major, one head a block row."""
    return block // heads, block % heads


@cuda.jit
def _scores_kernel(q, k, scores, scale, causal):
    # One thread per score: scores[b, h, i, j] = scale * q[b, h, i] . k[b, h, j].
    j, i = cuda.grid(2)
    b, h = _batch_and_head(cuda.blockIdx.z, q.shape[1])
    if i >= q.shape[2] or j >= k.shape[2]:
        return
    if causal and j > i:
        scores[b, h, i, j] = -math.inf
        return
    total = 0.0
    for d in range(q.shape[3]):
        total += q[b, h, i, d] * k[b, h, j, d]
    scores[b, h, i, j] = scale * total


@cuda.jit
def _softmax_kernel(scores, lse):
    # One thread per row, in place: three passes (max, sum, normalize).
    i = cuda.grid(1)
    b, h = _batch_and_head(cuda.blockIdx.y, scores.shape[1])
    keys = scores.shape[3]
    if i >= scores.shape[2]:
        return
    row_max = -math.inf
    for j in range(keys):
        row_max = max(row_max, scores[b, h, i, j])
    row_sum = 0.0
    for j in range(keys):
        e = math.exp(scores[b, h, i, j] - row_max)
        scores[b, h, i, j] = e
        row_sum += e
    for j in range(keys):
        scores[b, h, i, j] = scores[b, h, i, j] / row_sum
    lse[b, h, i] = row_max + math.log(row_sum)


@cuda.jit
def _pv_kernel(p, v, out):
    # One thread per output element: out[b, h, i, c] = sum_j p[b, h, i, j] v[b, h, j, c].
    # The same shape as _scores_kernel (a deliberate variant: a row of P
    # against a column of V, no scale and no mask).
    c, i = cuda.grid(2)
    b, h = _batch_and_head(cuda.blockIdx.z, v.shape[1])
    if i >= p.shape[2] or c >= v.shape[3]:
        return
    total = 0.0
    for j in range(v.shape[2]):
        total += p[b, h, i, j] * v[b, h, j, c]
    out[b, h, i, c] = total


def naive_attention(q, k, v, *, causal=False, scale=None, return_lse=False):
    """Attention as three kernels that write the (seq x key_seq) score matrix to memory.

    Same arguments, validation and return kinds as ``flash_attention``; any
    head_dim >= 1 is accepted. It needs batch * heads * seq * key_seq * 4 extra
    bytes of device memory for the scores (allocated through torch for torch
    inputs, so that torch's memory statistics see it).
    """
    kind, (batch, heads, seq, head_dim), key_seq = _check_qkv(q, k, v, head_dims=None)
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    s = _check_scale(scale, head_dim)
    qd, kd, vd = (_to_kernel(x, kind) for x in (q, k, v))
    _, scores = _empty_like(kind, q, (batch, heads, seq, key_seq))
    lse, lse_d = _empty_like(kind, q, (batch, heads, seq))
    out, out_d = _empty_like(kind, q, (batch, heads, seq, head_dim))
    tiles = (seq + NAIVE_TILE - 1) // NAIVE_TILE
    key_tiles = (key_seq + NAIVE_TILE - 1) // NAIVE_TILE
    _scores_kernel[(key_tiles, tiles, batch * heads), (NAIVE_TILE, NAIVE_TILE)](
        qd, kd, scores, np.float32(s), causal)
    rows = (seq + NAIVE_ROWS_PER_BLOCK - 1) // NAIVE_ROWS_PER_BLOCK
    _softmax_kernel[(rows, batch * heads), NAIVE_ROWS_PER_BLOCK](scores, lse_d)
    col_tiles = (head_dim + NAIVE_TILE - 1) // NAIVE_TILE
    _pv_kernel[(col_tiles, tiles, batch * heads), (NAIVE_TILE, NAIVE_TILE)](scores, vd, out_d)
    del scores
    if return_lse:
        return _from_kernel(out, kind), _from_kernel(lse, kind)
    return _from_kernel(out, kind)
