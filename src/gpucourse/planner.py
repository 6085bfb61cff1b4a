"""Week 6: a 3D-parallelism planner.

Given a cluster (nodes of GPUs, a fast link inside a node and a slower one
between nodes) and a GPT-style model, which (dp, tp, pp) layouts are valid,
which fit in memory, and which is fastest?

Each layout places the GPUs' ranks in a grid of dp x tp x pp and an *order*
that says which dimension is innermost ("tp-pp-dp": tensor-parallel groups
are neighbouring ranks, then pipeline stages, with data-parallel replicas
outermost, as in Megatron-LM; Narayanan et al., 2021). Neighbouring ranks
share a node, so the order decides which groups talk over NVLink and which
over the inter-node network. For each layout the planner estimates, per
training step:

* compute: the model's FLOPs over all GPUs at the GPUs' peak times an MFU,
  stretched by the bubble ratio (p - 1) / m of the 1F1B schedule with m
  micro-batches (Narayanan et al., 2021);
* tensor-parallel traffic: four all-reduces of the activations per layer
  and micro-batch (Shoeybi et al., 2019);
* pipeline traffic: one activation sent forward and one gradient sent back
  per micro-batch at each stage boundary;
* data-parallel traffic: a ring all-reduce of the gradients once per step
  (1.5 times that under ZeRO-3; Rajbhandari et al., 2020);
* memory per GPU: mixed-precision Adam's 16 bytes per parameter, divided by
  tp x pp (and by dp for what ZeRO shards), plus the activations of
  Korthikanti et al. (2022). Under 1F1B the first stage holds p micro-batches
  of L / p layers: L layers' worth, whatever p is.

Communication is added to compute, not overlapped with it: the estimate is a
pessimist's, good for ranking layouts rather than for predicting to the
second. The formulas are shared with the other chapters: the layer FLOPs and
the alpha-beta model come from `gpucourse.collectives`, the parameter count,
activation bytes and model states from `gpucourse.memory`.

Units: bytes, seconds, bytes per second (one direction of a link, per GPU),
FLOP/s. Every public function checks its arguments and raises ``ValueError``
naming the argument and what it accepts. Only numpy is imported here.

The table and the figure of the ranked layouts live with the rest of the
chapter's figures in ``gpucourse.chapters.training``; they are still
importable from here, as ``gpucourse.planner.NAME``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from gpucourse.collectives import (H100_BF16_DENSE_FLOPS_PER_S, INTERCONNECTS, alpha_beta_time_s,
                                   data_parallel_comm_bytes, transformer_layer_flops)
from gpucourse.checks import (at_least as _at_least, count as _count, fraction as _fraction,
                              positive as _positive)
from gpucourse.memory import RECOMPUTE, activation_bytes_per_layer, gpt_params, model_states
from gpucourse.moved import served_from

BYTES_PER_ACTIVATION = 2  # bf16 activations and gradients travel between GPUs
DIMENSIONS = ("tp", "pp", "dp")
ORDERS = tuple("-".join(p) for p in itertools.permutations(DIMENSIONS))
RULE_OF_THUMB_ORDER = "tp-pp-dp"

# -----------------------------------------------------------------------------
# Clusters and models


@dataclass(frozen=True)
class Cluster:
    """Nodes of GPUs joined by a network. Bandwidths are per GPU, one direction."""

    nodes: int
    gpus_per_node: int
    intra_node_bytes_per_s: float  # e.g. NVLink
    inter_node_bytes_per_s: float  # e.g. one InfiniBand adapter per GPU
    gpu_memory_bytes: float
    gpu_flops_per_s: float  # dense peak in the training precision
    mfu: float = 0.5  # the share of peak the arithmetic sustains
    intra_node_latency_s: float = 0.0
    inter_node_latency_s: float = 0.0

    def __post_init__(self):
        _count("nodes", self.nodes)
        _count("gpus_per_node", self.gpus_per_node)
        _positive("intra_node_bytes_per_s", self.intra_node_bytes_per_s)
        _positive("inter_node_bytes_per_s", self.inter_node_bytes_per_s)
        _positive("gpu_memory_bytes", self.gpu_memory_bytes)
        _positive("gpu_flops_per_s", self.gpu_flops_per_s)
        _fraction("mfu", self.mfu, open_at_zero=True)
        _at_least("intra_node_latency_s", self.intra_node_latency_s, 0)
        _at_least("inter_node_latency_s", self.inter_node_latency_s, 0)

    @property
    def gpus(self) -> int:
        return int(self.nodes) * int(self.gpus_per_node)


@dataclass(frozen=True)
class Model:
    """A GPT-style transformer and the batch of one training step."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int = 1  # sequences per pipeline micro-batch
    vocab: int = 51200

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "global_batch", "micro_batch", "vocab"):
            _count(name, getattr(self, name))
        if self.hidden % self.heads:
            raise ValueError(f"heads must divide hidden ({self.hidden}), got heads={self.heads}")

    @property
    def params(self) -> int:
        return gpt_params(self.hidden, self.layers, self.vocab)

    @property
    def step_flops(self) -> float:
        """FLOPs of one step, forward and backward: L transformer layers plus the
        logits layer, 6 b s h V (Narayanan et al., 2021, section 5.1)."""
        layers = self.layers * transformer_layer_flops(self.global_batch, self.seq_len, self.hidden)
        return layers + 6 * self.global_batch * self.seq_len * self.hidden * self.vocab


