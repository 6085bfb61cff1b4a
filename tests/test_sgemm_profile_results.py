"""Week 8: reading the runs behind "Counting instructions" and "Every shape"
(gpucourse.chapters.sgemm and sgemm_gap).

Three committed H100 files: the Nsight Compute summary of level 6 and cuBLAS
(benchmarks/results/sgemm_ncu-*.json), the dot-loop variants that followed
from it (sgemm_unroll-*.json) and matmul as a user calls it at every shape
(sgemm_shapes-*.json). The readers are checked against the raw rows and by
hand, and so are the facts chapter 8 states from them. No kernel runs here.
"""

import json
import math

import pytest

from gpucourse import hpc, results
from gpucourse.kernels import sgemm
from gpucourse.chapters import sgemm as ladder, sgemm_gap

SHAPE = (4096, 4096, 4096)
M = 4096


def _fails(function, *args, naming, **kwargs):
    with pytest.raises(ValueError, match=naming):
        function(*args, **kwargs)


@pytest.fixture(scope="module")
def ncu():
    return sgemm_gap.load_ncu_results()


@pytest.fixture(scope="module")
def unroll():
    return sgemm_gap.load_unroll_results()


@pytest.fixture(scope="module")
def shapes():
    return sgemm_gap.load_shapes_results()


# -----------------------------------------------------------------------------
# Nsight Compute


def test_the_ncu_summary_is_found_and_checked(ncu, tmp_path):
    files = results.find_results("sgemm_ncu")
    assert files and ncu == json.loads(files[-1].read_text())
    assert ncu["benchmark"] == "ncu_summary" and set(ncu["profiles"]) == {
        "level6_two_steps_per_pass", "cublas"}
    # A file or a folder; a later summary replaces an earlier one.
    assert sgemm_gap.load_ncu_results(files[-1]) == ncu
    (tmp_path / "sgemm_ncu-h100-2099-01-01.json").write_text(json.dumps({**ncu, "date": "2099"}))
    assert sgemm_gap.load_ncu_results(tmp_path)["date"] == "2099"
    _fails(sgemm_gap.load_ncu_results, tmp_path / "missing", naming="summary file or a folder")
    _fails(sgemm_gap.load_ncu_results, tmp_path / "empty", naming="summary file or a folder")
    (tmp_path / "empty").mkdir()
    _fails(sgemm_gap.load_ncu_results, tmp_path / "empty", naming="found none")
    broken = tmp_path / "sgemm_ncu-h100-2099-01-02.json"
    broken.write_text(json.dumps({**ncu, "profiles": {}}))
    _fails(sgemm_gap.load_ncu_results, broken, naming="not an Nsight Compute summary")
    broken.write_text("{")
    _fails(sgemm_gap.load_ncu_results, broken, naming="not a JSON file")


def test_ncu_profiles_by_hand(ncu):
    rows = {r["label"]: r for r in sgemm_gap.ncu_profiles(ncu)}
    for label, raw in ncu["profiles"].items():
        row = rows[label]
        total = raw["executed_warp_instructions"]
        assert row["warp_instructions"] == total
        assert row["ffma_instructions"] + row["other_instructions"] == total
        assert row["ffma_instructions"] == round(total * raw["instruction_mix"]["FFMA"])
        assert row["other_per_ffma"] == pytest.approx(
            row["other_instructions"] / row["ffma_instructions"])
        assert row["issue_busy"] == pytest.approx(raw["issue_slots_busy_percent"] / 100)
        assert row["duration_s"] == pytest.approx(raw["duration_ms"] / 1e3)
        # 2 FLOP on each of 32 lanes per FFMA instruction, over the duration.
        assert row["ffma_flop_per_s"] == pytest.approx(
            64 * row["ffma_instructions"] / row["duration_s"])
        assert row["modelled_flop_per_s"] == pytest.approx(
            hpc.GPUS["H100"].fp32_flops_per_s * row["ffma_share"] * row["issue_busy"])
    _fails(sgemm_gap.ncu_profiles, ncu, 0, naming="peak_flops_per_s")
    _fails(sgemm_gap.ncu_profiles, {"benchmark": "sgemm"}, naming="Nsight Compute summary")


