"""Week 8: the rule a change to `auto` is judged by on a held-out set run in
turns (gpucourse.chapters.sgemm_judging, benchmarks/sgemm_judge.py).

The rule is checked on hand-made rounds whose verdict is worked out here,
and on the committed runs whose verdicts the sessions reached by hand: set
13 adopted the wide and stepped copies and refused the peeled stores; set 11
refused the ring-pairs trial.
"""

from __future__ import annotations

import json

import pytest

from gpucourse.chapters import sgemm_held_out as held
from gpucourse.chapters.sgemm_judging import judge_in_turns
from benchmark_scripts import benchmark_script, model_before_stepped

RESULTS = held.results.results_dir()
SET_13 = "reruns/sgemm_held_out_13-h200-2026-12-01-"


def _round(shares: dict, plans: dict | None = None) -> dict:
    """A run of auto at each (m, n, k) of `shares` ({shape: (share of cuBLAS,
    ms)}), its plan's tile from `plans` (default 64), cuBLAS beside it."""
    rows = []
    for (m, n, k), (share, ms) in shares.items():
        bm = (plans or {}).get((m, n, k), 64)
        rows += [{"variant": "auto", "m": m, "n": n, "k": k, "vs_cublas": share, "ms": ms,
                  "config": {"bm": bm, "bn": 128}},
                 {"variant": "cublas", "m": m, "n": n, "k": k, "vs_cublas": 1.0, "ms": ms * share}]
    return {"benchmark": "sgemm_held_out_99", "results": rows}


A, B, C = (600, 701, 800), (900, 1003, 500), (1000, 1000, 1000)


def test_a_kernel_change_is_judged_on_every_call_and_must_win_every_round():
    before = [_round({A: (0.80, 1.0), B: (0.90, 2.0), C: (0.95, 3.0)})] * 2
    better = [_round({A: (0.86, 0.93), B: (0.91, 1.98), C: (0.95, 3.0)}),
              _round({A: (0.87, 0.92), B: (0.90, 2.0), C: (0.96, 2.97)})]
    verdict = judge_in_turns(before, better)
    assert verdict["met"] == {"before": [2, 2], "after": [3, 3]} and verdict["shapes"] == 3
    assert verdict["moved"] == [] and verdict["judged"] == "every"
    assert verdict["faster"] == 3 and verdict["adopt"]
    # One round short of the other's best is not a win, however fast.
    mixed = [better[0], _round({A: (0.84, 0.9), B: (0.90, 1.9), C: (0.95, 2.9)})]
    verdict = judge_in_turns(before, mixed)
    assert not verdict["adopt"]
    assert "met the target at 2 in its worst round, not more than the 2" in verdict["why"]


def test_a_model_change_is_judged_on_the_calls_whose_pick_moved():
    before = [_round({A: (0.80, 1.0), B: (0.90, 2.0), C: (0.95, 3.0)})]
    # A's pick moves and it meets the target, but slower calls elsewhere do
    # not count: only A's time judges the change.
    after = [_round({A: (0.86, 0.95), B: (0.90, 2.2), C: (0.95, 3.3)}, plans={A: 128})]
    verdict = judge_in_turns(before, after)
    assert verdict["moved"] == [A] and verdict["judged"] == "moved"
    assert verdict["change"] == pytest.approx(-0.05) and verdict["adopt"]
    slower = [_round({A: (0.86, 1.05), B: (0.90, 2.0), C: (0.95, 3.0)}, plans={A: 128})]
    verdict = judge_in_turns(before, slower)
    assert not verdict["adopt"] and "ran +5.0% at the median" in verdict["why"]


def test_a_ring_that_reads_b_another_way_is_a_moved_plan():
    # Same tile, same slices, but B read 4 bytes a copy instead of copied
    # first: a change of the model's ring_copy or ring_scalar_b block moves
    # such plans on their own, and their calls judge it.
    before = [_round({A: (0.84, 1.0), B: (0.90, 2.0), C: (0.95, 3.0)})]
    after = [_round({A: (0.86, 0.97), B: (0.90, 2.0), C: (0.95, 3.1)})]
    for row in after[0]["results"]:
        if (row["m"], row["n"], row["k"]) == A:
            row["model"] = {"ring_scalar_b": True}
    verdict = judge_in_turns(before, after)
    assert verdict["moved"] == [A] and verdict["judged"] == "moved"
    assert verdict["change"] == pytest.approx(-0.03) and verdict["adopt"]
    # held_out.moved_rows finds it only when asked to look at B's reads: the
    # chapter's older counts of moved picks are of tiles and slices.
    assert list(held.moved_rows({0: before[0]}, {0: after[0]})) == []
    assert len(list(held.moved_rows({0: before[0]}, {0: after[0]}, reads=True))) == 1


