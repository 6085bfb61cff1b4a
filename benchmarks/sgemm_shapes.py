"""SGEMM at every size, timed as a user calls it, and the tiles level "auto" picks by shape.

    PYTHONPATH=src python3 benchmarks/sgemm_shapes.py [--no-search] [--out DIR]

1. **Search** (skipped with --no-search). For each tuning shape it times level
   6's kernel with every tile configuration of SEARCH_SPACE that passes
   sgemm.check_config and has 64-256 threads and at most 128 x 256 outputs per
   block: first a quick pass (CUDA events around 20 back-to-back calls of
   sgemm.matmul), then the three fastest again, each with K cut into 1, 2 and
   4 slices (split-K), with the median timing of benchmarks/sgemm.py. The
   fastest per shape goes into the GPU's "by_shape"
   list in src/gpucourse/kernels/sgemm_tuned.json, which sgemm.auto_config
   reads (a copy goes to DIR). Small products want small tiles: 1024^3 in
   level 6's 128 x 256 tiles is 32 blocks for the H100's 132 SMs.
2. **The table.** For each shape of SHAPES it calls cuBLAS (torch.mm, TF32 off),
   level 6 and level "auto" the way a user does, on CUDA torch tensors, and
   records per variant: `ms`, the wall-clock time per call over a loop of calls
   ending in a synchronize (host work included: what a caller waits for), and
   `kernel_ms`, CUDA events around back-to-back calls (the GPU's own time, as
   benchmarks/sgemm.py measures). Both are medians of 3 rounds, the variants
   taking turns. Each result is checked against cuBLAS first.

It writes DIR/sgemm_shapes-<gpu-slug>-<YYYY-MM-DD>.json (CONVENTIONS.md rows:
variant, m, n, k, ms, tflops, vs_cublas, max_rel_err, plus kernel_ms and the
configuration used). Needs an NVIDIA GPU, torch with CUDA, numba and
numba-cuda.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import time
from pathlib import Path

from sgemm import time_ms, versions  # benchmarks/sgemm.py: the same timing and versions

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from gpucourse.kernels import sgemm  # noqa: E402
from gpucourse.results import gpu_slug  # noqa: E402

# The table: the cost of one call, then square sizes, a tall product and a deep K.
SHAPES = [(1, 1, 1), (512, 512, 512), (1024, 1024, 1024), (1536, 1536, 1536),
          (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 1024, 1024), (1024, 1024, 8192)]
TUNING_SHAPES = [(512, 512, 512), (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048),
                 (16384, 1024, 1024), (1024, 1024, 8192)]
SEARCH_SPACE = {"bm": (64, 128, 256), "bn": (64, 128, 256), "bk": (8, 16, 32),
                "tm": (4, 8, 16), "tn": (4, 8, 16)}
SPLITS = (1, 2, 4)  # slices of K tried for each finalist (split-K)
ROUNDS = 3


def search_configs() -> list:
    return [c for c in sgemm.candidate_configs(SEARCH_SPACE)
            if c.bm * c.bn <= 128 * 256 and 64 <= c.threads <= 256]


def quick_ms(call, calls: int = 20) -> float:
    call()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / calls


def wall_ms(call, calls: int) -> float:
    """Wall-clock ms per call of a loop of calls that ends in a synchronize."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def relative_error(c, reference) -> float:
    scale = float(reference.abs().max()) or 1.0
    error = float((c - reference).abs().max()) / scale
    return error if np.isfinite(error) else float("inf")


def search(shapes, progress=True) -> list[dict]:
    """The fastest configuration per shape (quick pass, then the best three timed again)."""
    configs = search_configs()
    found = []
    for m, n, k in shapes:
        a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
        reference = torch.mm(a, b)
        quick = []
        for config in tqdm(configs, desc=f"search {m}x{n}x{k}", disable=not progress):
            if relative_error(sgemm.matmul(a, b, 6, config=config), reference) > 1e-4:
                continue
            quick.append((quick_ms(lambda: sgemm.matmul(a, b, 6, config=config)), config))
        finalists = [config for _, config in sorted(quick, key=lambda t: t[0])[:3]]
        timed = []
        for config in finalists:
            for splits in SPLITS:
                call = lambda: sgemm.matmul(a, b, 6, config=config, splits=splits)  # noqa: E731
                if relative_error(call(), reference) <= 1e-4:
                    timed.append((time_ms(call)[0], config, splits))
        ms, best, splits = min(timed, key=lambda t: t[0])
        found.append({"m": m, "n": n, "k": k, **vars(best), "splits": splits, "ms": ms,
                      "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12,
                      "date": datetime.date.today().isoformat()})
        print(f"{m}x{n}x{k}: {best}, {splits} split(s) of K: {ms * 1e3:.1f} us", flush=True)
    return found


def save_by_shape(gpu: str, rows: list[dict]) -> None:
    table = json.loads(sgemm.TUNED_PATH.read_text()) if sgemm.TUNED_PATH.exists() else {}
    entry = table.setdefault(gpu, {**vars(sgemm.DEFAULT_TUNED)})
    entry["by_shape"] = rows
    sgemm.TUNED_PATH.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")
    sgemm._tuned_here.cache_clear()
    sgemm._by_shape_here.cache_clear()
    sgemm._plan_here.cache_clear()


def table_rows(shapes, progress=True) -> list[dict]:
    rows = []
    for m, n, k in tqdm(shapes, desc="table", disable=not progress):
        a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
        reference = torch.mm(a, b)
        variants = {"cublas": lambda: torch.mm(a, b),
                    "level6": lambda: sgemm.matmul(a, b, 6),
                    "auto": lambda: sgemm.matmul(a, b, "auto")}
        errors = {name: relative_error(call(), reference) for name, call in variants.items()}
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
            if name == "auto":
                config, splits = sgemm.auto_plan((m, n, k))
                row["config"] = {**vars(config), "splits": splits}
            if name == "level6":
                row["config"] = vars(sgemm.tuned_config())
            rows.append(row)
        shown = ", ".join(f"{r['variant']} {r['ms'] * 1e3:.1f} us ({r['vs_cublas']:.0%})"
                          for r in rows[-3:])
        print(f"{m}x{n}x{k}: {shown}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--no-search", action="store_true",
                        help="keep the by-shape table of sgemm_tuned.json as it is")
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    gpu = sgemm.gpu_model()
    today = datetime.date.today().isoformat()
    record = {"benchmark": "sgemm_shapes", "gpu": gpu, "date": today, "versions": versions(),
              "method": (f"variants in turns, {ROUNDS} rounds, median; ms: wall clock per call "
                         "of a loop of calls on CUDA torch tensors ending in "
                         "torch.cuda.synchronize (host work included); kernel_ms: CUDA events "
                         "around back-to-back calls (benchmarks/sgemm.py's time_ms); TF32 off; "
                         "N(0,1) inputs; max_rel_err = max|C - C_cublas| / max|C_cublas|")}
    if not args.no_search:
        record["search"] = {"space": SEARCH_SPACE, "configs": len(search_configs()),
                            "by_shape": search(TUNING_SHAPES)}
        save_by_shape(gpu, record["search"]["by_shape"])
        shutil.copy(sgemm.TUNED_PATH, out_dir / "sgemm_tuned.json")
    record["results"] = table_rows(SHAPES)
    path = out_dir / f"sgemm_shapes-{gpu_slug(gpu)}-{today}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return 1 if any(r["failed"] for r in record["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
