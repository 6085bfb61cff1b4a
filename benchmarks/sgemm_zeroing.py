"""Zeroing C before split-K and stream-K: the kernel matmul launches against the driver's memset.

Split-K and stream-K add their partial sums into C with atomics, so C is
zeroed first, on the same stream. matmul does it with ``split_k.zero_matrix``,
one float a thread in blocks of 32 x 8; the profiler measured it at about
22 us for 9 million floats (1.6 TB/s, a third of the H200's bandwidth). This
script times, at sizes of C from a quarter of a million floats to 67 million:

* ``zero_kernel``: ``zero_matrix`` launched as matmul launches it;
* ``zero_flat4``: a candidate kernel over C as one flat run of floats, four
  floats a thread in one 128-bit store (C's data 16-byte aligned), in a loop
  over the grid;
* ``memset_d32``: the driver's ``cuMemsetD32Async`` on the same stream;
* ``torch_zero_``: ``Tensor.zero_``, for reference.

Each: a loop of back-to-back calls ending in a synchronize, the faster of two
loops, us per call. At large C that is the GPU's time; at small C it is the
host's pace. Every way is checked first: C filled with NaN, zeroed, read back.

Writes DIR/sgemm_zeroing-<gpu-slug>-<date>.json. About a minute.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _common import (benchmark_parser, need_a_gpu, record_start, start, versions, wall_ms,
                     write_record)

SIZES = [(512, 512), (1219, 1073), (2914, 573), (1024, 1024), (2048, 2048), (3000, 3000),
         (4096, 4096), (6000, 6000), (8192, 8192)]


def flat4_kernel():
    """zero_flat4 compiled: c (a flat float32 array, 16-byte aligned) zeroed four
    floats a thread, the tail past the last multiple of four one float at a time."""
    from numba import cuda, float32

    from gpucourse.kernels._vector_store import store_float4_flat

    @cuda.jit
    def zero_flat4(c):
        zero = float32(0.0)
        quads = c.shape[0] // 4
        step = cuda.gridDim.x * cuda.blockDim.x
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        while i < quads:
            store_float4_flat(c, i * 4, zero, zero, zero, zero)
            i += step
        tail = quads * 4 + cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if tail < c.shape[0]:
            c[tail] = zero

    return zero_flat4


def main(argv=None) -> int:
    args, started = start(benchmark_parser(__doc__), argv, check_gpu=lambda: need_a_gpu(
        "sgemm_zeroing.py", "its committed run is in results/"))
    import torch
    from cuda.bindings import driver

    from gpucourse.kernels import sgemm  # first: it readies numba for this numpy (device.py)
    from gpucourse.kernels.launch import core_launch, launch_config, multiprocessors
    from gpucourse.kernels.sgemm import entry_point
    from gpucourse.kernels.sgemm.split_k import C_MATRIX, SUM_BLOCK, _sum_grid, zero_matrix
    from numba import cuda

    gpu = sgemm.gpu_model()
    calls = 300
    record = record_start(
        "sgemm_zeroing", gpu, versions(),
        f"each: a loop of {calls} back-to-back calls, wall clock, ending in "
        "torch.cuda.synchronize, the faster of two loops; us per call (the GPU's time "
        "at large C, the host's pace at small C)")
    launch = core_launch()
    zero, stream = entry_point._launchable(zero_matrix, entry_point._current_gpu(), (C_MATRIX,))
    handle = driver.CUstream(int(getattr(stream, "handle", stream) or 0))
    flat4 = flat4_kernel()
    workers = 4 * multiprocessors(entry_point._current_gpu())
    rows, checks = [], []
    for m, n in SIZES:
        c = torch.empty((m, n), device="cuda")
        flat = cuda.as_cuda_array(c.view(-1))
        blocks = min(workers, max(1, -(-(m * n) // 1024)))
        shape = launch_config(_sum_grid(m, n), SUM_BLOCK)
        c_head, c_tail = (0, 0, m * n, 4), (m, n, n * 4, 4)
        ptr = driver.CUdeviceptr(c.data_ptr())
        ways = {
            "zero_kernel": lambda: launch(stream, shape, zero, *c_head, c.data_ptr(), *c_tail),
            "zero_flat4": lambda: flat4[blocks, 256](flat),
            "memset_d32": lambda: driver.cuMemsetD32Async(ptr, 0, m * n, handle),
            "torch_zero_": lambda: c.zero_(),
        }
        for what, call in ways.items():
            c.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            checks.append({"m": m, "n": n, "what": what, "zeroed": bool((c == 0).all())})
            us = 1e3 * min(wall_ms(call, calls) for _ in range(2))
            rows.append({"m": m, "n": n, "floats": m * n, "what": what, "us": us,
                         "tb_per_s": 4 * m * n / us / 1e6})
            print(f"{m}x{n} {what:12s} {us:8.2f} us {4 * m * n / us / 1e6:5.2f} TB/s "
                  f"zeroed={checks[-1]['zeroed']}", flush=True)
    record["checks"] = checks
    record["results"] = rows
    record["seconds"] = time.perf_counter() - started
    print(f"wrote {write_record(record, Path(args.out))}")
    return 0 if all(c["zeroed"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
