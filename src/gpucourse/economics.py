"""Week 7: what a training run costs, and how long it takes.

A training run is a pile of arithmetic (its FLOPs) done by chips that each
sustain some fraction (the model FLOPs utilization, MFU) of their datasheet
peak, on instances rented by the hour. From those four numbers follow the
wall-clock time and the bill:

    wall-clock time = FLOPs / (chips x peak FLOP/s per chip x MFU)
    cost            = instances x price per hour x (1 - spot discount) x hours

This module holds:

* the chips' dense BF16 peaks, from their datasheets;
* dated prices of AWS instance types, each from a public page: AWS's own
  Capacity Blocks price table, or secondary pages that report AWS's
  on-demand prices (their claims, kept as claims). A price is a moving target
  and the sources disagree, so the chapter shows every conclusion across the
  range of prices rather than at one of them; check the provider's page
  before you budget. No public price for a Trainium2 instance was found:
  Trainium2 enters by the price at which it would break even;
* the run estimate, the cost per unit of useful work at any price, the
  break-even price of one chip against another, the cheapest instance
  type for a budget and a deadline, and the break-even point of buying
  hardware instead of renting it;
* the formatters that write money and time for the prose.

The chapter's figures and its ipywidgets panel, in which every input can be
changed, live in ``gpucourse.chapters.economics``; they are still importable
from here, as ``gpucourse.economics.NAME``.

Units are in the names: ``_s`` seconds, ``_usd`` US dollars, ``_per_hour``
per hour of wall-clock time, ``flops_per_s`` floating-point operations per
second. Every public function checks its arguments and raises ``ValueError``
naming the argument and what it accepts.

Only numpy is imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucourse.collectives import H100_BF16_DENSE_FLOPS_PER_S
from gpucourse.checks import (at_least as _at_least, count as _count, fraction as _fraction,
                              positive as _positive, real as _real)
from gpucourse.moved import served_from

SECONDS_PER_HOUR = 3600.0

# -----------------------------------------------------------------------------
# Chips and instances


@dataclass(frozen=True)
class Chip:
    """One accelerator's dense BF16 peak, from its datasheet."""

    name: str
    bf16_flops_per_s: float  # dense (no structured sparsity)
    memory_bytes: float
    source: str  # bib key
    note: str  # what the source prints, and what is derived here


CHIPS = {
    # The H100 datasheet prints 1,979 TFLOPS of BF16 "with sparsity"; dense
    # matrices get half (the same constant the collectives chapter uses).
    "H100": Chip("NVIDIA H100 SXM", H100_BF16_DENSE_FLOPS_PER_S, 80e9, "nvidia_h100_datasheet",
                 "printed: BF16 1,979 TFLOPS with sparsity; dense is half, 989.5 TFLOPS"),
    # AWS Neuron documentation, "Trainium Architecture": two NeuronCore-v2
    # deliver 190 FP16/BF16/cFP8/TF32 TFLOPS; 32 GiB of device memory.
    "Trainium": Chip("AWS Trainium", 190e12, 32 * 2**30, "aws_trainium_arch",
                     "printed: 190 FP16/BF16/cFP8/TF32 TFLOPS, 32 GiB"),
    # AWS Neuron documentation, "Trainium2 Architecture": eight NeuronCore-v3
    # deliver 667 BF16/FP16/TF32 TFLOPS (dense; 2,563 sparse); 96 GiB of HBM.
    "Trainium2": Chip("AWS Trainium2", 667e12, 96 * 2**30, "aws_trainium2_arch",
                      "printed: 667 BF16/FP16/TF32 TFLOPS dense, 96 GiB"),
}


@dataclass(frozen=True)
class Instance:
    """A rentable machine at one price: how many chips of which kind, what an
    hour costs, and where and when that price was published."""

    name: str
    chip: str  # key into CHIPS
    chips: int
    price_per_hour_usd: float  # for the whole instance
    source: str  # bib key
    note: str  # what the source says, in its words where possible
    kind: str = ""  # what sort of price: on demand, Capacity Block, ...
    date: str = ""  # when the price held, as the source dates it (YYYY-MM)

    @property
    def peak_flops_per_s(self) -> float:
        """Dense BF16 peak of all the instance's chips together."""
        return self.chips * CHIPS[self.chip].bf16_flops_per_s

    @property
    def price_per_chip_hour_usd(self) -> float:
        return self.price_per_hour_usd / self.chips


