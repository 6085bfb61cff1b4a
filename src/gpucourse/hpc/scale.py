"""The scale of computing: the compute bill of a large model, fifty years of
the fastest computers, and the energy of arithmetic and of moving data.

These are the chapter's back-of-the-envelope numbers: the 6 N D rule for the
floating-point operations of training (checked against GPT-3's reported
bill), the TOP500 number ones as data with their exponential trend and the
year it reaches a zettaflop, and the energy table of a 45 nm chip, which shows
why moving data, not computing on it, sets the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucourse.checks import (
    at_least as _at_least, count as _count, fraction as _fraction, positive as _positive,
    real as _real, scalar_or_array as _scalar_or_array,
)
from gpucourse.hpc.speedup import amdahl_speedup


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
