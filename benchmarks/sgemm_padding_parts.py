"""SGEMM padding in parts: what each step of a padded ragged product costs.

    PYTHONPATH=src python3 benchmarks/sgemm_padding_parts.py [--out DIR]

Issue 33. `sgemm_grid.py --padding` timed auto on the grid's ragged shapes
(K or N not a multiple of 4) with its operands copied into padded buffers and
without, whole: padded was faster at three of the four shapes the model pads,
slower at 2500 x 1999 x 3001 (0.83 -> 0.75 of cuBLAS), and the model's padded
prices were too low everywhere (at 8192 x 50257 x 768 it predicted 1.36 ms
saved; the run measured 0.54). Two of the model's assumptions could be why:
the copy's rate (``shape_model.PAD_COPY_GBPS``, never measured) and the padded
kernel's price (it stores C one float at a time where N is ragged, which the
model does not charge). This script times the parts alone, at the same
shapes and with auto's plan (tiles, slices of K) for each:

- ``copy``: ``padding.pad_copy`` into the padded buffers, A's (where K is
  ragged) and B's, as ``entry_point`` launches them; with its rate in GB/s
  (bytes read and written);
- ``padded_kernel``: the multiply on operands already padded (128-bit loads;
  single stores of C where N is ragged, ``padding.LOADS_ONLY``);
- ``scalar_kernel``: the multiply on the ragged operands as they are (loads
  of one float), what auto runs today;
- ``aligned_kernel``: the multiply of the same plan on the shape rounded up
  to multiples of 4 (128-bit loads and stores), what padding could reach if C
  were padded too;
- ``cublas``: torch.mm on the ragged operands.

Each is the median of CUDA-event timings of back-to-back launches
(benchmarks/sgemm.py's time_ms), the parts in turns over ROUNDS rounds.
Writes DIR/sgemm_padding_parts-<gpu-slug>-<date>.json (rows: m, n, k, part,
ms, and the model's price of each where it has one). About a minute on an
H200.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import asdict
from pathlib import Path

from _common import benchmark_parser, need_a_gpu, record_start, start, versions, write_record
from sgemm_grid import grid_shapes, relative_error

ROUNDS = 3
PARTS = ("copy", "padded_kernel", "scalar_kernel", "aligned_kernel", "cublas")


def part_launches(torch, a, b) -> tuple:
    """({part: launch()}, buffers, (config, splits)) for
    one ragged product (see the module's docstring): every kernel part on
    auto's plan, each writing into buffers made here once."""
    from gpucourse.kernels.sgemm import entry_point as E
    from gpucourse.kernels.sgemm.padding import LOADS_ONLY, padded_sizes

    m, k = a.shape
    n = b.shape[1]
    k4, n4, pad_a, _ = padded_sizes(m, n, k)
    device = torch.cuda.current_device()
    key, config, splits = E._resolved("auto", m, n, k, None, None, device)
    a_pad = torch.nn.functional.pad(a, (0, k4 - k)).contiguous()
    b_pad = torch.nn.functional.pad(b, (0, n4 - n, 0, k4 - k)).contiguous()
    c, c_aligned = torch.empty(m, n, device="cuda"), torch.empty(m, n4, device="cuda")
    a_copy, b_copy = torch.empty_like(a_pad), torch.empty_like(b_pad)
    copy = E.pad_copies(m, n, k, device)  # as matmul launches them
    padded = E._launches(key, m, n, k4, n4, True if n % 4 == 0 else LOADS_ONLY, device, config,
                         splits)
    scalar = E._launches(key, m, n, k, n, False, device, config, splits)
    aligned = E._launches(key, m, n4, k4, n4, True, device, config, splits)
    a_used = a_pad if pad_a else a
    launches = {
        "copy": lambda: copy(a.data_ptr(), b.data_ptr(), a_copy.data_ptr(), b_copy.data_ptr()),
        "padded_kernel": lambda: padded(a_used.data_ptr(), b_pad.data_ptr(), c.data_ptr()),
        "scalar_kernel": lambda: scalar(a.data_ptr(), b.data_ptr(), c.data_ptr()),
        "aligned_kernel": lambda: aligned(a_pad.data_ptr(), b_pad.data_ptr(),
                                          c_aligned.data_ptr()),
        "cublas": lambda: torch.mm(a, b, out=c),
    }
    buffers = {"c": c, "c_aligned": c_aligned, "a_copy": a_copy, "b_copy": b_copy,
               "a_pad": a_pad, "b_pad": b_pad, "pad_a": pad_a}
    return launches, buffers, (config, splits)


def checked(torch, launches: dict, buffers: dict, reference) -> dict:
    """{part: error}: each kernel's C against float64 (the aligned one's first
    n columns: its padding adds zeros), the copies against torch's padding."""
    n = reference.shape[1]
    errors = {}
    for part in ("padded_kernel", "scalar_kernel", "cublas"):
        launches[part]()
        errors[part] = relative_error(buffers["c"], reference)
    launches["aligned_kernel"]()
    errors["aligned_kernel"] = relative_error(buffers["c_aligned"][:, :n], reference)
    launches["copy"]()
    torch.cuda.synchronize()
    same = torch.equal(buffers["b_copy"], buffers["b_pad"]) and (
        not buffers["pad_a"] or torch.equal(buffers["a_copy"], buffers["a_pad"]))
    errors["copy"] = 0.0 if same else float("inf")
    return errors


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_padding_parts.py", "the committed sgemm_padding runs hold the whole products"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import shape_model

    gpu = sgemm.gpu_model()
    entry = sgemm.gpu_entry(gpu)
    record = record_start(
        "sgemm_padding_parts", gpu, versions(),
        "each part alone (see the script's docstring), median of CUDA-event timings of "
        f"back-to-back launches (benchmarks/sgemm.py's time_ms), in turns over {ROUNDS} rounds; "
        "auto's plan for the ragged shape in every kernel part; TF32 off; N(0,1) inputs",
        model={"calibrated": entry.get("calibrated"),
               "copy_gbps": (entry.get("padding") or {}).get("copy_gbps",
                                                             shape_model.PAD_COPY_GBPS)})
    rows = []
    for group, (m, n, k) in grid_shapes():
        if not (k % 4 or n % 4):
            continue
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        launches, buffers, (config, splits) = part_launches(torch, a, b)
        errors = checked(torch, launches, buffers, torch.mm(a.double(), b.double()))
        times = {part: [] for part in PARTS}
        for _ in range(ROUNDS):
            for part in PARTS:
                times[part].append(time_ms(launches[part])[0])
        allowed = {**entry, "padding": {"copy_gbps": record["model"]["copy_gbps"]}}
        predicted = {f"predicted_{'padded' if padded else 'unpadded'}_ms":
                     shape_model.plan_cost((m, n, k), config, splits, allowed,
                                           padding=padded)["predicted_us"] / 1e3
                     for padded in (True, False)}
        copy_bytes = shape_model.padding_bytes((m, n, k))
        copy_price = {"bytes": copy_bytes,
                      "predicted_ms": shape_model.padding_us((m, n, k), allowed)[1] / 1e3}
        got = {}
        for part in PARTS:
            ms = statistics.median(times[part])
            got[part] = {"class": group, "m": m, "n": n, "k": k, "part": part, "ms": ms,
                         "config": {**asdict(config), "splits": splits}, **predicted,
                         "max_rel_err": errors[part], "ok": errors[part] < 1e-5,
                         **({**copy_price, "gbps": copy_bytes / ms / 1e6} if part == "copy"
                            else {})}
        rows += got.values()
        print(f"{m}x{n}x{k}: "
              + ", ".join(f"{part} {got[part]['ms'] * 1e3:.1f} us" for part in PARTS)
              + f"; copy {got['copy']['gbps']:.0f} GB/s", flush=True)
    record["results"] = rows
    path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
