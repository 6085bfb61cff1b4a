"""Week 1: the arithmetic of high-performance computing.

Everything the first chapter computes lives here, so that the prose, the
figures, the tests and the exercises all read the same numbers:

* the speed-up laws of Amdahl and Gustafson;
* the roofline model, a datasheet table of four GPUs, and the arithmetic
  intensity of matrix multiplication and of attention;
* the compute bill of training a large language model (GPT-3);
* the history of the fastest supercomputers and its exponential trend;
* the energy of arithmetic versus the energy of moving data;
* small formatters that write these numbers for the prose ("1.102 EFLOP/s").

Units are in the names: ``_s`` is seconds, ``_bytes`` is bytes,
``flops_per_s`` is floating-point operations per second, ``_pj`` is
picojoules. Every public function checks its arguments and raises
``ValueError`` naming the argument and what it accepts.

Only numpy is imported here; matplotlib is imported inside the plotting
functions, and nothing of Numba or torch is touched.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from importlib import resources

import numpy as np

from gpucourse.checks import (at_least as _at_least, count as _count, fraction as _fraction,
                              positive as _positive, real as _real,
                              scalar_or_array as _scalar_or_array)

# -----------------------------------------------------------------------------
# Writing numbers for the prose

_SI_PREFIXES = ((1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"),
                (1e3, "k"))
_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def format_si(value, unit, digits=4) -> str:
    """1.102e18, "FLOP/s" -> "1.102 EFLOP/s"; `digits` significant digits."""
    x = _at_least("value", value, 0)
    digits = _count("digits", digits)
    scale, prefix = next(((s, p) for s, p in _SI_PREFIXES if x >= s), (1, ""))
    return f"{x / scale:.{digits}g} {prefix}{unit}"


def format_flops(flops_per_s, digits=4) -> str:
    """A rate in FLOP/s with an SI prefix: 59.7e9 -> "59.7 GFLOP/s"."""
    _at_least("flops_per_s", flops_per_s, 0)
    return format_si(flops_per_s, "FLOP/s", digits)


def format_sci(value, digits=3) -> str:
    """3.15e23 -> "3.15 × 10²³", for numbers too large for SI prefixes."""
    x = _real("value", value)
    digits = _count("digits", digits)
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    return f"{mantissa} × 10{str(int(exponent)).translate(_SUPERSCRIPTS)}"


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


def _plain_log2_ticks(ax):
    """Label base-2 log axes 1, 4, 16, ... rather than 2^0, 2^2, 2^4."""
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)


def plot_amdahl(parallel_fractions=(0.5, 0.9, 0.95, 0.99, 0.999), max_workers=65536, ax=None):
    """Amdahl speed-up against workers (log-log), one curve per parallel fraction,
    each with its ceiling 1 / (1 - p) dotted."""
    import matplotlib.pyplot as plt

    max_workers = _at_least("max_workers", max_workers, 2)
    fractions = [_fraction("parallel_fractions", p) for p in parallel_fractions]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    workers = np.logspace(0, np.log10(max_workers), 200)
    for p in fractions:
        line, = ax.plot(workers, amdahl_speedup(p, workers), lw=2, label=f"p = {p:g}")
        if p < 1:
            ax.axhline(amdahl_limit(p), color=line.get_color(), lw=1, ls=":")
    ax.plot(workers, workers, color="0.5", lw=1, ls="--", label="ideal (p = 1)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(1, max_workers)
    ax.set_ylim(1, max_workers)
    ax.set_xlabel("workers n")
    ax.set_ylabel("speed-up S(n)")
    _plain_log2_ticks(ax)
    ax.set_title("Amdahl's law: a fixed job, more workers")
    ax.legend(title="parallel fraction", loc="upper left", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_gustafson(parallel_fractions=(0.5, 0.9, 0.99), max_workers=1024, ax=None):
    """Gustafson (solid) against Amdahl (dashed) for the same parallel fractions."""
    import matplotlib.pyplot as plt

    max_workers = _at_least("max_workers", max_workers, 2)
    fractions = [_fraction("parallel_fractions", p) for p in parallel_fractions]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    workers = np.logspace(0, np.log10(max_workers), 200)
    for i, p in enumerate(fractions):
        ax.plot(workers, gustafson_speedup(p, workers), lw=2, color=f"C{i}",
                label=f"Gustafson, p = {p:g}")
    for i, p in enumerate(fractions):
        ax.plot(workers, amdahl_speedup(p, workers), lw=2, ls="--", color=f"C{i}",
                label=f"Amdahl, p = {p:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(1, max_workers)
    ax.set_ylim(1, max_workers)
    ax.set_xlabel("workers n")
    ax.set_ylabel("speed-up")
    _plain_log2_ticks(ax)
    ax.set_title("Scaled (Gustafson) versus fixed-size (Amdahl) speed-up")
    ax.legend(loc="upper left", fontsize=9, ncol=2)
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# The roofline model


def roofline(peak_flops_per_s, bandwidth_bytes_per_s, intensity_flop_per_byte):
    """Attainable FLOP/s at an arithmetic intensity (Williams et al., 2009):
    min(peak, bandwidth * intensity). The intensity may be an array."""
    peak = _positive("peak_flops_per_s", peak_flops_per_s)
    bandwidth = _positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    intensity = _at_least("intensity_flop_per_byte", intensity_flop_per_byte, 0, array_ok=True)
    return _scalar_or_array(np.minimum(peak, bandwidth * intensity))


def ridge_point(peak_flops_per_s, bandwidth_bytes_per_s) -> float:
    """The intensity (FLOP/byte) where the memory roof meets the compute roof.
    Kernels below it are memory-bound, kernels above it compute-bound."""
    peak = _positive("peak_flops_per_s", peak_flops_per_s)
    bandwidth = _positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    return peak / bandwidth


def peak_flops_per_s(cores, boost_clock_hz, flops_per_core_per_cycle=2) -> float:
    """Peak FP32 rate from the spec sheet: cores x clock x FLOPs per cycle.
    A fused multiply-add counts as two FLOPs, hence the default of 2."""
    cores = _count("cores", cores)
    clock = _positive("boost_clock_hz", boost_clock_hz)
    per_cycle = _positive("flops_per_core_per_cycle", flops_per_core_per_cycle)
    return cores * clock * per_cycle


def memory_bandwidth_bytes_per_s(bus_width_bits, data_rate_bits_per_s_per_pin) -> float:
    """Peak DRAM bandwidth: (bus width / 8 bits per byte) x per-pin data rate."""
    bus = _count("bus_width_bits", bus_width_bits)
    rate = _positive("data_rate_bits_per_s_per_pin", data_rate_bits_per_s_per_pin)
    return bus / 8 * rate


@dataclass(frozen=True)
class GPU:
    """One GPU's two roofs, FP32 without tensor cores, from its datasheet."""

    name: str
    fp32_flops_per_s: float
    bandwidth_bytes_per_s: float
    memory: str
    source: str  # bib key in book/references.bib
    note: str  # what is printed in the source and what is derived here

    @property
    def ridge_flop_per_byte(self) -> float:
        return ridge_point(self.fp32_flops_per_s, self.bandwidth_bytes_per_s)


