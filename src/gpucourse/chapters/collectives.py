"""What chapter 4 shows: the figures of the ring and of the cost model, the
frameworks table, and the readers of the GPU measurements in
``benchmarks/results`` (``collectives_gpu*.json``).

The models live in ``gpucourse.collectives``; this module reads what
``benchmarks/collectives_gpu.py`` measured, fits the models to it, and writes
the chapter's tables and figures. matplotlib is imported inside each plotting
function.
"""

from __future__ import annotations

import re

import numpy as np

from gpucourse.checks import (
    at_least as _at_least, count as _count, positive as _positive, real as _real,
    whole_at_least as _whole_at_least,
)
from gpucourse.collectives.ring import simulate_ring_all_reduce
from gpucourse.collectives.alpha_beta import alpha_beta_terms, AlphaBetaFit, fit_alpha_beta
from gpucourse.collectives.volume import (
    data_parallel_comm_bytes, tensor_parallel_comm_bytes, tensor_parallel_ccr,
)
from gpucourse.collectives.interconnects import INTERCONNECTS, H100_BF16_DENSE_FLOPS_PER_S
from gpucourse.collectives.frameworks import FRAMEWORKS


def plot_ring_all_reduce(world_size=4, axes=None):
    """The ring all-reduce step by step: one panel per step, ranks as rows and
    chunks as columns, each cell shaded by how many ranks' values it holds.
    The chunk each rank sends next is outlined."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    n = _whole_at_least("world_size", world_size, 2)
    if n > 8:
        raise ValueError(f"world_size must be 2 to 8 to draw legibly, got {world_size}")
    _, history = simulate_ring_all_reduce([np.zeros(n)] * n, record=True)
    if axes is None:
        _, axes = plt.subplots(1, len(history), figsize=(2.0 * len(history), 2.6))
    axes = np.atleast_1d(axes)
    if len(axes) != len(history):
        raise ValueError(f"axes must hold {len(history)} panels (2N - 1 for N = {n}), "
                         f"got {len(axes)}")
    cmap = plt.get_cmap("Blues")
    for index, (ax, (phase, step, contributions)) in enumerate(zip(axes, history)):
        # The chunk each rank sends in the *next* step, outlined in red.
        next_sent = {}
        if index + 1 < len(history):
            next_phase, next_step, _ = history[index + 1]
            s = next_step - 1
            for r in range(n):
                next_sent[r] = (r - s - 1) % n if next_phase == "reduce-scatter" else (r - s) % n
        for r in range(n):
            for c in range(n):
                count = len(contributions[r][c])
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor=cmap(0.15 + 0.75 * count / n),
                                       edgecolor="white", lw=1.5))
                ax.text(c + 0.5, r + 0.5, "".join(str(k) for k in sorted(contributions[r][c])),
                        ha="center", va="center", fontsize=8 if n <= 4 else 6,
                        color="white" if count > n / 2 else "black")
                if next_sent.get(r) == c:
                    ax.add_patch(Rectangle((c + 0.06, r + 0.06), 0.88, 0.88, fill=False,
                                           edgecolor="C3", lw=2))
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_aspect("equal")
        ax.set_xticks(np.arange(n) + 0.5, [str(c) for c in range(n)], fontsize=8)
        ax.set_yticks(np.arange(n) + 0.5, [f"rank {r}" if index == 0 else "" for r in range(n)],
                      fontsize=8)
        ax.tick_params(length=0)
        ax.set_xlabel("chunk", fontsize=8)
        title = "start" if phase == "start" else f"{phase}\nstep {step}"
        ax.set_title(title, fontsize=9)
        for side in ax.spines.values():
            side.set_visible(False)
    return axes


def plot_measured_vs_model(rows, fit, ax=None):
    """Measured all-reduce times (points) against the fitted alpha-beta model
    (lines), log-log, one colour per world size and one marker per algorithm."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("rows must hold at least one measurement")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 5))
    markers = {"ring": "o", "naive": "s", "builtin": "^"}
    names = {"ring": "ring (ours)", "naive": "naive (ours)", "builtin": "dist.all_reduce"}
    world_sizes = sorted({r["world_size"] for r in rows})
    sizes = np.array(sorted({r["bytes"] for r in rows}), dtype=float)
    for i, n in enumerate(world_sizes):
        for algorithm in markers:
            chosen = [r for r in rows if r["world_size"] == n and r["algorithm"] == algorithm]
            if chosen:
                ax.scatter([r["bytes"] for r in chosen], [r["seconds"] for r in chosen],
                           marker=markers[algorithm], color=f"C{i}", s=28,
                           facecolors="none" if algorithm != "ring" else None,
                           label=f"{names[algorithm]}, N = {n}")
        ax.plot(sizes, fit.time_s(sizes, n), color=f"C{i}", lw=1.5,
                label=f"ring model, N = {n}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time per all-reduce (s)")
    ax.set_title(f"All-reduce on loopback gloo: fitted latency "
                 f"{fit.latency_s * 1e6:.0f} µs, bandwidth {fit.bandwidth_bytes_per_s / 1e9:.2f} GB/s",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# Measured on GPUs: reading a results file of benchmarks/collectives_gpu.py
#
# The chapter reads the records with measured_runs() (below: one per GPU
# count) and passes each to the functions here. Its "results" rows carry
# {"algorithm", "world_size", "bytes", "seconds", "algbw_bytes_per_s",
# "busbw_bytes_per_s"}: bytes is the whole tensor, algbw = bytes / seconds, and
# busbw = algbw * 2(N-1)/N for an all-reduce, * (N-1)/N for a reduce-scatter or
# an all-gather (the convention of NVIDIA's nccl-tests), which reads as the
# bandwidth of each link whatever N is. Its "checks" rows compare our
# collectives with NCCL's on the GPUs: {"check", "max_abs_diff", "passed", ...}.

# Each measured algorithm, and the alpha-beta model fitted to it (NCCL's
# built-ins are fitted with the ring model, as the benchmark does).
MEASURED_MODEL = {
    "builtin": "ring_all_reduce", "ring": "ring_all_reduce", "naive": "naive_all_reduce",
    "builtin_reduce_scatter": "ring_reduce_scatter", "ring_reduce_scatter": "ring_reduce_scatter",
    "builtin_all_gather": "ring_all_gather", "ring_all_gather": "ring_all_gather",
}
MEASURED_LABELS = {
    "builtin": "all-reduce, NCCL", "ring": "all-reduce, our ring",
    "naive": "all-reduce, our naive",
    "builtin_reduce_scatter": "reduce-scatter, NCCL",
    "ring_reduce_scatter": "reduce-scatter, our ring",
    "builtin_all_gather": "all-gather, NCCL", "ring_all_gather": "all-gather, our ring",
}
ALL_REDUCES = ("builtin", "ring", "naive")
SCATTER_GATHERS = ("builtin_reduce_scatter", "ring_reduce_scatter",
                   "builtin_all_gather", "ring_all_gather")
# (colour, line style, marker): one colour per operation, NCCL solid, ours dashed.
_MEASURED_STYLE = {
    "builtin": ("C0", "-", "o"), "ring": ("C1", "--", "s"), "naive": ("C2", ":", "^"),
    "builtin_reduce_scatter": ("C3", "-", "o"), "ring_reduce_scatter": ("C3", "--", "s"),
    "builtin_all_gather": ("C4", "-", "o"), "ring_all_gather": ("C4", "--", "s"),
}
_ROW_FIELDS = ("algorithm", "world_size", "bytes", "seconds", "busbw_bytes_per_s")


def measured_algorithms(record) -> list[str]:
    """The algorithms measured in a collectives results record, in the order
    of ``MEASURED_MODEL`` (any others after them, sorted)."""
    present = {row["algorithm"] for row in _check_record(record)}
    return [a for a in MEASURED_MODEL if a in present] + sorted(present - set(MEASURED_MODEL))


def _check_record(record) -> list[dict]:
    """The "results" rows of a collectives record, after checking its shape."""
    if not isinstance(record, dict) or not isinstance(record.get("results"), list) \
            or not record["results"]:
        raise ValueError("record must be a collectives results record (a dict with a non-empty "
                         "'results' list, from measured_runs() or gpucourse.results.load_results), "
                         f"got {type(record).__name__}")
    for row in record["results"]:
        missing = [f for f in _ROW_FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise ValueError(f"record must hold rows with {', '.join(_ROW_FIELDS)}; "
                             f"a row lacks {missing}")
    return record["results"]


def _measured_rows(record, algorithm) -> list[dict]:
    """The rows of one algorithm in a collectives results record, smallest
    message first."""
    present = sorted({row["algorithm"] for row in _check_record(record)})
    if algorithm not in present:
        raise ValueError(f"algorithm must be one measured in the record ({', '.join(present)}), "
                         f"got {algorithm!r}")
    rows = sorted((row for row in record["results"] if row["algorithm"] == algorithm),
                  key=lambda row: row["bytes"])
    if len({row["bytes"] for row in rows}) != len(rows):
        raise ValueError(f"record must hold one row per message size, but {algorithm!r} "
                         f"repeats a size")
    return rows


def measured_bus_bandwidth(record, algorithm):
    """(message sizes in bytes, bus bandwidth in bytes per second) of one
    measured algorithm, as two float arrays, smallest message first."""
    rows = _measured_rows(record, algorithm)
    return (np.array([row["bytes"] for row in rows], dtype=float),
            np.array([row["busbw_bytes_per_s"] for row in rows], dtype=float))


def measured_checks(record) -> dict:
    """How the correctness checks of a run went: {"passed", "total",
    "max_abs_diff"} (the largest difference from NCCL's result over all
    checks; 0.0 means bit for bit the same)."""
    checks = record.get("checks") if isinstance(record, dict) else None
    if not isinstance(checks, list) or not checks or not all(
            isinstance(c, dict) and "passed" in c and "max_abs_diff" in c for c in checks):
        raise ValueError("record must carry a non-empty 'checks' list of rows with 'passed' and "
                         "'max_abs_diff' (a results file of benchmarks/collectives_gpu.py)")
    return {"passed": sum(bool(c["passed"]) for c in checks), "total": len(checks),
            "max_abs_diff": float(max(c["max_abs_diff"] for c in checks))}


def bus_bandwidth_ratio(record, algorithm="ring", reference="builtin", message_bytes=None) -> float:
    """Bus bandwidth of ``algorithm`` over that of ``reference`` at one message
    size: ``message_bytes``, or by default the largest size both were
    measured at. Above 1, ``algorithm`` was the faster."""
    sizes, busbw = measured_bus_bandwidth(record, algorithm)
    ref_sizes, ref_busbw = measured_bus_bandwidth(record, reference)
    common = sorted(set(sizes) & set(ref_sizes))
    if not common:
        raise ValueError(f"reference must share a message size with algorithm {algorithm!r}, "
                         f"but {reference!r} has none in common")
    size = common[-1] if message_bytes is None else _positive("message_bytes", message_bytes)
    if size not in common:
        raise ValueError(f"message_bytes must be a size both were measured at "
                         f"({int(common[0])} ... {int(common[-1])}), got {message_bytes!r}")
    return float(busbw[list(sizes).index(size)] / ref_busbw[list(ref_sizes).index(size)])


def bandwidth_bound_bytes(record, share=0.8, algorithm="builtin") -> int:
    """The smallest message size from which ``algorithm``'s bus bandwidth stays
    at or above ``share`` of its own peak: where, by its own measurement, the
    link rather than latency sets the pace. The default asks where NCCL's
    all-reduce reaches 80% of the best it did."""
    share = _real("share", share)
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    sizes, busbw = measured_bus_bandwidth(record, algorithm)
    below = np.flatnonzero(busbw < share * busbw.max())
    start = 0 if below.size == 0 else below[-1] + 1  # past the last size that falls short
    return int(sizes[start])


def fit_measured(record, algorithm, min_bytes=0) -> AlphaBetaFit:
    """Fit latency and bandwidth (``fit_alpha_beta``) to one measured
    algorithm's times, with the model of ``MEASURED_MODEL``, using the sizes
    of at least ``min_bytes`` (default: all of them). With ``min_bytes=0``
    this is the fit the benchmark stored in the record's "fits"."""
    minimum = _at_least("min_bytes", min_bytes, 0)
    rows = [row for row in _measured_rows(record, algorithm) if row["bytes"] >= minimum]
    if algorithm not in MEASURED_MODEL:
        raise ValueError(f"algorithm must be one of {', '.join(MEASURED_MODEL)} to be fitted, "
                         f"got {algorithm!r}")
    if len(rows) < 2:
        raise ValueError(f"min_bytes must leave at least two message sizes of {algorithm!r} to "
                         f"fit, got min_bytes={min_bytes!r}")
    return fit_alpha_beta([row["bytes"] for row in rows], [row["seconds"] for row in rows],
                          [row["world_size"] for row in rows], MEASURED_MODEL[algorithm])


def format_bytes(size) -> str:
    """A byte count in binary units for labels: 4096 -> '4 KiB',
    268435456 -> '256 MiB', 100 -> '100 B'."""
    size = _at_least("size", size, 0)
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def measured_fits_markdown(record, min_bytes, algorithms=None) -> str:
    """A Markdown table, one row per algorithm: the alpha-beta fit over every
    size and over the sizes from ``min_bytes`` up (latency in µs, bandwidth in
    GB/s, rms relative error in %), beside the peak measured bus bandwidth."""
    names = measured_algorithms(record) if algorithms is None else list(algorithms)
    if not names:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    edge = format_bytes(_at_least("min_bytes", min_bytes, 0))
    lines = [f"| measured | all sizes: α (µs) | β (GB/s) | rms error | from {edge}: α (µs) "
             f"| β (GB/s) | rms error | peak bus bandwidth (GB/s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        whole, tail = fit_measured(record, name), fit_measured(record, name, min_bytes)
        peak = measured_bus_bandwidth(record, name)[1].max()
        cells = [f"{f.latency_s * 1e6:.0f} | {f.bandwidth_bytes_per_s / 1e9:.0f} | "
                 f"{100 * f.rms_relative_error:.1f}%" for f in (whole, tail)]
        lines.append(f"| {MEASURED_LABELS.get(name, name)} | {cells[0]} | {cells[1]} "
                     f"| {peak / 1e9:.0f} |")
    return "\n".join(lines)


def measured_setup(record) -> dict:
    """Where and how a run was made, from the record: {"gpu", "gpu_count",
    "date", "torch", "nccl", "link" (the GPU0-GPU1 entry of ``nvidia-smi topo
    -m``, e.g. "NV18" for 18 bonded NVLinks; None if the file has no matrix),
    "links" (the distinct entries between any two GPUs of the matrix, sorted:
    ["NV18"] when every pair shows NV18), "multicast_off" (True when
    NCCL_NVLS_ENABLE was "0")}."""
    if not isinstance(record, dict):
        raise ValueError(f"record must be a results record (a dict), got {type(record).__name__}")
    missing = [f for f in ("gpu", "date", "versions") if f not in record]
    if missing:
        raise ValueError(f"record must carry gpu, date and versions; it lacks {missing}")
    link, links = None, set()
    # The matrix is tab-separated, with terminal colour codes around its header
    # line; each GPU's row starts with its name, then one entry per GPU ("X"
    # for itself), then the CPU and NUMA affinities.
    lines = str(record.get("topology", "")).splitlines()
    gpu_columns = len(re.findall(r"GPU\d+", lines[0])) if lines else 0
    for line in lines[1:]:
        fields = line.split("\t")
        if not re.fullmatch(r"GPU\d+", fields[0].strip()):
            continue
        entries = [f.strip() for f in fields[1:1 + gpu_columns]]
        links.update(e for e in entries if e and e != "X")
        if fields[0].strip() == "GPU0" and len(fields) > 2:
            link = fields[2].strip() or None
    environment = record.get("environment") or {}
    return {"gpu": record["gpu"], "gpu_count": record.get("gpu_count"), "date": record["date"],
            "torch": record["versions"].get("torch"), "nccl": record["versions"].get("nccl"),
            "link": link, "links": sorted(links),
            "multicast_off": environment.get("NCCL_NVLS_ENABLE") == "0"}


def plot_measured_bus_bandwidth(record, algorithms=ALL_REDUCES, ax=None):
    """Bus bandwidth (GB/s) against message size (log axis) of the measured
    ``algorithms``, one line each: NCCL's solid, ours dashed, one colour per
    operation."""
    import matplotlib.pyplot as plt

    algorithms = list(algorithms)
    if not algorithms:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    curves = {name: measured_bus_bandwidth(record, name) for name in algorithms}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for name, (sizes, busbw) in curves.items():
        colour, style, marker = _MEASURED_STYLE.get(name, ("C7", "-.", "x"))
        ax.plot(sizes, busbw / 1e9, color=colour, ls=style, marker=marker, ms=4, lw=1.8,
                mfc="white" if style != "-" else colour, label=MEASURED_LABELS.get(name, name))
    sizes = np.unique(np.concatenate([s for s, _ in curves.values()]))
    ticks = sizes[::2] if sizes.size > 9 else sizes
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size (the whole tensor)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


def plot_measured_fit(record, algorithms=("builtin", "ring"), min_bytes=None, ax=None):
    """Measured time per call (points) against the alpha-beta model fitted to
    every size (solid line) and, with ``min_bytes``, to the sizes from
    ``min_bytes`` up (dotted line), log-log, one colour per algorithm."""
    import matplotlib.pyplot as plt

    algorithms = list(algorithms)
    if not algorithms:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for name in algorithms:
        rows = _measured_rows(record, name)
        colour = _MEASURED_STYLE.get(name, ("C7",))[0]
        sizes = np.array([row["bytes"] for row in rows], dtype=float)
        n = rows[0]["world_size"]
        ax.scatter(sizes, [row["seconds"] * 1e6 for row in rows], color=colour, s=22, zorder=3,
                   label=f"{MEASURED_LABELS.get(name, name)}, measured")
        fits = [(fit_measured(record, name), "-", "all sizes")]
        if min_bytes is not None:
            fits.append((fit_measured(record, name, min_bytes), ":",
                         f"sizes from {format_bytes(min_bytes)}"))
        for fit, style, what in fits:
            ax.plot(sizes, fit.time_s(sizes, n) * 1e6, color=colour, ls=style, lw=1.5,
                    label=f"model fitted to {what}: α {fit.latency_s * 1e6:.0f} µs, "
                          f"β {fit.bandwidth_bytes_per_s / 1e9:.0f} GB/s")
    if min_bytes is not None:
        ax.axvspan(min_bytes, sizes.max(), color="0.5", alpha=0.1, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sizes[::2] if sizes.size > 9 else sizes
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("message size (the whole tensor)")
    ax.set_ylabel("time per call (µs)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# Several runs side by side: the same script on 2 GPUs, on 4, ...
#
# Each run is its own results file; measured_runs() reads them all and keys
# them by GPU count, so that a chapter names the run it describes rather than
# taking whichever file happens to be the newest.

_RUN_STYLES = (("--", "s"), ("-", "o"), ("-.", "^"), (":", "D"))  # one per N, smallest first


def measured_world_size(record) -> int:
    """The number of ranks (GPUs) of a collectives run: the world size every
    row of the record shares."""
    sizes = {row["world_size"] for row in _check_record(record)}
    if len(sizes) != 1:
        raise ValueError(f"record must hold rows of one world size, got {sorted(sizes)}")
    return int(sizes.pop())


def measured_runs(directory=None) -> dict[int, dict]:
    """Every collectives results file in ``directory`` (default: the
    repository's ``benchmarks/results``), keyed by its GPU count: {2: record,
    4: record}. Where two files have the same GPU count, the newer (by the
    date in its name) is kept. Raises ValueError if there is none, or if a
    file's "gpu_count" disagrees with the world size of its rows."""
    from gpucourse import results

    def world_size(path, record):
        count, ranks = record.get("gpu_count"), measured_world_size(record)
        if count != ranks:
            raise ValueError(f"{path.name} must state its gpu_count as the world size of its "
                             f"rows ({ranks}), got gpu_count={count!r}")
        return ranks

    return results.newest_by("collectives", world_size, directory,
                             what="collectives-<gpu>-<date>.json results files")


def _check_runs(runs) -> dict:
    """Runs as measured_runs() returns them, checked: {N: record}, N the
    record's own world size."""
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict {gpu count: record}, as "
                         f"measured_runs() returns, got {type(runs).__name__}"
                         f"{' (empty)' if isinstance(runs, dict) else ''}")
    for n, record in runs.items():
        ranks = measured_world_size(record)
        if n != ranks:
            raise ValueError(f"runs must be keyed by each record's world size, but key {n!r} "
                             f"holds a run on {ranks} ranks")
    return dict(sorted(runs.items()))


def small_message_time_s(record, algorithm, max_bytes=2 ** 20) -> float:
    """The median time per call of one measured algorithm over the message
    sizes up to ``max_bytes`` (default 1 MiB): the floor set by latency,
    which at these sizes goes up and down from one size to the next, so
    the median rather than any one size."""
    limit = _positive("max_bytes", max_bytes)
    rows = _measured_rows(record, algorithm)
    times = [row["seconds"] for row in rows if row["bytes"] <= limit]
    if not times:
        raise ValueError(f"max_bytes must be at least the smallest size measured "
                         f"({rows[0]['bytes']}), got {max_bytes!r}")
    return float(np.median(times))


def model_link_share(algorithm, world_size) -> float:
    """The share of the link bandwidth beta that ``algorithm``'s bus bandwidth
    approaches for large messages in the alpha-beta model: the bus bandwidth
    factor (2(N-1)/N for an all-reduce, (N-1)/N otherwise) over the bytes
    fraction of ``alpha_beta_terms``. 1 for the rings, which keep every link
    busy; 1/N for the naive all-reduce, whose root's link carries 2(N-1)
    whole messages."""
    _, byte_fraction = alpha_beta_terms(algorithm, world_size)
    n = _count("world_size", world_size)
    if n < 2:  # one rank sends nothing: no bandwidth to share
        raise ValueError(f"world_size must be >= 2 for a share of the link, got {world_size!r}")
    bus_factor = 2 * (n - 1) / n if algorithm.endswith("all_reduce") else (n - 1) / n
    return bus_factor / byte_fraction


def plot_measured_runs(runs, algorithms=ALL_REDUCES, quantity="bus_bandwidth", ax=None):
    """Several runs on one axis: for each algorithm (one colour) and each
    run (one line style and marker per GPU count), the bus bandwidth (GB/s,
    ``quantity="bus_bandwidth"``) or the time per call (µs, log axis,
    ``quantity="time"``) against message size (log axis)."""
    import matplotlib.pyplot as plt

    runs = _check_runs(runs)
    if quantity not in ("bus_bandwidth", "time"):
        raise ValueError(f"quantity must be 'bus_bandwidth' or 'time', got {quantity!r}")
    algorithms = list(algorithms)
    if not algorithms:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    curves = {(name, n): _measured_rows(record, name)
              for name in algorithms for n, record in runs.items()}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for (name, n), rows in curves.items():
        colour = _MEASURED_STYLE.get(name, ("C7",))[0]
        style, marker = _RUN_STYLES[list(runs).index(n) % len(_RUN_STYLES)]
        sizes = np.array([row["bytes"] for row in rows], dtype=float)
        y = (np.array([row["busbw_bytes_per_s"] for row in rows]) / 1e9
             if quantity == "bus_bandwidth" else np.array([row["seconds"] for row in rows]) * 1e6)
        ax.plot(sizes, y, color=colour, ls=style, marker=marker, ms=4, lw=1.8,
                mfc=colour if style == "-" else "white",
                label=f"{MEASURED_LABELS.get(name, name)}, N = {n}")
    sizes = np.unique([row["bytes"] for rows in curves.values() for row in rows]).astype(float)
    ticks = sizes[::2] if sizes.size > 9 else sizes
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("message size (the whole tensor)")
    if quantity == "bus_bandwidth":
        ax.set_ylim(bottom=0)
        ax.set_ylabel("bus bandwidth (GB/s)")
    else:
        ax.set_yscale("log")
        ax.set_ylabel("time per call (µs)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


def plot_ccr(hidden_sizes=(1024, 2048, 4096, 8192, 12288, 16384), seq_len=2048, tp=8,
             flops_per_s=H100_BF16_DENSE_FLOPS_PER_S, interconnects=None, ax=None):
    """CCR of a tensor-parallel transformer layer against its hidden size,
    one line per interconnect, with CCR = 1 marked."""
    import matplotlib.pyplot as plt

    links = INTERCONNECTS if interconnects is None else interconnects
    hidden = [_count("hidden_sizes", h) for h in hidden_sizes]
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.8))
    styles = {"NVLink": "-", "PCIe": "--", "InfiniBand": "-.", "Ethernet": ":"}
    for i, link in enumerate(links.values()):
        values = [tensor_parallel_ccr(h, seq_len, tp, link.bandwidth_bytes_per_s, flops_per_s)
                  for h in hidden]
        ax.plot(hidden, values, marker="o", ms=4, lw=2, color=f"C{i}",
                ls=styles.get(link.kind, "-"),
                label=f"{link.name}: {link.bandwidth_bytes_per_s / 1e9:.1f} GB/s")
    ax.axhline(1, color="black", lw=1)
    ax.text(hidden[-1], 1.1, "CCR = 1: sending takes as long as computing", fontsize=8,
            ha="right")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(hidden, [str(h) for h in hidden])
    ax.set_xlabel("hidden size h")
    ax.set_ylabel("communication / computation time")
    ax.set_title(f"Tensor parallelism over {tp} GPUs, every link at the same FLOP rate "
                 f"({flops_per_s / 1e12:.0f} TFLOP/s), s = {seq_len}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_comm_volume(n_params, world_size, batch, seq_len, hidden, n_layers, tp, ax=None):
    """Bytes per GPU per step for each strategy, as horizontal bars."""
    import matplotlib.pyplot as plt

    bars = {
        "DP all-reduce (DDP, ZeRO-1, ZeRO-2)": data_parallel_comm_bytes(n_params, world_size),
        "ZeRO-3 / FSDP (full shard)": data_parallel_comm_bytes(n_params, world_size, zero_stage=3),
        f"tensor parallel, t = {tp} (activations)": tensor_parallel_comm_bytes(
            batch, seq_len, hidden, n_layers, tp),
    }
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2.8))
    rows = np.arange(len(bars))
    values = np.array(list(bars.values())) / 1e9
    ax.barh(rows, values, color=["C0", "C1", "C2"])
    for row, value in zip(rows, values):
        ax.text(value * 1.01, row, f"{value:.1f} GB", va="center", fontsize=9)
    ax.set_yticks(rows, list(bars))
    ax.invert_yaxis()
    ax.set_xlim(0, values.max() * 1.25)
    ax.set_xlabel("bytes sent per GPU per step (GB)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


def frameworks_markdown() -> str:
    """The frameworks table as Markdown, for the chapter."""
    lines = ["| framework | strategies | reported (date) | use it when |", "|---|---|---|---|"]
    for f in FRAMEWORKS:
        lines.append(f"| {f.name} | {', '.join(f.strategies)} | {f.reported} "
                     f"({f.reported_date}) {{cite}}`{f.source}` | {f.use_when} |")
    return "\n".join(lines)
