"""What chapter 5 shows: the memory figures and tables, the calculator widget,
and the readers of the GPU measurements in ``benchmarks/results``
(``memory_gpu*.json``).

The models live in ``gpucourse.memory``; this module reads what
``benchmarks/memory_gpu.py`` measured, compares it with the predictions, and
writes the chapter's tables and figures. matplotlib is imported inside each
plotting function and ipywidgets inside the calculator.
"""

from __future__ import annotations

import math
from pathlib import Path

from gpucourse.checks import count as _count, positive as _positive, real as _real
from gpucourse.memory.model_states import GB, ZERO_STAGES, _dp, PRECISIONS, model_states
from gpucourse.memory.sizing import (
    RECOMPUTE, activation_bytes_per_layer, GPT3_MODELS, memory_breakdown,
)
from gpucourse.memory.measure import tiny_param_shapes, WRAPPERS, predict, _gpu_rows, _config_of


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

    return results.newest_by("memory", gpu_count, directory,
                             keep=lambda record: record.get("backend") == "nccl",
                             what="memory-<gpu>x<N>-<date>.json results of a GPU run "
                                  "(backend nccl)")


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


_PARTS = ("params", "grads", "optimizer", "activations")
_COLOURS = {"params": "C0", "grads": "C1", "optimizer": "C2", "activations": "C3"}


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


def _log_lines_axes(ax, xlabel, ylabel, title):
    """The axes both line figures share: x in powers of two written plainly,
    y logarithmic, a small legend and a light grid."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
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
    return _log_lines_axes(ax, "data-parallel degree N_d (GPUs)", "model states per GPU (GB)",
                           f"Ψ = {psi / 1e9:g}B parameters, {PRECISIONS[precision].name}")


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
    return _log_lines_axes(ax, "sequence length s", "activations per layer per GPU (GB)",
                           f"{model} (h = {h}, a = {a}), micro-batch {micro_batch}")


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
