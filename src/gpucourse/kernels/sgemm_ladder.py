"""Week 8: the SGEMM ladder as data, and the plots the chapter draws from it.

Nothing here runs a kernel or imports Numba: these functions read the
benchmark results files (``benchmarks/results/sgemm-*.json``, and level 7's
own run, ``sgemm_level7-*.json``), hold the reference ladders the chapter
compares against, and compute occupancy from the resource numbers those
files record. Plots take ``ax=None`` and return the axes; matplotlib is
imported inside them.
"""

from __future__ import annotations

import math

from gpucourse import results

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

# The target set for level 7 (issue 16): this share of cuBLAS fp32 at 4096^3.
LEVEL7_TARGET_SHARE = 0.90


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

    The smallest of four limits: registers (allocated per warp, rounded up to
    `register_unit`), shared memory (plus the per-block reservation), threads and
    blocks. Returns blocks_per_sm, warps_per_sm, occupancy (resident warps over
    the SM's maximum) and limiter.
    """
    sm = H100_SM if sm is None else sm
    for name, value in (("registers_per_thread", registers_per_thread),
                        ("shared_bytes_per_block", shared_bytes_per_block),
                        ("threads_per_block", threads_per_block)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    if not 1 <= threads_per_block <= 1024:
        raise ValueError(f"threads_per_block must be in [1, 1024], got {threads_per_block}")
    warps = math.ceil(threads_per_block / 32)
    unit = sm["register_unit"]
    registers_per_warp = math.ceil(registers_per_thread * 32 / unit) * unit
    limits = {
        "threads": sm["threads"] // (warps * 32),
        "blocks": sm["blocks"],
        "registers": sm["registers"] // (registers_per_warp * warps) if registers_per_thread else sm["blocks"],
        "shared memory": (sm["shared_bytes"] // (shared_bytes_per_block + sm["shared_reserved_per_block_bytes"])
                          if shared_bytes_per_block else sm["blocks"]),
    }
    limiter = min(limits, key=lambda name: limits[name])
    blocks = limits[limiter]
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / (sm["threads"] // 32), "limiter": limiter}


def loop_variant_probe(record: dict) -> list[dict]:
    """The benchmark's timing of the level-6 kernel in each loop variant: its
    dot loop written out 1, 2 or 4 steps per pass (`sgemm.DOT_UNROLL`), with one
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
                  key=lambda r: (r["double_buffer"], r["unroll"]))


# -----------------------------------------------------------------------------
# Level 7 (warp tiling): its own benchmark run, benchmarks/sgemm_level7.py


def load_level7_results(path=None) -> dict:
    """The newest full (not --quick) sgemm_level7 results file in `path` (a
    folder or a file; default benchmarks/results): level 7's candidates, level
    6 and cuBLAS timed in turns, the validation with each candidate's
    resources, and the dot-loop unroll probe."""
    return results.load_results("sgemm_level7", path)


def _level7_record(record) -> dict:
    if not (isinstance(record, dict) and record.get("benchmark") == "sgemm_level7"
            and isinstance(record.get("results"), list)):
        raise ValueError("record must be an sgemm_level7 results record "
                         "(load_level7_results reads one)")
    return record


def _wm_iter(config: dict) -> int:
    # sgemm.WarpTileConfig.wm_iter, without importing the kernels.
    return (config["wm"] * config["wn"]) // (32 * config["wn_iter"] * config["tm"] * config["tn"])


def warp_config_label(config: dict) -> str:
    """A level-7 configuration (a results file's dict of WarpTileConfig's fields)
    in one short line, as benchmarks/sgemm_level7.py prints it: block tile,
    warp tile, passes down x across, patch, threads."""
    fields = ("bm", "bn", "bk", "wm", "wn", "wn_iter", "tm", "tn", "threads")
    if not isinstance(config, dict) or any(f not in config for f in fields):
        raise ValueError(f"config must be a dict with the fields {', '.join(fields)}, got {config!r}")
    return (f"{config['bm']}x{config['bn']}x{config['bk']} w{config['wm']}x{config['wn']} "
            f"it{_wm_iter(config)}x{config['wn_iter']} t{config['tm']}x{config['tn']} "
            f"{config['threads']}th")


def _timed(row) -> bool:
    return "failed" not in row and row.get("ms") and row.get("vs_cublas") is not None


def _resources(record, config) -> dict:
    for entry in record.get("validation", []):
        if entry.get("config") == config and entry.get("resources"):
            return entry["resources"]
    raise ValueError(f"record has no validation resources for {warp_config_label(config)}")


