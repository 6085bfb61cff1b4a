"""What chapters 2 and 3 show: the figures of tensor parallelism, pipeline
schedules, mixture-of-experts routing and the ZeRO stages.

The models live in ``gpucourse.parallelism``; this module only draws them.
matplotlib is imported inside each plotting function.
"""

from __future__ import annotations

import numpy as np

from gpucourse.checks import count as _count, finite_array as _array
from gpucourse.parallelism.pipeline import PipelineRun, simulate_pipeline, gpipe_bubble_fraction
from gpucourse.parallelism.experts import Routing, dropped_fractions
from gpucourse.parallelism.zero import TRAINING_STATES, ZERO_SHARDED, ZERO_FIGURE_BYTES_PER_PARAM


def plot_megatron_mlp(world_size=2, ax=None):
    """A picture of the Megatron-LM MLP split: X whole on every rank, A cut
    by columns, each rank's slice of Y, B cut by rows, the partial sums of Z,
    and the one all-reduce that adds them."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    world_size = _count("world_size", world_size)
    if world_size > 8:
        raise ValueError(f"world_size must be at most 8 to stay legible, got {world_size}")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 3.4))
    colours = [f"C{r}" for r in range(world_size)]

    def box(x, y, w, h, colour, label=None, alpha=0.75, hatch=None):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="0.2", lw=0.8,
                               alpha=alpha, hatch=hatch))
        if label:
            ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=8)

    def arrow(x0, x1, y, text):
        ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="->", mutation_scale=12,
                                     color="0.3"))
        ax.text((x0 + x1) / 2, y + 0.12, text, ha="center", va="bottom", fontsize=8)

    height = 2.0
    box(0.0, 0.0, 0.8, height, "0.8", "X\n(whole,\nevery rank)")
    # A (h x 4h) cut by columns: one vertical band per rank.
    band = 1.6 / world_size
    for r in range(world_size):
        box(1.2 + r * band, 0.0, band, height, colours[r], f"A{r + 1}")
    ax.text(2.0, height + 0.1, "A: column-parallel", ha="center", fontsize=9)
    arrow(3.0, 3.5, 1.0, "GeLU")
    for r in range(world_size):
        box(3.7 + r * band, 0.0, band, height, colours[r], f"Y{r + 1}")
    ax.text(4.5, height + 0.1, "Y = GeLU(X A): split, no talk", ha="center", fontsize=9)
    # B (4h x h) cut by rows: one horizontal band per rank.
    rows = height / world_size
    for r in range(world_size):
        box(5.7, height - (r + 1) * rows, 1.2, rows, colours[r], f"B{r + 1}")
    ax.text(6.3, height + 0.1, "B: row-parallel", ha="center", fontsize=9)
    for r in range(world_size):
        box(7.3, height - (r + 1) * rows, 0.8, rows, colours[r], f"Y{r + 1} B{r + 1}",
            alpha=0.45, hatch="//")
    ax.text(7.7, height + 0.1, "partial sums", ha="center", fontsize=9)
    arrow(8.25, 8.95, 1.0, "all-reduce")
    box(9.1, 0.0, 0.8, height, "0.8", "Z\n(whole,\nevery rank)")
    ax.set_xlim(-0.1, 10.0)
    ax.set_ylim(-0.2, height + 0.5)
    ax.set_aspect("auto")
    ax.axis("off")
    ax.set_title(f"Megatron-LM MLP on {world_size} GPUs: one all-reduce in the forward pass",
                 fontsize=10)
    return ax


def plot_pipeline(run, ax=None, title=None):
    """A Gantt chart of a simulated schedule: one row per stage, forward
    passes in blue, backward passes in orange, idle time left blank."""
    import matplotlib.pyplot as plt

    if not isinstance(run, PipelineRun):
        raise ValueError(f"run must be a PipelineRun from simulate_pipeline, got {type(run).__name__}")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.55 * run.stages + 1.4))
    colours = {"F": "#4C72B0", "B": "#DD8452"}
    for op in run.ops:
        ax.barh(op.stage, op.end_s - op.start_s, left=op.start_s, height=0.8,
                color=colours[op.kind], edgecolor="white", linewidth=0.8)
        if run.micro_batches <= 16:
            ax.text((op.start_s + op.end_s) / 2, op.stage, str(op.micro_batch + 1),
                    ha="center", va="center", color="white", fontsize=7)
    ax.set_yticks(range(run.stages), [f"stage {s}" for s in range(run.stages)])
    ax.invert_yaxis()
    ax.set_xlim(0, run.total_time_s)
    ax.set_xlabel("time (one forward pass of one micro-batch = 1)")
    name = {"gpipe": "GPipe", "1f1b": "1F1B"}[run.schedule]
    ax.set_title(title or f"{name}: {run.stages} stages, {run.micro_batches} micro-batches, "
                          f"bubble {100 * run.bubble_fraction:.1f}%, "
                          f"at most {run.peak_in_flight()} micro-batches in flight", fontsize=10)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colours["F"], label="forward"),
                       Patch(color=colours["B"], label="backward")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def plot_bubble_fraction(stage_counts=(2, 4, 8, 16), max_micro_batches=64, ax=None):
    """The bubble fraction against the number of micro-batches, for several
    pipeline depths: the formula as lines, the simulator as dots."""
    import matplotlib.pyplot as plt

    max_m = _count("max_micro_batches", max_micro_batches)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    m = np.arange(1, max_m + 1)
    for colour, p in enumerate(stage_counts):
        p = _count("stage_counts", p)
        ax.plot(m, gpipe_bubble_fraction(p, m), color=f"C{colour}", label=f"p = {p} stages")
        sample = [x for x in (1, 2, 4, 8, 16, 32, 64, 128) if x <= max_m]
        ax.scatter(sample, [simulate_pipeline(p, x, "1f1b").bubble_fraction for x in sample],
                   color=f"C{colour}", s=18, zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("idle share of the step")
    ax.set_ylim(0, 1)
    ax.set_title("Bubble (p-1)/(m+p-1): lines from the formula, dots from the simulator (1F1B)",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


def plot_in_flight(runs, stage=0, ax=None):
    """Micro-batches held in flight on one stage over one step, for several
    simulated schedules: what the stage must keep activations for."""
    import matplotlib.pyplot as plt

    if not runs or not all(isinstance(r, PipelineRun) for r in runs):
        raise ValueError("runs must be a non-empty list of PipelineRun from simulate_pipeline")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    for colour, run in enumerate(runs):
        times, counts = run.in_flight(stage)
        name = {"gpipe": "GPipe", "1f1b": "1F1B"}[run.schedule]
        ax.step(times, counts, where="post", color=f"C{colour}", lw=2,
                label=f"{name} (peak {counts.max()})")
    ax.set_xlabel("time (one forward pass of one micro-batch = 1)")
    ax.set_ylabel(f"micro-batches held on stage {stage}")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


def plot_tokens_per_expert(routing, ax=None):
    """Tokens each expert accepted, the dropped ones stacked on top, and the
    capacity as a line."""
    import matplotlib.pyplot as plt

    if not isinstance(routing, Routing):
        raise ValueError(f"routing must be a Routing from route_tokens, got {type(routing).__name__}")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    wanted = np.bincount(routing.choices.ravel(), minlength=routing.experts)
    experts = np.arange(routing.experts)
    ax.bar(experts, routing.tokens_per_expert, color="C0", label="accepted")
    ax.bar(experts, wanted - routing.tokens_per_expert, bottom=routing.tokens_per_expert,
           color="C3", alpha=0.6, label="dropped")
    ax.axhline(routing.capacity, color="0.2", ls="--", lw=1,
               label=f"capacity = {routing.capacity}")
    ax.set_xticks(experts)
    ax.set_xlabel("expert")
    ax.set_ylabel("tokens")
    ax.set_title(f"top-{routing.k}, {routing.tokens} tokens: {routing.dropped} of "
                 f"{routing.tokens * routing.k} assignments dropped, "
                 f"load-balancing loss {routing.load_balancing_loss:.2f}", fontsize=10)
    ax.legend(fontsize=8)
    return ax


def plot_capacity_sweep(router_logits, capacity_factors=None, ks=(1, 2), ax=None):
    """Share of assignments dropped against the capacity factor, one line per k."""
    import matplotlib.pyplot as plt

    if capacity_factors is None:
        capacity_factors = np.linspace(0.25, 2.5, 46)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    factors = _array("capacity_factors", capacity_factors, ndim=1)
    for colour, k in enumerate(ks):
        ax.plot(factors, 100 * dropped_fractions(router_logits, factors, k), color=f"C{colour}",
                lw=2, label=f"top-{k}" + (" (Switch)" if k == 1 else " (GShard)" if k == 2 else ""))
    ax.axvline(1.0, color="0.5", lw=1, ls=":")
    ax.set_xlabel("capacity factor")
    ax.set_ylabel("assignments dropped (%)")
    ax.set_title("More room per expert drops fewer tokens (and pads more)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


def plot_zero_stages(gpus=4, ax=None):
    """Each GPU's memory under data parallelism and ZeRO stages 1-3: a full
    bar for a state every GPU replicates, a 1/N slice (with the slice
    number) for a state that is sharded."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    gpus = _count("gpus", gpus)
    if gpus > 16:
        raise ValueError(f"gpus must be at most 16 to stay legible, got {gpus}")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.0 + 0.32 * 4 * (gpus + 1.4)))
    colours = {"parameters": "#4C72B0", "gradients": "#55A868", "optimizer states": "#DD8452"}
    sizes = ZERO_FIGURE_BYTES_PER_PARAM
    total = sum(sizes.values())
    names = ["data parallel (no sharding)", "ZeRO stage 1: P_os", "ZeRO stage 2: P_os+g",
             "ZeRO stage 3: P_os+g+p"]
    y = 0.0
    ticks, labels = [], []
    for stage in range(4):
        ax.text(0, y - 0.35, names[stage], fontsize=10, fontweight="bold", va="bottom")
        y += 0.55
        for g in range(gpus):
            x = 0.0
            for state in TRAINING_STATES:
                width = sizes[state] / total
                sharded = state in ZERO_SHARDED[stage]
                # The full extent in a faint outline, the part this GPU keeps filled.
                ax.add_patch(Rectangle((x, y), width, 0.8, facecolor="none",
                                       edgecolor=colours[state], lw=0.6, ls=":"))
                keep_x, keep_w = (x + width * g / gpus, width / gpus) if sharded else (x, width)
                ax.add_patch(Rectangle((keep_x, y), keep_w, 0.8, facecolor=colours[state],
                                       edgecolor="white", lw=0.5))
                x += width
            ticks.append(y + 0.4)
            labels.append(f"GPU {g}")
            y += 1.0
        y += 0.9
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(y - 0.6, -0.6)
    ax.set_xticks([])
    ax.set_xlabel("widths to scale for mixed-precision Adam: 2 + 2 + 12 bytes per parameter "
                  "(Rajbhandari et al. 2020); dotted: the full state, filled: what this GPU keeps",
                  fontsize=8)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.legend(handles=[Patch(color=colours[s], label=s) for s in TRAINING_STATES],
              loc="upper center", bbox_to_anchor=(0.5, 1.06), ncol=3, fontsize=8, frameon=False)
    return ax
