"""Where a small matmul's microseconds go on the host: matmul's calls, one at
a time, beside torch.mm and the pieces of a split-K call.

    PYTHONPATH=src python3 benchmarks/sgemm_host_costs.py [--out DIR]

At products of a few hundred on a side the GPU finishes before the host has
issued the next call, so a call's wall-clock time is its host time: the
model's call_us (and split_call_us for split-K's second launch, the zeroing
of C). This times, each as a loop of back-to-back calls (wall clock, ending
in a synchronize), at SHAPES:

* torch.mm, the peer;
* matmul(a, b) as a user calls it (auto's plan), and with K whole and with
  8 slices (auto's plan replaced, as sgemm_grid.py --explore does);
* the zeroing launch alone, as matmul makes it (cuda.core's launch of
  split_k.zero_matrix), and the driver's memset of C (cuMemsetD32Async on
  the same stream), which would do the same work without a kernel's
  arguments;
* matmul(a, b) with its launches packed (entry_point.PACKED_LAUNCHES True,
  launch.packed_launch: its arguments laid out once) and through cuda.core
  (False), whatever the default;
* a profile (cProfile) of 2,000 split calls: the functions that take the
  host's time.

Every way of calling matmul is checked against torch.mm first (max relative
error, "checks"), at SHAPES and at a few more that take split-K, stream-K
and the rings' copy of B.

Writes DIR/sgemm_host_costs-<gpu-slug>-<date>.json. About half a minute.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from _common import (benchmark_parser, need_a_gpu, record_start, start, versions, wall_ms,
                     write_record)

SHAPES = [(64, 64, 64), (116, 237, 2146), (65, 531, 1140), (512, 512, 512)]
CHECK_SHAPES = SHAPES + [(1537, 1023, 771), (2302, 408, 4337), (1000, 1000, 1000),
                         (160, 630, 19896), (33, 17, 5)]
CALLS = 2000


@contextmanager
def launches_packed(entry_point, packed: bool):
    """matmul's launches packed or through cuda.core (entry_point.PACKED_LAUNCHES)
    inside the block, its plans built afresh on each side of it."""
    default = entry_point.PACKED_LAUNCHES
    entry_point.PACKED_LAUNCHES = packed
    entry_point._quick_plan.cache_clear()
    try:
        yield
    finally:
        entry_point.PACKED_LAUNCHES = default
        entry_point._quick_plan.cache_clear()


def time_row(rows: list, shape, what: str, call) -> None:
    """Append the us per call of `call` (warmed, the faster of two loops) to rows."""
    call()
    us = 1e3 * min(wall_ms(call, CALLS) for _ in range(2))
    rows.append({"m": shape[0], "n": shape[1], "k": shape[2], "what": what, "us": us})
    print(f"{'x'.join(map(str, shape))} {what:22s} {us:7.2f} us", flush=True)


def checks(sgemm, entry_point, torch) -> list[dict]:
    """matmul against torch.mm (float64) at CHECK_SHAPES, packed and not."""
    found = []
    for packed in (True, False):
        with launches_packed(entry_point, packed):
            for m, n, k in CHECK_SHAPES:
                a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
                reference = (a.double() @ b.double())
                for _ in range(3):  # the second and third calls reuse the packed buffers
                    c = sgemm.matmul(a, b)
                error = float((c.double() - reference).abs().max() / reference.abs().max())
                plan = sgemm.choose_plan((m, n, k), sgemm.gpu_model())
                found.append({"m": m, "n": n, "k": k, "packed": packed, "max_rel_err": error,
                              "splits": str(plan["splits"]), "stages": plan["config"].stages})
                print(f"check {m}x{n}x{k} packed={packed} splits={plan['splits']} "
                      f"err {error:.2e}", flush=True)
    return found


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_host_costs.py", "host costs of GPU launches"))
    import torch

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.launch import core_launch, launch_config
    from gpucourse.kernels.sgemm import entry_point
    from gpucourse.kernels.sgemm.split_k import C_MATRIX, SUM_BLOCK, _sum_grid, zero_matrix

    gpu = sgemm.gpu_model()
    record = record_start(
        "sgemm_host_costs", gpu, versions(),
        f"each: a loop of {CALLS} back-to-back calls, wall clock, ending in "
        "torch.cuda.synchronize, the faster of two loops; us per call",
        model={"calibrated": sgemm.gpu_entry(gpu).get("calibrated")})
    rows, real_plan = [], entry_point.auto_plan
    launch = core_launch()
    from gpucourse.kernels import launch as launch_module

    fast = launch_module._fast_driver()
    record["packed_launch"] = (None if fast is None else
                               {"driver_query": fast[1] is not None, "integer_launch": fast[3]})
    record["packed_by_default"] = entry_point.PACKED_LAUNCHES
    record["checks"] = checks(sgemm, entry_point, torch)
    bad = [c for c in record["checks"] if not c["max_rel_err"] <= 1e-4]
    try:
        for m, n, k in SHAPES:
            a, b = torch.randn((m, k), device="cuda"), torch.randn((k, n), device="cuda")
            c = torch.empty((m, n), device="cuda")
            times = {"torch_mm": lambda: torch.mm(a, b), "matmul_auto": lambda: sgemm.matmul(a, b)}
            chosen = sgemm.choose_plan((m, n, k), gpu)
            for label, splits in (("matmul_whole", 1), ("matmul_8_slices", 8)):
                entry_point.auto_plan = lambda *_, s=splits: (chosen["config"], s)
                entry_point._quick_plan.cache_clear()
                go = entry_point._quick_plan("auto", m, n, k, not (k % 4 or n % 4),
                                             entry_point._current_gpu())
                times[label] = lambda go=go: go(a.data_ptr(), b.data_ptr(), c.data_ptr())
            entry_point.auto_plan = real_plan  # matmul_auto: auto's own plan
            entry_point._quick_plan.cache_clear()
            zero, stream = entry_point._launchable(zero_matrix, entry_point._current_gpu(),
                                                   (C_MATRIX,))
            shape = launch_config(_sum_grid(m, n), SUM_BLOCK)
            c_head, c_tail = (0, 0, m * n, 4), (m, n, n * 4, 4)
            times["zero_launch"] = lambda: launch(stream, shape, zero, *c_head, c.data_ptr(),
                                                  *c_tail)
            try:
                from cuda.bindings import driver

                handle = driver.CUstream(int(stream.handle))
                ptr = driver.CUdeviceptr(c.data_ptr())
                times["memset_d32"] = lambda: driver.cuMemsetD32Async(ptr, 0, m * n, handle)
                times["memset_d32_fresh_ptr"] = lambda: driver.cuMemsetD32Async(
                    c.data_ptr(), 0, m * n, handle)
            except Exception as error:  # noqa: BLE001 (recorded: which way worked)
                record.setdefault("memset_errors", []).append(repr(error))
            times["torch_empty"] = lambda: torch.empty((m, n), device="cuda")
            times["torch_zeros"] = lambda: torch.zeros((m, n), device="cuda")
            for name, call in times.items():
                time_row(rows, (m, n, k), name, call)
            for packed, name in ((True, "matmul_auto_packed"), (False, "matmul_auto_cuda_core")):
                with launches_packed(entry_point, packed):  # the same call, launched each way
                    time_row(rows, (m, n, k), name, lambda: sgemm.matmul(a, b))
            if (m, n, k) == SHAPES[1]:
                profile = cProfile.Profile()
                go8 = times["matmul_8_slices"]
                profile.enable()
                for _ in range(CALLS):
                    go8()
                profile.disable()
                torch.cuda.synchronize()
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(20)
                record["profile_8_slices"] = text.getvalue()
                print(text.getvalue())
    finally:
        entry_point.auto_plan = real_plan
        entry_point._quick_plan.cache_clear()
    record["results"] = rows
    record["seconds"] = time.perf_counter() - started
    print(f"wrote {write_record(record, Path(args.out))}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
