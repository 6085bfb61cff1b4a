"""How many bytes each parallel strategy sends, and how that compares with
the arithmetic it overlaps: the communication-to-computation ratio (CCR).

Data parallelism all-reduces the gradients (ZeRO turns that into a
reduce-scatter and an all-gather); tensor parallelism all-reduces the
activations of every layer. Divided by a link's bandwidth and set against
the floating-point work of a transformer layer, these volumes say which
strategy a given interconnect can afford.
"""

from __future__ import annotations

from gpucourse.checks import (
    at_least as _at_least, count as _count, positive as _positive,
    scalar_or_array as _scalar_or_array, whole_at_least as _whole_at_least,
)


# -----------------------------------------------------------------------------
# How many bytes each strategy sends


def data_parallel_comm_bytes(n_params, world_size, bytes_per_param=2, zero_stage=0):
    """Bytes each GPU sends per training step under data parallelism.

    Plain data parallelism (and ZeRO stages 1 and 2) all-reduce the gradients
    once: with a ring, 2(N-1)/N · Ψ · bytes. ZeRO stage 3 also all-gathers
    the parameters in the forward and again in the backward pass and
    reduce-scatters the gradients: 3(N-1)/N · Ψ · bytes, 1.5 times as much
    (Rajbhandari et al., 2020, section 7). ``bytes_per_param`` is 2 for fp16
    or bf16 gradients.
    """
    psi = _positive("n_params", n_params)
    n = _count("world_size", world_size)
    b = _positive("bytes_per_param", bytes_per_param)
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    passes = 3 if zero_stage == 3 else 2
    return passes * (n - 1) / n * psi * b


def tensor_parallel_comm_bytes(batch, seq_len, hidden, n_layers, tp, bytes_per_element=2):
    """Bytes each GPU sends per training step for tensor parallelism's activations.

    Megatron-LM's split of a transformer layer needs two all-reduces of the
    b × s × h activations in the forward pass and two in the backward pass
    (Shoeybi et al., 2019), each a ring all-reduce over the ``tp`` GPUs:
    4 · 2(t-1)/t · b·s·h · bytes per layer.
    """
    b = _count("batch", batch)
    s = _count("seq_len", seq_len)
    h = _count("hidden", hidden)
    layers = _count("n_layers", n_layers)
    t = _count("tp", tp)
    e = _positive("bytes_per_element", bytes_per_element)
    return layers * 4 * 2 * (t - 1) / t * b * s * h * e


def transformer_layer_flops(batch, seq_len, hidden, backward=True):
    """FLOPs of one transformer layer: 24·b·s·h²·(1 + s/(6h)) forward
    (Narayanan et al., 2021, section 5.1), three times that with the backward
    pass (which costs twice the forward), no activation recomputation."""
    b = _count("batch", batch)
    s = _count("seq_len", seq_len)
    h = _count("hidden", hidden)
    forward = 24 * b * s * h * h * (1 + s / (6 * h))
    return 3 * forward if backward else forward


def ccr(comm_bytes, flops, bandwidth_bytes_per_s, flops_per_s):
    """Communication-to-computation ratio: time to send ``comm_bytes`` over the
    link over time to do ``flops`` of arithmetic. Below 1 the communication
    can hide behind the computation (if the two overlap); above 1 the link
    sets the pace. Arguments may be arrays."""
    c = _at_least("comm_bytes", comm_bytes, 0, array_ok=True)
    f = _positive("flops", flops, array_ok=True)
    bw = _positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s, array_ok=True)
    rate = _positive("flops_per_s", flops_per_s, array_ok=True)
    return _scalar_or_array((c / bw) / (f / rate))


def tensor_parallel_ccr(hidden, seq_len, tp, bandwidth_bytes_per_s, flops_per_s,
                        bytes_per_element=2):
    """CCR of one tensor-parallel transformer layer, forward and backward.

    Per GPU: 4 ring all-reduces of b·s·h elements against 1/t of the layer's
    FLOPs. The batch cancels, leaving
    8(t-1)·e·h / (72 h²(1 + s/6h)) · F / B.
    """
    t = _whole_at_least("tp", tp, 2)
    comm = tensor_parallel_comm_bytes(1, seq_len, hidden, 1, t, bytes_per_element)
    flops = transformer_layer_flops(1, seq_len, hidden) / t
    return ccr(comm, flops, bandwidth_bytes_per_s, flops_per_s)


def data_parallel_ccr(tokens_per_gpu, world_size, bandwidth_bytes_per_s, flops_per_s,
                      bytes_per_param=2, zero_stage=0):
    """CCR of one data-parallel training step.

    Per GPU: the gradient all-reduce (``data_parallel_comm_bytes``) against
    6·Ψ·T FLOPs for T tokens (Kaplan et al., 2020). Ψ cancels, leaving
    2(N-1)/N · e / (6 T) · F / B (3(N-1)/N for ZeRO-3): more tokens per GPU
    per step, less communication per FLOP.
    """
    tokens = _positive("tokens_per_gpu", tokens_per_gpu)
    comm = data_parallel_comm_bytes(1, world_size, bytes_per_param, zero_stage)
    return ccr(comm, 6 * tokens, bandwidth_bytes_per_s, flops_per_s)
