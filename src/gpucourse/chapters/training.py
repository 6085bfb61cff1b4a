"""What chapter 6 shows: the memory timeline of one training step and what
each technique does to it, the FLOPs and bytes of a transformer layer, which
parallelism splits which part, the ranked 3D layouts of the planner, and the
throughput of the input pipelines (which chapter 7 draws).

The measurements and models live in ``gpucourse.training`` and
``gpucourse.planner``; this module only writes them as tables and draws them,
so a student reading how a step is measured does not wade through plotting
code. matplotlib is imported inside each plotting function.
"""

from __future__ import annotations

import numpy as np

from gpucourse.checks import count as _count, positive as _positive
from gpucourse.training import StepRecord, attention_share, crossover_seq_len, layer_ops


# -----------------------------------------------------------------------------
# The anatomy of a step


def techniques_markdown(records: dict) -> str:
    """A table of the measured effects, relative to the first record."""
    base = next(iter(records.values()))
    rows = ["| step | peak activations (KiB) | vs. fp32 | peak total (KiB) | time (ms) | loss |",
            "|---|---|---|---|---|---|"]
    for name, r in records.items():
        rows.append(f"| {name} | {r.peak_activation_bytes / 1024:.0f} "
                    f"| {r.peak_activation_bytes / base.peak_activation_bytes:.2f}x "
                    f"| {r.peak_bytes / 1024:.0f} | {1e3 * r.step_s:.1f} | {r.loss:.4f} |")
    return "\n".join(rows)


_PART_COLOURS = (("params", "parameters", "C0"), ("grads", "gradients", "C1"),
                 ("optimizer", "optimizer states", "C2"), ("activations", "saved activations", "C3"))