def test_rounds_of_different_sets_or_no_rounds_are_refused():
    one = _round({A: (0.8, 1.0)})
    with pytest.raises(ValueError, match="one round or more"):
        judge_in_turns([], [one])
    with pytest.raises(ValueError, match="the same shapes"):
        judge_in_turns([one], [_round({B: (0.8, 1.0)})])


def _committed(*names):
    paths = [RESULTS / name for name in names]
    if not all(path.exists() for path in paths):
        pytest.skip("the runs are not committed")
    return ",".join(str(path) for path in paths)


def test_the_committed_verdicts_are_the_rules(capsys):
    judge = benchmark_script("sgemm_judge")
    before = _committed(*(f"{SET_13}before-wide-copy-{r}.json" for r in ("first", "second", "third")))
    wide = _committed(f"{SET_13}wide-copy-first.json", f"{SET_13}wide-copy-second.json")
    assert judge.main(["--before", before, "--after", wide]) == 0
    assert "ADOPT: it met the target at more large shapes" in capsys.readouterr().out
    peeled = _committed(f"{SET_13}peeled-first.json", f"{SET_13}peeled-second.json")
    assert judge.main(["--before", before, "--after", peeled]) == 1
    assert "DO NOT ADOPT" in capsys.readouterr().out
    pairs_before = _committed("reruns/sgemm_held_out_11-h200-2026-11-30-beside-ring-pairs-trial.json")
    pairs_after = _committed("reruns/sgemm_held_out_11-h200-2026-11-30-trial-ring-pairs.json")
    assert judge.main(["--before", pairs_before, "--after", pairs_after]) == 1
    # seven plans moved: five tiles or slices, and two rings that read B
    # another way (the trial moved how B is read as well as tiles)
    assert "picks moved: 7" in capsys.readouterr().out


def test_the_script_names_a_wrong_file(tmp_path):
    judge = benchmark_script("sgemm_judge")
    with pytest.raises(SystemExit, match="no file nowhere.json"):
        judge.main(["--before", "nowhere.json", "--after", "nowhere.json"])
    other = tmp_path / "x.json"
    other.write_text('{"benchmark": "sgemm_grid"}')
    with pytest.raises(SystemExit, match="is not a held-out run"):
        judge.main(["--before", str(other), "--after", str(other)])
    mixed = _committed("sgemm_held_out_4-h200-2026-12-01.json", "sgemm_held_out_5-h200-2026-12-01.json")
    with pytest.raises(SystemExit, match=r"one held-out set, got sets \['4', '5'\]"):
        judge.main(["--before", mixed, "--after", mixed])


