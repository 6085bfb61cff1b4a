"""Tensor parallelism over real processes: the Megatron-LM split with real
all-reduces over ``torch.distributed``.

Each rank builds its shard of the MLP and attention layers as torch modules,
runs the forward and the backward pass, and the all-reduces join the partial
sums; the result must equal the unsplit layer's output and gradients. This
module is separate from ``tensor`` because it needs torch and processes
(imported inside the functions), where the NumPy version needs neither. It
also counts the bytes those all-reduces send.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from gpucourse.checks import count as _count, whole_seed as _whole_seed
from gpucourse.parallelism.tensor import (
    _divides, init_mlp_weights, init_attention_weights, mlp_reference, attention_reference,
)


# -----------------------------------------------------------------------------
# Tensor parallelism over real processes (torch.distributed)
#
# Megatron-LM writes the communication as two conjugate operators: f is the
# identity in the forward pass and an all-reduce in the backward pass (it sits
# before a column-parallel layer, whose input gradient is a partial sum on
# each rank); g is an all-reduce in the forward pass and the identity in the
# backward pass (it sits after a row-parallel layer). One MLP block or one
# attention block thus costs one all-reduce forward and one backward; a
# transformer layer, which has both, costs two and two.

# All-reduces per transformer layer (attention + MLP) with tensor parallelism,
# as counted in Shoeybi et al. (2019), Figure 4.
MEGATRON_ALLREDUCES_PER_LAYER = {"forward": 2, "backward": 2}


# The 8.3-billion-parameter GPT-2 model of Shoeybi et al. (2019), as set up
# for the paper's scaling study (Table 1): hidden size 3072, 32 heads, 72
# layers, 8-way tensor ("model") parallelism, 512 GPUs with 64-way data
# parallelism; sequences of 1024 tokens. The 8.3B model of the paper's
# language-modelling runs (Table 2) is the same but with 24 heads of 128.
MEGATRON_8B = {"hidden": 3072, "heads": 32, "layers": 72, "seq": 1024, "tensor_parallel": 8}


def tensor_parallel_allreduce_bytes(batch, seq, hidden, bytes_per_element=2) -> int:
    """Bytes one tensor-parallel all-reduce carries: one activation tensor of
    batch * seq * hidden numbers (bytes_per_element = 2 for fp16/bf16)."""
    return (_count("batch", batch) * _count("seq", seq) * _count("hidden", hidden)
            * _count("bytes_per_element", bytes_per_element))


@cache
def _torch_layers():
    """Define the torch parts on first use, so that importing this module
    does not import torch."""
    import torch
    import torch.distributed as dist

    log = []  # one (phase, bytes) entry per all-reduce, in this process

    def all_reduce(tensor, phase):
        log.append((phase, tensor.numel() * tensor.element_size()))
        dist.all_reduce(tensor)
        return tensor

    class CopyToTensorParallel(torch.autograd.Function):
        """Megatron's f: identity forward, all-reduce of the gradient backward."""

        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return all_reduce(grad.clone(), "backward")

    class ReduceFromTensorParallel(torch.autograd.Function):
        """Megatron's g: all-reduce forward, identity backward."""

        @staticmethod
        def forward(ctx, x):
            return all_reduce(x.clone(), "forward")

        @staticmethod
        def backward(ctx, grad):
            return grad

    def column_parallel(x, weight_shard, bias_shard):
        return CopyToTensorParallel.apply(x) @ weight_shard + bias_shard

    def row_parallel(x_shard, weight_shard, bias):
        return ReduceFromTensorParallel.apply(x_shard @ weight_shard) + bias

    def mlp(x, p):
        hidden = torch.nn.functional.gelu(column_parallel(x, p["w1"], p["b1"]), approximate="tanh")
        return row_parallel(hidden, p["w2"], p["b2"])

    def attention(x, p, local_heads, causal):
        # The query, key and value projections are column-parallel: this rank
        # holds the columns of its own heads, and attends with them alone.
        x = CopyToTensorParallel.apply(x)
        batch, seq, _ = x.shape
        d = p["wq"].shape[1] // local_heads

        def split_heads(t):
            return t.reshape(batch, seq, local_heads, d).transpose(1, 2)

        q, k, v = (split_heads(x @ p[f"w{n}"] + p[f"b{n}"]) for n in "qkv")
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            mask = torch.ones(seq, seq, dtype=torch.bool).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        context = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, seq, local_heads * d)
        # The output projection is row-parallel: its input is already split by head.
        return row_parallel(context, p["wo"], p["bo"])

    return torch, log, mlp, attention


