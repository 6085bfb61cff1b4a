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
- ``pipe_64x128_8x8``: 64 x 128 x 16 tiles, 8 x 8 a thread (128 threads),
  two stages, auto's slices of K: cuBLAS's tiles at 1000^3 and 1537 x 1023 x
  771, 16 deep;
- ``pipe_128x128_8x8``: 128 x 128 x 16, 8 x 8 (256 threads), two stages,
  uncapped registers;
- ``..._each``: the same with each copy's address worked out from its row
  and column every step (``pipelined.COPY_ADDRESSES = "each"``);
- ``cublas``.

Each is checked first against float64, then timed: the median of CUDA-event
timings of back-to-back launches (benchmarks/sgemm.py's time_ms), in turns
over ROUNDS rounds. Writes DIR/sgemm_pipelined-<gpu-slug>-<date>.json (rows:
m, n, k, variant, ms, vs_cublas, config, splits, stages, registers, addresses,
max_rel_err). About
three minutes.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from pathlib import Path

from _common import (benchmark_parser, medians_in_turns, need_a_gpu, record_start, start,
                     versions, write_record)
from sgemm_grid import relative_error

ROUNDS = 3
SHAPES = [(1537, 1023, 771), (1000, 1000, 1000), (3001, 2999, 1009), (1024, 1024, 16384),
          (512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096)]
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
PIPELINED = {"pipe_64x128_8x8": ((64, 128, 16, 8, 8), None, None, 2, "once"),
             "pipe_64x128_8x8_each": ((64, 128, 16, 8, 8), None, None, 2, "each"),
             "pipe_128x128_8x8": ((128, 128, 16, 8, 8), None, None, 2, "once"),
             "pipe_128x128_8x8_each": ((128, 128, 16, 8, 8), None, None, 2, "each")}


def launches(torch, m, n, k, config, splits, stages, registers=None, addresses="once"):
    """go(a_ptr, b_ptr, c_ptr): entry_point's launches for level 6's kernel with
    `config` and `splits`, built with `stages` cp.async stages (0: the walk
    through registers) and, with stages, the register cap `registers` and
    the copies' `addresses` (pipelined.COPY_ADDRESSES)."""
    from gpucourse.kernels.sgemm import entry_point, kernel_choice, pipelined, vectorized

    caches = (kernel_choice._compiled, kernel_choice._tiled_kernel)
    before = vectorized.PIPELINE_REGISTERS, pipelined.COPY_ADDRESSES
    vectorized.PIPELINE_REGISTERS, pipelined.COPY_ADDRESSES = registers, addresses
    for cache in caches:
        cache.cache_clear()  # kernels are built once per key: build them anew
    try:
        aligned = not (k % 4 or n % 4)  # matmul's test for 128-bit loads
        go = entry_point._launches("6", m, n, k, n, aligned, torch.cuda.current_device(),
                                   replace(config, stages=stages), splits)
    finally:
        vectorized.PIPELINE_REGISTERS, pipelined.COPY_ADDRESSES = before
    return go


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_pipelined.py", "the cp.async walk is tested on the simulator"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import TileConfig, entry_point, kernel_choice

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
        plans = {"auto_plan": (auto_config, auto_splits, auto_config.stages, None, "once")}
        for variant, (tiles, splits, registers, stages, addresses) in PIPELINED.items():
            plans[variant] = (TileConfig(*tiles), auto_splits if splits is None else splits,
                              stages, registers, addresses)
        outs = {v: torch.full((m, n), float("nan"), device="cuda") for v in [*plans, "cublas"]}
        calls, failed = {}, {}
        for variant, (config, splits, stages, registers, addresses) in plans.items():
            try:
                go = launches(torch, m, n, k, config, splits, stages, registers, addresses)
                calls[variant] = (lambda go=go, c=outs[variant]: go(a.data_ptr(), b.data_ptr(),
                                                                    c.data_ptr()))
                calls[variant]()  # compiled here, under its own knobs
            except ValueError as error:  # tiles the cp.async walk cannot share out
                failed[variant] = str(error)
            finally:
                kernel_choice._compiled.cache_clear()
                kernel_choice._tiled_kernel.cache_clear()
        calls["cublas"] = lambda: torch.mm(a, b, out=outs["cublas"])
        calls["cublas"]()
        torch.cuda.synchronize()
        errors = {v: relative_error(outs[v], reference) for v in calls}
        ok &= all(e < 1e-5 for e in errors.values())
        ms = medians_in_turns(calls, time_ms, ROUNDS)
        for v in calls:
            config, splits, stages, registers, addresses = plans.get(v, (None,) * 5)
            rows.append({"m": m, "n": n, "k": k, "variant": v, "ms": ms[v],
                         "vs_cublas": ms["cublas"] / ms[v],
                         "config": asdict(config) if config else None, "splits": splits,
                         "stages": stages, "registers": registers, "addresses": addresses,
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
