"""What chapter 10 shows: the loss curves of the committed GPU run of the tiny
GPT, a panel per seed, and its summary as a markdown table.

The model, its training and the readers of ``benchmarks/results/tinygpt*.json``
live in ``gpucourse.tinygpt``; this module only draws and writes what they
read. matplotlib is imported inside the plotting function.
"""

from __future__ import annotations

import numpy as np

from gpucourse.tinygpt import LEARNED_WINDOW, RUN_LABELS


# -----------------------------------------------------------------------------
# The committed GPU run (benchmarks/tinygpt.py)


def plot_runs(record, ax=None):
    """Every run's loss against the step, a panel per seed (a 50-step running
    mean; the loss is on a log scale, down to where the model has learned)."""
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in record["results"]})
    if ax is None:
        _, ax = plt.subplots(1, len(seeds), figsize=(5.5 * len(seeds), 3.8), sharey=True,
                             squeeze=False)
        ax = ax[0]
    panels = np.atleast_1d(ax)
    window = LEARNED_WINDOW
    for panel, seed in zip(panels, seeds):
        for i, r in enumerate(x for x in record["results"] if x["seed"] == seed):
            smooth = np.convolve(r["loss"], np.ones(window) / window, mode="valid")
            panel.plot(np.arange(window - 1, len(r["loss"])), smooth, color=f"C{i}",
                       label=RUN_LABELS.get(r["run"], r["run"]))
        panel.set_yscale("log")
        panel.set_ylim(1e-5, 5)
        panel.set_xlabel("step")
        panel.set_title(f"seed {seed}")
    panels[0].set_ylabel(f"loss on the sums ({window}-step mean)")
    panels[0].legend(fontsize=8)
    return ax


def summary_markdown(rows) -> str:
    """``run_summary``'s rows as a markdown table, one line per run."""
    header = ("| run | seed | learned at step | final loss | held-out sums right | ms a step | "
              "step time / PyTorch's |\n|---|---|---|---|---|---|---|\n")
    return header + "\n".join(
        f"| {r['label']} | {r['seed']} | "
        f"{r['steps_to_learn'] if r['steps_to_learn'] is not None else 'not yet'} "
        f"| {r['final_loss']:.1e} | {r['accuracy']:.1%} | {r['median_step_ms']:.1f} "
        f"| {r['step_time_vs_pytorch']:.2f} |" for r in rows)