def test_what_the_chapter_says_of_the_profiles(ncu):
    rows = {r["label"]: r for r in sgemm_gap.ncu_profiles(ncu)}
    ours, cublas = rows["level6_two_steps_per_pass"], rows["cublas"]
    # The same arithmetic: exactly MNK/32 FFMA instructions for level 6, MN/32 more for cuBLAS.
    assert ours["ffma_instructions"] == M**3 // 32
    assert cublas["ffma_instructions"] - M**3 // 32 == M * M // 32
    # More of everything else, and fewer busy issue slots, with more warps.
    assert ours["other_per_ffma"] > 1.5 * cublas["other_per_ffma"]
    assert ours["issue_busy"] < cublas["issue_busy"] and ours["warps_per_sm"] > cublas["warps_per_sm"]
    # peak x FFMA share x issue slots busy lands within 2% of the measured rate.
    for row in (ours, cublas):
        assert row["modelled_flop_per_s"] == pytest.approx(row["ffma_flop_per_s"], rel=0.02)
    gap = sgemm_gap.ncu_gap(ncu, "level6_two_steps_per_pass")
    assert gap["time_ratio"] == pytest.approx(ours["duration_s"] / cublas["duration_s"])
    assert gap["modelled_ratio"] == pytest.approx(gap["instruction_ratio"] * gap["issue_ratio"])
    assert gap["modelled_ratio"] == pytest.approx(gap["time_ratio"], rel=0.02)
    assert gap["instruction_ratio"] > 1 and gap["issue_ratio"] > 1
    _fails(sgemm_gap.ncu_gap, ncu, "level7", naming="ours must be one of the profiles")


# -----------------------------------------------------------------------------
# The dot-loop variants


def test_unroll_variants_read_every_timed_row(unroll):
    rows = sgemm_gap.unroll_variants(unroll)
    raw = [r for r in unroll["results"] if r["variant"] != "cublas"
           and (r["m"], r["n"], r["k"]) == SHAPE]
    assert [r["variant"] for r in rows] == [r["variant"] for r in raw]
    cublas = next(r for r in unroll["results"]
                  if r["variant"] == "cublas" and (r["m"], r["n"], r["k"]) == SHAPE)
    spills = {v["variant"]: v["local_bytes_per_thread"] for v in unroll["validation"]}
    for row, r in zip(rows, raw):
        assert (row["ms"], row["vs_cublas"], row["registers_per_thread"]) == (
            r["ms"], r["vs_cublas"], r["registers_per_thread"])
        assert row["vs_cublas"] == pytest.approx(cublas["ms"] / row["ms"])
        assert row["whole_tile"] == (r["unroll"] == r["config"]["bk"])
        assert row["local_bytes_per_thread"] == spills[r["variant"]]
    assert len(sgemm_gap.unroll_variants(unroll, 8192)) == 4  # the best three and the baseline
    _fails(sgemm_gap.unroll_variants, unroll, 4095, naming="a shape the run timed")
    _fails(sgemm_gap.unroll_variants, {"benchmark": "sgemm"}, naming="sgemm_unroll")