def test_a_run_is_checked_against_the_plans_of_the_model_before_it_is_committed(tmp_path):
    # Set 4 under the model the thirtieth session adopted moved three plans
    # from those of the model before it: one tile, two ways of reading B.
    from gpucourse.chapters.sgemm_judging import plans_off_the_model
    from gpucourse.kernels.sgemm import shape_model

    adopted_run = RESULTS / "reruns/sgemm_held_out_4-h200-2026-12-01-adopted.json"
    trial = RESULTS.parent / "trials" / "sgemm_shape_model-stepped.json"
    before = RESULTS / "reruns/sgemm_held_out_14-h200-2026-12-01-before-stepped-first.json"
    if not (adopted_run.exists() and trial.exists() and before.exists()):
        pytest.skip("the adopted runs are not committed")
    record = json.loads(adopted_run.read_text())
    stepped = shape_model.gpu_entry(record["gpu"], trial)
    then = shape_model.gpu_entry(record["gpu"], model_before_stepped())
    assert plans_off_the_model(record, stepped) == []
    assert plans_off_the_model(record, then) == [
        (516, 3877, 1797), (3433, 673, 373), (3832, 1189, 148)]

    promote = benchmark_script("sgemm_promote").promote
    with pytest.raises(ValueError, match="does not pick at 3 shapes"):
        promote(adopted_run, results_dir=tmp_path, entry=then)
    assert promote(adopted_run, results_dir=tmp_path, entry=stepped).name == \
        "sgemm_held_out_4-h200-2026-12-01.json"
    made = promote(before, results_dir=tmp_path, entry=then)
    assert made.name == "sgemm_held_out_14-h200-2026-12-01.json"
    assert made.read_bytes() == before.read_bytes()
    with pytest.raises(ValueError, match="committed already: --replace"):
        promote(before, results_dir=tmp_path, entry=then)
    # A trial's run is promoted as the set's own, its note kept.
    as_trial = tmp_path / "t.json"
    as_trial.write_text(json.dumps({**json.loads(before.read_text()),
                                    "benchmark": "sgemm_held_out_14_trial"}))
    made = promote(as_trial, replace=True, results_dir=tmp_path, entry=then)
    kept = tmp_path / "reruns" / "sgemm_held_out_14-h200-2026-12-01-superseded.json"
    assert kept.read_bytes() == before.read_bytes()  # the run replaced, kept
    with pytest.raises(ValueError, match="which exists: move one of them first"):
        promote(as_trial, replace=True, results_dir=tmp_path, entry=then)
    promoted = json.loads(made.read_text())
    assert promoted["benchmark"] == "sgemm_held_out_14"
    assert promoted["results"] == json.loads(before.read_text())["results"]
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"benchmark": "sgemm_kernel_times", "results": []}))
    with pytest.raises(ValueError, match="is not a run of sgemm_grid.py"):
        promote(other, results_dir=tmp_path)


def test_the_promote_script_refuses_what_it_cannot_promote(tmp_path, capsys):
    script = benchmark_script("sgemm_promote")
    assert script.main([str(tmp_path / "nowhere.json")]) == 1
    assert "no such file" in capsys.readouterr().out


def test_a_trial_is_seen_offline_to_move_the_plans_its_runs_moved(capsys):
    # The stepped trial against the model before it: set 14's seven moved
    # plans are those its rounds in turns moved, and set 4's three those its
    # adopted run moved (test above), before any GPU ran it.
    from gpucourse.chapters.sgemm_judging import plans_moved_by
    from gpucourse.kernels.sgemm import shape_model

    trial = RESULTS.parent / "trials" / "sgemm_shape_model-stepped.json"
    if not trial.exists():
        pytest.skip("the stepped trial is not committed")
    off_grid = benchmark_script("sgemm_off_grid")
    stepped, then = (shape_model.gpu_entry("NVIDIA H200", path)
                     for path in (trial, model_before_stepped()))
    moved = plans_moved_by(stepped, then, {n: off_grid.HELD_OUT[n] for n in (4, 14)})
    assert [shape for shape, _, _ in moved[4]] == [
        (516, 3877, 1797), (3433, 673, 373), (3832, 1189, 148)]
    assert sorted(shape for shape, _, _ in moved[14]) == [
        (524, 1765, 9995), (528, 2542, 10670), (593, 3846, 85), (924, 665, 1422),
        (1104, 3117, 377), (2005, 895, 999), (2894, 4543, 79)]
    shape, before, after = next(found for found in moved[14] if found[0] == (1104, 3117, 377))
    assert before == ("128x128x16 8x8", 1, False) and after == ("64x256x16 8x16 s2", 1, False)
    assert plans_moved_by(then, then, {4: off_grid.HELD_OUT[4]}) == {4: []}
    # The script prints the same, set by set.
    judge = benchmark_script("sgemm_judge")
    assert judge.main(["--offline", str(trial), "--base", str(model_before_stepped())]) == 0
    out = capsys.readouterr().out
    assert "set 14: 7 of 24 plans move" in out and "set 4: 3 of 24 plans move" in out
    assert "1104x3117x377: 128x128x16 8x8 1 -> 64x256x16 8x16 s2 1" in out
    with pytest.raises(SystemExit):
        judge.main(["--before", "x.json"])  # --after missing, and no --offline
