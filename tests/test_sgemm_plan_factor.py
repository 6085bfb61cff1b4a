"""Price factors per tile and way of walking K (shape_model.plan_factor,
shape_model_fit.fit_plan_factors, benchmarks/sgemm_model_json.py
--trial-plan-factors): a correction tried on 2026-11-30 and not adopted, kept
so that a trial model can be written and timed beside the committed one.

Nothing here is timed; the fit reads the committed explores as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import shape_model, shape_model_fit

H200 = "NVIDIA H200"
RING = next(c for c in shape_model.menu(sgemm.gpu_entry(H200))
            if (c.bm, c.bn, c.stages) == (64, 128, 2))


def _with_factors(entry: dict, factors: dict) -> dict:
    return {**entry, "plan_factor": {"source": "a test", "factor": factors}}


def test_no_committed_gpu_prices_with_factors():
    # The trial was not adopted: every entry of the committed JSON prices its
    # plans as measured, with no factor (benchmarks/NOTES.md).
    data = json.loads(sgemm.MODEL_PATH.read_text())
    assert data["gpus"] and not any("plan_factor" in entry for entry in data["gpus"].values())


def test_a_factor_scales_the_busiest_sms_time_of_its_tile_and_kind_only():
    entry = sgemm.gpu_entry(H200)
    key = shape_model.tile_key(RING)
    shape = (2048, 2048, 2048)
    plans = {splits: shape_model.plan_cost(shape, RING, splits, entry)
             for splits in (1, 2, shape_model.STREAM)}
    assert [shape_model.plan_kind(p) for p in plans.values()] == ["whole", "split", "stream"]
    halved = _with_factors(entry, {f"{key} whole": 0.5, "64x64x16 8x4 s2 split": 3.0})
    whole = shape_model.plan_cost(shape, RING, 1, halved)
    assert whole["sm_us"] == pytest.approx(plans[1]["sm_us"] / 2)
    assert whole["gpu_us"] == pytest.approx(plans[1]["gpu_us"] - plans[1]["sm_us"] / 2)
    # The other kinds of this tile, and another tile's factor, leave it be.
    for splits in (2, shape_model.STREAM):
        assert shape_model.plan_cost(shape, RING, splits, halved)["sm_us"] == \
            pytest.approx(plans[splits]["sm_us"])
    assert shape_model.plan_factor(halved, RING, "split") == 1.0
    assert shape_model.plan_factor(entry, RING, "whole") == 1.0
    with pytest.raises(ValueError, match="kind must be 'whole', 'split' or 'stream'"):
        shape_model.plan_factor(halved, RING, "sliced")


def test_the_fit_is_the_shrunk_median_of_measured_over_priced():
    entry = sgemm.gpu_entry(H200)
    key = shape_model.tile_key(RING)
    shapes = [(2048, 2048, 2048), (3000, 1000, 1500), (1536, 2560, 4096)]

    def row(shape, splits, share):  # measured: the other costs, and share x the SM's time
        plan = shape_model.plan_cost(shape, RING, splits, entry)
        return (shape, RING, splits, plan["gpu_us"] - plan["sm_us"] + share * plan["sm_us"])

    rows = [row(s, 1, f) for s, f in zip(shapes, (0.8, 0.9, 0.7))]  # median 0.8
    rows += [row(s, 2, 1.2) for s in shapes[:2]]  # two rows of split: too few
    rows.append(row((64, 64, 64), 1, 5.0))  # the host's call: says nothing of the kernel
    assert shape_model.plan_cost((64, 64, 64), RING, 1, entry)["host_us"] >= \
        shape_model.plan_cost((64, 64, 64), RING, 1, entry)["gpu_us"]
    # Pulled toward 1 as if two more rows had measured the price: 1 - 0.2 x 3/5.
    assert shape_model_fit.fit_plan_factors(rows, entry) == {f"{key} whole": pytest.approx(0.88)}
    assert shape_model_fit.fit_plan_factors(rows, entry, weight=0) == \
        {f"{key} whole": pytest.approx(0.8)}
    assert f"{key} split" in shape_model_fit.fit_plan_factors(rows, entry, min_rows=2)
    # An entry that already holds factors is fitted as if it held none.
    assert shape_model_fit.fit_plan_factors(
        rows, _with_factors(entry, {f"{key} whole": 0.1})) == {f"{key} whole": pytest.approx(0.88)}
    with pytest.raises(ValueError, match="microseconds > 0"):
        shape_model_fit.fit_plan_factors([(shapes[0], RING, 1, 0.0)], entry)


def test_the_trial_model_is_written_beside_the_committed_one(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import sgemm_model_json

    before = sgemm.MODEL_PATH.read_bytes()
    out = tmp_path / "trial.json"
    # on the model of then, which stood until the stepped trial
    then = sgemm_model_json.MODEL_BEFORE_STEPPED
    factors = sgemm_model_json.trial_plan_factors(out, then)
    assert sgemm.MODEL_PATH.read_bytes() == before
    trial = shape_model.gpu_entry(H200, out)
    assert trial["plan_factor"]["factor"] == factors and "--trial-plan-factors" in \
        trial["plan_factor"]["source"]
    # Fitted to the explores of 2026-11-30: the 64 x 128 ring under stream-K
    # ran faster than priced there (its factor under 1).
    assert factors[f"{shape_model.tile_key(RING)} stream"] < 1.0
    # The trial moves picks; the committed model's are unchanged. (At 516 x
    # 3877 x 1797 of held-out set 4 it moved a 64 x 256 ring under stream-K,
    # 84% of cuBLAS, to a 64 x 128 one; stream-K's shares by tile now make
    # that move in the committed model too, and it ran at 90%. So does the
    # rings' registers at 648 x 2813 x 23957 of set 5.)
    shape = (660, 4093, 7669)  # held-out set 7
    committed = shape_model.choose_plan(shape, entry=shape_model.gpu_entry(H200, then))
    assert (committed["config"].bn, shape_model.choose_plan(shape, entry=trial)["config"].bn) \
        == (256, 128)
