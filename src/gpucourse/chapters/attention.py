"""Chapter 9 (FlashAttention): the committed GPU runs, read, tabulated and plotted.

The benchmark scripts (``benchmarks/attention.py``,
``benchmarks/attention_backward.py`` and ``benchmarks/attention_half.py``)
write their measurements to ``benchmarks/results``. This module reads those
files (``find_benchmark_results``, ``load_benchmark``), draws the chapter's
figures (``plot_benchmark``, ``plot_tiling``, ``plot_traffic``) and writes
its tables and ratios (``benchmark_markdown``, ``kernels_markdown``,
``half_precision_markdown``, ``backward_markdown`` and the functions they
use). The kernels it reports on live in ``gpucourse.kernels.attention``,
which still answers these names (``attention.benchmark_markdown``) for old
imports. matplotlib is imported inside the plotting functions alone.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpucourse import results as results_files
from gpucourse.kernels.attention.arguments import _check_flag, _count
from gpucourse.kernels.attention.config import FlashConfig
from gpucourse.kernels.attention.cost import flash_hbm_bytes, naive_hbm_bytes
from gpucourse.kernels.attention.reference import causal_key_tiles

VARIANT_LABELS = {
    "flash": "ours: tiled online softmax (Numba, fp32; tensor cores, 3xTF32)",
    "flash_cuda_cores": "ours on the CUDA cores (Numba, fp32 FMA)",
    "naive_numba": "naive, 3 Numba kernels (fp32)",
    "torch_naive": "PyTorch softmax(QKᵀ)V (fp32)",
    "sdpa_math": "SDPA math backend (fp32)",
    "sdpa_efficient": "SDPA memory-efficient (fp32)",
    "sdpa_flash_fp16": "SDPA flash backend (fp16, context)",
}
VARIANT_COLORS = {"flash": "C3", "flash_cuda_cores": "C5", "naive_numba": "C0", "torch_naive": "C1", "sdpa_math": "C2",
                  "sdpa_efficient": "C4", "sdpa_flash_fp16": "C7"}
_RESULT_FIELDS = ("variant", "batch", "heads", "seq", "head_dim", "causal", "ms", "tflops",
                  "peak_mem_bytes", "max_abs_err", "mean_rel_err")


def find_benchmark_results(directory=None):
    """Paths of the attention results files, newest date last (empty if none)."""
    return results_files.find_results("attention", directory)


def load_benchmark(path):
    """Read one attention results file and check that it has the expected shape."""
    data = results_files.load_results("attention", path)
    for row in data["results"]:
        missing = [f for f in _RESULT_FIELDS if f not in row]
        if missing:
            raise ValueError(f"{path}: a result row lacks {missing}")
    return data


def _rows(results, variant, causal, head_dim=64):
    return sorted((r for r in results if r["variant"] == variant and r["causal"] == causal
                   and r.get("head_dim", 64) == head_dim), key=lambda r: r["seq"])


def first_oom_seq(results, variant, causal=False, head_dim=64):
    """The shortest sequence at which ``variant`` ran out of memory (None if never)."""
    rows = [r for r in _rows(results, variant, causal, head_dim) if r.get("status") == "oom"]
    return rows[0]["seq"] if rows else None


def plot_benchmark(results, metric="ms", causal=False, ax=None, head_dim=64):
    """One line per variant against the sequence length, at one head dimension;
    an x marks where a variant ran out of memory. metric: 'ms', 'tflops' or
    'peak_mem_bytes'."""
    import matplotlib.pyplot as plt

    labels = {"ms": "time per call (ms)", "tflops": "TFLOP/s",
              "peak_mem_bytes": "peak extra memory (GB)"}
    if metric not in labels:
        raise ValueError(f"metric must be one of {', '.join(labels)}, got {metric!r}")
    causal = _check_flag("causal", causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    scale = 1e-9 if metric == "peak_mem_bytes" else 1.0
    for variant, label in VARIANT_LABELS.items():
        rows = _rows(results, variant, causal, head_dim)
        done = [r for r in rows if r.get(metric) is not None]
        if not done:
            continue
        style = dict(lw=2.5 if variant == "flash" else 1.3, color=VARIANT_COLORS[variant])
        (line,) = ax.plot([r["seq"] for r in done], [r[metric] * scale for r in done],
                          marker="o", ms=4, label=label, **style)
        oom = first_oom_seq(results, variant, causal, head_dim)
        if oom is not None:
            ax.plot([oom], [done[-1][metric] * scale], marker="x", ms=10, mew=2.5,
                    color=line.get_color(), ls="none")
            ax.annotate("out of memory", (oom, done[-1][metric] * scale), fontsize=7,
                        xytext=(4, 4), textcoords="offset points", color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(labels[metric])
    ax.grid(True, which="both", alpha=0.3)
    return ax


def plot_tiling(seq=256, block_rows=64, block_cols=32, causal=True, query_tile=2, ax=None):
    """The score matrix cut into tiles: one block of threads owns a row of
    tiles (query_tile) and sweeps it left to right; with causal masking the
    tiles above the diagonal are never visited."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    seq, block_rows, block_cols = (_count(n, x) for n, x in
                                   (("seq", seq), ("block_rows", block_rows),
                                    ("block_cols", block_cols)))
    causal = _check_flag("causal", causal)
    q_tiles, k_tiles = -(-seq // block_rows), -(-seq // block_cols)
    if query_tile is not None and not 0 <= query_tile < q_tiles:
        raise ValueError(f"query_tile must be in [0, {q_tiles}) or None, got {query_tile!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    for qt in range(q_tiles):
        visited = causal_key_tiles(qt, block_rows, block_cols, seq) if causal else k_tiles
        for kt in range(k_tiles):
            x, y = kt * block_cols, qt * block_rows
            w, h = min(block_cols, seq - x), min(block_rows, seq - y)
            if kt >= visited:
                color = "#eeeeee"  # skipped: fully masked
            elif qt == query_tile:
                color = "#d62728" if kt == 1 else "#f4a6a6"
            else:
                color = "#9ecae1"
            ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="white", lw=1.5))
    if causal:
        ax.plot([0, seq], [0, seq], color="black", lw=1, ls="--")
    ax.set_xlim(0, seq)
    ax.set_ylim(seq, 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"keys j (tiles of Bc = {block_cols})")
    ax.set_ylabel(f"queries i (tiles of Br = {block_rows})")
    ax.set_title("score matrix S = QKᵀ, by tiles" + (" (causal)" if causal else ""))
    return ax


def plot_traffic(batch=4, heads=16, head_dim=64, seqs=(512, 1024, 2048, 4096, 8192, 16384),
                 ax=None):
    """Device-memory bytes of the naive pipeline and of the tiled kernel
    (re-reading K and V per query tile, and with K and V read once)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    seqs = [_count("seqs", n) for n in seqs]
    curves = {
        "naive: writes and re-reads S and P": [naive_hbm_bytes(batch, heads, n, head_dim)
                                               for n in seqs],
        "tiled: K, V re-read per query tile": [flash_hbm_bytes(batch, heads, n, head_dim)
                                               for n in seqs],
        "tiled: K, V read once (held in L2)": [flash_hbm_bytes(batch, heads, n, head_dim,
                                                               kv_cached=True) for n in seqs],
    }
    for (label, values), color in zip(curves.items(), ("C0", "C3", "C2")):
        ax.plot(seqs, [v / 1e9 for v in values], marker="o", ms=4, label=label, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("bytes to and from device memory (GB)")
    ax.set_title(f"B = {batch}, H = {heads}, d = {head_dim}, fp32")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# The configuration of the chapter's table of measurements: batch 4, 16 heads,
# seq 1024, head_dim 64.
SOURCE_CONFIG = dict(batch=4, heads=16, seq=1024, head_dim=64)

NO_RESULTS_MESSAGE = (
    "No GPU results are committed yet. On a machine with an NVIDIA GPU, run "
    "`PYTHONPATH=src python benchmarks/attention.py`; it writes "
    "`benchmarks/results/attention-<gpu>-<date>.json`, and this section then "
    "shows its tables and figures.")


def _fmt(value, spec, missing="–"):
    return missing if value is None else format(value, spec)


def _ratio_span(results, variant, peer, causal, head_dim=64):
    """(least, greatest) of variant's time over peer's, over the sequence
    lengths where both ran at one head dimension, with the least and greatest
    of those lengths; None if they never both ran."""
    ours = {r["seq"]: r["ms"] for r in _rows(results, variant, causal, head_dim) if r["ms"]}
    theirs = {r["seq"]: r["ms"] for r in _rows(results, peer, causal, head_dim) if r["ms"]}
    both = sorted(set(ours) & set(theirs))
    if not both:
        return None
    ratios = [ours[n] / theirs[n] for n in both]
    return min(ratios), max(ratios), both[0], both[-1]


def benchmark_markdown(data, causal=False):
    """Markdown for the chapter: the measured table at `SOURCE_CONFIG`, the validation summary and where the naive versions ran out
    of memory, all read from one results file (see ``load_benchmark``)."""
    causal = _check_flag("causal", causal)
    results = data["results"]
    at = [r for r in results if r["causal"] == causal and all(
        r[k] == v for k, v in SOURCE_CONFIG.items())]
    by_variant = {r["variant"]: r for r in at}
    naive = by_variant.get("torch_naive", {}).get("ms")
    lines = [f"Measured on an **{data['gpu']}** on {data['date']} "
             f"(numba-cuda {data['versions'].get('numba_cuda')}, "
             f"torch {data['versions'].get('torch')}); {data.get('method', '')}.", "",
             "| variant | time (ms) | TFLOP/s | peak extra memory (MB) | max abs error | "
             "speed-up over PyTorch naive |",
             "|---|---|---|---|---|---|"]
    for variant, label in VARIANT_LABELS.items():
        r = by_variant.get(variant)
        if r is None:
            continue
        if r["ms"] is None:
            lines.append(f"| {label} | {r.get('status', 'not run')} | | | | |")
            continue
        speedup = f"{naive / r['ms']:.2f}x" if naive else "–"
        mem = None if r["peak_mem_bytes"] is None else r["peak_mem_bytes"] / 1e6
        lines.append(f"| {label} | {r['ms']:.3f} | {_fmt(r['tflops'], '.1f')} | "
                     f"{_fmt(mem, '.0f')} | {_fmt(r['max_abs_err'], '.1e')} | {speedup} |")
    ours, efficient = by_variant.get("flash", {}), by_variant.get("sdpa_efficient", {})
    if ours.get("ms") and ours.get("kernel_ms"):
        lines += ["", f"Of our {ours['ms']:.3f} ms, the kernel itself takes "
                  f"{ours['kernel_ms']:.3f} ms (launched with its arguments prepared once); "
                  f"the rest is the Python work of a `flash_attention` call: checking the "
                  f"inputs, allocating the outputs and launching."]
    if ours.get("ms") and efficient.get("ms"):
        ratio = ours["ms"] / efficient["ms"]
        verdict = (" (the same, to two digits)." if f"{ratio:.2f}" == "1.00" else
                   " (faster)." if ratio < 1 else " (slower).")
        lines += ["", f"Against PyTorch's memory-efficient backend, the fp32 peer, ours takes "
                  f"{ratio:.2f} times its time" + verdict]
    spans = [_ratio_span(results, "flash", "sdpa_efficient", mask) for mask in (False, True)]
    if all(spans):
        (low, high, n_low, n_high), (c_low, c_high, _, _) = spans
        lines += ["", f"Over N = {n_low:,} to {n_high:,} ours takes {low:.2f} to {high:.2f} "
                  f"times the memory-efficient backend's time without a mask, and "
                  f"{c_low:.2f} to {c_high:.2f} times with the causal mask."]
    spans = [_ratio_span(results, "flash", "sdpa_efficient", mask, 128) for mask in (False, True)]
    if all(spans):
        (low, high, n_low, n_high), (c_low, c_high, _, _) = spans
        lines += ["", f"At head dimension 128, over N = {n_low:,} to {n_high:,}, ours takes "
                  f"{low:.2f} to {high:.2f} times the memory-efficient backend's time without a "
                  f"mask, and {c_low:.2f} to {c_high:.2f} times with the causal mask."]
    validation = data.get("validation", [])
    if validation:
        passed = sum(r["passed"] for r in validation)
        lines += ["", f"Validation grid: **{passed} of {len(validation)}** configurations "
                  f"(batch × heads × seq × head_dim × causal) pass both acceptance tests; the "
                  f"worst maximum absolute error is "
                  f"{max(r['max_abs_err'] for r in validation):.1e} and the worst mean "
                  f"relative error {max(r['mean_rel_err'] for r in validation):.1e}."]
    ran = [r["seq"] for r in _rows(results, "flash", causal) if r["ms"] is not None]
    for variant in ("torch_naive", "naive_numba", "sdpa_math"):
        oom = first_oom_seq(results, variant, causal)
        if oom is not None:
            lines += ["", f"{VARIANT_LABELS[variant]} ran out of memory at N = {oom:,}"
                      + (f"; ours ran up to N = {max(ran):,}." if ran else ".")]
    return "\n".join(lines)


def throughput(results, seq=None, ours="flash"):
    """{head_dim: (ours, peer)} in TFLOP/s without a mask, ours (the variant
    `ours`: "flash", or "flash_cuda_cores" for the kernel on the CUDA cores)
    and SDPA memory-efficient's, at sequence length `seq` (default: the
    longest at which both ran at every head dimension measured), from the rows
    of an attention results file; with that seq. TFLOP/s as the benchmark
    records them: 4 B H N^2 d floating-point operations over the time."""
    if ours not in ("flash", "flash_cuda_cores"):
        raise ValueError(f"ours must be 'flash' or 'flash_cuda_cores', got {ours!r}")
    rates = {}
    for r in results:
        if not r["causal"] and r["variant"] in (ours, "sdpa_efficient") and r.get("tflops"):
            rates.setdefault(r["head_dim"], {}).setdefault(r["seq"], {})[r["variant"]] = \
                r["tflops"]
    both = [{n for n, v in by_seq.items() if len(v) == 2} for by_seq in rates.values()]
    common = set.intersection(*both) if both else set()
    if seq is None:
        if not common:
            raise ValueError("no sequence length at which ours and the memory-efficient backend "
                             "both ran at every head dimension")
        seq = max(common)
    elif seq not in common:
        raise ValueError(f"seq must be one at which both ran at every head dimension, one of "
                         f"{sorted(common)}; got {seq!r}")
    return {d: (by_seq[seq][ours], by_seq[seq]["sdpa_efficient"])
            for d, by_seq in sorted(rates.items())}, seq


def kernel_ratios(results, seqs=(512, 1024, 4096)) -> dict:
    """{(head_dim, causal, seq): (tensor cores, CUDA cores)}: our kernel on the
    tensor cores ("flash") and on the CUDA cores ("flash_cuda_cores"), each as
    a multiple of SDPA memory-efficient's time in the same run, from the rows
    of an attention results file, at the sequence lengths of `seqs` where all
    three ran; head dims ascending, no mask before causal."""
    times = {(r["variant"], r["head_dim"], r["causal"], r["seq"]): r["ms"] for r in results
             if r.get("ms")}
    found = {}
    for d in sorted({r["head_dim"] for r in results}):
        for causal in (False, True):
            for n in seqs:
                peer = times.get(("sdpa_efficient", d, causal, n))
                ours = times.get(("flash", d, causal, n))
                cores = times.get(("flash_cuda_cores", d, causal, n))
                if peer and ours and cores:
                    found[d, causal, n] = (ours / peer, cores / peer)
    return found


def kernels_markdown(data, seqs=(512, 1024, 4096)) -> str:
    """Markdown table for the chapter: kernel_ratios at `seqs`, with the
    issue's targets beside them (at most 1.1 at N = 512, 1.0 from 1024 on)."""
    ratios = kernel_ratios(data["results"], seqs)
    if not ratios:
        return "This results file has no rows of both kernels beside SDPA memory-efficient."
    lines = ["| head dim | mask | N | tensor cores / SDPA | CUDA cores / SDPA | target |",
             "|---|---|---|---|---|---|"]
    for (d, causal, n), (ours, cores) in ratios.items():
        target = "≤ 1.1" if n < 1024 else "≤ 1.0"
        lines.append(f"| {d} | {'causal' if causal else 'none'} | {n:,} | "
                     f"{ours:.2f} | {cores:.2f} | {target} |")
    return "\n".join(lines)


