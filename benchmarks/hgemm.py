"""Half-precision GEMM on the tensor cores: half_matmul's levels 3-7 in fp16 and bf16 beside cuBLAS in the same dtype.

    PYTHONPATH=src python3 benchmarks/hgemm.py [--quick] [--sweep] [--out DIR]

`half_matmul(a, b)` (kernels.tensor_cores.half_matmul) multiplies fp16 or
bf16 CUDA tensors on mma.sync.m16n8k16, summing in float32 and rounding C
once to the inputs' dtype. Its peer is `torch.mm(a, b)` in the same dtype
(cuBLAS, which on Hopper uses wgmma). Both are timed as a user calls them,
with their default configuration, each call allocating its output.

1. **Validation**, before anything is timed, at every level, for fp16 and
   bf16, C in the inputs' dtype and in float32, on ragged shapes (one that
   needs padding of K and N): fresh random inputs, compared with float64.
   The error is held to the peer's on the same inputs (torch.mm in the same
   dtype; for float32 C, torch.mm's out_dtype=float32): ||C - ref|| /
   ||ref|| at most twice the peer's, plus 1e-6 (four times for float32 C
   at levels 3-6, which never split K: at K = 4104 their single chain of
   float32 sums errs 3x as much as cuBLAS, which splits it). A NaN
   in A and an Inf in B must give NaN and Inf where the peer has them.
2. **Timing**: CUDA events around 10 calls, ours and the peer's in turns,
   the median of ROUNDS rounds after warm-up.
   - `half_matmul` (level 7, its default) and `torch.mm` on square sizes and
     on shapes the tiles were not chosen for (ragged, skinny, transformer
     layers);
   - each level 3-7 at 4096^3 (`half_matmul(a, b, level=L)`), for the
     levels' headers.
3. `tf32_matmul` (tensor_cores.tf32_fast) on float32 inputs, one pass (TF32)
   and three (3xTF32), against cuBLAS with TF32 on, at 4096^3, 8192^3, 2048^3
   and 3000^3,
   validated first (rows tf32_matmul1, tf32_matmul3 and cublas_tf32); one
   pass at other tiles too (TF32_CANDIDATES: rows tf32_matmul1_<name>).
4. `--sweep`: level 7 with other tile shapes, at a few sizes (recorded, not
   used by half_matmul unless its table is updated by hand).

Writes <out>/hgemm-<gpu-slug>-<date>[-quick].json: results, rows of variant, dtype, m,
n, k, ms, tflops, vs_cublas (our time's share of cuBLAS's speed: cuBLAS time
over ours), with the GPU's name, versions and date.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30.4 with numpy 2.5 (PLATFORM.md)
    np.row_stack = np.vstack
os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")

from _common import (benchmark_parser, need_a_gpu, record_start, start,  # noqa: E402
                     versions, write_record)

ROUNDS = 15
CALLS = 10
SQUARES = (1024, 2048, 4096, 8192)
# Shapes the tiles were not chosen on: ragged (not multiples of the tiles;
# one not of 8), skinny, deep K, and transformer layers (GPT-2 small's MLP
# and attention projections at 8192 tokens; a 7B model's MLP at 4096 tokens).
OTHER_SHAPES = ((3000, 3000, 3000), (1000, 1000, 1000), (1023, 1025, 1027), (512, 8192, 8192),
                (8192, 512, 8192), (512, 512, 32768), (8192, 3072, 768), (8192, 768, 3072),
                (8192, 2304, 768), (4096, 11008, 4096))
VALIDATION_SHAPES = ((1000, 1032, 776), (77, 50, 29), (256, 384, 512), (130, 136, 4104))
SWEEP = (dict(bm=128, bn=128, bk=32, warps_m=2, warps_n=2, stages=3),
         dict(bm=128, bn=128, bk=32, warps_m=2, warps_n=2, stages=4),
         dict(bm=128, bn=128, bk=32, warps_m=2, warps_n=2, stages=5),
         dict(bm=128, bn=128, bk=32, warps_m=2, warps_n=4, stages=4),
         dict(bm=128, bn=256, bk=32, warps_m=2, warps_n=4, stages=3),
         dict(bm=256, bn=128, bk=32, warps_m=4, warps_n=2, stages=3),
         dict(bm=128, bn=128, bk=64, warps_m=2, warps_n=2, stages=3),
         dict(bm=64, bn=128, bk=32, warps_m=2, warps_n=2, stages=4),
         dict(bm=128, bn=64, bk=32, warps_m=2, warps_n=2, stages=4),
         dict(bm=64, bn=64, bk=32, warps_m=2, warps_n=2, stages=4))


def relative_error(x, ref):
    """||x - ref|| / ||ref|| in float64 (inf if x has a NaN where ref has none)."""
    x = x.double()
    if not bool(x.isfinite().all()):
        return float("inf")
    return float((x - ref).norm() / ref.norm())


def float32_peer(torch, a, b):
    """cuBLAS's product of halves with float32 C (torch.mm's out_dtype, on
    tensor cores like ours), or where this torch lacks it the float32 product
    of the same halves (TF32 off)."""
    try:
        return torch.mm(a, b, out_dtype=torch.float32)
    except TypeError:
        return a.float() @ b.float()


def validate(torch, half_matmul, levels) -> list:
    """Each level, dtype and output on VALIDATION_SHAPES against float64 and the
    peer; raises AssertionError at the first failure. Returns the records."""
    records = []
    for level in levels:
        for dtype in (torch.float16, torch.bfloat16):
            for out in (None, torch.float32):
                for m, n, k in VALIDATION_SHAPES:
                    a = torch.randn(m, k, device="cuda", dtype=dtype)
                    b = torch.randn(k, n, device="cuda", dtype=dtype)
                    ref = a.double() @ b.double()
                    ours = half_matmul(a, b, out_dtype=out, level=level)
                    peer = torch.mm(a, b) if out is None else float32_peer(torch, a, b)
                    assert ours.shape == (m, n) and ours.dtype == peer.dtype, (ours.shape, ours.dtype)
                    e_ours, e_peer = relative_error(ours, ref), relative_error(peer, ref)
                    # Levels 3-6 sum all of K in one chain per element; with
                    # float32 C that chain's rounding shows where cuBLAS splits
                    # a deep K (level 7 splits it too): held to 4x the peer.
                    factor = 4 if out is not None and level < 7 else 2
                    ok = e_ours <= factor * e_peer + 1e-6
                    records.append(dict(level=level, dtype=str(dtype)[6:], out=str(peer.dtype)[6:],
                                        m=m, n=n, k=k, error=e_ours, peer_error=e_peer, ok=ok))
                    if not ok:
                        print('VALIDATION FAILED', records[-1], flush=True)
            # NaN and Inf go where the peer puts them.
            a = torch.randn(64, 48, device="cuda", dtype=dtype)
            b = torch.randn(48, 40, device="cuda", dtype=dtype)
            a[3, 5], b[7, 9] = float("nan"), float("inf")
            ours, peer = half_matmul(a, b, level=level), torch.mm(a, b)
            if not (torch.equal(ours.isnan(), peer.isnan()) and torch.equal(ours.isinf(), peer.isinf())):
                print(f"VALIDATION FAILED: level {level} {dtype}: NaN/Inf placed unlike torch.mm", flush=True)
    return records


def time_in_turns(calls: dict) -> dict:
    """Median milliseconds per call of each function, timed in turns."""
    import torch

    for function in calls.values():  # warm-up: compiling, and clocks
        function()
    torch.cuda.synchronize()
    until = time.perf_counter() + 0.2
    while time.perf_counter() < until:
        for function in calls.values():
            function()
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, function in calls.items():
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(CALLS):
                function()
            end.record()
            torch.cuda.synchronize()
            times[name].append(begin.elapsed_time(end) / CALLS)
    return {name: statistics.median(values) for name, values in times.items()}


# tf32_matmul's one pass at other tiles than its default (tf32_fast.ONE_PASS_DEFAULT,
# 128 x 64 x 32 with 4 warps, stages 3: 164 registers, three blocks an SM), each
# compiled by ptxas 13.5 for sm_90 without spills, with B read as B^T by ldmatrix
# (2026-11-28, eighth session): registers a thread and blocks an SM. Fewer
# registers let 128 x 128 with 8 warps hold two blocks an SM (it held one), with
# two thirds of the traffic from L2 that 128 x 64 tiles need per product.
TF32_CANDIDATES = {
    "128x64_bk16": dict(bm=128, bn=64, bk=16, warps_m=2, warps_n=2, stages=4, group_m=8),  # 155, 3
    "128x64_bk32_s4": dict(bm=128, bn=64, bk=32, warps_m=2, warps_n=2, stages=4, group_m=8),  # 164, 2
    "128x128": dict(bm=128, bn=128, bk=16, warps_m=2, warps_n=4, stages=4, group_m=8),  # 126, 2
    "128x128_4x2": dict(bm=128, bn=128, bk=16, warps_m=4, warps_n=2, stages=4, group_m=8),  # 128, 2
    "128x128_bk32": dict(bm=128, bn=128, bk=32, warps_m=2, warps_n=4, stages=3, group_m=8),  # 165, 1
    "64x128_bk32": dict(bm=64, bn=128, bk=32, warps_m=2, warps_n=2, stages=3, group_m=8),  # 168, 3
}


# The sizes tf32_rows times (the target is at 4096^3), all of
# TF32_CANDIDATES at 4096 and 8192, those of TF32_EVERY_SIZE at the others:
# 64 x 128 x 32 beat the default at 8192^3 by 7% and lost at 4096^3 by 0.5%
# (2026-11-29), so it is timed at a smaller and a ragged size too before
# either becomes the default.
TF32_SIZES = (4096, 8192, 2048, 3000)
TF32_EVERY_SIZE = ("64x128_bk32",)


def tf32_rows(torch) -> list:
    """tensor_cores.tf32_matmul in one pass (TF32) and three (3xTF32) on
    float32 inputs at TF32_SIZES (cubes), against cuBLAS with TF32 on (its
    TF32 kernels, the issue's peer) in the same run; each validated first
    against float64: one pass within 4x cuBLAS TF32's error, three within 4x
    cuBLAS's fp32 (TF32 off) error, on the same inputs. Then one pass at
    TF32_CANDIDATES' tiles (rows tf32_matmul1_<name>, with their config),
    each validated the same way and timed in the same turns."""
    from gpucourse.kernels.tensor_cores.tf32_fast import tf32_matmul

    rows = []
    for size in TF32_SIZES:
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        ref = a.double() @ b.double()
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32_peer = relative_error(torch.mm(a, b), ref)
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32_peer = relative_error(torch.mm(a, b), ref)
        for passes, peer in ((1, tf32_peer), (3, fp32_peer)):
            error = relative_error(tf32_matmul(a, b, passes=passes), ref)
            if not error <= 4 * peer + 1e-7:
                print(f"VALIDATION FAILED: tf32_matmul passes={passes} at {size}^3: {error:.2e} "
                      f"against the peer's {peer:.2e}", flush=True)
        candidates = {}
        for name, config in TF32_CANDIDATES.items():
            if size not in (4096, 8192) and name not in TF32_EVERY_SIZE:
                continue
            error = relative_error(tf32_matmul(a, b, passes=1, config=config), ref)
            if error <= 4 * tf32_peer + 1e-7:
                candidates[name] = (lambda c=config: tf32_matmul(a, b, passes=1, config=c))
            else:
                print(f"VALIDATION FAILED: tf32_matmul {name} at {size}^3: {error:.2e}",
                      flush=True)
        torch.backends.cuda.matmul.allow_tf32 = True
        ms = time_in_turns({"1": lambda: tf32_matmul(a, b, passes=1),
                            "3": lambda: tf32_matmul(a, b, passes=3),
                            "cublas_tf32": lambda: torch.mm(a, b), **candidates})
        torch.backends.cuda.matmul.allow_tf32 = False
        for name in candidates:
            rows.append(dict(row(f"tf32_matmul1_{name}", "fp32", size, size, size, ms[name],
                                 ms["cublas_tf32"]), config=TF32_CANDIDATES[name]))
            print(f"tf32_matmul passes=1 {name} at {size}^3: {rows[-1]['tflops']} TFLOP/s "
                  f"({rows[-1]['vs_cublas']} of cuBLAS TF32)", flush=True)
        for passes in (1, 3):
            rows.append(row(f"tf32_matmul{passes}", "fp32", size, size, size, ms[str(passes)],
                            ms["cublas_tf32"]))
            print(f"tf32_matmul passes={passes} at {size}^3: {rows[-1]['tflops']} TFLOP/s "
                  f"({rows[-1]['vs_cublas']} of cuBLAS TF32)", flush=True)
        rows.append(row("cublas_tf32", "fp32", size, size, size, ms["cublas_tf32"],
                        ms["cublas_tf32"]))
    return rows


def row(variant, dtype, m, n, k, ms, peer_ms):
    tflops = 2 * m * n * k / (ms * 1e-3) / 1e12
    return dict(variant=variant, dtype=dtype, m=m, n=n, k=k, ms=round(ms, 5),
                tflops=round(tflops, 1), vs_cublas=round(peer_ms / ms, 3))


def main(argv=None):
    parser = benchmark_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="squares only, no sweep")
    parser.add_argument("--sweep", action="store_true", help="time other tile shapes too")
    parser.add_argument("--only-sweep", action="store_true", help="validation and the sweep only")
    args, started = start(parser, argv, check_gpu=lambda: need_a_gpu(
        "benchmarks/hgemm.py", "tests/test_hgemm.py runs the kernels on the simulator"))
    import torch

    from gpucourse.kernels.launch import current_gpu, gpu_name
    from gpucourse.kernels.tensor_cores.half_matmul import half_matmul
    from gpucourse.kernels.tensor_cores.hgemm_ladder import LEVELS

    gpu = gpu_name(current_gpu())
    torch.manual_seed(0)
    validation = validate(torch, half_matmul, sorted(LEVELS))
    print(f"validated levels {sorted(LEVELS)}: {len(validation)} cases, worst ratio to the peer "
          f"{max(r['error'] / max(r['peer_error'], 1e-12) for r in validation):.2f}", flush=True)
    rows = []
    shapes = [(s, s, s) for s in SQUARES] + ([] if args.quick else list(OTHER_SHAPES))
    if args.only_sweep:
        shapes, args.sweep = [], True
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for m, n, k in shapes:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            ms = time_in_turns({"ours": lambda: half_matmul(a, b), "cublas": lambda: torch.mm(a, b)})
            rows.append(row("half_matmul", dtype_name, m, n, k, ms["ours"], ms["cublas"]))
            rows.append(row("cublas", dtype_name, m, n, k, ms["cublas"], ms["cublas"]))
            print(f"{dtype_name} {m}x{n}x{k}: ours {rows[-2]['tflops']} TFLOP/s, cuBLAS "
                  f"{rows[-1]['tflops']}, share {rows[-2]['vs_cublas']}", flush=True)
    size = 4096
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        calls = {f"level{level}": (lambda level=level: half_matmul(a, b, level=level))
                 for level in sorted(LEVELS)}
        calls["cublas"] = lambda: torch.mm(a, b)
        ms = time_in_turns(calls)
        for level in sorted(LEVELS):
            rows.append(row(f"level{level}", dtype_name, size, size, size, ms[f"level{level}"],
                            ms["cublas"]))
            print(f"{dtype_name} level {level} at {size}^3: {rows[-1]['tflops']} TFLOP/s "
                  f"({rows[-1]['vs_cublas']} of cuBLAS)", flush=True)
    rows += tf32_rows(torch)
    sweep = []
    if args.sweep and not args.quick:
        for m, n, k in ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                        (8192, 8192, 8192), (8192, 768, 3072), (8192, 3072, 768),
                        (512, 512, 32768)):
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            b = torch.randn(k, n, device="cuda", dtype=torch.float16)
            calls = {str(i): (lambda c=c: half_matmul(a, b, config=dict(LEVELS[7], **c)))
                     for i, c in enumerate(SWEEP)}
            calls["cublas"] = lambda: torch.mm(a, b)
            ms = time_in_turns(calls)
            for i, c in enumerate(SWEEP):
                sweep.append(dict(row("sweep", "fp16", m, n, k, ms[str(i)], ms["cublas"]), config=c))
            best = max((r for r in sweep if (r["m"], r["n"], r["k"]) == (m, n, k)),
                       key=lambda r: r["tflops"])
            print(f"sweep {m}x{n}x{k}: best {best['tflops']} TFLOP/s ({best['vs_cublas']}) with "
                  f"{best['config']}", flush=True)
    record = record_start("hgemm", gpu, versions(),
                          f"CUDA events around {CALLS} calls, ours and cuBLAS in turns, median of "
                          f"{ROUNDS} rounds after warm-up; each call allocates its output",
                          wall_s=round(time.perf_counter() - started, 1), results=rows,
                          validation=validation, sweep=sweep)
    path = write_record(record, args.out, "-quick" if args.quick else "")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
