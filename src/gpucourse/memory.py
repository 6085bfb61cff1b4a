"""Week 5: the memory arithmetic of training, from ZeRO to FSDP.

"Will it fit?" is the first question of every large training run. This module
answers it, and checks its answers two ways:

* model states per GPU (parameters, gradients, optimizer states) under data
  parallelism and ZeRO stages 0-3, for several precision recipes and for
  FSDP's sharding strategies;
* the parameter count of a GPT-style transformer and the activation memory of
  one of its layers, with tensor and sequence parallelism and activation
  recomputation;
* a planner: the smallest data-parallel degree at which each ZeRO stage fits a
  GPU;
* the published tables (ZeRO's Table 1 and Figure 1, the Ultra-Scale
  Playbook's model-state table) as data, to compare the formulas against;
* worker functions that train a small transformer on several processes under
  DDP, ZeRO-1 (`ZeroRedundancyOptimizer`) and FSDP2 (`fully_shard`) and
  measure what each process really holds, with exact predictions of the
  uneven splits; the processes are spawned afresh, or forked from a warmed-up
  process, as week 5's graded test cells do (`measure`, `warm_up_training`,
  `rank_states`).

Byte counts are bytes; "GB" in the papers' tables means 10^9 bytes, and so it
does here (`GB`). Every public function checks its arguments and raises
``ValueError`` naming the argument and what it accepts.

Only numpy is imported at the top. torch is imported inside the functions
that train (the spawned workers), matplotlib inside the plotting functions and
ipywidgets inside the calculator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal
from functools import lru_cache
from pathlib import Path

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


# -----------------------------------------------------------------------------
# The published numbers


# ZeRO, Table 1: per-device memory (GB) of model states for Ψ = 7.5B, 128B and
# 1T parameters, K = 12, under P_os (stage 1), P_os+g (2) and P_os+g+p (3),
# DP = 1 to 1024 (Rajbhandari et al., 2020). Transcribed as printed, as
# strings, so that the printed precision is kept: (model, dp) -> stages 1, 2, 3.
# Checked cell by cell against the paper's text (SC '20 version, Table I;
# arXiv:1910.02054, https://arxiv.org/abs/1910.02054).
ZERO_TABLE1_PARAMS = {"7.5B": 7.5e9, "128B": 128e9, "1T": 1e12}
ZERO_TABLE1_DP = (1, 4, 16, 64, 256, 1024)
ZERO_TABLE1 = {
    ("7.5B", 1): ("120", "120", "120"),
    ("7.5B", 4): ("52.5", "41.3", "30"),
    ("7.5B", 16): ("35.6", "21.6", "7.5"),
    ("7.5B", 64): ("31.4", "16.6", "1.88"),
    ("7.5B", 256): ("30.4", "15.4", "0.47"),
    ("7.5B", 1024): ("30.1", "15.1", "0.12"),
    ("128B", 1): ("2048", "2048", "2048"),
    ("128B", 4): ("896", "704", "512"),
    ("128B", 16): ("608", "368", "128"),
    ("128B", 64): ("536", "284", "32"),
    ("128B", 256): ("518", "263", "8"),
    ("128B", 1024): ("513", "257", "2"),
    ("1T", 1): ("16000", "16000", "16000"),
    ("1T", 4): ("7000", "5500", "4000"),
    ("1T", 16): ("4750", "2875", "1000"),
    ("1T", 64): ("4187", "2218", "250"),
    ("1T", 256): ("4046", "2054", "62.5"),
    ("1T", 1024): ("4011", "2013", "15.6"),
}
# The cells the paper truncates rather than rounds (model, dp, stage): 4187.5
# is printed 4187, 513.5 is printed 513. Every other cell is the exact value
# rounded half up to the digits printed (41.25 -> 41.3, 1.875 -> 1.88).
ZERO_TABLE1_TRUNCATED = frozenset({
    ("128B", 1024, 1), ("128B", 1024, 2),
    ("1T", 64, 1), ("1T", 256, 1), ("1T", 1024, 1),
    ("1T", 64, 2), ("1T", 256, 2), ("1T", 1024, 2),
})

# ZeRO, Figure 1: Ψ = 7.5B, N_d = 64, K = 12: the baseline and the three stages, GB.
# The paper's §V quotes the same example: 120 GB with standard DP, 31.4 GB
# with P_os, 16.6 GB with P_os+g and 1.9 GB with P_os+g+p.
ZERO_FIGURE1_PARAMS = 7.5e9
ZERO_FIGURE1_DP = 64
ZERO_FIGURE1_GB = {0: "120", 1: "31.4", 2: "16.6", 3: "1.9"}

# The Ultra-Scale Playbook's table of model-state memory (Tazi et al., 2025,
# "Memory usage in Transformers"), in GB: parameters -> (fp32 or bf16 mixed
# precision without fp32 gradient accumulation, bf16 with fp32 gradient
# accumulation). No sharding: 16 and 20 bytes per parameter. Checked against
# the Playbook's text (https://huggingface.co/spaces/nanotron/ultrascale-playbook).
PLAYBOOK_MODEL_STATES_GB = {
    1e9: ("16", "20"),
    7e9: ("112", "140"),
    70e9: ("1120", "1400"),
    405e9: ("6480", "8100"),
}


def as_printed(value, printed, truncate=False) -> str:
    """`value` written with as many decimals as the string `printed` has,
    rounded half up (or truncated), the way a table prints it."""
    x = _real("value", value)
    if not isinstance(printed, str) or not printed.replace(".", "", 1).isdigit():
        raise ValueError(f"printed must be a number written as a string such as '41.3', got {printed!r}")
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    quantum = Decimal(1).scaleb(-decimals)
    mode = ROUND_FLOOR if truncate else ROUND_HALF_UP
    return str(Decimal(repr(x)).quantize(quantum, rounding=mode))


def how_printed(value, printed) -> str | None:
    """"rounded" if `value` rounds half up to the string `printed`, else
    "truncated" if it truncates to it, else None (the value disagrees)."""
    if as_printed(value, printed) == printed:
        return "rounded"
    if as_printed(value, printed, truncate=True) == printed:
        return "truncated"
    return None


def zero_table1_computed() -> dict:
    """Table 1 computed by `model_states_per_gpu`, in GB, same keys as `ZERO_TABLE1`."""
    return {(model, dp): tuple(model_states_per_gpu(ZERO_TABLE1_PARAMS[model], stage, dp).total / GB
                               for stage in (1, 2, 3))
            for model, dp in ZERO_TABLE1}


def zero_table1_rows():
    """One row per cell: (model, dp, stage, computed GB, printed, how it is printed)."""
    computed = zero_table1_computed()
    rows = []
    for (model, dp), printed in ZERO_TABLE1.items():
        for stage, text, value in zip((1, 2, 3), printed, computed[(model, dp)]):
            rows.append((model, dp, stage, value, text, how_printed(value, text)))
    return rows


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


# -----------------------------------------------------------------------------
# Measuring real sharded training: predictions of the uneven splits


def fsdp2_shard_rows(rows, world_size, rank) -> int:
    """Rows of a tensor that FSDP2's `fully_shard` gives `rank` (its local,
    unpadded shard).

    FSDP2 splits every parameter along dim 0 with `torch.chunk`: chunks of
    ceil(rows / world_size) rows, the last ones shorter or empty. Each rank
    allocates a padded chunk of ceil(rows / world_size) rows, so that the
    all-gather moves equal pieces; `to_local()` shows only the real rows.
    """
    rows = _count("rows", rows)
    world_size = _dp("world_size", world_size)
    rank = _real("rank", rank)
    if not (rank.is_integer() and 0 <= rank < world_size):
        raise ValueError(f"rank must be a whole number in [0, {world_size - 1}], got {rank!r}")
    chunk = -(-rows // world_size)
    return int(min(chunk, max(0, rows - int(rank) * chunk)))


def fsdp2_local_numel(shape, world_size, rank, padded=False) -> int:
    """Elements of one parameter that FSDP2 keeps on `rank` (padded: allocated)."""
    shape = _shape(shape)
    per_row = math.prod(shape[1:])
    rows = -(-shape[0] // _dp("world_size", world_size)) if padded else \
        fsdp2_shard_rows(shape[0], world_size, rank)
    return rows * per_row


def _shape(shape) -> tuple:
    if not isinstance(shape, (tuple, list)) or not shape:
        raise ValueError(f"shape must be a non-empty tuple of whole numbers >= 1, got {shape!r}")
    return tuple(_count("shape", n) for n in shape)


def zero1_partition(numels, world_size) -> list[list[int]]:
    """Which parameters `ZeroRedundancyOptimizer` gives each rank (indices into `numels`).

    PyTorch sorts the parameters by size, largest first (a stable sort), and
    gives each whole tensor to the rank with the fewest elements so far,
    the lowest rank on a tie. Ranks then keep Adam states only for their own
    tensors, so the split is even only when the sizes allow it.
    """
    world_size = _dp("world_size", world_size)
    sizes = [_count("numels", n) for n in numels]
    owned = [[] for _ in range(world_size)]
    load = [0] * world_size
    for i in sorted(range(len(sizes)), key=lambda j: -sizes[j]):
        rank = load.index(min(load))
        owned[rank].append(i)
        load[rank] += sizes[i]
    return owned


# -----------------------------------------------------------------------------
# A small transformer, trained on several processes


@dataclass(frozen=True)
class TinyConfig:
    """A small GPT-style model. vocab = 0 means no embedding and no final
    LayerNorm: the blocks read float features (the "even" model, whose every
    tensor splits evenly over 2 and 4 ranks)."""

    name: str
    hidden: int
    heads: int
    n_layers: int
    vocab: int = 0
    seq_len: int = 16
    batch: int = 4


# Every tensor of EVEN has a multiple of 4 rows, and every size appears a
# multiple of 4 times, so FSDP2 and ZeRO-1 both split it exactly over 2 or 4
# ranks. ODD has 3 layers and a 517-row embedding: neither splits evenly.
EVEN = TinyConfig("even", hidden=64, heads=4, n_layers=4)
ODD = TinyConfig("odd", hidden=48, heads=4, n_layers=3, vocab=517)


def tiny_param_shapes(config) -> list[tuple]:
    """The parameter shapes of `config`'s model, in `model.parameters()` order,
    worked out without torch."""
    h = config.hidden
    block = [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,),
             (4 * h, h), (4 * h,), (h, 4 * h), (h,)]
    shapes = [(config.vocab, h)] if config.vocab else []
    shapes += block * config.n_layers
    if config.vocab:
        shapes += [(h,), (h,)]
    return shapes


@lru_cache(maxsize=None)
def _tiny_model_class():
    import torch
    from torch import nn
    from torch.nn import functional as F

    from gpucourse.training import transformer_block_class

    Block = transformer_block_class()  # the same block as the week-6 step

    class Tiny(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            if config.vocab:
                self.embed = nn.Embedding(config.vocab, config.hidden)
            self.blocks = nn.ModuleList(Block(config.hidden, config.heads)
                                        for _ in range(config.n_layers))
            if config.vocab:
                self.ln_f = nn.LayerNorm(config.hidden)

        def forward(self, x):
            h = self.embed(x) if self.config.vocab else x
            for block in self.blocks:
                h = block(h)
            if self.config.vocab:  # the output layer reuses the embedding (tied weights)
                return F.cross_entropy((self.ln_f(h) @ self.embed.weight.T).flatten(0, 1),
                                       x.roll(-1, dims=1).flatten())
            return h.pow(2).mean()

    return Tiny, torch


def _local(t):
    """The part of a tensor this process holds: a DTensor's local shard, or itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _train_and_measure(config, wrapper, rank, world_size, steps=2, *, device=None,
                       on_phase=None):
    """Train `config`'s model under `wrapper` and count what this rank holds.

    By default everything stays on the CPU. `device` (a torch.device, e.g.
    cuda:1 under NCCL) moves the model there before it is wrapped and each
    batch after it is drawn (the batches are drawn on the CPU either way, so
    they are the same numbers on every device). `on_phase(phase, step)`, if
    given, is called after "setup" (model wrapped, optimizer made; step -1)
    and after each step's "forward", "backward" and "optimizer": the GPU
    benchmark reads the CUDA allocator there.
    """
    Tiny, torch = _tiny_model_class()
    torch.manual_seed(0)  # the same initial model on every rank
    model = Tiny(config)
    shapes = [tuple(p.shape) for p in model.parameters()]
    cuda = device is not None and torch.device(device).type == "cuda"
    if device is not None:
        model.to(device)
    phase = on_phase if on_phase is not None else (lambda name, step: None)
    adam = dict(lr=1e-3)
    if wrapper == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        optimizer = torch.optim.Adam(model.parameters(), **adam)
        states = optimizer.state
    else:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[torch.device(device)] if cuda else None)
        if wrapper == "ddp":
            optimizer = torch.optim.Adam(model.parameters(), **adam)
            states = optimizer.state
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                                **adam)
            states = optimizer.optim.state  # only the states of this rank's tensors

    phase("setup", -1)
    generator = torch.Generator().manual_seed(1 + rank)  # each rank its own batch
    shape = (config.batch, config.seq_len)
    for step in range(steps):
        optimizer.zero_grad()
        x = (torch.randint(config.vocab, shape, generator=generator) if config.vocab
             else torch.randn(*shape, config.hidden, generator=generator))
        if device is not None:
            x = x.to(device)
        loss = model(x)
        phase("forward", step)
        loss.backward()
        phase("backward", step)
        optimizer.step()
        phase("optimizer", step)

    params = [_local(p) for p in model.parameters()]
    grads = [_local(p.grad) for p in model.parameters() if p.grad is not None]
    moments = [_local(v) for state in states.values() for k, v in state.items()
               if k in ("exp_avg", "exp_avg_sq")]
    return dict(
        model=config.name, wrapper=wrapper, rank=rank, world_size=world_size,
        shapes=shapes,
        local_numels=[p.numel() for p in params],
        params_bytes=sum(p.numel() * p.element_size() for p in params),
        grads_bytes=sum(g.numel() * g.element_size() for g in grads),
        optimizer_bytes=sum(m.numel() * m.element_size() for m in moments),
        # FSDP2 allocates a padded shard; its storage shows the padding.
        params_allocated_bytes=sum(p.untyped_storage().nbytes() for p in params),
    )


