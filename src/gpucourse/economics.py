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
* figures and an ipywidgets panel in which every input can be changed.

Units are in the names: ``_s`` seconds, ``_usd`` US dollars, ``_per_hour``
per hour of wall-clock time, ``flops_per_s`` floating-point operations per
second. Every public function checks its arguments and raises ``ValueError``
naming the argument and what it accepts.

Only numpy is imported here; matplotlib and ipywidgets are imported inside
the functions that draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucourse.collectives import H100_BF16_DENSE_FLOPS_PER_S
from gpucourse.checks import (at_least as _at_least, count as _count, fraction as _fraction,
                              positive as _positive, real as _real)

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

# AWS's own announcement of June 2025: On-Demand prices of P5 (H100) instances
# cut by "up to 45%" from June 1, 2025 (aws_gpu_price_update_2025). It gives the
# size of the cut, not the new prices.
AWS_JUNE_2025_P5_CUT = 0.45

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


def plot_instances(total_flops, mfu=0.4, instances=None, n_instances=None, spot_discount=0.0,
                   axes=None):
    """Two bar charts side by side: the cost of the run and its wall-clock
    time, for each instance type (`n_instances` machines of each; default 1)."""
    import matplotlib.pyplot as plt

    keys = list(INSTANCES) if instances is None else list(instances)
    chosen = [_instance(i) for i in keys]
    counts = [1] * len(chosen) if n_instances is None else [_count("n_instances", n) for n in n_instances]
    if len(counts) != len(chosen):
        raise ValueError(f"n_instances must have one count per instance ({len(chosen)}), "
                         f"got {len(counts)}")
    runs = [estimate_run(total_flops, key, n, mfu, spot_discount) for key, n in zip(keys, counts)]
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    labels = [f"{inst.name}\n{inst.kind}\n{inst.date} × {r.instances}" if inst.kind
              else f"{inst.name}\n× {r.instances}" for inst, r in zip(chosen, runs)]
    colours = ["C2" if inst.chip == "H100" else "C1" for inst in chosen]
    costs = [r.cost_usd for r in runs]
    days = [r.wall_clock_days for r in runs]
    axes[0].bar(labels, costs, color=colours)
    for i, c in enumerate(costs):
        axes[0].text(i, c, format_usd(c), ha="center", va="bottom", fontsize=9)
    from matplotlib.ticker import FuncFormatter

    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda value, _: format_usd(max(value, 0.0))))
    axes[0].set_ylabel("cost (US$)")
    axes[0].set_title("cost of the run")
    axes[0].set_ylim(0, max(costs) * 1.2)
    axes[1].bar(labels, days, color=colours)
    for i, d in enumerate(days):
        axes[1].text(i, d, format_duration(d * 86_400), ha="center", va="bottom", fontsize=9)
    axes[1].set_ylabel("wall-clock time (days)")
    axes[1].set_title("time to train")
    axes[1].set_ylim(0, max(days) * 1.2)
    for ax in axes:
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return axes


