"""gpucourse.kernels.timing: CUDA-event timing on a GPU, committed figures without one.

On the simulator the timing functions refuse to run (timings there mean
nothing) and say where the measured figures are; the committed H100 rows are
read back exactly; the table and the plot show any rows. The GPU test runs
only where there is one (GPUCOURSE_DEVICE=gpu).
"""

import json

import matplotlib
import numpy as np
import pytest

from gpucourse.device import cuda, on_gpu
from gpucourse.chapters import sgemm as sgemm_chapter
from gpucourse.grader import sgemm as check
from gpucourse.kernels import sgemm, timing

matplotlib.use("Agg")


@pytest.mark.skipif(on_gpu(), reason="the simulator's refusal")
def test_timing_refuses_the_simulator_and_points_to_the_committed_figures():
    with pytest.raises(RuntimeError, match="committed_rows"):
        timing.median_time_s(lambda: None)
    with pytest.raises(RuntimeError, match="needs an NVIDIA GPU"):
        timing.time_sgemm(sizes=(64,))


@pytest.mark.parametrize("call, message", [
    (lambda: timing.median_time_s(42), "run must be a function"),
    (lambda: timing.median_time_s(lambda: None, warmup=-1), "warmup must be"),
    (lambda: timing.median_time_s(lambda: None, repeats=0), "repeats must be"),
    (lambda: timing.time_sgemm(sizes=()), "sizes must be a non-empty list"),
    (lambda: timing.time_sgemm(sizes=(0,)), "sizes must be a whole number"),
    (lambda: timing.time_sgemm(levels=("4",)), "level must be one of"),
    (lambda: timing.time_sgemm(kernels=[1]), "kernels must be a dict"),
    (lambda: timing.time_sgemm(kernels={"mine": (sgemm.sgemm_naive, (1, 1))}),
     "kernels must map names to"),
    (lambda: sgemm_chapter.committed_rows(sizes=(3,)), "sizes must include a measured square size"),
    (lambda: sgemm_chapter.format_table([]), "rows must be a non-empty list"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_committed_rows_are_the_results_files_rows():
    record, rows = sgemm_chapter.committed_rows(sizes=(1024, 2048))
    assert record["benchmark"] == "sgemm" and "H100" in record["gpu"]
    stored = [r for r in record["results"] if r["m"] == r["n"] == r["k"] in (1024, 2048)]
    assert [(r["variant"], r["m"], r["tflops"]) for r in rows] == \
        [(r["variant"], r["m"], r["tflops"]) for r in stored]
    assert {"cublas", "level1", "level6"} <= {r["variant"] for r in rows}


def test_committed_rows_read_a_given_file(tmp_path):
    rows = [{"variant": "cublas", "m": 8, "n": 8, "k": 8, "ms": 1.0, "tflops": 2.0,
             "vs_cublas": 1.0, "max_rel_err": 0.0},
            {"variant": "level1", "m": 8, "n": 8, "k": 8, "ms": 4.0, "tflops": 0.5,
             "vs_cublas": 0.25, "max_rel_err": 1e-7},
            {"variant": "level1", "m": 8, "n": 16, "k": 8, "ms": 4.0, "tflops": 0.5,
             "vs_cublas": 0.25, "max_rel_err": 1e-7}]
    path = tmp_path / "sgemm-x-2030-01-01.json"
    path.write_text(json.dumps({"benchmark": "sgemm", "gpu": "X", "date": "2030-01-01",
                                "versions": {}, "results": rows}))
    record, read = sgemm_chapter.committed_rows(sizes=(8,), path=path)
    assert record["gpu"] == "X" and read == rows[:2]


def test_the_table_shows_each_variant_at_each_size_and_wrong_results():
    rows = [{"variant": "cublas", "m": 512, "tflops": 20.0, "vs_cublas": 1.0},
            {"variant": "mine", "m": 512, "tflops": 5.0, "vs_cublas": 0.25},
            {"variant": "broken", "m": 512, "tflops": None, "vs_cublas": None}]
    lines = sgemm_chapter.format_table(rows).splitlines()
    assert "512" in lines[0] and "share of cuBLAS at 512" in lines[0]
    assert lines[2].split() == ["mine", "5.00", "25.0%"]
    assert lines[3].split() == ["broken", "wrong"]
    ax = sgemm_chapter.plot_tflops(rows, title="t")
    assert [line.get_label() for line in ax.get_lines()] == ["cublas", "mine"]


@cuda.jit
def writes_nothing(a, b, c):
    pass


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
def test_time_sgemm_times_own_kernels_beside_the_library_on_a_gpu():
    mine = {"mine": (sgemm.sgemm_coalesced, lambda m, n: check.launch_shape("2", m, n)),
            "wrong": (writes_nothing, lambda m, n: check.launch_shape("2", m, n))}
    rows = timing.time_sgemm(mine, sizes=(256,), levels=("1", "6"), repeats=3)
    by = {r["variant"]: r for r in rows}
    assert {"level1", "level6", "mine", "wrong"} <= set(by)
    assert by["mine"]["max_rel_err"] < 1e-5 and by["mine"]["tflops"] > 0
    # C starts as NaN: a kernel that writes nothing is wrong, and is not timed.
    assert not np.isfinite(by["wrong"]["max_rel_err"]) and by["wrong"]["ms"] is None
    if "cublas" in by:
        assert by["level6"]["vs_cublas"] == pytest.approx(by["cublas"]["ms"] / by["level6"]["ms"])
    assert timing.median_time_s(lambda: None, warmup=0, repeats=2) >= 0