def tensor_parallel_shards(weights, rank, world_size, heads=None):
    """The slices of full-model `weights` that rank `rank` holds.

    MLP weights (w1, b1, w2, b2): w1 and b1 by columns, w2 by rows, b2 whole.
    Attention weights (wq, bq, ..., wo, bo): the query, key and value
    projections by columns (whole heads), wo by rows, bo whole.
    """
    world_size = _count("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be a whole number in [0, world_size), got {rank!r}")
    if "w1" in weights:
        _divides("the MLP's hidden units", weights["w1"].shape[1], world_size, "the ffn size")
        cols = np.split(np.arange(weights["w1"].shape[1]), world_size)[rank]
        return {"w1": weights["w1"][:, cols], "b1": weights["b1"][cols],
                "w2": weights["w2"][cols, :], "b2": weights["b2"]}
    if heads is None:
        raise ValueError("heads must be given for attention weights")
    hidden = weights["wq"].shape[1]
    if heads % world_size:
        raise ValueError(f"world_size must divide heads ({heads}) so that every rank gets whole "
                         f"heads, got world_size={world_size}")
    cols = np.split(np.arange(hidden), world_size)[rank]
    shard = {f"{k}{n}": weights[f"{k}{n}"][..., cols] for n in "qkv" for k in "wb"}
    shard["wo"] = weights["wo"][cols, :]
    shard["bo"] = weights["bo"]
    return shard


def _tensor_parallel_worker(rank, world_size, x, upstream, mlp_weights, attention_weights,
                            heads, causal):
    """Run both blocks, forward and backward, on this rank's shards."""
    torch, log, mlp, attention = _torch_layers()
    log.clear()
    results = {}
    for block, weights in (("mlp", mlp_weights), ("attention", attention_weights)):
        shard = tensor_parallel_shards(weights, rank, world_size, heads)
        params = {name: torch.tensor(value, requires_grad=True) for name, value in shard.items()}
        x_t = torch.tensor(x, requires_grad=True)
        before = len(log)
        if block == "mlp":
            out = mlp(x_t, params)
        else:
            out = attention(x_t, params, heads // world_size, causal)
        forward_log = log[before:]
        # The loss sum(out * upstream) makes `upstream` the gradient flowing into out.
        (out * torch.tensor(upstream)).sum().backward()
        backward_log = log[before + len(forward_log):]
        results[block] = {
            "output": out.detach().numpy(),
            "grad_x": x_t.grad.numpy(),
            "grad_shards": {name: p.grad.numpy() for name, p in params.items()},
            "allreduces": {"forward": len(forward_log), "backward": len(backward_log)},
            "allreduce_bytes": {"forward": sum(b for _, b in forward_log),
                                "backward": sum(b for _, b in backward_log)},
        }
    return results


@dataclass
class TensorParallelRun:
    """What a tensor-parallel run returns: the inputs, the full weights, and
    for each block ("mlp", "attention") each rank's results (`ranks[block][r]`
    holds output, grad_x, grad_shards, allreduces and allreduce_bytes)."""

    world_size: int
    heads: int
    causal: bool
    x: np.ndarray
    upstream: np.ndarray
    weights: dict
    ranks: dict

    def allreduces_per_layer(self) -> dict:
        """All-reduces of one transformer layer (attention + MLP), on rank 0."""
        return {phase: sum(self.ranks[b][0]["allreduces"][phase] for b in ("mlp", "attention"))
                for phase in ("forward", "backward")}

    def max_abs_error(self) -> float:
        """Largest difference between any rank's output and the unsplit
        numpy reference, over both blocks."""
        refs = {"mlp": mlp_reference(self.x, self.weights["mlp"]),
                "attention": attention_reference(self.x, self.weights["attention"], self.heads,
                                                 self.causal)}
        return max(float(np.max(np.abs(r["output"] - refs[b])))
                   for b in refs for r in self.ranks[b])


def run_tensor_parallel(world_size=2, batch=2, seq=4, hidden=8, heads=4, causal=True, seed=0,
                        timeout_s=120.0) -> TensorParallelRun:
    """Run a Megatron-style MLP block and attention block, split over
    `world_size` processes (gloo), forward and backward, in float64.

    One launch runs both blocks. The MLP's inner size is 4 * hidden.
    """
    from gpucourse.distributed import run_on_processes

    world_size = _count("world_size", world_size)
    batch, seq = _count("batch", batch), _count("seq", seq)
    hidden, heads = _count("hidden", hidden), _count("heads", heads)
    _divides("the hidden units", hidden, world_size, "hidden")
    if hidden % heads:
        raise ValueError(f"heads must divide hidden ({hidden}), got heads={heads}")
    if heads % world_size:
        raise ValueError(f"world_size must divide heads ({heads}) so that every rank gets whole "
                         f"heads, got world_size={world_size}")
    rng = np.random.default_rng(_whole_seed(seed))
    x = rng.normal(size=(batch, seq, hidden))
    upstream = rng.normal(size=(batch, seq, hidden))
    weights = {"mlp": init_mlp_weights(hidden, seed=seed + 1),
               "attention": init_attention_weights(hidden, seed=seed + 2)}
    per_rank = run_on_processes(_tensor_parallel_worker, world_size,
                                args=(x, upstream, weights["mlp"], weights["attention"], heads,
                                      bool(causal)),
                                timeout_s=timeout_s)
    ranks = {block: [r[block] for r in per_rank] for block in ("mlp", "attention")}
    return TensorParallelRun(world_size, heads, bool(causal), x, upstream, weights, ranks)
