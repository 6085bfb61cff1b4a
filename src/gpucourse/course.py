"""The ten-week map of the course, and its figure.

The book's table of contents, the intro's map and the part pages all read
this one list, kept as data in ``data/journey.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Week:
    weeks: tuple[int, int]
    part: str
    title: str
    topics: str


PARTS = ("Foundations", "Memory and networks", "Kernels")
ROMAN = ("I", "II", "III")

# The journey itself is data (data/journey.json), one row per block of weeks.
JOURNEY_PATH = Path(__file__).with_name("data") / "journey.json"


def _read_journey() -> tuple[Week, ...]:
    rows = json.loads(JOURNEY_PATH.read_text())
    return tuple(Week(tuple(row["weeks"]), row["part"], row["title"], row["topics"])
                 for row in rows)


JOURNEY: tuple[Week, ...] = _read_journey()


def weeks_label(week: Week) -> str:
    first, last = week.weeks
    return f"Week {first}" if first == last else f"Weeks {first}-{last}"


def plot_journey(ax=None):
    """Draw the ten-week map as a timeline of coloured blocks, one row per part."""
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
