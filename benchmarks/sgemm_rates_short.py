"""The rates of auto's tiles at a short K, where the rates' lines were never timed.

    PYTHONPATH=src python3 benchmarks/sgemm_rates_short.py [--out DIR]
    PYTHONPATH=src python3 benchmarks/sgemm_rates_short.py --save RECORD

Issue 33. ``sgemm_grid.py --rates`` times each tile of the menu on products
of exactly q blocks an SM at K = 512 to 12288 and prices every depth by the
line through those timings. Below K = 512 the line is an extrapolation, and
at 571 x 6087 x 69 (sgemm_off_grid.py's HELD_OUT set 2) it picked 128 x 128
tiles, priced 22.4 us, that ran 26.9, where 128 x 256 ran 23.3 (priced
22.6): a block that walks five steps of K is mostly its start (the first
tiles' trip from memory, nothing to overlap it with) and its stores.

This times each tile of the GPU's menu the same way as --rates (q x SMs
tiles, q = 1 to 8, in tile_grid's near-square grid, no edges, K whole), at
the depths SHORT_KS, each launch as matmul makes it once its plan is known
(entry_point._quick_plan: the host's share of a call is smaller than
matmul's whole call, which would hide a short kernel), checked against
float64 first, then timed with CUDA events around back-to-back launches
(benchmarks/sgemm.py's time_ms). It also names the kernels cuBLAS runs at
NAMED_SHAPES (torch's profiler), to compare their tiles with auto's.

Writes DIR/sgemm_rates_short-<gpu-slug>-<date>.json (rows as --rates':
config, blocks_per_sm, m, n, k, ms, tflops, max_rel_err). --save RECORD
writes a run's timings into the model's JSON (benchmarks/sgemm_model_json.py's
save_short_rates), where shape_model.measured_sm_us prices K below
LINE_FROM_K by them. About a minute and a half.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from _common import benchmark_parser, need_a_gpu, record_start, start, versions, write_record
from sgemm_grid import RATE_BLOCKS, WRONG_ABOVE, rate_products, rate_row, relative_error

SHORT_KS = (64, 192)
NAMED_SHAPES = [(738, 2561, 782), (1070, 581, 2242), (1360, 669, 475), (571, 6087, 69),
                (2048, 512, 2048)]


def cublas_kernels(torch, shapes) -> dict:
    """{"m x n x k": the names of the kernels torch.mm (fp32, TF32 off) runs}."""
    from torch.profiler import ProfilerActivity, profile

    names = {}
    for m, n, k in shapes:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        torch.mm(a, b)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.mm(a, b)
            torch.cuda.synchronize()
        names[f"{m}x{n}x{k}"] = sorted({e.key for e in prof.key_averages()})
    return names


def save(path: str) -> int:
    """--save: the short rates of a committed run into the model's JSON (no GPU)."""
    import json

    from sgemm_model_json import save_short_rates

    from gpucourse.kernels import sgemm

    record = json.loads(Path(path).read_text())
    save_short_rates(sgemm, record, f"benchmarks/results/{Path(path).name}")
    print(f"wrote {path}'s short rates into {sgemm.MODEL_PATH.name}")
    return 0


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--save", metavar="RECORD", help="write RECORD's rates into the model's "
                        "JSON for its GPU instead of timing (no GPU needed)")
    known, _ = parser.parse_known_args(argv)
    if known.save:
        return save(known.save)
    args, started = start(parser, argv, check_gpu=lambda: need_a_gpu(
        "sgemm_rates_short.py", "the shape model's short-K pricing is tested offline"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import entry_point

    record = record_start(
        "sgemm_rates_short", sgemm.gpu_model(), versions(),
        "level 6's kernel for each tile of the model's menu on products of q x SMs tiles (q = "
        f"1 to {RATE_BLOCKS[-1]}, no edges, K whole) at K = {', '.join(map(str, SHORT_KS))}, "
        "launched as matmul launches a known plan (entry_point._quick_plan); each checked "
        "against float64, then the median of CUDA-event timings of back-to-back launches "
        "(benchmarks/sgemm.py's time_ms); TF32 off; N(0,1) inputs")
    entry = sgemm.gpu_entry(record["gpu"])
    sms, rows = entry["sms"], []
    device = torch.cuda.current_device()
    for config in sgemm.shape_model.menu(entry):
        for q, m, n, k in rate_products(config, sms, SHORT_KS):  # as --rates' products
            a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
            c = torch.empty((m, n), device="cuda")
            go = entry_point._quick_plan("6", m, n, k, True, device, config, 1)
            call = lambda: go(a.data_ptr(), b.data_ptr(), c.data_ptr())  # noqa: E731
            call()
            error = relative_error(c, torch.mm(a.double(), b.double()))
            rows.append(rate_row(config, q, m, n, k, time_ms(call)[0], error))
        print(f"short {sgemm.shape_model.tile_key(config)}: " + ", ".join(
            f"q{r['blocks_per_sm']} k{r['k']} {r['ms'] * 1e3:.1f}us" for r in rows
            if r["config"] == asdict(config)), flush=True)
    record["results"] = rows
    record["sms"] = sms
    record["cublas_kernels"] = cublas_kernels(torch, NAMED_SHAPES)
    for shape, names in record["cublas_kernels"].items():
        print(shape, names, flush=True)
    path = write_record(record, Path(args.out))
    worst = max(r["max_rel_err"] for r in rows)
    print(f"wrote {path}; worst error {worst:.1e}")
    return 1 if worst > WRONG_ABOVE else 0


if __name__ == "__main__":
    sys.exit(main())
