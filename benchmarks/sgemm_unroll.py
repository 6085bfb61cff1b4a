"""The whole tile's dot product written out, and a register cap: levels 6 and 7 on a real GPU.

    PYTHONPATH=src python3 benchmarks/sgemm_unroll.py [--out DIR]

Why. Nsight Compute on level 6 at 4096^3 (H100, 2026-11-25; benchmarks/NOTES.md)
counted 2.69 G warp instructions against cuBLAS's 2.43 G for the same product:
80% of ours are FFMA, 88% of cuBLAS's. The rest is the dot loop's counter,
compare and branch (written out two steps per pass, sgemm.DOT_UNROLL) and the
address arithmetic of the next tile's loads. Writing the whole tile's bk steps
out removes the loop (sgemm.UNROLLS allows unroll == bk), and a register cap
(Numba's max_registers) keeps two blocks of 256 threads on an SM where the
longer code would otherwise take more registers.

What it does.
1. **Validation.** Every variant computes 1000 x 1028 x 780 (no size a multiple
   of a tile; the 128-bit loads) into an output poisoned with NaN, compared
   with torch.mm in float64 (max |C - C_ref| / max |C_ref| <= 1e-5).
2. **4096^3.** cuBLAS (torch.mm, TF32 off) and every valid variant, launched
   directly on the same inputs (kernel time: CUDA events around batches of
   back-to-back launches, benchmarks/sgemm.py's time_ms), in turns over 3
   rounds, median of the rounds.
3. **The best three** again at 2048^3 and 8192^3, with the baseline (level 6
   as it is: two steps per pass, no cap) and cuBLAS in the same turns.

**--interior** instead compares, at 4096^3 and 8192^3, the fastest tiles of
levels 6 and 7 (sgemm_level7-h100-2026-11-25.json) built with and without edge
checks on their loads (sgemm's `interior` kernels, which a product the tiles
cover exactly gets), validated on 1024^3 (which the tiles cover) against
float64, and writes DIR/sgemm_interior-<gpu-slug>-<YYYY-MM-DD>.json.

Writes DIR/sgemm_unroll-<gpu-slug>-<YYYY-MM-DD>.json: rows of variant, level,
config, unroll, max_registers, registers_per_thread, m, n, k, ms, tflops,
vs_cublas. Needs an NVIDIA GPU and torch with CUDA; about two minutes on an H100.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import asdict

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 calls np.row_stack, which numpy 2.5 removed
    np.row_stack = np.vstack

from _common import benchmark_parser, record_start, start, versions, write_record  # noqa: E402
from sgemm_level7 import _need_a_gpu, relative_error  # noqa: E402 (benchmarks/ on the path)

VALIDATION_SHAPE = (1000, 1028, 780)
SWEEP_SHAPE = (4096, 4096, 4096)
FINALIST_SHAPES = [(2048, 2048, 2048), (8192, 8192, 8192)]
FINALISTS = 3
ROUNDS = 3
WRONG_ABOVE = 1e-5


def variants(sgemm) -> list[dict]:
    """(name, level, config, unroll, max_registers) of every variant tried: level 6's
    tuned tiles and three other tile shapes, level 7's best three of its sweep."""
    tile, warp = sgemm.TileConfig, sgemm.WarpTileConfig
    tuned = tile(64, 256, 16, 8, 8)
    found = [("6", tuned, sgemm.DOT_UNROLL, None),  # the baseline: level 6 as it is
             ("6", tuned, 16, 128), ("6", tuned, 16, None), ("6", tuned, 8, 128),
             ("6", tile(128, 256, 16, 16, 8), 16, None), ("6", tile(128, 256, 16, 16, 8), 2, None),
             ("6", tile(128, 128, 16, 8, 8), 16, 128), ("6", tile(128, 128, 8, 8, 8), 8, 128),
             ("6", tile(64, 128, 16, 8, 4), 16, 255),
             ("7", warp(128, 128, 16, 64, 32, 2, 8, 4, 256), 16, 128),
             ("7", warp(128, 128, 16, 64, 32, 2, 8, 4, 256), 2, None),
             ("7", warp(128, 128, 16, 64, 64, 2, 8, 4, 128), 16, None),
             ("7", warp(64, 256, 16, 32, 64, 2, 8, 4, 256), 16, 128)]
    return [{"level": level, "config": config, "unroll": unroll, "max_registers": cap,
             "variant": f"L{level} {'x'.join(str(v) for v in asdict(config).values())} "
                        f"u{unroll}" + (f" r{cap}" if cap else "")}
            for level, config, unroll, cap in found]


def interior_variants(sgemm) -> list[dict]:
    """Level 6's tuned tiles and level 7's best two, each with and without edge
    checks (the module's unroll and register cap)."""
    tile, warp = sgemm.TileConfig, sgemm.WarpTileConfig
    found = [("6", tile(128, 256, 16, 16, 8)), ("7", warp(128, 256, 16, 64, 64, 4, 8, 4, 256)),
             ("7", warp(128, 256, 16, 64, 64, 2, 8, 4, 256))]
    return [{"level": level, "config": config, "unroll": None, "max_registers": "auto",
             "interior": interior,
             "variant": f"L{level} {'x'.join(str(v) for v in asdict(config).values())}"
                        + (" interior" if interior else " checked")}
            for level, config in found for interior in (False, True)]


def build(sgemm, variant):
    make = sgemm._make_warp_tiled_kernel if variant["level"] == "7" else sgemm._make_vectorized_kernel
    return make(variant["config"], True, unroll=variant["unroll"],
                max_registers=variant["max_registers"], interior=variant.get("interior", False))


