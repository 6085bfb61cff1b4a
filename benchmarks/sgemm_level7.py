"""Level 7 of gpucourse.kernels.sgemm (warp tiling) against level 6 and cuBLAS, on a real GPU.

    PYTHONPATH=src python3 benchmarks/sgemm_level7.py [--quick] [--out DIR]

1. **Validation.** Every configuration of sgemm.WARP_TILE_CANDIDATES computes
   two ragged products, 1000 x 1030 x 777 (rows not a multiple of 4: the
   scalar loads) and 1000 x 1028 x 780 (the 128-bit loads; no size a multiple
   of a tile), into an output poisoned with NaN, and is compared with
   torch.mm in float64. A candidate that fails to compile or to match (max
   |C - C_ref| / max |C_ref| above 1e-5, or a NaN) is reported and left out
   of the timings; the others go on.
2. **The sweep at 4096^3.** cuBLAS (torch.mm, TF32 off), level 6 (its tuned
   tiles) and every valid candidate, each called as a user calls
   sgemm.matmul on CUDA torch tensors (with `out=`, so nothing is allocated),
   timed with benchmarks/sgemm.py's time_ms (CUDA events around batches of
   back-to-back calls covering ~20 ms, warm-up first, median of 10), the
   variants taking turns over 3 rounds, median of the rounds.
3. **The best three** of step 2 again, with cuBLAS and level 6 in the same
   turns, at 8192^3, 2048^3 and 1024 x 8192 x 1024. Before that, the fastest
   is timed at 4096^3 with its dot-product loop written out 1, 2 and 4 steps
   per pass (sgemm.DOT_UNROLL, which level 6's measurements chose), in turns
   with cuBLAS ("unroll_probe" in the results file).

It prints a table (TFLOP/s and share of cuBLAS per shape) and writes
DIR/sgemm_level7-<gpu-slug>-<YYYY-MM-DD>.json in the shape of CONVENTIONS.md:
rows of variant (cublas, level6, level7), m, n, k, ms, tflops, vs_cublas,
max_rel_err and config, plus the validation and each candidate's registers,
shared and local memory. With --quick: 4096^3 and the first three
candidates only, written as ...-quick.json (a smoke test). Needs an NVIDIA
GPU, torch with CUDA, numba and numba-cuda; about two minutes on an H100.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import numpy as np

# numba-cuda 0.30 calls np.row_stack, which numpy 2.5 removed (as gpucourse.device does).
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from _common import (benchmark_parser, need_a_gpu, record_start, start,  # noqa: E402
                     versions, write_record)

VALIDATION_SHAPES = [(1000, 1030, 777), (1000, 1028, 780)]
SWEEP_SHAPE = (4096, 4096, 4096)
FINALIST_SHAPES = [(8192, 8192, 8192), (2048, 2048, 2048), (1024, 8192, 1024)]
FINALISTS = 3
ROUNDS = 3
WRONG_ABOVE = 1e-5  # max |C - C_ref| / max |C_ref| against float64
BUDGET_S = 210.0  # shapes still waiting after this long are skipped (the run must stay < 4 min)


def _need_a_gpu() -> None:
    need_a_gpu("benchmarks/sgemm_level7.py", "the simulator's timings would mean nothing. The "
               "level-7 tests run without one: pytest tests/test_sgemm_level7.py")


def label(config) -> str:
    """A configuration in one short line: block / warp / passes across / patch / threads."""
    return (f"{config.bm}x{config.bn}x{config.bk} w{config.wm}x{config.wn} "
            f"it{config.wm_iter}x{config.wn_iter} t{config.tm}x{config.tn} {config.threads}th")


def relative_error(c, reference) -> float:
    scale = float(reference.abs().max()) or 1.0
    error = float((c.double() - reference).abs().max()) / scale
    return error if np.isfinite(error) else float("inf")


def validate(sgemm, torch, config) -> dict:
    """Level 7 with `config` on the ragged VALIDATION_SHAPES against torch.mm in
    float64: {"config", "passed", "errors": [...], "failure": reason or None}."""
    report = {"config": asdict(config), "passed": False, "errors": [], "failure": None}
    try:
        for m, n, k in VALIDATION_SHAPES:
            generator = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
            a = torch.randn(m, k, device="cuda", generator=generator)
            b = torch.randn(k, n, device="cuda", generator=generator)
            out = torch.full((m, n), float("nan"), device="cuda")  # every element must be written
            sgemm.matmul(a, b, "7", config=config, out=out)
            torch.cuda.synchronize()
            error = relative_error(out, a.double() @ b.double())
            report["errors"].append({"m": m, "n": n, "k": k, "max_rel_err": error})
            if not error <= WRONG_ABOVE:
                report["failure"] = (f"{m}x{n}x{k}: max_rel_err {error:.2e} above {WRONG_ABOVE:g}"
                                     + (" (NaN or Inf in the result)" if error == float("inf")
                                        else ""))
                return report
        report["passed"] = True
    except Exception as error:  # a candidate that does not compile or launch is skipped
        report["failure"] = f"{type(error).__name__}: {error}"
        traceback.print_exc(limit=3)
    return report


def resources(sgemm, config) -> dict:
    """Registers, shared and local memory of level 7's kernel for `config`, from
    Numba's compile report (compiled by validate already)."""
    # The kernel with edge checks and 128-bit loads (validate ran it on the
    # second shape); a product its tiles cover exactly takes the same kernel
    # without the checks (sgemm.kernel_for), compiled when first timed.
    kernel = sgemm._tiled_kernel("7", config, True)

    def first(value):
        return int(max(value.values()) if isinstance(value, dict) else value)

    try:
        return {"registers_per_thread": first(kernel.get_regs_per_thread()),
                "shared_bytes_per_block": first(kernel.get_shared_mem_per_block()),
                "local_bytes_per_thread": first(kernel.get_local_mem_per_thread())}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def time_shape(sgemm, torch, time_ms, shape, configs) -> list[dict]:
    """Rows for cuBLAS, level 6 and level 7 with each of `configs` at `shape`,
    timed in turns over ROUNDS rounds (median); each checked against cuBLAS
    first (a wrong or failing variant is reported, with ms None)."""
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = torch.randn(m, k, device="cuda", generator=generator)
    b = torch.randn(k, n, device="cuda", generator=generator)
    reference = torch.mm(a, b)
    variants = [("cublas", None, lambda out: torch.mm(a, b, out=out)),
                ("level6", sgemm.tuned_config(), lambda out: sgemm.matmul(a, b, 6, out=out))]
    for config in configs:
        variants.append(("level7", config,
                         lambda out, config=config: sgemm.matmul(a, b, "7", config=config,
                                                                 out=out)))
    calls, rows = [], []
    for name, config, call in variants:
        out = torch.full((m, n), float("nan"), device="cuda")
        row = {"variant": name, "m": m, "n": n, "k": k, "ms": None, "tflops": None,
               "vs_cublas": None, "max_rel_err": None,
               "config": asdict(config) if config is not None else None}
        try:
            call(out)
            torch.cuda.synchronize()
            row["max_rel_err"] = relative_error(out, reference)
            if name != "cublas" and not row["max_rel_err"] <= 1e-4:
                row["failed"] = f"max_rel_err {row['max_rel_err']:.2e} against cuBLAS"
        except Exception as error:
            row["failed"] = f"{type(error).__name__}: {error}"
        rows.append(row)
        calls.append(None if "failed" in row else (lambda call=call, out=out: call(out)))
    samples = [[] for _ in rows]
    for _ in range(ROUNDS):
        for i, call in enumerate(calls):
            if call is not None:
                samples[i].append(time_ms(call)[0])
    flops = 2 * m * n * k
    for row, times in zip(rows, samples):
        if times:
            row["ms"] = float(np.median(times))
            row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
    cublas_ms = rows[0]["ms"]
    for row in rows:
        if row["ms"] and cublas_ms:
            row["vs_cublas"] = cublas_ms / row["ms"]
    return rows