def test_unroll_occupancy_and_outputs_by_hand(unroll):
    rows = sgemm_gap.unroll_variants(unroll)
    old = sgemm_gap.unroll_variant(rows, {"bm": 64, "bn": 256, "bk": 16, "tm": 8, "tn": 8}, 2)
    # 256 threads; two copies of 64x16 + 16x256 floats = 40 KiB; 128 registers ->
    # 4,096 a warp, 8 warps = 32,768: two blocks, 16 warps.
    assert (old["threads"], old["outputs"], old["registers_per_thread"], old["warps_per_sm"]) == (
        256, 64, 128, 16)
    # The whole tile uncapped: 163 registers -> 5,376 a warp (21 units of 256),
    # 43,008 a block: one block, 8 warps.
    uncapped = sgemm_gap.unroll_variant(rows, old["config"], "tile")
    assert (uncapped["registers_per_thread"], uncapped["warps_per_sm"]) == (163, 8)
    # Level 7's 2 x 2 patches of 8 x 4: 128 outputs a thread, 128 threads.
    warp = next(r for r in rows if r["level"] == "7" and r["threads"] == 128)
    assert warp["outputs"] == 128 and warp["tiles"] == sgemm_gap.warp_config_label(warp["config"])
    config = sgemm.WarpTileConfig(**warp["config"])
    assert warp["warps_per_sm"] == ladder.occupancy(
        warp["registers_per_thread"], config.shared_bytes, 128)["warps_per_sm"]
    _fails(sgemm_gap.unroll_variant, rows, old["config"], 4, naming="exactly one")
    _fails(sgemm_gap.unroll_variant, rows, {"bm": 64}, 2, naming="config must be")


def test_what_the_chapter_says_of_the_unroll_run(unroll):
    ladder_run = ladder.load_results()
    rows = sgemm_gap.unroll_variants(unroll)
    old = sgemm_gap.unroll_variant(rows, ladder_run["level6_config"], ladder_run["dot_unroll"])
    cap = sgemm.REGISTERS_PER_SM // (2 * old["threads"])
    capped = sgemm_gap.unroll_variant(rows, ladder_run["level6_config"], "tile", cap)
    uncapped = sgemm_gap.unroll_variant(rows, ladder_run["level6_config"], "tile")
    tuned = sgemm.tuned_config(unroll["gpu"])
    wide = sgemm_gap.unroll_variant(rows, tuned, "tile")
    # The ladder's level 6, as profiled, is the run's baseline; the whole tile alone
    # gains little and loses warps, the cap keeps them and gains more.
    assert old["vs_cublas"] < uncapped["vs_cublas"] < capped["vs_cublas"] < wide["vs_cublas"]
    assert uncapped["warps_per_sm"] < capped["warps_per_sm"] == old["warps_per_sm"]
    # The fastest is the tile sgemm_tuned.json now gives level 6, twice the outputs a thread.
    assert max(rows, key=lambda r: r["vs_cublas"]) is wide and wide["outputs"] == 2 * old["outputs"]
    # The two slowest are the two whose cap made the compiler spill.
    slowest = sorted(rows, key=lambda r: r["vs_cublas"])[:2]
    assert all(r["local_bytes_per_thread"] and r["max_registers"] for r in slowest)
    assert sum(1 for r in rows if r["local_bytes_per_thread"]) == 2


# -----------------------------------------------------------------------------
# Every shape


def test_the_shapes_run_of_the_named_gpu_is_read(shapes, tmp_path):
    assert results.gpu_slug(shapes["gpu"]) == "h100"
    files = [p for p in results.find_results("sgemm_shapes") if "-h100-" in p.name]
    assert shapes == json.loads(files[-1].read_text())
    # Another GPU's file of the same date is not taken for the H100's.
    others = [p for p in results.find_results("sgemm_shapes") if "-h100-" not in p.name]
    for other in others:
        assert results.gpu_slug(sgemm_gap.load_shapes_results(gpu=other.stem.split("-")[1])["gpu"]) \
            == other.stem.split("-")[1]
    _fails(sgemm_gap.load_shapes_results, gpu="h 100", naming="gpu must be")
    _fails(sgemm_gap.load_shapes_results, tmp_path, naming="found none")