def launcher(sgemm, torch, kernel, config, a, b, out):
    m, k = a.shape
    n = b.shape[1]
    grid, block = (-(-n // config.bn), -(-m // config.bm)), (config.threads,)
    a_dev, b_dev, c_dev = (sgemm.cuda.as_cuda_array(x) for x in (a, b, out))
    return lambda: kernel[grid, block](a_dev, b_dev, c_dev)


def inputs(torch, shape, seed):
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(m, k, device="cuda", generator=generator),
            torch.randn(k, n, device="cuda", generator=generator))


def time_shape(sgemm, torch, time_ms, shape, chosen) -> list[dict]:
    """cuBLAS and each chosen variant at `shape`, in turns over ROUNDS rounds."""
    m, n, k = shape
    a, b = inputs(torch, shape, 11)
    reference = torch.mm(a, b)
    launches = {"cublas": lambda out=torch.empty_like(reference): torch.mm(a, b, out=out)}
    outs = {}
    for v in chosen:
        outs[v["variant"]] = torch.empty_like(reference)
        launches[v["variant"]] = launcher(sgemm, torch, v["kernel"], v["config"], a, b,
                                          outs[v["variant"]])
    samples = {name: [] for name in launches}
    for _ in range(ROUNDS):
        for name, launch in launches.items():
            samples[name].append(time_ms(launch)[0])
    cublas_ms = float(np.median(samples["cublas"]))
    rows = [{"variant": "cublas", "m": m, "n": n, "k": k, "ms": cublas_ms,
             "tflops": 2 * m * n * k / (cublas_ms * 1e-3) / 1e12, "vs_cublas": 1.0}]
    for v in chosen:
        ms = float(np.median(samples[v["variant"]]))
        rows.append({"variant": v["variant"], "level": v["level"], "config": asdict(v["config"]),
                     "unroll": v["unroll"], "max_registers": v["max_registers"],
                     "interior": v.get("interior", False),
                     "registers_per_thread": v.get("registers_per_thread"),
                     "m": m, "n": n, "k": k, "ms": ms,
                     "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12, "vs_cublas": cublas_ms / ms,
                     "max_rel_err": relative_error(outs[v["variant"]], reference.double())})
    for row in sorted(rows, key=lambda r: r["ms"]):
        print(f"{m}x{n}x{k} {row['variant']:<42} {row['ms']:8.3f} ms {row['tflops']:6.2f} "
              f"TFLOP/s {row['vs_cublas']:6.1%}  {row.get('registers_per_thread') or ''}",
              flush=True)
    return rows


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--interior", action="store_true",
                        help="kernels with and without edge checks (see the module's notes)")
    args, started = start(parser, argv, check_gpu=_need_a_gpu)

    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm

    # 1. Validation.
    a, b = inputs(torch, (1024, 1024, 1024) if args.interior else VALIDATION_SHAPE, 5)
    reference = a.double() @ b.double()
    tried, valid = (interior_variants if args.interior else variants)(sgemm), []
    for v in tried:
        try:
            v["kernel"] = build(sgemm, v)
            out = torch.full(reference.shape, float("nan"), device="cuda")
            launcher(sgemm, torch, v["kernel"], v["config"], a, b, out)()
            torch.cuda.synchronize()
            v["max_rel_err"] = relative_error(out, reference)
            registers = v["kernel"].get_regs_per_thread()
            v["registers_per_thread"] = int(max(registers.values()) if isinstance(registers, dict)
                                            else registers)
            local = v["kernel"].get_local_mem_per_thread()
            v["local_bytes_per_thread"] = int(max(local.values()) if isinstance(local, dict)
                                              else local)
            v["passed"] = v["max_rel_err"] <= WRONG_ABOVE
        except Exception as error:
            v["passed"], v["failure"] = False, f"{type(error).__name__}: {error}"
            traceback.print_exc(limit=3)
        print(f"validate {v['variant']:<42} {v.get('max_rel_err', float('nan')):.1e} "
              f"{'ok' if v['passed'] else 'FAILED'} regs {v.get('registers_per_thread')} "
              f"local {v.get('local_bytes_per_thread')}", flush=True)
        if v["passed"]:
            valid.append(v)

    # 2. All at 4096^3; 3. the best three and the baseline at the other shapes
    # (with --interior: all of them at 8192^3).
    rows = time_shape(sgemm, torch, time_ms, SWEEP_SHAPE, valid)
    ranked = sorted((r for r in rows if r["variant"] != "cublas"), key=lambda r: r["ms"])
    best = [r["variant"] for r in ranked[:FINALISTS]]
    finalists = [v for i, v in enumerate(valid) if i == 0 or v["variant"] in best]
    for shape in [(8192, 8192, 8192)] if args.interior else FINALIST_SHAPES:
        rows += time_shape(sgemm, torch, time_ms, shape, valid if args.interior else finalists)

    gpu = sgemm.gpu_model()
    record = record_start(
        "sgemm_interior" if args.interior else "sgemm_unroll", gpu, versions(),
        ("kernels launched directly on CUDA torch tensors (kernel time), timed with "
         "benchmarks/sgemm.py's time_ms (CUDA events around back-to-back launches "
         f"covering >= 20 ms, warm-up, median of 10), in turns over {ROUNDS} rounds "
         "with torch.mm (cuBLAS, TF32 off), median; N(0,1) inputs"),
        validation=[{k: v[k] for k in ("variant", "passed", "max_rel_err", "registers_per_thread",
                                       "local_bytes_per_thread", "failure") if k in v}
                    for v in tried],
        results=rows, seconds=time.perf_counter() - started)
    path = write_record(record, args.out)
    print(f"{gpu}: wrote {path} in {record['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