def plot_timeline(record: StepRecord, ax=None, title=None):
    """Stacked areas of the memory the step holds, point by point."""
    import matplotlib.pyplot as plt

    if not isinstance(record, StepRecord):
        raise ValueError(f"record must be a StepRecord, got {record!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4))
    x = np.arange(len(record.points))
    stacks = [np.array([getattr(p, attr) for p in record.points]) / 1024 for attr, _, _ in _PART_COLOURS]
    ax.stackplot(x, *stacks, labels=[label for _, label, _ in _PART_COLOURS],
                 colors=[c for _, _, c in _PART_COLOURS], step="mid", alpha=0.85)
    ax.set_xticks(x, [p.label for p in record.points], rotation=70, ha="right", fontsize=7)
    ax.set_xlim(0, len(x) - 1)
    ax.set_ylabel("bytes held (KiB)")
    ax.set_title(title or f"Memory through one training step ({record.precision}, batch {record.batch})")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _finish_bar_chart(ax, xlabel, title):
    """The finish both horizontal bar charts share: labels, a legend at the
    lower right, and no frame on the top and right."""
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def plot_techniques(records: dict, ax=None):
    """Peak saved activations and peak total of each technique, side by side."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    names = list(records)
    rows = np.arange(len(names))
    act = [records[n].peak_activation_bytes / 1024 for n in names]
    tot = [records[n].peak_bytes / 1024 for n in names]
    ax.barh(rows - 0.2, tot, height=0.4, color="0.6", label="peak total held")
    ax.barh(rows + 0.2, act, height=0.4, color="C3", label="peak saved activations")
    for r, a in zip(rows, act):
        ax.text(a, r + 0.2, f" {a:.0f}", va="center", fontsize=8)
    ax.set_yticks(rows, names)
    ax.invert_yaxis()
    return _finish_bar_chart(ax, "KiB", "What each technique does to the memory of a step")

# -----------------------------------------------------------------------------
# FLOPs and bytes of one transformer layer


def layer_ops_markdown(seq_len, hidden, heads, batch=1, bytes_per_element=2) -> str:
    ops = layer_ops(seq_len, hidden, heads, batch, bytes_per_element)
    total_flops, total_bytes = sum(o.flops for o in ops), sum(o.bytes for o in ops)
    rows = ["| operation | kind | GFLOP | share of FLOPs | MB moved | share of bytes | FLOP/byte |",
            "|---|---|---|---|---|---|---|"]
    for o in ops:
        rows.append(f"| {o.name} | {o.kind} | {o.flops / 1e9:.2f} | {100 * o.flops / total_flops:.1f}% "
                    f"| {o.bytes / 1e6:.1f} | {100 * o.bytes / total_bytes:.1f}% "
                    f"| {o.intensity_flop_per_byte:.0f} |")
    return "\n".join(rows)


def plot_attention_share(hidden, heads, seq_lens=None, ax=None):
    """The attention core's share of a layer's FLOPs and bytes against the
    sequence length (log axis), with the crossover s = 6h marked."""
    import matplotlib.pyplot as plt

    h = _count("hidden", hidden)
    seq_lens = (np.unique(np.logspace(7, 18, 45, base=2).astype(int)) if seq_lens is None
                else [_count("seq_lens", s) for s in seq_lens])
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4))
    shares = [attention_share(s, h, heads) for s in seq_lens]
    ax.plot(seq_lens, [100 * x["attention_flops"] for x in shares], lw=2, label="share of FLOPs")
    ax.plot(seq_lens, [100 * x["attention_bytes"] for x in shares], lw=2, ls="--",
            label="share of DRAM bytes (unfused)")
    ax.axvline(crossover_seq_len(h), color="0.4", ls=":", lw=1, label=f"s = 6h = {6 * h}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 100)
    ax.set_xlabel("sequence length s")
    ax.set_ylabel("attention core (QKᵀ, softmax, PV), %")
    ax.set_title(f"Attention's share of a layer (h = {h}, {heads} heads)")
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


# Which parallelism splits which part of the layer (and which kernel chapter
# makes that part fast on one GPU).
PARALLELISM_MAP = (
    ("QKV projection", "TP: columns of W_qkv, i.e. whole heads, per GPU", "SGEMM (week 8)"),
    ("QK^T, softmax, PV", "TP: whole heads per GPU; sequence/context parallelism: the s axis",
     "FlashAttention (week 9)"),
    ("output projection", "TP: rows of W_o, then an all-reduce", "SGEMM (week 8)"),
    ("MLP up", "TP: columns of W_up", "SGEMM (week 8)"),
    ("MLP down", "TP: rows of W_down, then an all-reduce", "SGEMM (week 8)"),
    ("the whole layer", "PP: whole layers per stage; DP: the batch; ZeRO/FSDP: the states",
     "both"),
)


def parallelism_markdown() -> str:
    rows = ["| part of the layer | split by | made fast on one GPU by |", "|---|---|---|"]
    rows += [f"| {part} | {how} | {kernel} |" for part, how, kernel in PARALLELISM_MAP]
    return "\n".join(rows)

# -----------------------------------------------------------------------------
# The 3D-parallelism planner


def layouts_markdown(layouts, top=8) -> str:
    """The first `top` layouts as a Markdown table, for the book."""
    top = _count("top", top)
    rows = ["| rank | dp | tp | pp | order | memory/GPU (GB) | fits | compute (s) | TP comm (s) "
            "| PP comm (s) | DP comm (s) | step (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, x in enumerate(layouts[:top], 1):
        rows.append(f"| {i} | {x.dp} | {x.tp} | {x.pp} | {x.order} | {x.memory_per_gpu_bytes / 1e9:.1f} "
                    f"| {'yes' if x.fits else 'no'} | {x.compute_s:.2f} | {x.tp_comm_s:.2f} "
                    f"| {x.pp_comm_s:.2f} | {x.dp_comm_s:.2f} | {x.step_s:.2f} |")
    return "\n".join(rows)


def plot_layouts(layouts, top=12, ax=None, title=None):
    """Horizontal stacked bars of the step time (compute, TP, PP, DP traffic)
    of the first `top` layouts, fastest at the top; layouts that do not fit
    are hatched."""
    import matplotlib.pyplot as plt

    top = _count("top", top)
    chosen = list(layouts)[:top]
    if not chosen:
        raise ValueError("layouts must hold at least one Layout")
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.42 * len(chosen) + 1.4))
    parts = (("compute (with bubble)", "compute_s", "C0"), ("TP traffic", "tp_comm_s", "C3"),
             ("PP traffic", "pp_comm_s", "C2"), ("DP traffic", "dp_comm_s", "C1"))
    rows = range(len(chosen))
    left = [0.0] * len(chosen)
    for name, attr, colour in parts:
        widths = [getattr(x, attr) for x in chosen]
        bars = ax.barh(rows, widths, left=left, color=colour, label=name)
        for bar, x in zip(bars, chosen):
            if not x.fits:
                bar.set_hatch("//")
                bar.set_alpha(0.5)
        left = [a + w for a, w in zip(left, widths)]
    ax.set_yticks(list(rows), [f"{x.label}{'' if x.fits else ', does not fit'}" for x in chosen],
                  fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("estimated time per training step (s)")
    ax.set_title(title or "3D layouts ranked by estimated step time")
    ax.legend(fontsize=8, loc="upper right")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax

# -----------------------------------------------------------------------------
# The GPU/CPU bottleneck (drawn in chapter 7)


def plot_pipelines(runs, step_s, batch_size, ax=None):
    """Measured throughput of each pipeline against the accelerator's own
    limit, batch_size / step_s."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3))
    rows = np.arange(len(runs))
    rates = [r.samples_per_s for r in runs]
    ax.barh(rows, rates, color=["C3", "C1", "C2"][: len(runs)])
    for row, r in zip(rows, runs):
        ax.text(r.samples_per_s, row, f" {r.samples_per_s:.0f}/s, busy {100 * r.busy_fraction:.0f}%",
                va="center", fontsize=8)
    ceiling = _count("batch_size", batch_size) / _positive("step_s", step_s)
    ax.axvline(ceiling, color="0.3", ls="--", lw=1, label=f"accelerator limit {ceiling:.0f}/s")
    ax.set_yticks(rows, [r.name for r in runs], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, ceiling * 1.35)
    return _finish_bar_chart(ax, "samples per second (measured)",
                             "Who is the bottleneck: the input pipeline or the accelerator?")
