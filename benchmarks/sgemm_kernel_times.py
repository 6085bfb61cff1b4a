"""Where a call's time goes on the GPU at the shapes auto misses: each kernel's
own duration beside the call's wall-clock time, ours and cuBLAS's.

    PYTHONPATH=src python3 benchmarks/sgemm_kernel_times.py [--shapes MxNxK,...] [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_kernel_times.py --save RECORD[,RECORD]
    PYTHONPATH=src python3 benchmarks/sgemm_kernel_times.py --depth-grid odd|even [--out DIR]

Issue 33. At the held-out misses of products under about 13 GFLOP
(sgemm_off_grid.py's sets 3-5), the explores found the menu's best plan 73-83%
of cuBLAS, and the shape model priced some plans well under what they ran
(1310 x 1087 x 197: the 64 x 64 ring priced 23.3 us, ran 32.0). A call is the
host's Python, then one to three kernels (B's padded copy for a ring whose n
is ragged, split-K's zeroing of C, the product), with the gaps between them.
This says which part holds the time: at each shape of SHAPES, for cuBLAS
(torch.mm) and for matmul with each of three plans (auto's pick, the
cheapest with K whole through registers, the cheapest ring with K whole, as
sgemm_grid.py --explore forces a plan; each ring, where n is ragged, twice:
with B copied first, and read as given, 4 bytes a copy, variant
"<name>_scalar_b", entry_point.RING_RAGGED_B; where n is even 8 bytes
a copy, "<name>_pairs_b", entry_point.RING_PAIRS; and 16 bytes a copy
wherever its rows start, "<name>_shifted_b", entry_point.RING_SHIFTED),
CALLS back-to-back calls under torch's profiler (CUPTI sees Numba's launches as it sees cuBLAS's):
each kernel's median duration and launches a call, and the wall clock per
call of the same loop without the profiler (the faster of two loops), and
the host's own time a call (the same calls not waited for); then
cProfile's view of the host's time in auto's calls at the first shape.

Writes DIR/sgemm_kernel_times-<gpu-slug>-<date>.json. About a minute and a
half. --save RECORD[,RECORD] fits the runs' rings both ways
(shape_model_fit.fit_ring_scalar_b, with the shares by how full the busiest
SM is) into the model's JSON, no GPU needed.

--depth-grid odd (or even) times, instead, every ring tile of the menu with
K whole on a ragged n, B padded first and read as given (4 bytes a copy;
with even, n % 4 == 2, 8 bytes a copy too), in each regime of how full the
busiest SM is (one block, part of what it holds, rounds of them:
``shape_model.blocks_regime``) and at each depth of DEPTH_STEPS: the runs a
share for reading B as given by regime and by depth needs (``depth_grid``;
rows carry "tile" and "regime"; part of an SM at two blocks and, where a
tile holds four or more, one short of full). A few minutes each (36 cells,
three or four plans a cell); --regimes one,part and --regimes full split a
grid into parts.

First run (H200, 2026-11-30): at 1310 x 1087 x 197 the ring's product kernel
took 20.0 us, cuBLAS's 18.1, but B's copy added a launch, and the host's
22.3 us a call set the pace (24.4 us a call); read as given, 21.4 us of
kernel, 16.2 of host, 22.8 a call.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from _common import (benchmark_parser, need_a_gpu, record_start, start, versions, wall_ms,
                     write_record)
from sgemm_grid import parse_shapes

# Misses of held-out sets 3-5 (the first eight where the explores found the
# menu short), then shapes of the grid, five with a ragged n.
SHAPES = [(1310, 1087, 197), (733, 1486, 589), (567, 761, 794), (628, 939, 337),
          (883, 1934, 381), (912, 1893, 553), (1894, 719, 326), (1633, 635, 342),
          (649, 6906, 78), (560, 1646, 2545), (1275, 678, 1303), (736, 1519, 1258),
          (1000, 1000, 1000), (1536, 1024, 768), (1537, 1023, 771), (3001, 2999, 1009),
          (777, 1313, 2047), (2500, 1999, 3001), (8192, 50257, 768)]
CALLS = 50


# The depths of K of the depth grid, in a block's steps of K (k = steps x the
# tile's bk): one inside each band of shape_model.DEPTH_BANDS (under 16
# steps, under 64, 64 on), so that each band's share is measured, not
# borrowed. Until 2026-12-01 the grid took K of 256, 1024 and 4096 (16, 64
# and 256 steps of 16): none shallow, two deep. And the tiles across N of
# its shapes.
DEPTH_STEPS = (8, 32, 128)
GRID_COLUMNS = 12


REGIMES = ("one", "part", "full")


def depth_grid(sgemm, gpu, parity: str, steps=DEPTH_STEPS,
               regimes=REGIMES) -> list[tuple[tuple, object, str]]:
    """[(shape, ring config, regime)]: for each ring tile of `gpu`'s menu, in
    each regime of ``shape_model.blocks_regime`` it has, of `regimes` (one
    block on the busiest SM; part of what it holds, two and, where it holds
    four or more, one short of full; as many as it holds), an m x n x k
    product with exactly that many blocks on every SM with K whole
    (GRID_COLUMNS tiles across n, as many rows of tiles as that takes), n
    odd ("odd": GRID_COLUMNS tiles' columns less one) or with n % 4 == 2
    ("even": less two), at each depth k of `steps` of the tile's bk.
    ValueError for another parity or regime.

    Part of an SM is timed at both ends: the 2026-12-01 refit of the share
    for reading B as given had timed a 64 x 128 ring's part only with two
    blocks of four on an SM, while most of the 64 x 128 rings a model fitted
    to it picked to read B as given ran three (thirtieth session)."""
    if parity not in ("odd", "even"):
        raise ValueError(f"the depth grid's parity is 'odd' or 'even', got {parity!r}")
    unknown = sorted(set(regimes) - set(REGIMES))
    if unknown or not regimes:
        raise ValueError(f"the depth grid's regimes are some of {', '.join(REGIMES)}, "
                         f"got {', '.join(unknown) or 'none'}")
    model = sgemm.shape_model
    entry = model.gpu_entry(gpu)
    sms = entry["sms"]
    probe = sgemm.choose_plan((4096, 4096, 4096), gpu)  # every tile of the menu priced
    rings = {model.tile_key(p["config"]): p["config"] for p in probe["candidates"]
             if p["config"].stages and p["splits"] == 1}
    grid = []
    for key in sorted(rings):
        config = rings[key]
        n = GRID_COLUMNS * config.bn - (1 if parity == "odd" else 2)
        depths = [count * config.bk for count in steps]
        resident = model.plan_cost((config.bm, n, depths[0]), config, 1, entry)["blocks_per_sm"]
        cells = dict.fromkeys((("one", 1), ("part", 2), ("part", resident - 1),
                               ("full", resident)))
        for regime, busiest in cells:
            if regime not in regimes or model.blocks_regime(busiest, resident) != regime:
                continue  # a tile that holds two blocks an SM has no "part"
            m = busiest * sms // GRID_COLUMNS * config.bm
            grid += [((m, n, k), config, regime) for k in depths]
    return grid


def depth_grid_plans(shape, config) -> dict:
    """The ways the depth grid times a ring `config` at `shape` ({name:
    (config, splits, ring_b)}, as ``plans_to_time``'s): B padded first, read
    4 bytes a copy, and where n is even 8 bytes a copy."""
    plans = {"ring": (config, 1, "padded"), "ring_scalar_b": (config, 1, "scalar")}
    if shape[1] % 2 == 0:
        plans["ring_pairs_b"] = (config, 1, "pairs")
    return plans


def plans_to_time(sgemm, shape, gpu) -> dict:
    """{name: (config, splits, ring_b)}: auto's pick and the cheapest plan with
    K whole through registers and as a ring (the same plan may appear twice),
    each ring with B padded; where n is ragged, the rings again with B read
    4 bytes a copy ("_scalar_b"; entry_point.RING_RAGGED_B) and, where n is
    even, 8 bytes a copy ("_pairs_b"; entry_point.RING_PAIRS, which a 128-row
    ring declines: it then reads 4 bytes a copy again), and in 16-byte chunks
    wherever its rows start where the ring can ("_shifted_b";
    entry_point.RING_SHIFTED, pipelined.shifted_fits)."""
    chosen = sgemm.choose_plan(shape, gpu)
    whole = [p for p in chosen["candidates"] if p["splits"] == 1]
    plans = {"auto": (chosen["config"], chosen["splits"], "padded")}
    for name, ring in (("registers", False), ("ring", True)):
        plan = next((p for p in whole if bool(p["config"].stages) == ring), None)
        if plan is not None:
            plans[name] = (plan["config"], 1, "padded")
    if shape[1] % 4:
        for name, (config, splits, _) in list(plans.items()):
            if config.stages:
                plans[f"{name}_scalar_b"] = (config, splits, "scalar")
                if shape[1] % 2 == 0:
                    plans[f"{name}_pairs_b"] = (config, splits, "pairs")
                if sgemm.pipelined.shifted_fits(config):
                    plans[f"{name}_shifted_b"] = (config, splits, "shifted")
    return plans


def kernel_times(torch, call, calls: int) -> list[dict]:
    """[{name, us (median), per_call}] of the kernels `calls` calls launch."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    durations = defaultdict(list)
    for event in prof.events():
        if event.device_type.name == "CUDA" and event.device_time_total > 0:
            durations[event.name].append(event.device_time_total)
    return [{"name": name[:160], "us": statistics.median(us), "per_call": len(us) / calls}
            for name, us in sorted(durations.items(), key=lambda kv: -sum(kv[1]))]


def host_us(torch, call, calls: int) -> float:
    """Microseconds of the host's time a call: `calls` calls after a
    synchronize, timed without waiting for the GPU (far fewer launches than
    the GPU's queue holds, so none waits for room); the faster of two loops."""
    best = float("inf")
    for _ in range(2):
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - began) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def host_profile(call, calls: int) -> str:
    """cProfile's 15 costliest functions (own time) over `calls` calls."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        call()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
    return text.getvalue()


def save(paths: str) -> int:
    """--save: the ring_scalar_b fit of one record, or of several records'
    rows joined (comma-separated, one GPU), into the model's JSON (no GPU)."""
    from sgemm_model_json import joined_records, record_paths, record_source, save_ring_scalar_b

    from gpucourse.kernels import sgemm

    names = record_paths(paths)
    records, joined = joined_records(names)
    if len({record["gpu"] for record in records}) != 1:
        raise SystemExit(f"--save's records must be of one GPU, got {[r['gpu'] for r in records]}")
    source = record_source(names)
    fit = save_ring_scalar_b(sgemm, joined, source)
    print(f"wrote the ring_scalar_b fit of {source} into {sgemm.MODEL_PATH.name}: {fit}")
    return 0


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--save", metavar="RECORD[,RECORD]", help="write the fit of the rings' "
                        "scalar reads of B in these records into the model's JSON for their GPU "
                        "(no GPU needed)")
    parser.add_argument("--shapes", default="",
                        help="these shapes instead of SHAPES, MxNxK comma-separated")
    parser.add_argument("--depth-grid", choices=("odd", "even"), default=None,
                        help="every ring tile by regime and depth of K (depth_grid) instead")
    parser.add_argument("--regimes", default=",".join(REGIMES),
                        help="with --depth-grid, only these regimes, by commas (one, part, "
                             "full): a grid too long for one call, run in parts")
    known, _ = parser.parse_known_args(argv)
    if known.save:
        return save(known.save)
    if known.depth_grid and known.shapes:
        parser.error("--depth-grid and --shapes: give one")
    regimes = tuple(r for r in known.regimes.split(",") if r)
    if set(regimes) - set(REGIMES) or not regimes:
        parser.error(f"--regimes takes some of {','.join(REGIMES)}, got {known.regimes!r}")
    if not known.depth_grid and regimes != REGIMES:
        parser.error("--regimes goes with --depth-grid")
    try:
        shapes = parse_shapes(known.shapes) or SHAPES
    except ValueError as problem:
        parser.error(str(problem))
    args, started = start(parser, argv, check_gpu=lambda: need_a_gpu(
        "sgemm_kernel_times.py", "--save fits a committed record without one"))
    import torch

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import entry_point

    gpu = sgemm.gpu_model()
    # (shape, its plans, and on the depth grid its ring's tile and regime): a
    # shape may stand in the grid twice, for two tiles.
    jobs = ([(shape, depth_grid_plans(shape, config),
              {"tile": sgemm.shape_model.tile_key(config), "regime": regime})
             for shape, config, regime in depth_grid(sgemm, gpu, args.depth_grid,
                                                     regimes=regimes)]
            if args.depth_grid else
            [(shape, plans_to_time(sgemm, shape, gpu), {}) for shape in shapes])
    record = record_start(
        "sgemm_kernel_times", gpu, versions(),
        f"at each shape, cuBLAS (torch.mm) and matmul(a, b) under three plans (forced as "
        f"sgemm_grid.py --explore forces them), {CALLS} back-to-back calls under torch's "
        "profiler: each kernel's median duration (us) and launches per call; wall_us: the "
        "faster of two unprofiled loops of the same calls, wall clock ending in a "
        "synchronize; host_us: the faster of two loops of the same calls timed without "
        "waiting for the GPU; TF32 off; N(0,1) inputs",
        zeroing="memset" if entry_point.ZERO_BY_MEMSET else "kernel",
        switches=sgemm.ring_switches(),  # as they stand before a plan flips its own
        **({"depth_grid": args.depth_grid, "regimes": list(regimes)} if args.depth_grid
           else {}))
    real_plan, real_b, rows = entry_point.auto_plan, entry_point.RING_RAGGED_B, []
    real_pairs, real_shifted = entry_point.RING_PAIRS, entry_point.RING_SHIFTED
    try:
        for shape, plans, cell in jobs:
            m, n, k = shape
            a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
            expected = torch.mm(a.double(), b.double())
            calls = {"cublas": (lambda: torch.mm(a, b), None)}
            for name, (config, splits, ring_b) in plans.items():
                entry_point.auto_plan = lambda *_, c=config, s=splits: (c, s)
                entry_point.RING_RAGGED_B = "scalar" if ring_b in ("pairs", "shifted") \
                    else ring_b
                entry_point.RING_PAIRS = ring_b == "pairs"
                entry_point.RING_SHIFTED = ring_b == "shifted"
                entry_point._quick_plan.cache_clear()
                out = sgemm.matmul(a, b)  # compiles, and keeps this plan
                error = float((out.double() - expected).abs().max() / expected.abs().max())
                calls[name] = (lambda: sgemm.matmul(a, b), {
                    "config": {**asdict(config), "splits": splits}, "ring_b": ring_b,
                    "max_rel_err": error})
                kernels = kernel_times(torch, calls[name][0], CALLS)
                wall = min(wall_ms(calls[name][0], CALLS) for _ in range(2)) * 1e3
                rows.append({"m": m, "n": n, "k": k, "variant": name, **calls[name][1],
                             "wall_us": wall, "host_us": host_us(torch, calls[name][0], CALLS),
                             "kernels": kernels, **cell})
                if shape == jobs[0][0] and name == "auto":
                    record["host_profile"] = host_profile(calls[name][0], 20 * CALLS)
                    torch.cuda.synchronize()
            entry_point.auto_plan, entry_point.RING_RAGGED_B = real_plan, real_b
            entry_point.RING_PAIRS, entry_point.RING_SHIFTED = real_pairs, real_shifted
            entry_point._quick_plan.cache_clear()
            kernels = kernel_times(torch, calls["cublas"][0], CALLS)
            wall = min(wall_ms(calls["cublas"][0], CALLS) for _ in range(2)) * 1e3
            rows.append({"m": m, "n": n, "k": k, "variant": "cublas", "wall_us": wall,
                         "host_us": host_us(torch, calls["cublas"][0], CALLS),
                         "kernels": kernels, **cell})
            for row in rows[-len(calls):]:
                busy = sum(kk["us"] * kk["per_call"] for kk in row["kernels"])
                print(f"{m}x{n}x{k} {row['variant']:<16} wall {row['wall_us']:6.1f} us, "
                      f"host {row['host_us']:5.1f} us, "
                      f"kernels {busy:6.1f} us: " + "; ".join(
                          f"{kk['name'][:40]} {kk['us']:.1f} x{kk['per_call']:.0f}"
                          for kk in row["kernels"]), flush=True)
    finally:
        entry_point.auto_plan, entry_point.RING_RAGGED_B = real_plan, real_b
        entry_point.RING_PAIRS, entry_point.RING_SHIFTED = real_pairs, real_shifted
        entry_point._quick_plan.cache_clear()
    record["results"] = rows
    print(record.get("host_profile", ""))
    path = write_record(record, Path(args.out))
    worst = max(r.get("max_rel_err", 0.0) for r in rows)
    print(f"wrote {path}; worst error {worst:.1e}")
    return 1 if worst > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
