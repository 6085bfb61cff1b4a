"""Week 8: what a kernel's registers decide for split-K, and what zeroing C
costs (issue 33, twenty-fourth session). The trial model of
benchmarks/sgemm_model_json.py --trial-split-residency charges a ring's
measured split share below 0 only past one round of its K-whole kernel
(shape_model.split_kernel_share with the entry's "whole_registers"), and
prices zeroing C by the zeroing kernel's measured line (shape_model.zeroing_us,
shape_model_fit.fit_zero_matrix). The committed model has neither block, and
its picks do not change."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, shape_model, shape_model_fit

H200 = "NVIDIA H200"
SQUARE = TileConfig(128, 128, 16, 8, 8, stages=2)  # 256 threads
KEY = "128x128x16 8x8 s2"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _entry(**split_kernel):
    return {**sgemm.gpu_entry(H200), "split_kernel": {"share": {KEY: -0.09}, **split_kernel}}


def test_a_share_below_zero_counts_only_past_one_round_of_the_k_whole_kernel():
    # 168 registers (165 rounded up to 8) x 256 threads = 43008 of the SM's 65536:
    # one block at a time with K whole; 128 registers: two.
    entry = _entry(whole_registers={KEY: 165})
    assert shape_model.resident_blocks(168, SQUARE.shared_bytes, 256, entry)[0] == 1
    assert shape_model.split_kernel_share(entry, SQUARE, 1) == 0.0
    assert shape_model.split_kernel_share(entry, SQUARE, 2) == -0.09
    loose = _entry(whole_registers={KEY: 120})  # two K-whole blocks fit: the share from three
    assert [shape_model.split_kernel_share(loose, SQUARE, b) for b in (2, 3)] == [0.0, -0.09]
    # Without the registers, or without the busiest SM's blocks, never below 0;
    # a share above 0 counts everywhere, as before.
    assert shape_model.split_kernel_share(_entry(), SQUARE, 5) == 0.0
    assert shape_model.split_kernel_share(entry, SQUARE) == 0.0
    dearer = {**entry, "split_kernel": {"share": {KEY: 0.04}, "whole_registers": {KEY: 165}}}
    assert shape_model.split_kernel_share(dearer, SQUARE, 1) == 0.04
    # plan_cost charges it: a split plan of 1024 x 1024 x 16384 in 4 slices
    # (64 tiles x 4 = 256 blocks, 2 on the busiest SM).
    plain, faster = (shape_model.plan_cost((1024, 1024, 16384), SQUARE, 4, e)
                     for e in (_entry(), entry))
    assert plain["busiest_sm_blocks"] == 2 and faster["split_share"] == -0.09
    assert math.isclose(faster["gpu_us"], plain["gpu_us"] - 0.09 * plain["sm_us"])


def test_zeroing_c_is_priced_by_the_measured_line_where_the_entry_has_one():
    entry = {k: v for k, v in sgemm.gpu_entry(H200).items() if k != "zero_matrix"}
    assert shape_model.zeroing_us(entry, 3000, 3000) == entry["constants"]["zero_us"]
    line = {**entry, "zero_matrix": {"fixed_us": 2.0, "us_per_million": 2.5}}
    assert math.isclose(shape_model.zeroing_us(line, 3000, 3000), 2.0 + 2.5 * 9.0)
    shape = (3000, 3000, 4000)
    for splits in (4, "stream"):
        before, after = (shape_model.plan_cost(shape, SQUARE, splits, e) for e in (entry, line))
        assert math.isclose(after["gpu_us"] - before["gpu_us"],
                            2.0 + 22.5 - entry["constants"]["zero_us"])
    # K whole zeroes nothing.
    whole = [shape_model.plan_cost(shape, SQUARE, 1, e)["gpu_us"] for e in (entry, line)]
    assert whole[0] == whole[1]


def _kernel_row(m, n, variant, wall, host, kernels):
    return {"m": m, "n": n, "k": 512, "variant": variant, "wall_us": wall, "host_us": host,
            "kernels": [{"name": name, "us": us, "per_call": 1.0} for name, us in kernels]}


def test_the_zeroing_line_and_a_second_kernels_gap_are_fitted_from_the_profiler():
    # Zeroing 1, 4 and 9 million floats took 1 + 2 us a million; at each shape
    # the call with two kernels ran 1.5 us beyond them, with one 0.5 us: the
    # second kernel's gap is 1 us, and fixed_us = 1 + 1.
    rows = []
    for m in (1000, 2000, 3000):
        zero = 1 + 2 * m * m / 1e6
        rows += [_kernel_row(m, m, "auto", 100 + zero + 1.5, 20,
                             [("sgemm_split[abi]", 100.0), ("zero_matrix[abi]", zero)]),
                 _kernel_row(m, m, "registers", 120.5, 20, [("sgemm[abi]", 120.0)]),
                 _kernel_row(m, m, "cublas", 90.0, 10, [("xmma", 89.0)])]
    fit = shape_model_fit.fit_zero_matrix({"results": rows})
    assert fit == {"fixed_us": 2.0, "us_per_million": 2.0, "points": 3}
    with pytest.raises(ValueError, match="needs 3 or more"):
        shape_model_fit.fit_zero_matrix({"results": rows[:3]})
    alone = [r for r in rows if r["variant"] != "registers"]
    with pytest.raises(ValueError, match="one kernel and with two"):
        shape_model_fit.fit_zero_matrix({"results": alone})


def test_the_committed_registers_and_what_they_let_an_sm_hold():
    from gpucourse.chapters import sgemm_held_out

    registers = sgemm_held_out.ring_registers()
    if registers is None:
        pytest.skip("no sgemm_registers record committed")
    entry = sgemm.gpu_entry(H200)
    assert set(registers) == {shape_model.tile_key(TileConfig(*t)) for t in entry["menu"]
                              if len(t) > 5 and t[5]}
    for key, kernels in registers.items():
        config = next(TileConfig(*t) for t in entry["menu"]
                      if shape_model.tile_key(TileConfig(*t)) == key)
        for count, blocks in kernels.values():
            assert 32 < count <= 255
            # Registers per warp in units of 256, the warps of a block: the blocks that fit.
            per_block = -(-count * 32 // 256) * 256 * config.threads // 32
            assert blocks == min(65536 // per_block,
                                 shape_model.resident_blocks(0, config.shared_bytes,
                                                             config.threads, entry)[0])
    # The prose's case: the 128 x 128 ring's split kernel fits two where K whole fits one.
    assert registers[KEY]["whole"][1] == 1 and registers[KEY]["split"][1] == 2


def test_the_trial_writes_both_blocks_and_leaves_the_committed_model(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("sgemm_model_json", None)
    import sgemm_model_json

    committed = sgemm.MODEL_PATH.read_text()
    out = tmp_path / "trial.json"
    # on the model the trial was written on, whatever the committed one is now
    written = sgemm_model_json.trial_split_residency(out, sgemm_model_json.MODEL_BEFORE_STEPPED)
    assert sgemm.MODEL_PATH.read_text() == committed
    trial = json.loads(out.read_text())["gpus"][H200]
    assert trial["zero_matrix"]["fixed_us"] == written["zero_matrix"]["fixed_us"] > 0
    assert 1 < trial["zero_matrix"]["us_per_million"] < 5
    assert trial["split_kernel"]["whole_registers"][KEY] == 165
    assert "sgemm_registers" in trial["split_kernel"]["source"]
    assert all(share >= 0 for share in trial["stream_kernel"]["tile_share"].values())
    # The committed trial file is this function's output.
    kept = BENCHMARKS / "trials" / "sgemm_shape_model-split-residency.json"
    assert json.loads(kept.read_text()) == json.loads(out.read_text())


def fitted_on_a_copy_of_the_model(tmp_path, monkeypatch, fit) -> dict:
    """The model's JSON after fit(sgemm_model_json) wrote into a copy of the
    model the trials were written on (sgemm_model_json.MODEL_BEFORE_STEPPED;
    the committed file untouched, its plans forgotten after)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("sgemm_model_json", None)
    import sgemm_model_json

    copy = tmp_path / "model.json"
    copy.write_text(sgemm_model_json.MODEL_BEFORE_STEPPED.read_text())
    monkeypatch.setattr(sgemm, "MODEL_PATH", copy)
    monkeypatch.setattr(shape_model, "MODEL_PATH", copy)
    try:
        fit(sgemm_model_json)
        return json.loads(copy.read_text())
    finally:  # forget the copy's plans before the committed model is read again
        for cache in (shape_model._read_model, shape_model.auto_choice,
                      shape_model.ring_reads_b_scalar):
            cache.cache_clear()


def test_the_fit_writes_into_the_model_what_the_trial_holds(tmp_path, monkeypatch):
    # --fit-split-residency, on a copy of the model it was written on: the same JSON
    # as the trial file that set 9 judged.
    fitted = fitted_on_a_copy_of_the_model(
        tmp_path, monkeypatch, lambda writer: writer.fit_split_residency())
    kept = BENCHMARKS / "trials" / "sgemm_shape_model-split-residency.json"
    assert fitted == json.loads(kept.read_text())


def test_the_chapter_reads_the_zeroing_line_and_the_worst_moved_pick():
    from gpucourse import results
    from gpucourse.chapters import sgemm_held_out

    line = sgemm_held_out.zero_matrix_line()
    if line is None:
        pytest.skip("no sgemm_kernel_times runs committed")
    # One record or the list of them: the same points.
    runs = [results.load_results("sgemm_kernel_times", results.results_dir() / name)
            for name in sgemm_held_out.KERNEL_TIMES]
    joined = {"results": [row for run in runs for row in run["results"]]}
    assert line == shape_model_fit.fit_zero_matrix(joined) and line["points"] >= 10
    # The runs before the trial's adoption, and the same sets' runs under it.
    before = {n: sgemm_held_out.before_split_residency(n) for n in (7, 9)}
    if not all(before.values()):
        pytest.skip("no runs before the adoption committed")
    adopted = {n: sgemm_held_out.load_held_out_results(n) for n in before}
    was, now = sgemm_held_out.worst_moved(before, adopted)
    assert (was["m"], was["n"], was["k"]) == (2914, 573, 1901) and now["config"] != was["config"]
    assert was["vs_cublas"] - now["vs_cublas"] > 0.1
    with pytest.raises(ValueError, match="no pick of the mid shapes moved"):
        sgemm_held_out.worst_moved(before, adopted, "mid")
    with pytest.raises(ValueError, match="'large' or 'mid'"):
        sgemm_held_out.worst_moved(before, adopted, "small")


def test_link_ptx_names_a_bad_argument():
    from gpucourse.grader.ptx_compiler import link_ptx

    with pytest.raises(ValueError, match="text must be PTX as a str"):
        link_ptx(b".version 8.0")
    with pytest.raises(ValueError, match="max_registers must be a whole number"):
        link_ptx(".version 8.0", max_registers=-1)
