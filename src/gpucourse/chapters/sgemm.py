"""Chapter 8's SGEMM ladder as data: readers of the committed benchmark results,
the reference ladders the chapter compares against, occupancy, and the plots
and tables the chapter draws from them.

Nothing here runs a kernel. These functions read the benchmark results files
(``benchmarks/results/sgemm-*.json``, the level-by-level run, and
``sgemm_cuda_cpp-*.json``, the worklog's own CUDA C++ kernels on the same
GPU), hold the worklog's own table, and compute occupancy from the resource
numbers those files record. ``committed_rows``, ``format_table`` and
``plot_tflops`` show the rows ``gpucourse.kernels.timing.time_sgemm`` measures,
or the committed ones where there is no GPU. What the chapter shows of level 7,
of the instruction counts and of every shape is in ``sgemm_gap``. Only the
tile shapes' own arithmetic is borrowed from ``gpucourse.kernels.sgemm``,
imported inside the functions that need it. Plots take ``ax=None`` and return
the axes; matplotlib is imported inside them. They are kept apart from the
kernels so that a student reads a kernel without the code that draws its
figures.
"""

from __future__ import annotations

import math
import statistics

from gpucourse import results
from gpucourse.chapters.tflops_plot import plot_tflops_lines
from gpucourse.kernels.timing import DEFAULT_SIZES, _whole

# The worklog's own table: Simon Boehm, "How to Optimize a CUDA Matmul Kernel
# for cuBLAS-like Performance: a Worklog" (2022), and the README of its
# repository (siboehm/SGEMM_CUDA): CUDA C++ on an NVIDIA RTX A6000, fp32, at
# matrix size 4092 (the README's words). Every kernel of the article's table,
# by the worklog's own kernel number: (kernel, name, GFLOP/s, share of cuBLAS).
# The article's kernels 7, 8 and 11 (bank-conflict and double-buffering
# experiments) are in the README only and are left out here.
BOEHM_A6000 = [
    (1, "naive", 309.0, 0.013),
    (2, "GMEM coalescing", 1986.5, 0.085),
    (3, "SMEM caching", 2980.3, 0.128),
    (4, "1D blocktiling", 8474.7, 0.365),
    (5, "2D blocktiling", 15971.7, 0.687),
    (6, "vectorized mem access", 18237.3, 0.784),
    (9, "autotuning", 19721.0, 0.848),
    (10, "warptiling", 21779.3, 0.937),
]
BOEHM_A6000_CUBLAS_GFLOPS = 23249.6

# The course's levels against the worklog's kernels they follow (level 6 is
# autotuned like kernel 9). Level 7 follows kernel 10, warp tiling, but was
# measured in a run of its own (`load_level7_results`), so the ladder's
# figures, which read one sgemm run, stop at level 6.
WORKLOG_KERNEL_OF_LEVEL = {"1": 1, "2": 2, "3": 3, "4a": 4, "4b": 5, "5": 6, "6": 9}


def load_cuda_cpp_results(path=None) -> dict:
    """The H100 run of the worklog's own CUDA C++ kernels
    (benchmarks/results/sgemm_cuda_cpp-*.json): device, versions, date, method
    and one row per kernel plus cuBLAS."""
    return results.load_results("sgemm_cuda_cpp", path)


def cuda_cpp_rows(record: dict) -> list[dict]:
    """The CUDA C++ kernels of a `load_cuda_cpp_results` record, cuBLAS last."""
    rows = record.get("results") if isinstance(record, dict) else None
    if not rows or not any(r.get("variant") == "cublas" for r in rows):
        raise ValueError("record must be an sgemm_cuda_cpp results record with a cublas row")
    return [r for r in rows if r["variant"] != "cublas"] + [r for r in rows if r["variant"] == "cublas"]


# Per-SM limits of compute capability 9.0 (H100), from the CUDA C++
# Programming Guide's table of technical specifications per compute capability.
H100_SM = {
    "registers": 65536,
    "threads": 2048,
    "blocks": 32,
    "shared_bytes": 228 * 1024,  # per SM; a block may use up to 227 KiB
    "shared_reserved_per_block_bytes": 1024,  # set aside by the system for each block
    "register_unit": 256,  # registers are allocated per warp in units of 256
    "sms": 132,  # H100 SXM5
}

