"""Tensor parallelism on explicit shards, in one process: Megatron-LM's split
layers in NumPy.

A weight matrix split by columns lets each rank compute its own slice of the
output with no communication; one split by rows gives each rank a partial sum
that an all-reduce adds up. The functions here do both on explicit shards,
with the unsplit MLP and attention layers as references to compare against.
They need no processes, which is why the exercises use them; the same split
on real processes is in ``tensor_processes``.
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.checks import count as _count, finite_array as _array, whole_seed as _whole_seed


# -----------------------------------------------------------------------------
# Checking arguments


def _divides(what, size, world_size, size_name):
    if size % world_size != 0:
        raise ValueError(f"world_size must divide {size_name} ({size}) so that every rank gets "
                         f"an equal share of {what}, got world_size={world_size}")


# -----------------------------------------------------------------------------
# Tensor parallelism, one process at a time (numpy)
#
# Megatron-LM splits an MLP block Y = GeLU(X A), Z = Y B like this: A by
# columns, so that each rank computes its own slice of Y with no
# communication (GeLU acts element by element); B by rows, so that each rank
# multiplies its slice of Y by its rows of B and gets a *partial sum* of Z.
# One all-reduce adds the partial sums. The functions below do the same on
# explicit shards in one process, which is what the exercises use.


def shard_columns(weight, world_size):
    """Split a (in, out) weight into `world_size` equal blocks of columns."""
    w = _array("weight", weight, ndim=2)
    world_size = _count("world_size", world_size)
    _divides("the columns", w.shape[1], world_size, "the number of columns")
    return np.split(w, world_size, axis=1)


def shard_rows(weight, world_size):
    """Split a (in, out) weight into `world_size` equal blocks of rows."""
    w = _array("weight", weight, ndim=2)
    world_size = _count("world_size", world_size)
    _divides("the rows", w.shape[0], world_size, "the number of rows")
    return np.split(w, world_size, axis=0)


def column_parallel_linear(x, weight, bias, world_size):
    """Each rank's output of a column-parallel linear layer, as a list.

    Rank r holds columns block r of `weight` (and of `bias`) and the whole
    input `x`; it computes its own slice of the output, with no communication.
    Concatenating the slices along the last axis gives ``x @ weight + bias``.
    """
    x = _array("x", x, min_ndim=1)
    w_shards = shard_columns(weight, world_size)
    b = _array("bias", bias, ndim=1)
    if b.shape[0] != np.shape(weight)[1]:
        raise ValueError(f"bias must have one entry per column of weight ({np.shape(weight)[1]}), "
                         f"got {b.shape[0]}")
    if x.shape[-1] != np.shape(weight)[0]:
        raise ValueError(f"x's last dimension ({x.shape[-1]}) must equal weight's rows "
                         f"({np.shape(weight)[0]})")
    b_shards = np.split(b, len(w_shards))
    return [x @ w + bb for w, bb in zip(w_shards, b_shards)]


def row_parallel_linear(x_shards, weight_shards, bias):
    """The output of a row-parallel linear layer from its per-rank shards.

    Rank r holds input slice r (the last axis of x split in equal blocks) and
    rows block r of the weight; ``x_shards[r] @ weight_shards[r]`` is a partial
    sum of the output, and the all-reduce (here a plain sum) adds them. The
    bias is added once, after the sum.
    """
    if not isinstance(x_shards, (list, tuple)) or not isinstance(weight_shards, (list, tuple)):
        raise ValueError("x_shards and weight_shards must be lists of arrays, one per rank")
    if len(x_shards) != len(weight_shards) or len(x_shards) == 0:
        raise ValueError(f"x_shards and weight_shards must hold one array per rank, got "
                         f"{len(x_shards)} and {len(weight_shards)}")
    partials = []
    for rank, (xs, ws) in enumerate(zip(x_shards, weight_shards)):
        xs = _array(f"x_shards[{rank}]", xs, min_ndim=1)
        ws = _array(f"weight_shards[{rank}]", ws, ndim=2)
        if xs.shape[-1] != ws.shape[0]:
            raise ValueError(f"x_shards[{rank}]'s last dimension ({xs.shape[-1]}) must equal "
                             f"weight_shards[{rank}]'s rows ({ws.shape[0]})")
        partials.append(xs @ ws)
    b = _array("bias", bias, ndim=1)
    if b.shape[0] != partials[0].shape[-1]:
        raise ValueError(f"bias must have one entry per output column ({partials[0].shape[-1]}), "
                         f"got {b.shape[0]}")
    return sum(partials) + b


def gelu(x):
    """The tanh approximation of GeLU used by GPT-2 and Megatron-LM."""
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def init_mlp_weights(hidden, ffn_hidden=None, seed=0):
    """Random float64 weights of an MLP block hidden -> ffn_hidden -> hidden.

    ffn_hidden defaults to 4 * hidden, as in GPT and Megatron-LM.
    """
    hidden = _count("hidden", hidden)
    ffn_hidden = 4 * hidden if ffn_hidden is None else _count("ffn_hidden", ffn_hidden)
    rng = np.random.default_rng(_whole_seed(seed))
    return {"w1": rng.normal(0, 1 / math.sqrt(hidden), (hidden, ffn_hidden)),
            "b1": rng.normal(0, 0.1, ffn_hidden),
            "w2": rng.normal(0, 1 / math.sqrt(ffn_hidden), (ffn_hidden, hidden)),
            "b2": rng.normal(0, 0.1, hidden)}


def init_attention_weights(hidden, seed=0):
    """Random float64 weights of a self-attention block: the query, key, value
    and output projections, each (hidden, hidden), and their biases."""
    hidden = _count("hidden", hidden)
    rng = np.random.default_rng(_whole_seed(seed))
    weights = {}
    for name in ("q", "k", "v", "o"):
        weights[f"w{name}"] = rng.normal(0, 1 / math.sqrt(hidden), (hidden, hidden))
        weights[f"b{name}"] = rng.normal(0, 0.1, hidden)
    return weights


def mlp_reference(x, weights):
    """The unsplit MLP block, GeLU(x W1 + b1) W2 + b2, in float64."""
    x = _array("x", x, min_ndim=1)
    return gelu(x @ weights["w1"] + weights["b1"]) @ weights["w2"] + weights["b2"]


def attention_reference(x, weights, heads, causal=True):
    """Unsplit multi-head self-attention of x (batch, seq, hidden), in float64.

    Head h uses columns h*d to (h+1)*d of the query, key and value
    projections, with d = hidden / heads.
    """
    x = _array("x", x, ndim=3)
    heads = _count("heads", heads)
    hidden = x.shape[-1]
    if hidden % heads:
        raise ValueError(f"heads must divide hidden ({hidden}), got heads={heads}")
    return _attention_numpy(x, weights["wq"], weights["bq"], weights["wk"], weights["bk"],
                            weights["wv"], weights["bv"], heads, causal) @ weights["wo"] + weights["bo"]


def _attention_numpy(x, wq, bq, wk, bk, wv, bv, heads, causal):
    """softmax(q k^T / sqrt(d)) v for each head; returns (batch, seq, heads * d)."""
    batch, seq, _ = x.shape
    d = wq.shape[1] // heads

    def split_heads(t):  # (batch, seq, heads * d) -> (batch, heads, seq, d)
        return t.reshape(batch, seq, heads, d).transpose(0, 2, 1, 3)

    q, k, v = (split_heads(x @ w + b) for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if causal:
        scores = np.where(np.tril(np.ones((seq, seq), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    return (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, heads * d)