# Dated prices from public pages, one entry per (instance, price). AWS's
# on-demand price list shows only today's prices, so the older on-demand
# figures come from secondary pages, which are quoted as their claims.
# Capacity Blocks are AWS's reserved blocks of accelerator time, priced on
# AWS's own page (in late 2024, "scheduled to be updated on January 1, 2025").
INSTANCES = {
    "p5.48xlarge on demand, list price as quoted": Instance(
        "p5.48xlarge", "H100", 8, 98.32, "usageai_gpu_cost_optimization",
        "secondary source's claim: 'An H100 instance on AWS runs approximately $98.32 per hour' "
        "(the page is undated; other pages date this price before AWS's June 2025 cut)",
        "on demand (as reported)", "n.d."),
    "p5.48xlarge Capacity Block, late 2024": Instance(
        "p5.48xlarge", "H100", 8, 39.33, "aws_capacity_blocks_pricing",
        "AWS: effective instance hourly rate $39.33 ($4.916 per accelerator), US East (N. Virginia)",
        "Capacity Block, us-east-1", "2024-12"),
    "p5.48xlarge on demand, March 2026": Instance(
        "p5.48xlarge", "H100", 8, 8 * 3.90, "costnimbus_gpu_2026",
        "secondary source's claim: AWS EC2 P5 about $3.90 per GPU-hour on demand, after the "
        "June 2025 cut of about 44%", "on demand (as reported)", "2026-03"),
    "trn1.32xlarge on demand": Instance(
        "trn1.32xlarge", "Trainium", 16, 21.50, "usageai_trainium_vs_gpu",
        "secondary source's claim: 'trn1.32xlarge at $21.50/hr' on demand",
        "on demand (as reported)", "2026-06"),
    "trn1.32xlarge Capacity Block, late 2024": Instance(
        "trn1.32xlarge", "Trainium", 16, 15.49, "aws_capacity_blocks_pricing",
        "AWS: effective instance hourly rate $15.49 ($0.968 per accelerator), Asia Pacific (Melbourne)",
        "Capacity Block, ap-southeast-4", "2024-12"),
}

# AWS's announcement of June 2025 (aws_gpu_price_update_2025): prices "up to 45%"
# lower for its P4d, P4de, P5 and P5en instances, On-Demand from June 1, 2025 and
# under Savings Plans bought after June 4. The 45% is the headline's upper bound
# across those four families and both pricing models, not a figure stated for the
# p5.48xlarge On-Demand, so the course uses it only as a bound: a price cut by at
# most 45% keeps at least 55% of the old one. A secondary page reports "about 44%"
# for AWS's H100 instances (costnimbus_gpu_2026). Neither gives the new prices.
AWS_JUNE_2025_CUT_UP_TO = 0.45
AWS_JUNE_2025_P5_CUT_REPORTED = 0.44

# The instance types, whatever their price: (chip, chips per instance). The
# trn2.48xlarge has 16 Trainium2 chips (AWS Neuron documentation, "Amazon EC2
# Trn2 Architecture"); no price for it could be sourced.
INSTANCE_TYPES = {"p5.48xlarge": ("H100", 8), "trn1.32xlarge": ("Trainium", 16),
                  "trn2.48xlarge": ("Trainium2", 16)}


def prices_of(chip) -> list[Instance]:
    """The sourced prices of instances built on `chip` (a key of CHIPS),
    cheapest per chip-hour first; empty for a chip with none (Trainium2)."""
    if chip not in CHIPS:
        raise ValueError(f"chip must be one of {', '.join(CHIPS)}, got {chip!r}")
    return sorted((i for i in INSTANCES.values() if i.chip == chip),
                  key=lambda i: i.price_per_chip_hour_usd)


def _instance(instance) -> Instance:
    if isinstance(instance, Instance):
        if instance.chip not in CHIPS:
            raise ValueError(f"instance.chip must be one of {', '.join(CHIPS)}, got {instance.chip!r}")
        return instance
    if instance not in INSTANCES:
        raise ValueError(f"instance must be an Instance or one of {', '.join(INSTANCES)}, "
                         f"got {instance!r}")
    return INSTANCES[instance]