# NVIDIA's GeForce page lists cores, boost clock and memory bus rather than
# FLOP/s and GB/s, so the RTX 2050's two roofs are derived here: 2048 CUDA
# cores x 2 FLOP (one FMA) x 1.477 GHz, the top of its 1155-1477 MHz boost
# range (laptop makers choose the power limit, and with it the clock), and a
# 64-bit GDDR6 bus at 14 Gbit/s per pin, the memory speed reported at its
# launch, which gives the 112 GB/s quoted then.
RTX_2050_CUDA_CORES = 2048
RTX_2050_BOOST_CLOCK_HZ = 1.477e9
RTX_2050_BUS_WIDTH_BITS = 64
RTX_2050_DATA_RATE_BITS_PER_S = 14e9

GPUS = {
    "H100": GPU(
        "H100 SXM5 80GB", 67e12, 3.35e12, "80 GB HBM3", "nvidia_h100_datasheet",
        "printed: FP32 67 TFLOPS, GPU memory bandwidth 3.35 TB/s"),
    "A100": GPU(
        "A100 SXM 80GB", 19.5e12, 2.039e12, "80 GB HBM2e", "nvidia_a100_datasheet",
        "printed: FP32 19.5 TFLOPS, GPU memory bandwidth 2,039 GB/s"),
    "RTX A6000": GPU(
        "RTX A6000", 38.7e12, 768e9, "48 GB GDDR6", "nvidia_rtx_a6000_datasheet",
        "printed: single-precision 38.7 TFLOPS, memory bandwidth 768 GB/s"),
    "RTX 2050": GPU(
        "GeForce RTX 2050 (laptop)",
        peak_flops_per_s(RTX_2050_CUDA_CORES, RTX_2050_BOOST_CLOCK_HZ),
        memory_bandwidth_bytes_per_s(RTX_2050_BUS_WIDTH_BITS, RTX_2050_DATA_RATE_BITS_PER_S),
        "4 GB GDDR6", "nvidia_rtx_2050_specs",
        "derived: 2048 cores x 2 FLOP x 1.477 GHz; 64 bit / 8 x 14 Gbit/s"),
}