WRAPPERS = ("ddp", "zero1", "fsdp2")
CONFIGS = {"even": EVEN, "odd": ODD}


def measure_worker(rank, world_size, runs):
    """Worker for `gpucourse.distributed.run_on_processes`: train each
    (config name, wrapper) in `runs` for two Adam steps in fp32 and return,
    per run, the bytes of parameters, gradients and Adam moments this rank
    holds (counted on its local tensors; Adam's scalar step counters are left
    out)."""
    import torch.distributed as dist

    out = []
    for name, wrapper in runs:
        if name not in CONFIGS:
            raise ValueError(f"config must be one of {', '.join(CONFIGS)}, got {name!r}")
        if wrapper not in WRAPPERS:
            raise ValueError(f"wrapper must be one of {', '.join(WRAPPERS)}, got {wrapper!r}")
        out.append(_train_and_measure(CONFIGS[name], wrapper, rank, world_size))
        dist.barrier()
    return out


STARTS = ("spawn", "fork")


@lru_cache(maxsize=None)
def _one_process_step() -> tuple:
    Tiny, torch = _tiny_model_class()
    from torch.distributed.fsdp import fully_shard  # noqa: F401 (loaded for the forks)
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel  # noqa: F401

    torch.manual_seed(0)
    model = Tiny(ODD)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randint(ODD.vocab, (1, ODD.seq_len), generator=torch.Generator().manual_seed(0))
    model(x).backward()
    optimizer.step()
    params = list(model.parameters())
    moments = [v for state in optimizer.state.values() for k, v in state.items()
               if k in ("exp_avg", "exp_avg_sq")]
    return (tuple(tuple(p.shape) for p in params),
            (sum(p.numel() * p.element_size() for p in params),
             sum(p.grad.numel() * p.grad.element_size() for p in params),
             sum(m.numel() * m.element_size() for m in moments)))


