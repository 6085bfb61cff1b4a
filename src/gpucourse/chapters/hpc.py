"""What chapter 1 shows: the figures of the speed-up laws, the roofline, the
TOP500 trend and the energy of data movement, and the formatters that write
its numbers for the prose.

The models live in ``gpucourse.hpc``; this module only draws and writes them,
so a student reading a law does not wade through plotting code. matplotlib is
imported inside each plotting function.
"""

from __future__ import annotations

import numpy as np

from gpucourse.checks import (
    at_least as _at_least, count as _count, fraction as _fraction, positive as _positive,
    real as _real,
)
from gpucourse.hpc.speedup import amdahl_speedup, amdahl_limit, gustafson_speedup
from gpucourse.hpc.roofline import roofline, GPUS, example_workloads
from gpucourse.hpc.scale import (
    EXASCALE_FLOPS_PER_S, ZETTASCALE_FLOPS_PER_S, TOP500_NUMBER_ONE, CRAY_1_YEAR,
    CRAY_1_PEAK_FLOPS_PER_S, top500_trend, ENERGY_45NM_PJ,
)


# -----------------------------------------------------------------------------
# Writing numbers for the prose

_SI_PREFIXES = ((1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
                (1e3, "k"))
_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_si(value, unit, digits=4) -> str:
    """1.102e18, "FLOP/s" -> "1.102 EFLOP/s"; `digits` significant digits."""
    x = _at_least("value", value, 0)
    digits = _count("digits", digits)
    scale, prefix = next(((s, p) for s, p in _SI_PREFIXES if x >= s), (1, ""))
    return f"{x / scale:.{digits}g} {prefix}{unit}"


def format_flops(flops_per_s, digits=4) -> str:
    """A rate in FLOP/s with an SI prefix: 59.7e9 -> "59.7 GFLOP/s"."""
    _at_least("flops_per_s", flops_per_s, 0)
    return format_si(flops_per_s, "FLOP/s", digits)


def format_sci(value, digits=3) -> str:
    """3.15e23 -> "3.15 × 10²³", for numbers too large for SI prefixes."""
    x = _real("value", value)
    digits = _count("digits", digits)
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    return f"{mantissa} × 10{str(int(exponent)).translate(_SUPERSCRIPTS)}"


def _plain_log2_ticks(ax):
    """Label base-2 log axes 1, 4, 16, ... rather than 2^0, 2^2, 2^4."""
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)


def _speedup_figure(parallel_fractions, max_workers, ax):
    """What both speed-up figures start from: the checked fractions and
    worker count, 200 worker counts spaced evenly on a log scale from 1 to
    `max_workers`, and the axes to draw on (a new figure if `ax` is None)."""
    import matplotlib.pyplot as plt

    max_workers = _at_least("max_workers", max_workers, 2)
    fractions = [_fraction("parallel_fractions", p) for p in parallel_fractions]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    workers = np.logspace(0, np.log10(max_workers), 200)
    return fractions, max_workers, workers, ax


