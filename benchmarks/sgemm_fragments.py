"""SGEMM with two copies of each thread's fragments, at the shapes auto misses.

    PYTHONPATH=src python3 benchmarks/sgemm_fragments.py [--out DIR]

Issue 33. Nsight Compute on auto's kernel (sgemm_ragged_ncu-h200-2026-11-29.json,
chapter 8) found its warps hardly waiting on global memory (1.6% of the
samples at 1537 x 1023 x 771) and, at 1000^3, waiting on shared memory first
(short scoreboard, 28%): with one block of 8 warps on an SM, the reads of a
step's fragments from shared memory are not hidden behind other warps' FMAs.
``vectorized.FRAGMENT_COPIES = 2`` has each step read the next step's
fragments into a second copy before its own FMAs (the same FMAs in the same
order: the same bits). This script times auto's plan (tiles, slices of K,
128-bit or single loads as matmul picks them) built both ways, at the grid's
shapes under 85% of cuBLAS on the day the profile was taken and a few that
pass, in turns with cuBLAS (torch.mm, TF32 off):

- ``one_copy``: the kernel as matmul runs it today;
- ``two_copies``: the same plan with FRAGMENT_COPIES = 2;
- ``cublas``.

Each is checked first against float64 (and the two copies against each other,
bit for bit), then timed: the median of CUDA-event timings of back-to-back
launches (benchmarks/sgemm.py's time_ms), in turns over ROUNDS rounds.
Writes DIR/sgemm_fragments-<gpu-slug>-<date>.json (rows: m, n, k, variant,
ms, vs_cublas, config, splits, vectorized, max_rel_err). About a minute.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from _common import (benchmark_parser, medians_in_turns, need_a_gpu, record_start, start,
                     versions, write_record)
from sgemm_grid import relative_error

ROUNDS = 3
VARIANTS = ("one_copy", "two_copies", "cublas")
# Under 85% in sgemm_grid-h200-2026-11-29.json: the first five; then two that
# pass and the square products the level was tuned on, as controls.
SHAPES = [(1537, 1023, 771), (512, 512, 512), (1000, 1000, 1000), (3001, 2999, 1009),
          (1024, 1024, 16384), (2500, 1999, 3001), (777, 1313, 2047), (2048, 2048, 2048),
          (4096, 4096, 4096)]


def plan_launches(torch, a, b, c, copies: int):
    """go() running auto's plan for a @ b into c, its kernels built with
    `copies` copies of the fragments; and (config, splits, vectorized)."""
    from gpucourse.kernels.sgemm import entry_point as E
    from gpucourse.kernels.sgemm import kernel_choice, vectorized

    m, k = a.shape
    n = b.shape[1]
    device = torch.cuda.current_device()
    key, config, splits = E._resolved("auto", m, n, k, None, None, device)
    aligned = not (k % 4 or n % 4)
    before = vectorized.FRAGMENT_COPIES
    vectorized.FRAGMENT_COPIES = copies
    kernel_choice._compiled.cache_clear()  # kernels are built once per configuration
    kernel_choice._tiled_kernel.cache_clear()
    try:
        go = E._launches(key, m, n, k, n, aligned, device, config, splits)
        go(a.data_ptr(), b.data_ptr(), c.data_ptr())  # compiled here, under `copies`
        torch.cuda.synchronize()
    finally:
        vectorized.FRAGMENT_COPIES = before
        kernel_choice._compiled.cache_clear()
        kernel_choice._tiled_kernel.cache_clear()
    return (lambda: go(a.data_ptr(), b.data_ptr(), c.data_ptr())), (config, splits, aligned)


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_fragments.py", "the committed sgemm_grid runs hold auto as it is"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm

    torch.backends.cuda.matmul.allow_tf32 = False
    record = record_start(
        "sgemm_fragments", sgemm.gpu_model(), versions(),
        "auto's plan built with one and with two copies of the fragments "
        "(vectorized.FRAGMENT_COPIES), launched directly, and torch.mm; each checked "
        "against float64 first, then the median of CUDA-event timings of back-to-back "
        f"launches (benchmarks/sgemm.py's time_ms), in turns over {ROUNDS} rounds; TF32 off; "
        "N(0,1) inputs")
    rows, ok = [], True
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        reference = torch.mm(a.double(), b.double())
        outs = {v: torch.full((m, n), float("nan"), device="cuda") for v in VARIANTS}
        launches, plan = {}, None
        for copies, variant in ((1, "one_copy"), (2, "two_copies")):
            launches[variant], plan = plan_launches(torch, a, b, outs[variant], copies)
        launches["cublas"] = lambda: torch.mm(a, b, out=outs["cublas"])
        launches["cublas"]()
        torch.cuda.synchronize()
        errors = {v: relative_error(outs[v], reference) for v in VARIANTS}
        # Split-K adds slices atomically, in any order: bits may differ then.
        same = torch.equal(outs["one_copy"], outs["two_copies"])
        ok &= all(e < 1e-5 for e in errors.values()) and (same or plan[1] > 1)
        ms = medians_in_turns({v: launches[v] for v in VARIANTS}, time_ms, ROUNDS)
        config, splits, aligned = plan
        for v in VARIANTS:
            rows.append({"m": m, "n": n, "k": k, "variant": v, "ms": ms[v],
                         "vs_cublas": ms["cublas"] / ms[v], "config": asdict(config),
                         "splits": splits, "vectorized": aligned, "max_rel_err": errors[v],
                         "same_bits": same})
        print(f"{m}x{n}x{k}: " + ", ".join(f"{v} {ms[v] * 1e3:.1f} us ({ms['cublas'] / ms[v]:.0%})"
                                           for v in VARIANTS)
              + f"; {config.bm}x{config.bn} x{splits}, {'128-bit' if aligned else 'single'} loads"
              + ("" if same else "; bits differ"), flush=True)
    record["results"] = rows
    path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
