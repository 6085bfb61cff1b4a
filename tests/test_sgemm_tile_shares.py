"""The shape model's shares that depend on the tile and on how full the SM
is: a ring's share for reading a ragged B as given, by blocks on the busiest
SM, and stream-K's share tile by tile (issue 33, twenty-third session)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, shape_model, shape_model_fit
from benchmark_scripts import model_before_stepped

H200 = "NVIDIA H200"
RING = TileConfig(64, 64, 16, 8, 4, stages=2)
WIDE = TileConfig(64, 128, 16, 8, 8, stages=2)


def test_how_full_the_busiest_sm_is_has_three_names():
    assert [shape_model.blocks_regime(b, 6) for b in (0, 1, 2, 5, 6, 14)] == [
        "one", "one", "part", "part", "full", "full"]
    # A tile the SM holds one of at a time: one block is "one", more "full".
    assert [shape_model.blocks_regime(b, 1) for b in (1, 2)] == ["one", "full"]
    for busiest, resident, named in ((-1, 6, "busiest"), (1.5, 6, "busiest"), (1, 0, "resident"),
                                     (1, True, "resident")):
        with pytest.raises(ValueError, match=named):
            shape_model.blocks_regime(busiest, resident)


def test_the_share_of_reading_b_as_given_is_read_by_how_full_the_sm_is():
    key = shape_model.tile_key(RING)
    entry = {"ring_scalar_b": {"share": {key: 0.06},
                               "share_by_blocks": {key: {"one": 0.09, "full": 0.11}}}}
    assert shape_model.ring_scalar_b_share(entry, RING, 1, 6) == 0.09
    assert shape_model.ring_scalar_b_share(entry, RING, 14, 6) == 0.11
    # No share for "part": the tile's own; none asked for: the tile's own.
    assert shape_model.ring_scalar_b_share(entry, RING, 3, 6) == 0.06
    assert shape_model.ring_scalar_b_share(entry, RING) == 0.06
    # A tile without a share is never read as given.
    assert shape_model.ring_scalar_b_share(entry, WIDE, 1, 4) is None
    assert shape_model.ring_scalar_b_share({}, RING, 1, 6) is None
    # plan_cost charges the share of its busiest SM's count: at 5077 x 1463 x
    # 148, 14 blocks of 64 x 64 on the busiest SM (six at a time), "full".
    base = sgemm.gpu_entry(H200)
    plan = shape_model.plan_cost((5077, 1463, 148), RING, 1, base)
    assert (plan["busiest_sm_blocks"], plan["blocks_per_sm"]) == (14, 6)
    fixed = {**base, "ring_scalar_b": {**base["ring_scalar_b"], "copy_call_us": 0.0,
                                       "share_by_blocks": {key: {"full": 0.5}}}}
    cheap = {**fixed, "ring_scalar_b": {**fixed["ring_scalar_b"],
                                        "share_by_blocks": {key: {"full": 0.0}}}}
    # With the copy's host time 0, a share of 0 reads B as given, 0.5 copies it.
    assert shape_model.plan_cost((5077, 1463, 148), RING, 1, cheap)["ring_scalar_b"]
    assert not shape_model.plan_cost((5077, 1463, 148), RING, 1, fixed)["ring_scalar_b"]


def test_the_committed_shares_copy_b_where_many_rounds_made_reading_it_dear():
    # Pairs timed both ways (sgemm_kernel_times.py): 64 x 64 rings read as
    # given 10-13% longer at 7-14 blocks an SM, 5-7% at 2-3, 9-11% alone;
    # 64 x 128 rings 27-29% alone, 7-11% at two, 10-18% at rounds. (The
    # shares of the model that stood until the stepped 4-byte copies were
    # priced again: MODEL_BEFORE_STEPPED.)
    entry = shape_model.gpu_entry(H200, model_before_stepped())
    by_blocks = entry["ring_scalar_b"]["share_by_blocks"]
    ring, wide = by_blocks[shape_model.tile_key(RING)], by_blocks[shape_model.tile_key(WIDE)]
    assert ring["part"] < ring["one"] < ring["full"] and 0.1 < ring["full"] < 0.13
    assert wide["part"] < wide["full"] < wide["one"] and 0.25 < wide["one"] < 0.3
    # 5077 x 1463 x 148 (held-out set 5) ran 92% of cuBLAS with B copied,
    # 87% read as given under the one share of 2026-11-30; under these
    # shares it copies.
    def reads_as_given(shape):
        return shape_model.plan_cost(shape, RING, 1, entry)["ring_scalar_b"]

    assert not reads_as_given((5077, 1463, 148))
    # And 1310 x 1087 x 197, three blocks an SM where the host sets the pace,
    # still reads it as given.
    assert reads_as_given((1310, 1087, 197))


def _pair(shape, config, copied, as_given):
    m, n, k = shape
    return [{"m": m, "n": n, "k": k, "variant": "ring", "config": config, "host_us": 26.0,
             "kernels": [{"name": "product", "us": copied}, {"name": "pad", "us": 2.0}]},
            {"m": m, "n": n, "k": k, "variant": "ring_scalar_b", "config": config,
             "host_us": 20.0, "kernels": [{"name": "product", "us": as_given}]}]


def test_the_shares_by_how_full_the_sm_is_are_fitted_from_pairs():
    # 64 x 64 rings on the H200: 1037 x 1037 (17 x 17 = 289 tiles, 3 a busiest
    # SM: "part"), 100 x 100 (4 tiles: "one"), 5000 x 1000 (1264 tiles: 10,
    # "full"); each share is the median of its regime's pairs, kept where
    # min_regime_shapes shapes or more were timed.
    entry = sgemm.gpu_entry(H200)
    ring = {"bm": 64, "bn": 64, "bk": 16, "tm": 8, "tn": 4, "stages": 2, "splits": 1}
    rows = (_pair((1037, 1037, 301), ring, 100.0, 105.0) + _pair((1039, 1039, 301), ring, 100.0, 106.0)
            + _pair((100, 101, 301), ring, 10.0, 11.0) + _pair((101, 101, 301), ring, 10.0, 10.9)
            + _pair((5001, 1001, 301), ring, 200.0, 224.0))
    fit = shape_model_fit.fit_ring_scalar_b({"results": rows}, entry=entry)
    key = shape_model.tile_key(RING)
    # The one share: the median of all five pairs (0.05, 0.06, 0.10, 0.09, 0.12).
    assert fit["share"] == {key: pytest.approx(0.09)} and fit["copy_call_us"] == 6.0
    assert fit["share_by_blocks"] == {key: {"one": pytest.approx(0.095),
                                            "part": pytest.approx(0.055)}}
    assert shape_model_fit.fit_ring_scalar_b({"results": rows}, entry=entry,
                                             min_regime_shapes=1)["share_by_blocks"][key][
        "full"] == pytest.approx(0.12)
    # Without an entry, the one share only (as before).
    assert "share_by_blocks" not in shape_model_fit.fit_ring_scalar_b({"results": rows})


def test_stream_k_s_share_is_the_tile_s_own_where_the_entry_has_one():
    ring = shape_model.tile_key(RING)
    entry = {"stream_kernel": {"share": 0.03, "tile_share": {ring: 0.07}}}
    assert shape_model.stream_kernel_share(entry, RING) == 0.07
    assert shape_model.stream_kernel_share(entry, WIDE) == 0.03
    assert shape_model.stream_kernel_share({}, RING) == 0.0
    # plan_cost multiplies the busiest SM's time by 1 + the tile's share.
    base = sgemm.gpu_entry(H200)
    shape = (1024, 1024, 16384)
    plans = [shape_model.plan_cost(shape, RING, shape_model.STREAM,
                                   {**base, "stream_kernel": {"share": 0.0, "tile_share": {ring: x}}})
             for x in (0.0, 0.2)]
    assert plans[1]["sm_us"] == pytest.approx(1.2 * plans[0]["sm_us"])


def test_stream_k_s_shares_by_tile_are_fitted_and_never_below_zero():
    # Rows made from the model itself with a share of 0.1 on 128 x 128 tiles
    # and -0.05 on 64 x 64 rings: the fit finds 0.1, and 0 for the rings (a
    # worker runs the kernel's steps and adds its pieces: never faster a step).
    entry = {**sgemm.gpu_entry(H200), "stream_kernel": {"share": 0.0}}
    regs = TileConfig(128, 128, 16, 8, 8)
    shapes = [(1024, 1024, 16384), (2048, 2048, 8192), (768, 3072, 8192)]
    rows = []
    for config, share in ((regs, 0.1), (RING, -0.05)):
        for shape in shapes:
            plan = shape_model.plan_cost(shape, config, shape_model.STREAM, entry)
            assert not plan["ring_scalar_b"]
            rows.append((shape, config, shape_model.STREAM,
                         plan["gpu_us"] + share * plan["sm_us"]))
    rows.append((shapes[0], regs, 1, 1000.0))  # not stream-K: left out
    samples = shape_model_fit.stream_share_samples(rows, entry)
    assert samples[shape_model.tile_key(regs)][shapes[1]] == pytest.approx(0.1)
    assert samples[shape_model.tile_key(RING)][shapes[2]] == pytest.approx(-0.05)
    fit = shape_model_fit.fit_stream_tile_shares(samples)
    assert fit == {shape_model.tile_key(regs): pytest.approx(0.1, abs=1e-4),
                   shape_model.tile_key(RING): 0.0}
    assert shape_model_fit.fit_stream_tile_shares(samples, min_shapes=4) == {}


def test_the_committed_stream_shares_come_from_the_explores_named():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import sgemm_model_json

    block = sgemm.gpu_entry(H200)["stream_kernel"]
    assert all(name in block["source"] for name in sgemm_model_json.STREAM_TILE_EXPLORES)
    shares = block["tile_share"]
    assert min(shares.values()) == 0.0 and all(0 <= x < 0.25 for x in shares.values())
    # 64 x 256 rings under stream-K ran slower than the one share priced them,
    # 64 x 128 rings faster (its median, below 0, kept at 0).
    assert shares["64x256x16 8x16 s2"] > block["share"] > shares["64x128x16 8x8 s2"] == 0.0


def test_several_kernel_time_records_are_fitted_together(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import sgemm_kernel_times

    model = tmp_path / "model.json"
    model.write_bytes(sgemm.MODEL_PATH.read_bytes())
    monkeypatch.setattr(sgemm, "MODEL_PATH", model)
    sgemm.shape_model._read_model.cache_clear()
    ring = {"bm": 64, "bn": 64, "bk": 16, "tm": 8, "tn": 4, "stages": 2, "splits": 1}
    records = []
    for i, rows in enumerate([_pair((1037, 1037, 301), ring, 100.0, 105.0)
                              + _pair((1039, 1039, 301), ring, 100.0, 106.0),
                              _pair((1041, 1041, 301), ring, 100.0, 107.0)]):
        path = tmp_path / f"sgemm_kernel_times-{i}.json"
        path.write_text(json.dumps({"gpu": H200, "results": rows}))
        records.append(str(path))
    try:
        assert sgemm_kernel_times.save(",".join(records)) == 0
        block = json.loads(model.read_text())["gpus"][H200]["ring_scalar_b"]
        assert block["share"] == {shape_model.tile_key(RING): pytest.approx(0.06)}
        assert "sgemm_kernel_times-0.json and " in block["source"]
        other = tmp_path / "other.json"
        other.write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3", "results": []}))
        with pytest.raises(SystemExit, match="one GPU"):
            sgemm_kernel_times.save(f"{records[0]},{other}")
    finally:
        monkeypatch.undo()
        sgemm.shape_model._read_model.cache_clear()
        sgemm.shape_model.auto_choice.cache_clear()
        sgemm.shape_model.ring_reads_b_scalar.cache_clear()


def test_a_blocks_walk_along_k_has_three_depths():
    assert [shape_model.depth_band(s) for s in (0, 15, 16, 63, 64, 1000)] == [
        "shallow", "shallow", "middle", "middle", "deep", "deep"]
    for bad in (-1, 2.5, True, "16"):
        with pytest.raises(ValueError, match="steps must be a whole number"):
            shape_model.depth_band(bad)


def test_the_share_by_depth_is_read_where_the_entry_holds_its_cell():
    key = shape_model.tile_key(RING)
    entry = {"ring_scalar_b": {"share": {key: 0.06},
                               "share_by_blocks": {key: {"full": 0.11}},
                               "share_by_depth": {key: {"full": {"deep": 0.2, "shallow": 0.0}}}}}
    assert shape_model.ring_scalar_b_share(entry, RING, 14, 6, steps=100) == 0.2
    assert shape_model.ring_scalar_b_share(entry, RING, 14, 6, steps=10) == 0.0
    # A band it does not hold, or no steps: the regime's share; another regime: the tile's.
    assert shape_model.ring_scalar_b_share(entry, RING, 14, 6, steps=32) == 0.11
    assert shape_model.ring_scalar_b_share(entry, RING, 14, 6) == 0.11
    assert shape_model.ring_scalar_b_share(entry, RING, 1, 6, steps=100) == 0.06
    # plan_cost reads it by its block's steps: with the copy's host time 0 at
    # 5077 x 1463 (14 blocks of 64 x 64 on the busiest SM, "full"), a deep K
    # dear to read as given copies B, a shallow one cheap to read reads it.
    base = sgemm.gpu_entry(H200)
    by_depth = {**base, "ring_scalar_b": {**base["ring_scalar_b"], "copy_call_us": 0.0,
                                          "share_by_blocks": {key: {"full": 0.0}},
                                          "share_by_depth": {key: {"full": {"deep": 0.5}}}}}
    deep, shallow = (shape_model.plan_cost((5077, 1463, k), RING, 1, by_depth) for k in (2048, 148))
    assert deep["busiest_sm_blocks"] == shallow["busiest_sm_blocks"] == 14
    assert not deep["ring_scalar_b"] and shallow["ring_scalar_b"]
    # The committed model holds no share by depth: its prices are as before.
    assert all("share_by_depth" not in (base.get(block) or {})
               for block in ("ring_scalar_b", "ring_pairs_b"))


def test_the_shares_by_depth_are_fitted_cell_by_cell():
    # 64 x 64 rings on the H200 at 1037 x 1037 ("part"): K of 100 (7 steps,
    # "shallow"), 500 (32, "middle") and 2000 (125, "deep"), two shapes at
    # the deep one; 5001 x 1001 ("full") deep.
    entry = sgemm.gpu_entry(H200)
    ring = {"bm": 64, "bn": 64, "bk": 16, "tm": 8, "tn": 4, "stages": 2, "splits": 1}
    rows = (_pair((1037, 1037, 100), ring, 100.0, 101.0)
            + _pair((1037, 1037, 500), ring, 100.0, 104.0)
            + _pair((1037, 1037, 2000), ring, 100.0, 110.0)
            + _pair((1039, 1039, 2000), ring, 100.0, 112.0)
            + _pair((5001, 1001, 2000), ring, 200.0, 230.0))
    key = shape_model.tile_key(RING)
    fit = shape_model_fit.fit_ring_b_by_depth({"results": rows}, entry)
    assert fit == {key: {"part": {"shallow": pytest.approx(0.01), "middle": pytest.approx(0.04),
                                  "deep": pytest.approx(0.11)},
                         "full": {"deep": pytest.approx(0.15)}}}
    assert shape_model_fit.fit_ring_b_by_depth({"results": rows}, entry, min_shapes=2) == {
        key: {"part": {"deep": pytest.approx(0.11)}}}
    with pytest.raises(ValueError, match="no ring timed both ways"):
        shape_model_fit.fit_ring_b_by_depth({"results": rows}, entry, way="pairs")


def test_the_trial_by_depth_holds_the_fit_and_leaves_the_committed_model(tmp_path):
    from benchmark_scripts import benchmark_script

    writer = benchmark_script("sgemm_model_json")
    ring = {"bm": 64, "bn": 64, "bk": 16, "tm": 8, "tn": 4, "stages": 2, "splits": 1}
    rows = _pair((1037, 1037, 2000), ring, 100.0, 110.0) + _pair((5001, 1001, 2000), ring,
                                                                 200.0, 230.0)
    record = tmp_path / "sgemm_kernel_times-h200-2026-12-02.json"
    record.write_text(json.dumps({"benchmark": "sgemm_kernel_times", "gpu": H200,
                                  "depth_grid": "odd", "results": rows}))
    committed = sgemm.MODEL_PATH.read_text()
    found = writer.trial_ring_depth(tmp_path / "trial.json", [str(record)])
    assert sgemm.MODEL_PATH.read_text() == committed
    key = shape_model.tile_key(RING)
    assert found == {"ring_scalar_b": {key: {"part": {"deep": pytest.approx(0.1)},
                                             "full": {"deep": pytest.approx(0.15)}}}}
    trial = json.loads((tmp_path / "trial.json").read_text())["gpus"][H200]
    assert trial["ring_scalar_b"]["share_by_depth"] == found["ring_scalar_b"]
    assert trial["ring_scalar_b"]["share_by_blocks"] == json.loads(committed)["gpus"][H200][
        "ring_scalar_b"]["share_by_blocks"]  # the rest of the block as it was
    assert "share_by_depth" not in trial.get("ring_pairs_b", {})  # an odd grid has no pairs
    with pytest.raises(SystemExit, match="sgemm_kernel_times records"):
        writer.trial_ring_depth(tmp_path / "no.json", [])
