"""The roofline model: is a kernel limited by arithmetic or by memory traffic?

A GPU's peak arithmetic rate and its memory bandwidth, from its datasheet,
draw a roof; a kernel's arithmetic intensity (floating-point operations per
byte moved) says under which part of the roof it sits. This module holds the
model, a table of four GPUs, the intensity of the chapter's kernels (vector
add, triad, matrix-vector, matrix multiplication, standard and flash
attention), and NumPy timings that place real kernels on the roof.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from gpucourse.checks import (
    at_least as _at_least, count as _count, positive as _positive,
    scalar_or_array as _scalar_or_array,
)


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
