"""What copying B into rows of a multiple of 4 costs before a cp.async ring.

    PYTHONPATH=src python3 benchmarks/sgemm_ring_copy.py [--out DIR] [--write-model] [--wide]

Issue 33. A cp.async ring copies B's tile 16 bytes at a time, which B's rows
allow only when n is a multiple of 4; where it is not, matmul first copies B
(k x n) into a k x n4 buffer, n rounded up to 4 (entry_point's
``_ring_plan``, ``padding.padded_b``), and the shape model adds that copy to
the ring's plan (``padding.ring_copy_us``). This script times the copy as
matmul launches it (``entry_point._copy_launch``), alone, for B of every
grid shape whose n is ragged (benchmarks/sgemm_grid.py's GRID) and a few
more sizes, and fits a line: microseconds = fixed + bytes moved / rate (B
read and the buffer written). The median of CUDA-event timings of
back-to-back launches (benchmarks/sgemm.py's time_ms), so the fixed part is
what one more launch on the stream costs the GPU, the gap between kernels
included. Writes DIR/sgemm_ring_copy-<gpu-slug>-<date>.json (rows: k, n, n4,
bytes, us; the fit). With --write-model, the fit goes into the model's JSON
for this GPU as "ring_copy" (copy_gbps, fixed_us, source). With --wide, each
size is also copied by ``padding.pad_copy_wide`` (four floats a thread, one
16-byte store; ``entry_point.RING_COPY_WIDE``), its rows marked "kernel":
"pad_copy_wide" and its line the record's "fit_wide"; "fit" stays pad_copy's.
--write-model writes the line of the copy matmul launches: pad_copy_wide's
while entry_point.RING_COPY_WIDE is on (on since 2026-12-01; --wide is then
implied), else pad_copy's. About 20 seconds, 40 with --wide.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _common import benchmark_parser, need_a_gpu, record_start, start, versions, write_record
from sgemm_grid import grid_shapes

# B's sizes (k, n) besides the grid's ragged ones: a wide spread of bytes.
MORE_B = [(256, 1001), (512, 2047), (1024, 4095), (4096, 4097), (8192, 8191)]


def ring_copy_sizes() -> list[tuple[int, int]]:
    """(k, n) of B for every grid shape whose n is not a multiple of 4, then MORE_B."""
    sizes = [(k, n) for _, (m, n, k) in grid_shapes() if n % 4]
    return list(dict.fromkeys(sizes + MORE_B))


def fit_line(rows: list[dict]) -> dict:
    """us = fixed_us + bytes / (copy_gbps x 1e3), least squares on relative
    errors (shape_model's line through the rates), as {"copy_gbps", "fixed_us"}."""
    from gpucourse.kernels.sgemm.shape_model import _weighted_line

    per_byte, fixed = _weighted_line([(r["bytes"], r["us"]) for r in rows])
    if per_byte <= 0 or fixed < 0:
        raise ValueError(f"the copy's timings do not fit a line with a positive rate and a "
                         f"fixed part >= 0 (got {per_byte:.3g} us a byte, {fixed:.3g} us)")
    return {"copy_gbps": round(1e-3 / per_byte, 1), "fixed_us": round(fixed, 3)}


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--write-model", action="store_true",
                        help="write the fit into the model's JSON as this GPU's ring_copy")
    parser.add_argument("--wide", action="store_true",
                        help="also time padding.pad_copy_wide, four floats a thread")
    args, _ = start(parser, argv, check_gpu=lambda: need_a_gpu(
        "sgemm_ring_copy.py", "the copy is tested on the simulator (test_sgemm_pipelined)"))
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import entry_point
    from gpucourse.kernels.sgemm.padding import rounded_up_to_4

    # The copy matmul launches is the one the model must price.
    launched_wide = bool(entry_point.RING_COPY_WIDE)
    args.wide = args.wide or (args.write_model and launched_wide)
    device = torch.cuda.current_device()
    record = record_start(
        "sgemm_ring_copy", sgemm.gpu_model(), versions(),
        "B (k x n, n not a multiple of 4) copied into a k x n4 buffer by entry_point._copy_launch as matmul launches it before a cp.async ring; "
        "checked against B and its zeros first, then the median of CUDA-event timings of "
        "back-to-back launches (benchmarks/sgemm.py's time_ms); bytes = 4 k (n + n4), B read "
        "and the buffer written")
    rows = []
    for k, n in ring_copy_sizes():
        n4 = rounded_up_to_4(n)
        b = torch.randn(k, n, device="cuda")
        padded = torch.empty((k, n4), device="cuda")
        for wide in (False, True) if args.wide else (False,):
            padded.fill_(float("nan"))
            copy = entry_point._copy_launch(k, n, k, n4, device, wide)
            call = lambda: copy(b.data_ptr(), padded.data_ptr())  # noqa: E731
            call()
            torch.cuda.synchronize()
            ok = bool(torch.equal(padded[:, :n], b) and not padded[:, n:].any())
            ms, _ = time_ms(call)
            kernel = "pad_copy_wide" if wide else "pad_copy"
            rows.append({"k": k, "n": n, "n4": n4, "bytes": 4 * k * (n + n4), "us": ms * 1e3,
                         "exact": ok, "kernel": kernel})
            print(f"B {k} x {n}, {kernel}: {ms * 1e3:.2f} us, "
                  f"{4 * k * (n + n4) / ms / 1e6:.0f} GB/s" + ("" if ok else " WRONG"), flush=True)
    record["results"] = rows
    record["fit"] = fit_line([r for r in rows if r["kernel"] == "pad_copy"])
    if args.wide:
        record["fit_wide"] = fit_line([r for r in rows if r["kernel"] == "pad_copy_wide"])
    print(f"fit: {record['fit']}" + (f", wide: {record['fit_wide']}" if args.wide else ""))
    path = write_record(record, Path(args.out))
    print(f"wrote {path}")
    if args.write_model:
        from sgemm_model_json import ring_copy_block, update_entry

        block = ring_copy_block(record, f"benchmarks/results/{path.name}", launched_wide)

        def update(entry):
            entry["ring_copy"] = block

        update_entry(sgemm, record["gpu"], update)
        print(f"wrote ring_copy ({'pad_copy_wide' if launched_wide else 'pad_copy'}'s line) "
              f"into {sgemm.MODEL_PATH.name}")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
