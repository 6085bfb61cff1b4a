"""SGEMM at every size, timed as a user calls it, and the tiles level "auto" picks by shape.

    PYTHONPATH=src python3 benchmarks/sgemm_shapes.py [--no-search | --split-k] [--out DIR]

1. **Search** (skipped with --no-search). For each tuning shape it times level
   6's kernel with every tile configuration of SEARCH_SPACE that passes
   sgemm.check_config and has 64-256 threads and at most 128 x 256 outputs per
   block: first a quick pass (CUDA events around 20 back-to-back calls of
   sgemm.matmul), then the three fastest again, each with K cut into each
   number of slices of SPLITS (split-K in one launch, sgemm.matmul's
   split_sum="atomic"), with the median timing of benchmarks/sgemm.py. At the
   deep-K and 2048^3 shapes (SPLIT_SHAPES) the quick pass also tries the
   split-K candidates (split_candidates(): bk = 16, tiles of 64 x 128 and
   larger) with every number of slices, and the three configurations fastest
   at one slice join the finals as well: a tile too large to fill the GPU
   alone may win once K is cut. The fastest per shape is recorded in the
   results file ("search"); auto no longer reads a table of them (it prices
   plans with the shape model, kernels/sgemm/shape_model.py), but
   benchmarks/sgemm_grid.py --fit-committed fits the model's constants to
   these searches and timings. Small products want small tiles: 1024^3 in
   level 6's 128 x 256 tiles is 32 blocks for the H100's 132 SMs.
2. **The table.** For each shape of SHAPES it calls cuBLAS (torch.mm, TF32 off),
   level 6 and level "auto" the way a user does, on CUDA torch tensors, and
   "auto" on Numba device arrays viewing the same memory (auto_numba), and
   records per variant: `ms`, the wall-clock time per call over a loop of calls
   ending in a synchronize (host work included: what a caller waits for), and
   `kernel_ms`, CUDA events around back-to-back calls (the GPU's own time, as
   benchmarks/sgemm.py measures). Both are medians of 3 rounds, the variants
   taking turns. Each result is checked against cuBLAS first.

It writes DIR/sgemm_shapes-<gpu-slug>-<YYYY-MM-DD>.json (CONVENTIONS.md rows:
variant, m, n, k, ms, tflops, vs_cublas, max_rel_err, plus kernel_ms and the
configuration used). Needs an NVIDIA GPU, torch with CUDA, numba and
numba-cuda.

**--split-k** runs only the split-K part, at SPLIT_SHAPES, and leaves
sgemm_tuned.json alone: the search above at those shapes (every finalist's
kernel time at each number of slices is kept, in "split_search"), then the
table's rows there plus "split_k", the fastest (tiles, slices) found, in one
launch, and "split_k_partials", the same with a partial C per slice added by
a last kernel (split_sum="partials", the path measured on 2026-11-25). It
writes DIR/sgemm_split_k-<gpu-slug>-<YYYY-MM-DD>.json.
"""

from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path

from _common import benchmark_parser, record_start, start, versions, wall_ms, write_record
from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from gpucourse.kernels import sgemm  # noqa: E402

# The table: the cost of one call, then square sizes, a tall product and a deep K.
SHAPES = [(1, 1, 1), (512, 512, 512), (1024, 1024, 1024), (1536, 1536, 1536),
          (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 1024, 1024), (1024, 1024, 8192)]
TUNING_SHAPES = [(512, 512, 512), (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048),
                 (16384, 1024, 1024), (1024, 1024, 8192)]
# Tiles 16 deep only: every shape's winner of the search of 2026-11-25 over
# depths 8, 16 and 32 was 16 deep, and since the whole tile's dot loop is
# written out (sgemm.DOT_UNROLL) each configuration takes a few seconds to compile.
SEARCH_SPACE = {"bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (16,),
                "tm": (4, 8, 16), "tn": (4, 8, 16)}
SPLITS = (1, 2, 3, 4, 6, 8)  # slices of K tried for each finalist (split-K, one launch)
# Where the quick pass also tries split-K: few tiles of C for the GPU's SMs.
SPLIT_SHAPES = [(1024, 1024, 8192), (2048, 2048, 2048)]
ROUNDS = 3


def search_configs() -> list:
    return [c for c in sgemm.candidate_configs(SEARCH_SPACE)
            if c.bm * c.bn <= 128 * 256 and 64 <= c.threads <= 256]