def _workers_axes(ax, max_workers, ylabel):
    """Both axes in powers of two from 1 to `max_workers`, written plainly."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(1, max_workers)
    ax.set_ylim(1, max_workers)
    ax.set_xlabel("workers n")
    ax.set_ylabel(ylabel)
    _plain_log2_ticks(ax)


def plot_amdahl(parallel_fractions=(0.5, 0.9, 0.95, 0.99, 0.999), max_workers=65536, ax=None):
    """Amdahl speed-up against workers (log-log), one curve per parallel fraction,
    each with its ceiling 1 / (1 - p) dotted."""
    fractions, max_workers, workers, ax = _speedup_figure(parallel_fractions, max_workers, ax)
    for p in fractions:
        line, = ax.plot(workers, amdahl_speedup(p, workers), lw=2, label=f"p = {p:g}")
        if p < 1:
            ax.axhline(amdahl_limit(p), color=line.get_color(), lw=1, ls=":")
    ax.plot(workers, workers, color="0.5", lw=1, ls="--", label="ideal (p = 1)")
    _workers_axes(ax, max_workers, "speed-up S(n)")
    ax.set_title("Amdahl's law: a fixed job, more workers")
    ax.legend(title="parallel fraction", loc="upper left", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_gustafson(parallel_fractions=(0.5, 0.9, 0.99), max_workers=1024, ax=None):
    """Gustafson (solid) against Amdahl (dashed) for the same parallel fractions."""
    fractions, max_workers, workers, ax = _speedup_figure(parallel_fractions, max_workers, ax)
    for i, p in enumerate(fractions):
        ax.plot(workers, gustafson_speedup(p, workers), lw=2, color=f"C{i}",
                label=f"Gustafson, p = {p:g}")
    for i, p in enumerate(fractions):
        ax.plot(workers, amdahl_speedup(p, workers), lw=2, ls="--", color=f"C{i}",
                label=f"Amdahl, p = {p:g}")
    _workers_axes(ax, max_workers, "speed-up")
    ax.set_title("Scaled (Gustafson) versus fixed-size (Amdahl) speed-up")
    ax.legend(loc="upper left", fontsize=9, ncol=2)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def _label_axes(ax, xlabel, ylabel, title):
    """The finish the roofline and the TOP500 figures share: labels, a legend
    at the lower right and a light grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_roofline(gpus=None, workloads=None, placed_on="H100", ax=None):
    """Rooflines of the datasheet GPUs (log-log), with the example workloads
    marked on the roof of `placed_on`."""
    import matplotlib.pyplot as plt

    gpus = GPUS if gpus is None else gpus
    workloads = example_workloads() if workloads is None else workloads
    if placed_on not in gpus:
        raise ValueError(f"placed_on must be one of {sorted(gpus)}, got {placed_on!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.5))
    intensity = np.logspace(-1, 4, 400)
    for gpu in gpus.values():
        attainable = roofline(gpu.fp32_flops_per_s, gpu.bandwidth_bytes_per_s, intensity)
        line, = ax.plot(intensity, attainable, lw=2,
                        label=f"{gpu.name} (ridge {gpu.ridge_flop_per_byte:.0f} FLOP/B)")
        ax.plot(gpu.ridge_flop_per_byte, gpu.fp32_flops_per_s, "o", color=line.get_color(), ms=5)

    # Each kind of kernel gets a marker; the points sit on one GPU's roof.
    roof = gpus[placed_on]
    markers = {"SGEMV": "X", "SGEMM": "s", "standard attention": "^", "flash attention": "D"}
    for kind, marker in markers.items():
        chosen = [w for w in workloads if w.kind == kind]
        if not chosen:
            continue
        x = np.array([w.intensity_flop_per_byte for w in chosen])
        y = roofline(roof.fp32_flops_per_s, roof.bandwidth_bytes_per_s, x)
        ax.scatter(x, y, marker=marker, s=60, color="black", zorder=5,
                   label=f"{kind} on {roof.name}")
    # Matrix kernels are labelled one by one, below the roof; each attention
    # family once, above it, at its middle point.
    for w in workloads:
        if w.kind in ("SGEMV", "SGEMM"):
            y = roofline(roof.fp32_flops_per_s, roof.bandwidth_bytes_per_s,
                         w.intensity_flop_per_byte)
            ax.annotate(w.label, (w.intensity_flop_per_byte, y), textcoords="offset points",
                        xytext=(6, -14), fontsize=8)
    for kind in ("standard attention", "flash attention"):
        family = [w for w in workloads if w.kind == kind]
        if family:
            middle = family[len(family) // 2]
            y = roofline(roof.fp32_flops_per_s, roof.bandwidth_bytes_per_s,
                         middle.intensity_flop_per_byte)
            # Fused attention's points are its ideal, N/b: K and V held on chip.
            text = "flash attention (ideal)" if kind == "flash attention" else kind
            ax.annotate(text, (middle.intensity_flop_per_byte, y), textcoords="offset points",
                        xytext=(-8 if kind == "standard attention" else 0, 10),
                        ha="right" if kind == "standard attention" else "center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(intensity[0], intensity[-1])
    ax.set_ylim(1e11, 2e14)
    return _label_axes(ax, "arithmetic intensity (FLOP per byte of DRAM traffic)",
                       "attainable FP32 FLOP/s",
                       "Roofline: FP32 (no tensor cores) from the datasheets")


def plot_top500(systems=TOP500_NUMBER_ONE, until_year=2040, ax=None):
    """The #1 systems on a log scale, the Cray-1, the fitted trend, and the
    exascale and zettascale lines."""
    import matplotlib.pyplot as plt

    until_year = _real("until_year", until_year)
    trend = top500_trend(systems)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.5))
    years = np.array([s.year for s in systems])
    rmax = np.array([s.rmax_flops_per_s for s in systems])
    ax.scatter(years, rmax, color="C0", zorder=5, label="TOP500 #1 (Rmax, HPL)")
    ax.scatter([CRAY_1_YEAR + 0.5], [CRAY_1_PEAK_FLOPS_PER_S], marker="*", s=160, color="C3",
               zorder=5, label="Cray-1 (1976, peak)")
    ax.annotate("Cray-1", (CRAY_1_YEAR + 0.5, CRAY_1_PEAK_FLOPS_PER_S), textcoords="offset points",
                xytext=(8, -4), fontsize=8)
    # Label each system once, at its first appearance, alternating sides to avoid overlaps.
    labelled = set()
    for s in systems:
        if s.name in labelled:
            continue
        labelled.add(s.name)
        above = len(labelled) % 2 == 1
        ax.annotate(s.name, (s.year, s.rmax_flops_per_s), textcoords="offset points",
                    xytext=(-6, 8) if above else (6, -12), ha="right" if above else "left",
                    fontsize=8)
    fit_years = np.linspace(CRAY_1_YEAR, until_year, 200)
    zetta = trend.year_reaching(ZETTASCALE_FLOPS_PER_S)
    ax.plot(fit_years, trend.flops_per_s(fit_years), color="0.4", ls="--", lw=1.5,
            label=f"fit to #1: x{trend.growth_per_year:.2f} per year")
    ax.axhline(EXASCALE_FLOPS_PER_S, color="C2", lw=1, ls=":", label="exascale, 1e18 FLOP/s")
    ax.axhline(ZETTASCALE_FLOPS_PER_S, color="C1", lw=1, ls=":", label="zettascale, 1e21 FLOP/s")
    ax.axvline(zetta, color="C1", lw=1, ls="-.", label=f"trend reaches zettascale: {zetta:.0f}")
    ax.set_yscale("log")
    ax.set_xlim(CRAY_1_YEAR - 2, until_year)
    ax.set_ylim(1e7, 1e22)
    return _label_axes(ax, "year", "FLOP/s (64-bit)",
                       "The fastest computers, 1976 to today, and where the trend goes")


def plot_energy(table=None, ax=None):
    """Energy per operation on a log scale, cheapest at the top."""
    import matplotlib.pyplot as plt

    table = ENERGY_45NM_PJ if table is None else table
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    names = list(table)
    energies = np.array([_positive(f"table[{name!r}]", table[name]) for name in names])
    colours = ["C3" if "DRAM" in n else "C1" if "SRAM" in n else "C0" for n in names]
    rows = np.arange(len(names))
    ax.barh(rows, energies, color=colours)
    for row, energy in zip(rows, energies):
        ax.text(energy * 1.15, row, f"{energy:g} pJ", va="center", fontsize=9)
    ax.set_yticks(rows, names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(0.05, energies.max() * 8)
    ax.set_xlabel("energy per operation (pJ, log scale)")
    ax.set_title("Arithmetic is cheap, moving data is not (45 nm, Horowitz 2014)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax
