"""Sizing a GPT-style transformer: its parameters, the activation memory of its
layers, and a planner that says whether (and at which data-parallel degree)
it fits a GPU.

Activations are counted as Korthikanti et al. (2022) count them, with tensor
and sequence parallelism and with no, selective or full recomputation. The
GPT-3 shapes of Brown et al. (2020) are here as the calculator's models, with
the per-GPU breakdown the chapter draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucourse.checks import count as _count, positive as _positive, real as _real
from gpucourse.memory.model_states import ZERO_STAGES, _dp, _precision, model_states


# -----------------------------------------------------------------------------
# Parameters and activations of a GPT-style transformer


def gpt_params(hidden, n_layers, vocab) -> int:
    """Parameters of a GPT-style transformer: N = h·v + L·(12h² + 13h) + 2h.

    Per layer: the QKV projection 3h² + 3h, the output projection h² + h, the
    MLP 4h² + 4h and 4h² + h, two LayerNorms 4h, so 12h² + 13h. Add the token
    embedding h·v (tied with the output layer) and the final LayerNorm 2h.
    Learned position embeddings (s·h) are left out, as in Narayanan et al.
    (2021) and Korthikanti et al. (2022).
    """
    h, layers, v = _count("hidden", hidden), _count("n_layers", n_layers), _count("vocab", vocab)
    return h * v + layers * (12 * h * h + 13 * h) + 2 * h


RECOMPUTE = ("none", "selective", "full")


def activation_bytes_per_layer(seq_len, micro_batch, hidden, heads, tp=1,
                               sequence_parallel=False, recompute="none") -> float:
    """Activation bytes one transformer layer keeps for its backward pass, per GPU.

    Korthikanti et al. (2022), §4 and Table 2, with 16-bit activations and
    1-byte dropout masks; s = `seq_len`, b = `micro_batch`, h = `hidden`,
    a = `heads`, t = `tp`:

    * no parallelism:                           sbh(34 + 5as/h)
    * tensor parallel:                          sbh(10 + 24/t + 5as/(ht))
    * tensor + sequence parallel:               sbh(34/t + 5as/(ht))
    * tensor parallel + selective recompute:    sbh(10 + 24/t)
    * tensor + sequence parallel + selective:   sbh(34/t)
    * full recompute (only the layer's input):  2sbh

    The 5as/h term is the attention scores, softmax and its dropout, which
    selective recomputation recomputes instead of storing. `tp` must divide
    `heads`. Sequence parallelism with tp = 1 is plain execution.
    """
    s, b = _count("seq_len", seq_len), _count("micro_batch", micro_batch)
    h, a, t = _count("hidden", hidden), _count("heads", heads), _count("tp", tp)
    if a % t:
        raise ValueError(f"tp must divide heads ({a}), got tp={t}")
    if not isinstance(sequence_parallel, bool):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    sbh = s * b * h
    scores = 5 * a * s / (h * t)
    if recompute == "full":
        return 2.0 * sbh
    if recompute == "selective":
        scores = 0.0
    if sequence_parallel:
        return sbh * (34 / t + scores)
    return sbh * (10 + 24 / t + scores)


def activation_bytes(seq_len, micro_batch, hidden, heads, n_layers, tp=1,
                     sequence_parallel=False, recompute="none") -> float:
    """Activation bytes of `n_layers` layers: L times `activation_bytes_per_layer`
    (embeddings, final LayerNorm and loss are small and left out, as in the paper)."""
    layers = _count("n_layers", n_layers)
    return layers * activation_bytes_per_layer(seq_len, micro_batch, hidden, heads, tp,
                                               sequence_parallel, recompute)


# -----------------------------------------------------------------------------
# The planner: will it fit?


@dataclass(frozen=True)
class Plan:
    """The smallest data-parallel degree at which each ZeRO stage fits."""

    n_params: float
    gpu_memory_bytes: float
    precision: str
    activation_bytes: float  # per GPU, independent of dp
    min_dp: dict  # stage -> smallest dp that fits, or None if no dp (up to max_dp) does

    @property
    def fits(self) -> bool:
        """Whether some stage fits at some dp."""
        return any(dp is not None for dp in self.min_dp.values())

    def per_gpu_bytes(self, zero_stage, dp) -> float:
        return model_states(self.n_params, zero_stage, dp, self.precision).total + self.activation_bytes


def plan(n_params, gpu_memory_bytes, precision="mixed", activation_bytes=0, max_dp=None) -> Plan:
    """For each ZeRO stage, the smallest dp whose per-GPU model states plus
    `activation_bytes` fit in `gpu_memory_bytes`, or None.

    Per GPU, a stage holds a replicated part A (which dp does not shrink) and
    a partitioned part B/dp. It fits for dp >= B / (M - A) when A < M, and
    never when A >= M (ZeRO-1 and -2 keep the full fp16 weights on every
    GPU). `max_dp`, when given, caps the search (the GPUs you have).
    """
    psi = _positive("n_params", n_params)
    memory = _positive("gpu_memory_bytes", gpu_memory_bytes)
    r = _precision(precision)
    act = _real("activation_bytes", activation_bytes)
    if act < 0:
        raise ValueError(f"activation_bytes must be >= 0, got {activation_bytes!r}")
    cap = None if max_dp is None else _dp("max_dp", max_dp)

    min_dp = {}
    for stage in ZERO_STAGES:
        whole = model_states(psi, stage, 1, precision)
        sharded = model_states(psi, stage, 2, precision)
        partitioned = 2 * (whole.total - sharded.total)  # B, since A + B = whole, A + B/2 = sharded
        replicated = whole.total - partitioned
        room = memory - act - replicated
        if room <= 0 or (partitioned == 0 and room < 0):
            min_dp[stage] = None
            continue
        dp = max(1, math.ceil(partitioned / room))
        # The float division can land a hair off a whole answer: settle it
        # with the same total the caller will compare.
        def fits(d):
            return model_states(psi, stage, d, precision).total + act <= memory
        while dp > 1 and fits(dp - 1):
            dp -= 1
        while not fits(dp):
            dp += 1
        min_dp[stage] = dp if cap is None or dp <= cap else None
    return Plan(psi, memory, precision, act, min_dp)


# GPT-3 shapes (Brown et al., 2020, Table 2.1): layers, d_model, heads; the
# calculator's models. GPT-2's tokenizer, 50257 tokens. (A table of data:
# its rows look alike by design.)
GPT3_VOCAB = 50257
GPT3_MODELS = {
    "GPT-3 1.3B": (24, 2048, 24),
    "GPT-3 2.7B": (32, 2560, 32),
    "GPT-3 6.7B": (32, 4096, 32),
    "GPT-3 13B": (40, 5140, 40),
    "GPT-3 175B": (96, 12288, 96),
}


def memory_breakdown(model="GPT-3 6.7B", zero_stage=3, dp=8, precision="mixed", seq_len=2048,
                     micro_batch=1, recompute="none") -> dict:
    """Bytes per GPU of one of `GPT3_MODELS`, split into params, grads,
    optimizer (ZeRO stage over dp GPUs) and activations (all layers, no
    tensor parallelism)."""
    if model not in GPT3_MODELS:
        raise ValueError(f"model must be one of {', '.join(GPT3_MODELS)}, got {model!r}")
    layers, h, a = GPT3_MODELS[model]
    states = model_states(gpt_params(h, layers, GPT3_VOCAB), zero_stage, dp, precision)
    act = activation_bytes(seq_len, micro_batch, h, a, layers, recompute=recompute)
    return dict(params=states.params, grads=states.grads, optimizer=states.optimizer, activations=act)