def warm_up_training() -> dict:
    """Import torch, the three wrappers and Adam in this process, and train the
    odd model one step of fp32 Adam here, on its own (no process group), so
    that processes forked from this one later (`measure(..., start="fork")`)
    find everything loaded and initialised.

    The first model, backward pass and Adam step of a process cost seconds of
    lazy imports and set-up; done here once, they are not paid again by every
    forked rank (torch resets its thread pools in a forked child). The work is
    done once per process; later calls return at once.

    Returns what that one process held, counted like `measure_worker` counts:
    a dict with `shapes` (the odd model's parameter shapes, in
    `model.parameters()` order) and `measured`, the bytes of (params, grads,
    optimizer): on one process every wrapper would hold all of it.
    """
    shapes, measured = _one_process_step()
    return dict(shapes=list(shapes), measured=measured)


def measure(world_sizes=(2,), configs=("even", "odd"), wrappers=WRAPPERS, timeout_s=120.0,
            progress=True, start="spawn"):
    """Train and measure every config under every wrapper, one launch per
    world size, with a progress bar over the launches when there are several.
    Returns a flat list of per-rank records (see `measure_worker`).

    `start` says how the processes begin:

    * "spawn" (the default): fresh processes, each importing torch itself
      (`gpucourse.distributed.run_on_processes`); each launch costs seconds
      of imports, and `timeout_s` counts from the launch;
    * "fork": copies of this process (`gpucourse.exercise_processes.run_forked`,
      Linux and macOS), after `warm_up_training` here, so that the ranks start
      with torch and the wrappers loaded: what a graded test cell uses, seconds
      faster on a small machine. `timeout_s` counts from when every rank has
      joined the process group, and a failure raises AssertionError with the
      rank's traceback. No process group may be initialised in this process.
    """
    from tqdm.auto import tqdm

    for name in configs:
        if name not in CONFIGS:
            raise ValueError(f"configs must be drawn from {', '.join(CONFIGS)}, got {name!r}")
    for wrapper in wrappers:
        if wrapper not in WRAPPERS:
            raise ValueError(f"wrappers must be drawn from {', '.join(WRAPPERS)}, got {wrapper!r}")
    if start not in STARTS:
        raise ValueError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
    sizes = [_dp("world_sizes", n) for n in world_sizes]
    runs = [(name, wrapper) for name in configs for wrapper in wrappers]
    if start == "fork":
        from gpucourse.exercise_processes import run_forked

        warm_up_training()

        def launch(n):
            return run_forked(lambda rank, world_size: measure_worker(rank, world_size, runs), n,
                              timeout_s=timeout_s, name="measure_worker")
    else:
        from gpucourse.distributed import run_on_processes

        def launch(n):
            return run_on_processes(measure_worker, n, args=(runs,), timeout_s=timeout_s)
    records = []
    for n in tqdm(sizes, desc="process groups", disable=not progress or len(sizes) < 2):
        for per_rank in launch(n):
            records.extend(per_rank)
    return records