def unroll_probe(sgemm, torch, time_ms, config, shape) -> list[dict]:
    """The fastest candidate's kernel with its dot loop written out 1, 2 and 4
    steps per pass (sgemm.DOT_UNROLL, chosen for level 6), launched directly
    and timed in turns with cuBLAS over ROUNDS rounds: rows of unroll, ms,
    tflops, vs_cublas, registers_per_thread and max_rel_err (or failed)."""
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(m, k, device="cuda", generator=generator)
    b = torch.randn(k, n, device="cuda", generator=generator)
    reference = torch.mm(a, b)
    cublas_out = torch.empty_like(reference)
    a_dev, b_dev = sgemm.cuda.as_cuda_array(a), sgemm.cuda.as_cuda_array(b)
    grid, block = (-(-n // config.bn), -(-m // config.bm)), (config.threads,)
    rows, launches = [], {"cublas": lambda: torch.mm(a, b, out=cublas_out)}
    for unroll in (1, 2, 4):
        row = {"unroll": unroll, "config": asdict(config)}
        rows.append(row)
        if config.bk % unroll:
            row["failed"] = f"bk={config.bk} is not a multiple of {unroll}"
            continue
        try:
            kernel = sgemm._make_warp_tiled_kernel(config, True, unroll)
            out = torch.full((m, n), float("nan"), device="cuda")
            c_dev = sgemm.cuda.as_cuda_array(out)
            kernel[grid, block](a_dev, b_dev, c_dev)
            torch.cuda.synchronize()
            row["max_rel_err"] = relative_error(out, reference)
            try:
                registers = kernel.get_regs_per_thread()
                row["registers_per_thread"] = int(max(registers.values()) if isinstance(
                    registers, dict) else registers)
            except Exception:  # nice to have
                row["registers_per_thread"] = None
            if not row["max_rel_err"] <= 1e-4:
                row["failed"] = f"max_rel_err {row['max_rel_err']:.2e} against cuBLAS"
                continue
            launches[unroll] = (lambda kernel=kernel, c_dev=c_dev:
                                kernel[grid, block](a_dev, b_dev, c_dev))
        except Exception as error:
            row["failed"] = f"{type(error).__name__}: {error}"
    samples = {name: [] for name in launches}
    for _ in range(ROUNDS):
        for name, launch in launches.items():
            samples[name].append(time_ms(launch)[0])
    cublas_ms = float(np.median(samples["cublas"]))
    for row in rows:
        if row["unroll"] in samples:
            row["ms"] = float(np.median(samples[row["unroll"]]))
            row["tflops"] = 2 * m * n * k / (row["ms"] * 1e-3) / 1e12
            row["vs_cublas"] = cublas_ms / row["ms"]
        shown = (f"{row['tflops']:.2f} TFLOP/s, {row['vs_cublas']:.1%} of cuBLAS, "
                 f"{row['registers_per_thread']} registers" if "ms" in row
                 else f"failed: {row.get('failed')}")
        print(f"dot loop {row['unroll']} step(s) per pass, {label(config)}: {shown}", flush=True)
    return rows


def print_table(rows) -> None:
    print(f"\n{'shape':>16}  {'variant':<7} {'configuration':<40} {'ms':>8} {'TFLOP/s':>8} "
          f"{'of cuBLAS':>9}")
    for r in rows:
        config = ""
        if r["variant"] == "level7":
            from gpucourse.kernels.sgemm import WarpTileConfig

            config = label(WarpTileConfig(**r["config"]))
        elif r["variant"] == "level6" and r["config"]:
            c = r["config"]
            config = f"{c['bm']}x{c['bn']}x{c['bk']} t{c['tm']}x{c['tn']}"
        shape = f"{r['m']}x{r['n']}x{r['k']}"
        if r["ms"] is None:
            print(f"{shape:>16}  {r['variant']:<7} {config:<40} failed: {r.get('failed')}")
            continue
        share = f"{r['vs_cublas']:.1%}" if r["vs_cublas"] else "-"
        print(f"{shape:>16}  {r['variant']:<7} {config:<40} {r['ms']:8.3f} {r['tflops']:8.2f} "
              f"{share:>9}")


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="4096^3 and the first three candidates only (a smoke test)")
    args, started = start(parser, argv, check_gpu=_need_a_gpu)

    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    candidates = list(sgemm.WARP_TILE_CANDIDATES[:3] if args.quick else sgemm.WARP_TILE_CANDIDATES)

    # 1. Validation on ragged shapes.
    validation, valid = [], []
    for config in candidates:
        report = validate(sgemm, torch, config)
        if report["passed"]:
            report["resources"] = resources(sgemm, config)
            valid.append(config)
        validation.append(report)
        status = "ok" if report["passed"] else f"FAILED ({report['failure']})"
        worst = max((e["max_rel_err"] for e in report["errors"]), default=float("nan"))
        print(f"validate {label(config):<40} max_rel_err {worst:.1e}  {status}  "
              f"{report.get('resources', '')}", flush=True)
    if not valid:
        print("no level-7 candidate passed validation; nothing to time")

    # 2. Every valid candidate at 4096^3; 3. the best three at the other shapes.
    rows = time_shape(sgemm, torch, time_ms, SWEEP_SHAPE, valid) if valid else []
    print_table(rows)
    timed = sorted((r for r in rows if r["variant"] == "level7" and r["ms"]),
                   key=lambda r: r["ms"])
    finalists = [sgemm.WarpTileConfig(**r["config"]) for r in timed[:FINALISTS]]
    # 2b. The fastest one with its dot loop written out 1, 2 and 4 steps per pass.
    probe = []
    if finalists and not args.quick:
        try:
            probe = unroll_probe(sgemm, torch, time_ms, finalists[0], SWEEP_SHAPE)
        except Exception as error:  # the probe is extra information, never fatal
            probe = [{"failed": f"{type(error).__name__}: {error}"}]
            traceback.print_exc(limit=3)
    skipped = []
    for shape in ([] if args.quick else FINALIST_SHAPES):
        if not finalists:
            break
        if time.perf_counter() - started > BUDGET_S:
            skipped.append(list(shape))
            print(f"{shape}: skipped, the run has used its {BUDGET_S:.0f} s")
            continue
        shape_rows = time_shape(sgemm, torch, time_ms, shape, finalists)
        print_table(shape_rows)
        rows += shape_rows

    gpu = sgemm.gpu_model()
    record = record_start(
        "sgemm_level7", gpu, versions(),
        (f"sgemm.matmul on CUDA torch tensors with out= (cuBLAS: torch.mm(out=)), "
         f"timed with benchmarks/sgemm.py's time_ms (CUDA events around back-to-back "
         f"calls covering >= 20 ms, warm-up, median of 10), variants in turns over "
         f"{ROUNDS} rounds, median; TF32 off; N(0,1) inputs; max_rel_err = "
         f"max|C - C_cublas| / max|C_cublas| (validation: against float64)"),
        dot_unroll=sgemm.DOT_UNROLL, candidates=[asdict(c) for c in candidates],
        validation=validation, finalists=[asdict(c) for c in finalists], unroll_probe=probe,
        skipped_shapes=skipped, results=rows, seconds=round(time.perf_counter() - started, 1))
    path = write_record(record, out_dir, "-quick" if args.quick else "")

    print(f"\n{gpu}: wrote {path} in {record['seconds']:.0f} s")
    for shape in [SWEEP_SHAPE] + FINALIST_SHAPES:
        here = [r for r in rows if (r["m"], r["n"], r["k"]) == shape and r["vs_cublas"]]
        best = max((r for r in here if r["variant"] == "level7"), key=lambda r: r["tflops"],
                   default=None)
        level6 = next((r for r in here if r["variant"] == "level6"), None)
        if best is None:
            continue
        against = f", level 6 {level6['vs_cublas']:.1%}" if level6 else ""
        print(f"{'x'.join(map(str, shape)):>16}: best level 7 {best['vs_cublas']:.1%} of cuBLAS "
              f"({label(sgemm.WarpTileConfig(**best['config']))}){against}")
    failed = [v for v in validation if not v["passed"]]
    if failed:
        print(f"{len(failed)} of {len(candidates)} candidates failed validation (see above)")
    return 0 if valid else 1


if __name__ == "__main__":
    sys.exit(main())