def custom_instance(name, chip, chips, price_per_hour_usd) -> Instance:
    """An instance of your own: `chips` chips of a kind in `CHIPS` at an hourly price."""
    if chip not in CHIPS:
        raise ValueError(f"chip must be one of {', '.join(CHIPS)}, got {chip!r}")
    return Instance(str(name), chip, _count("chips", chips),
                    _positive("price_per_hour_usd", price_per_hour_usd), "", "user-defined")


# -----------------------------------------------------------------------------
# Time and cost of a run


def run_time_s(total_flops, peak_flops_per_s, mfu):
    """Wall-clock seconds to do `total_flops` at `mfu` of a peak of
    `peak_flops_per_s` (all chips together). MFU must be in (0, 1]."""
    work = _at_least("total_flops", total_flops, 0, array_ok=True)
    peak = _positive("peak_flops_per_s", peak_flops_per_s)
    u = _fraction("mfu", mfu, open_at_zero=True)
    result = work / (peak * u)
    return float(result) if np.ndim(result) == 0 else result


def run_cost_usd(wall_clock_s, price_per_hour_usd, instances=1, spot_discount=0.0):
    """The bill for `instances` machines rented for `wall_clock_s` seconds,
    billed by the second; a spot discount in [0, 1) takes its share off."""
    seconds = _at_least("wall_clock_s", wall_clock_s, 0, array_ok=True)
    price = _at_least("price_per_hour_usd", price_per_hour_usd, 0, array_ok=True)
    n = _count("instances", instances)
    discount = _real("spot_discount", spot_discount)
    if not 0 <= discount < 1:
        raise ValueError(f"spot_discount must be in [0, 1), got {spot_discount!r}")
    result = n * price * (1 - discount) * seconds / SECONDS_PER_HOUR
    return float(result) if np.ndim(result) == 0 else result


@dataclass(frozen=True)
class RunEstimate:
    """One way to do a training run: which instance (its key in INSTANCES, or
    the name of an Instance given directly), how many, how long, how much."""

    instance: str
    instances: int
    chips: int
    mfu: float
    spot_discount: float
    wall_clock_s: float
    cost_usd: float

    @property
    def chip_hours(self) -> float:
        return self.chips * self.wall_clock_s / SECONDS_PER_HOUR

    @property
    def wall_clock_days(self) -> float:
        return self.wall_clock_s / 86_400.0


def estimate_run(total_flops, instance, instances=1, mfu=0.4,
                 spot_discount=0.0) -> RunEstimate:
    """Time and cost of `total_flops` on `instances` machines of one type.

    The chips are assumed to keep the same MFU however many there are: the
    cost of communication is inside the MFU you choose. Under that
    assumption more instances shorten the run but do not change its cost.
    """
    inst = _instance(instance)
    n = _count("instances", instances)
    seconds = run_time_s(total_flops, n * inst.peak_flops_per_s, mfu)
    cost = run_cost_usd(seconds, inst.price_per_hour_usd, n, spot_discount)
    label = instance if isinstance(instance, str) else inst.name  # the key of INSTANCES, if given one
    return RunEstimate(label, n, n * inst.chips, float(mfu), float(spot_discount), seconds, cost)


def cost_per_exaflop_usd(instance, mfu=0.4, spot_discount=0.0) -> float:
    """Dollars per 10^18 useful FLOPs on one instance type: a price-performance
    figure that does not depend on the run."""
    return estimate_run(1e18, instance, 1, mfu, spot_discount).cost_usd


def cost_per_exaflop_at_price_usd(chip, price_per_chip_hour_usd, mfu=0.4):
    """Dollars per 10^18 useful FLOPs on `chip` rented at `price_per_chip_hour_usd`
    (a number or an array of them) and sustaining `mfu` of its dense BF16 peak:
    price / (peak x MFU), straight in the price."""
    if chip not in CHIPS:
        raise ValueError(f"chip must be one of {', '.join(CHIPS)}, got {chip!r}")
    price = _at_least("price_per_chip_hour_usd", price_per_chip_hour_usd, 0, array_ok=True)
    hours = run_time_s(1e18, CHIPS[chip].bf16_flops_per_s, mfu) / SECONDS_PER_HOUR
    result = price * hours
    return float(result) if np.ndim(result) == 0 else result