def test_shapes_table_and_call_cost(shapes):
    table = sgemm_gap.shapes_table(shapes)
    raw = shapes["results"]
    assert [(r["m"], r["n"], r["k"]) for r in table] == list(dict.fromkeys(
        (r["m"], r["n"], r["k"]) for r in raw))
    for row in table:
        shape = (row["m"], row["n"], row["k"])
        by_variant = {r["variant"]: r for r in raw if (r["m"], r["n"], r["k"]) == shape}
        for variant in ("cublas", "level6", "auto"):
            assert row[f"{variant}_s"] == pytest.approx(by_variant[variant]["ms"] / 1e3)
        assert row["auto"] == pytest.approx(row["cublas_s"] / row["auto_s"])
        assert {**row["auto_config"], "splits": row["splits"]} == by_variant["auto"]["config"]
        if "auto_numba" in by_variant:  # runs from 2026-11-26 on call auto on Numba arrays too
            assert row["auto_numba_s"] == pytest.approx(by_variant["auto_numba"]["ms"] / 1e3)
            assert row["auto_numba"] == pytest.approx(row["cublas_s"] / row["auto_numba_s"])
        else:
            assert row["auto_numba_s"] is None and row["auto_numba"] is None
    costs = sgemm_gap.call_cost_s(shapes)
    assert {"cublas", "level6", "auto"} <= set(costs) <= {"cublas", "level6", "auto", "auto_numba"}
    assert all(0 < s < 1e-4 for s in costs.values())
    older = {**shapes, "results": [r for r in raw if r["variant"] != "auto_numba"]}
    assert set(sgemm_gap.call_cost_s(older)) == {"cublas", "level6", "auto"}
    _fails(sgemm_gap.call_cost_s, {**shapes, "results": [r for r in raw if r["m"] > 1]},
           naming="1 x 1 x 1")
    _fails(sgemm_gap.shapes_table, {**shapes, "results": [r for r in raw if r["variant"] != "auto"]},
           naming="lacks one")
    _fails(sgemm_gap.shapes_table, {"benchmark": "sgemm"}, naming="sgemm_shapes")


def test_what_the_chapter_says_of_every_shape(shapes):
    table = {(r["m"], r["n"], r["k"]): r for r in sgemm_gap.shapes_table(shapes)}
    tuned = sgemm.tuned_config(shapes["gpu"])
    assert all(r["level6_config"] == {f: getattr(tuned, f) for f in ("bm", "bn", "bk", "tm", "tn")}
               for r in table.values())
    assert table[1024, 1024, 8192]["splits"] > 1
    # Level 6's one tile cuts 512^3 into few blocks for 132 SMs; auto does far better there.
    assert math.ceil(512 / tuned.bm) * math.ceil(512 / tuned.bn) < ladder.H100_SM["sms"] // 10
    for shape in ((512, 512, 512), (1024, 1024, 8192)):
        assert table[shape]["auto"] > 2 * table[shape]["level6"]
    assert len(shapes["search"]["space"]["bk"]) == 1


def test_the_new_plots_draw_every_row(unroll, shapes):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = sgemm_gap.plot_unroll(unroll)
    assert len(ax.patches) == len(sgemm_gap.unroll_variants(unroll))
    ax = sgemm_gap.plot_shapes(shapes)
    assert len(ax.patches) == 2 * (len(sgemm_gap.shapes_table(shapes)) - 1)  # all but 1 x 1 x 1
    plt.close("all")