def matmul_intensity(m, n, k, bytes_per_element=4) -> float:
    """Arithmetic intensity (FLOP/byte) of C = A @ B with A m x k and B k x n.

    2mnk FLOPs (a multiply and an add per term) over the bytes of A, B and C
    each moved once between DRAM and the chip: the ideal, reached only when
    the kernel reuses every element it loads. Real kernels move more.
    """
    m, n, k = _count("m", m), _count("n", n), _count("k", k)
    b = _positive("bytes_per_element", bytes_per_element)
    return 2 * m * n * k / (b * (m * k + k * n + m * n))


# What one kernel does, counted: FLOPs and the bytes it must move between
# memory and the processor at the least (each input read once, each output
# written once). The intensity is the one a perfect cache would give.
KERNELS = ("add", "triad", "matvec", "matmul")


def kernel_counts(kernel, shape, bytes_per_element=8) -> tuple[int, int]:
    """(FLOPs, bytes) of one call of a simple kernel, each array crossing memory once.

    kernel and shape: "add" (n,): c = a + b, n FLOPs, 3n elements moved;
    "triad" (n,): a = b + s c, 2n FLOPs, 3n elements; "matvec" (m, k):
    y = A x, 2mk FLOPs, mk + k + m elements; "matmul" (m, n, k): C = A B,
    2mnk FLOPs, mk + kn + mn elements. Bytes are elements times
    `bytes_per_element` (8 for float64, NumPy's default; 4 for float32).
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    dims = {"add": 1, "triad": 1, "matvec": 2, "matmul": 3}[kernel]
    if isinstance(shape, (str, bytes)) or np.ndim(shape) != 1 or len(shape) != dims:
        raise ValueError(f"shape must hold {dims} whole number(s) for {kernel!r}, got {shape!r}")
    sizes = [_count("shape", size) for size in shape]
    b = _count("bytes_per_element", bytes_per_element)
    if kernel in ("add", "triad"):
        (n,) = sizes
        return (n if kernel == "add" else 2 * n), 3 * n * b
    if kernel == "matvec":
        m, k = sizes
        return 2 * m * k, (m * k + k + m) * b
    m, n, k = sizes
    return 2 * m * n * k, (m * k + k * n + m * n) * b


@dataclass(frozen=True)
class RooflinePlacement:
    """Where one measured kernel sits on a roofline."""

    intensity_flop_per_byte: float
    achieved_flops_per_s: float
    attainable_flops_per_s: float  # the roofline at this intensity
    bound: str  # "memory" (left of the ridge) or "compute" (at or right of it)

    @property
    def fraction_of_attainable(self) -> float:
        return self.achieved_flops_per_s / self.attainable_flops_per_s


def place_on_roofline(flops, bytes_moved, seconds, peak_flops_per_s,
                      bandwidth_bytes_per_s) -> RooflinePlacement:
    """Place a kernel that did `flops` FLOPs and moved `bytes_moved` bytes in
    `seconds` on the roofline of a processor: its intensity, the rate it
    achieved, the roof above it, and which roof that is."""
    flops = _positive("flops", flops)
    bytes_moved = _positive("bytes_moved", bytes_moved)
    seconds = _positive("seconds", seconds)
    intensity = flops / bytes_moved
    attainable = roofline(peak_flops_per_s, bandwidth_bytes_per_s, intensity)
    ridge = ridge_point(peak_flops_per_s, bandwidth_bytes_per_s)
    return RooflinePlacement(intensity, flops / seconds, attainable,
                             "memory" if intensity < ridge else "compute")


def _numpy_kernel(kernel, shape, rng):
    """A call of one of KERNELS on random float64 arrays of `shape`, ready to time."""
    if kernel in ("add", "triad"):
        b, c, out = rng.random(shape), rng.random(shape), np.empty(shape)
        if kernel == "add":
            return lambda: np.add(b, c, out=out)
        return lambda: np.add(b, np.multiply(3.0, c, out=out), out=out)
    if kernel == "matvec":
        a, x = rng.random(shape), rng.random(shape[1])
        return lambda: a @ x
    m, n, k = shape
    a, b = rng.random((m, k)), rng.random((k, n))
    return lambda: a @ b


def time_numpy_kernel(kernel, shape, repeats=5) -> float:
    """Seconds per call of one of KERNELS in NumPy (float64), the fastest of
    `repeats` calls after one warm-up: the least noisy estimate on a busy
    machine. ("triad" is written as two NumPy calls, so it moves more than
    its count; the count is what the kernel needs, not what NumPy does.)"""
    kernel_counts(kernel, shape)  # checks the arguments
    repeats = _count("repeats", repeats)
    run = _numpy_kernel(kernel, tuple(int(s) for s in shape), np.random.default_rng(0))
    run()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def attention_flops(seq_len, head_dim) -> float:
    """FLOPs of one attention head's two matmuls, S = Q K^T and O = P V:
    2 N^2 d each. The softmax adds O(N^2), which we leave out."""
    n, d = _count("seq_len", seq_len), _count("head_dim", head_dim)
    return 4.0 * n * n * d


def standard_attention_intensity(seq_len, head_dim, bytes_per_element=4) -> float:
    """Intensity of one head of attention computed step by step in DRAM.

    Q, K, V are read and O written (4 N d elements); the N x N scores S are
    written, read back by the softmax, whose output P is written and read
    back by P V (4 N^2 elements). For long sequences this tends to
    d / bytes_per_element, whatever N is.
    """
    n, d = _count("seq_len", seq_len), _count("head_dim", head_dim)
    b = _positive("bytes_per_element", bytes_per_element)
    return attention_flops(n, d) / (b * (4 * n * d + 4 * n * n))


def flash_attention_intensity(seq_len, head_dim, bytes_per_element=4) -> float:
    """Intensity of one head of fused (FlashAttention-style) attention, ideal
    case: Q, K, V and O each cross DRAM once and the scores never leave the
    chip, so it grows as N / bytes_per_element."""
    n, d = _count("seq_len", seq_len), _count("head_dim", head_dim)
    b = _positive("bytes_per_element", bytes_per_element)
    return attention_flops(n, d) / (b * 4 * n * d)


@dataclass(frozen=True)
class Workload:
    label: str
    kind: str  # "SGEMV", "SGEMM", "standard attention" or "flash attention"
    intensity_flop_per_byte: float


def example_workloads(attention_seq_lens=(1024, 4096, 16384), head_dim=64, bytes_per_element=4):
    """The kernels placed on the roofline figure, all in FP32."""
    b = bytes_per_element
    workloads = [
        Workload("SGEMV 4096 x 4096", "SGEMV", matmul_intensity(4096, 1, 4096, b)),
        Workload("SGEMM 256³", "SGEMM", matmul_intensity(256, 256, 256, b)),
        Workload("SGEMM 4096³", "SGEMM", matmul_intensity(4096, 4096, 4096, b)),
    ]
    for n in attention_seq_lens:
        workloads.append(Workload(f"attention N={n}, d={head_dim}", "standard attention",
                                  standard_attention_intensity(n, head_dim, b)))
    for n in attention_seq_lens:
        workloads.append(Workload(f"flash attention N={n}, d={head_dim}", "flash attention",
                                  flash_attention_intensity(n, head_dim, b)))
    return workloads


def plot_roofline(gpus=None, workloads=None, placed_on="H100", ax=None):
    """Rooflines of the datasheet GPUs (log-log), with the example workloads
    marked on the roof of `placed_on`."""
    import matplotlib.pyplot as plt

    gpus = GPUS if gpus is None else gpus
    workloads = example_workloads() if workloads is None else workloads
    if placed_on not in gpus:
        raise ValueError(f"placed_on must be one of {sorted(gpus)}, got {placed_on!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.5))
    intensity = np.logspace(-1, 4, 400)
    for gpu in gpus.values():
        attainable = roofline(gpu.fp32_flops_per_s, gpu.bandwidth_bytes_per_s, intensity)
        line, = ax.plot(intensity, attainable, lw=2,
                        label=f"{gpu.name} (ridge {gpu.ridge_flop_per_byte:.0f} FLOP/B)")
        ax.plot(gpu.ridge_flop_per_byte, gpu.fp32_flops_per_s, "o", color=line.get_color(), ms=5)

    # Each kind of kernel gets a marker; the points sit on one GPU's roof.
    roof = gpus[placed_on]
    markers = {"SGEMV": "X", "SGEMM": "s", "standard attention": "^", "flash attention": "D"}
    for kind, marker in markers.items():
        chosen = [w for w in workloads if w.kind == kind]
        if not chosen:
            continue
        x = np.array([w.intensity_flop_per_byte for w in chosen])
        y = roofline(roof.fp32_flops_per_s, roof.bandwidth_bytes_per_s, x)
        ax.scatter(x, y, marker=marker, s=60, color="black", zorder=5,
                   label=f"{kind} on {roof.name}")
    # Matrix kernels are labelled one by one, below the roof; each attention
    # family once, above it, at its middle point.
    for w in workloads:
        if w.kind in ("SGEMV", "SGEMM"):
            y = roofline(roof.fp32_flops_per_s, roof.bandwidth_bytes_per_s,
                         w.intensity_flop_per_byte)
            ax.annotate(w.label, (w.intensity_flop_per_byte, y), textcoords="offset points",
                        xytext=(6, -14), fontsize=8)
    for kind in ("standard attention", "flash attention"):
        family = [w for w in workloads if w.kind == kind]
        if family:
            middle = family[len(family) // 2]
            y = roofline(roof.fp32_flops_per_s, roof.bandwidth_bytes_per_s,
                         middle.intensity_flop_per_byte)
            ax.annotate(kind, (middle.intensity_flop_per_byte, y), textcoords="offset points",
                        xytext=(-8 if kind == "standard attention" else 0, 10),
                        ha="right" if kind == "standard attention" else "center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(intensity[0], intensity[-1])
    ax.set_ylim(1e11, 2e14)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic)")
    ax.set_ylabel("attainable FP32 FLOP/s")
    ax.set_title("Roofline: FP32 (no tensor cores) from the datasheets")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# The compute bill of a large model

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_YEAR = 365.25 * SECONDS_PER_DAY  # a Julian year

# GPT-3 175B (Brown et al., 2020): 175e9 parameters, 300e9 training tokens,
# and Table D.1's total training compute, 3.14e23 FLOP (3,640 PF-days).
GPT3_PARAMS = 175e9
GPT3_TOKENS = 300e9
GPT3_REPORTED_TRAIN_FLOPS = 3.14e23
GPT3_REPORTED_PF_DAYS = 3640
# The V100 rate Lambda used for its "355 years" estimate (Li, 2020).
V100_LAMBDA_FLOPS_PER_S = 28e12
# The GPU count of the supercomputer Microsoft built for OpenAI (Langston, 2020).
OPENAI_2020_GPUS = 10_000
# Model FLOPs utilization reported for PaLM 540B (Chowdhery et al., 2022, Table 3).
PALM_MODEL_FLOPS_UTILIZATION = 0.462


def training_flops(n_params, n_tokens) -> float:
    """Training compute of a dense transformer, about 6 N D FLOPs
    (Kaplan et al., 2020): 2 N per token forward and 4 N backward."""
    n = _positive("n_params", n_params)
    d = _positive("n_tokens", n_tokens)
    return 6.0 * n * d


def training_time_s(total_flops, flops_per_s_per_device, devices=1, utilization=1.0,
                    parallel_fraction=1.0) -> float:
    """Wall-clock seconds to do `total_flops` of work.

    Each device sustains `utilization` of its `flops_per_s_per_device`; the
    devices share the work as Amdahl says, so with `parallel_fraction` = 1
    (the default) the time divides by `devices` exactly.
    """
    work = _at_least("total_flops", total_flops, 0)
    rate = _positive("flops_per_s_per_device", flops_per_s_per_device)
    n = _count("devices", devices)
    u = _fraction("utilization", utilization, open_at_zero=True)
    p = _fraction("parallel_fraction", parallel_fraction)
    one_device_s = work / (rate * u)
    return one_device_s / amdahl_speedup(p, n)


# -----------------------------------------------------------------------------
# Fifty years of the fastest computers

EXASCALE_FLOPS_PER_S = 1e18
ZETTASCALE_FLOPS_PER_S = 1e21


@dataclass(frozen=True)
class Supercomputer:
    name: str
    list_date: str  # the TOP500 list, "YYYY-MM" (June or November)
    rmax_flops_per_s: float  # measured HPL (LINPACK) performance on that list

    @property
    def year(self) -> float:
        """The list date as a fractional year (the middle of its month)."""
        year, month = (int(part) for part in self.list_date.split("-"))
        return year + (month - 0.5) / 12

    @property
    def source(self) -> str:
        year, month = self.list_date.split("-")
        return f"https://top500.org/lists/top500/{year}/{month}/"


# The #1 system of a selection of TOP500 lists (top500.org), Rmax as printed
# on that list. K computer, Summit and Fugaku appear twice: they grew while on
# top.
TOP500_NUMBER_ONE = (
    Supercomputer("CM-5", "1993-06", 59.7e9),
    Supercomputer("ASCI Red", "1997-06", 1.068e12),
    Supercomputer("Earth Simulator", "2002-06", 35.86e12),
    Supercomputer("BlueGene/L", "2004-11", 70.72e12),
    Supercomputer("Roadrunner", "2008-06", 1.026e15),
    Supercomputer("Tianhe-1A", "2010-11", 2.566e15),
    Supercomputer("K computer", "2011-06", 8.162e15),
    Supercomputer("K computer", "2011-11", 10.51e15),
    Supercomputer("Titan", "2012-11", 17.59e15),
    Supercomputer("Tianhe-2", "2013-06", 33.86e15),
    Supercomputer("Sunway TaihuLight", "2016-06", 93.01e15),
    Supercomputer("Summit", "2018-06", 122.3e15),
    Supercomputer("Summit", "2018-11", 143.5e15),
    Supercomputer("Fugaku", "2020-06", 415.5e15),
    Supercomputer("Fugaku", "2020-11", 442.0e15),
    Supercomputer("Frontier", "2022-06", 1.102e18),
    Supercomputer("El Capitan", "2024-11", 1.742e18),
)

# The Cray-1 (1976) predates the TOP500 and has no LINPACK entry there; its
# peak is derived from Russell (1978): a 12.5 ns clock (80 MHz) and separate
# pipelined add and multiply units that each deliver one result per cycle.
CRAY_1_YEAR = 1976
CRAY_1_CLOCK_HZ = 1 / 12.5e-9
CRAY_1_PEAK_FLOPS_PER_S = 2 * CRAY_1_CLOCK_HZ


@dataclass(frozen=True)
class ExponentialTrend:
    """performance = 10 ** (log10_at_reference + log10_per_year * (year - reference_year))"""

    log10_per_year: float
    reference_year: float
    log10_at_reference: float

    @property
    def growth_per_year(self) -> float:
        return 10 ** self.log10_per_year

    @property
    def doubling_time_years(self) -> float:
        return math.log10(2) / self.log10_per_year

    def flops_per_s(self, year):
        year = _real("year", year, array_ok=True)
        return _scalar_or_array(
            10 ** (self.log10_at_reference + self.log10_per_year * (year - self.reference_year)))

    def year_reaching(self, flops_per_s) -> float:
        target = _positive("flops_per_s", flops_per_s)
        if self.log10_per_year <= 0:
            raise ValueError("the trend does not grow, so it never reaches flops_per_s")
        return self.reference_year + (math.log10(target) - self.log10_at_reference) / self.log10_per_year


def fit_exponential_trend(years, flops_per_s) -> ExponentialTrend:
    """Least-squares straight line through log10(performance) against year."""
    x = _real("years", years, array_ok=True)
    y = _positive("flops_per_s", flops_per_s, array_ok=True)
    if np.ndim(x) != 1 or np.shape(x) != np.shape(y):
        raise ValueError(f"years and flops_per_s must be 1-D and of equal length, "
                         f"got shapes {np.shape(x)} and {np.shape(y)}")
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("years must hold at least two different years")
    reference = float(np.mean(x))
    slope, at_reference = np.polyfit(x - reference, np.log10(y), 1)
    return ExponentialTrend(float(slope), reference, float(at_reference))


def top500_trend(systems=TOP500_NUMBER_ONE) -> ExponentialTrend:
    """The exponential trend of the TOP500 #1 entries."""
    return fit_exponential_trend([s.year for s in systems], [s.rmax_flops_per_s for s in systems])