# The levels the chapter's ladder shows, from the committed sgemm results.
# Level 7 (warp tiling) has a label but no place in the ladder: its timings
# come from benchmarks/sgemm_level7.py, another run that times matmul calls
# rather than kernel launches (`level7_sweep`, `level7_against_level6`);
# tables that go through sgemm.LEVELS label it.
LEVEL_ORDER = ("1", "2", "3", "4a", "4b", "5", "6")
LEVEL_LABELS = {"1": "1 naive", "2": "2 coalesced", "3": "3 shared mem", "4a": "4a 1D tiling",
                "4b": "4b 2D tiling", "5": "5 vectorized", "6": "6 autotuned", "7": "7 warp tiling"}


def load_results(path=None) -> dict:
    """The newest full sgemm results file in `path` (a folder or a file; default
    benchmarks/results). Raises ValueError naming the folder when it holds none."""
    return results.load_results("sgemm", path)


def ladder(record: dict, m=4096, n=None, k=None) -> list[dict]:
    """Rows of one shape (default 4096^3) in level order, cuBLAS last: each a dict
    with variant, level, label, tflops, vs_cublas, ms."""
    n = m if n is None else n
    k = m if k is None else k
    rows = {r["variant"]: r for r in record["results"] if (r["m"], r["n"], r["k"]) == (m, n, k)}
    if "cublas" not in rows:
        shapes = sorted({(r["m"], r["n"], r["k"]) for r in record["results"]})
        raise ValueError(f"m, n, k must be a measured shape, one of {shapes}; got {(m, n, k)}")
    out = []
    for level in LEVEL_ORDER:
        row = rows.get(f"level{level}")
        if row is not None:
            out.append({**row, "level": level, "label": LEVEL_LABELS[level]})
    out.append({**rows["cublas"], "level": "cublas", "label": "cuBLAS"})
    return out


def shapes(record: dict) -> list[tuple[int, int, int]]:
    """Every (m, n, k) the record measured, in its order."""
    seen = []
    for r in record["results"]:
        shape = (r["m"], r["n"], r["k"])
        if shape not in seen:
            seen.append(shape)
    return seen


