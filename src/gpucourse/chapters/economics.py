"""What chapter 7 shows of the economics: the cost and time of a run on each
instance type, its cost against MFU and against the price of a chip-hour, and
the calculator widget in which every input can be changed.

The prices, the run estimate and the formatters of money and time live in
``gpucourse.economics``; this module only draws them. matplotlib and
ipywidgets are imported inside the functions that draw.
"""

from __future__ import annotations

import numpy as np

from gpucourse.checks import count as _count, fraction as _fraction
from gpucourse.economics import (
    CHIPS, INSTANCES, _instance, cheapest_instance, cost_per_exaflop_at_price_usd,
    cost_per_exaflop_usd, custom_instance, estimate_run, format_duration, format_usd, prices_of,
)


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
