"""The ten-week map of the course, and its figure.

The book's table of contents, the intro's map and the part pages all read
this one list.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Week:
    weeks: tuple[int, int]
    part: str
    title: str
    topics: str


PARTS = ("Foundations", "Memory and networks", "Kernels")
ROMAN = ("I", "II", "III")

# A table of data, one row per block of weeks: its rows look alike by design.
JOURNEY: tuple[Week, ...] = (
    Week((1, 1), "Foundations", "HPC and parallelism",
         "Amdahl, Gustafson, roofline, the compute bill of large models, exascale"),
    Week((2, 3), "Foundations", "The seminal papers",
         "Megatron-LM, GPipe, ZeRO, GShard, Switch Transformers"),
    Week((4, 4), "Foundations", "Frameworks and communication",
         "DeepSpeed, PyTorch FSDP, Megatron-LM; communication vs computation"),
    Week((5, 5), "Memory and networks", "Memory arithmetic",
         "ZeRO/FSDP model states and activations: will it fit"),
    Week((6, 6), "Memory and networks", "3D parallelism and self-attention",
         "data, tensor and pipeline parallelism on a cluster; attention as the meeting point"),
    Week((7, 7), "Memory and networks", "The network between GPUs",
         "max-min fairness, bottleneck structures, proportional network design"),
    Week((8, 8), "Kernels", "SGEMM in Numba-CUDA",
         "naive, coalesced, shared memory, block tiling, vectorized, autotuned"),
    Week((9, 10), "Kernels", "FlashAttention in Numba-CUDA",
         "tiled online softmax, validated against PyTorch and benchmarked; the backward "
         "pass, and a tiny GPT trained on the course's own kernels"),
)


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
