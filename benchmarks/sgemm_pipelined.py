"""SGEMM with cp.async pipelines, cuBLAS's structure, at the shapes auto misses.

    PYTHONPATH=src python3 benchmarks/sgemm_pipelined.py [--out DIR]

Issue 33. At 1000^3 cuBLAS (torch.mm, fp32, on the H200) runs a kernel named
``sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1
_ffma``: 64 x 128 tiles, 8 columns of K a step, three stages of cp.async, 128
threads (64 outputs each), 128 blocks, about one an SM: the same tiles and
blocks as auto's plan, in 51 us against auto's 62. At 1537 x 1023 x 771 the
same kernel (200 blocks, 72 us against 96); at 1536 x 1024 x 768 and 3001 x
2999 x 1009 its 64 x 64 tiles (torch's profiler, this session's notes). What
differs is the walk along K: auto's kernel fetches each tile into registers
and stores it to shared memory a step later; cuBLAS's copies tiles straight
into shared memory with cp.async, three ahead. ``TileConfig(..., stages=s)``
builds level 6's kernel with that walk (``pipelined``; the first two runs set
it by a module knob, vectorized.PIPELINE_STAGES, since folded into the
configuration: the same kernels). This script times, as
matmul launches them (entry_point's launches, splits as given), in turns with
cuBLAS (TF32 off):

- ``auto_plan``: auto's plan as matmul runs it today (a ring, stream-K or
  neither, as the shape model picks);
- ``pipe_64x128`` and ``pipe_64x256``: 64 x 128 x 16 tiles of 8 x 8 a
  thread (128 threads) and 64 x 256 x 16 of 8 x 16, two stages, uncapped
  registers, K whole, each copy's address worked out once and the FMAs row
  by row (the package's first defaults); where n is ragged, B is first
  copied into rows of n4 floats (entry_point's ``_ring_plan``), and the copy
  is timed with the kernel;
- ``..._each``: each copy's address from its row and column every step
  (``pipelined.COPY_ADDRESSES = "each"``);
- ``..._serpentine``: the step's FMAs with odd rows right to left
  (``vectorized.RING_FMA_ORDER``);
- ``..._stream``: stream-K on the ring;
- ``cublas``.

Each is checked first against float64, then timed: the median of CUDA-event
timings of back-to-back launches (benchmarks/sgemm.py's time_ms), in turns
over ROUNDS rounds. Writes DIR/sgemm_pipelined-<gpu-slug>-<date>.json (rows:
m, n, k, variant, ms, vs_cublas, config, splits, addresses, fma_order,
fragment_copies, b_padded, max_rel_err). About three minutes.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from _common import (benchmark_parser, medians_in_turns, need_a_gpu, record_start, start,
                     versions, write_record)
from sgemm_grid import relative_error

ROUNDS = 3
SHAPES = [(1000, 1000, 1000), (1537, 1023, 771), (3001, 2999, 1009), (777, 1313, 2047),
          (2048, 2048, 2048), (8192, 768, 3072), (4096, 4096, 4096)]
# variant: (tiles; slices of K, None for auto's; register cap; stages; how
# the copies find their addresses, pipelined.COPY_ADDRESSES).
# Earlier runs also timed auto's own tiles as a ring (bk 8, then 16). The
# first run (reruns/sgemm_pipelined-h200-2026-11-29-first.json) timed 8-deep steps in
# three stages: within 2% of auto at 1537 x 1023 x 771, slower everywhere
# else (75% of cuBLAS at 4096^3 against auto's 90%). The second (-second)
# timed 16-deep steps: 64 x 128 x 16, 8 x 8 a thread, two stages, 86% at
# 1000^3 (auto 82%), and 128 x 128 x 16 uncapped 80% at 1537 x 1023 x 771
# (auto 76%). The third (results/sgemm_pipelined-h200-2026-11-29.json) more
# tiles of 16-deep steps, each with auto's slices of K: 64 x 256 x 16 of 8 x
# 16 91% at 4096^3 (auto 90%). The fourth (-fourth-two-branches) the walk
# written out once per copy of the ring: half the speed at 1000^3. This one:
# the ring's copies finding their addresses once (the package's default) or
# each step (its first build, 3% faster at 1000^3 in an A/B probe), on the
# two tiles auto's rings use most.
# variant: (tiles, slices of K, knobs set while its kernels are built:
# pipelined.COPY_ADDRESSES, vectorized.RING_FMA_ORDER, vectorized.FRAGMENT_COPIES).
# The fifth run (reruns/...-2026-11-30-fifth.json) timed "once" and "each", the FMA order and the
# fragments a step ahead on two rings, K whole and stream-K, B padded where n
# is ragged: "each" 11% faster at 1000^3 (56.7 against 62.4 us), each with
# the serpentine order 5% faster at 3001 x 2999 x 1009 and 4% at 1537 x 1023
# x 771, the fragments ahead nowhere faster. This one: the two knobs' four
# pairs on the ring auto uses most, K whole and stream-K, and on 64 x 256.
ONCE = ("once", "rows", 1)
TILES_64X128, TILES_64X256 = (64, 128, 16, 8, 8), (64, 256, 16, 8, 16)
PIPELINED = {"pipe_64x128": (TILES_64X128, 1, ONCE),
             "pipe_64x128_each": (TILES_64X128, 1, ("each", "rows", 1)),
             "pipe_64x128_serpentine": (TILES_64X128, 1, ("once", "serpentine", 1)),
             "pipe_64x128_each_serpentine": (TILES_64X128, 1, ("each", "serpentine", 1)),
             "pipe_64x128_stream": (TILES_64X128, "stream", ONCE),
             "pipe_64x128_stream_each_serpentine": (TILES_64X128, "stream",
                                                    ("each", "serpentine", 1)),
             "pipe_64x256": (TILES_64X256, 1, ONCE),
             "pipe_64x256_each_serpentine": (TILES_64X256, 1, ("each", "serpentine", 1))}


def launches(torch, a, b, c, config, splits, knobs=ONCE):
    """go(a_ptr, b_ptr, c_ptr): matmul's launches (entry_point's _quick_plan:
    for a ring, _ring_plan, which pads B where n is ragged) for level 6's
    kernel with `config` and `splits`, its kernels built (by one call on a, b
    and c) under `knobs` (pipelined.COPY_ADDRESSES, vectorized.RING_FMA_ORDER,
    vectorized.FRAGMENT_COPIES)."""
    from gpucourse.kernels.sgemm import entry_point, kernel_choice, pipelined, vectorized

    m, k = a.shape
    n = b.shape[1]
    caches = (kernel_choice._compiled, kernel_choice._tiled_kernel, entry_point._quick_plan)
    before = pipelined.COPY_ADDRESSES, vectorized.RING_FMA_ORDER, vectorized.FRAGMENT_COPIES
    pipelined.COPY_ADDRESSES, vectorized.RING_FMA_ORDER, vectorized.FRAGMENT_COPIES = knobs
    for cache in caches:
        cache.cache_clear()  # kernels are built once per key: build them anew
    try:
        aligned = not (k % 4 or n % 4)  # matmul's test for 128-bit loads
        go = entry_point._quick_plan("6", m, n, k, aligned, torch.cuda.current_device(),
                                     config, splits)
        go(a.data_ptr(), b.data_ptr(), c.data_ptr())  # compiled here, under the knobs
    finally:
        pipelined.COPY_ADDRESSES, vectorized.RING_FMA_ORDER, vectorized.FRAGMENT_COPIES = before
        for cache in caches:
            cache.cache_clear()
    return go


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_pipelined.py", "the cp.async walk is tested on the simulator"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import TileConfig, entry_point

    record = record_start(
        "sgemm_pipelined", sgemm.gpu_model(), versions(),
        "auto's plan as matmul launches it, and level 6's kernel with the walk along K "
        "by cp.async (TileConfig's stages; stages and tiles in each row) on auto's "
        "tiles and on cuBLAS's, launched the same way, beside torch.mm; each checked against "
        "float64 first, then the median of CUDA-event timings of back-to-back launches "
        f"(benchmarks/sgemm.py's time_ms), in turns over {ROUNDS} rounds; TF32 off; N(0,1) inputs")
    rows, ok = [], True
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        reference = torch.mm(a.double(), b.double())
        device = torch.cuda.current_device()
        _, auto_config, auto_splits = entry_point._resolved("auto", m, n, k, None, None, device)
        plans = {"auto_plan": (auto_config, auto_splits, ONCE)}
        for variant, (tiles, splits, knobs) in PIPELINED.items():
            plans[variant] = (TileConfig(*tiles, stages=2), splits, knobs)
        outs = {v: torch.full((m, n), float("nan"), device="cuda") for v in [*plans, "cublas"]}
        calls, failed = {}, {}
        for variant, (config, splits, knobs) in plans.items():
            try:
                go = launches(torch, a, b, outs[variant], config, splits, knobs)
                calls[variant] = (lambda go=go, c=outs[variant]: go(a.data_ptr(), b.data_ptr(),
                                                                    c.data_ptr()))
            except ValueError as error:  # tiles the cp.async walk cannot share out
                failed[variant] = str(error)
        calls["cublas"] = lambda: torch.mm(a, b, out=outs["cublas"])
        calls["cublas"]()
        torch.cuda.synchronize()
        errors = {v: relative_error(outs[v], reference) for v in calls}
        ok &= all(e < 1e-5 for e in errors.values())
        ms = medians_in_turns(calls, time_ms, ROUNDS)
        for v in calls:
            config, splits, knobs = plans.get(v, (None, None, (None,) * 3))
            rows.append({"m": m, "n": n, "k": k, "variant": v, "ms": ms[v],
                         "vs_cublas": ms["cublas"] / ms[v],
                         "config": asdict(config) if config else None, "splits": splits,
                         "addresses": knobs[0], "fma_order": knobs[1],
                         "fragment_copies": knobs[2], "b_padded": bool(config and config.stages
                                                                      and n % 4),
                         "max_rel_err": errors[v]})
        for v, why in failed.items():
            rows.append({"m": m, "n": n, "k": k, "variant": v, "failed": why})
        print(f"{m}x{n}x{k}: " + ", ".join(
            f"{v} {ms[v] * 1e3:.1f} us ({ms['cublas'] / ms[v]:.0%}, err {errors[v]:.0e})"
            for v in calls) + f"; auto {auto_config.bm}x{auto_config.bn} x{auto_splits}"
            + (f"; failed {sorted(failed)}" if failed else ""), flush=True)
    record["results"] = rows
    path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