def h100_cluster(nodes=16, mfu=0.5) -> Cluster:
    """Nodes of 8 H100 SXM joined by NVLink 4 inside a node and one 400 Gb/s
    InfiniBand NDR adapter per GPU between nodes (the DGX H100 design), bf16."""
    return Cluster(nodes=nodes, gpus_per_node=8,
                   intra_node_bytes_per_s=INTERCONNECTS["NVLink 4 (H100)"].bandwidth_bytes_per_s,
                   inter_node_bytes_per_s=INTERCONNECTS["InfiniBand NDR"].bandwidth_bytes_per_s,
                   gpu_memory_bytes=80e9, gpu_flops_per_s=H100_BF16_DENSE_FLOPS_PER_S, mfu=mfu)


# GPT-3 175B (Brown et al., 2020, Table 2.1): 96 layers, d_model 12288, 96
# heads, context 2048. The paper's batch is 3.2M tokens; we take the 1536
# sequences of 2048 (3.1M tokens) that Narayanan et al. (2021, Table 1) use
# for the same model.
GPT3_175B = Model(layers=96, hidden=12288, heads=96, seq_len=2048, global_batch=1536)

# -----------------------------------------------------------------------------
# Placing ranks


def _order(order) -> tuple[str, ...]:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    return tuple(order.split("-"))


def group_strides(dp, tp, pp, order=RULE_OF_THUMB_ORDER) -> dict:
    """The rank distance between neighbours of each group: the innermost
    dimension has stride 1, the next the size of the first, and so on."""
    sizes = {"dp": _count("dp", dp), "tp": _count("tp", tp), "pp": _count("pp", pp)}
    strides, stride = {}, 1
    for dim in _order(order):
        strides[dim] = stride
        stride *= sizes[dim]
    return strides


def group_within_node(size, stride, gpus_per_node) -> bool:
    """Whether a group of `size` ranks, `stride` apart, always sits in one node.

    Its members span size x stride consecutive ranks; they share a node when
    that span fits in a node and tiles it evenly (so no group straddles a
    node boundary). A group of one rank needs no link at all.
    """
    size, stride = _count("size", size), _count("stride", stride)
    per_node = _count("gpus_per_node", gpus_per_node)
    span = size * stride
    return size == 1 or (span <= per_node and per_node % span == 0)