def level7_sweep(record: dict, m=4096, n=None, k=None) -> list[dict]:
    """Every level-7 candidate timed at one shape (default 4096^3), fastest
    first: label, config, ms, tflops, vs_cublas, and from the validation's
    compile report registers_per_thread and shared_bytes_per_block, with the
    warps per SM that `occupancy` gives them. Failed candidates are left out."""
    record = _level7_record(record)
    n = m if n is None else n
    k = m if k is None else k
    rows = [r for r in record["results"] if (r["m"], r["n"], r["k"]) == (m, n, k)]
    if not any(r["variant"] == "level7" and _timed(r) for r in rows):
        measured = sorted({(r["m"], r["n"], r["k"]) for r in record["results"]
                           if r["variant"] == "level7"})
        raise ValueError(f"m, n, k must be a shape where level 7 was timed, one of {measured}; "
                         f"got {(m, n, k)}")
    out = []
    for r in rows:
        if r["variant"] != "level7" or not _timed(r):
            continue
        resources = _resources(record, r["config"])
        occ = occupancy(resources["registers_per_thread"], resources["shared_bytes_per_block"],
                        r["config"]["threads"])
        out.append({"label": warp_config_label(r["config"]), "config": r["config"],
                    "ms": r["ms"], "tflops": r["tflops"], "vs_cublas": r["vs_cublas"],
                    "registers_per_thread": resources["registers_per_thread"],
                    "shared_bytes_per_block": resources["shared_bytes_per_block"],
                    "threads": r["config"]["threads"], "warps_per_sm": occ["warps_per_sm"]})
    return sorted(out, key=lambda r: -r["vs_cublas"])


def level7_against_level6(record: dict) -> list[dict]:
    """For each shape where level 7 was timed, in the record's order: m, n, k,
    cublas_tflops, level6 (level 6's share of cuBLAS at that shape, timed in
    the same turns), level7 (the best level-7 share there), best_label,
    candidates (how many level-7 rows were timed there) and gap (level7 -
    level6, a fraction: -0.02 is two percentage points behind)."""
    record = _level7_record(record)
    out = []
    seen = []
    for r in record["results"]:
        shape = (r["m"], r["n"], r["k"])
        if r["variant"] == "level7" and shape not in seen:
            seen.append(shape)
    for shape in seen:
        rows = [r for r in record["results"] if (r["m"], r["n"], r["k"]) == shape]
        by_variant = {r["variant"]: r for r in rows if r["variant"] in ("cublas", "level6")}
        if not all(v in by_variant and _timed(by_variant[v]) for v in ("cublas", "level6")):
            raise ValueError(f"record must time cuBLAS and level 6 at every shape where level 7 "
                             f"was timed; {shape} lacks one")
        sweep = level7_sweep(record, *shape)
        best = sweep[0]
        level6 = by_variant["level6"]["vs_cublas"]
        out.append({"m": shape[0], "n": shape[1], "k": shape[2],
                    "cublas_tflops": by_variant["cublas"]["tflops"], "level6": level6,
                    "level7": best["vs_cublas"], "best_label": best["label"],
                    "best_config": best["config"], "candidates": len(sweep),
                    "gap": best["vs_cublas"] - level6})
    return out


def level7_unroll_probe(record: dict) -> list[dict]:
    """The fastest candidate's kernel with its dot loop written out 1, 2 or 4
    steps per pass, by unroll: unroll, label, tflops, vs_cublas,
    registers_per_thread and warps_per_sm (the candidate's shared memory, from
    the validation). Failed variants are left out; ValueError if the record
    has no probe (a --quick run)."""
    record = _level7_record(record)
    rows = [r for r in record.get("unroll_probe") or [] if _timed(r)]
    if not rows:
        raise ValueError("record must have an unroll_probe (a full run of "
                         "benchmarks/sgemm_level7.py records one)")
    out = []
    for r in sorted(rows, key=lambda r: r["unroll"]):
        shared = _resources(record, r["config"])["shared_bytes_per_block"]
        registers = r.get("registers_per_thread")
        warps = (occupancy(registers, shared, r["config"]["threads"])["warps_per_sm"]
                 if registers is not None else None)
        out.append({"unroll": r["unroll"], "label": warp_config_label(r["config"]),
                    "tflops": r["tflops"], "vs_cublas": r["vs_cublas"],
                    "registers_per_thread": registers, "warps_per_sm": warps})
    return out


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


