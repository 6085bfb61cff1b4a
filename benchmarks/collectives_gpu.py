"""Check and time the course's collectives against NCCL's on the GPUs of one host.

    PYTHONPATH=src python3 benchmarks/collectives_gpu.py [--gpus N] [--out DIR]
    PYTHONPATH=src python3 benchmarks/collectives_gpu.py --cpu-smoke

One process per GPU (default: every visible GPU, at least 2), joined by NCCL
through gpucourse.distributed.run_on_processes, in a single launch that:

1. checks gpucourse.collectives on CUDA tensors against NCCL's built-ins on
   random float64 data: ring_all_reduce and naive_all_reduce against
   dist.all_reduce (lengths 1 ... 2^24 + 3 elements, ragged ones included),
   ring_reduce_scatter against dist.reduce_scatter_tensor, ring_all_gather
   against dist.all_gather_into_tensor, and the two composed on a row count
   that no rank count divides against dist.all_reduce;
2. times, for float32 messages of 4 KiB to 256 MiB, the course's ring and
   naive all-reduce, dist.all_reduce, and the ring reduce-scatter and
   all-gather beside NCCL's: warm-up calls, then 10 repeats, each repeat
   timing enough back-to-back calls (the same number on every rank) to cover
   about 20 ms, between CUDA events on the calling stream, after the ranks
   have lined up (a one-element all-reduce and a device synchronize). A
   repeat counts as long as its slowest rank; the result is the median.
   Bus bandwidth is as nccl-tests defines it (algbw = bytes / time; busbw =
   algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for reduce-scatter and
   all-gather, where bytes is the whole tensor), so that it reads as the
   bandwidth of each link whatever n is;
3. fits latency and bandwidth to each algorithm with
   gpucourse.collectives.fit_alpha_beta (ring model for NCCL's built-ins);

and writes DIR/collectives-<gpu-slug>x<N>-<YYYY-MM-DD>.json (CONVENTIONS.md,
plus gpu_count, checks, fits, the NCCL environment and `nvidia-smi topo -m`).

NVLink multicast (NVLS) is forced off for NCCL, PyTorch and NVSHMEM before
anything starts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): on the course's shared GPU hosts a program that uses
it can put the host's GPUs out of service.

--cpu-smoke runs the same code on 2 CPU processes with gloo at tiny sizes
(4 KiB to 64 KiB, 2 repeats) and writes to a temporary folder unless --out is
given: it checks the script's logic on a machine without GPUs, not speed.

Needs torch with CUDA and NCCL (or, for --cpu-smoke, any torch); no installs.
"""

from __future__ import annotations

# First, before torch, here and in every spawned worker (which imports this
# file again): it turns NVLink multicast off, whatever the environment said.
import _multi_gpu
from _multi_gpu import device_facts, line_up, rank_device, topology

import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from gpucourse import collectives  # noqa: E402
from gpucourse.distributed import run_on_processes  # noqa: E402

GPU_SIZES_BYTES = tuple(4096 * 2 ** k for k in range(17))  # 4 KiB ... 256 MiB
SMOKE_SIZES_BYTES = (4096, 16384, 65536)
GPU_CHECK_LENGTHS = (1, 3, 8, 13, 1000, 2 ** 20 + 3, 2 ** 24 + 3)  # the last is 128 MiB of float64
SMOKE_CHECK_LENGTHS = (1, 3, 8, 13, 1000)
CHECK_ROWS_PER_RANK = (1, 3, 1000)  # reduce-scatter and all-gather blocks, 5 columns wide
RAGGED_ROWS = (1, 7, 1001)  # odd: unequal blocks on any even number of ranks (1: empty ones too)
# What each timed name calls, and the bus-bandwidth factor of its operation.
ALGORITHMS = ("builtin", "ring", "naive", "builtin_reduce_scatter", "ring_reduce_scatter",
              "builtin_all_gather", "ring_all_gather")
FIT_MODEL = {"builtin": "ring_all_reduce", "ring": "ring_all_reduce",
             "naive": "naive_all_reduce", "builtin_reduce_scatter": "ring_reduce_scatter",
             "ring_reduce_scatter": "ring_reduce_scatter",
             "builtin_all_gather": "ring_all_gather", "ring_all_gather": "ring_all_gather"}
WARMUP = 3
REPEATS = 10
TARGET_BATCH_S = 0.020  # each timed repeat covers at least this much time
MAX_BATCH = 200
FLOAT64_TOLERANCE = 1e-12  # relative to the largest |value| of the reference


def bus_factor(algorithm, world_size) -> float:
    """nccl-tests' busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for
    reduce-scatter and all-gather (its PERFORMANCE.md)."""
    n = world_size
    return (n - 1) / n if ("reduce_scatter" in algorithm or "all_gather" in algorithm) \
        else 2 * (n - 1) / n


# -----------------------------------------------------------------------------
# Runs on every rank


def _builtins():
    """NCCL's (or gloo's) reduce-scatter and all-gather of whole tensors; newer
    torch renamed them (reduce_scatter_tensor -> reduce_scatter_single,
    all_gather_into_tensor -> all_gather_single) and warns on the old names."""
    import torch.distributed as dist

    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor,
            getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)


class _Timer:
    """Seconds between start() and stop(): CUDA events on the calling stream
    on a GPU, perf_counter on the CPU."""

    def __init__(self, device):
        import torch

        self.cuda = device.type == "cuda"
        if self.cuda:
            self.begin = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def start(self):
        if self.cuda:
            self.begin.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            return self.begin.elapsed_time(self.end) / 1e3
        return time.perf_counter() - self.t0


def _largest_difference(ours, reference):
    """(max |ours - reference|, max |reference|), each the largest over all ranks."""
    import torch
    import torch.distributed as dist

    if ours.shape != reference.shape:
        raise RuntimeError(f"shape {tuple(ours.shape)} differs from the built-in's "
                           f"{tuple(reference.shape)}")
    pair = torch.zeros(2, dtype=torch.float64, device=reference.device)
    if reference.numel():
        pair[0] = (ours - reference).abs().max()
        pair[1] = reference.abs().max()
    dist.all_reduce(pair, op=dist.ReduceOp.MAX)
    return pair[0].item(), pair[1].item()


def check_collectives(rank, world_size, device, lengths, rows_per_rank, ragged_rows, seed=0):
    """The course's collectives against the built-ins on random float64
    tensors on ``device``; rows {"check", "shape", "max_abs_diff",
    "max_abs_value", "passed"}, the same on every rank."""
    import torch
    import torch.distributed as dist

    reduce_scatter, all_gather = _builtins()
    generator = torch.Generator().manual_seed(seed * 1000 + rank)  # each rank its own data

    def random(*shape):  # drawn on the CPU, so the data does not depend on the device
        return torch.randn(*shape, dtype=torch.float64, generator=generator).to(device)

    rows = []

    def record(check, shape, ours, reference):
        difference, scale = _largest_difference(ours, reference)
        rows.append({"check": check, "shape": list(shape), "max_abs_diff": difference,
                     "max_abs_value": scale,
                     "passed": bool(difference <= FLOAT64_TOLERANCE * max(scale, 1.0))})

    for length in lengths:
        x = random(length)
        reference = x.clone()
        dist.all_reduce(reference)
        record("ring_all_reduce vs all_reduce", x.shape,
               collectives.ring_all_reduce(x.clone()), reference)
        record("naive_all_reduce vs all_reduce", x.shape,
               collectives.naive_all_reduce(x.clone()), reference)
    for per_rank in rows_per_rank:
        x = random(per_rank * world_size, 5)
        reference = torch.empty(per_rank, 5, dtype=x.dtype, device=device)
        reduce_scatter(reference, x)
        record("ring_reduce_scatter vs reduce_scatter_tensor", x.shape,
               collectives.ring_reduce_scatter(x), reference)
        mine = random(per_rank, 5)
        reference = torch.empty(per_rank * world_size, 5, dtype=x.dtype, device=device)
        all_gather(reference, mine)
        record("ring_all_gather vs all_gather_into_tensor", (per_rank * world_size, 5),
               collectives.ring_all_gather(mine), reference)
    for total in ragged_rows:  # blocks of unequal size: the built-ins can't; all_reduce can
        x = random(total, 5)
        reference = x.clone()
        dist.all_reduce(reference)
        block = collectives.ring_reduce_scatter(x)
        record("ring_all_gather(ring_reduce_scatter) vs all_reduce", x.shape,
               collectives.ring_all_gather(block, total_rows=total), reference)
    return rows


def _operation(algorithm, numel, world_size, device):
    """A no-argument function that runs `algorithm` once on float32 buffers
    of `numel` elements in all (zeros, so repeated sums never overflow)."""
    import torch
    import torch.distributed as dist

    if algorithm in ("builtin", "ring", "naive"):
        x = torch.zeros(numel, dtype=torch.float32, device=device)
        function = {"builtin": dist.all_reduce, "ring": collectives.ring_all_reduce,
                    "naive": collectives.naive_all_reduce}[algorithm]
        return lambda: function(x)
    reduce_scatter, all_gather = _builtins()
    whole = torch.zeros(numel, dtype=torch.float32, device=device)
    block = torch.zeros(numel // world_size, dtype=torch.float32, device=device)
    return {
        "builtin_reduce_scatter": lambda: reduce_scatter(block, whole),
        "ring_reduce_scatter": lambda: collectives.ring_reduce_scatter(whole),
        "builtin_all_gather": lambda: all_gather(whole, block),
        "ring_all_gather": lambda: collectives.ring_all_gather(block),
    }[algorithm]


def time_collectives(rank, world_size, device, sizes_bytes, algorithms, warmup, repeats,
                     target_batch_s, max_batch):
    """Median seconds per call of each algorithm and size (see the module
    docstring); rows are the same on every rank."""
    import torch
    import torch.distributed as dist
    from tqdm.auto import tqdm

    timer = _Timer(device)
    # Reduce-scatter and all-gather only where every rank's block is whole.
    plan = [(a, s) for a in algorithms for s in sizes_bytes
            if a in ("builtin", "ring", "naive") or (s // 4) % world_size == 0]
    rows, local = [], []
    for algorithm, size in tqdm(plan, desc=f"timing on {world_size} x {device.type}",
                                disable=rank != 0, mininterval=2):
        run = _operation(algorithm, size // 4, world_size, device)
        for _ in range(warmup):
            run()
        # One timed call decides how many calls a repeat needs; the slowest
        # rank's time, so that every rank makes the same number of calls.
        line_up(device)
        timer.start()
        run()
        single = torch.tensor([timer.stop()], dtype=torch.float64, device=device)
        dist.all_reduce(single, op=dist.ReduceOp.MAX)
        batch = max(1, min(max_batch, math.ceil(target_batch_s / max(single.item(), 1e-7))))
        for _ in range(repeats):
            line_up(device)
            timer.start()
            for _ in range(batch):
                run()
            local.append(timer.stop() / batch)
        rows.append({"algorithm": algorithm, "world_size": world_size, "bytes": size,
                     "calls_per_repeat": batch, "repeats": repeats})
        del run
    # One MAX reduction at the end, so that gathering never disturbs a timing.
    slowest = torch.tensor(local, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    slowest = slowest.tolist()
    for i, row in enumerate(rows):
        seconds = statistics.median(slowest[i * repeats:(i + 1) * repeats])
        algbw = row["bytes"] / seconds
        row.update(seconds=seconds, algbw_bytes_per_s=algbw,
                   busbw_bytes_per_s=algbw * bus_factor(row["algorithm"], world_size))
    return rows


def benchmark_worker(rank, world_size, lengths, rows_per_rank, ragged_rows, sizes_bytes,
                     algorithms, warmup, repeats, target_batch_s, max_batch):
    """Checks, then timings, in one launch; rank 0 also describes its device."""
    device = rank_device()
    checks = check_collectives(rank, world_size, device, lengths, rows_per_rank, ragged_rows)
    timings = time_collectives(rank, world_size, device, sizes_bytes, algorithms, warmup,
                               repeats, target_batch_s, max_batch)
    return {"checks": checks, "timings": timings, "facts": device_facts(device)}


# -----------------------------------------------------------------------------
# The launcher


def fit_all(rows) -> dict:
    """Latency and bandwidth fitted to each algorithm's rows."""
    fits = {}
    for algorithm in dict.fromkeys(r["algorithm"] for r in rows):
        mine = [r for r in rows if r["algorithm"] == algorithm]
        try:
            fit = collectives.fit_alpha_beta([r["bytes"] for r in mine],
                                             [r["seconds"] for r in mine],
                                             mine[0]["world_size"], FIT_MODEL[algorithm])
        except ValueError as error:  # e.g. times that did not grow with size
            fits[algorithm] = {"model": FIT_MODEL[algorithm], "error": str(error)}
            continue
        fits[algorithm] = {"model": fit.algorithm, "latency_s": fit.latency_s,
                           "bandwidth_bytes_per_s": fit.bandwidth_bytes_per_s,
                           "rms_relative_error": fit.rms_relative_error, "points": fit.points}
    return fits


def main(argv=None):
    args, backend, world_size, out_dir = _multi_gpu.parse_arguments(
        argv, __doc__.splitlines()[0],
        "2 CPU processes over gloo at tiny sizes: checks the logic only", "collectives-smoke-")
    if args.cpu_smoke:
        lengths, sizes, repeats = SMOKE_CHECK_LENGTHS, SMOKE_SIZES_BYTES, 2
    else:
        lengths, sizes, repeats = GPU_CHECK_LENGTHS, GPU_SIZES_BYTES, REPEATS

    started = time.monotonic()
    results = run_on_processes(
        benchmark_worker, world_size,
        args=(lengths, CHECK_ROWS_PER_RANK, RAGGED_ROWS, sizes, ALGORITHMS, WARMUP, repeats,
              TARGET_BATCH_S, MAX_BATCH),
        backend=backend, timeout_s=args.timeout)
    elapsed_s = time.monotonic() - started
    rank0 = results[0]
    rows, checks = rank0["timings"], rank0["checks"]

    names = {r["facts"].get("name") for r in results}
    record, name = _multi_gpu.record_start(
        "collectives", results, world_size, backend, args.cpu_smoke,
        ("NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
         "CUDA_VISIBLE_DEVICES"))
    gpu = record["gpu"]
    record.update({
        "topology": topology() if backend == "nccl" else None,
        "method": (f"{world_size} processes, {'one per GPU, ' if backend == 'nccl' else ''}"
                   f"{backend}; builtin = dist.all_reduce, {_builtins()[0].__name__}, "
                   f"{_builtins()[1].__name__}; float32 zeros; {WARMUP} warm-up calls, then median of {repeats} "
                   f"repeats, each timing back-to-back calls covering >= "
                   f"{TARGET_BATCH_S * 1e3:.0f} ms (at most {MAX_BATCH}), "
                   f"{'between CUDA events on the calling stream' if backend == 'nccl' else 'with perf_counter'}"
                   ", after a one-element all-reduce and a device synchronize; a repeat counts "
                   "as its slowest rank; busbw as nccl-tests: algbw x 2(n-1)/n for all-reduce, "
                   "x (n-1)/n for reduce-scatter and all-gather, bytes = the whole tensor; "
                   "checks on random float64 data, tolerance "
                   f"{FLOAT64_TOLERANCE:g} x max|reference|"),
        "wall_s": elapsed_s,
        "checks": checks,
        "fits": fit_all(rows),
        "results": rows,
    })
    path = out_dir / name
    path.write_text(json.dumps(record, indent=1) + "\n")

    failed = [c for c in checks if not c["passed"]]
    print(f"\n{gpu} x {world_size} ({backend}, {elapsed_s:.0f} s): wrote {path}")
    if len(names) > 1:
        print(f"note: the ranks saw different devices: {sorted(map(str, names))}")
    print(f"checks: {len(checks) - len(failed)} of {len(checks)} passed; largest difference "
          f"{max(c['max_abs_diff'] for c in checks):.3g}")
    for c in failed:
        print(f"  FAILED {c['check']} {c['shape']}: {c['max_abs_diff']:.3g}")
    shown = [a for a in ALGORITHMS if any(r["algorithm"] == a for r in rows)]
    print("bus bandwidth, GB/s:")
    print(f"{'bytes':>11} " + " ".join(f"{a[:16]:>16}" for a in shown))
    for size in sizes:
        cells = []
        for algorithm in shown:
            row = next((r for r in rows if r["algorithm"] == algorithm and r["bytes"] == size),
                       None)
            cells.append(f"{row['busbw_bytes_per_s'] / 1e9:16.2f}" if row else f"{'-':>16}")
        print(f"{size:>11} " + " ".join(cells))
    for algorithm, fit in record["fits"].items():
        if "error" in fit:
            print(f"fit {algorithm}: {fit['error']}")
        else:
            print(f"fit {algorithm:>24} ({fit['model']}): latency {fit['latency_s'] * 1e6:8.2f} us, "
                  f"bandwidth {fit['bandwidth_bytes_per_s'] / 1e9:8.2f} GB/s, "
                  f"rms rel. error {fit['rms_relative_error']:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