# -----------------------------------------------------------------------------
# One layout


@dataclass(frozen=True)
class Layout:
    """One (dp, tp, pp) layout, placed in `order`, and its estimated step."""

    dp: int
    tp: int
    pp: int
    order: str
    micro_batches: int  # per pipeline, per step
    within_node: dict  # dimension -> does its group stay inside a node?
    params_per_gpu: float
    memory_per_gpu_bytes: float
    fits: bool
    compute_s: float  # with the pipeline bubble
    bubble_ratio: float  # (pp - 1) / m: idle time over the ideal compute time
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def comm_s(self) -> float:
        return self.tp_comm_s + self.pp_comm_s + self.dp_comm_s

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s

    @property
    def label(self) -> str:
        return f"dp={self.dp} tp={self.tp} pp={self.pp} ({self.order})"


def _link(cluster: Cluster, within: bool) -> tuple[float, float]:
    if within:
        return cluster.intra_node_latency_s, cluster.intra_node_bytes_per_s
    return cluster.inter_node_latency_s, cluster.inter_node_bytes_per_s


def check_layout(cluster: Cluster, model: Model, dp, tp, pp) -> tuple[int, int, int]:
    """Validate a layout, raising ValueError that says what is accepted."""
    dp, tp, pp = _count("dp", dp), _count("tp", tp), _count("pp", pp)
    if model.heads % tp:
        raise ValueError(f"tp must divide heads ({model.heads}), got tp={tp}")
    if model.layers % pp:
        raise ValueError(f"pp must divide layers ({model.layers}), got pp={pp}")
    if model.global_batch % (dp * model.micro_batch):
        raise ValueError(f"dp x micro_batch must divide global_batch ({model.global_batch}), "
                         f"got dp={dp} with micro_batch={model.micro_batch}")
    if dp * tp * pp > cluster.gpus:
        raise ValueError(f"dp x tp x pp must be at most the cluster's GPUs ({cluster.gpus}), "
                         f"got {dp} x {tp} x {pp} = {dp * tp * pp}")
    return dp, tp, pp


def evaluate_layout(cluster: Cluster, model: Model, dp, tp, pp, order=RULE_OF_THUMB_ORDER,
                    zero_stage=0, recompute="selective") -> Layout:
    """Estimate one layout's step time and memory per GPU (see the module docstring)."""
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a Cluster, got {cluster!r}")
    if not isinstance(model, Model):
        raise ValueError(f"model must be a Model, got {model!r}")
    dp, tp, pp = check_layout(cluster, model, dp, tp, pp)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    strides = group_strides(dp, tp, pp, order)
    sizes = {"dp": dp, "tp": tp, "pp": pp}
    within = {d: group_within_node(sizes[d], strides[d], cluster.gpus_per_node) for d in DIMENSIONS}
    gpus = dp * tp * pp
    m = model.global_batch // (dp * model.micro_batch)
    s, h, b = model.seq_len, model.hidden, model.micro_batch

    # Compute, stretched by the 1F1B bubble.
    bubble = (pp - 1) / m
    ideal_s = model.step_flops / (gpus * cluster.gpu_flops_per_s * cluster.mfu)
    compute_s = ideal_s * (1 + bubble)

    activation = b * s * h * BYTES_PER_ACTIVATION  # one micro-batch's b x s x h tensor
    layers_per_stage = model.layers // pp
    tp_comm_s = pp_comm_s = dp_comm_s = 0.0
    if tp > 1:
        latency, bandwidth = _link(cluster, within["tp"])
        one = alpha_beta_time_s(activation, tp, latency, bandwidth)
        tp_comm_s = 4 * layers_per_stage * m * one
    if pp > 1:
        latency, bandwidth = _link(cluster, within["pp"])
        pp_comm_s = 2 * m * (latency + activation / bandwidth)
    params_per_gpu = model.params / (tp * pp)
    if dp > 1:
        latency, bandwidth = _link(cluster, within["dp"])
        sent = data_parallel_comm_bytes(params_per_gpu, dp, BYTES_PER_ACTIVATION, zero_stage)
        dp_comm_s = 2 * (dp - 1) * latency + sent / bandwidth

    states = model_states(params_per_gpu, zero_stage, dp, "mixed").total
    per_layer = activation_bytes_per_layer(s, b, h, model.heads, tp, recompute=recompute)
    in_flight = min(pp, m)  # micro-batches the first stage holds under 1F1B
    memory = states + per_layer * layers_per_stage * in_flight
    return Layout(dp, tp, pp, order, m, within, params_per_gpu, memory,
                  memory <= cluster.gpu_memory_bytes, compute_s, bubble, tp_comm_s, pp_comm_s,
                  dp_comm_s)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _normal_order(order: str, sizes: dict) -> str:
    """Dimensions of size 1 do not change the placement: drop them to find duplicates."""
    return "-".join(d for d in order.split("-") if sizes[d] > 1)