def steps_per_pass_times(record, config: FlashConfig) -> dict:
    """{steps_per_pass: (ms at seq 1024, ms at seq 4096)} of the tile shape of
    `config` (any steps_per_pass) in the tuning sweep of an attention results
    file (benchmarks/attention.py times each candidate at both lengths, in
    turns): what writing the loops out more steps a pass bought that shape.
    ValueError if the sweep did not time the shape."""
    base = replace(config, steps_per_pass=1)
    found = {}
    for row in record.get("tuning", []):
        if row.get("ms") is None or row.get("ms_seq4096") is None:
            continue
        shape = _parse_config(row["config"])
        if shape is not None and replace(shape, steps_per_pass=1) == base:
            found[shape.steps_per_pass] = (row["ms"], row["ms_seq4096"])
    if not found:
        raise ValueError(f"the record's tuning sweep did not time {base} at any steps per pass")
    return dict(sorted(found.items()))


def _parse_config(text: str) -> FlashConfig | None:
    """A FlashConfig from its repr as the results files write it (files from
    before steps_per_pass have none: one step), or None if it is not one."""
    import re

    fields = dict(re.findall(r"(\w+)=(\d+)", text))
    try:
        return FlashConfig(int(fields["head_dim"]), int(fields["block_rows"]),
                           int(fields["block_cols"]), int(fields["thread_rows"]),
                           int(fields["thread_cols"]), int(fields.get("steps_per_pass", 1)))
    except KeyError:
        return None


