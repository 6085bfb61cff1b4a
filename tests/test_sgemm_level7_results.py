"""Week 8: reading level 7's benchmark run (gpucourse.chapters.sgemm and sgemm_gap).

The functions chapter 8 uses to show level 7 (warp tiling) are checked
against the committed H100 run, benchmarks/results/sgemm_level7-*.json: the
newest full file is the one read (never the --quick one), every candidate
and shape is accounted for, the best share is the maximum over the rows,
level 6 is taken from its own shape, and the compile reports feed the
occupancy. No kernel runs here.
"""

import copy
import json

import pytest

from gpucourse import results
from gpucourse.kernels import sgemm
from gpucourse.chapters import sgemm as ladder, sgemm_gap


@pytest.fixture(scope="module")
def record():
    return sgemm_gap.load_level7_results()


def _fails(function, *args, naming):
    with pytest.raises(ValueError, match=naming):
        function(*args)


def _rows(record, variant, shape):
    return [r for r in record["results"]
            if r["variant"] == variant and (r["m"], r["n"], r["k"]) == shape]


def test_the_newest_full_run_is_read_never_the_quick_one(record, tmp_path):
    files = results.find_results("sgemm_level7")
    assert files and not any(p.stem.endswith("-quick") for p in files)
    assert record == json.loads(files[-1].read_text())
    assert record["benchmark"] == "sgemm_level7" and record["gpu"].startswith("NVIDIA")
    # A quick file of a later date is still not read.
    newest = json.loads(files[-1].read_text())
    (tmp_path / files[-1].name).write_text(json.dumps(newest))
    (tmp_path / "sgemm_level7-h100-2099-01-01-quick.json").write_text(
        json.dumps({**newest, "date": "2099-01-01", "results": []}))
    assert sgemm_gap.load_level7_results(tmp_path)["date"] == newest["date"]
    _fails(sgemm_gap.load_level7_results, tmp_path / "missing", naming="results file or a folder")


def test_the_sweep_has_every_timed_candidate_fastest_first(record):
    shape = (4096, 4096, 4096)
    sweep = sgemm_gap.level7_sweep(record)
    raw = [r for r in _rows(record, "level7", shape) if "failed" not in r]
    assert len(sweep) == len(raw) == len(record["candidates"])
    # The committed run timed exactly the package's candidates.
    assert {json.dumps(c, sort_keys=True) for c in record["candidates"]} == {
        json.dumps({f: getattr(c, f) for f in c.__dataclass_fields__}, sort_keys=True)
        for c in sgemm.WARP_TILE_CANDIDATES}
    shares = [r["vs_cublas"] for r in sweep]
    assert shares == sorted(shares, reverse=True)
    assert shares[0] == max(r["vs_cublas"] for r in raw)
    for row in sweep:
        match = next(r for r in raw if r["config"] == row["config"])
        assert (row["ms"], row["tflops"], row["vs_cublas"]) == (
            match["ms"], match["tflops"], match["vs_cublas"])
        # vs_cublas is cuBLAS's time over the candidate's, in the same run.
        assert row["vs_cublas"] == pytest.approx(_rows(record, "cublas", shape)[0]["ms"] / row["ms"])
        # The label is the benchmark's, wm_iter included (WarpTileConfig's property).
        config = sgemm.WarpTileConfig(**row["config"])
        assert f"it{config.wm_iter}x{config.wn_iter}" in row["label"]
        # Resources from the validation's compile report, shared memory as the config says.
        assert row["shared_bytes_per_block"] == config.shared_bytes
        assert row["warps_per_sm"] == ladder.occupancy(
            row["registers_per_thread"], row["shared_bytes_per_block"], config.threads)["warps_per_sm"]
    _fails(sgemm_gap.level7_sweep, record, 4095, naming="a shape where level 7 was timed")
    _fails(sgemm_gap.level7_sweep, {"benchmark": "sgemm", "results": []}, naming="sgemm_level7")


def test_occupancy_of_two_candidates_by_hand(record):
    sweep = {r["label"]: r for r in sgemm_gap.level7_sweep(record)}
    # Capped at 128 registers (sgemm._register_cap) -> 4,096 a warp; 8 warps =
    # 32,768: two blocks, 16 warps.
    capped = sweep["64x256x16 w32x64 it1x2 t8x4 256th"]
    assert (capped["registers_per_thread"], capped["warps_per_sm"]) == (128, 16)
    # The fastest, 128 outputs a thread: 232 registers -> 7,424 a warp (29 units
    # of 256); 8 warps = 59,392: one block, 8 warps.
    best = sweep["128x256x16 w64x64 it1x4 t8x4 256th"]
    assert (best["registers_per_thread"], best["warps_per_sm"]) == (232, 8)


def test_level7_against_level6_matches_each_shape_to_its_own_rows(record):
    table = sgemm_gap.level7_against_level6(record)
    level7_shapes = []
    for r in record["results"]:
        if r["variant"] == "level7" and (r["m"], r["n"], r["k"]) not in level7_shapes:
            level7_shapes.append((r["m"], r["n"], r["k"]))
    assert [(r["m"], r["n"], r["k"]) for r in table] == level7_shapes
    assert len(table) == 4 and table[0]["candidates"] == len(record["candidates"])
    for row in table:
        shape = (row["m"], row["n"], row["k"])
        (level6,) = _rows(record, "level6", shape)
        (cublas,) = _rows(record, "cublas", shape)
        timed = [r for r in _rows(record, "level7", shape) if "failed" not in r]
        assert row["level6"] == level6["vs_cublas"] and row["cublas_tflops"] == cublas["tflops"]
        assert row["level7"] == max(r["vs_cublas"] for r in timed)
        assert row["candidates"] == len(timed)
        assert row["gap"] == pytest.approx(row["level7"] - row["level6"])
        assert row["best_label"] == sgemm_gap.warp_config_label(row["best_config"])
    # Level 6's row is taken from its own shape, not from 4096^3.
    assert len({row["level6"] for row in table}) == len(table)
    # What the chapter says of this run: level 7 ahead of level 6 at 4096^3 and
    # 8192^3, and at least 90% of cuBLAS at both (issue 16's target).
    gaps = {(row["m"], row["n"], row["k"]): row["gap"] for row in table}
    assert gaps[4096, 4096, 4096] > 0 and gaps[8192, 8192, 8192] > 0
    level7 = {(row["m"], row["n"], row["k"]): row["level7"] for row in table}
    assert min(level7[4096, 4096, 4096], level7[8192, 8192, 8192]) >= sgemm_gap.LEVEL7_TARGET_SHARE
    broken = copy.deepcopy(record)
    broken["results"] = [r for r in broken["results"]
                         if not (r["variant"] == "level6" and r["m"] == 8192)]
    _fails(sgemm_gap.level7_against_level6, broken, naming="lacks one")


def test_unroll_probe_reads_registers_and_warps(record):
    rows = sgemm_gap.level7_unroll_probe(record)
    raw = {r["unroll"]: r for r in record["unroll_probe"]}
    assert [r["unroll"] for r in rows] == [1, 2, 4]
    best = sgemm_gap.level7_sweep(record)[0]
    for row in rows:
        assert row["label"] == best["label"]  # the sweep's fastest candidate
        assert row["tflops"] == raw[row["unroll"]]["tflops"]
        assert row["registers_per_thread"] == raw[row["unroll"]]["registers_per_thread"]
    # The run's own unroll (the whole tile), and writing the loop out costs
    # registers: past 128 each, one block of 8 warps per SM.
    assert record["dot_unroll"] == sgemm.DOT_UNROLL == "tile"
    registers = [r["registers_per_thread"] for r in rows]
    assert registers == sorted(registers) and registers[0] > 128
    assert all(r["warps_per_sm"] == 8 for r in rows)
    _fails(sgemm_gap.level7_unroll_probe, {**record, "unroll_probe": []}, naming="unroll_probe")


def test_warp_config_label_and_plot(record):
    assert sgemm_gap.warp_config_label(
        {f: getattr(sgemm.WARP_TILE_WORKLOG, f) for f in sgemm.WARP_TILE_WORKLOG.__dataclass_fields__}
    ) == "128x128x16 w64x64 it1x4 t8x4 128th"
    _fails(sgemm_gap.warp_config_label, {"bm": 128}, naming="config must be a dict with the fields")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    left, right = sgemm_gap.plot_level7(record)
    assert len(left.patches) == len(sgemm_gap.level7_sweep(record))
    assert len(right.patches) == 2 * len(sgemm_gap.level7_against_level6(record))
    plt.close("all")


def test_level7s_default_is_the_winner_across_the_shapes_of_every_full_sweep():
    # Not the best of a sweep at one shape: of the candidates timed at every
    # shape of a run (its finalists), the default has the highest geometric
    # mean share of cuBLAS, in each committed full run, and the worklog's
    # sizes, which it replaced, were slower at 4096^3.
    import math

    files = [p for p in results.find_results("sgemm_level7") if not p.stem.endswith("-quick")]
    default = {f: getattr(sgemm.WARP_TILE_DEFAULT, f) for f in sgemm.WARP_TILE_DEFAULT.__dataclass_fields__}
    worklog = {f: getattr(sgemm.WARP_TILE_WORKLOG, f) for f in sgemm.WARP_TILE_WORKLOG.__dataclass_fields__}
    assert len(files) >= 2
    for path in files:
        rows = [r for r in json.loads(path.read_text())["results"] if r["variant"] == "level7"]
        shares = {}
        for r in rows:
            shares.setdefault(json.dumps(r["config"], sort_keys=True), {})[r["m"], r["n"], r["k"]] = \
                r["vs_cublas"]
        shapes = {shape for by_shape in shares.values() for shape in by_shape}
        everywhere = {c: s for c, s in shares.items() if set(s) == shapes}
        assert len(shapes) == 4 and len(everywhere) == 3, path.name
        mean = {c: math.exp(sum(math.log(v) for v in s.values()) / len(s)) for c, s in everywhere.items()}
        assert max(mean, key=mean.get) == json.dumps(default, sort_keys=True), path.name
        at_4096 = shares[json.dumps(default, sort_keys=True)][4096, 4096, 4096]
        assert shares[json.dumps(worklog, sort_keys=True)][4096, 4096, 4096] < at_4096
