"""Rings that keep more warps busy, at the ragged products auto misses.

    PYTHONPATH=src python3 benchmarks/sgemm_ring_variants.py [--out DIR]

Issue 33. At shapes drawn at random (sgemm_off_grid.py's HELD_OUT set 2) the
menu's best plan ran at 81-83% of cuBLAS at 738 x 2561 x 782, 1070 x 581 x
2242 and 1360 x 669 x 475 (reruns/sgemm_explore-h200-2026-11-30-held-out-2.json):
all 64 x 128 rings of 128 threads, one or two blocks an SM, four to eight
warps to hide the latency of shared memory and of the barrier each step.
This times rings the menu does not have, each as matmul launches it
(entry_point's _quick_plan: B copied first where n is ragged), beside
torch.mm (TF32 off):

- three stages instead of two (a tile in flight a step longer);
- 256 threads on the same tiles (8 x 4 or 4 x 8 a thread: twice the warps,
  half the work a warp does per value it loads);
- 128 x 64 tiles (the transposed shape of the menu's favourite);
- 64 x 64 tiles 32 deep (half the barriers);

each with K whole, in SPLITS slices where a slice stays MIN_SLICE deep or
more, and by stream-K. Every plan is checked against float64 first, then
timed: the median of CUDA-event timings of back-to-back launches
(benchmarks/sgemm.py's time_ms), in turns over ROUNDS rounds. Writes
DIR/sgemm_ring_variants-<gpu-slug>-<date>.json (rows: m, n, k, variant,
config, splits, ms, vs_cublas, max_rel_err; "failed" where a plan cannot
run), after every shape. About six minutes, most of it compiling.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from _common import (benchmark_parser, medians_in_turns, need_a_gpu, record_start, start,
                     versions, write_record)
from sgemm_grid import relative_error

ROUNDS = 2
# Set 2's large misses, the off-grid miss, and two grid shapes to compare with.
SHAPES = [(738, 2561, 782), (1070, 581, 2242), (1360, 669, 475), (571, 6087, 69),
          (2048, 512, 2048), (1000, 1000, 1000)]
# name: (bm, bn, bk, tm, tn, stages). The first two are in the H200's menu.
RINGS = {"64x128_8x8_s2": (64, 128, 16, 8, 8, 2),
         "128x128_8x8_s2": (128, 128, 16, 8, 8, 2),
         "64x128_8x8_s3": (64, 128, 16, 8, 8, 3),
         "64x128_8x4_s2": (64, 128, 16, 8, 4, 2),
         "64x128_8x4_s3": (64, 128, 16, 8, 4, 3),
         "64x128_4x8_s2": (64, 128, 16, 4, 8, 2),
         "128x64_8x8_s2": (128, 64, 16, 8, 8, 2),
         "128x64_8x8_s3": (128, 64, 16, 8, 8, 3),
         "128x64_8x4_s2": (128, 64, 16, 8, 4, 2),
         "96x128_12x8_s3": (96, 128, 16, 12, 8, 3),
         "64x64_8x4_s3": (64, 64, 16, 8, 4, 3),
         "64x64x32_4x8_s2": (64, 64, 32, 4, 8, 2)}
SPLITS = (1, 2, 3, "stream")
MIN_SLICE = 256


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_ring_variants.py", "the rings are tested on the simulator"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import TileConfig, entry_point

    record = record_start(
        "sgemm_ring_variants", sgemm.gpu_model(), versions(),
        "rings (level 6's kernel with TileConfig stages) outside the H200's menu, "
        "launched as matmul launches a plan (entry_point._quick_plan), beside torch.mm; each "
        "checked against float64 first, then the median of CUDA-event timings of "
        f"back-to-back launches (benchmarks/sgemm.py's time_ms), in turns over {ROUNDS} "
        "rounds; TF32 off; N(0,1) inputs")
    rows, ok = [], True
    device = torch.cuda.current_device()
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        reference = torch.mm(a.double(), b.double())
        aligned = not (k % 4 or n % 4)  # matmul's test for 128-bit loads
        _, auto_config, auto_splits = entry_point._resolved("auto", m, n, k, None, None, device)
        plans = {"auto": (auto_config, auto_splits)}
        for name, tiles in RINGS.items():
            for splits in SPLITS:
                if splits == "stream" or splits == 1 or k // splits >= MIN_SLICE:
                    plans[f"{name}_{splits}"] = (TileConfig(*tiles), splits)
        outs, calls, failed = {}, {}, {}
        for variant, (config, splits) in plans.items():
            out = torch.full((m, n), float("nan"), device="cuda")
            try:
                go = entry_point._quick_plan("6", m, n, k, aligned, device, config, splits)
                go(a.data_ptr(), b.data_ptr(), out.data_ptr())
            except Exception as error:  # noqa: BLE001 (recorded, and the run goes on)
                failed[variant] = f"{type(error).__name__}: {error}"[:300]
                continue
            outs[variant] = out
            calls[variant] = lambda go=go, c=out: go(a.data_ptr(), b.data_ptr(), c.data_ptr())
        outs["cublas"] = torch.empty((m, n), device="cuda")
        calls["cublas"] = lambda: torch.mm(a, b, out=outs["cublas"])
        calls["cublas"]()
        torch.cuda.synchronize()
        errors = {v: relative_error(outs[v], reference) for v in calls}
        ok &= all(e < 1e-5 for e in errors.values())
        ms = medians_in_turns(calls, time_ms, ROUNDS)
        for v in calls:
            config, splits = plans.get(v, (None, None))
            rows.append({"m": m, "n": n, "k": k, "variant": v, "ms": ms[v],
                         "vs_cublas": ms["cublas"] / ms[v],
                         "config": asdict(config) if config else None, "splits": splits,
                         "max_rel_err": errors[v]})
        for v, why in failed.items():
            rows.append({"m": m, "n": n, "k": k, "variant": v, "failed": why})
        best = sorted((ms["cublas"] / ms[v], v) for v in calls if v != "cublas")[::-1][:6]
        print(f"{m}x{n}x{k}: cublas {ms['cublas'] * 1e3:.1f} us; auto "
              f"{ms['cublas'] / ms['auto']:.0%} ({auto_config.bm}x{auto_config.bn} "
              f"s{auto_config.stages} x{auto_splits}); best "
              + ", ".join(f"{v} {r:.0%}" for r, v in best)
              + (f"; failed {sorted(failed)}" if failed else ""), flush=True)
        record["results"] = rows  # written after every shape: a run cut short keeps its rows
        path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