# -----------------------------------------------------------------------------
# Half precision (benchmarks/attention_half.py), as chapter 9 shows it


def _half_cases(record):
    """{(pass, type, seq, head_dim, causal): {"ours", "flash", "efficient": ms}}
    from an attention_half results file, pass "forward" or "backward", type
    "fp16" or "bf16"; and {(seq, head_dim, causal): ms} of ours in fp32. The
    backward's "ours" is flash_bwd_<type>, the default as a call runs it;
    rows of other versions or kernels (flash_bwd_v<n>, flash_bwd_two_kernels_*,
    flash_bwd_atomic_*) are left out."""
    cases, fp32 = {}, {}
    for r in record["results"]:
        shape = (r["seq"], r["head_dim"], r["causal"])
        if r["variant"] == "flash_fp32":
            fp32[shape] = min(r["ms"], fp32.get(shape, math.inf))
            continue
        if r["variant"].startswith(("flash_bwd_v", "flash_bwd_two_kernels", "flash_bwd_atomic")):
            continue  # not the default
        direction = "backward" if "_bwd_" in r["variant"] else "forward"
        who = ("flash" if r["variant"].startswith("sdpa_flash") else
               "efficient" if r["variant"].startswith("sdpa_efficient") else "ours")
        cases.setdefault((direction, r["dtype"]) + shape, {})[who] = r["ms"]
    return cases, fp32


