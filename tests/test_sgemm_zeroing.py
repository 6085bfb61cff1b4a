"""Week 8: zeroing C before split-K's and stream-K's adds (issue 33,
twenty-fifth session). On a GPU matmul zeroes a contiguous C with the driver's
memset (entry_point.ZERO_BY_MEMSET, launch.memset_zeros), which ran at more
than twice the zeroing kernel's speed on a large C
(benchmarks/sgemm_zeroing.py); on the simulator, or for a C with gaps between
its rows, the kernel does it. The memset's measured line prices it in a trial
model (benchmarks/sgemm_model_json.py --trial-zero-memset), judged on
held-out set 10 against the committed model with the kernel. Written into
the model and run on the grid and every set whose picks it moves
(twenty-seventh session), its moves lost, and it was not adopted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpucourse.chapters import sgemm_held_out
from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import entry_point, shape_model, shape_model_fit
from benchmark_scripts import benchmark_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TRIAL = BENCHMARKS / "trials" / "sgemm_shape_model-zero-memset.json"


@pytest.mark.parametrize("splits", [3, "stream"])
def test_split_plans_zero_c_before_adding_into_it(splits):
    # out holds NaN: any element the zeroing missed would stay NaN after the adds.
    rng = np.random.default_rng(7)
    a = rng.standard_normal((37, 70)).astype(np.float32)
    b = rng.standard_normal((70, 29)).astype(np.float32)
    out = np.full((37, 29), np.nan, dtype=np.float32)
    assert entry_point.ZERO_BY_MEMSET  # the default; the simulator takes the kernel
    c = sgemm.matmul(a, b, splits=splits, out=out)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isfinite(c).all()
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)


def _row(m, n, variant, wall, kernels):
    return {"m": m, "n": n, "k": 512, "variant": variant, "wall_us": wall, "host_us": 20.0,
            "kernels": [{"name": name, "us": us, "per_call": 1.0} for name, us in kernels]}


def test_the_memset_line_is_fitted_from_our_rows_and_never_from_cublas_memsets():
    # Our memsets of 1, 4 and 9 million floats took 1 + 0.9 us a million;
    # cuBLAS's own memsets (about 1.2 us whatever C's size) are not ours.
    rows = []
    for m in (1000, 2000, 3000):
        zero = 1 + 0.9 * m * m / 1e6
        rows += [_row(m, m, "auto", 100 + zero + 1.5,
                      [("sgemm_split[abi]", 100.0), ("Memset (Device)", zero)]),
                 _row(m, m, "registers", 120.5, [("sgemm[abi]", 120.0)]),
                 _row(m, m, "cublas", 92.0, [("xmma", 89.0), ("Memset (Device)", 1.2)])]
    fit = shape_model_fit.fit_zero_matrix({"results": rows})
    assert fit == {"fixed_us": 2.0, "us_per_million": 0.9, "points": 3}


def test_the_trial_is_the_writers_output_and_refuses_records_timed_with_the_kernel(tmp_path):
    sgemm_model_json = benchmark_script("sgemm_model_json")
    record = (Path(sgemm_held_out.results.results_dir())
              / sgemm_held_out.KERNEL_TIMES_MEMSET[0])
    if not record.exists():
        pytest.skip("no memset kernel-times run committed")
    before = sgemm.MODEL_PATH.read_bytes()
    out = tmp_path / "trial.json"
    base = sgemm_model_json.MODEL_BEFORE_STEPPED  # the model the trial was written on
    block = sgemm_model_json.trial_zero_memset(out, [record], base)
    assert sgemm.MODEL_PATH.read_bytes() == before  # the committed model untouched
    assert json.loads(out.read_text()) == json.loads(TRIAL.read_text())
    assert block["points"] >= 10 and 0.5 < block["us_per_million"] < 1.5
    assert block == {**sgemm_held_out.zero_matrix_line(sgemm_held_out.KERNEL_TIMES_MEMSET),
                     "source": block["source"]}
    # Only the zeroing line differs from the model it was written on.
    committed = json.loads(base.read_text())
    trial = json.loads(TRIAL.read_text())
    trial_h200, committed_h200 = trial["gpus"]["NVIDIA H200"], committed["gpus"]["NVIDIA H200"]
    assert {k: v for k, v in trial_h200.items() if k != "zero_matrix"} == \
        {k: v for k, v in committed_h200.items() if k != "zero_matrix"}
    # The kernel's records cannot give the memset's line.
    kernel_record = Path(sgemm_held_out.results.results_dir()) / sgemm_held_out.KERNEL_TIMES[0]
    with pytest.raises(SystemExit, match="zeroing"):
        sgemm_model_json.zero_memset_block([kernel_record])


def test_the_memset_zeroed_c_at_under_half_the_kernels_time_where_the_gpu_sets_the_pace():
    times = sgemm_held_out.zeroing_times()
    if times is None:
        pytest.skip("no sgemm_zeroing run committed")
    large = [size for size in times if size[0] * size[1] >= 9_000_000]
    assert len(large) >= 3
    for size in large:
        assert times[size]["memset_d32"] < times[size]["zero_kernel"] / 2, size
        # about the bandwidth of the GPU's memory: 3.5 TB/s or more
        assert 4 * size[0] * size[1] / times[size]["memset_d32"] / 1e6 > 3.5, size


def test_zeroing_times_names_a_check_that_failed(tmp_path):
    path = sgemm_held_out.results.results_dir() / sgemm_held_out.ZEROING
    if not path.exists():
        pytest.skip("no sgemm_zeroing run committed")
    bad = json.loads(path.read_text())
    bad["checks"][0]["zeroed"] = False
    copy = tmp_path / path.name
    copy.write_text(json.dumps(bad))
    first = bad["checks"][0]
    with pytest.raises(ValueError, match=f"{first['m']} x {first['n']} {first['what']}"):
        sgemm_held_out.zeroing_times(copy)


def test_set_10_judged_the_memset_trial_against_the_committed_model():
    # Drawn and committed before any timing; the committed model with the
    # zeroing kernel and the trial with the memset, in turns, twice each.
    committed = sgemm_held_out.history_run(10)
    trial = sgemm_held_out.trial_zero_memset(10)
    if committed is None or trial is None:
        pytest.skip("set 10's runs not committed")
    folder = sgemm_held_out.results.results_dir() / "reruns"
    second = {who: sgemm_held_out.load_held_out_results(10, folder / name) for who, name in (
        ("committed", "sgemm_held_out_10-h200-2026-11-30-second.json"),
        ("trial", "sgemm_held_out_10-h200-2026-11-30-trial-zero-memset-second.json"))}
    assert committed["model"]["zeroing"] == second["committed"]["model"]["zeroing"] == "kernel"
    assert trial["model"]["zeroing"] == second["trial"]["model"]["zeroing"] == "memset"
    # The trial's picks are those of the trial file (its line as fitted).
    entry = shape_model.gpu_entry("NVIDIA H200", TRIAL)
    for record in (trial, second["trial"]):
        for row in (r for r in record["results"] if r["variant"] == "auto"):
            plan = shape_model.choose_plan((row["m"], row["n"], row["k"]), entry=entry)
            assert (row["config"]["bm"], row["config"]["bn"], row["config"]["splits"]) == \
                (plan["config"].bm, plan["config"].bn, plan["splits"])
    # One pick moved, and ran faster in both rounds.
    for before, after in ((committed, trial), (second["committed"], second["trial"])):
        moved = sgemm_held_out.moved_picks({10: before}, {10: after})
        assert moved["moved"] == moved["faster"] == 1 and moved["mean"] > 0.02
    assert sgemm_held_out.class_met({10: committed}) == (21, 24)


def test_the_fit_writes_into_the_model_what_the_memset_trial_holds(tmp_path, monkeypatch):
    # --fit-zero-memset, on a copy of the model it was written on: the same JSON as
    # the trial file set 10 judged (run once the grid and the sets run it).
    record = (Path(sgemm_held_out.results.results_dir())
              / sgemm_held_out.KERNEL_TIMES_MEMSET[0])
    if not record.exists():
        pytest.skip("no memset kernel-times run committed")
    from test_sgemm_split_residency import fitted_on_a_copy_of_the_model

    fitted = fitted_on_a_copy_of_the_model(
        tmp_path, monkeypatch, lambda writer: writer.fit_zero_memset([record]))
    assert fitted == json.loads(TRIAL.read_text())



def test_the_memset_trial_written_into_the_model_lost_where_it_moved_picks():
    # The run meant to adopt it: the grid and sets 3, 4, 7-11 under the trial's
    # block, beside their committed runs. Every move went to more slices.
    adoption = sgemm_held_out.zero_memset_adoption()
    if adoption is None:
        pytest.skip("the adoption runs are not committed")
    trial, committed = adoption["trial"], adoption["committed"]
    assert sorted(trial) == [0, 3, 4, 7, 8, 9, 10, 11]
    entry = shape_model.gpu_entry("NVIDIA H200", TRIAL)
    for record in trial.values():  # each ran the trial's picks
        for row in (r for r in record["results"] if r["variant"] == "auto"):
            plan = shape_model.choose_plan((row["m"], row["n"], row["k"]), entry=entry)
            assert (row["config"]["bm"], row["config"]["bn"], row["config"]["splits"]) == \
                (plan["config"].bm, plan["config"].bn, plan["splits"]), (row["m"], row["n"])
    moved = sgemm_held_out.moved_picks(committed, trial)
    assert (moved["moved"], moved["faster"]) == (14, 6) and moved["mean"] < -0.01
    grid = sgemm_held_out.moved_picks({0: committed[0]}, {0: trial[0]})
    assert (grid["moved"], grid["faster"]) == (3, 0)
    was, now = sgemm_held_out.worst_moved(committed, trial)
    assert (now["m"], now["n"], now["k"]) == (553, 1741, 638)
    assert was["vs_cublas"] - now["vs_cublas"] > 0.1
    for _, old, row in sgemm_held_out.moved_rows(committed, trial):
        assert old["config"]["splits"] == 1 and row["config"]["splits"] != 1
    # And the committed model keeps the kernel's line, not the trial's.
    block = shape_model.gpu_entry("NVIDIA H200")["zero_matrix"]
    assert block != json.loads(TRIAL.read_text())["gpus"]["NVIDIA H200"]["zero_matrix"]