def occupancy(registers_per_thread, shared_bytes_per_block, threads_per_block, sm=None) -> dict:
    """Resident blocks and warps per SM, and what limits them.

    The smallest of four limits (the shape model's ``resident_blocks``):
    registers (allocated per warp, rounded up to `register_unit`), shared
    memory (plus the per-block reservation), threads and blocks. Returns
    blocks_per_sm, warps_per_sm, occupancy (resident warps over the SM's
    maximum) and limiter.
    """
    from gpucourse.kernels.sgemm.shape_model import resident_blocks

    sm = H100_SM if sm is None else sm
    blocks, limiter = resident_blocks(registers_per_thread, shared_bytes_per_block,
                                      threads_per_block, sm)
    warps = math.ceil(threads_per_block / 32)
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / (sm["threads"] // 32), "limiter": limiter}


def loop_variant_probe(record: dict) -> list[dict]:
    """The benchmark's timing of the level-6 kernel in each loop variant: its
    dot loop written out 1, 2 or 4 steps per pass or the whole tile ("tile",
    runs since 2026-11-25; `sgemm.DOT_UNROLL`), with one
    or two copies of the shared tiles (`sgemm.DOUBLE_BUFFER`). Rows (unroll,
    double_buffer, tflops, registers_per_thread, shared_bytes_per_block) of
    the correct variants, one copy first, then by unroll. Raises ValueError if
    the record has none (runs before the probe existed)."""
    rows = record.get("loop_variant_probe") if isinstance(record, dict) else None
    if not rows:
        raise ValueError("record must be an sgemm results record with a loop_variant_probe "
                         "(benchmarks/sgemm.py records one)")
    fields = ("unroll", "double_buffer", "tflops", "registers_per_thread",
              "shared_bytes_per_block")
    return sorted(({f: r[f] for f in fields} for r in rows if r.get("passed")),
                  key=lambda r: (r["double_buffer"], r["unroll"] == "tile",
                                 0 if r["unroll"] == "tile" else r["unroll"]))


# -----------------------------------------------------------------------------
# Timing tables: the rows of timing.time_sgemm, measured now or committed

def committed_rows(sizes=DEFAULT_SIZES, path=None) -> tuple[dict, list[dict]]:
    """(record, rows): the newest committed sgemm results file (``path``: a file or a
    folder; default benchmarks/results) and its rows at the square ``sizes``, in
    the shape :func:`time_sgemm` returns."""
    from gpucourse import results

    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ValueError(f"sizes must be a non-empty list of matrix sizes, got {sizes!r}")
    wanted = {_whole("sizes", s, 1) for s in sizes}
    record = results.load_results("sgemm", path)
    fields = ("variant", "m", "n", "k", "ms", "tflops", "vs_cublas", "max_rel_err")
    rows = [{f: r.get(f) for f in fields} for r in record["results"]
            if r["m"] == r["n"] == r["k"] and r["m"] in wanted]
    if not rows:
        measured = sorted({r["m"] for r in record["results"] if r["m"] == r["n"] == r["k"]})
        raise ValueError(f"sizes must include a measured square size, one of {measured}; "
                         f"got {sorted(wanted)}")
    return record, rows


def _check_rows(rows) -> list[dict]:
    if not isinstance(rows, list) or not rows or not all(
            isinstance(r, dict) and {"variant", "m", "tflops"} <= set(r) for r in rows):
        raise ValueError("rows must be a non-empty list of rows from time_sgemm or "
                         "committed_rows")
    return rows


def _variants(rows) -> list[str]:
    return list(dict.fromkeys(r["variant"] for r in rows))


def format_table(rows) -> str:
    """A text table: TFLOP/s of each variant (rows) at each size (columns), and its share
    of cuBLAS at the largest size; "wrong" where a result failed its check."""
    rows = _check_rows(rows)
    sizes = sorted({r["m"] for r in rows})
    by = {(r["variant"], r["m"]): r for r in rows}
    width = max(len(v) for v in _variants(rows)) + 2
    lines = [f"{'TFLOP/s':<{width}}" + "".join(f"{s:>10}" for s in sizes)
             + f"{'share of cuBLAS at ' + str(sizes[-1]):>28}"]
    for variant in _variants(rows):
        cells = []
        for size in sizes:
            row = by.get((variant, size))
            cells.append(f"{'':>10}" if row is None else
                         f"{'wrong':>10}" if row["tflops"] is None else f"{row['tflops']:10.2f}")
        last = by.get((variant, sizes[-1]))
        share = last.get("vs_cublas") if last else None
        lines.append(f"{variant:<{width}}" + "".join(cells)
                     + (f"{share:28.1%}" if share else f"{'':>28}"))
    return "\n".join(lines)


def plot_tflops(rows, ax=None, title: str | None = None):
    """TFLOP/s against matrix size, one line per variant (cuBLAS dashed); returns the axes."""
    return plot_tflops_lines(_check_rows(rows), "m", lambda row: row["variant"],
                             lambda variant: variant == "cublas", xlabel="M = N = K",
                             ylabel="TFLOP/s", ax=ax, title=title, legend_columns=2)


# -----------------------------------------------------------------------------
# Plots


def plot_ladder(record: dict, m=4096, ax=None):
    """Bars of TFLOP/s per level at m^3 with each bar's share of cuBLAS written on it,
    cuBLAS as a dashed line."""
    import matplotlib.pyplot as plt

    rows = ladder(record, m)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    levels = [r for r in rows if r["level"] != "cublas"]
    cublas = rows[-1]
    bars = ax.bar([r["label"] for r in levels], [r["tflops"] for r in levels], color="tab:blue")
    for bar, r in zip(bars, levels):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{r['vs_cublas']:.1%}",
                ha="center", va="bottom", fontsize=9)
    ax.axhline(cublas["tflops"], color="tab:red", ls="--",
               label=f"cuBLAS {cublas['tflops']:.1f} TFLOP/s")
    ax.set_ylabel("TFLOP/s (fp32)")
    ax.set_title(f"Numba SGEMM on {record['gpu']}, {m}x{m}x{m}")
    ax.tick_params(axis="x", labelrotation=30)
    ax.legend(loc="upper left")
    return ax


