"""Which kernels cuBLAS runs for fp32 products, and how it launches them.

    PYTHONPATH=src python3 benchmarks/cublas_kernels.py [--out DIR]

Issue 33. cuBLAS's kernel names say how it multiplies: on the H200,
``sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1
_ffma...`` is a 64 x 128 tile, 8 columns of K a step, three stages of cp.async
copies in flight, four warps side by side along N, FFMA on the CUDA cores.
This script records, for each shape of sgemm_pipelined.SHAPES and a few of
the grid's, every kernel torch.mm (fp32, TF32 off) launches, read from
torch's profiler: its name, the tile and stages the name gives, its grid and
block, registers per thread, shared memory, and its mean time over CALLS
calls. A shape with two kernels split K and then added the slices (a
reduction kernel, no atomics). Writes DIR/cublas_kernels-<gpu-slug>-<date>.json
(rows: m, n, k, kernel, tile, stages, grid, block, registers, shared_bytes,
us). About 20 seconds.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from _common import benchmark_parser, need_a_gpu, record_start, start, versions, write_record

CALLS = 5
SHAPES = [(1537, 1023, 771), (1536, 1024, 768), (1000, 1000, 1000), (3001, 2999, 1009),
          (1024, 1024, 16384), (512, 512, 512), (777, 1313, 2047), (2048, 2048, 2048),
          (4096, 4096, 4096), (8192, 8192, 8192), (256, 384, 65536), (8192, 50257, 768)]


def name_parts(name: str) -> dict:
    """The tile (m x n x k) and stages a cuBLAS or CUTLASS kernel's name gives,
    None where it gives none: "tilesize64x128x8_stage3" (cuBLAS's xmma) or
    "sgemm_256x128_8x4" (CUTLASS's SIMT: 256 x 128 tiles, 8 deep, 4 stages)."""
    xmma = re.search(r"tilesize(\d+)x(\d+)x(\d+)_stage(\d+)", name)
    if xmma:
        return {"tile": [int(x) for x in xmma.groups()[:3]], "stages": int(xmma.group(4))}
    simt = re.search(r"sgemm_(\d+)x(\d+)_(\d+)x(\d+)", name)
    if simt:
        bm, bn, bk, stages = (int(x) for x in simt.groups())
        return {"tile": [bm, bn, bk], "stages": stages}
    return {"tile": None, "stages": None}


def kernels_of(torch, a, b) -> list[dict]:
    """The kernels CALLS calls of torch.mm(a, b) launched, each once, from a
    profiler trace: name, grid, block, registers, shared memory, mean us."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        torch.mm(a, b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            torch.mm(a, b)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    found: dict = {}
    for event in events:
        if event.get("cat") != "kernel":
            continue
        args = event.get("args", {})
        row = found.setdefault(event["name"], {
            "kernel": event["name"], **name_parts(event["name"]), "grid": args.get("grid"),
            "block": args.get("block"), "registers": args.get("registers per thread"),
            "shared_bytes": args.get("shared memory"), "durations": []})
        row["durations"].append(event.get("dur"))
    for row in found.values():
        times = [d for d in row.pop("durations") if d is not None]
        row["us"] = sum(times) / len(times) if times else None
    return list(found.values())


def main(argv=None) -> int:
    args, _ = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "cublas_kernels.py", "it reads cuBLAS's kernels from a GPU's profile"))
    import torch

    from gpucourse.kernels import sgemm

    record = record_start(
        "cublas_kernels", sgemm.gpu_model(), versions(),
        f"torch.mm on CUDA float32 tensors, TF32 off, {CALLS} calls after 3 of warm-up under "
        "torch.profiler (CUDA activity); each kernel's name, grid, block, registers and shared "
        "memory from the trace, its mean duration over the calls; the tile and stages parsed "
        "from the name (name_parts)")
    rows = []
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        found = kernels_of(torch, a, b)
        rows += [{"m": m, "n": n, "k": k, **row} for row in found]
        print(f"{m}x{n}x{k}: " + "; ".join(
            f"{r['tile']} stages {r['stages']} grid {r['grid']} block {r['block']} "
            f"{r['registers']} regs {r['us']:.1f} us" for r in found), flush=True)
    record["results"] = rows
    path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    return 0 if all(any(r["m"] == m and r["n"] == n and r["k"] == k for r in rows)
                    for m, n, k in SHAPES) else 1


if __name__ == "__main__":
    sys.exit(main())
