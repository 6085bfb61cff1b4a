"""The TFLOP/s plot that chapters 8 and 9 share: one line per variant against a
size on a base-2 axis.

Chapter 8 plots its matrix multiplications against M = N = K and chapter 9
its attention kernels against the sequence length; both draw the same kind
of figure, so both ask this module for it, and each module keeps only what
is its own (which field is the size, how a line is labelled, which lines are
dashed). Presentation only: nothing here measures.
"""

from __future__ import annotations


def plot_tflops_lines(rows: list[dict], size: str, label_of, dashed, *, xlabel: str,
                      ylabel: str, ax=None, title: str | None = None, legend_columns: int = 1):
    """TFLOP/s of `rows` against their field `size` (powers of two, on a base-2
    axis ticked at each size the rows hold): one line per label_of(row), in the
    order the rows first name them, dashed where dashed(label) is true; rows
    without a TFLOP/s figure are left out of the lines. Returns the axes (a new
    figure's where `ax` is None)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for label in dict.fromkeys(label_of(r) for r in rows):
        points = sorted((r[size], r["tflops"]) for r in rows
                        if label_of(r) == label and r["tflops"] is not None)
        if points:
            ax.plot(*zip(*points), marker="o", label=label,
                    linestyle="--" if dashed(label) else "-")
    ticks = sorted({r[size] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(tick) for tick in ticks])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, ncol=legend_columns)
    ax.grid(alpha=0.3)
    return ax