def rank_states(records) -> list[dict]:
    """Each rank's measured model states beside the shapes of its model, from
    either kind of measurement: the list of records `measure` returns, or one
    GPU run (a results file as `gpu_runs` gives it, a dict). One dict per
    record, with `model`, `wrapper`, `world_size`, `rank`, `shapes` (the
    model's parameter shapes as tuples, in `model.parameters()` order),
    `measured`: the bytes of (params, grads, optimizer) the rank held, as
    ints, and `params_allocated_bytes`: the storage its parameters took
    (FSDP2's padded shards)."""
    if isinstance(records, dict):
        return [dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                     rank=r["rank"],
                     shapes=tiny_param_shapes(_config_of(records, r["model"])),
                     measured=tuple(int(r["measured_bytes"][k])
                                    for k in ("params", "grads", "optimizer")),
                     params_allocated_bytes=int(r["params_allocated_bytes"]))
                for r in _gpu_rows(records)]
    keys = ("model", "wrapper", "world_size", "rank", "shapes", "params_bytes", "grads_bytes",
            "optimizer_bytes", "params_allocated_bytes")
    if not isinstance(records, (list, tuple)) or not records or any(
            not isinstance(r, dict) or any(k not in r for k in keys) for r in records):
        raise ValueError("records must be the non-empty list of records measure() returns "
                         f"(keys {', '.join(keys)}) or one GPU run as gpu_runs() gives it, "
                         f"got {records!r:.80}")
    return [dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                 rank=r["rank"], shapes=[tuple(s) for s in r["shapes"]],
                 measured=(int(r["params_bytes"]), int(r["grads_bytes"]),
                           int(r["optimizer_bytes"])),
                 params_allocated_bytes=int(r["params_allocated_bytes"]))
            for r in records]


_STAGE_OF = {"ddp": 0, "zero1": 1, "fsdp2": 3}
FP32_ADAM = dict(optimizer_multiplier=8, param_bytes=4, grad_bytes=4)  # 4 + 4 + 8 bytes per parameter


def predict(config, wrapper, world_size, rank):
    """Two predictions of one rank's bytes (params, grads, optimizer) in fp32 Adam:

    * "formula": `model_states_per_gpu` with 4 + 4 + 8 bytes per parameter
      and the wrapper's ZeRO stage (DDP 0, ZeRO-1 1, FSDP2 3): the ideal,
      perfectly even split;
    * "layout": the split PyTorch really makes, tensor by tensor: FSDP2's
      row chunks (`fsdp2_shard_rows`) and ZeroRedundancyOptimizer's whole
      tensors (`zero1_partition`).

    For evenly dividing sizes the two agree.
    """
    if wrapper not in WRAPPERS:
        raise ValueError(f"wrapper must be one of {', '.join(WRAPPERS)}, got {wrapper!r}")
    shapes = tiny_param_shapes(config)
    numels = [math.prod(s) for s in shapes]
    n = sum(numels)
    ideal = model_states_per_gpu(n, _STAGE_OF[wrapper], world_size, **FP32_ADAM)
    if wrapper == "ddp":
        layout = (4 * n, 4 * n, 8 * n)
    elif wrapper == "zero1":
        mine = sum(numels[i] for i in zero1_partition(numels, world_size)[rank])
        layout = (4 * n, 4 * n, 8 * mine)
    else:
        mine = sum(fsdp2_local_numel(s, world_size, rank) for s in shapes)
        layout = (4 * mine, 4 * mine, 8 * mine)
    return {"formula": (ideal.params, ideal.grads, ideal.optimizer), "layout": layout}


def compare(records):
    """Measured against predicted, one row per record: a list of dicts with
    the measured and both predicted (params, grads, optimizer) byte triples."""
    rows = []
    for r in records:
        p = predict(CONFIGS[r["model"]], r["wrapper"], r["world_size"], r["rank"])
        measured = (r["params_bytes"], r["grads_bytes"], r["optimizer_bytes"])
        rows.append(dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                         rank=r["rank"], measured=measured, formula=p["formula"],
                         layout=p["layout"]))
    return rows


# -----------------------------------------------------------------------------
# The same measurement on real GPUs: benchmarks/memory_gpu.py's results file
#
# The benchmark trains the same models (plus "even_large", ~100M parameters)
# on one process per GPU over NCCL and writes, per model, wrapper and rank,
# the model-state bytes counted tensor by tensor and the CUDA allocator's
# readings after each phase of two steps. The functions below take that file
# as `results.load_results("memory")` returns it (a dict) and re-predict every
# row with `predict`, so the book checks today's arithmetic against the GPUs.
# The script ran once per GPU count (2 and 4 GPUs): `gpu_runs` loads every run,
# keyed by its number of GPUs, and `gpu_scaling` sets them side by side.

WRAPPER_NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "fsdp2": "FSDP2"}


def _gpu_rows(record) -> list:
    """The rows of a memory results record, after checking its shape."""
    if (not isinstance(record, dict) or record.get("benchmark") != "memory"
            or not isinstance(record.get("configs"), dict)
            or not isinstance(record.get("results"), list) or not record["results"]):
        raise ValueError("record must be a memory results file as results.load_results('memory') "
                         "returns it (benchmark 'memory', 'configs' and a non-empty 'results' "
                         f"list), got {type(record).__name__}"
                         + (f" with keys {sorted(record)}" if isinstance(record, dict) else ""))
    for r in record["results"]:
        if r.get("model") not in record["configs"]:
            raise ValueError(f"record's row for model {r.get('model')!r} has no entry in its "
                             f"configs ({', '.join(record['configs'])})")
        if r.get("wrapper") not in WRAPPERS:
            raise ValueError(f"record's rows must have wrapper one of {', '.join(WRAPPERS)}, "
                             f"got {r.get('wrapper')!r}")
    return record["results"]


def _config_of(record, model) -> TinyConfig:
    try:
        return TinyConfig(**record["configs"][model])
    except TypeError as error:
        raise ValueError(f"record's configs[{model!r}] must hold TinyConfig's fields "
                         f"(name, hidden, heads, n_layers, vocab, seq_len, batch): {error}"
                         ) from None