def half_precision_ratios(record) -> dict:
    """Ours over SDPA's flash backend (tensor cores) in the same precision, as
    (lowest, highest) per pass ("forward", "backward"); and ours in half
    precision over ours in fp32 on the same shapes (forward)."""
    cases, fp32 = _half_cases(record)
    found = {}
    for direction in ("forward", "backward"):
        ratios = [ms["ours"] / ms["flash"] for key, ms in cases.items()
                  if key[0] == direction and "ours" in ms and "flash" in ms]
        if ratios:
            found[direction] = (min(ratios), max(ratios))
    own = [ms["ours"] / fp32[key[2:]] for key, ms in cases.items()
           if key[0] == "forward" and "ours" in ms and key[2:] in fp32]
    if own:
        found["half_over_fp32"] = (min(own), max(own))
    return found


def half_precision_markdown(record) -> str:
    """An attention_half results file as a markdown table: per pass, type and
    shape, ours, SDPA flash and memory-efficient in ms, ours in fp32 (forward),
    and ours over SDPA flash."""
    cases, fp32 = _half_cases(record)
    lines = []
    for key in sorted(cases, key=lambda k: (k[0] != "forward", k[1], k[2:])):
        direction, dtype, seq, d, causal = key
        ms = cases[key]

        def cell(name, table=ms):
            return f"{table[name]:.3f}" if name in table else "–"

        own = f"{fp32[key[2:]]:.3f}" if direction == "forward" and key[2:] in fp32 else "–"
        ratio = f"{ms['ours'] / ms['flash']:.1f}" if "ours" in ms and "flash" in ms else "–"
        lines.append(f"| {direction} | {dtype} | {seq:,} | {d} | {'yes' if causal else 'no'} | "
                     f"{cell('ours')} | {cell('flash')} | {cell('efficient')} | {own} | {ratio} |")
    return ("| pass | type | N | head dim | causal | ours (ms) | SDPA flash (ms) | SDPA "
            "memory-efficient (ms) | ours in fp32 (ms) | ours / SDPA flash |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(lines))


# -----------------------------------------------------------------------------
# The committed GPU run (benchmarks/attention_backward.py), as chapter 9 shows it


def backward_times(record) -> dict:
    """Per timed shape (seq, head_dim, causal) of a results file of
    benchmarks/attention_backward.py: {version: ms} for each version it timed
    and "sdpa" for SDPA memory-efficient's backward. The row "flash_bwd" is the
    default version of the day of the run (the file's default_version; files
    written before it was recorded timed version 2 as the default)."""
    default = record.get("default_version", 2)
    timed = {}
    for r in record["results"]:
        ms = timed.setdefault((r["seq"], r["head_dim"], r["causal"]), {})
        variant = r["variant"]
        if variant == "sdpa_efficient_bwd":
            ms["sdpa"] = r["ms"]
        elif variant == "flash_bwd":
            ms.setdefault(default, r["ms"])
        elif variant.startswith("flash_bwd_v"):
            ms[int(variant.removeprefix("flash_bwd_v"))] = r["ms"]
    return {shape: ms for shape, ms in timed.items() if "sdpa" in ms}  # not the long run


CUDA_CORE_VERSIONS = (1, 2, 3, 4)


def ladder_record(directory=None) -> dict:
    """The newest results file of benchmarks/attention_backward.py that timed
    every version on the CUDA cores (1 to 4) beside SDPA at each of its
    shapes: the ladder chapter 9 tells. Runs of the tensor-core version alone
    (``--versions 6``) time version 4 beside it and are left out. Raises
    ValueError if the folder holds no such file."""
    def every_version(record):
        times = backward_times(record)
        return bool(times) and all(set(CUDA_CORE_VERSIONS) <= set(ms) for ms in times.values())

    return _newest_backward_run(every_version, "versions 1-4", directory)


def tensor_core_record(directory=None) -> dict:
    """The newest results file of benchmarks/attention_backward.py that timed
    version 6 (the float32 backward on the tensor cores in 3xTF32) beside
    version 4 and SDPA. Raises ValueError if the folder holds none."""
    def has_version6(record):
        return any(6 in ms and 4 in ms for ms in backward_times(record).values())

    return _newest_backward_run(has_version6, "version 6", directory)


def _newest_backward_run(keep, timing: str, directory=None) -> dict:
    """The newest attention_backward results file that `keep` accepts; ValueError
    saying none times `timing` if there is none."""
    return results_files.newest_by(
        "attention_backward", lambda path, record: 0, directory, keep=keep,
        what=f"an attention_backward results file timing {timing}")[0]


def version6_ratios(record) -> dict:
    """{head_dim: {4: (lo, hi), 6: (lo, hi)}}: the range over the timed shapes
    of versions 4's and 6's times over SDPA memory-efficient's backward, from
    a results file that timed both (``tensor_core_record``), each as a call
    runs it (version 6 in one kernel at backward.ATOMIC_DQ_HEAD_DIMS[6])."""
    ranges = {}
    for shape, ms in sorted(backward_times(record).items()):
        for version in (4, 6):
            if version in ms:
                ranges.setdefault(shape[1], {}).setdefault(version, []).append(
                    ms[version] / ms["sdpa"])
    if not ranges:
        raise ValueError("record must time versions 4 and 6 beside SDPA (tensor_core_record)")
    return {d: {v: (min(r), max(r)) for v, r in by.items()} for d, by in ranges.items()}


def variant_ratios(record, variant: str) -> tuple[float, float]:
    """(lo, hi): the range over the timed shapes of a variant's time (a row
    benchmarks/attention_backward.py wrote as <variant>_bwd, one of version
    6's variants) over SDPA memory-efficient's backward in the same run.
    Raises ValueError if the record timed no such variant."""
    timed = backward_times(record)  # per shape, SDPA's time among the versions'
    ratios = [r["ms"] / timed[shape]["sdpa"] for r in record["results"]
              if r["variant"] == f"{variant}_bwd" and r.get("ms") is not None
              and (shape := (r["seq"], r["head_dim"], r["causal"])) in timed]
    if not ratios:
        raise ValueError(f"record must time the variant {variant!r} beside SDPA "
                         f"(a row {variant}_bwd); it does not")
    return min(ratios), max(ratios)


def launch_path_times(record) -> dict:
    """{(seq, head_dim, causal): (quick, long)}: the default version's time a
    call through its quick torch path ("flash_bwd") and through Numba's own
    launches ("flash_bwd_long", QUICK_TORCH_PATH off), in ms, from a results
    file of benchmarks/attention_backward.py that timed both (from
    2026-11-26 on); {} for older files."""
    timed = {}
    for r in record["results"]:
        if r["variant"] in ("flash_bwd", "flash_bwd_long") and r.get("ms") is not None:
            timed.setdefault((r["seq"], r["head_dim"], r["causal"]), {})[r["variant"]] = r["ms"]
    return {shape: (ms["flash_bwd"], ms["flash_bwd_long"]) for shape, ms in sorted(timed.items())
            if len(ms) == 2}


def backward_markdown(record) -> str:
    """A results file of benchmarks/attention_backward.py (``results.load_results(
    "attention_backward")``) as a markdown table: per shape, each version's and
    SDPA memory-efficient's backward in ms, and the fastest of ours over SDPA."""
    timed = backward_times(record)
    versions = sorted({v for ms in timed.values() for v in ms if v != "sdpa"})
    lines = []
    for (seq, d, causal), ms in sorted(timed.items()):
        cells = [f"{seq:,}", str(d), "yes" if causal else "no"]
        cells += [f"{ms[v]:.1f}" if v in ms else "–" for v in versions]
        best = min(ms[v] for v in versions if v in ms)
        cells += [f"{ms['sdpa']:.1f}", f"{best / ms['sdpa']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    header = (["N", "head dim", "causal"] + [f"version {v} (ms)" for v in versions]
              + ["SDPA memory-efficient (ms)", "fastest of ours / SDPA"])
    return ("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
            + "\n".join(lines))


def causal_launch_tail(tiles: int, heads: int, slots: int, heaviest_first: bool,
                       tile_bytes: int | None = None) -> float:
    """How long a causal launch takes against a perfect share of its work,
    when its blocks start in order, each on the first of `slots` places (the
    blocks the GPU runs at once) to come free: tiles x heads blocks, the
    block of tile t (0 first) costing t + 1 steps (query tile t walks the key
    tiles up to it). heaviest_first False: each head's tiles in turn, lightest
    first (blockIdx's order); True: the kernels' order under a causal mask,
    ``attention.limits.heaviest_first``, over all heads at once, or, given
    tile_bytes, in the kernels' groups of ``limits.head_group`` heads. 1.0 is
    no tail."""
    import heapq

    from gpucourse.kernels.attention.limits import head_group
    from gpucourse.kernels.attention.limits import heaviest_first as placed

    for name, value in (("tiles", tiles), ("heads", heads), ("slots", slots)):
        _count(name, value)
    group = heads if tile_bytes is None else head_group(tiles, heads, _count("tile_bytes",
                                                                           tile_bytes))
    order = [placed(start, tiles, heads, True, group)[1] if heaviest_first else start % tiles
             for start in range(tiles * heads)]
    free = [0] * slots
    end = 0
    for t in order:
        start = heapq.heappop(free)
        end = max(end, start + t + 1)
        heapq.heappush(free, start + t + 1)
    return end / (heads * tiles * (tiles + 1) / 2 / slots)


def causal_order_times(record: dict) -> list:
    """From a benchmarks/causal_order.py record: per kernel and shape (ours
    alone, not the peers), the time of the library's order (heads in groups,
    heaviest first) over blockIdx's order and over every head at once, as
    rows (variant, seq, head_dim, groups/index, groups/all heads), largest
    gain first. Raises ValueError naming what the record lacks."""
    if not isinstance(record, dict) or record.get("benchmark") != "causal_order":
        raise ValueError("record must be a causal_order results record "
                         "(benchmarks/causal_order.py writes one)")
    ms = {(r["order"], r["variant"], r["seq"], r["head_dim"]): r["ms"]
          for r in record.get("results", [])}
    rows = []
    for (order, variant, seq, d), t in ms.items():
        if order != "groups" or variant.startswith("sdpa"):
            continue
        missing = [o for o in ("index", "all_heads") if (o, variant, seq, d) not in ms]
        if missing:
            raise ValueError(f"record lacks the {missing} order of {variant} at N {seq}, d {d}")
        rows.append((variant, seq, d, t / ms["index", variant, seq, d],
                     t / ms["all_heads", variant, seq, d]))
    if not rows:
        raise ValueError("record holds no timing of the library's order (groups)")
    return sorted(rows, key=lambda row: row[3])


def causal_order_summary(record: dict) -> dict:
    """Chapter 9's sentence on the measured block orders, from
    ``causal_order_times``: how many kernel-shape pairs the grouped order
    made faster than blockIdx's, the range of those ratios, the slower ones
    named, and the range against every head at once (text, to glue)."""
    rows = causal_order_times(record)
    names = {"flash_bwd": "the fp32 backward", "flash_fp16": "the fp16 forward",
             "flash_bwd_fp16": "the fp16 backward"}
    faster = [row for row in rows if row[3] < 1]
    slower = [f"{names.get(v, v)} at d = {d}, N = {n} ({ratio:.2f}x)"
              for v, n, d, ratio, _ in rows if ratio >= 1]
    return {"gpu": record.get("gpu", "GPU"), "date": record.get("date", ""),
            "pairs": str(len(rows)), "faster": str(len(faster)),
            "faster_range": f"{min(r[3] for r in faster):.2f}-{max(r[3] for r in faster):.2f}"
            if faster else "none",
            "slower": "; ".join(slower) if slower else "none",
            "all_heads_range": f"{min(r[4] for r in rows):.2f}-{max(r[4] for r in rows):.2f}"}


def one_kernel_head_dims(version: int = 5) -> dict:
    """Where version 5 or 6's backward adds dQ atomically by default, from the
    kernel that walks the queries (backward.ATOMIC_DQ_HEAD_DIMS: one kernel
    instead of two, or for version 6 at its split-sums head dims, the dK
    kernel of two), as text to glue: "both", the head dims
    where it does with and without a causal mask; "causal", those where it
    does under a causal mask alone (" and " between several)."""
    from gpucourse.kernels.attention.backward import ATOMIC_DQ_HEAD_DIMS

    if version not in ATOMIC_DQ_HEAD_DIMS:
        raise ValueError(f"version must be one of {sorted(ATOMIC_DQ_HEAD_DIMS)}, got {version!r}")
    masks = ATOMIC_DQ_HEAD_DIMS[version]
    return {"both": " and ".join(str(d) for d, m in masks.items() if set(m) == {False, True}),
            "causal": " and ".join(str(d) for d, m in masks.items() if tuple(m) == (True,))}
