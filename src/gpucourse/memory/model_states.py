"""Model states per GPU: parameters, gradients and optimizer states under
data parallelism, the ZeRO stages and FSDP's sharding strategies.

Mixed-precision Adam keeps 16 bytes per parameter: 2 for the half-precision
weights, 2 for their gradients and 12 for the optimizer (a float32 master
copy, momentum and variance). ZeRO stage 1 shards the optimizer states over
the data-parallel ranks, stage 2 the gradients too, stage 3 the parameters as
well; FSDP's strategies map onto the same stages. This module holds that
arithmetic for several precision recipes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucourse.checks import count as _count, positive as _positive, real as _real


GB = 1e9  # the papers' tables count in decimal gigabytes: 7.5e9 parameters x 16 B = 120 GB

ZERO_STAGES = (0, 1, 2, 3)

# -----------------------------------------------------------------------------
# Checking arguments


def _stage(zero_stage) -> int:
    if isinstance(zero_stage, bool) or zero_stage not in ZERO_STAGES:
        raise ValueError(f"zero_stage must be one of 0, 1, 2, 3, got {zero_stage!r}")
    return int(zero_stage)


def _dp(name, dp) -> int:
    return _count(name, dp)  # "dp must be a whole number >= 1, got 0"


def _bytes_per(name, value) -> float:
    x = _real(name, value)
    if x < 0:
        raise ValueError(f"{name} must be >= 0 bytes per parameter, got {value!r}")
    return x


# -----------------------------------------------------------------------------
# Model states: parameters, gradients and optimizer states


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model states held by one GPU."""

    params: float  # bytes of parameters
    grads: float  # bytes of gradients
    optimizer: float  # bytes of optimizer states (with fp32 master weights, if any)

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def model_states_per_gpu(n_params, zero_stage, dp, optimizer_multiplier=12, *,
                         param_bytes=2, grad_bytes=2) -> ModelStates:
    """Bytes of model states per GPU under ZeRO-DP (Rajbhandari et al., 2020, §3.1, §5).

    The paper's mixed-precision Adam keeps, for Ψ = `n_params` parameters,
    2Ψ bytes of fp16 parameters, 2Ψ of fp16 gradients and KΨ of optimizer
    states, K = 12: an fp32 copy of the parameters, the momentum and the
    variance, 4 bytes each. With data-parallel degree N_d = `dp`:

    * stage 0 (plain data parallelism) replicates everything: (2 + 2 + K)Ψ;
    * stage 1 (P_os) partitions the optimizer states: 2Ψ + 2Ψ + KΨ/N_d;
    * stage 2 (P_os+g) also the gradients: 2Ψ + (2 + K)Ψ/N_d;
    * stage 3 (P_os+g+p) also the parameters: (2 + 2 + K)Ψ/N_d.

    `param_bytes` and `grad_bytes` change the 2 and 2 for other recipes
    (see `PRECISIONS` and `model_states`). Results are floats: Ψ/N_d need not
    be whole.
    """
    psi = _positive("n_params", n_params)
    stage = _stage(zero_stage)
    dp = _dp("dp", dp)
    k = _bytes_per("optimizer_multiplier", optimizer_multiplier)
    p = _bytes_per("param_bytes", param_bytes)
    g = _bytes_per("grad_bytes", grad_bytes)
    return ModelStates(params=p * psi / (dp if stage >= 3 else 1),
                       grads=g * psi / (dp if stage >= 2 else 1),
                       optimizer=k * psi / (dp if stage >= 1 else 1))


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of a training recipe with Adam."""

    name: str
    param_bytes: float  # the weights the forward and backward passes read
    grad_bytes: float  # gradients (all copies of them)
    optimizer_bytes: float  # K: Adam's two moments plus any fp32 master copy
    source: str  # bib key
    note: str


PRECISIONS = {
    # The ZeRO paper's accounting (§3.1): fp16 weights and gradients, and fp32
    # master weights, momentum and variance, "K = 12". bf16 in place of fp16
    # changes nothing in the count; the Playbook's mixed-precision recipe is
    # the same 2 + 2 + 4 + (4 + 4) = 16 bytes.
    "mixed": Precision("bf16 with fp32 master weights", 2, 2, 12, "rajbhandari2020zero",
                       "2Ψ bf16/fp16 weights + 2Ψ gradients + 12Ψ (fp32 master, momentum, variance)"),
    # Full fp32 training: 4-byte weights and gradients, Adam's two fp32
    # moments; no master copy is needed (Ultra-Scale Playbook, "Memory usage
    # in Transformers").
    "fp32": Precision("fp32", 4, 4, 8, "tazi2025ultrascale",
                      "4Ψ weights + 4Ψ gradients + 8Ψ (momentum, variance)"),
    # Mixed precision that accumulates gradients in fp32 (as nanotron and
    # others do) adds 4Ψ: 20 bytes per parameter (Ultra-Scale Playbook). We
    # count the fp32 gradient buffer with the gradients, so ZeRO-2 and -3
    # partition it like them.
    "mixed_fp32_grads": Precision("bf16 with fp32 master weights and fp32 gradient accumulation",
                                  2, 6, 12, "tazi2025ultrascale",
                                  "as 'mixed', plus a 4Ψ fp32 gradient accumulation buffer"),
}


def _precision(precision) -> Precision:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return PRECISIONS[precision]


def model_states(n_params, zero_stage, dp, precision="mixed") -> ModelStates:
    """`model_states_per_gpu` with the bytes per parameter of a named recipe
    from `PRECISIONS` ("mixed", "fp32" or "mixed_fp32_grads")."""
    r = _precision(precision)
    return model_states_per_gpu(n_params, zero_stage, dp, r.optimizer_bytes,
                                param_bytes=r.param_bytes, grad_bytes=r.grad_bytes)


# FSDP's sharding strategies (Zhao et al., 2023; PyTorch's ShardingStrategy)
# and the ZeRO stage whose model states each one holds per GPU during a step:
# FULL_SHARD shards parameters, gradients and optimizer states (ZeRO-3);
# SHARD_GRAD_OP keeps the parameters unsharded from the forward to the end of
# the backward pass, so during a step it holds what ZeRO-2 holds; NO_SHARD
# replicates everything like DDP; HYBRID_SHARD shards fully within a group of
# GPUs (usually one node) and replicates across groups.
FSDP_STRATEGIES = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3}


def fsdp_model_states_per_gpu(n_params, strategy, world_size, shard_group_size=None,
                              precision="mixed") -> ModelStates:
    """Model states per GPU under one of FSDP's sharding strategies.

    For HYBRID_SHARD the states are split over `shard_group_size` GPUs (the
    GPUs of a node, say 8), which must divide `world_size`; the other
    strategies split over the whole `world_size` and take no group size.
    """
    if strategy not in FSDP_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(FSDP_STRATEGIES)}, got {strategy!r}")
    world_size = _dp("world_size", world_size)
    if strategy == "HYBRID_SHARD":
        if shard_group_size is None:
            raise ValueError("shard_group_size must be given for HYBRID_SHARD (GPUs per shard group)")
        group = _dp("shard_group_size", shard_group_size)
        if world_size % group:
            raise ValueError(f"shard_group_size must divide world_size ({world_size}), "
                             f"got shard_group_size={group}")
        degree = group
    else:
        if shard_group_size is not None:
            raise ValueError(f"shard_group_size applies only to HYBRID_SHARD, got "
                             f"shard_group_size={shard_group_size!r} with {strategy}")
        degree = world_size
    return model_states(n_params, FSDP_STRATEGIES[strategy], degree, precision)
