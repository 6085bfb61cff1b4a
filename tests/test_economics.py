"""Tests of gpucourse.economics: hand-worked bills, properties of the cost
model, and the errors bad input gets."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucourse import economics as econ
from gpucourse import hpc


def test_chip_peaks_from_the_datasheets():
    assert econ.CHIPS["H100"].bf16_flops_per_s == 989.5e12  # 1,979 TFLOPS sparse / 2
    assert econ.CHIPS["Trainium"].bf16_flops_per_s == 190e12
    assert econ.CHIPS["Trainium2"].bf16_flops_per_s == 667e12


# Instances at round prices for the hand-worked arithmetic below. They are
# fixtures, not prices anyone quoted: the sourced prices are tested on their own.
P5 = econ.custom_instance("p5 at $9.80", "H100", 8, 9.80)
TRN1 = econ.custom_instance("trn1.2xlarge at $1.10", "Trainium", 1, 1.10)
TRN2 = econ.custom_instance("trn2 at $4.80", "Trainium2", 16, 4.80)
CAPACITY_P5 = "p5.48xlarge Capacity Block, late 2024"


def _bib_keys():
    import re
    from pathlib import Path

    book = Path(__file__).resolve().parents[1] / "book"
    text = "".join(p.read_text() for p in [book / "references.bib", *sorted((book / "bib").glob("*.bib"))])
    return set(re.findall(r"@\w+\{([^,\s]+),", text))


def test_every_price_is_sourced_and_dated():
    import re

    keys = _bib_keys()
    assert econ.INSTANCES
    for label, inst in econ.INSTANCES.items():
        assert inst.source in keys, (label, inst.source)
        assert re.fullmatch(r"\d{4}-\d{2}|n\.d\.", inst.date), (label, inst.date)
        assert inst.kind and inst.note
        assert (inst.chip, inst.chips) == econ.INSTANCE_TYPES[inst.name]
        assert inst.name in label


def test_capacity_block_prices_match_the_per_accelerator_rates_aws_prints():
    # AWS prints both the instance rate and the rate per accelerator.
    p5 = econ.INSTANCES[CAPACITY_P5]
    trn1 = econ.INSTANCES["trn1.32xlarge Capacity Block, late 2024"]
    assert p5.price_per_chip_hour_usd == pytest.approx(4.916, abs=5e-4)
    assert trn1.price_per_chip_hour_usd == pytest.approx(0.968, abs=5e-4)



def test_the_june_2025_cut_is_a_bound_the_reported_cut_respects():
    # The headline's "up to 45%" bounds every family and pricing model, so the
    # cut reported for AWS's H100 instances cannot exceed it; and the chapter's
    # verdict (the March 2026 report lies below the floor the cut leaves) holds
    # at either cut.
    assert 0 < econ.AWS_JUNE_2025_P5_CUT_REPORTED <= econ.AWS_JUNE_2025_CUT_UP_TO < 1
    listed = econ.INSTANCES["p5.48xlarge on demand, list price as quoted"].price_per_chip_hour_usd
    reported = econ.INSTANCES["p5.48xlarge on demand, March 2026"].price_per_chip_hour_usd
    assert listed * (1 - econ.AWS_JUNE_2025_CUT_UP_TO) == pytest.approx(6.759, abs=1e-3)  # 98.32 / 8 * 0.55
    for cut in (econ.AWS_JUNE_2025_CUT_UP_TO, econ.AWS_JUNE_2025_P5_CUT_REPORTED):
        assert reported < listed * (1 - cut)

def test_prices_of_a_chip():
    h100 = econ.prices_of("H100")
    assert [i.price_per_chip_hour_usd for i in h100] == sorted(i.price_per_chip_hour_usd for i in h100)
    assert {i.chip for i in h100} == {"H100"} and len(h100) == 3
    assert econ.prices_of("Trainium2") == []  # no public price was found
    with pytest.raises(ValueError, match="chip must be one of"):
        econ.prices_of("TPU")


def test_cost_per_exaflop_at_a_price_by_hand():
    # 1e18 / (989.5e12 x 0.4) = 2,526.5 s = 0.701813 h, at $1 per chip-hour.
    assert econ.cost_per_exaflop_at_price_usd("H100", 1.0, 0.4) == pytest.approx(0.701813, rel=1e-5)
    prices = [1.0, 2.0, 4.0]
    assert list(econ.cost_per_exaflop_at_price_usd("H100", prices, 0.4)) == pytest.approx(
        [0.701813, 1.403627, 2.807254], rel=1e-5)
    # The same figure as a one-instance run at that price.
    one_chip = econ.custom_instance("one H100 at $1", "H100", 1, 1.0)
    assert econ.cost_per_exaflop_usd(one_chip, 0.4) == pytest.approx(0.701813, rel=1e-5)


def test_break_even_price_by_hand():
    # Same MFU: Trainium2 matches an H100 at $4.916 when its price is in the
    # ratio of the peaks, 4.916 x 667 / 989.5 = $3.3138.
    assert econ.break_even_price_per_chip_hour_usd("Trainium2", "H100", 4.916, 0.4) == pytest.approx(
        3.31377, rel=1e-5)
    # At half the MFU on Trainium2, it must be half as dear.
    assert econ.break_even_price_per_chip_hour_usd("Trainium2", "H100", 4.916, 0.2, 0.4) == pytest.approx(
        3.31377 / 2, rel=1e-5)


def test_run_by_hand():
    # 1e21 FLOPs on one p5.48xlarge at MFU 0.5: 8 x 989.5e12 x 0.5 = 3.958e15 FLOP/s,
    # so 1e21 / 3.958e15 = 252,652.85 s = 70.18 h, and 70.18 h x $9.80 = $687.78.
    run = econ.estimate_run(1e21, P5, 1, 0.5)
    assert run.wall_clock_s == pytest.approx(252_652.85, rel=1e-6)
    assert run.cost_usd == pytest.approx(687.777, rel=1e-5)
    assert run.chip_hours == pytest.approx(8 * 70.1813, rel=1e-5)
    # Four instances: a quarter of the time, the same bill.
    four = econ.estimate_run(1e21, P5, 4, 0.5)
    assert four.wall_clock_s == pytest.approx(run.wall_clock_s / 4)
    assert four.cost_usd == pytest.approx(run.cost_usd)
    # A 60% spot discount leaves 40% of the bill.
    spot = econ.estimate_run(1e21, P5, 1, 0.5, spot_discount=0.6)
    assert spot.cost_usd == pytest.approx(0.4 * run.cost_usd)
    assert spot.wall_clock_s == run.wall_clock_s


def test_run_time_matches_week_one():
    flops = hpc.training_flops(hpc.GPT3_PARAMS, hpc.GPT3_TOKENS)
    ours = econ.run_time_s(flops, 1024 * 989.5e12, 0.462)
    theirs = hpc.training_time_s(flops, 989.5e12, 1024, 0.462)
    assert ours == pytest.approx(theirs)


def test_cost_per_exaflop_by_hand():
    # 1e18 / (190e12 x 0.4) = 13,157.9 s = 3.655 h at $1.10 = $4.0205.
    assert econ.cost_per_exaflop_usd(TRN1, 0.4) == pytest.approx(4.02047, rel=1e-5)


def test_cheapest_instance_by_hand():
    flops = 1e21
    fleet = [TRN1, TRN2, P5]
    # Per exaflop at MFU 0.5: trn2 $0.1999, p5 $0.688, trn1 $3.22: trn2 is cheapest.
    best = econ.cheapest_instance(flops, budget_usd=1e6, deadline_s=86_400, instances=fleet, mfu=0.5)
    trn2_one_s = flops / (16 * 667e12 * 0.5)  # 187,406 s on one trn2.48xlarge
    assert best.instance == TRN2.name
    assert best.instances == math.ceil(trn2_one_s / 86_400) == 3
    assert best.wall_clock_s <= 86_400
    # Without Trainium2, the p5 wins: 252,653 s on one, so 3 for one day.
    best = econ.cheapest_instance(flops, 1e6, 86_400, [TRN1, P5], mfu=0.5)
    assert (best.instance, best.instances) == (P5.name, 3)
    # A budget below every bill: nothing qualifies.
    assert econ.cheapest_instance(flops, 100, 86_400, fleet, mfu=0.5) is None
    # A cap on the fleet that the deadline needs more than: nothing either.
    assert econ.cheapest_instance(flops, 1e6, 3600, [P5], mfu=0.5, max_instances=10) is None
    # Given keys of INSTANCES, the estimate carries the key, so the price it used is known.
    best = econ.cheapest_instance(flops, 1e7, 86_400, mfu=0.5)
    assert best.instance in econ.INSTANCES


def test_exact_deadline_needs_no_extra_instance():
    flops = 2 * 8 * 989.5e12 * 0.5 * 3600  # exactly two p5-hours
    best = econ.cheapest_instance(flops, 1e6, 3600, [P5], mfu=0.5)
    assert best.instances == 2


def test_break_even():
    # $300,000 of hardware costing $2/h to run, against $12/h in the cloud:
    # 300,000 / 10 = 30,000 hours.
    assert econ.break_even_hours(300_000, 2, 12) == pytest.approx(30_000)
    assert econ.break_even_hours(300_000, 12, 12) == math.inf


def test_formatters():
    assert econ.format_usd(12_345.6) == "$12,346"
    assert econ.format_usd(3.2e6) == "$3.20 million"
    assert econ.format_usd(0.456) == "$0.46"
    assert econ.format_duration(3.5 * 3600) == "3.5 h"
    assert econ.format_duration(12.1 * 86_400) == "12.1 days"


prices = st.floats(min_value=0.01, max_value=1e3)
mfus = st.floats(min_value=0.01, max_value=1.0)


@given(price=prices, factor=st.floats(min_value=0.1, max_value=100), mfu=mfus,
       flops=st.floats(min_value=1e15, max_value=1e25))
def test_cost_grows_linearly_with_price(price, factor, mfu, flops):
    a = econ.custom_instance("a", "H100", 8, price)
    b = econ.custom_instance("b", "H100", 8, price * factor)
    cost_a = econ.estimate_run(flops, a, 1, mfu).cost_usd
    cost_b = econ.estimate_run(flops, b, 1, mfu).cost_usd
    assert cost_b == pytest.approx(factor * cost_a, rel=1e-9)


@given(mfu=mfus, flops=st.floats(min_value=1e15, max_value=1e25), n=st.integers(1, 512),
       discount=st.floats(min_value=0, max_value=0.95))
def test_cost_and_time_properties(mfu, flops, n, discount):
    one = econ.estimate_run(flops, TRN1, 1, mfu, discount)
    many = econ.estimate_run(flops, TRN1, n, mfu, discount)
    assert many.cost_usd == pytest.approx(one.cost_usd, rel=1e-9)  # perfect scaling: same bill
    assert many.wall_clock_s == pytest.approx(one.wall_clock_s / n, rel=1e-9)
    # Doubling the FLOPs doubles both; halving MFU doubles both.
    double = econ.estimate_run(2 * flops, TRN1, 1, mfu, discount)
    assert double.cost_usd == pytest.approx(2 * one.cost_usd, rel=1e-9)
    assert double.wall_clock_s == pytest.approx(2 * one.wall_clock_s, rel=1e-9)


@given(flops=st.floats(min_value=1e18, max_value=1e24), budget=st.floats(min_value=1e2, max_value=1e8),
       deadline=st.floats(min_value=3600, max_value=1e8), mfu=mfus)
def test_cheapest_meets_its_promises(flops, budget, deadline, mfu):
    best = econ.cheapest_instance(flops, budget, deadline, mfu=mfu)
    if best is None:
        return
    assert best.cost_usd <= budget and best.wall_clock_s <= deadline * (1 + 1e-9)
    for name in econ.INSTANCES:  # no other type is cheaper and still in time
        one = econ.estimate_run(flops, name, 1, mfu)
        needed = math.ceil(one.wall_clock_s / deadline * (1 - 1e-12))
        if needed <= 1024 and one.cost_usd <= budget:
            assert best.cost_usd <= one.cost_usd * (1 + 1e-9)


@pytest.mark.parametrize("call, naming", [
    (lambda: econ.estimate_run(1e21, CAPACITY_P5, 1, 0.0), "mfu must be in (0, 1]"),
    (lambda: econ.estimate_run(1e21, CAPACITY_P5, 1, 1.2), "mfu must be in (0, 1]"),
    (lambda: econ.estimate_run(1e21, CAPACITY_P5, 1, float("nan")), "mfu"),
    (lambda: econ.estimate_run(1e21, CAPACITY_P5, 0, 0.5), "instances must be a whole number >= 1"),
    (lambda: econ.estimate_run(1e21, CAPACITY_P5, -2, 0.5), "instances"),
    (lambda: econ.estimate_run(1e21, "p4d.24xlarge", 1, 0.5), "instance must be an Instance or one of"),
    (lambda: econ.estimate_run(-1, CAPACITY_P5, 1, 0.5), "total_flops must be >= 0"),
    (lambda: econ.estimate_run(1e21, CAPACITY_P5, 1, 0.5, spot_discount=1.0), "spot_discount must be in [0, 1)"),
    (lambda: econ.custom_instance("x", "H100", 0, 9.8), "chips must be a whole number >= 1"),
    (lambda: econ.custom_instance("x", "TPU", 8, 9.8), "chip must be one of"),
    (lambda: econ.custom_instance("x", "H100", 8, -1), "price_per_hour_usd must be > 0"),
    (lambda: econ.cheapest_instance(1e21, 0, 3600), "budget_usd must be > 0"),
    (lambda: econ.cheapest_instance(1e21, 1e6, -5), "deadline_s must be > 0"),
    (lambda: econ.cheapest_instance(1e21, 1e6, 3600, []), "instances must name at least one"),
    (lambda: econ.run_cost_usd(3600, 9.8, instances=1.5), "instances"),
    (lambda: econ.break_even_hours(1e5, 1, 0), "cloud_price_per_hour_usd must be > 0"),
    (lambda: econ.cost_per_exaflop_at_price_usd("TPU", 1.0), "chip must be one of"),
    (lambda: econ.cost_per_exaflop_at_price_usd("H100", -1.0), "price_per_chip_hour_usd must be >= 0"),
    (lambda: econ.break_even_price_per_chip_hour_usd("Trainium2", "H100", 4.9, 0.0), "mfu must be in (0, 1]"),
])
def test_bad_input_is_refused_by_name(call, naming):
    with pytest.raises(ValueError, match=naming.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        call()


def test_figures_draw(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flops = hpc.training_flops(hpc.GPT3_PARAMS, hpc.GPT3_TOKENS)
    axes = econ.plot_instances(flops, 0.4)
    assert len(axes[0].patches) == len(econ.INSTANCES)
    ax = econ.plot_cost_vs_mfu(flops)
    assert len(ax.lines) == len(econ.INSTANCES)
    # One line per chip and one mark per sourced price, each on its chip's line.
    ax = econ.plot_cost_vs_price(0.4)
    assert len(ax.lines) == len(econ.CHIPS) + len(econ.INSTANCES)
    plt.close("all")