def plot_share_comparison(record: dict, m=4096, ax=None):
    """Share of cuBLAS per level: this course's Numba kernels on the measured GPU
    beside the worklog's CUDA C++ kernel that each level follows, on an A6000
    (`WORKLOG_KERNEL_OF_LEVEL`); the worklog's warp tiling (kernel 10) stands
    alone at the end: level 7 follows it, but was timed in a run of its own
    (`plot_level7`), not in `record`."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = {r["level"]: r for r in ladder(record, m)}
    worklog = {kernel: share for kernel, _, _, share in BOEHM_A6000}
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.8))
    levels = [level for level in LEVEL_ORDER if level in rows]
    labels = [f"level {level}\n(kernel {WORKLOG_KERNEL_OF_LEVEL[level]})" for level in levels]
    labels.append("level 7\n(kernel 10)")
    x = np.arange(len(labels))
    a6000 = [worklog[WORKLOG_KERNEL_OF_LEVEL[level]] * 100 for level in levels] + [worklog[10] * 100]
    numba = [rows[level]["vs_cublas"] * 100 for level in levels]
    ax.bar(x - 0.2, a6000, 0.4, label="worklog, CUDA C++, A6000", color="tab:gray")
    ax.bar(x[:-1] + 0.2, numba, 0.4, label=f"this course, Numba, {record['gpu']}", color="tab:blue")
    ax.text(x[-1] + 0.2, 2, "its own run", rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("share of cuBLAS (%)")
    ax.set_ylim(0, 100)
    ax.legend(loc="upper left")
    ax.set_title(f"Each level as a share of cuBLAS fp32, {m}x{m}x{m}")
    return ax


def plot_sizes(record: dict, ax=None):
    """TFLOP/s against square size for every level and cuBLAS (log-log)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    square = [s for s in shapes(record) if s[0] == s[1] == s[2]]
    for level in list(LEVEL_ORDER) + ["cublas"]:
        variant = "cublas" if level == "cublas" else f"level{level}"
        points = [(r["m"], r["tflops"]) for r in record["results"]
                  if r["variant"] == variant and (r["m"], r["n"], r["k"]) in square]
        if points:
            xs, ys = zip(*points)
            style = dict(color="black", ls="--") if level == "cublas" else {}
            ax.plot(xs, ys, marker="o", label=LEVEL_LABELS.get(level, "cuBLAS"), **style)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("m = n = k")
    ax.set_ylabel("TFLOP/s (fp32)")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("Speed against size")
    return ax