def plan_layouts(cluster: Cluster, model: Model, use_all_gpus=True, orders=ORDERS, zero_stage=0,
                 recompute="selective", only_fitting=False) -> list[Layout]:
    """Every valid layout, ranked: those that fit in memory first, fastest first.

    Valid: tp divides the heads, pp the layers, dp x micro_batch the global
    batch, and dp x tp x pp equals the cluster's GPUs (or, with
    `use_all_gpus=False`, is at most that). Each layout is tried in each of
    `orders`; orders that put the same groups inside or across nodes cost
    the same and are listed once, under the first of them in `orders`.
    """
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a Cluster, got {cluster!r}")
    if not isinstance(model, Model):
        raise ValueError(f"model must be a Model, got {model!r}")
    if not isinstance(use_all_gpus, bool):
        raise ValueError(f"use_all_gpus must be True or False, got {use_all_gpus!r}")
    orders = [orders] if isinstance(orders, str) else list(orders)
    for order in orders:
        _order(order)
    if not orders:
        raise ValueError(f"orders must name at least one of {', '.join(ORDERS)}")
    layouts, seen = [], set()
    totals = [cluster.gpus] if use_all_gpus else range(1, cluster.gpus + 1)
    for total in totals:
        for tp in _divisors(total):
            if model.heads % tp:
                continue
            for pp in _divisors(total // tp):
                dp = total // (tp * pp)
                if model.layers % pp or model.global_batch % (dp * model.micro_batch):
                    continue
                for order in orders:
                    layout = evaluate_layout(cluster, model, dp, tp, pp, order, zero_stage,
                                             recompute)
                    # Orders that put the same groups on the same links cost the
                    # same: keep the first (the rule of thumb's, when asked for).
                    key = (dp, tp, pp, tuple(sorted(layout.within_node.items())))
                    if key in seen:
                        continue
                    seen.add(key)
                    if layout.fits or not only_fitting:
                        layouts.append(layout)
    layouts.sort(key=lambda x: (not x.fits, x.step_s, x.memory_per_gpu_bytes))
    return layouts


def follows_rule_of_thumb(layout: Layout, cluster: Cluster) -> bool:
    """Tensor parallelism inside a node, pipeline across nodes, data outermost.

    True when the tensor-parallel group stays inside one node and the ranks
    are placed tp innermost, dp outermost ("tp-pp-dp", or an order that
    places them identically because some dimension is 1).
    """
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {layout!r}")
    sizes = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp}
    same_place = (_normal_order(layout.order, sizes)
                  == _normal_order(RULE_OF_THUMB_ORDER, sizes))
    return layout.within_node["tp"] and layout.tp <= cluster.gpus_per_node and same_place


# The table and the figure of the layouts live with chapter 6
# (gpucourse.chapters.training), which imports the planner; served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.training", (
    'layouts_markdown', 'plot_layouts',
))
