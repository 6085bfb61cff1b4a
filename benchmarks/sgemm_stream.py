"""SGEMM with stream-K beside auto's plan, at the shapes auto misses.

    PYTHONPATH=src python3 benchmarks/sgemm_stream.py [--out DIR]

Issue 33. At 1537 x 1023 x 771 auto's plan is one wave of 104 blocks of 128 x
128 on the H200's 132 SMs: 28 SMs idle, the time one block's (the Nsight
Compute profile, sgemm_ragged_ncu-h200-2026-11-29.json). Other shapes under
85% of cuBLAS pay for a nearly empty last wave (3001 x 2999 x 1009: 576
tiles, 4.4 waves). Stream-K (matmul's splits="stream", split_k) gives every
SM an equal run of all the tiles' steps of K. This script times, as a user
calls matmul, in turns with cuBLAS (torch.mm, TF32 off):

- ``auto``: matmul(a, b), auto's plan; ``auto_plan``: the launches matmul
  makes for it, without matmul's Python (as the stream variants are timed);
- ``stream``: the same tiles with splits="stream" (uncapped registers, one
  block of 256 threads an SM: building_blocks.STREAM_REGISTERS);
- ``stream_two_blocks``: the same under two blocks' register cap (it
  spilled offline: 132 bytes at 128 x 128);
- ``stream_128``: stream-K on 128 x 128 tiles (8 x 8 a thread) where auto's
  tiles are others;
- ``cublas``.

Each is checked first against float64, then timed: the median of CUDA-event
timings of back-to-back calls (benchmarks/sgemm.py's time_ms), in turns over
ROUNDS rounds. Writes DIR/sgemm_stream-<gpu-slug>-<date>.json (rows: m, n,
k, variant, ms, vs_cublas, config, splits, workers, max_rel_err). About two
minutes.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from _common import (benchmark_parser, medians_in_turns, need_a_gpu, record_start, start,
                     versions, write_record)
from sgemm_fragments import SHAPES
from sgemm_grid import relative_error

ROUNDS = 3
ONE_WAVE = (128, 128, 16, 8, 8)


def plan_for(torch, key, m, n, k, config, splits, capped=False):
    """(go(a_ptr, b_ptr, c_ptr), workers): the launches matmul makes for this
    plan (entry_point._quick_plan), with stream-K's kernel built uncapped or
    under two blocks' register cap, and its number of workers (None
    without stream-K)."""
    from gpucourse.kernels.sgemm import building_blocks, entry_point, kernel_choice, split_k

    caches = (kernel_choice._compiled, kernel_choice._tiled_kernel, entry_point._quick_plan)
    device = torch.cuda.current_device()
    before = building_blocks.STREAM_REGISTERS
    building_blocks.STREAM_REGISTERS = "auto" if capped else None
    for cache in caches:
        cache.cache_clear()  # kernels and plans are built once per key: build them anew
    aligned = not (k % 4 or n % 4)  # matmul's test for 128-bit loads
    try:
        go = entry_point._quick_plan(key, m, n, k, aligned, device, config, splits)
        workers = None
        if splits == "stream":
            kernel, _, block = kernel_choice._kernel_for("6", m, n, aligned, config,
                                                         split="stream")
            workers = split_k.stream_workers(kernel, block)
    finally:
        building_blocks.STREAM_REGISTERS = before
        for cache in caches:
            cache.cache_clear()
    return go, workers


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_stream.py", "stream-K is tested on the simulator (tests/test_sgemm_stream_k.py)"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import TileConfig, entry_point

    record = record_start(
        "sgemm_stream", sgemm.gpu_model(), versions(),
        "matmul as a user calls it (auto), and the launches matmul makes for auto's plan "
        "and for splits='stream' on auto's tiles (uncapped, and under two blocks' register "
        "cap) and on 128 x 128 tiles (entry_point._quick_plan), beside torch.mm; each "
        "checked against float64 first, then the median of CUDA-event timings of "
        "back-to-back calls (benchmarks/sgemm.py's time_ms), in turns over "
        f"{ROUNDS} rounds; TF32 off; N(0,1) inputs")
    rows, ok = [], True
    one_wave = TileConfig(*ONE_WAVE)
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        reference = torch.mm(a.double(), b.double())
        _, config, splits = entry_point._resolved("auto", m, n, k, None, None,
                                                  torch.cuda.current_device())
        plans = {"stream": (config, "stream"), "stream_two_blocks": (config, "stream")}
        if config != one_wave:
            plans["stream_128"] = (one_wave, "stream")
        outs = {v: torch.full((m, n), float("nan"), device="cuda")
                for v in ["auto", "auto_plan", *plans, "cublas"]}
        calls, workers = {}, {}
        # Auto as a user calls it, and every plan (auto's too) through the
        # launches matmul makes for it, so that the stream-K builds, which
        # share matmul's keys, can be timed side by side.
        calls["auto"] = lambda: sgemm.matmul(a, b, out=outs["auto"])
        for variant, (tiles, how) in {"auto_plan": (None, None), **plans}.items():
            go, workers[variant] = plan_for(torch, "auto" if tiles is None else "6", m, n, k,
                                            tiles, how, variant == "stream_two_blocks")
            calls[variant] = (lambda go=go, c=outs[variant]: go(a.data_ptr(), b.data_ptr(),
                                                                c.data_ptr()))
        calls["cublas"] = lambda: torch.mm(a, b, out=outs["cublas"])
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        errors = {v: relative_error(outs[v], reference) for v in calls}
        ok &= all(e < 1e-5 for e in errors.values())
        ms = medians_in_turns(calls, time_ms, ROUNDS)
        for v in calls:
            tiles, how = plans.get(v, (config, splits) if v.startswith("auto") else (None, None))
            rows.append({"m": m, "n": n, "k": k, "variant": v, "ms": ms[v],
                         "vs_cublas": ms["cublas"] / ms[v],
                         "config": asdict(tiles) if tiles else None, "splits": how,
                         "workers": workers.get(v), "max_rel_err": errors[v]})
        print(f"{m}x{n}x{k}: " + ", ".join(f"{v} {ms[v] * 1e3:.1f} us ({ms['cublas'] / ms[v]:.0%})"
                                           for v in calls)
              + f"; auto {config.bm}x{config.bn} x{splits}; workers "
              + ", ".join(f"{v} {w}" for v, w in workers.items() if w), flush=True)
    record["results"] = rows
    path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