def plot_cost_vs_mfu(total_flops, instances=None, mfus=None, spot_discount=0.0, ax=None):
    """The cost of a run against MFU, one curve per instance type (log scale)."""
    import matplotlib.pyplot as plt

    chosen = [_instance(i) for i in (list(INSTANCES) if instances is None else instances)]
    mfus = np.linspace(0.1, 0.7, 61) if mfus is None else np.asarray(mfus, dtype=float)
    for u in mfus:
        _fraction("mfus", u, open_at_zero=True)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for inst in chosen:
        costs = [estimate_run(total_flops, inst, 1, u, spot_discount).cost_usd for u in mfus]
        when = f", {inst.kind}, {inst.date}" if inst.kind else ""
        ax.plot(mfus, costs, lw=2, label=f"{inst.name} ({inst.chips} × {inst.chip}{when})")
    ax.set_yscale("log")
    ax.set_xlabel("model FLOPs utilization (MFU)")
    ax.set_ylabel("cost of the run (US$, log scale)")
    ax.set_title("Cost falls as 1 / MFU: utilization is money")
    ax.legend(fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def plot_cost_vs_price(mfu=0.4, prices_per_chip_hour_usd=None, ax=None):
    """Dollars per 10^18 useful FLOPs against the price of a chip-hour, one line
    per chip (log-log), with every sourced price of `INSTANCES` marked on its
    chip's line. Where a vertical line crosses two chips' lines the lower one is
    cheaper at that price; a chip with no sourced price (Trainium2) is a line
    only."""
    import matplotlib.pyplot as plt

    prices = (np.geomspace(0.3, 30, 200) if prices_per_chip_hour_usd is None
              else np.asarray(prices_per_chip_hour_usd, dtype=float))
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    markers = {"on demand (as reported)": "o"}
    for colour, chip in enumerate(CHIPS):
        ax.plot(prices, cost_per_exaflop_at_price_usd(chip, prices, mfu), color=f"C{colour}", lw=2,
                label=f"{CHIPS[chip].name}")
        for inst in prices_of(chip):
            x = inst.price_per_chip_hour_usd
            ax.plot(x, cost_per_exaflop_at_price_usd(chip, x, mfu), markers.get(inst.kind, "s"),
                    color=f"C{colour}", ms=8, mec="black")
            ax.annotate(f"{inst.kind}, {inst.date}", (x, cost_per_exaflop_at_price_usd(chip, x, mfu)),
                        textcoords="offset points", xytext=(6, -10), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("price of one chip for one hour (US$)")
    ax.set_ylabel(f"US$ per 10^18 useful FLOP (MFU {100 * mfu:.0f}%)")
    ax.set_title("Cost per useful FLOP against price (marks: sourced prices)")
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    return ax


def calculator(total_flops=None):
    """An ipywidgets panel: every input of the estimate can be changed, and the
    cost, time and cheapest choice update. Needs a running kernel."""
    import ipywidgets as widgets
    from IPython.display import display

    from gpucourse.hpc import GPT3_PARAMS, GPT3_TOKENS, training_flops

    default_flops = training_flops(GPT3_PARAMS, GPT3_TOKENS) if total_flops is None else total_flops
    style = {"description_width": "170px"}
    layout = widgets.Layout(width="480px")
    # Fine steps of the exponent, so that the sliders start at GPT-3's own
    # 175B parameters and 300B tokens (a coarse step snaps them to 178 and 316).
    params_b = widgets.FloatLogSlider(value=GPT3_PARAMS / 1e9, base=10, min=-1, max=3.5, step=0.001,
                                      description="parameters (billions)", style=style, layout=layout)
    tokens_b = widgets.FloatLogSlider(value=GPT3_TOKENS / 1e9, base=10, min=0, max=5, step=0.001,
                                      description="tokens (billions)", style=style, layout=layout)
    mfu = widgets.FloatSlider(value=0.4, min=0.05, max=1.0, step=0.01, description="MFU",
                              style=style, layout=layout)
    spot = widgets.FloatSlider(value=0.0, min=0.0, max=0.9, step=0.05, description="spot discount",
                               style=style, layout=layout)
    budget = widgets.FloatLogSlider(value=5e6, base=10, min=3, max=9, step=0.1,
                                    description="budget (US$)", style=style, layout=layout)
    deadline = widgets.FloatLogSlider(value=30, base=10, min=0, max=3, step=0.05,
                                      description="deadline (days)", style=style, layout=layout)
    prices = {name: widgets.FloatText(value=inst.price_per_hour_usd, step=0.1,
                                      description=f"{name} $/h", style=style, layout=layout)
              for name, inst in INSTANCES.items()}
    counts = {name: widgets.IntText(value=1, description=f"{name} count", style=style,
                                    layout=layout) for name in INSTANCES}
    out = widgets.Output()
    use_model = total_flops is None

    def update(*_):
        out.clear_output(wait=True)
        with out:
            try:
                flops = (training_flops(params_b.value * 1e9, tokens_b.value * 1e9)
                         if use_model else default_flops)
                mine = [custom_instance(name, inst.chip, inst.chips, prices[name].value)
                        for name, inst in INSTANCES.items()]
                rows = ["| instance | count | time | cost | $ per 10^18 FLOP |", "|---|---|---|---|---|"]
                for inst in mine:
                    run = estimate_run(flops, inst, counts[inst.name].value, mfu.value, spot.value)
                    per = cost_per_exaflop_usd(inst, mfu.value, spot.value)
                    rows.append(f"| {inst.name} | {run.instances} | {format_duration(run.wall_clock_s)} "
                                f"| {format_usd(run.cost_usd)} | {format_usd(per)} |")
                best = cheapest_instance(flops, budget.value, deadline.value * 86_400, mine,
                                         mfu.value, spot.value)
                verdict = ("no instance type meets both the budget and the deadline"
                           if best is None else
                           f"cheapest within budget and deadline: {best.instances} × {best.instance}, "
                           f"{format_duration(best.wall_clock_s)}, {format_usd(best.cost_usd)}")
                from IPython.display import Markdown
                display(Markdown(f"Training compute: {flops:.3g} FLOP\n\n" + "\n".join(rows)
                                 + f"\n\n**{verdict}**"))
            except ValueError as error:
                print(f"check the inputs: {error}")

    controls = [params_b, tokens_b, mfu, spot, budget, deadline, *prices.values(), *counts.values()]
    if not use_model:
        controls = controls[2:]
    for control in controls:
        control.observe(update, names="value")
    update()
    panel = widgets.VBox([widgets.HTML("<b>Training-run cost calculator</b>"), *controls, out])
    display(panel)
    return panel