def gpu_compare(record) -> list[dict]:
    """Every row of a GPU memory results file as `compare` gives the CPU
    measurement: measured bytes (params, grads, optimizer) from the file, the
    formula and layout predicted now by `predict` from the file's configs."""
    rows = []
    for r in _gpu_rows(record):
        p = predict(_config_of(record, r["model"]), r["wrapper"], r["world_size"], r["rank"])
        m = r["measured_bytes"]
        rows.append(dict(model=r["model"], wrapper=r["wrapper"], world_size=r["world_size"],
                         rank=r["rank"], measured=(m["params"], m["grads"], m["optimizer"]),
                         formula=p["formula"], layout=p["layout"]))
    return rows


def _gpu_rank_rows(record, model, rank) -> dict:
    """{wrapper: row} of one model and rank, with the allocator readings checked."""
    rows = _gpu_rows(record)
    if model not in record["configs"]:
        raise ValueError(f"model must be one of {', '.join(record['configs'])}, got {model!r}")
    ranks = sorted({r["rank"] for r in rows if r["model"] == model})
    if isinstance(rank, bool) or rank not in ranks:
        raise ValueError(f"rank must be one of {ranks}, got {rank!r}")
    mine = {r["wrapper"]: r for r in rows if r["model"] == model and r["rank"] == rank}
    for wrapper, r in mine.items():
        phases = r.get("phases") or []
        if not phases or any(p.get("allocated_bytes") is None or p.get("peak_bytes") is None
                             for p in phases):
            raise ValueError(f"record must hold CUDA allocator readings for every phase (a GPU "
                             f"run, not --cpu-smoke); {model}/{wrapper} rank {rank} has none")
    return {w: mine[w] for w in WRAPPERS if w in mine}


def _phase_label(phase) -> str:
    # Steps are counted from 1 for readers; "setup" has step -1.
    return phase["phase"] if phase["step"] < 0 else f"{phase['phase']} {phase['step'] + 1}"


def gpu_phases(record, model="even_large", rank=0) -> dict:
    """For one model and rank: {wrapper: [(label, allocated_bytes, peak_bytes), ...]},
    one entry per phase in the order they ran ("setup", "forward 1",
    "backward 1", "optimizer 1", "forward 2", ...). `allocated_bytes` is
    torch.cuda.memory_allocated after the phase and `peak_bytes` the
    max_memory_allocated during it, both above what was allocated before."""
    return {w: [(_phase_label(p), p["allocated_bytes"], p["peak_bytes"]) for p in r["phases"]]
            for w, r in _gpu_rank_rows(record, model, rank).items()}


def gpu_peaks(record, model="even_large", rank=0) -> list[dict]:
    """Per wrapper, for one model and rank: how the allocator's peak compares
    with the predicted model states. Each dict has

    * `wrapper`;
    * `model_states_bytes`: params + grads + Adam predicted by `predict`
      (layout), and `measured_states_bytes`: the same counted on the GPU;
    * `peak_bytes`: the largest max_memory_allocated of any phase, and
      `peak_phase`: the phase it fell in;
    * `states_share`: model_states_bytes / peak_bytes;
    * `setup_bytes`: allocated once the model is wrapped and the optimizer
      made, before any step;
    * `forward_bytes`: what the first forward pass added to the allocation;
    * `first_optimizer_bytes`: what the first optimizer step added (Adam
      makes its moments then);
    * `final_extra_bytes`: allocated after the last step minus the measured
      model states.
    """
    out = []
    for wrapper, r in _gpu_rank_rows(record, model, rank).items():
        predicted = predict(_config_of(record, model), wrapper, r["world_size"], rank)["layout"]
        phases = r["phases"]
        top = max(phases, key=lambda p: p["peak_bytes"])
        first_forward = next(i for i, p in enumerate(phases) if p["phase"] == "forward")
        first_step = next(i for i, p in enumerate(phases) if p["phase"] == "optimizer")
        states = sum(predicted)
        measured = sum(r["measured_bytes"][k] for k in ("params", "grads", "optimizer"))
        out.append(dict(
            wrapper=wrapper, model_states_bytes=states, measured_states_bytes=measured,
            peak_bytes=top["peak_bytes"], peak_phase=_phase_label(top),
            states_share=states / top["peak_bytes"],
            setup_bytes=phases[0]["allocated_bytes"],
            forward_bytes=(phases[first_forward]["allocated_bytes"]
                           - phases[first_forward - 1]["allocated_bytes"]),
            first_optimizer_bytes=(phases[first_step]["allocated_bytes"]
                                   - phases[first_step - 1]["allocated_bytes"]),
            final_extra_bytes=phases[-1]["allocated_bytes"] - measured))
    return out


def gpu_runs(directory=None) -> dict:
    """Every GPU run of benchmarks/memory_gpu.py in `directory` (default the
    repository's benchmarks/results), keyed by its number of GPUs:
    {2: record, 4: record}, smallest first. Each record is a results file as
    `results.load_results` reads it. Where two runs used the same number of
    GPUs, the one with the later date in its name wins; CPU smoke tests
    (backend gloo) are left out. Picking the run by `gpu_count` keeps a
    2-GPU figure on the 2-GPU file when a newer run used more GPUs."""
    import os

    from gpucourse import results

    if directory is not None and (not isinstance(directory, (str, os.PathLike))
                                  or not Path(directory).is_dir()):
        raise ValueError(f"directory must be an existing folder of results files, got {directory!r}")
    def gpu_count(path, record):
        count = record.get("gpu_count")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{path.name} must record gpu_count as a whole number >= 1, "
                             f"got {count!r}")
        sizes = sorted({r.get("world_size") for r in _gpu_rows(record)}, key=str)
        if sizes != [count]:
            raise ValueError(f"{path.name} records gpu_count {count} but rows with world_size "
                             f"{sizes}")
        return count

    runs = results.newest_by("memory", gpu_count, directory,
                             keep=lambda record: record.get("backend") == "nccl")
    if not runs:
        where = results.results_dir() if directory is None else directory
        raise ValueError(f"directory must hold memory-<gpu>x<N>-<date>.json results of a GPU run "
                         f"(backend nccl), found none in {where}")
    return runs


def _checked_runs(runs) -> dict:
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict {gpu_count: record} as gpu_runs() "
                         f"returns it, got {runs!r:.80}")
    for count, record in runs.items():
        _gpu_rows(record)
        if isinstance(count, bool) or record.get("gpu_count") != count:
            raise ValueError(f"runs must map each GPU count to its own run, but key {count!r} "
                             f"holds a run on {record.get('gpu_count')!r} GPUs")
    return dict(sorted(runs.items()))


