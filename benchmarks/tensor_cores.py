"""Tensor cores from Numba: tensor_cores.hgemm and tf32gemm beside cuBLAS and the course's SGEMM.

    PYTHONPATH=src python3 benchmarks/tensor_cores.py [--quick] [--out DIR]

`hgemm(a, b, level)` multiplies fp16 matrices with the warp-wide
mma.sync.m16n8k16 instruction (fp32 sums, fp32 result), written from Numba
through an LLVM intrinsic. Level 1 is the plainest kernel on it (one warp per
block and per 16 x 8 tile of C, fragments loaded straight from global
memory); level 2 shares 64 x 32 and 32 x 64 tiles of A and B in shared memory
among a block's four warps. hgemm takes numpy arrays only, so each level is
timed twice:

* `hgemm<level>_numpy`: `hgemm(a, b, level)` as a user calls it, numpy fp16 in
  and numpy fp32 out: the copies of A and B (and level 1's fragment places)
  to the GPU, the launch and the copy of C back are all in the time;
* `hgemm<level>_kernel`: the kernel alone (tensor_cores._launch), launched on
  CUDA torch tensors seen as Numba device arrays, prepared once: what the
  tensor cores and the kernel's memory traffic cost.

Beside them, on the same values: `cublas_fp16`, torch.mm on fp16 CUDA tensors
(cuBLAS on tensor cores, fp16 result, reduced-precision reductions off),
`cublas_fp16_f32out`, the same with an fp32 result (torch.mm(out_dtype=
torch.float32), where this torch has it), `cublas_fp32`, torch.mm in fp32 with
TF32 off (cuBLAS on the CUDA cores), and `sgemm`, the course's fp32 SGEMM
gpucourse.kernels.sgemm.matmul at its default level ("auto") on CUDA torch
tensors with out=. The fp32 variants get the fp16 values converted to fp32,
so every variant but the TF32 ones computes the same product.

`tf32gemm(a, b, passes)` multiplies fp32 matrices on the tensor cores with the
TF32 instruction mma.sync.m16n8k8 (hgemm level 2's structure): passes 1 is
plain TF32, passes 3 is 3xTF32 (each input split into a big and a small TF32
part, three products, about fp32's accuracy). Each is timed as a kernel alone,
`tf32gemm<passes>_kernel` (tensor_cores._launch_tf32 on device arrays
prepared once), on fp32 N(0,1) values that are not rounded to fp16 (fp16
values are exact in TF32 and would hide its rounding), beside `cublas_tf32`,
torch.mm on the same values with TF32 allowed for that call (cuBLAS on tensor
cores), and compared with their own float64 product.

1. **Validation.** hgemm at each level against numpy in float64 at
   16 x 8 x 16, 256 x 128 x 512 and 1024^3, and level 2 (which takes any
   sizes) also at the ragged 1000 x 1030 x 777 and 17 x 9 x 33: max |C - C_ref|
   and max |C - C_ref| / max |C_ref|, passed when within rtol 1e-4 and atol
   1e-3 (the tolerance of tests/test_tensor_cores.py's GPU test). tf32gemm
   with 1 and 3 passes against float64 on fp32 N(0,1) inputs at 256 x 256 x
   512, 1000 x 1030 x 777 and 17 x 9 x 33, passed when max |C - C_ref| /
   max |C_ref| is within 2e-3 (1 pass) or 1e-5 (3 passes), the bounds of
   tests/test_tensor_cores.py's GPU test.
2. **Timing** at 4096^3, 2048^3 and 1024^3: all variants in turns over
   ROUNDS rounds, each round timing each variant with benchmarks/sgemm.py's
   time_ms (CUDA events around batches of back-to-back calls covering
   ~20 ms, warm-up first, median of 10), the median of the rounds. An hgemm
   or tf32gemm variant whose one call takes more than SLOW_CALL_S (1 s) is not
   timed at that size; sizes still waiting after BUDGET_S (75 s) are skipped. Each
   variant's output at each size (its `out` poisoned with NaN first, where it
   has one) is compared with torch.mm in float64 (of the fp16 values, or of
   the fp32 values for the TF32 variants).

Writes DIR/tensor_cores-<gpu-slug>-<YYYY-MM-DD>.json (CONVENTIONS.md's shape:
rows of variant, m, n, k, ms, tflops, plus max_rel_err, max_abs_err, passed,
vs_cublas_fp16 and vs_cublas_fp32; the validation, each kernel's registers and
shared memory, what was skipped). --quick: 4096^3 only, written as
...-quick.json. About a minute on an H100 (the first calls compile; 39 s on
2026-11-26, the first run with the TF32 rows).

    PYTHONPATH=src GPUCOURSE_DEVICE=sim python3 benchmarks/tensor_cores.py --dry-run

runs the same code on Numba's simulator and torch on the CPU at tiny sizes,
wall-clock timed (numbers that mean nothing), writing ...-quick.json to a
temporary folder unless --out is given: a check of the script, not a
measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

# numba-cuda 0.30 calls np.row_stack, which numpy 2.5 removed (as gpucourse.device does).
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from _common import (RESULTS, need_a_gpu, record_start, tf32_off, versions,  # noqa: E402
                     write_record)

SIZES = [4096, 2048, 1024]  # the largest first, so that the time budget never cuts it
QUICK_SIZES = [4096]
DRY_SIZES = [32, 16]
LEVELS = (1, 2)
# (m, n, k) for validation; RAGGED only for level 2 (level 1 needs multiples of 16, 8, 16).
VALIDATION_SHAPES = [(16, 8, 16), (256, 128, 512), (1024, 1024, 1024)]
RAGGED_SHAPES = [(1000, 1030, 777), (17, 9, 33)]
DRY_VALIDATION_SHAPES = [(16, 8, 16)]
DRY_RAGGED_SHAPES = [(17, 9, 33)]
RTOL, ATOL = 1e-4, 1e-3  # validation, as the GPU test of tests/test_tensor_cores.py
PASSES = (1, 3)  # tf32gemm: plain TF32 and 3xTF32
TF32_VALIDATION_SHAPES = [(256, 256, 512), (1000, 1030, 777), (17, 9, 33)]
DRY_TF32_VALIDATION_SHAPES = [(17, 9, 33)]
TF32_BOUND = {1: 2e-3, 3: 1e-5}  # validation, max_rel_err, as tests/test_tensor_cores.py's GPU test
# timing sizes: max_rel_err above which a result counts as wrong, by precision
WRONG_ABOVE = {"fp32": 1e-4, "fp16": 2e-3, "tf32": 2e-3}
ROUNDS = 3
SLOW_CALL_S = 1.0  # an hgemm or tf32gemm variant slower than this per call: not timed there
BUDGET_S = 75.0  # sizes still waiting after this long are skipped (the run must stay < 90 s)

VARIANTS = {
    "hgemm1_numpy": "tensor_cores.hgemm(a, b, level=1) on numpy fp16 arrays, fp32 numpy result: "
                    "copies to and from the GPU included",
    "hgemm1_kernel": "level 1's kernel alone on device arrays prepared once (fp16 in, fp32 out)",
    "hgemm2_numpy": "tensor_cores.hgemm(a, b, level=2) on numpy fp16 arrays, fp32 numpy result: "
                    "copies to and from the GPU included",
    "hgemm2_kernel": "level 2's kernel alone on device arrays prepared once (fp16 in, fp32 out)",
    "tf32gemm1_kernel": "tensor_cores.tf32gemm's kernel alone, passes=1 (plain TF32), on "
                        "device arrays prepared once (fp32 in and out; fp32 N(0,1) inputs, not "
                        "fp16 values)",
    "tf32gemm3_kernel": "tensor_cores.tf32gemm's kernel alone, passes=3 (3xTF32), on "
                        "device arrays prepared once (fp32 in and out; fp32 N(0,1) inputs, not "
                        "fp16 values)",
    "cublas_tf32": "torch.mm on the TF32 variants' fp32 CUDA tensors with out=, TF32 allowed for "
                   "this call (cuBLAS on tensor cores)",
    "cublas_fp16": "torch.mm on fp16 CUDA tensors with out= (cuBLAS, tensor cores, fp16 result, "
                   "reduced-precision reductions off)",
    "cublas_fp16_f32out": "torch.mm(a, b, out_dtype=torch.float32) on fp16 CUDA tensors "
                          "(cuBLAS, tensor cores, fp32 result like hgemm's)",
    "cublas_fp32": "torch.mm on fp32 CUDA tensors with out=, TF32 off (cuBLAS on CUDA cores)",
    "sgemm": "gpucourse.kernels.sgemm.matmul(a, b, out=c) on fp32 CUDA tensors, default level "
             "('auto')",
}
FP16_OUTPUT = {"cublas_fp16"}
TF32_OUTPUT = {"tf32gemm1_kernel", "cublas_tf32"}  # TF32 accuracy
FP32_INPUTS = {"tf32gemm1_kernel", "tf32gemm3_kernel", "cublas_tf32"}  # the unrounded fp32 values


def errors(c, reference) -> tuple[float, float]:
    """(max |C - C_ref|, max |C - C_ref| / max |C_ref|), both inf when C holds a NaN or Inf."""
    c, reference = np.asarray(c, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    diff = float(np.abs(c - reference).max())
    if not np.isfinite(diff) or not np.isfinite(c).all():
        return float("inf"), float("inf")
    return diff, diff / (float(np.abs(reference).max()) or 1.0)


def validate_case(label, row, dtype, compute, passed, bound=None) -> dict:
    """One validation case: N(0,1) inputs of `dtype` for row's m x k and k x n,
    C = compute(a, b) against numpy in float64; row gains max_abs_err,
    max_rel_err, passed (passed(c, reference, row); or failed: the exception)
    and seconds, and a line is printed (with `bound`, the error's bound)."""
    m, n, k = row["m"], row["n"], row["k"]
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    started = time.perf_counter()
    try:
        c = compute(a, b)
        reference = a.astype(np.float64) @ b.astype(np.float64)
        row["max_abs_err"], row["max_rel_err"] = errors(c, reference)
        row["passed"] = bool(passed(c, reference, row))
    except Exception as error:  # reported, and the run goes on
        row["passed"], row["failed"] = False, f"{type(error).__name__}: {error}"
        traceback.print_exc(limit=3)
    row["seconds"] = round(time.perf_counter() - started, 2)
    if "max_rel_err" in row:
        shown = (f"max_rel_err {row['max_rel_err']:.1e} (bound {bound:g})" if bound is not None
                 else f"max_rel_err {row['max_rel_err']:.1e}, max_abs_err {row['max_abs_err']:.1e}")
    else:
        shown = row.get("failed")
    print(f"validate {label} {m}x{n}x{k}: {shown}  {'ok' if row['passed'] else 'FAILED'}  "
          f"({row['seconds']} s)", flush=True)
    return row


def validate(TC, dry_run) -> list[dict]:
    """hgemm at each level on VALIDATION_SHAPES (level 2 also RAGGED_SHAPES)
    against numpy in float64: rows of level, m, n, k, max_abs_err,
    max_rel_err, passed (or failed: the exception)."""
    shapes = DRY_VALIDATION_SHAPES if dry_run else VALIDATION_SHAPES
    ragged = DRY_RAGGED_SHAPES if dry_run else RAGGED_SHAPES
    return [validate_case(f"hgemm level {level}", {"level": level, "m": m, "n": n, "k": k},
                          np.float16, lambda a, b, level=level: TC.hgemm(a, b, level=level),
                          lambda c, reference, row: np.isfinite(c).all()
                          and np.allclose(c, reference, rtol=RTOL, atol=ATOL))
            for level in LEVELS for m, n, k in shapes + (ragged if level == 2 else [])]


def validate_tf32(TC, dry_run) -> list[dict]:
    """tf32gemm with 1 and 3 passes on TF32_VALIDATION_SHAPES against numpy in
    float64, on fp32 N(0,1) inputs: rows of passes, m, n, k, max_abs_err,
    max_rel_err, passed (within TF32_BOUND; or failed: the exception)."""
    shapes = DRY_TF32_VALIDATION_SHAPES if dry_run else TF32_VALIDATION_SHAPES
    return [validate_case(f"tf32gemm passes {passes}",
                          {"passes": passes, "m": m, "n": n, "k": k}, np.float32,
                          lambda a, b, passes=passes: TC.tf32gemm(a, b, passes=passes),
                          lambda c, reference, row, passes=passes:
                          row["max_rel_err"] <= TF32_BOUND[passes], TF32_BOUND[passes])
            for passes in PASSES for m, n, k in shapes]


def resources(TC) -> dict:
    """Registers, shared and local memory of each kernel (hgemm's levels,
    tf32gemm's passes), from Numba's compile report (compiled by the
    validation already); an error string where there is none (the simulator)."""
    found = {}
    kernels = [("level1", TC._hgemm_kernel), ("level2", TC._hgemm_shared_kernel)] + [
        (f"tf32gemm_passes{passes}", TC._TF32GEMM_KERNELS[passes]) for passes in PASSES]
    for name, kernel in kernels:
        def first(value):
            return int(max(value.values()) if isinstance(value, dict) else value)

        try:
            found[name] = {
                "registers_per_thread": first(kernel.get_regs_per_thread()),
                "shared_bytes_per_block": first(kernel.get_shared_mem_per_block()),
                "local_bytes_per_thread": first(kernel.get_local_mem_per_thread())}
        except Exception as error:
            found[name] = {"error": f"{type(error).__name__}: {error}"}
    return found


class Shape:
    """The inputs of one size, on the GPU (CUDA torch tensors) or, for a dry
    run, on the CPU (torch CPU tensors and numpy arrays), and each variant's
    call and result."""

    def __init__(self, torch, TC, sgemm, size, dry_run):
        self.torch, self.TC, self.sgemm, self.dry_run = torch, TC, sgemm, dry_run
        self.m = self.n = self.k = size
        device = "cpu" if dry_run else "cuda"
        generator = torch.Generator(device=device).manual_seed(size)
        self.a16 = torch.randn(size, size, device=device, generator=generator).half()
        self.b16 = torch.randn(size, size, device=device, generator=generator).half()
        self.a32, self.b32 = self.a16.float(), self.b16.float()  # the same values in fp32
        self.a_np, self.b_np = self.a16.cpu().numpy(), self.b16.cpu().numpy()
        self.reference = (self.a16.double() @ self.b16.double()).cpu().numpy()
        # The TF32 variants' inputs: fp32 values, not rounded to fp16 (which TF32 holds exactly).
        self.a_f32 = torch.randn(size, size, device=device, generator=generator)
        self.b_f32 = torch.randn(size, size, device=device, generator=generator)
        self.reference_f32 = (self.a_f32.double() @ self.b_f32.double()).cpu().numpy()
        self.outputs = {}

    def calls(self, names) -> dict:
        """{name: call} for the variants in `names`; each call leaves its result
        where result(name) finds it."""
        torch, TC, found = self.torch, self.TC, {}
        device, shape = self.a16.device, (self.m, self.n)
        places = TC._device_places()
        for level in LEVELS:
            numpy_name, kernel_name = f"hgemm{level}_numpy", f"hgemm{level}_kernel"
            if numpy_name in names:
                found[numpy_name] = (lambda level=level, name=numpy_name: self.outputs.__setitem__(
                    name, TC.hgemm(self.a_np, self.b_np, level=level)))
            if kernel_name in names:
                a, b, c = self._kernel_operands(kernel_name, self.a16, self.b16)
                found[kernel_name] = (lambda a=a, b=b, c=c, level=level:
                                      TC._launch(a, b, c, level, places))
        for passes in PASSES:
            name = f"tf32gemm{passes}_kernel"
            if name in names:
                a, b, c = self._kernel_operands(name, self.a_f32, self.b_f32)
                found[name] = (lambda a=a, b=b, c=c, passes=passes:
                               TC._launch_tf32(a, b, c, passes))
        if "cublas_tf32" in names:
            out = self.outputs["cublas_tf32"] = torch.full(shape, float("nan"), device=device)

            def cublas_tf32(out=out):
                torch.set_float32_matmul_precision("high")  # TF32 allowed, for this call only
                try:
                    torch.mm(self.a_f32, self.b_f32, out=out)
                finally:
                    torch.set_float32_matmul_precision("highest")

            found["cublas_tf32"] = cublas_tf32
        if "cublas_fp16" in names:
            out = self.outputs["cublas_fp16"] = torch.full(shape, float("nan"), device=device,
                                                            dtype=torch.float16)
            found["cublas_fp16"] = lambda out=out: torch.mm(self.a16, self.b16, out=out)
        if "cublas_fp16_f32out" in names:
            found["cublas_fp16_f32out"] = lambda: self.outputs.__setitem__(
                "cublas_fp16_f32out", torch.mm(self.a16, self.b16, out_dtype=torch.float32))
        if "cublas_fp32" in names:
            out = self.outputs["cublas_fp32"] = torch.full(shape, float("nan"), device=device)
            found["cublas_fp32"] = lambda out=out: torch.mm(self.a32, self.b32, out=out)
        if "sgemm" in names:
            if self.dry_run:  # numpy in and out on the simulator
                a, b = self.a32.numpy(), self.b32.numpy()
                out = np.full((self.m, self.n), np.nan, dtype=np.float32)
            else:
                a, b = self.a32, self.b32
                out = torch.full(shape, float("nan"), device=device)
            self.outputs["sgemm"] = out
            found["sgemm"] = lambda a=a, b=b, out=out: self.sgemm.matmul(a, b, out=out)
        return found

    def _kernel_operands(self, name, a, b) -> tuple:
        """(a, b, c) for launching a kernel directly on the tensors a and b, with
        c poisoned with NaN and kept as the output `name`: the simulator's
        device arrays, from numpy, with --dry-run; else the CUDA tensors seen as
        Numba device arrays (no copy)."""
        cuda, shape = self.TC.cuda, (self.m, self.n)
        if self.dry_run:
            c = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
            self.outputs[name] = c
            return cuda.to_device(a.cpu().numpy()), cuda.to_device(b.cpu().numpy()), c
        c_tensor = self.torch.full(shape, float("nan"), device="cuda")
        self.outputs[name] = c_tensor
        return tuple(cuda.as_cuda_array(x) for x in (a, b, c_tensor))

    def reference_of(self, name) -> np.ndarray:
        """The float64 product that variant `name` computes."""
        return self.reference_f32 if name in FP32_INPUTS else self.reference

    def result(self, name) -> np.ndarray:
        out = self.outputs[name]
        if hasattr(out, "copy_to_host"):
            return out.copy_to_host()
        if hasattr(out, "detach"):
            return out.detach().float().cpu().numpy()
        return np.asarray(out)


def wall_ms(call) -> tuple[float, int]:
    """The dry run's timer: one call to warm up, then the wall clock of one."""
    call()
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3, 1


def time_size(shape, timer, rounds, slow_call_s) -> tuple[list[dict], list[dict]]:
    """Rows for every variant at one size, timed in turns (a wrong result is
    timed all the same, with passed False), and what was skipped: any variant
    whose first call fails, and any hgemm variant whose second call takes more
    than slow_call_s seconds."""
    sync = (lambda: None) if shape.dry_run else shape.torch.cuda.synchronize
    skipped, calls = [], shape.calls(list(VARIANTS))
    for name in list(calls):
        started = time.perf_counter()
        try:
            calls[name]()  # the first call (it may compile)
            sync()
            started = time.perf_counter()
            calls[name]()
            sync()
        except Exception as error:  # a variant this torch or GPU refuses: reported, skipped
            skipped.append({"variant": name, "m": shape.m, "n": shape.n, "k": shape.k,
                            "reason": f"{type(error).__name__}: {str(error)[:300]}"})
            print(f"{name} at {shape.m}^3 failed: {skipped[-1]['reason']}", flush=True)
            del calls[name]
            continue
        seconds = time.perf_counter() - started
        if name.startswith(("hgemm", "tf32gemm")) and seconds > slow_call_s:
            skipped.append({"variant": name, "m": shape.m, "n": shape.n, "k": shape.k,
                            "reason": f"one call took {seconds:.2f} s (> {slow_call_s:g} s)"})
            print(f"{name} at {shape.m}^3: one call took {seconds:.2f} s; not timed at this "
                  f"size", flush=True)
            del calls[name]
    samples = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name].append(timer(call)[0])
    flops = 2 * shape.m * shape.n * shape.k
    rows = []
    for name in calls:
        sync()
        max_abs, max_rel = errors(shape.result(name), shape.reference_of(name))
        ms = float(np.median(samples[name]))
        precision = "fp16" if name in FP16_OUTPUT else "tf32" if name in TF32_OUTPUT else "fp32"
        rows.append({"variant": name, "m": shape.m, "n": shape.n, "k": shape.k, "ms": ms,
                     "tflops": flops / (ms * 1e-3) / 1e12, "max_rel_err": max_rel,
                     "max_abs_err": max_abs,
                     "passed": max_rel <= WRONG_ABOVE[precision]})
    for peer in ("cublas_fp16", "cublas_fp32"):
        peer_ms = next((r["ms"] for r in rows if r["variant"] == peer), None)
        for row in rows:
            row[f"vs_{peer}"] = peer_ms / row["ms"] if peer_ms else None
    for row in rows:
        print(f"{shape.m}^3 {row['variant']:<19} {row['ms']:9.3f} ms {row['tflops']:8.2f} TFLOP/s"
              f"  err {row['max_rel_err']:.1e}{'' if row['passed'] else '  WRONG'}", flush=True)
    return rows, skipped