def zettascale_year(systems=TOP500_NUMBER_ONE) -> float:
    """When the TOP500 #1 trend reaches 1e21 FLOP/s."""
    return top500_trend(systems).year_reaching(ZETTASCALE_FLOPS_PER_S)


def plot_top500(systems=TOP500_NUMBER_ONE, until_year=2040, ax=None):
    """The #1 systems on a log scale, the Cray-1, the fitted trend, and the
    exascale and zettascale lines."""
    import matplotlib.pyplot as plt

    until_year = _real("until_year", until_year)
    trend = top500_trend(systems)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.5))
    years = np.array([s.year for s in systems])
    rmax = np.array([s.rmax_flops_per_s for s in systems])
    ax.scatter(years, rmax, color="C0", zorder=5, label="TOP500 #1 (Rmax, HPL)")
    ax.scatter([CRAY_1_YEAR + 0.5], [CRAY_1_PEAK_FLOPS_PER_S], marker="*", s=160, color="C3",
               zorder=5, label="Cray-1 (1976, peak)")
    ax.annotate("Cray-1", (CRAY_1_YEAR + 0.5, CRAY_1_PEAK_FLOPS_PER_S), textcoords="offset points",
                xytext=(8, -4), fontsize=8)
    # Label each system once, at its first appearance, alternating sides to avoid overlaps.
    labelled = set()
    for s in systems:
        if s.name in labelled:
            continue
        labelled.add(s.name)
        above = len(labelled) % 2 == 1
        ax.annotate(s.name, (s.year, s.rmax_flops_per_s), textcoords="offset points",
                    xytext=(-6, 8) if above else (6, -12), ha="right" if above else "left",
                    fontsize=8)
    fit_years = np.linspace(CRAY_1_YEAR, until_year, 200)
    zetta = trend.year_reaching(ZETTASCALE_FLOPS_PER_S)
    ax.plot(fit_years, trend.flops_per_s(fit_years), color="0.4", ls="--", lw=1.5,
            label=f"fit to #1: x{trend.growth_per_year:.2f} per year")
    ax.axhline(EXASCALE_FLOPS_PER_S, color="C2", lw=1, ls=":", label="exascale, 1e18 FLOP/s")
    ax.axhline(ZETTASCALE_FLOPS_PER_S, color="C1", lw=1, ls=":", label="zettascale, 1e21 FLOP/s")
    ax.axvline(zetta, color="C1", lw=1, ls="-.", label=f"trend reaches zettascale: {zetta:.0f}")
    ax.set_yscale("log")
    ax.set_xlim(CRAY_1_YEAR - 2, until_year)
    ax.set_ylim(1e7, 1e22)
    ax.set_xlabel("year")
    ax.set_ylabel("FLOP/s (64-bit)")
    ax.set_title("The fastest computers, 1976 to today, and where the trend goes")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# The energy of computing and of moving data

# Energy per operation in a 45 nm process at 0.9 V (Horowitz, ISSCC 2014), in
# picojoules. The arithmetic entries are printed in the paper. Horowitz gives
# memory per 64-bit access (8 KB SRAM 10 pJ, DRAM 1.3-2.6 nJ); the 32-bit
# figures below are the halved values tabulated by Han et al. (2015).
ENERGY_45NM_PJ = {
    "32-bit int add": 0.1,
    "32-bit float add": 0.9,
    "32-bit int multiply": 3.1,
    "32-bit float multiply": 3.7,
    "32-bit SRAM read (8 KB)": 5.0,
    "32-bit DRAM read": 640.0,
}


def energy_ratio(numerator, denominator, table=None) -> float:
    """How many times more energy operation `numerator` takes than `denominator`."""
    table = ENERGY_45NM_PJ if table is None else table
    for name, key in (("numerator", numerator), ("denominator", denominator)):
        if key not in table:
            raise ValueError(f"{name} must be one of {list(table)}, got {key!r}")
    return table[numerator] / table[denominator]


def dram_energy_share(intensity_flop_per_byte):
    """Share of the energy spent reading operands from DRAM, at an intensity.

    Per FLOP, arithmetic costs the mean of a 32-bit float add and multiply
    (an FMA is one of each and counts as two FLOPs), and data costs one
    32-bit DRAM read per 4 bytes spread over `intensity` FLOPs per byte.
    """
    intensity = _positive("intensity_flop_per_byte", intensity_flop_per_byte, array_ok=True)
    compute_pj = (ENERGY_45NM_PJ["32-bit float add"] + ENERGY_45NM_PJ["32-bit float multiply"]) / 2
    data_pj = ENERGY_45NM_PJ["32-bit DRAM read"] / 4 / intensity
    return _scalar_or_array(data_pj / (data_pj + compute_pj))


def energy_break_even_intensity() -> float:
    """The intensity (FLOP/byte) at which DRAM traffic and arithmetic cost the
    same energy, by the 45 nm table."""
    compute_pj = (ENERGY_45NM_PJ["32-bit float add"] + ENERGY_45NM_PJ["32-bit float multiply"]) / 2
    return ENERGY_45NM_PJ["32-bit DRAM read"] / 4 / compute_pj


def plot_energy(table=None, ax=None):
    """Energy per operation on a log scale, cheapest at the top."""
    import matplotlib.pyplot as plt

    table = ENERGY_45NM_PJ if table is None else table
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    names = list(table)
    energies = np.array([_positive(f"table[{name!r}]", table[name]) for name in names])
    colours = ["C3" if "DRAM" in n else "C1" if "SRAM" in n else "C0" for n in names]
    rows = np.arange(len(names))
    ax.barh(rows, energies, color=colours)
    for row, energy in zip(rows, energies):
        ax.text(energy * 1.15, row, f"{energy:g} pJ", va="center", fontsize=9)
    ax.set_yticks(rows, names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(0.05, energies.max() * 8)
    ax.set_xlabel("energy per operation (pJ, log scale)")
    ax.set_title("Arithmetic is cheap, moving data is not (45 nm, Horowitz 2014)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax
