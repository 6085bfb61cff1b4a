"""Measuring the collectives on real processes.

A worker for ``gpucourse.distributed.run_on_processes`` times each collective
(the course's ring, the naive one and torch's built-in) over a range of
message sizes, after checking that they agree with the built-in on awkward
lengths. The lab function runs both on a few world sizes, which is what the
chapter's measured-versus-model figure is drawn from.
"""

from __future__ import annotations

import statistics
import time

from gpucourse.checks import count as _count, whole_at_least as _whole_at_least
from gpucourse.collectives.ring import ring_all_reduce, naive_all_reduce


# -----------------------------------------------------------------------------
# Measuring the collectives (a worker for gpucourse.distributed.run_on_processes)

TIMED = ("ring", "naive", "builtin")
DEFAULT_SIZES_BYTES = tuple(8 * 4 ** k for k in range(11)) + (16 * 2 ** 20,)  # 8 B ... 16 MiB


def time_collectives(rank, world_size, sizes_bytes=DEFAULT_SIZES_BYTES, algorithms=TIMED,
                     repeats=5, warmup=1):
    """Time all-reduces of float32 tensors of each size; runs on every rank.

    Meant for ``run_on_processes(time_collectives, N, args=(sizes, ...))``.
    For each algorithm ("ring" = ``ring_all_reduce``, "naive" =
    ``naive_all_reduce``, "builtin" = ``dist.all_reduce``) and size: ``warmup``
    untimed calls, then ``repeats`` timed ones, each started together after a
    barrier and timed with ``time.perf_counter``. A repeat takes as long as its
    slowest rank (the maximum over ranks); the result is the median over
    repeats. Every rank returns the same list of rows
    ``{"algorithm", "world_size", "bytes", "seconds"}``. CPU only, no CUDA.
    """
    import torch
    import torch.distributed as dist

    sizes = [_whole_at_least("sizes_bytes", s, 4) for s in sizes_bytes]
    if any(s % 4 for s in sizes):
        raise ValueError(f"sizes_bytes must be multiples of 4 (float32 elements), got {sizes}")
    unknown = [a for a in algorithms if a not in TIMED]
    if unknown or not algorithms:
        raise ValueError(f"algorithms must be some of {', '.join(TIMED)}, got {list(algorithms)}")
    repeats = _count("repeats", repeats)
    warmup = _whole_at_least("warmup", warmup, 0)
    run = {"ring": ring_all_reduce, "naive": naive_all_reduce, "builtin": dist.all_reduce}

    local = []  # (algorithm, size, seconds) of every timed repeat, on this rank
    for algorithm in algorithms:
        for size in sizes:
            x = torch.ones(size // 4, dtype=torch.float32)
            for repeat in range(warmup + repeats):
                dist.barrier()
                start = time.perf_counter()
                run[algorithm](x)
                elapsed = time.perf_counter() - start
                if repeat >= warmup:
                    local.append((algorithm, size, elapsed))
    # One MAX reduction at the end, so that gathering the timings never
    # disturbs them.
    slowest = torch.tensor([seconds for *_, seconds in local], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    rows = []
    for i in range(0, len(local), repeats):
        algorithm, size, _ = local[i]
        rows.append({"algorithm": algorithm, "world_size": world_size, "bytes": size,
                     "seconds": statistics.median(slowest[i:i + repeats].tolist())})
    return rows


def measure_collectives(world_sizes=(2, 4), sizes_bytes=DEFAULT_SIZES_BYTES, algorithms=TIMED,
                        repeats=5, warmup=1, timeout_s=300.0):
    """Run ``time_collectives`` on each world size (one launch each, gloo on CPU)
    and return all rows together."""
    from gpucourse.distributed import run_on_processes

    rows = []
    for n in world_sizes:
        n = _whole_at_least("world_sizes", n, 2)
        rows += run_on_processes(time_collectives, n, args=(tuple(sizes_bytes), tuple(algorithms),
                                                            repeats, warmup),
                                 timeout_s=timeout_s)[0]
    return rows


def compare_with_builtin(rank, world_size, lengths=(1, 3, 8, 13, 1000), seed=0):
    """On every rank: all-reduce random float64 tensors of each length with
    ``ring_all_reduce``, ``naive_all_reduce`` and ``dist.all_reduce``, and
    return rows ``{"world_size", "length", "algorithm", "max_abs_diff"}``, the
    largest difference from the built-in over all ranks (0 is exact)."""
    import torch
    import torch.distributed as dist

    lengths = [_whole_at_least("lengths", n, 1) for n in lengths]
    generator = torch.Generator().manual_seed(int(seed) * 1000 + rank)
    rows = []
    for length in lengths:
        x = torch.randn(length, dtype=torch.float64, generator=generator)
        reference = x.clone()
        dist.all_reduce(reference)
        for name, function in (("ring", ring_all_reduce), ("naive", naive_all_reduce)):
            difference = (function(x.clone()) - reference).abs().max().reshape(1)
            dist.all_reduce(difference, op=dist.ReduceOp.MAX)
            rows.append({"world_size": world_size, "length": length, "algorithm": name,
                         "max_abs_diff": difference.item()})
    return rows


def check_and_time(rank, world_size, lengths, sizes_bytes, algorithms, repeats, warmup):
    """``compare_with_builtin`` then ``time_collectives``, in one launch."""
    return {"checks": compare_with_builtin(rank, world_size, lengths),
            "timings": time_collectives(rank, world_size, sizes_bytes, algorithms, repeats,
                                        warmup)}


def run_collectives_lab(world_sizes=(2, 4), lengths=(1, 3, 8, 13, 1000),
                        sizes_bytes=DEFAULT_SIZES_BYTES, algorithms=TIMED, repeats=3, warmup=1,
                        timeout_s=300.0):
    """The chapter's experiment: for each world size, one launch of gloo
    processes that checks the collectives against ``dist.all_reduce`` and then
    times them. Returns ``{"checks": [...], "timings": [...]}``."""
    from gpucourse.distributed import run_on_processes

    result = {"checks": [], "timings": []}
    for n in world_sizes:
        n = _whole_at_least("world_sizes", n, 2)
        rank0 = run_on_processes(check_and_time, n, args=(tuple(lengths), tuple(sizes_bytes),
                                                          tuple(algorithms), repeats, warmup),
                                 timeout_s=timeout_s)[0]
        result["checks"] += rank0["checks"]
        result["timings"] += rank0["timings"]
    return result