def split_candidates() -> list:
    """The configurations the quick pass tries with K cut (at SPLIT_SHAPES): tiles
    of 64 x 128 outputs and more, 16 deep (the depth of every large-shape winner
    so far). Each needs its own split-K kernel compiled."""
    return [c for c in search_configs() if c.bk == 16 and c.bm * c.bn >= 64 * 128]


def quick_ms(call, calls: int = 20) -> float:
    call()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / calls


def relative_error(c, reference) -> float:
    scale = float(reference.abs().max()) or 1.0
    error = float((c - reference).abs().max()) / scale
    return error if np.isfinite(error) else float("inf")


def _distinct(ranked: list, count: int) -> list:
    """The first `count` different configurations of (ms, config, splits) rows."""
    found = []
    for _, config, _ in ranked:
        if len(found) == count:
            break
        if config not in found:
            found.append(config)
    return found


def finalists(quick: list, count: int = 3) -> list:
    """From quick-pass timings (ms, config, splits): the `count` configurations
    fastest with any number of slices, then any of the `count` fastest with one
    slice not already among them."""
    ranked = sorted(quick, key=lambda t: t[0])
    first = _distinct(ranked, count)
    return first + [c for c in _distinct([t for t in ranked if t[2] == 1], count)
                    if c not in first]


def search(shapes, progress=True, timings=None) -> list[dict]:
    """The fastest configuration and number of slices of K per shape (quick pass,
    then the finalists timed again at every number of slices in SPLITS). With a
    list `timings`, every finalist's time is appended to it."""
    configs = search_configs()
    found = []
    for m, n, k in shapes:
        a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
        reference = torch.mm(a, b)
        tries = [(config, 1) for config in configs]
        if (m, n, k) in SPLIT_SHAPES:
            tries += [(config, splits) for config in split_candidates() for splits in SPLITS[1:]]
        quick = []
        for config, splits in tqdm(tries, desc=f"search {m}x{n}x{k}", disable=not progress):
            call = lambda: sgemm.matmul(a, b, 6, config=config, splits=splits)  # noqa: E731
            if relative_error(call(), reference) > 1e-4:
                continue
            quick.append((quick_ms(call), config, splits))
        timed = []
        for config in finalists(quick):
            for splits in SPLITS:
                call = lambda: sgemm.matmul(a, b, 6, config=config, splits=splits)  # noqa: E731
                error = relative_error(call(), reference)
                if error <= 1e-4:
                    timed.append((time_ms(call)[0], config, splits))
                    if timings is not None:
                        ms = timed[-1][0]
                        timings.append({"m": m, "n": n, "k": k, **vars(config), "splits": splits,
                                        "split_sum": "atomic" if splits > 1 else None,
                                        "kernel_ms": ms,
                                        "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12,
                                        "max_rel_err": error})
        ms, best, splits = min(timed, key=lambda t: t[0])
        found.append({"m": m, "n": n, "k": k, **vars(best), "splits": splits, "ms": ms,
                      "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12,
                      "date": datetime.date.today().isoformat()})
        print(f"{m}x{n}x{k}: {best}, {splits} split(s) of K: {ms * 1e3:.1f} us", flush=True)
    return found


