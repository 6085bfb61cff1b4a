"""How much faster more workers make a job: Amdahl, Gustafson, and a measurement.

The two speed-up laws are a few lines each; what makes this module longer is
the measurement that tests them. A small pure-Python job, run on one and on
several processes, gives real speed-ups, and the laws are fitted to those
(with the Karp-Flatt metric, which reads the serial fraction back out of a
measured speed-up). The laws and their measurement sit together because the
chapter's point is the gap between them.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from importlib import resources

import numpy as np

from gpucourse.checks import (
    at_least as _at_least, count as _count, fraction as _fraction, positive as _positive,
    scalar_or_array as _scalar_or_array,
)


# -----------------------------------------------------------------------------
# Amdahl and Gustafson


def amdahl_speedup(parallel_fraction, workers):
    """Speed-up of a fixed-size job on `workers` workers (Amdahl, 1967).

    A fraction `parallel_fraction` of the one-worker run time divides
    perfectly among the workers and the rest stays serial:
    S = 1 / ((1 - p) + p / n). `workers` may be a number or an array (for
    plotting); it need not be whole, but must be >= 1.
    """
    p = _fraction("parallel_fraction", parallel_fraction)
    n = _at_least("workers", workers, 1, array_ok=True)
    return _scalar_or_array(1.0 / ((1.0 - p) + p / n))


def amdahl_limit(parallel_fraction) -> float:
    """The speed-up with infinitely many workers, 1 / (1 - p); inf when p = 1."""
    p = _fraction("parallel_fraction", parallel_fraction)
    return math.inf if p == 1 else 1.0 / (1.0 - p)


def amdahl_workers_needed(parallel_fraction, target_speedup) -> int:
    """The fewest whole workers whose Amdahl speed-up reaches `target_speedup`.

    Solving 1 / ((1 - p) + p / n) = S for n gives n = p / (1/S - (1 - p)),
    which exists only while S is below Amdahl's limit 1 / (1 - p).
    """
    p = _fraction("parallel_fraction", parallel_fraction)
    target = _at_least("target_speedup", target_speedup, 1)
    limit = amdahl_limit(p)
    if target == 1:
        return 1
    if target >= limit:
        raise ValueError(f"target_speedup must be below Amdahl's limit "
                         f"1 / (1 - parallel_fraction) = {limit:g}, got {target_speedup!r}")
    exact = p / (1.0 / target - (1.0 - p))
    n = max(1, math.ceil(exact))
    # Round-off can lift an exactly whole answer by a hair (19 becomes
    # 19.000000000000004 and rounds up to 20); step back when one fewer worker
    # already reaches the target.
    if n > 1 and amdahl_speedup(p, n - 1) >= target * (1 - 1e-12):
        n -= 1
    return n


def gustafson_speedup(parallel_fraction, workers):
    """Scaled speed-up when the job grows with the machine (Gustafson, 1988).

    Here `parallel_fraction` is the share of the time *on the parallel
    machine* spent in parallel work; one worker would need (1 - p) + p * n
    times as long to do the same, larger job. `workers` may be an array.
    """
    p = _fraction("parallel_fraction", parallel_fraction)
    n = _at_least("workers", workers, 1, array_ok=True)
    return _scalar_or_array((1.0 - p) + p * n)


# -----------------------------------------------------------------------------
# A small real workload, to measure speed-ups rather than assume them
#
# The job has a serial part, run in the calling process, and a parallel part
# split into `workers` equal chunks that as many processes run at once. Both
# parts are chains of a linear congruential generator in pure Python: each
# step needs the step before (so a chain cannot be split), every step costs
# the same on any core, and the interpreter lock keeps threads from running
# them in parallel, so only processes help. Everything else a real parallel
# program pays, starting the chunks and collecting their results, is paid
# here too, which is why measured speed-ups fall below Amdahl's curve.

SPEEDUP_RECORD = "speedups_recorded.json"
SCALINGS = ("strong", "weak")


def lcg_chain(steps, seed=1) -> int:
    """Run a 31-bit linear congruential generator `steps` steps from `seed`
    and return where it ends: pure-Python arithmetic of fixed cost per step."""
    x = int(seed)
    for _ in range(int(steps)):
        x = (1103515245 * x + 12345) & 0x7FFFFFFF
    return x


def _lcg_chunk(args) -> int:
    return lcg_chain(*args)


def _split(total, parts):
    """`total` steps as `parts` chunks whose sizes differ by at most one."""
    base, extra = divmod(total, parts)
    return [base + 1 if i < extra else base for i in range(parts)]


def time_scaling_job(pool, workers, serial_steps, parallel_steps) -> float:
    """Wall-clock seconds of one run of the job: `serial_steps` in this
    process, then `parallel_steps` split into `workers` chunks, each run by
    one process of `pool` (a multiprocessing pool of at least `workers`
    processes)."""
    workers = _count("workers", workers)
    serial_steps = int(_at_least("serial_steps", serial_steps, 0))
    parallel_steps = int(_at_least("parallel_steps", parallel_steps, 0))
    chunks = [(size, seed + 2) for seed, size in enumerate(_split(parallel_steps, workers))]
    start = time.perf_counter()
    lcg_chain(serial_steps)
    pool.map(_lcg_chunk, chunks, chunksize=1)
    return time.perf_counter() - start


@dataclass(frozen=True)
class SpeedupMeasurement:
    """Measured speed-ups of the scaling job on one machine.

    scaling: "strong" (the same job on more workers: Amdahl's setting) or
    "weak" (the parallel part grows with the workers: Gustafson's).
    workers, times_s and speedups are arrays of equal length: the median
    wall time of the job on that many workers, and the one-worker time of
    the same job divided by it.
    """

    scaling: str
    workers: np.ndarray
    times_s: np.ndarray
    one_worker_times_s: np.ndarray
    speedups: np.ndarray
    serial_steps: int
    parallel_steps: int  # in all (strong) or per worker (weak)
    machine: str
    date: str
    method: str


def _machine_description() -> str:
    import os
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), model)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{model}, {usable} logical CPUs usable, {platform.system()}, "
            f"Python {platform.python_version()}")


def measure_speedups(worker_counts=(1, 2), scaling="strong", serial_steps=200_000,
                     parallel_steps=2_000_000, repeats=3) -> SpeedupMeasurement:
    """Time the scaling job on each number of workers and return the speed-ups.

    Strong scaling splits `parallel_steps` among the workers; weak scaling
    gives each worker `parallel_steps`, so the job grows with them, and its
    speed-up compares with the same, larger job on one worker (Gustafson's
    scaled speed-up). Each time is the median of `repeats` runs, taken in
    turns over the worker counts so that a busy moment of the machine spreads
    over all of them. The processes start (with "spawn") and warm up before
    any timing, and are stopped at the end, whatever happens.
    """
    import multiprocessing
    from datetime import date

    counts = [_count("worker_counts", n) for n in worker_counts]
    if not counts or len(set(counts)) != len(counts):
        raise ValueError(f"worker_counts must be distinct whole numbers >= 1, "
                         f"got {worker_counts!r}")
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {scaling!r}")
    serial_steps = int(_at_least("serial_steps", serial_steps, 0))
    parallel_steps = _count("parallel_steps", parallel_steps)
    repeats = _count("repeats", repeats)

    def job_steps(n):
        return parallel_steps * n if scaling == "weak" else parallel_steps

    times = {n: [] for n in counts}
    one_worker = {n: [] for n in counts}
    with multiprocessing.get_context("spawn").Pool(max(counts)) as pool:
        pool.map(_lcg_chunk, [(50_000, 1)] * (2 * max(counts)), chunksize=1)  # warm up
        for _ in range(repeats):
            if scaling == "strong":  # one job for every n, so one one-worker time per round
                baseline = time_scaling_job(pool, 1, serial_steps, parallel_steps)
            for n in counts:
                if scaling == "strong" and n == 1:  # the baseline itself: a speed-up of exactly 1
                    times[n].append(baseline)
                else:
                    times[n].append(time_scaling_job(pool, n, serial_steps, job_steps(n)))
                one_worker[n].append(baseline if scaling == "strong" else
                                     time_scaling_job(pool, 1, serial_steps, job_steps(n)))
    workers = np.array(counts)
    times_s = np.array([np.median(times[n]) for n in counts])
    one_worker_s = np.array([np.median(one_worker[n]) for n in counts])
    method = (f"gpucourse.hpc.measure_speedups({counts}, {scaling!r}, serial_steps={serial_steps}, "
              f"parallel_steps={parallel_steps}, repeats={repeats}): median wall time "
              "(time.perf_counter) of the job, worker counts timed in turns; speed-up = "
              "one-worker time of the same job / time on n workers")
    return SpeedupMeasurement(scaling, workers, times_s, one_worker_s, one_worker_s / times_s,
                              serial_steps, parallel_steps, _machine_description(),
                              date.today().isoformat(), method)


def speedup_record(measurements) -> dict:
    """Measurements as the JSON-ready dict that `recorded_speedups` reads."""
    return {m.scaling: {"workers": m.workers.tolist(), "times_s": m.times_s.tolist(),
                        "one_worker_times_s": m.one_worker_times_s.tolist(),
                        "speedups": m.speedups.tolist(), "serial_steps": m.serial_steps,
                        "parallel_steps": m.parallel_steps, "machine": m.machine,
                        "date": m.date, "method": m.method}
            for m in measurements}


def recorded_speedups(scaling="strong") -> SpeedupMeasurement:
    """The speed-ups of the scaling job measured once on a machine with 16 logical CPUs and
    shipped with the course (gpucourse/data/speedups_recorded.json): a
    2-core laptop cannot show how they bend."""
    if scaling not in SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(SCALINGS)}, got {scaling!r}")
    text = resources.files("gpucourse").joinpath("data", SPEEDUP_RECORD).read_text(encoding="utf-8")
    entry = json.loads(text)[scaling]
    return SpeedupMeasurement(scaling, np.array(entry["workers"]), np.array(entry["times_s"]),
                              np.array(entry["one_worker_times_s"]), np.array(entry["speedups"]),
                              entry["serial_steps"], entry["parallel_steps"], entry["machine"],
                              entry["date"], entry["method"])



def _scaling_data(workers, speedups):
    """Workers and speed-ups as equal-length float arrays, at least one n > 1."""
    n = _at_least("workers", workers, 1, array_ok=True)
    speedup = _positive("speedups", speedups, array_ok=True)
    if n.ndim != 1 or speedup.shape != n.shape:
        raise ValueError(f"workers and speedups must be 1-D arrays of equal length, got shapes "
                         f"{np.shape(workers)} and {np.shape(speedups)}")
    if not np.any(n > 1):
        raise ValueError("workers must include a count above 1: one worker says nothing about "
                         f"the parallel fraction, got {workers!r}")
    return n, speedup


def fit_amdahl(workers, speedups) -> float:
    """The parallel fraction p that best explains measured strong-scaling speed-ups.

    Amdahl's law says the time on n workers, as a share of the time on one,
    is 1 / S = 1 - p (1 - 1/n): a straight line through the origin in
    x = 1 - 1/n against y = 1 - 1/S. The least-squares slope of that line,
    p = sum(x y) / sum(x^2), is the fit (residuals are measured in time, where
    the measurement was taken), clipped to [0, 1].
    """
    n, speedup = _scaling_data(workers, speedups)
    x, y = 1 - 1 / n, 1 - 1 / speedup
    return float(np.clip(np.sum(x * y) / np.sum(x * x), 0.0, 1.0))


def fit_gustafson(workers, speedups) -> float:
    """The parallel fraction p that best explains measured weak-scaling (scaled) speed-ups.

    Gustafson's law S = 1 + p (n - 1) is a straight line through (1, 1); its
    least-squares slope p = sum((n - 1)(S - 1)) / sum((n - 1)^2), clipped to
    [0, 1], is the fit.
    """
    n, speedup = _scaling_data(workers, speedups)
    x, y = n - 1, speedup - 1
    return float(np.clip(np.sum(x * y) / np.sum(x * x), 0.0, 1.0))


def karp_flatt(workers, speedups):
    """The experimentally determined serial fraction (Karp and Flatt, 1990) of
    each measurement with more than one worker: e = (1/S - 1/n) / (1 - 1/n).

    Amdahl's law with serial fraction 1 - p gives e = 1 - p at every n; an e
    that grows with n reveals costs that grow with the workers (starting
    them, collecting results, sharing the cores), which Amdahl's law leaves
    out. Returns an array, one value per count above 1 (counts of 1 are skipped).
    """
    n, speedup = _scaling_data(workers, speedups)
    keep = n > 1
    n, speedup = n[keep], speedup[keep]
    return (1 / speedup - 1 / n) / (1 - 1 / n)