def break_even_price_per_chip_hour_usd(chip, against_chip, against_price_per_chip_hour_usd,
                                       mfu=0.4, against_mfu=None) -> float:
    """The chip-hour price at which `chip` at `mfu` costs as much per useful
    FLOP as `against_chip` at its price and `against_mfu` (default: the same
    MFU). Cheaper than this, `chip` wins."""
    other_mfu = mfu if against_mfu is None else against_mfu
    theirs = cost_per_exaflop_at_price_usd(against_chip, against_price_per_chip_hour_usd, other_mfu)
    return theirs / cost_per_exaflop_at_price_usd(chip, 1.0, mfu)


def cheapest_instance(total_flops, budget_usd, deadline_s, instances=None, mfu=0.4,
                      spot_discount=0.0, max_instances=1024) -> RunEstimate | None:
    """The cheapest way to finish `total_flops` within a budget and a deadline.

    For each instance type, the fewest machines (at most `max_instances`)
    that finish by `deadline_s`; of those that also cost at most
    `budget_usd`, the cheapest (ties go to the shorter run). None when no
    type meets both. `instances` is a list of keys of `INSTANCES` or
    `Instance` objects (default: every sourced price in `INSTANCES`).
    """
    work = _positive("total_flops", total_flops)
    budget = _positive("budget_usd", budget_usd)
    deadline = _positive("deadline_s", deadline_s)
    cap = _count("max_instances", max_instances)
    candidates = list(INSTANCES) if instances is None else list(instances)
    if not candidates:
        raise ValueError("instances must name at least one instance type")
    best = None
    for candidate in candidates:
        inst = _instance(candidate)
        one_s = run_time_s(work, inst.peak_flops_per_s, mfu)
        needed = max(1, math.ceil(one_s / deadline * (1 - 1e-12)))
        if needed > cap:
            continue
        run = estimate_run(work, candidate, needed, mfu, spot_discount)
        if run.cost_usd > budget:
            continue
        if best is None or (run.cost_usd, run.wall_clock_s) < (best.cost_usd, best.wall_clock_s):
            best = run
    return best


def break_even_hours(purchase_usd, owned_cost_per_hour_usd, cloud_price_per_hour_usd) -> float:
    """Hours of use after which owning hardware is cheaper than renting it.

    Owning costs the purchase plus a running cost per hour (power, cooling,
    staff); renting costs the cloud price per hour. They meet after
    purchase / (cloud price - running cost) hours; inf if renting is never
    dearer per hour.
    """
    purchase = _at_least("purchase_usd", purchase_usd, 0)
    running = _at_least("owned_cost_per_hour_usd", owned_cost_per_hour_usd, 0)
    cloud = _positive("cloud_price_per_hour_usd", cloud_price_per_hour_usd)
    if cloud <= running:
        return math.inf
    return purchase / (cloud - running)


# -----------------------------------------------------------------------------
# Writing money and time for the prose


def format_usd(amount_usd) -> str:
    """12_345.6 -> "$12,346"; 3.2e6 -> "$3.20 million"; 0.456 -> "$0.46"."""
    x = _at_least("amount_usd", amount_usd, 0)
    if x >= 1e6:
        return f"${x / 1e6:.2f} million"
    if x >= 100:
        return f"${x:,.0f}"
    return f"${x:.2f}"


def format_duration(seconds) -> str:
    """Seconds as the largest sensible unit: "3.5 h", "12.1 days", "2.3 years"."""
    s = _at_least("seconds", seconds, 0)
    for unit, size in (("years", 365.25 * 86_400), ("days", 86_400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


# -----------------------------------------------------------------------------
# Figures and the calculator


# The figures and the calculator live with chapter 7 (gpucourse.chapters.economics),
# which imports the estimates above; they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.economics", (
    'plot_instances', 'plot_cost_vs_mfu', 'plot_cost_vs_price', 'calculator',
))