def gpu_scaling(runs, model="even_large", rank=0) -> list[dict]:
    """One rank's memory at each number of GPUs, wrapper by wrapper: `runs` is
    {gpu_count: record} as `gpu_runs` returns it. One dict per run and
    wrapper (runs in GPU order, wrappers in WRAPPERS order) with

    * `wrapper` and `world_size`;
    * `predicted`: (params, grads, optimizer) bytes as `predict` lays them
      out, and `measured`: the same counted on the GPU;
    * `model_states_bytes`: the predicted total;
    * `peak_bytes`, `peak_phase` and `states_share` as in `gpu_peaks`;
    * `rest_bytes`: the peak minus the measured model states, what the
      model-state arithmetic does not count;
    * `forward_bytes`: what the first forward pass added to the allocation.
    """
    out = []
    for count, record in _checked_runs(runs).items():
        rows = {r["wrapper"]: r for r in record["results"]
                if r["model"] == model and r["rank"] == rank}
        for p in gpu_peaks(record, model, rank):
            m = rows[p["wrapper"]]["measured_bytes"]
            predicted = predict(_config_of(record, model), p["wrapper"], count, rank)["layout"]
            out.append(dict(
                wrapper=p["wrapper"], world_size=count, predicted=tuple(predicted),
                measured=(m["params"], m["grads"], m["optimizer"]),
                model_states_bytes=p["model_states_bytes"], peak_bytes=p["peak_bytes"],
                peak_phase=p["peak_phase"], states_share=p["states_share"],
                rest_bytes=p["peak_bytes"] - p["measured_states_bytes"],
                forward_bytes=p["forward_bytes"]))
    return out


def gpu_rank_differences(record, model="even_large") -> list[dict]:
    """Where the allocator's readings of a rank differ from rank 0's: one dict
    per wrapper, rank and phase that differ, with `wrapper`, `rank`, `phase`
    (its label, "forward 2"), `allocated_delta_bytes` and `peak_delta_bytes`
    (that rank's reading minus rank 0's). Empty when every rank read the same."""
    reference = gpu_phases(record, model, 0)  # checks the record, the model and rank 0
    ranks = sorted({r["rank"] for r in record["results"] if r["model"] == model})
    out = []
    for rank in ranks[1:]:
        for wrapper, entries in gpu_phases(record, model, rank).items():
            for (label, now, peak), (_, now0, peak0) in zip(entries, reference[wrapper]):
                if (now, peak) != (now0, peak0):
                    out.append(dict(wrapper=wrapper, rank=rank, phase=label,
                                    allocated_delta_bytes=now - now0,
                                    peak_delta_bytes=peak - peak0))
    return out


# -----------------------------------------------------------------------------
# Writing and drawing


def format_gb(n_bytes, digits=3) -> str:
    """Bytes in decimal gigabytes, `digits` significant digits: 1.875e9 -> "1.88 GB"."""
    x = _real("n_bytes", n_bytes)
    if x < 0:
        raise ValueError(f"n_bytes must be >= 0, got {n_bytes!r}")
    digits = _count("digits", digits)
    return f"{x / GB:.{digits}g} GB"


# GPT-3 shapes (Brown et al., 2020, Table 2.1): layers, d_model, heads; the
# calculator's models. GPT-2's tokenizer, 50257 tokens.
GPT3_VOCAB = 50257
GPT3_MODELS = {
    "GPT-3 1.3B": (24, 2048, 24),
    "GPT-3 2.7B": (32, 2560, 32),
    "GPT-3 6.7B": (32, 4096, 32),
    "GPT-3 13B": (40, 5140, 40),
    "GPT-3 175B": (96, 12288, 96),
}

_PARTS = ("params", "grads", "optimizer", "activations")
_COLOURS = {"params": "C0", "grads": "C1", "optimizer": "C2", "activations": "C3"}


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


def _stacked(ax, labels, breakdowns, gpu_memory_bytes=80e9):
    import numpy as np

    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for part in _PARTS:
        heights = np.array([b[part] for b in breakdowns]) / GB
        ax.bar(x, heights, bottom=bottom, color=_COLOURS[part], label=part, width=0.7)
        bottom += heights
    for xi, total in zip(x, bottom):
        ax.text(xi, total, f"{total:.3g}", ha="center", va="bottom", fontsize=8)
    if gpu_memory_bytes:
        ax.axhline(gpu_memory_bytes / GB, color="k", ls="--", lw=1,
                   label=f"{gpu_memory_bytes / GB:g} GB GPU")
    ax.set_xticks(x, labels)
    ax.set_ylabel("GB per GPU")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot_breakdown(model="GPT-3 6.7B", dp=8, precision="mixed", seq_len=2048, micro_batch=1,
                   recompute="none", gpu_memory_bytes=80e9, ax=None):
    """Stacked bars of bytes per GPU at ZeRO stages 0-3 (the calculator's chart)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    breakdowns = [memory_breakdown(model, s, dp, precision, seq_len, micro_batch, recompute)
                  for s in ZERO_STAGES]
    _stacked(ax, ["DP (stage 0)", "ZeRO-1", "ZeRO-2", "ZeRO-3"], breakdowns, gpu_memory_bytes)
    ax.set_title(f"{model}, {dp} GPUs, {PRECISIONS[precision].name},\n"
                 f"s = {seq_len}, b = {micro_batch}, recompute: {recompute}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return ax


def plot_zero_scaling(n_params=7.5e9, dps=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
                      precision="mixed", gpu_memory_bytes=32e9, ax=None):
    """Model states per GPU against the data-parallel degree, one line per stage."""
    import matplotlib.pyplot as plt

    psi = _positive("n_params", n_params)
    dps = [_dp("dps", d) for d in dps]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    names = ["DP (stage 0)", "ZeRO-1: P_os", "ZeRO-2: P_os+g", "ZeRO-3: P_os+g+p"]
    for stage, name in zip(ZERO_STAGES, names):
        ax.plot(dps, [model_states(psi, stage, d, precision).total / GB for d in dps],
                "o-", ms=3, lw=2, label=name)
    if gpu_memory_bytes:
        ax.axhline(gpu_memory_bytes / GB, color="k", ls="--", lw=1,
                   label=f"{gpu_memory_bytes / GB:g} GB GPU")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("data-parallel degree N_d (GPUs)")
    ax.set_ylabel("model states per GPU (GB)")
    ax.set_title(f"Ψ = {psi / 1e9:g}B parameters, {PRECISIONS[precision].name}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_activations(model="GPT-3 175B", tp=8, micro_batch=1,
                     seq_lens=(512, 1024, 2048, 4096, 8192, 16384), ax=None):
    """Activation bytes of one layer against sequence length, for Korthikanti
    et al.'s forms (per GPU, tensor-parallel degree `tp`)."""
    import matplotlib.pyplot as plt

    if model not in GPT3_MODELS:
        raise ValueError(f"model must be one of {', '.join(GPT3_MODELS)}, got {model!r}")
    layers, h, a = GPT3_MODELS[model]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    forms = [("no parallelism", dict(tp=1)),
             (f"tensor parallel (t = {tp})", dict(tp=tp)),
             ("+ sequence parallel", dict(tp=tp, sequence_parallel=True)),
             ("+ selective recompute", dict(tp=tp, sequence_parallel=True, recompute="selective")),
             ("full recompute", dict(tp=tp, recompute="full"))]
    for label, kw in forms:
        ax.plot(seq_lens, [activation_bytes_per_layer(s, micro_batch, h, a, **kw) / GB
                           for s in seq_lens], "o-", ms=3, lw=2, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("sequence length s")
    ax.set_ylabel("activations per layer per GPU (GB)")
    ax.set_title(f"{model} (h = {h}, a = {a}), micro-batch {micro_batch}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_measured(rows, ax=None):
    """Measured bytes (bars) against the formula (black tick) and the layout
    prediction (white dot) for each record of `compare`, total of model states."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.6))
    rows = sorted(rows, key=lambda r: (r["world_size"], r["model"] != "even",
                                       WRAPPERS.index(r["wrapper"]), r["rank"]))
    labels, measured, formula, layout = [], [], [], []
    for r in rows:
        labels.append(f"{r['wrapper']}\n{r['model']} r{r['rank']}/{r['world_size']}")
        measured.append(np.array(r["measured"]) / 1e3)
        formula.append(sum(r["formula"]) / 1e3)
        layout.append(sum(r["layout"]) / 1e3)
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, part in enumerate(("params", "grads", "optimizer")):
        heights = np.array([m[i] for m in measured])
        ax.bar(x, heights, bottom=bottom, color=_COLOURS[part], label=f"measured {part}", width=0.75)
        bottom += heights
    ax.scatter(x, formula, marker="_", s=300, color="k", zorder=3, label="formula (even split)")
    ax.scatter(x, layout, marker="o", s=18, facecolor="white", edgecolor="k", zorder=4,
               label="layout prediction")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("kB per process (fp32 Adam)")
    ax.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def compare_table(rows) -> str:
    """A markdown table of `compare` or `gpu_compare` rows: measured kB
    (params / grads / Adam), the even-split formula, and whether the
    measurement equals the formula, only the layout prediction, or neither."""
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ValueError(f"rows must be a non-empty list of compare() rows, got {rows!r}")
    keys = ("model", "wrapper", "world_size", "rank", "measured", "formula", "layout")
    for r in rows:
        if not isinstance(r, dict) or any(k not in r for k in keys):
            raise ValueError(f"rows must be compare() rows with keys {', '.join(keys)}, got {r!r}")

    def kb(triple):
        return " / ".join(f"{x / 1e3:,.1f}" for x in triple)

    def verdict(r):
        if tuple(r["measured"]) == tuple(r["formula"]):
            return "exact"
        return "exact (layout)" if tuple(r["measured"]) == tuple(r["layout"]) else "**differs**"

    return ("| model | training | processes | rank | measured (kB: params / grads / Adam) "
            "| formula, even split | matches |\n|---|---|---|---|---|---|---|\n"
            + "\n".join(f"| {r['model']} | {r['wrapper']} | {r['world_size']} | {r['rank']} "
                        f"| {kb(r['measured'])} | {kb(r['formula'])} | {verdict(r)} |"
                        for r in rows))


def gpu_peak_table(record, model="even_large", rank=0) -> str:
    """A markdown table of `gpu_peaks`: per wrapper, the predicted model
    states, the allocator's peak, the share of the peak the states explain,
    the phase of the peak and what stays allocated after the last step beyond
    the model states (decimal GB)."""
    lines = [f"| {WRAPPER_NAMES[p['wrapper']]} | {p['model_states_bytes'] / GB:.3f} "
             f"| {p['peak_bytes'] / GB:.3f} | {100 * p['states_share']:.0f}% | {p['peak_phase']} "
             f"| {p['final_extra_bytes'] / GB:.3f} |" for p in gpu_peaks(record, model, rank)]
    return ("| training | model states, predicted (GB) | peak allocated (GB) "
            "| model states / peak | peak during | allocated after the last step "
            "beyond the model states (GB) |\n|---|---|---|---|---|---|\n" + "\n".join(lines))


def gpu_scaling_table(runs, model="even_large", rank=0) -> str:
    """A markdown table of `gpu_scaling`: per wrapper and number of GPUs, the
    model states predicted and measured, the allocator's peak, the share of
    the peak the states explain, the rest of the peak and what the first
    forward pass added (decimal GB)."""
    def cell(x):
        return f"{x / GB:.3f}"

    lines = [f"| {WRAPPER_NAMES[r['wrapper']]} | {r['world_size']} "
             f"| {' + '.join(cell(x) for x in r['predicted'])} = {cell(r['model_states_bytes'])} "
             f"| {cell(sum(r['measured']))} | {cell(r['peak_bytes'])} "
             f"| {100 * r['states_share']:.0f}% | {cell(r['rest_bytes'])} "
             f"| {cell(r['forward_bytes'])} |"
             for r in sorted(gpu_scaling(runs, model, rank),
                             key=lambda r: (WRAPPERS.index(r["wrapper"]), r["world_size"]))]
    return ("| training | GPUs | model states predicted (GB: params + grads + Adam) "
            "| measured (GB) | peak allocated (GB) | model states / peak "
            "| rest of the peak (GB) | first forward adds (GB) |\n"
            "|---|---|---|---|---|---|---|---|\n" + "\n".join(lines))


_WRAPPER_COLOURS = {"ddp": "C0", "zero1": "C1", "fsdp2": "C2"}


def plot_gpu_phases(record, model="even_large", rank=0, ax=None):
    """torch.cuda.memory_allocated after each phase (solid bars) and the peak
    during it (pale bars behind), per wrapper, for one model and rank of a GPU
    memory results file, with each wrapper's predicted model states as a
    dashed line: what the arithmetic counts against what the GPU held."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    phases = gpu_phases(record, model, rank)
    peaks = {p["wrapper"]: p for p in gpu_peaks(record, model, rank)}
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.6))
    labels = [label for label, _, _ in next(iter(phases.values()))]
    x = np.arange(len(labels))
    width = 0.8 / len(phases)
    for i, (wrapper, entries) in enumerate(phases.items()):
        colour = _WRAPPER_COLOURS[wrapper]
        offset = x + (i - (len(phases) - 1) / 2) * width
        ax.bar(offset, [peak / GB for _, _, peak in entries], width, color=colour, alpha=0.3)
        ax.bar(offset, [now / GB for _, now, _ in entries], width * 0.6, color=colour)
        ax.axhline(peaks[wrapper]["model_states_bytes"] / GB, color=colour, ls="--", lw=1.5)
    top = max(peak for entries in phases.values() for _, _, peak in entries) / GB
    ax.set_ylim(0, 1.3 * top)  # room for the legend above the bars
    ax.set_xticks(x, labels, fontsize=9)
    ax.set_ylabel("GB on the GPU (above the start)")
    n_params = sum(math.prod(s) for s in tiny_param_shapes(_config_of(record, model)))
    ax.set_title(f"{model} ({n_params / 1e6:.0f}M parameters, fp32 Adam), rank {rank}: "
                 f"{record.get('gpu', 'GPU')} x {record.get('gpu_count', '?')}, "
                 f"{record.get('date', '')}", fontsize=10)
    handles = [Patch(color=_WRAPPER_COLOURS[w], label=WRAPPER_NAMES[w]) for w in phases]
    handles += [Patch(color="grey", label="allocated after the phase"),
                Patch(color="grey", alpha=0.3, label="peak during the phase"),
                Line2D([], [], color="grey", ls="--", label="predicted model states")]
    ax.legend(handles=handles, fontsize=8, ncol=3, loc="upper left", frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def plot_gpu_scaling(runs, model="even_large", rank=0, ax=None):
    """One rank's allocator peak per wrapper at each number of GPUs: the
    measured model states stacked (parameters, gradients, Adam), the rest of
    the peak in grey above them, a black tick at the predicted model states
    and the share of the peak they explain written on top."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = gpu_scaling(runs, model, rank)
    counts = sorted({r["world_size"] for r in rows})
    wrappers = [w for w in WRAPPERS if any(r["wrapper"] == w for r in rows)]
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.6))
    width = 0.8 / len(counts)
    ticks, tick_labels = [], []
    for r in rows:
        i, j = wrappers.index(r["wrapper"]), counts.index(r["world_size"])
        x = i + (j - (len(counts) - 1) / 2) * width
        bottom = 0.0
        for part, size in zip(("params", "grads", "optimizer"), r["measured"]):
            ax.bar(x, size / GB, width * 0.9, bottom=bottom, color=_COLOURS[part])
            bottom += size / GB
        ax.bar(x, r["rest_bytes"] / GB, width * 0.9, bottom=bottom, color="0.8")
        ax.plot([x - width * 0.45, x + width * 0.45], [r["model_states_bytes"] / GB] * 2,
                color="k", lw=2)
        ax.text(x, r["peak_bytes"] / GB, f"{100 * r['states_share']:.0f}%", ha="center",
                va="bottom", fontsize=8)
        ticks.append(x)
        tick_labels.append(f"{r['world_size']} GPUs")
    ax.set_xticks(ticks, tick_labels, fontsize=8)
    for i, w in enumerate(wrappers):
        ax.text(i, -0.12, WRAPPER_NAMES[w], transform=ax.get_xaxis_transform(), ha="center",
                va="top", fontsize=10)
    top = max(r["peak_bytes"] for r in rows) / GB
    ax.set_ylim(0, 1.3 * top)  # room for the legend above the bars
    ax.set_ylabel("GB on one GPU (above the start)")
    first = _checked_runs(runs)[counts[0]]
    n_params = sum(math.prod(s) for s in tiny_param_shapes(_config_of(first, model)))
    ax.set_title(f"{model} ({n_params / 1e6:.0f}M parameters, fp32 Adam), rank {rank}: "
                 f"allocator peak on {first.get('gpu', 'GPU')}s\n"
                 "(on top: model states as a share of the peak)", fontsize=10)
    handles = [Patch(color=_COLOURS[p], label=f"measured {label}") for p, label in
               (("params", "parameters"), ("grads", "gradients"), ("optimizer", "Adam moments"))]
    handles += [Patch(color="0.8", label="rest of the peak"),
                Line2D([], [], color="k", lw=2, label="predicted model states")]
    ax.legend(handles=handles, fontsize=8, ncol=3, loc="upper left", frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def calculator():
    """An ipywidgets panel: sliders for the model, ZeRO stage, GPUs,
    precision, sequence length and recomputation, driving the stacked bar
    chart of bytes per GPU. Needs a live kernel (JupyterLab)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    model = widgets.SelectionSlider(options=list(GPT3_MODELS), value="GPT-3 6.7B", description="model")
    stage = widgets.IntSlider(3, 0, 3, description="ZeRO stage")
    gpus = widgets.SelectionSlider(options=[2 ** i for i in range(11)], value=8, description="GPUs (dp)")
    precision = widgets.Dropdown(options=[(p.name, k) for k, p in PRECISIONS.items()],
                                 value="mixed", description="precision")
    seq_len = widgets.SelectionSlider(options=[2 ** i for i in range(9, 16)], value=2048,
                                      description="seq length")
    recompute = widgets.ToggleButtons(options=RECOMPUTE, value="none", description="recompute")
    out = widgets.Output()

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            fig, ax = plt.subplots(figsize=(6, 4))
            b = memory_breakdown(model.value, stage.value, gpus.value, precision.value,
                                 seq_len.value, 1, recompute.value)
            _stacked(ax, [f"ZeRO-{stage.value}, {gpus.value} GPUs"], [b])
            ax.set_xlim(-1, 1)
            ax.legend(fontsize=8, loc="upper right")
            ax.set_title(f"{model.value}: {format_gb(sum(b.values()))} per GPU", fontsize=10)
            plt.show()

    for w in (model, stage, gpus, precision, seq_len, recompute):
        w.observe(draw, names="value")
    draw()
    return widgets.HBox([widgets.VBox([model, stage, gpus, precision, seq_len, recompute]), out])
