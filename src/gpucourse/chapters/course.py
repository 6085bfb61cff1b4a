"""What the book's introduction shows: the eleven-week map of the course, drawn
as a timeline of coloured blocks, one row per part.

The journey itself is data, read by ``gpucourse.course``; this module only
draws it. matplotlib is imported inside the plotting function.
"""

from __future__ import annotations

from gpucourse.course import JOURNEY, PARTS, ROMAN, weeks_label


def plot_journey(ax=None):
    """Draw the eleven-week map as a timeline of coloured blocks, one row per part."""
    import textwrap

    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.2))
    colours = {"Foundations": "#4C72B0", "Memory and networks": "#DD8452", "Kernels": "#55A868"}
    for week in JOURNEY:
        first, last = week.weeks
        span = last - first + 1
        row = len(PARTS) - 1 - PARTS.index(week.part)
        ax.barh(row, span, left=first - 0.5, height=0.86,
                color=colours[week.part], edgecolor="white", linewidth=3)
        title = textwrap.fill(week.title, width=10 * span, break_long_words=False)
        ax.text((first + last) / 2, row + 0.1, title, ha="center", va="center",
                fontsize=9.5, fontweight="bold", color="white", linespacing=1.1)
        ax.text((first + last) / 2, row - 0.3, weeks_label(week), ha="center", va="center",
                fontsize=8.5, color="white")
    ax.set_yticks(range(len(PARTS)),
                  [f"Part {ROMAN[i]}\n{part}" for i, part in reversed(list(enumerate(PARTS)))])
    ax.set_xticks(range(1, 11))
    ax.set_xlim(0.5, 10.5)
    ax.set_ylim(-0.5, len(PARTS) - 0.5)
    ax.set_xlabel("week")
    ax.set_title("Ten weeks from parallelism theory to FlashAttention")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    return ax
