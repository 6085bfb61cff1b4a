"""SGEMM on a grid of the shapes users call: auto and level 7 as a user calls them, beside cuBLAS.

    PYTHONPATH=src python3 benchmarks/sgemm_grid.py [--quick] [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_grid.py --calibrate [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_grid.py --rates [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_grid.py --rates-variants [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_grid.py --explore | --explore-off-grid [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_grid.py --padding [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_grid.py --fit-committed     (no GPU)

The shapes were chosen before any tuning against them and are written here
(GRID): five classes of issue 33, several members each, plus "square" for
level 7's targets at 4096^3 and 8192^3:

* ragged: no side a multiple of 16, some rows not a multiple of 4 (the
  scalar loads);
* skinny: M or N at most 512;
* deep_k: K from 8k to 64k;
* small: every side from 32 to 512;
* transformer: chapter 10's tiny GPT (256 wide, 256 sequences of 39 tokens:
  9984 rows) and GPT-2-sized layers (768 wide, 8 x 1024 tokens), forward and
  weight-gradient products.

1. **Validation** (before any timing). auto and level 7's default on ragged
   shapes of each class, a deep-K product auto cuts into slices (split-K's
   atomic sums) and products whose A holds a NaN and an Inf, into outputs
   poisoned with NaN, against torch.mm in float64: relative error at most
   max(1e-5, 4 x cuBLAS's own), and NaN exactly where float64 has it.
2. **The grid.** At each shape: cuBLAS (torch.mm, TF32 off), `matmul(a, b)`
   (auto) and `matmul(a, b, 7)` (level 7's default, WARP_TILE_DEFAULT) on CUDA
   torch tensors, as a user calls them, in turns over 3 rounds, median:
   `ms`, the wall clock per call of a loop ending in a synchronize (what a
   caller waits for), and `kernel_ms`, CUDA events around back-to-back calls
   (benchmarks/sgemm.py's time_ms). Each result is checked against cuBLAS.
   Auto's rows carry the shape model's reasoning (tiles, waves, tail and
   padding efficiency, predicted time). Shapes still waiting after BUDGET_S
   seconds are listed as skipped (one device call must stay under 9 minutes).

It writes DIR/sgemm_grid-<gpu-slug>-<YYYY-MM-DD>.json (CONVENTIONS.md rows,
plus "class", "config" and "model"). --quick: the first two shapes of each
class, one round, written as ...-quick.json.

**--calibrate** times level 6's kernel with every plan of the shape model's
menu (each configuration, with the slices of K the model would consider) at
CALIBRATION_SHAPES, which are not in the grid, fits the model's constants to
those times (shape_model_fit.calibrate) and writes them, with their source, into
src/gpucourse/kernels/sgemm/sgemm_shape_model.json for this GPU, and the
timings to DIR/sgemm_calibration-<gpu-slug>-<date>.json. Commit both; then
run the grid.

**--rates** measures what the model's rate formula guesses: for each tile of
the menu, level 6's kernel (CUDA events, benchmarks/sgemm.py's time_ms) on
products of exactly q blocks an SM (q x SMs tiles, no edges, K whole) for q
= 1 to RATE_BLOCKS, at the depths RATE_KS, so that each (tile, q) gives a
time per column of K and a fixed time (shape_model.rates_from_record: a
line through the timings; the shallow depths are there for the fixed time,
which the model guessed 20-50% too long at K up to 1000 in the explore of
2026-11-29). Writes
DIR/sgemm_rates-<gpu-slug>-<date>.json and the rates, with their source, into
src/gpucourse/kernels/sgemm/sgemm_shape_model.json for this GPU, where auto
prices each tile by them (commit both).

**--rates-variants** times what the rates leave out, for each tile of
--rates (the menu and RATE_CANDIDATES) at K = VARIANT_K and q = 2, 8 and the
tile's residency limit (the model's count) blocks an SM, each product as
auto runs it (matmul with the plan's tile and slices: the same launches),
CUDA events as --rates: "whole", the rates' product (q x SMs tiles in
tile_grid's near-square grid of tiles, K whole); "split", the same product
in VARIANT_SPLITS slices of K (split_k.py's edge-checked kernel, C zeroed,
atomic sums), timed beside it so that their ratio is side by side;
"transposed", as many tiles in the transposed grid of tiles (rows and
columns of tiles swapped), K whole; "square", as many tiles in the grid
whose matrix is nearest square, where that is neither of the two (the
hypothesis that 128 x 256 runs ~4.5% faster in square matrices than in the
rates' wide ones). Each checked against float64. Writes
DIR/sgemm_rates_variants-<gpu-slug>-<date>.json and, where every result is
right and the entry has rates for every tile, each tile's split share
(shape_model_fit.split_shares_from_record) into the model's JSON as
"split_kernel", which plan_cost charges split plans from then on (commit
both only if a grid run with it is no worse). Time: 117 timings (12 tiles at
2-3 counts, 3-4 products each; 7.7 TFLOP once through) and 24 compilations
(each tile's kernel with K whole and split_k's): the rates of 2026-11-28
took 75 s for 160 timings and 10 compilations, about 0.27 s a timing (time_ms:
13 batches of >= 20 ms) and 3 s a compilation, so about 32 + 72 s and the
start: about 2 minutes on an H100 or H200. Tiles still waiting after
VARIANT_BUDGET_S are skipped (listed), so that it stays under 3.

**--explore** times, at each grid shape under its target (EXPLORE_SHAPES),
cuBLAS and the model's cheapest plans as auto runs them, and tiles outside
the menu (RATE_CANDIDATES): whether a miss is the pick's or the kernel's
(chapter 8). **--explore-off-grid** does the same at OFF_GRID_SHAPES, for
evidence the grid does not judge.

**--padding** times auto at the grid's ragged shapes (K or N not a multiple
of 4, 7 of them) as a user calls it, with the ragged operands copied into
padded buffers first (sgemm.padding; entry_point.PAD_RAGGED True) and with
scalar loads (False), beside cuBLAS, each checked against it, with the
model's price of both. Writes DIR/sgemm_padding-<gpu-slug>-<date>.json, and
gives the GPU's entry in the model's JSON a "padding" block (auto then pads
where the model finds it cheaper) only if padding won at every shape where
the model pads (``padding_block``; keep it only if a grid run with it is no
worse). Time: 7 shapes,
each a few loops of about 30 ms: under a minute and the compilations.

**--fit-committed** (CPU only) fits the constants of the H100 and the H200 to
the committed sgemm_shapes results (their rows of auto and level 6, and the
plans their searches found slower as lower bounds) and writes them into the
model's JSON: how the constants in it now were made. **--fit-scalar-loads**
(CPU only) fits the H200's scalar-load shares, one a tile, to the committed
explores (shape_model_fit.fit_scalar_load_shares). **--fit-stream-share** (CPU
only) fits the H200's stream-K share to the committed sgemm_stream run. These
writers, and those of the GPU runs above, live in sgemm_model_json.py.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path

from _common import (benchmark_parser, need_a_gpu, record_start, start, versions, wall_ms,
                     write_record)
from sgemm_model_json import (fit_committed, fit_scalar_loads, fit_stream_share, save_constants,
                              save_rates, save_split_shares, update_entry)

GPT2_TOKENS, TINY_TOKENS = 8 * 1024, 256 * 39
GRID = {
    "ragged": [(1000, 1000, 1000), (1537, 1023, 771), (2500, 1999, 3001), (777, 1313, 2047),
               (3001, 2999, 1009), (4001, 4003, 4005)],
    "skinny": [(512, 4096, 4096), (4096, 256, 4096), (128, 8192, 2048), (8192, 64, 1024),
               (384, 3000, 5000), (4096, 4096, 96)],
    "deep_k": [(1024, 1024, 16384), (512, 512, 32768), (256, 384, 65536), (2048, 2048, 8192),
               (768, 768, 12288), (300, 500, 20000)],
    "small": [(32, 32, 32), (64, 64, 64), (100, 100, 100), (128, 256, 64), (300, 200, 400),
              (256, 256, 256), (511, 511, 511), (512, 512, 512)],
    "transformer": [(TINY_TOKENS, 768, 256), (TINY_TOKENS, 256, 1024), (256, 1024, TINY_TOKENS),
                    (GPT2_TOKENS, 2304, 768), (GPT2_TOKENS, 3072, 768), (GPT2_TOKENS, 768, 3072),
                    (768, 3072, GPT2_TOKENS), (GPT2_TOKENS, 50257, 768)],
    "square": [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)],
}
# Where --calibrate times the model's menu: none of them in GRID.
CALIBRATION_SHAPES = [(400, 400, 400), (768, 768, 768), (1536, 1536, 1536), (3072, 3072, 3072), (6144, 6144, 2048),
                      (640, 640, 10240), (256, 2048, 16384), (2048, 512, 2048), (200, 3000, 1000)]
# Tiles not in the menu that --calibrate times too (K whole): 4 x 4 outputs a
# thread in 32 x 64 blocks, which the model prices well for products of about
# a wave (512^3: 128 blocks instead of 64), and which no committed sweep has
# timed. A candidate that beats every plan of the menu at a shape is reported
# (candidate_wins); it joins a GPU's menu in the model's JSON only on that
# evidence.
CANDIDATE_TILES = [(32, 64, 16, 4, 4), (64, 32, 16, 4, 4)]
# --rates: blocks an SM (each a product of q x SMs tiles) and the depths.
RATE_BLOCKS = tuple(range(1, 9))
RATE_KS = (512, 1024, 4096, 12288)
# Tiles not in the model's menu that --rates and --explore time too, a thread's
# 12 x 8 outputs: in scratch timings of 2026-11-29 (NOTES) 96 x 128 reached 96%
# of cuBLAS at 8192 x 768 x 3072 (the menu's best 96%, auto's pick 85%) and 192 x
# 128 84% at 3001 x 2999 x 1009 (the menu's best 84%); both compile for sm_90
# without spills, scalar loads too (ptxas 13.5). They join a GPU's menu in the
# model's JSON only on the evidence of timed runs: 192 x 128 joined the
# H200's on 2026-11-30, after it reached 80% of cuBLAS at 160 x 630 x 19896
# (the menu's best 71%; reruns/sgemm_explore-h200-2026-11-30-held-out.json),
# a change of no pick of GRID or OFF_GRID_SHAPES.
RATE_CANDIDATES = [(96, 128, 16, 12, 8), (192, 128, 16, 12, 8)]
# --explore times these too (and CANDIDATE_TILES): 32-deep steps, half the barriers a tile of K
# (the profile at 1000^3, sgemm_ragged_ncu-h200-2026-11-29.json, found its
# warps waiting on shared memory first, 28% of the samples, and a second
# copy of the fragments did not change that: sgemm_fragments-h200-2026-11-29.json).
# For sm_90: 64 x 128 x 32 109 registers (96 with loads of one float), two
# copies of the tiles in 49 KiB; 128 x 128 x 32 143 (138), one copy.
DEEP_STEP_CANDIDATES = [(64, 128, 32, 8, 4), (128, 128, 32, 8, 8)]
# --rates-variants: the depth, the counts of blocks an SM (besides the tile's
# residency limit), the slices of K, and how long before tiles are skipped.
VARIANT_K = 4096
VARIANT_BLOCKS = (2, 8)
VARIANT_SPLITS = 2
VARIANT_BUDGET_S = 150.0
ROUNDS = 3
# --explore: the grid's shapes under their target on the H200 (2026-11-29), and
# how many of the model's cheapest plans to time at each.
EXPLORE_SHAPES = [(1000, 1000, 1000), (1537, 1023, 771), (2500, 1999, 3001), (777, 1313, 2047),
                  (3001, 2999, 1009), (1024, 1024, 16384), (512, 512, 32768), (768, 768, 12288),
                  (8192, 768, 3072), (512, 512, 512), (511, 511, 511), (300, 200, 400)]
EXPLORE_PLANS = 10
# --explore-off-grid: the calibration's shapes and four ragged ones, none in GRID.
OFF_GRID_SHAPES = CALIBRATION_SHAPES + [(1200, 900, 700), (2100, 1500, 2500), (700, 3100, 1900),
                                        (5000, 1000, 3000)]
BUDGET_S = 420.0  # shapes still waiting after this long are skipped
WRONG_ABOVE = 1e-5  # max |C - C_ref| / max |C_ref| against float64, or 4 x cuBLAS's own,
# or 2 sqrt(K) units of float32 rounding (validate says why)


def grid_shapes(quick: bool = False) -> list[tuple[str, tuple]]:
    """(class, shape) of every grid shape, or the first two of each class with quick."""
    return [(name, shape) for name, shapes in GRID.items() for shape in shapes[:2 if quick else None]]


def relative_error(c, reference) -> float:
    """max |c - reference| / max |reference| over the reference's finite entries;
    inf where c's NaNs or infinities are not the reference's."""
    import torch

    c = c.double()
    infinite = torch.isinf(reference)
    if not torch.equal(torch.isnan(c), torch.isnan(reference)) or \
            not torch.equal(torch.isinf(c), infinite) or not torch.equal(c[infinite], reference[infinite]):
        return float("inf")
    fine = torch.isfinite(reference)
    if not fine.any():
        return 0.0
    scale = float(reference[fine].abs().max()) or 1.0
    return float((c[fine] - reference[fine]).abs().max()) / scale


def validate(sgemm, torch) -> list[dict]:
    """auto and level 7 on ragged shapes, split-K and NaN/Inf inputs, against float64."""
    cases = [("ragged", (1000, 1030, 777)), ("ragged aligned", (1000, 1028, 780)),
             ("skinny", (37, 2051, 515)), ("small", (33, 17, 45)),
             ("deep_k split-K", (257, 383, 40000)), ("nan_inf", (301, 299, 1203))]
    found = []
    for name, (m, n, k) in cases:
        a = torch.randn((m, k), device="cuda")
        b = torch.randn((k, n), device="cuda")
        if name == "nan_inf":
            a[5, 7], a[9, 3] = float("nan"), float("inf")
        reference = a.double() @ b.double()
        cublas_error = relative_error(torch.mm(a, b), reference)
        # A sum taken one term after another in float32 (level 7 without
        # split-K) errs by about sqrt(K) units of rounding: at K = 40000 it
        # measured 0.86e-5 and 1.19e-5 on the H200 (2026-11-28 and -29), where
        # cuBLAS's tree of partial sums stays near 1e-6.
        allowed = max(WRONG_ABOVE, 4 * cublas_error, 2 * 2.0 ** -24 * k ** 0.5)
        for variant, level in (("auto", "auto"), ("level7", 7)):
            out = torch.full((m, n), float("nan"), device="cuda")
            sgemm.matmul(a, b, level, out=out)
            error = relative_error(out, reference)
            config, splits = sgemm.auto_plan((m, n, k)) if level == "auto" else (None, 1)
            found.append({"case": name, "variant": variant, "m": m, "n": n, "k": k,
                          "splits": splits, "max_rel_err": error, "cublas_rel_err": cublas_error,
                          "ok": error <= allowed})
    return found


def time_in_turns(calls: dict, rounds: int, time_ms, before=None) -> tuple[dict, dict]:
    """({name: wall-clock ms of each round}, {name: CUDA-event ms of each
    round}) of `calls` ({name: call}, cuBLAS's first) timed in turns, `rounds`
    rounds, each a loop of about 100 ms of the first call's work ending in a
    synchronize; `before(name)`, where given, runs before each call's turn."""
    first = next(iter(calls.values()))
    one = time_ms(first)[0]
    count = int(min(2000, max(5, 100.0 / max(one, 1e-3))))  # about 100 ms a round
    walls = {name: [] for name in calls}
    kernels = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            if before is not None:
                before(name)
            call()
            walls[name].append(wall_ms(call, count))
            kernels[name].append(time_ms(call)[0])
    return walls, kernels


def time_shape(sgemm, torch, time_ms, group: str, shape, rounds: int,
               level7: bool = True) -> list[dict]:
    """The rows of one grid shape: cuBLAS, auto and level 7 in turns (without
    `level7`, cuBLAS and auto only)."""
    import numpy as np

    m, n, k = shape
    a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
    reference = torch.mm(a, b).double()
    variants = {"cublas": lambda: torch.mm(a, b), "auto": lambda: sgemm.matmul(a, b)}
    if level7:
        variants["level7"] = lambda: sgemm.matmul(a, b, 7)
    errors = {name: relative_error(call(), reference) for name, call in variants.items()}
    walls, kernels = time_in_turns(variants, rounds, time_ms)
    cublas_ms = float(np.median(walls["cublas"]))
    plan = sgemm.choose_plan(shape, sgemm.gpu_model())
    rows = []
    for name in variants:
        ms = float(np.median(walls[name]))
        row = {"variant": name, "class": group, "m": m, "n": n, "k": k, "ms": ms,
               "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12, "vs_cublas": cublas_ms / ms,
               "kernel_ms": float(np.median(kernels[name])), "max_rel_err": errors[name],
               "failed": not errors[name] <= 1e-4}
        if name == "auto":
            row["config"] = {**asdict(plan["config"]), "splits": plan["splits"]}
            row["model"] = {key: plan[key] for key in (
                "tiles", "slices", "blocks", "blocks_per_sm", "waves", "busiest_sm_blocks",
                "tail_efficiency", "padding_efficiency", "predicted_us", "ring_scalar_b")}
        if name == "level7":
            row["config"] = asdict(sgemm.WARP_TILE_DEFAULT)
        rows.append(row)
    print(f"{group:<12} {m}x{n}x{k}: " + ", ".join(
        f"{r['variant']} {r['ms'] * 1e3:.1f} us ({r['vs_cublas']:.0%})" for r in rows), flush=True)
    return rows


def summary(rows: list[dict]) -> dict:
    """Per class and variant: the worst and the median share of cuBLAS."""
    import numpy as np

    found = {}
    for group in dict.fromkeys(r["class"] for r in rows):
        for variant in ("auto", "level7"):
            shares = [r["vs_cublas"] for r in rows if r["class"] == group and r["variant"] == variant]
            if shares:
                found.setdefault(group, {})[variant] = {"worst": min(shares),
                                                        "median": float(np.median(shares))}
    return found


def calibrate_main(sgemm, torch, time_ms, record, out_dir: Path, started: float) -> int:
    """--calibrate: time every plan of the menu at CALIBRATION_SHAPES, fit, write."""
    record["benchmark"] = "sgemm_calibration"
    gpu = record["gpu"]
    entry = sgemm.gpu_entry(gpu)
    rows, wins = [], []
    for shape in CALIBRATION_SHAPES:
        m, n, k = shape
        a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
        plans = sgemm.choose_plan(shape, gpu)["candidates"]
        plans += [dict(sgemm.plan_cost(shape, sgemm.TileConfig(*tile), 1, entry), candidate=True)
                  for tile in CANDIDATE_TILES]
        timed = []
        for plan in plans:
            if time.perf_counter() - started > BUDGET_S:
                break
            config, splits = plan["config"], plan["splits"]
            call = lambda: sgemm.matmul(a, b, 6, config=config, splits=splits)  # noqa: E731
            call()
            calls = int(min(500, max(5, 50.0 / max(time_ms(call)[0], 1e-3))))
            ms = wall_ms(call, calls)
            timed.append({"m": m, "n": n, "k": k, "config": {**asdict(config), "splits": splits},
                          "ms": ms, "predicted_ms": plan["predicted_us"] / 1e3,
                          "candidate": bool(plan.get("candidate"))})
        rows += timed
        menu_best = min((r["ms"] for r in timed if not r["candidate"]), default=None)
        for r in timed:
            if r["candidate"] and menu_best is not None and r["ms"] < menu_best:
                wins.append({**r, "menu_best_ms": menu_best})
        print(f"calibration {m}x{n}x{k}: {len(rows)} plans timed so far", flush=True)
    record["candidate_wins"] = wins
    print(f"candidate tiles that beat the menu: {wins or 'none'}", flush=True)
    measured = [((r["m"], r["n"], r["k"]), sgemm.tile_config_of(r["config"]), r["config"]["splits"], r["ms"] * 1e3) for r in rows]
    # The host's costs stay: these calls take the explicit-config path, whose
    # Python costs more than auto's (fitted free on 2026-11-28 they came out
    # at 37 us a call, and every small product then cost the same).
    fit = sgemm.calibrate(measured, entry, fixed=("call_us", "split_call_us"))
    record["results"] = rows
    record["fit"] = fit
    path = write_record(record, out_dir)
    save_constants(sgemm, gpu, fit, f"benchmarks/results/{path.name} (--calibrate)")
    print(f"wrote {path} and the constants for {gpu} (rms log error {fit['rms_log_error']:.3f})")
    return 0


def explore_main(sgemm, torch, time_ms, record, out_dir: Path, started: float,
                 off_grid: bool = False, shapes=None) -> int:
    """--explore: at EXPLORE_SHAPES, the grid's shapes under their target, time
    cuBLAS and the model's cheapest plans (EXPLORE_PLANS of them, and each menu
    tile's cheapest) as auto runs them, to tell a wrong pick from a menu whose
    best is short of the target. With off_grid (--explore-off-grid), the same
    at OFF_GRID_SHAPES instead, written as sgemm_explore_off_grid: evidence for
    a change of the model from shapes the grid does not judge it on. shapes:
    these (m, n, k) instead (--shapes)."""
    import numpy as np

    from gpucourse.kernels.sgemm import entry_point

    record["benchmark"] = "sgemm_explore_off_grid" if off_grid else "sgemm_explore"
    record["method"] = ("at each shape, cuBLAS (torch.mm) and each plan (tiles, slices of K) "
                        "run as matmul(a, b) runs auto's, on CUDA torch tensors; ms: the "
                        "faster of two wall-clock loops of about 30 ms ending in "
                        "torch.cuda.synchronize; cublas_ms: the median of cuBLAS's loops "
                        "timed before each plan's; TF32 off; N(0,1) inputs")
    gpu, rows = record["gpu"], []
    entry = sgemm.gpu_entry(gpu)
    real_plan = entry_point.auto_plan
    try:
        for shape in shapes or (OFF_GRID_SHAPES if off_grid else EXPLORE_SHAPES):
            if time.perf_counter() - started > BUDGET_S:
                break
            m, n, k = shape
            a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
            chosen = sgemm.choose_plan(shape, gpu)
            plans = chosen["candidates"][:EXPLORE_PLANS]
            for plan in chosen["candidates"]:
                if all(p["config"] != plan["config"] for p in plans):
                    plans.append(plan)
            for tile in (sgemm.TileConfig(*t)  # not in the menu
                         for t in RATE_CANDIDATES + DEEP_STEP_CANDIDATES + CANDIDATE_TILES):
                for splits in [1] + sgemm.shape_model.wave_filling_splits(shape, tile, entry):
                    plans.append({**sgemm.plan_cost(shape, tile, splits, entry), "candidate": True})
            cublas = lambda: torch.mm(a, b)  # noqa: E731
            calls = int(min(1000, max(5, 30.0 / max(time_ms(cublas)[0], 1e-3))))
            cublas_ms = []
            timed = []
            for plan in plans:
                entry_point.auto_plan = lambda *_, plan=plan: (plan["config"], plan["splits"])
                entry_point._quick_plan.cache_clear()  # it keeps each shape's first plan
                call = lambda: sgemm.matmul(a, b)  # noqa: E731
                call()
                cublas_ms.append(wall_ms(cublas, calls))
                timed.append(min(wall_ms(call, calls) for _ in range(2)))
            base = float(np.median(cublas_ms))
            for plan, ms in zip(plans, timed):
                rows.append({"m": m, "n": n, "k": k, "config": {**asdict(plan["config"]),
                                                                "splits": plan["splits"]},
                             "ms": ms, "cublas_ms": base, "vs_cublas": base / ms,
                             "predicted_ms": plan["predicted_us"] / 1e3,
                             "candidate": bool(plan.get("candidate")),
                             "chosen": plan["config"] == chosen["config"]
                             and plan["splits"] == chosen["splits"]})
            here = rows[-len(plans):]
            best = max((r for r in here if not r["candidate"]), key=lambda r: r["vs_cublas"])
            pick = next((r for r in here if r["chosen"]), None)
            print(f"explore {m}x{n}x{k}: cuBLAS {base * 1e3:.1f} us; auto's pick "
                  f"{pick['vs_cublas'] if pick else float('nan'):.0%}; best of {len(here)} "
                  f"{best['vs_cublas']:.0%} {best['config']}", flush=True)
    finally:
        entry_point.auto_plan = real_plan
        entry_point._quick_plan.cache_clear()
    record["results"] = rows
    path = write_record(record, out_dir)
    print(f"wrote {path}")
    return 0


def padding_main(sgemm, torch, record, out_dir: Path, started: float) -> int:
    """--padding: at the grid's ragged shapes (K or N not a multiple of 4),
    auto as a user calls it with its operands copied into padded buffers
    and without (entry_point.PAD_RAGGED True and False), beside cuBLAS, each
    checked against it; and the model's price of both (shape_model.plan_cost
    with and without padding, the copy at PAD_COPY_GBPS). Decides whether the
    GPU's entry gets a "padding" block (see sgemm.padding)."""
    import numpy as np

    from gpucourse.kernels.sgemm import entry_point, shape_model

    record["benchmark"] = "sgemm_padding"
    record["method"] = ("auto's plan (tiles, slices) run as matmul(a, b) runs it on CUDA torch "
                        "tensors, with the ragged operands copied into padded buffers first "
                        "(padded) and without; ms: the faster of two wall-clock loops of about "
                        "30 ms ending in torch.cuda.synchronize; cublas_ms: the median of the "
                        "loops of cuBLAS timed before each; TF32 off; N(0,1) inputs")
    entry = sgemm.gpu_entry(record["gpu"])
    allowed = {**entry, "padding": entry.get("padding") or {"copy_gbps": shape_model.PAD_COPY_GBPS}}
    rows = []
    try:
        for group, (m, n, k) in grid_shapes():
            if not (k % 4 or n % 4) or time.perf_counter() - started > BUDGET_S:
                continue
            a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
            reference = torch.mm(a, b).double()
            cublas = lambda: torch.mm(a, b)  # noqa: E731
            calls = int(min(1000, max(5, 30.0 / max(wall_ms(cublas, 3), 1e-3))))
            plan = sgemm.choose_plan((m, n, k), record["gpu"])
            found, cublas_ms = {}, []
            for padded in (False, True):
                entry_point.PAD_RAGGED = padded
                entry_point._quick_plan.cache_clear()
                call = lambda: sgemm.matmul(a, b)  # noqa: E731
                error = relative_error(call(), reference)
                cublas_ms.append(wall_ms(cublas, calls))
                found[padded] = (min(wall_ms(call, calls) for _ in range(2)), error)
            base = float(np.median(cublas_ms))
            price = {padded: shape_model.plan_cost((m, n, k), plan["config"], plan["splits"],
                                                   allowed, padding=padded) for padded in found}
            for padded, (ms, error) in found.items():
                rows.append({"class": group, "m": m, "n": n, "k": k, "padded": padded,
                             "model_pads": price[True]["padded"],
                             "config": {**asdict(plan["config"]), "splits": plan["splits"]},
                             "ms": ms, "cublas_ms": base, "vs_cublas": base / ms,
                             "predicted_ms": price[padded]["predicted_us"] / 1e3,
                             "max_rel_err": error, "ok": error < 1e-5})
            print(f"padding {m}x{n}x{k}: cuBLAS {base * 1e3:.1f} us; scalar loads "
                  f"{base / found[False][0]:.0%}, padded {base / found[True][0]:.0%} "
                  f"(errors {found[False][1]:.1e}, {found[True][1]:.1e})", flush=True)
    finally:
        entry_point.PAD_RAGGED = None
        entry_point._quick_plan.cache_clear()
    record["results"] = rows
    path = write_record(record, out_dir)
    print(f"wrote {path}")
    block, verdict = padding_block(rows, allowed["padding"]["copy_gbps"], path.name)
    if block:
        update_entry(sgemm, record["gpu"], lambda entry: entry.update(padding=block))
    print(verdict)
    return 0 if all(r["ok"] for r in rows) else 1


def padding_block(rows: list, copy_gbps: float, name: str) -> tuple:
    """(the entry's "padding" block or None, a sentence saying why) from
    --padding's rows: auto pads from then on, at the copy rate the model
    assumed, only if every result is right and padding was faster at every
    shape where the model pads (then the grid judges it)."""
    ms = {(r["m"], r["n"], r["k"], r["padded"]): r["ms"] for r in rows}
    pads = sorted({(r["m"], r["n"], r["k"]) for r in rows if r["model_pads"]})
    won = [shape for shape in pads if ms[shape + (True,)] < ms[shape + (False,)]]
    if not (rows and all(r["ok"] for r in rows)):
        return None, "padding stays off: a result was wrong"
    if not pads or len(won) < len(pads):
        return None, f"padding stays off: faster at {len(won)} of the {len(pads)} shapes it pads"
    source = (f"benchmarks/results/{name}: padded faster at all {len(pads)} ragged grid shapes "
              f"the model pads")
    return {"copy_gbps": copy_gbps, "source": source}, f"padding on: {source}"


def tile_grid(count: int) -> tuple[int, int]:
    """(rows, columns) of tiles, rows x columns = count, as near square as count allows."""
    rows = max(r for r in range(1, int(count ** 0.5) + 1) if count % r == 0)
    return rows, count // rows


def rate_products(config, sms: int, depths):
    """(q, m, n, k) of the rates' products for `config`: q x SMs tiles (q = 1
    to RATE_BLOCKS's last) in tile_grid's near-square grid, no edges, at each
    of `depths`."""
    for q in RATE_BLOCKS:
        tiles_m, tiles_n = tile_grid(q * sms)
        for k in depths:
            yield q, tiles_m * config.bm, tiles_n * config.bn, k


def rate_row(config, q: int, m: int, n: int, k: int, ms: float, error: float) -> dict:
    """A rates results row (what shape_model.rates_from_record reads)."""
    return {"config": asdict(config), "blocks_per_sm": q, "m": m, "n": n, "k": k,
            "ms": ms, "tflops": 2 * m * n * k / ms / 1e9, "max_rel_err": error}


def rate_tiles(sgemm, entry: dict, tiles) -> list:
    """The tiles --rates and --rates-variants time: `tiles` (from --tiles) where
    given, else the menu and RATE_CANDIDATES."""
    if tiles:
        return [sgemm.check_config(sgemm.TileConfig(*t)) for t in tiles]
    menu = sgemm.shape_model.menu(entry)
    extra = [sgemm.TileConfig(*t) for t in RATE_CANDIDATES]
    return menu + [t for t in extra if t not in menu]


def rates_main(sgemm, torch, time_ms, record, out_dir: Path, started: float,
               tiles=None) -> int:
    """--rates: each menu tile (or each of `tiles`, whose rates then join the
    model's others) at q blocks an SM and RATE_KS's depths (see the docstring)."""
    # Named tiles alone are a partial record: under its own name, so that the
    # newest sgemm_rates (the whole menu, which chapter 8 plots) stays whole.
    record["benchmark"] = "sgemm_rates_tiles" if tiles else "sgemm_rates"
    entry = sgemm.gpu_entry(record["gpu"])
    sms, rows = entry["sms"], []
    for config in rate_tiles(sgemm, entry, tiles):
        for q, m, n, k in rate_products(config, sms, RATE_KS):
            if time.perf_counter() - started > BUDGET_S:
                break
            a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
            call = lambda: sgemm.matmul(a, b, 6, config=config, splits=1)  # noqa: E731
            error = relative_error(call(), torch.mm(a.double(), b.double()))
            rows.append(rate_row(config, q, m, n, k, time_ms(call)[0], error))
        done = [r for r in rows if r["config"] == asdict(config)]
        print(f"rates {config}: " + ", ".join(f"q{r['blocks_per_sm']} k{r['k']} {r['tflops']:.1f}"
                                              for r in done if r["k"] == RATE_KS[-1]), flush=True)
    record["results"] = rows
    record["sms"] = sms
    path = write_record(record, out_dir)
    wrong = any(r["max_rel_err"] > WRONG_ABOVE for r in rows)
    if not wrong:
        save_rates(sgemm, record, f"benchmarks/results/{path.name} (--rates)", merge=bool(tiles))
    print(f"wrote {path}" + ("" if wrong else " and the rates into the model's JSON")
          + f"; worst error {max(r['max_rel_err'] for r in rows):.1e}")
    return 1 if wrong else 0


def square_grid(count: int, config) -> tuple[int, int]:
    """(rows, columns) of tiles, rows x columns = count, whose matrix (rows bm
    by columns bn) is nearest square."""
    import math

    rows = min((r for r in range(1, count + 1) if count % r == 0),
               key=lambda r: abs(math.log(r * config.bm / (count // r * config.bn))))
    return rows, count // rows


def variant_products(config, q: int, sms: int, k: int = VARIANT_K) -> list[tuple]:
    """(variant, m, n, k, splits) of the products --rates-variants times for
    `config` at q blocks an SM: whole (the rates' product), split (the same in
    VARIANT_SPLITS slices), transposed (the grid of tiles turned), and square
    (the grid whose matrix is nearest square), the last only where it is
    neither of the first two grids."""
    rows, cols = tile_grid(q * sms)
    found = [("whole", rows * config.bm, cols * config.bn, k, 1),
             ("split", rows * config.bm, cols * config.bn, k, VARIANT_SPLITS),
             ("transposed", cols * config.bm, rows * config.bn, k, 1)]
    square = square_grid(q * sms, config)
    if square not in ((rows, cols), (cols, rows)):
        found.append(("square", square[0] * config.bm, square[1] * config.bn, k, 1))
    return found


def variant_blocks(resident: int) -> list[int]:
    """The counts of blocks an SM --rates-variants times: VARIANT_BLOCKS and
    the tile's residency limit (at most 8)."""
    return sorted({*VARIANT_BLOCKS, min(8, resident)})


def rates_variants_main(sgemm, torch, time_ms, record, out_dir: Path, started: float,
                        tiles=None) -> int:
    """--rates-variants: see the docstring (with `tiles`, those alone, their
    shares joining the model's others)."""
    import numpy as np

    record["benchmark"] = "sgemm_rates_variants_tiles" if tiles else "sgemm_rates_variants"
    record["method"] = (
        "each tile of --rates at K = %d and q blocks an SM, level 6's kernel as matmul(a, b) "
        "runs auto's plan (matmul(a, b, 6, config=tile, splits=s): the same launches; with "
        "slices C zeroed, then split_k's kernel with atomic sums); ms: the median of CUDA "
        "events around back-to-back calls (benchmarks/sgemm.py's time_ms); whole: the rates' "
        "product (q x SMs tiles, tile_grid), split: the same in %d slices of K, transposed: "
        "the grid of tiles turned, square: the grid whose matrix is nearest square; "
        "max_rel_err against torch.mm in float64; TF32 off; N(0,1) inputs"
        % (VARIANT_K, VARIANT_SPLITS))
    entry = sgemm.gpu_entry(record["gpu"])
    sms, rows, skipped = entry["sms"], [], []
    for config in rate_tiles(sgemm, entry, tiles):
        key = sgemm.shape_model.tile_key(config)
        if time.perf_counter() - started > VARIANT_BUDGET_S:
            skipped.append(key)
            continue
        resident = sgemm.shape_model.resident_blocks(
            *sgemm.shape_model.kernel_resources(config), config.threads, entry)[0]
        for q in variant_blocks(resident):
            reference = None
            for variant, m, n, k, splits in variant_products(config, q, sms):
                if variant != "split":  # split: the same product as whole
                    a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
                    reference = torch.mm(a.double(), b.double())
                call = lambda: sgemm.matmul(a, b, 6, config=config, splits=splits)  # noqa: E731
                error = relative_error(call(), reference)
                ms = time_ms(call)[0]
                rows.append({"variant": variant, "config": asdict(config), "blocks_per_sm": q,
                             "m": m, "n": n, "k": k, "splits": splits, "ms": ms,
                             "tflops": 2 * m * n * k / ms / 1e9, "max_rel_err": error})
        mine = [r for r in rows if r["config"] == asdict(config)]
        ms = {(r["variant"], r["blocks_per_sm"]): r["ms"] for r in mine}
        print(f"variants {key}: " + "; ".join(
            f"{v}/whole " + " ".join(f"q{q} {ms[v, q] / ms['whole', q]:.3f}"
                                     for q in variant_blocks(resident) if (v, q) in ms)
            for v in ("split", "transposed", "square") if any(w == v for w, _ in ms)), flush=True)
    record["results"] = rows
    record["sms"] = sms
    record["skipped_tiles"] = skipped
    record["summary"] = {}
    for r in rows:
        if r["variant"] != "whole":
            whole = next(w["ms"] for w in rows if w["variant"] == "whole"
                         and w["config"] == r["config"] and w["blocks_per_sm"] == r["blocks_per_sm"])
            key = sgemm.shape_model.tile_key(sgemm.TileConfig(**r["config"]))
            record["summary"].setdefault(key, {}).setdefault(f"{r['variant']}_over_whole", {})[
                r["blocks_per_sm"]] = r["ms"] / whole
    wrong = any(not r["max_rel_err"] <= WRONG_ABOVE for r in rows)
    shares = None
    if rows and not wrong:
        try:
            shares = sgemm.shape_model_fit.split_shares_from_record(record, entry)
        except ValueError as e:  # a GPU whose entry has no rates for a tile
            print(f"no split shares: {e}", flush=True)
    record["split_shares"] = shares
    record["seconds"] = time.perf_counter() - started
    path = write_record(record, out_dir)
    if shares:
        save_split_shares(sgemm, record, f"benchmarks/results/{path.name} (--rates-variants)",
                          merge=bool(tiles))
        print("split shares: " + ", ".join(f"{k} {v:+.1%}" for k, v in shares.items()))
    worst = max((r["max_rel_err"] for r in rows), default=float("nan"))
    turned = [v for t in record["summary"].values() for v in t.get("transposed_over_whole", {}).values()]
    print(f"wrote {path}" + (" and the split shares into the model's JSON" if shares else "")
          + f" ({record['seconds']:.0f} s; worst error {worst:.1e}; skipped {skipped or 'none'}; "
          f"median transposed/whole {np.median(turned) if turned else float('nan'):.3f})")
    return 1 if wrong or not rows else 0


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """"MxNxK,MxNxK" as [(m, n, k), ...] ([] for ""); ValueError naming the
    piece that is not three positive integers joined by x."""
    shapes = []
    for piece in filter(None, (p.strip() for p in text.split(","))):
        sizes = piece.lower().split("x")
        if len(sizes) != 3 or not all(x.isdigit() and int(x) > 0 for x in sizes):
            raise ValueError(f"--shapes takes MxNxK, three positive integers joined by x "
                             f"(comma-separated), got {piece!r}")
        shapes.append(tuple(int(x) for x in sizes))
    return shapes


def parse_tiles(text: str) -> list[tuple[int, ...]]:
    """"BMxBNxBKxTMxTN[sS],..." (sS: a cp.async ring of S stages) as
    TileConfig's fields, [(bm, bn, bk, tm, tn, stages), ...] ([] for "");
    ValueError naming the piece that is not five positive integers joined by
    x, then optionally s and a number."""
    tiles = []
    for piece in filter(None, (p.strip() for p in text.split(","))):
        body, ring, stages = piece.lower().partition("s")
        sizes = body.split("x")
        if len(sizes) != 5 or not all(x.isdigit() and int(x) > 0 for x in sizes) or (
                ring and not stages.isdigit()):
            raise ValueError(f"--tiles takes BMxBNxBKxTMxTN, five positive integers joined by "
                             f"x, then optionally sS for S stages (comma-separated), got {piece!r}")
        tiles.append((*(int(x) for x in sizes), int(stages or 0)))
    return tiles


def build_parser():
    """The script's command line (its options, each with a line of help)."""
    parser = benchmark_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="two shapes a class, one round")
    parser.add_argument("--calibrate", action="store_true",
                        help="time the model's menu at CALIBRATION_SHAPES and fit its constants")
    parser.add_argument("--rates", action="store_true",
                        help="time each menu tile at 1-8 blocks an SM and four depths")
    parser.add_argument("--rates-variants", action="store_true",
                        help="each tile of --rates with split-K and with its grid of tiles "
                             "turned, beside K whole; writes the split shares")
    parser.add_argument("--explore", action="store_true",
                        help="time the model's cheapest plans at the shapes under their target")
    parser.add_argument("--explore-off-grid", action="store_true",
                        help="the same as --explore, at shapes off the grid")
    parser.add_argument("--shapes", default="",
                        help="with --explore: only these shapes, MxNxK comma-separated")
    parser.add_argument("--tiles", default="",
                        help="with --rates or --rates-variants: only these tiles, "
                             "BMxBNxBKxTMxTN[sS] comma-separated; their numbers join the JSON's")
    parser.add_argument("--padding", action="store_true",
                        help="auto at the grid's ragged shapes with its operands padded and not")
    parser.add_argument("--fit-scalar-loads", action="store_true",
                        help="fit the scalar-load shares to the committed explores (no GPU)")
    parser.add_argument("--fit-stream-share", action="store_true",
                        help="fit the stream-K share to the committed sgemm_stream run (no GPU)")
    parser.add_argument("--fit-committed", action="store_true",
                        help="fit the constants to the committed sgemm_shapes results (no GPU)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    if "--fit-committed" in (sys.argv[1:] if argv is None else argv):
        return fit_committed()
    if "--fit-scalar-loads" in (sys.argv[1:] if argv is None else argv):
        return fit_scalar_loads()
    if "--fit-stream-share" in (sys.argv[1:] if argv is None else argv):
        return fit_stream_share()
    args, started = start(parser, argv, check_gpu=lambda: need_a_gpu(
        "sgemm_grid.py", "--fit-committed fits the model to the committed results without one"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm

    out_dir = Path(args.out)
    gpu = sgemm.gpu_model()
    record = record_start(
        "sgemm_grid", gpu, versions(),
        (f"cuBLAS (torch.mm), matmul(a, b) (auto) and matmul(a, b, 7) on CUDA torch tensors "
         f"in turns, {1 if args.quick else ROUNDS} round(s), median; ms: wall clock per call of "
         "a loop ending in torch.cuda.synchronize; kernel_ms: CUDA events around back-to-back "
         "calls (benchmarks/sgemm.py's time_ms); TF32 off; N(0,1) inputs; max_rel_err = "
         "max|C - C_cublas| / max|C_cublas|"),
        model={"calibrated": sgemm.gpu_entry(gpu).get("calibrated"), **sgemm.ring_switches()})
    try:
        tiles = parse_tiles(args.tiles)
    except ValueError as problem:
        parser.error(str(problem))
    if args.padding:
        return padding_main(sgemm, torch, record, out_dir, started)
    if args.rates_variants:
        return rates_variants_main(sgemm, torch, time_ms, record, out_dir, started, tiles)
    if args.rates:
        return rates_main(sgemm, torch, time_ms, record, out_dir, started, tiles)
    if args.explore or args.explore_off_grid:
        try:
            shapes = parse_shapes(args.shapes)
        except ValueError as problem:
            parser.error(str(problem))
        return explore_main(sgemm, torch, time_ms, record, out_dir, started,
                            off_grid=args.explore_off_grid, shapes=shapes)
    if args.calibrate:
        return calibrate_main(sgemm, torch, time_ms, record, out_dir, started)
    record["validation"] = validate(sgemm, torch)
    bad = [v for v in record["validation"] if not v["ok"]]
    for v in bad:
        print(f"WRONG: {v['variant']} on {v['case']} {v['m']}x{v['n']}x{v['k']}: "
              f"{v['max_rel_err']:.2e} (cuBLAS {v['cublas_rel_err']:.2e})", flush=True)
    rows, skipped = [], []
    for group, shape in grid_shapes(args.quick):
        if time.perf_counter() - started > BUDGET_S:
            skipped.append({"class": group, "shape": list(shape)})
            continue
        rows += time_shape(sgemm, torch, time_ms, group, shape, 1 if args.quick else ROUNDS)
    record["results"] = rows
    record["skipped_shapes"] = skipped
    record["summary"] = summary(rows)
    record["seconds"] = time.perf_counter() - started
    path = write_record(record, out_dir, "-quick" if args.quick else "")
    for group, shares in record["summary"].items():
        print(f"{group:<12} " + ", ".join(f"{v} worst {s['worst']:.1%} median {s['median']:.1%}"
                                          for v, s in shares.items()))
    print(f"wrote {path} ({record['seconds']:.0f} s; {len(skipped)} shapes skipped)")
    return 1 if bad or any(r["failed"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