def warp_tile_patches(config=None, warp: int = 0, lane: int = 0) -> list[tuple[int, int]]:
    """The top-left corners (row, column) in the block's tile of C of the tm x tn
    patches that one lane of one warp computes at level 7, in the order the
    kernel walks them (wm_iter passes down, wn_iter across): the mapping of
    `sgemm`'s warp-tiled kernel, written out."""
    from gpucourse.kernels import sgemm

    config = sgemm.check_warp_config(config or sgemm.WARP_TILE_DEFAULT)
    if not 0 <= warp < config.warps or not 0 <= lane < sgemm.WARP_SIZE:
        raise ValueError(f"warp must be in [0, {config.warps}) and lane in "
                         f"[0, {sgemm.WARP_SIZE}), got warp {warp!r}, lane {lane!r}")
    sub_m, sub_n = config.wm // config.wm_iter, config.wn // config.wn_iter
    across = sub_n // config.tn  # lanes across one pass of the warp
    warp_row, warp_col = divmod(warp, config.bn // config.wn)
    lane_row, lane_col = divmod(lane, across)
    return [(warp_row * config.wm + m * sub_m + lane_row * config.tm,
             warp_col * config.wn + n * sub_n + lane_col * config.tn)
            for m in range(config.wm_iter) for n in range(config.wn_iter)]


def plot_warp_tiling(config=None, ax=None):
    """Level 7's block tile of C: its warps' tiles (outlined), warp 0's passes
    (the pieces its 32 lanes cover at once, shaded in turn) and lane 0's
    patches, one in each pass (dark)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from gpucourse.kernels import sgemm

    config = sgemm.check_warp_config(config or sgemm.WARP_TILE_DEFAULT)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.5 * config.bm / config.bn))
    ax.set_xlim(0, config.bn)
    ax.set_ylim(config.bm, 0)
    ax.set_aspect("equal")
    ax.set_xticks([0, config.wn, config.bn])
    ax.set_yticks([0, config.wm, config.bm])
    for row in range(0, config.bm, config.wm):
        for col in range(0, config.bn, config.wn):
            ax.add_patch(Rectangle((col, row), config.wn, config.wm, fill=False,
                                   ec="tab:blue", lw=2))
    sub_m, sub_n = config.wm // config.wm_iter, config.wn // config.wn_iter
    for i in range(config.wm_iter):
        for j in range(config.wn_iter):
            ax.add_patch(Rectangle((j * sub_n, i * sub_m), sub_n, sub_m, color="tab:orange",
                                   alpha=0.12 + 0.12 * ((i + j) % 2)))
    for row, col in warp_tile_patches(config):
        ax.add_patch(Rectangle((col, row), config.tn, config.tm, color="tab:red", alpha=0.9))
    ax.set_title(f"level 7: a {config.bm} x {config.bn} block tile, {config.warps} warps of "
                 f"{config.wm} x {config.wn};\nwarp 0 in {config.wm_iter * config.wn_iter} "
                 f"passes, lane 0's {config.tm} x {config.tn} patch in each", fontsize=9)
    return ax


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


def plot_level7(record: dict, ax=None):
    """Level 7's run in two panels, each share written on its bar: left, every
    candidate's share of cuBLAS at 4096^3, fastest first, against level 6 in
    the same turns (dashed); right, level 6 and the best level-7 candidate at
    each shape the run measured. The dotted line is `LEVEL7_TARGET_SHARE`."""
    import matplotlib.pyplot as plt
    import numpy as np

    sweep = level7_sweep(record, 4096)
    shapes_ = level7_against_level6(record)
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    left, right = ax
    level6 = next(r for r in shapes_ if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096))["level6"]
    target = dict(color="black", ls=":", lw=1, label=f"target, {LEVEL7_TARGET_SHARE:.0%}")
    y = np.arange(len(sweep))
    bars = left.barh(y, [r["vs_cublas"] * 100 for r in sweep], color="tab:purple")
    for bar, r in zip(bars, sweep):
        left.text(bar.get_width() - 1, bar.get_y() + bar.get_height() / 2, f"{r['vs_cublas']:.1%}",
                  ha="right", va="center", fontsize=7, color="white")
    left.set_yticks(y, [r["label"] for r in sweep], fontsize=7)
    left.invert_yaxis()
    left.axvline(level6 * 100, color="tab:blue", ls="--", label=f"level 6, {level6:.1%}")
    left.axvline(LEVEL7_TARGET_SHARE * 100, **target)
    left.set_xlim(0, 100)
    left.set_xlabel("share of cuBLAS (%)")
    left.set_title("level 7's candidates at 4096x4096x4096", fontsize=10)
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)
    x = np.arange(len(shapes_))
    for offset, key, name, color in ((-0.2, "level6", "level 6", "tab:blue"),
                                     (0.2, "level7", "level 7, best", "tab:purple")):
        bars = right.bar(x + offset, [r[key] * 100 for r in shapes_], 0.4, label=name, color=color)
        for bar, r in zip(bars, shapes_):
            right.text(bar.get_x() + bar.get_width() / 2, bar.get_height() - 2, f"{r[key]:.1%}",
                       ha="center", va="top", fontsize=7, rotation=90, color="white")
    right.axhline(LEVEL7_TARGET_SHARE * 100, **target)
    right.set_xticks(x, [f"{r['m']}x{r['n']}\nx{r['k']}" for r in shapes_], fontsize=8)
    right.set_ylim(0, 100)
    right.set_ylabel("share of cuBLAS (%)")
    right.set_title("level 6 and level 7 in the same turns", fontsize=10)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=8)
    left.figure.suptitle(f"Level 7 (warp tiling) on {record['gpu']}, {record['date']}", fontsize=10)
    return ax