def test_interior_gain_pairs_each_kernel_with_and_without_edge_checks():
    # benchmarks/sgemm_unroll.py --interior: each configuration timed with and
    # without edge checks, in turns with cuBLAS, at 4096^3 and 8192^3.
    record = sgemm_gap.load_interior_results()
    rows = sgemm_gap.interior_gain(record)
    raw = [r for r in record["results"] if r["variant"] != "cublas"]
    assert len(rows) * 2 == len(raw)
    for row in rows:
        pair = [r for r in raw if r["level"] == row["level"] and r["m"] == row["m"]
                and sgemm_gap._tiles_label(r["level"], r["config"]) == row["tiles"]]
        by_kind = {r["interior"]: r["vs_cublas"] for r in pair}
        assert (row["checked"], row["interior"]) == (by_kind[False], by_kind[True])
        assert row["gain"] == pytest.approx(row["interior"] - row["checked"])
    # What chapter 8 says of this run: every kernel gains without the checks,
    # and level 7's best passes the 90% target at both shapes.
    assert all(row["gain"] > 0 for row in rows)
    level7 = [r for r in rows if r["level"] == "7"]
    for m in (4096, 8192):
        assert max(r["interior"] for r in level7 if r["m"] == m) >= sgemm_gap.LEVEL7_TARGET_SHARE
    _fails(sgemm_gap.interior_gain, {"benchmark": "sgemm_unroll", "results": []},
           naming="sgemm_interior results record")
    _fails(sgemm_gap.interior_gain, {**record, "results": raw[:1]}, naming="no such pair")


def _profile(instructions, grid, ms, stalls, lds=0.05, warps=7.99):
    return {"kernel": "k", "duration_ms": ms, "executed_warp_instructions": instructions,
            "grid_size": grid, "warps_per_sm": warps, "issue_slots_busy_percent": 50.0,
            "one_or_more_eligible_percent": 70.0, "registers_per_thread": 128,
            "block_size": 256, "instruction_mix": {"FFMA": 0.8, "LDS": lds},
            "stall_reasons": stalls}


def test_the_ragged_profile_by_hand():
    # sgemm_gap.ragged_profile on a record made up here: per block, the ragged
    # launch's 600 instructions against the aligned one's 500 (20% more); its
    # 104 blocks leave 28 of 132 SMs idle, none of 100; a missing profile or a
    # bad SM count is named.
    record = {"benchmark": "ncu_summary", "gpu": "G", "date": "d", "method": "m", "profiles": {
        "ragged": _profile(104 * 600, 104, 0.12, {"long_sb": 0.02, "short_sb": 0.1}),
        "aligned": _profile(96 * 500, 96, 0.10, {"long_sb": 0.01}, lds=0.04),
        "k1000": _profile(1000, 128, 0.06, {"short_sb": 0.3}, lds=0.08)}}
    facts = sgemm_gap.ragged_profile(record, 132)
    assert facts["blocks"] == 104 and facts["idle_sms"] == 28 and facts["warps_per_sm"] == 8
    assert facts["sms"] == 132 and facts["first_wait_1000"] == "short_sb"
    assert facts["extra_instructions"] == pytest.approx(0.2)
    assert facts["extra_time"] == pytest.approx(0.2)
    assert facts["long_wait"] == 0.02 and facts["shared_wait_1000"] == 0.3
    assert (facts["lds_1000"], facts["lds_aligned"]) == (0.08, 0.04)
    assert facts["issue_busy"] == pytest.approx(0.5)
    assert sgemm_gap.ragged_profile(record, 100)["idle_sms"] == 0
    del record["profiles"]["k1000"]
    _fails(sgemm_gap.ragged_profile, record, 132, naming="lacks \\['k1000'\\]")
    _fails(sgemm_gap.ragged_profile, {"benchmark": "x"}, 132, naming="Nsight Compute summary")
    record["profiles"]["k1000"] = record["profiles"]["aligned"]
    _fails(sgemm_gap.ragged_profile, record, 0, naming="sms must be a positive")


def test_what_the_chapter_says_of_the_ragged_profile():
    # The committed H200 profile: one wave that leaves SMs idle, warps that
    # hardly wait on global memory, more instructions a block where rows are
    # ragged, and at 1000^3 the waits on shared memory first.
    run = sgemm_gap.load_ragged_ncu_results()
    facts = sgemm_gap.ragged_profile(run, sgemm.gpu_entry(run["gpu"])["sms"])
    assert facts["idle_sms"] > 0 and facts["extra_instructions"] > 0 and facts["extra_time"] > 0
    assert facts["long_wait"] < 0.05 < facts["shared_wait_1000"]
    assert facts["first_wait_1000"] == "short_sb"