def table_rows(shapes, progress=True, split_plans=None) -> list[dict]:
    """The table's rows at `shapes`. split_plans: {(m, n, k): (config, splits)}
    adds, at those shapes, "split_k" (matmul with that configuration and
    number of slices, one launch) and "split_k_partials" (the same, adding a
    partial C per slice)."""
    split_plans = split_plans or {}
    rows = []
    for m, n, k in tqdm(shapes, desc="table", disable=not progress):
        a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
        reference = torch.mm(a, b)
        # auto_numba: the same call on Numba device arrays (views of the same
        # memory), whose result is a Numba device array.
        a_numba, b_numba = sgemm.cuda.as_cuda_array(a), sgemm.cuda.as_cuda_array(b)
        variants = {"cublas": lambda: torch.mm(a, b),
                    "level6": lambda: sgemm.matmul(a, b, 6),
                    "auto": lambda: sgemm.matmul(a, b, "auto"),
                    "auto_numba": lambda: sgemm.matmul(a_numba, b_numba)}
        plan = split_plans.get((m, n, k))
        if plan is not None:
            variants["split_k"] = lambda: sgemm.matmul(a, b, 6, config=plan[0], splits=plan[1])
            variants["split_k_partials"] = lambda: sgemm.matmul(
                a, b, 6, config=plan[0], splits=plan[1], split_sum="partials")
        errors = {name: relative_error(torch.as_tensor(call(), device="cuda"), reference)
                  for name, call in variants.items()}
        one = quick_ms(variants["cublas"], 3)
        calls = int(min(2000, max(10, 200.0 / max(one, 1e-3))))  # about 200 ms a round
        walls = {name: [] for name in variants}
        kernels = {name: [] for name in variants}
        for _ in range(ROUNDS):
            for name, call in variants.items():
                call()
                walls[name].append(wall_ms(call, calls))
                kernels[name].append(time_ms(call)[0])
        cublas_ms = float(np.median(walls["cublas"]))
        for name in variants:
            ms = float(np.median(walls[name]))
            row = {"variant": name, "m": m, "n": n, "k": k, "ms": ms,
                   "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12, "vs_cublas": cublas_ms / ms,
                   "kernel_ms": float(np.median(kernels[name])),
                   "max_rel_err": errors[name], "failed": not errors[name] <= 1e-4}
            if name in ("auto", "auto_numba"):
                config, splits = sgemm.auto_plan((m, n, k))
                row["config"] = {**vars(config), "splits": splits}
            if name == "level6":
                row["config"] = vars(sgemm.tuned_config())
            if name.startswith("split_k"):
                row["config"] = {**vars(plan[0]), "splits": plan[1],
                                 "split_sum": "atomic" if name == "split_k" else "partials"}
            rows.append(row)
        shown = ", ".join(f"{r['variant']} {r['ms'] * 1e3:.1f} us ({r['vs_cublas']:.0%})"
                          for r in rows[-len(variants):])
        print(f"{m}x{n}x{k}: {shown}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--no-search", action="store_true",
                        help="keep the by-shape table of sgemm_tuned.json as it is")
    parser.add_argument("--split-k", action="store_true",
                        help="only the split-K search and table at SPLIT_SHAPES (one launch "
                             "against a partial C per slice); sgemm_tuned.json untouched")
    args, started = start(parser, argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = sgemm.gpu_model()
    record = record_start(
        "sgemm_shapes", gpu, versions(),
        (f"variants in turns, {ROUNDS} rounds, median; ms: wall clock per call "
         "of a loop of calls on CUDA torch tensors ending in "
         "torch.cuda.synchronize (host work included); kernel_ms: CUDA events "
         "around back-to-back calls (benchmarks/sgemm.py's time_ms); TF32 off; "
         "N(0,1) inputs; max_rel_err = max|C - C_cublas| / max|C_cublas|"))
    if args.split_k:
        return split_k_main(record, out_dir, started)
    if not args.no_search:
        record["search"] = {"space": SEARCH_SPACE, "configs": len(search_configs()),
                            "split_configs": len(split_candidates()), "splits": SPLITS,
                            "by_shape": search(TUNING_SHAPES)}
    record["results"] = table_rows(SHAPES)
    record["elapsed_s"] = time.perf_counter() - started
    path = write_record(record, out_dir)
    print(f"wrote {path} ({record['elapsed_s']:.0f} s)")
    return 1 if any(r["failed"] for r in record["results"]) else 0


def split_k_main(record: dict, out_dir: Path, started: float) -> int:
    """--split-k: the search at SPLIT_SHAPES, its finalists' times, and the table
    there with the best split-K plan in one launch and with partials."""
    record["benchmark"] = "sgemm_split_k"
    timings = []
    best = search(SPLIT_SHAPES, timings=timings)
    record["split_search"] = {"space": SEARCH_SPACE, "configs": len(search_configs()),
                              "split_configs": len(split_candidates()), "splits": SPLITS,
                              "best": best, "finalists": timings}
    # At each shape the fastest finalist with several slices (the search's best
    # when that has several), timed both ways of adding the slices.
    plans = {}
    for m, n, k in SPLIT_SHAPES:
        several = [t for t in timings if (t["m"], t["n"], t["k"]) == (m, n, k) and t["splits"] > 1]
        if several:
            fastest = min(several, key=lambda t: t["kernel_ms"])
            config = sgemm.TileConfig(**{f: fastest[f] for f in ("bm", "bn", "bk", "tm", "tn")})
            plans[m, n, k] = (config, fastest["splits"])
    record["results"] = table_rows(SPLIT_SHAPES, split_plans=plans)
    record["elapsed_s"] = time.perf_counter() - started
    path = write_record(record, out_dir)
    print(f"wrote {path} ({record['elapsed_s']:.0f} s)")
    return 1 if any(r["failed"] for r in record["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