def plot_mappings(axes=None):
    """Four small diagrams: which elements of C the 32 threads of one warp
    compute at levels 1 and 2, a shared-memory tile (level 3), and one thread's
    register patch inside a block tile (level 4b)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if axes is None:
        _, axes = plt.subplots(1, 4, figsize=(12, 3.2))
    grid = 8  # draw an 8 x 8 corner of C

    def frame(ax, title):
        ax.set_xlim(0, grid)
        ax.set_ylim(grid, 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        for i in range(grid + 1):
            ax.axhline(i, color="0.85", lw=0.5)
            ax.axvline(i, color="0.85", lw=0.5)
        ax.set_title(title, fontsize=10)

    ax = axes[0]
    frame(ax, "level 1: a warp goes down\na column of C (x = row)")
    for t in range(grid):
        ax.add_patch(Rectangle((0, t), 1, 1, color="tab:red", alpha=0.3 + 0.08 * t))
        ax.text(0.5, t + 0.5, str(t), ha="center", va="center", fontsize=7)
    ax = axes[1]
    frame(ax, "level 2: a warp goes along\na row of C (x = column)")
    for t in range(grid):
        ax.add_patch(Rectangle((t, 0), 1, 1, color="tab:green", alpha=0.3 + 0.08 * t))
        ax.text(t + 0.5, 0.5, str(t), ha="center", va="center", fontsize=7)
    ax = axes[2]
    frame(ax, "level 3: a block stages\ntiles of A and B")
    ax.add_patch(Rectangle((0, 0), 4, 4, fill=False, ec="tab:blue", lw=2))
    ax.add_patch(Rectangle((4, 0), 4, 4, fill=False, ec="tab:blue", lw=1, ls="--"))
    ax.text(2, 2, "one block:\na tile of C", ha="center", va="center", fontsize=8)
    ax = axes[3]
    frame(ax, "level 4b: a thread owns\na TM x TN patch")
    ax.add_patch(Rectangle((0, 0), 8, 8, fill=False, ec="tab:blue", lw=2))
    ax.add_patch(Rectangle((2, 2), 2, 2, color="tab:orange", alpha=0.7))
    ax.text(3, 3, "1\nthread", ha="center", va="center", fontsize=7)
    return axes


def plot_roofline(record: dict, intensities: dict, m=4096, peak_flops_per_s=None,
                  bandwidth_bytes_per_s=None, ax=None):
    """Each level at its arithmetic intensity (intensities: level -> FLOP/byte,
    from sgemm.traffic_model) and measured rate, under the roofline of the
    given peak and bandwidth (default: hpc.GPUS["H100"])."""
    import matplotlib.pyplot as plt
    import numpy as np

    from gpucourse import hpc

    h100 = hpc.GPUS["H100"]
    peak = h100.fp32_flops_per_s if peak_flops_per_s is None else peak_flops_per_s
    bandwidth = h100.bandwidth_bytes_per_s if bandwidth_bytes_per_s is None else bandwidth_bytes_per_s
    rows = {r["level"]: r for r in ladder(record, m)}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    x = np.logspace(-1, 3, 200)
    ax.plot(x, hpc.roofline(peak, bandwidth, x) / 1e12, color="black", lw=1.5,
            label=f"roofline ({peak / 1e12:.0f} TFLOP/s, {bandwidth / 1e12:.2f} TB/s)")
    for level in LEVEL_ORDER:
        if level in rows and level in intensities:
            ax.plot(intensities[level], rows[level]["tflops"], "o", ms=7, label=LEVEL_LABELS[level])
    ax.axhline(rows["cublas"]["tflops"], color="tab:red", ls="--", label="cuBLAS (measured)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of global-memory traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"Each level on the roofline, {m}x{m}x{m}")
    return ax


# -----------------------------------------------------------------------------
# Auto's shape model, and the grid of shapes users call

# Shapes the chapter reasons about: a ragged square, one just past a wave, a
# skinny deep product, a small one and a GPT-2 layer.
MODEL_SHAPES = [(1000, 1000, 1000), (3001, 2999, 1009), (512, 512, 16384), (300, 200, 400),
                (8192, 3072, 768)]
GRID_CLASSES = ("ragged", "skinny", "deep_k", "small", "transformer", "square")


def shape_model_rows(shapes=MODEL_SHAPES, gpu: str = "NVIDIA H100 80GB HBM3") -> list[dict]:
    """For each shape, the shape model's plan for auto and, beside it, level 6's
    one tuned tile with K whole, each with its reasoning numbers: tiles, slices,
    blocks, blocks per SM, waves, tail and padding efficiency and predicted
    TFLOP/s (`sgemm.plan_cost`)."""
    from gpucourse.kernels import sgemm

    entry = sgemm.gpu_entry(gpu)
    rows = []
    for shape in shapes:
        plan = sgemm.choose_plan(tuple(shape), gpu)
        level6 = sgemm.plan_cost(tuple(shape), sgemm.tuned_config(gpu), 1, entry)
        for who, cost in (("auto", plan), ("level 6", level6)):
            config = cost["config"]
            rows.append({"shape": "x".join(map(str, shape)), "who": who,
                         "tiles": f"{config.bm}x{config.bn} ({config.tm}x{config.tn})",
                         **{key: cost[key] for key in (
                             "splits", "blocks", "blocks_per_sm", "waves", "tail_efficiency",
                             "padding_efficiency", "predicted_us", "tflops")}})
    return rows


def format_model_rows(rows) -> str:
    """`shape_model_rows` as a Markdown table."""
    lines = ["| shape | plan | tiles | slices of K | blocks | per SM | waves | tail | padding "
             "| TFLOP/s (model) |", "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['who']} | {r['tiles']} | {r['splits']} | {r['blocks']} "
                     f"| {r['blocks_per_sm']} | {r['waves']:.2f} | {r['tail_efficiency']:.0%} "
                     f"| {r['padding_efficiency']:.0%} | {r['tflops']:.1f} |")
    return "\n".join(lines)


def rate_curves(record: dict) -> dict:
    """{TileConfig: {blocks an SM: TFLOP/s}} of an sgemm_rates record, at its
    deepest K (where a call's fixed costs weigh least)."""
    from gpucourse.kernels import sgemm

    deepest = max(r["k"] for r in record["results"])
    curves = {}
    for r in record["results"]:
        if r["k"] == deepest:
            config = sgemm.tile_config_of(r["config"])
            curves.setdefault(config, {})[r["blocks_per_sm"]] = r["tflops"]
    return curves


def plot_rates(path=None, ax=None):
    """Each menu tile's TFLOP/s against the blocks on every SM (sgemm_grid.py
    --rates), the chapter's example tile (``measured_rates``) drawn thick;
    None while no run is committed."""
    if path is None and not results.find_results("sgemm_rates"):
        return None
    import matplotlib.pyplot as plt

    record = results.load_results("sgemm_rates", path)
    example = _rates_example(record)
    ax = ax or plt.subplots(figsize=(9, 3.5))[1]
    for config, curve in rate_curves(record).items():
        label = f"{config.bm}x{config.bn}x{config.bk} ({config.tm}x{config.tn})"
        thick = example is not None and config == example["config"]
        qs = sorted(curve)
        ax.plot(qs, [curve[q] for q in qs], marker="o", lw=2.5 if thick else 1,
                alpha=1 if thick else 0.6, label=label)
    ax.set_xlabel("blocks on every SM")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Level 6's tiles by blocks an SM, {record['gpu']}, {record['date']}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def measured_rates(path=None) -> dict | None:
    """What the newest sgemm_rates run (benchmarks/sgemm_grid.py --rates) says
    that the register estimate did not, for the chapter. A tile's rate falls
    (by a tenth or more) at the first count of blocks an SM that no longer
    fits at once: that count less one is what fits. Returns, for the tile
    whose count differs most from the model's estimate, {"gpu", "config",
    "tile" (in words), "fits", "model_blocks", "rate_fits", "rate_over"}
    (TFLOP/s at the count that fits and at the next), or None while no run
    is committed or no rate falls."""
    if path is None and not results.find_results("sgemm_rates"):
        return None
    return _rates_example(results.load_results("sgemm_rates", path))


def _rates_example(record: dict) -> dict | None:
    """measured_rates' answer for an sgemm_rates record."""
    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import shape_model

    curves = rate_curves(record)
    entry = sgemm.gpu_entry(record["gpu"])
    found = []
    for config, curve in curves.items():
        best = 0.0
        for q in sorted(curve):
            if curve[q] < 0.9 * best:
                model = shape_model.resident_blocks(*shape_model.kernel_resources(config),
                                                    config.threads, entry)[0]
                found.append((model - (q - 1), best - curve[q], config, q - 1, model,
                              curve[q - 1], curve[q]))
                break
            best = max(best, curve[q])
    if not found:
        return None
    _, _, config, fits, model, rate_fits, rate_over = max(found, key=lambda f: f[:2])
    return {"gpu": record["gpu"], "config": config,
            "tile": f"{config.bm} x {config.bn} x {config.bk} "
            f"({config.tm} x {config.tn} a thread)", "fits": fits, "model_blocks": model,
            "rate_fits": rate_fits, "rate_over": rate_over}


def load_grid_results(path=None) -> dict | None:
    """The newest benchmarks/sgemm_grid.py record (or the one at `path`), or
    None while none is committed."""
    if path is None and not results.find_results("sgemm_grid"):
        return None
    return results.load_results("sgemm_grid", path)


def grid_by_class(record: dict) -> list[dict]:
    """Per class of the grid and variant (auto, level7): the worst and the median
    share of cuBLAS, and the shape of the worst, from a grid record's rows."""
    rows = record.get("results") if isinstance(record, dict) else None
    if not rows:
        raise ValueError("record must be an sgemm_grid results record with rows")
    found = []
    for group in [g for g in GRID_CLASSES if any(r["class"] == g for r in rows)]:
        for variant in ("auto", "level7"):
            picked = sorted((r for r in rows if r["class"] == group and r["variant"] == variant),
                            key=lambda r: r["vs_cublas"])
            if picked:
                shares = [r["vs_cublas"] for r in picked]
                found.append({"class": group, "variant": variant, "worst": shares[0],
                              "median": shares[len(shares) // 2],
                              "worst_shape": (picked[0]["m"], picked[0]["n"], picked[0]["k"])})
    return found


def load_off_grid_results(path=None) -> dict | None:
    """The newest benchmarks/sgemm_off_grid.py record (the grid's row format, at
    shapes not in the grid), or None while none is committed."""
    if path is None and not results.find_results("sgemm_off_grid"):
        return None
    return results.load_results("sgemm_off_grid", path)


# Issue 33's targets for `matmul` as users call it, as shares of cuBLAS in the same run.
GRID_TARGETS = {"auto_large": 0.85, "auto_mid": 0.75, "level7_square": 0.92}


def grid_targets(record: dict) -> dict:
    """What a grid record says of issue 33's targets: for auto, the shapes with
    M and N both at least 512 ("large", target GRID_TARGETS["auto_large"]) and
    those whose smaller side of M and N is 64 to 511 ("mid", target
    GRID_TARGETS["auto_mid"]), each as {"shapes", "met", "median", "worst",
    "worst_shape", "missed": [(m, n, k, share), ...]}; for level 7's default, its share at each
    square shape of 4096 or more ("level7_square": {size: share}). Raises
    ValueError for a record without rows."""
    rows = record.get("results") if isinstance(record, dict) else None
    if not rows:
        raise ValueError("record must be an sgemm_grid results record with rows")
    found = {}
    for name in ("large", "mid"):
        target = GRID_TARGETS[f"auto_{name}"]
        picked = sorted((r for r in rows if r["variant"] == "auto"
                         and shape_class(r["m"], r["n"]) == name), key=lambda r: r["vs_cublas"])
        found[name] = {
            "target": target, "shapes": len(picked),
            "met": sum(r["vs_cublas"] >= target for r in picked),
            "median": statistics.median(r["vs_cublas"] for r in picked) if picked else None,
            "worst": picked[0]["vs_cublas"] if picked else None,
            "worst_shape": (picked[0]["m"], picked[0]["n"], picked[0]["k"]) if picked else None,
            "missed": [(r["m"], r["n"], r["k"], r["vs_cublas"]) for r in picked
                       if r["vs_cublas"] < target]}
    found["level7_square"] = {r["m"]: r["vs_cublas"] for r in rows
                              if r["variant"] == "level7" and r["m"] == r["n"] == r["k"]
                              and r["m"] >= 4096}
    return found


def plot_grid(record: dict | None = None, ax=None):
    """Bars per class of the grid: auto's and level 7's median share of cuBLAS,
    with the worst shape of the class as a dark mark; None while no grid run
    is committed (the book builds without one)."""
    record = load_grid_results() if record is None else record
    if record is None:
        return None
    import matplotlib.pyplot as plt

    rows = grid_by_class(record)
    ax = ax or plt.subplots(figsize=(8, 3.5))[1]
    groups = list(dict.fromkeys(r["class"] for r in rows))
    for offset, variant in ((-0.2, "auto"), (0.2, "level7")):
        picked = {r["class"]: r for r in rows if r["variant"] == variant}
        xs = [i + offset for i, g in enumerate(groups) if g in picked]
        ax.bar(xs, [picked[g]["median"] for g in groups if g in picked], width=0.4,
               label=f"{variant}, median")
        ax.scatter(xs, [picked[g]["worst"] for g in groups if g in picked], color="black",
                   marker="_", s=200, zorder=3, label=f"{variant}, worst" if offset < 0 else None)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("share of cuBLAS")
    ax.set_title(f"SGEMM grid, {record['gpu']}, {record['date']}")
    ax.legend(fontsize=8)
    return ax


def load_explore_results(path=None) -> dict | None:
    """The newest benchmarks/sgemm_grid.py --explore record (or the one at
    `path`), or None while none is committed."""
    if path is None and not results.find_results("sgemm_explore"):
        return None
    return results.load_results("sgemm_explore", path)


def shape_class(m: int, n: int) -> str | None:
    """Which of issue 33's targets an m x n product is held to: "large" (M and
    N both 512 or more), "mid" (the smaller 64 to 511), or None (below 64).
    Raises ValueError unless m and n are whole numbers >= 1."""
    smaller = min(_whole("m", m), _whole("n", n))
    return "large" if smaller >= 512 else "mid" if smaller >= 64 else None


def shape_target(m: int, n: int) -> float | None:
    """Issue 33's target for auto at an m x n product (GRID_TARGETS, by
    ``shape_class``); None below 64."""
    name = shape_class(m, n)
    return None if name is None else GRID_TARGETS[f"auto_{name}"]


def explore_rows(record: dict) -> list[dict]:
    """Per shape of an explore record, in its order: auto's pick's share of
    cuBLAS ("pick"), the best timed plan of the menu's ("best", and its
    "config"; tiles outside the menu, timed as candidates, left out), the
    shape's target, and what kept it under the target: "met", "pick" (a plan
    of the menu reaches it, auto's pick does not) or "kernel" (no plan does).
    Raises ValueError for a record without rows."""
    rows = record.get("results") if isinstance(record, dict) else None
    if not rows:
        raise ValueError("record must be an sgemm_explore results record with rows")
    found = []
    for shape in dict.fromkeys((r["m"], r["n"], r["k"]) for r in rows):
        timed = [r for r in rows if (r["m"], r["n"], r["k"]) == shape]
        best = max((r for r in timed if not r.get("candidate")), key=lambda r: r["vs_cublas"])
        pick = next((r["vs_cublas"] for r in timed if r["chosen"]), None)
        target = shape_target(*shape[:2])
        verdict = ("met" if target is None or (pick or 0) >= target else
                   "pick" if best["vs_cublas"] >= target else "kernel")
        found.append({"shape": shape, "pick": pick, "best": best["vs_cublas"],
                      "config": best["config"], "target": target, "verdict": verdict})
    return found


def plot_explore(record: dict | None = None, ax=None):
    """Per shape of the newest explore run: auto's pick and the best plan of the
    menu as shares of cuBLAS, the shape's target as a tick; None while no
    explore run is committed."""
    record = load_explore_results() if record is None else record
    if record is None:
        return None
    import matplotlib.pyplot as plt

    rows = explore_rows(record)
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    ys = range(len(rows))
    for y, r in zip(ys, rows):
        ax.plot([r["pick"], r["best"]], [y, y], color="lightgray", zorder=1)
    ax.scatter([r["pick"] for r in rows], ys, label="auto's pick", zorder=2)
    ax.scatter([r["best"] for r in rows], ys, marker="x", color="black",
               label="best plan of the menu", zorder=3)
    ax.scatter([r["target"] for r in rows], ys, marker="|", s=200, color="red",
               label="target", zorder=2)
    ax.set_yticks(list(ys), [" x ".join(str(x) for x in r["shape"]) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of cuBLAS")
    ax.set_title(f"Pick or kernel? {record['gpu']}, {record['date']}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return ax


def explore_summary(record: dict, rates: dict | None = None) -> dict:
    """What chapter 8 says of an explore record (``explore_rows``), as text:
    "shapes" (how many), and for each verdict "pick" and "kernel" its count
    and its shapes ("pick_shapes", "kernel_shapes"; "none" where there are
    none). With an sgemm_rates record, for the first shape no plan of the
    menu brought to its target: "slow_shape", the best plan's tile
    ("slow_tile") and its TFLOP/s with one block on every SM ("slow_rate"),
    beside the tile of the highest measured rate ("top_tile", "top_rate")."""
    from gpucourse.kernels.sgemm import tile_config_of

    rows = explore_rows(record)

    def shape(r):
        return " x ".join(f"{x:,}" for x in r["shape"])

    found = {"shapes": str(len(rows))}
    for verdict in ("pick", "kernel"):
        picked = [r for r in rows if r["verdict"] == verdict]
        found[verdict] = str(len(picked))
        found[f"{verdict}_shapes"] = ", ".join(map(shape, picked)) or "none"
    slow = next((r for r in rows if r["verdict"] == "kernel"), None)
    if slow is not None and rates is not None:
        curves = rate_curves(rates)
        tile = tile_config_of(slow["config"])
        top = max(curves, key=lambda c: max(curves[c].values()))
        found.update(slow_shape=shape(slow), slow_tile=f"{tile.bm} x {tile.bn}",
                     slow_rate=f"{curves[tile][1]:.0f}", top_tile=f"{top.bm} x {top.bn}",
                     top_rate=f"{max(curves[top].values()):.0f}")
    return found


def scalar_load_summary(record: dict | None = None, gpu: str = "NVIDIA H200",
                        grid: dict | None = None) -> dict | None:
    """What the shape model's scalar-load shares do, for the chapter's prose:
    {"gpu", "share": the GPU's share for every tile as a percentage,
    "tile_low", "tile_high": its tiles' own shares, the lowest and highest,
    as "tile (share)", "ragged_shapes": how many of the explore's shapes have
    n or k not a multiple of 4, "error_without", "error_with": the median
    |log(predicted / measured)| of their timed plans, priced without and with
    the shares, "moved": how many of the grid's shapes (`grid`, default the
    newest sgemm_grid record) auto plans differently with the tiles' own
    shares than with the one share, "moved_shapes": those shapes}. None
    while no explore run is committed or the GPU's entry has no share.
    `record`: an sgemm_explore record (default the newest)."""
    from gpucourse.kernels.sgemm import shape_model, shape_model_fit

    record = load_explore_results() if record is None else record
    entry = shape_model.gpu_entry(gpu)
    share = shape_model.scalar_load_share(entry)
    if record is None or not share:
        return None
    rows = shape_model_fit.scalar_load_rows(shape_model_fit.explore_rows(record))
    if not rows:
        return None
    bare = {**entry, "scalar_loads": None}
    one = {**entry, "scalar_loads": {"share": share}}

    def median_error(trial):
        return statistics.median(abs(math.log(shape_model.plan_cost(shape, config, splits, trial)
                                              ["predicted_us"] / us))
                                 for shape, config, splits, us in rows)

    def plan(shape, trial):
        chosen = shape_model.choose_plan(shape, entry=trial)
        return chosen["config"], chosen["splits"]

    tiles = sorted((value, key) for key, value in
                   ((entry["scalar_loads"].get("tile_share") or {}).items()))
    grid = load_grid_results() if grid is None else grid
    shapes = [(r["m"], r["n"], r["k"]) for r in (grid or {}).get("results", [])
              if r["variant"] == "auto"]
    moved = [shape for shape in shapes if plan(shape, one) != plan(shape, entry)]
    said = {"gpu": gpu, "share": f"{share:.1%}", "ragged_shapes": str(len({r[0] for r in rows})),
            "error_without": f"{median_error(bare):.3f}", "error_with": f"{median_error(entry):.3f}",
            "moved": str(len(moved)),
            "moved_shapes": ", ".join(" x ".join(map(str, shape)) for shape in moved) or "none"}
    for name, (value, key) in (("tile_low", tiles[0]), ("tile_high", tiles[-1])) if tiles else ():
        said[name] = f"{key} ({value:.1%})"
    return said