def print_table(rows) -> None:
    print(f"\n{'size':>6}  {'variant':<19} {'ms':>9} {'TFLOP/s':>8} {'vs fp16 cuBLAS':>15} "
          f"{'vs fp32 cuBLAS':>15}")
    for r in rows:
        shares = [f"{r[key]:.1%}" if r.get(key) else "-" for key in ("vs_cublas_fp16",
                                                                     "vs_cublas_fp32")]
        print(f"{r['m']:>6}  {r['variant']:<19} {r['ms']:9.3f} {r['tflops']:8.2f} "
              f"{shares[0]:>15} {shares[1]:>15}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None,
                        help="folder for the results file (default: benchmarks/results; "
                             "with --dry-run, a new temporary folder)")
    parser.add_argument("--quick", action="store_true",
                        help=f"time at {QUICK_SIZES[0]}^3 only (a smoke test; ...-quick.json)")
    parser.add_argument("--dry-run", action="store_true",
                        help="run on Numba's simulator and torch on the CPU at tiny sizes, "
                             "wall-clock timed: a check of the script, not a measurement")
    parser.add_argument("--slow-call-s", type=float, default=None,
                        help=f"an hgemm variant slower than this per call is not timed at that "
                             f"size (default {SLOW_CALL_S:g}; with --dry-run, no limit)")
    args = parser.parse_args(argv)
    if args.slow_call_s is None:
        args.slow_call_s = float("inf") if args.dry_run else SLOW_CALL_S
    started = time.perf_counter()
    if args.dry_run:
        os.environ["GPUCOURSE_DEVICE"] = "sim"
    else:
        os.environ.setdefault("GPUCOURSE_DEVICE", "gpu")
        need_a_gpu("benchmarks/tensor_cores.py", "--dry-run checks the script on the "
                   "simulator, and the kernels' tests run without one: pytest "
                   "tests/test_tensor_cores.py")

    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.device import on_gpu
    from gpucourse.kernels import sgemm
    from gpucourse.kernels import tensor_cores as TC

    if args.dry_run and on_gpu():
        sys.exit("--dry-run runs on the simulator, but numba.cuda was set up for the GPU")
    tf32_off()
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    gpu = "simulator" if args.dry_run else torch.cuda.get_device_name(0)
    out_dir = Path(args.out) if args.out else (
        Path(tempfile.mkdtemp(prefix="tensor_cores-dry-run-")) if args.dry_run else RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{gpu}: validating hgemm ({time.perf_counter() - started:.0f} s in)", flush=True)

    validation = validate(TC, args.dry_run) + validate_tf32(TC, args.dry_run)
    kernels = resources(TC)
    print(f"kernels: {kernels}", flush=True)

    sizes = DRY_SIZES if args.dry_run else QUICK_SIZES if args.quick else SIZES
    timer = wall_ms if args.dry_run else time_ms
    rounds = 1 if args.dry_run else ROUNDS
    rows, skipped = [], []
    for size in sizes:
        if time.perf_counter() - started > BUDGET_S and not args.dry_run:
            skipped.append({"variant": "all", "m": size, "n": size, "k": size,
                            "reason": f"the run had used its {BUDGET_S:.0f} s"})
            print(f"{size}^3: skipped, the run has used its {BUDGET_S:.0f} s", flush=True)
            continue
        print(f"{size}^3: timing ({time.perf_counter() - started:.0f} s in)", flush=True)
        shape = Shape(torch, TC, sgemm, size, args.dry_run)
        size_rows, size_skipped = time_size(shape, timer, rounds, args.slow_call_s)
        rows += size_rows
        skipped += size_skipped
        del shape
        if not args.dry_run:
            torch.cuda.empty_cache()
    print_table(rows)

    record = record_start(
        "tensor_cores", gpu, versions(),
        (
            "wall clock of one call after one warm-up call (--dry-run, simulator: "
            "meaningless numbers)" if args.dry_run else
            f"variants in turns over {ROUNDS} rounds, each timed with benchmarks/sgemm.py's "
            f"time_ms (CUDA events around back-to-back calls covering >= 20 ms, warm-up, median "
            f"of 10), median of the rounds; square N(0,1) inputs rounded to fp16, the fp32 "
            f"variants on the same values; TF32 off, fp16 reduced-precision reductions off; "
            f"hgemm*_numpy times hgemm as called from numpy (host-device copies included), "
            f"hgemm*_kernel and tf32gemm*_kernel the kernel alone on device arrays; the TF32 "
            f"variants (tf32gemm*, cublas_tf32: TF32 allowed for its call only) on other, fp32 "
            f"N(0,1) inputs; max_rel_err = max|C - C_ref| / max|C_ref| against torch.mm in "
            f"float64 of the variant's inputs (validation: numpy in float64)"))
    record.update({
        "variants": VARIANTS,
        "hgemm_levels": {
            "1": "one warp per block and per 16 x 8 tile of C, fragments from global memory",
            "2": (f"{TC.WARPS_M * TC.WARPS_N} warps per block, {TC.BLOCK_M} x {TC.BLOCK_N} tile "
                  f"of C, {TC.BLOCK_M} x {TC.BLOCK_K} and {TC.BLOCK_K} x {TC.BLOCK_N} tiles of A "
                  f"and B in shared memory, {TC.TILES_M} x {TC.TILES_N} instructions per warp "
                  f"per 16 of K")},
        "tf32gemm_passes": {
            "1": "plain TF32: each fp32 input rounded to TF32 (cvt.rna.tf32.f32), one mma.m16n8k8 "
                 "per 16 x 8 x 8 step",
            "3": "3xTF32: big = tf32(x), small = tf32(x - big); a_big b_big + a_big b_small + "
                 "a_small b_big, three mma.m16n8k8 per step, the small products in their own sums",
            "structure": (f"{TC.TF32_WARPS_M * TC.TF32_WARPS_N} warps per block, "
                          f"{TC.TF32_BLOCK_M} x {TC.TF32_BLOCK_N} tile of C, {TC.TF32_BLOCK_M} x "
                          f"{TC.TF32_BLOCK_K} and {TC.TF32_BLOCK_K} x {TC.TF32_BLOCK_N} tiles of A "
                          f"and B in shared memory (big and small parts)")},
        "validation": validation,
        "kernels": kernels,
        "skipped": skipped,
        "results": rows,
        "seconds": round(time.perf_counter() - started, 1),
    })
    quick = args.quick or args.dry_run
    path = write_record(record, out_dir, "-quick" if quick else "")
    bad = [v for v in validation if not v["passed"]] + [r for r in rows if not r["passed"]]
    print(f"\n{gpu}: wrote {path} in {record['seconds']:.0f} s; "
          f"{len(bad)} validation or result check(s) failed", flush=True)
    for item in bad:
        print(f"  FAILED: {item}")
    ours_bad = [item for item in bad if "level" in item or "passes" in item
                or item["variant"].startswith(("hgemm", "tf32gemm"))]
    return 1 if ours_bad else 0


if __name__ == "__main__":
    sys.exit(main())
