"""Week 8: the runs that turned on the wide copies of B and the stepped 4-byte
copies (gpucourse.chapters.sgemm_ring_ways), read as chapter 8 reads them.

Each reader is checked on a hand-made record whose answer is counted here,
on the committed runs against counts made from their rows, and on the
errors a wrong or incomplete run gets; the chapter's guard is checked by
turning a finding around.
"""

from __future__ import annotations

import json

import pytest

from gpucourse.chapters import sgemm_model_findings as findings
from gpucourse.chapters import sgemm_ring_ways as ring_ways


def _way(m, n, way, ms, err=0.0):
    return {"m": m, "n": n, "k": 100, "way": way, "ms": ms, "max_rel_err": err}


def _write(tmp_path, name, record):
    path = tmp_path / name
    path.write_text(json.dumps({"benchmark": name.split("-")[0], "gpu": "test",
                                "date": "2026-12-01", "versions": {}, "method": "test", **record}))
    return path


def test_each_way_is_judged_against_the_way_it_would_replace(tmp_path):
    # Two shapes: the wide copy faster at both, the overlap at one, the
    # stepped copies against "scalar" (not "padded") at one.
    rows = []
    for m, times in ((600, {"padded": 1.0, "padded_copy_once": 0.9, "padded_wide": 0.98,
                            "padded_overlap": 1.02, "scalar": 1.1, "scalar_stepped": 1.0}),
                     (700, {"padded": 2.0, "padded_copy_once": 1.8, "padded_wide": 1.9,
                            "padded_overlap": 1.9, "scalar": 1.5, "scalar_stepped": 1.6})):
        rows += [_way(m, 701, way, ms) for way, ms in times.items()] + [_way(m, 701, "cublas", 0.5)]
    ways = ring_ways.copy_ways(_write(tmp_path, "sgemm_ring_pairs-test-2026-12-01.json",
                                      {"results": rows}))
    assert ways["wide"]["faster"] == 2 and ways["wide"]["shapes"] == 2
    assert ways["overlap"]["faster"] == 1
    assert ways["stepped"]["faster"] == 1  # 1.0 < 1.1, and 1.6 > 1.5
    assert ways["stepped"]["change"][0] == pytest.approx(1.0 / 1.1 - 1)
    assert ways["copy_once"]["change"][1] == pytest.approx(-0.1)


def test_a_run_missing_a_way_or_wrong_somewhere_is_named(tmp_path):
    only = [_way(600, 701, "padded", 1.0), _way(600, 701, "scalar", 1.1),
            _way(600, 701, "padded_wide", 0.9)]
    with pytest.raises(ValueError, match="did not time padded_copy_once, padded_overlap, "
                                         "scalar_stepped"):
        ring_ways.copy_ways(_write(tmp_path, "sgemm_ring_pairs-a-2026-12-01.json",
                                   {"results": only}))
    wrong = only + [_way(600, 701, "scalar_stepped", 1.0, err=0.3)]
    with pytest.raises(ValueError, match="scalar_stepped was wrong at 600 x 701"):
        ring_ways.copy_ways(_write(tmp_path, "sgemm_ring_pairs-b-2026-12-01.json",
                                   {"results": wrong}))
    assert ring_ways.copy_ways(tmp_path / "absent.json") is None


def test_copy_rates_leave_out_copies_that_cost_their_launch(tmp_path):
    def row(kernel, size, us, exact=True):
        return {"kernel": kernel, "k": 1, "n": 1, "bytes": size, "us": us, "exact": exact}
    rows = [row("pad_copy", 4e7, 20.0), row("pad_copy", 8e7, 32.0), row("pad_copy", 1e6, 5.5),
            row("pad_copy_wide", 4e7, 10.0), row("pad_copy_wide", 8e7, 20.0)]
    rates = ring_ways.copy_rates(_write(tmp_path, "sgemm_ring_copy-t-2026-12-01.json",
                                        {"results": rows}))
    assert rates == {"pad_copy": (2000.0, 2500.0), "pad_copy_wide": (4000.0, 4000.0)}
    with pytest.raises(ValueError, match="pad_copy_wide copied B of 1 x 1 wrong"):
        ring_ways.copy_rates(_write(tmp_path, "sgemm_ring_copy-u-2026-12-01.json",
                                    {"results": rows + [row("pad_copy_wide", 4e7, 9, False)]}))
    with pytest.raises(ValueError, match="no copy by pad_copy_wide"):
        ring_ways.copy_rates(_write(tmp_path, "sgemm_ring_copy-v-2026-12-01.json",
                                    {"results": rows[:3]}))


def test_the_committed_runs_say_what_the_chapter_says():
    ways = ring_ways.copy_ways()
    if ways is None:
        pytest.skip("the copy ways' run is not committed")
    # Counted from the committed rows (results/reruns/..-copy-ways.json).
    assert {name: way["faster"] for name, way in ways.items()} == {
        "copy_once": 29, "wide": 29, "overlap": 13, "stepped": 24}
    low_narrow, high_narrow = ring_ways.copy_rates()["pad_copy"]
    low_wide, high_wide = ring_ways.copy_rates()["pad_copy_wide"]
    assert 2000 < low_narrow < high_narrow < 2800 < 3500 < low_wide < high_wide < 5000
    assert ring_ways.set_13_rounds() == {"wide and stepped": [(23, 24)] * 2,
                                         "before": [(21, 24)] * 3, "peeled": [(19, 24)] * 2}
    values = findings.copy_way_values()
    assert values["set13_new_met"] == "23 and 23 of 24"
    assert values["set13_before_met"] == "21, 21 and 21 of 24"
    assert values["set13_peeled_rounds"] == "two"


def test_set_13_turned_around_stops_the_build_naming_the_sentence(monkeypatch):
    rounds = ring_ways.set_13_rounds()
    if rounds is None:
        pytest.skip("set 13's rounds are not committed")
    turned = {**rounds, "peeled": [(22, 24), (22, 24)]}
    monkeypatch.setattr(findings.ring_ways, "set_13_rounds", lambda: turned)
    with pytest.raises(findings.ProseMismatch, match="fewer with peeled stores"):
        findings.copy_way_values()


def test_set_13_is_not_read_until_every_round_is_committed(tmp_path):
    assert ring_ways.set_13_rounds({"one": (str(tmp_path / "absent.json"),)}) is None


def _model_json():
    from benchmark_scripts import benchmark_script

    return benchmark_script("sgemm_model_json")


WIDE_TRIAL = ring_ways.results.results_dir().parent / "trials" / "sgemm_shape_model-wide-copy.json"


def test_the_wide_copy_trial_prices_the_copy_matmul_makes_and_nothing_else(tmp_path):
    from gpucourse.kernels import sgemm

    record = ring_ways.results.results_dir() / ring_ways.COPY_KERNELS
    if not record.exists():
        pytest.skip("no sgemm_ring_copy run with --wide committed")
    # Written on the model as it stood (MODEL_BEFORE_STEPPED), as the trial was.
    base = _model_json().MODEL_BEFORE_STEPPED
    before = sgemm.MODEL_PATH.read_bytes()
    out = tmp_path / "trial.json"
    block = _model_json().trial_wide_copy(out, record, base)
    assert sgemm.MODEL_PATH.read_bytes() == before  # the committed model untouched
    assert json.loads(out.read_text()) == json.loads(WIDE_TRIAL.read_text())
    trial, committed = json.loads(out.read_text()), json.loads(base.read_text())
    old = committed["gpus"]["NVIDIA H200"].pop("ring_copy")
    assert trial["gpus"]["NVIDIA H200"].pop("ring_copy") == block
    assert trial == committed  # only the copy's price differs
    # The wide copy's rate is the record's, and about twice pad_copy's.
    assert block["copy_gbps"] == json.loads(record.read_text())["fit_wide"]["copy_gbps"]
    assert 1.5 < block["copy_gbps"] / old["copy_gbps"] < 2.5
    narrow = {**json.loads(record.read_text())}
    narrow.pop("fit_wide")
    no_wide = _write(tmp_path, "sgemm_ring_copy-x-2026-12-01.json", narrow)
    with pytest.raises(SystemExit, match="run sgemm_ring_copy.py with --wide"):
        _model_json().trial_wide_copy(out, no_wide)
    with pytest.raises(SystemExit, match="must name an sgemm_ring_copy record"):
        _model_json().trial_wide_copy(out, tmp_path / "absent.json")


def test_the_copy_written_into_the_model_is_the_copy_matmul_launches():
    # sgemm_ring_copy.py --write-model and --trial-wide-copy write one block:
    # pad_copy_wide's line while matmul copies four floats a thread
    # (entry_point.RING_COPY_WIDE, on since 2026-12-01), else pad_copy's.
    from gpucourse.kernels.sgemm import entry_point

    record = {"fit": {"copy_gbps": 2846.0, "fixed_us": 2.1},
              "fit_wide": {"copy_gbps": 5644.8, "fixed_us": 3.571}}
    writer = _model_json()
    wide = writer.ring_copy_block(record, "benchmarks/results/x.json", wide=True)
    narrow = writer.ring_copy_block(record, "benchmarks/results/x.json", wide=False)
    assert wide == {"source": "benchmarks/results/x.json (fit_wide: padding.pad_copy_wide)",
                    "copy_gbps": 5644.8, "fixed_us": 3.571}
    assert narrow == {"source": "benchmarks/results/x.json", "copy_gbps": 2846.0,
                      "fixed_us": 2.1}
    assert entry_point.RING_COPY_WIDE  # so the script writes the wide line today


def test_the_scalar_trial_on_the_committed_records_gives_the_committed_block(tmp_path):
    # The committed ring_scalar_b was fitted to these two records: fitting
    # them again must give it back, so that a trial on new runs differs from
    # the committed model only by what the new runs measured.
    from gpucourse.kernels import sgemm

    entry = json.loads(sgemm.MODEL_PATH.read_text())["gpus"]["NVIDIA H200"]["ring_scalar_b"]
    paths = [ring_ways.results.results_dir().parent.parent / name.split(" (")[0]
             for name in entry["source"].split(" and ")]
    if not all(path.exists() for path in paths):
        pytest.skip("the ring_scalar_b block's records are not committed")
    block = _model_json().trial_ring_scalar(tmp_path / "trial.json", [str(p) for p in paths])
    # (a share by depth written in later, from other runs, is not this fit's)
    assert block == {key: entry[key] for key in entry if key not in ("share_by_depth",
                                                                   "source_by_depth")}
    with pytest.raises(SystemExit, match="sgemm_kernel_times"):
        _model_json().trial_ring_scalar(tmp_path / "no.json", [])


def test_a_won_trials_blocks_are_written_into_the_model_and_nothing_else(tmp_path,
                                                                         monkeypatch):
    from gpucourse.kernels import sgemm

    if not WIDE_TRIAL.exists():
        pytest.skip("the wide-copy trial is not committed")
    writer = _model_json()
    model = tmp_path / "model.json"  # the model the trial was written on
    model.write_bytes(writer.MODEL_BEFORE_STEPPED.read_bytes())
    monkeypatch.setattr(sgemm, "MODEL_PATH", model)
    with pytest.raises(SystemExit, match=r"not in the trial: \['ring_copies'\]"):
        writer.adopt_blocks(WIDE_TRIAL, ["ring_copies"])
    with pytest.raises(SystemExit, match=r"the same as committed: \['ring_scalar_b'\]"):
        writer.adopt_blocks(WIDE_TRIAL, ["ring_copy", "ring_scalar_b"])
    with pytest.raises(SystemExit, match="must name a trial model JSON"):
        writer.adopt_blocks(tmp_path / "absent.json", ["ring_copy"])
    assert json.loads(model.read_text()) == json.loads(sgemm.MODEL_PATH.read_text())
    adopted = writer.adopt_blocks(WIDE_TRIAL, ["ring_copy"])
    assert json.loads(model.read_text()) == json.loads(WIDE_TRIAL.read_text())
    assert adopted["ring_copy"]["copy_gbps"] > 5000
    monkeypatch.undo()  # the committed model again, and nothing planned from the other
    for cached in (sgemm.shape_model._read_model, sgemm.shape_model.auto_choice,
                   sgemm.shape_model.ring_reads_b_scalar):
        cached.cache_clear()


def test_the_figure_draws_each_way_at_every_shape_that_timed_it_beside_the_other(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [_way(600, 701, "padded", 1.0), _way(600, 701, "padded_wide", 0.9),
            _way(700, 701, "padded", 2.0), _way(700, 701, "padded_wide", 2.2),
            _way(800, 701, "padded_wide", 1.0)]  # no "padded" here: not drawn
    record = _write(tmp_path, "sgemm_ring_pairs-w-2026-12-01.json", {"results": rows})
    ways = (("wide", record, "padded_wide", "padded", True),)
    ax = ring_ways.plot_ways(ways)
    dots = ax.collections[0].get_offsets()
    assert sorted(x for x, _ in dots) == pytest.approx([-10.0, 10.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["wide"]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="did not time padded_overlap beside padded"):
        ring_ways.plot_ways((("overlap", record, "padded_overlap", "padded", False),))
    assert ring_ways.plot_ways((("x", tmp_path / "absent.json", "a", "b", True),)) is None
    committed = ring_ways.plot_ways()
    if committed is not None:  # every way the chapter tells of, one row each
        assert len(committed.get_yticklabels()) == len(ring_ways.WAYS_PLOTTED)
        plt.close(committed.figure)


def test_set_14_judged_the_stepped_trial_and_the_chapter_says_whether_it_is_the_model(
        tmp_path):
    # The four rounds of set 14 in turns (thirtieth session), counted from
    # their rows here: the committed model met the target at 21 and 20 large
    # shapes, the trial at 23 and 22.
    verdict = ring_ways.set_14_verdict()
    if verdict is None:
        pytest.skip("set 14's rounds are not committed")
    folder = ring_ways.results.results_dir()
    counted = {}
    for who, names in ring_ways.SET_14_ROUNDS.items():
        counted[who] = []
        for name in names:
            rows = json.loads((folder / name).read_text())["results"]
            share = {(r["m"], r["n"], r["k"]): r["vs_cublas"] for r in rows
                     if r["variant"] == "auto" and min(r["m"], r["n"]) >= 512}
            counted[who].append(sum(value >= 0.85 for value in share.values()))
    assert verdict["met"] == {"before": counted["committed"], "after": counted["trial"]}
    assert counted == {"committed": [21, 20], "trial": [23, 22]}
    assert verdict["adopt"] and len(verdict["moved"]) == 7 and verdict["faster"] == 5
    # Adopted or not is read from the model: the trial's own JSON holds its
    # blocks, the model before it its own, and a model that holds both and
    # more (a share by depth added later) still holds the trial's.
    trials = folder.parent / "trials"
    trial = trials / ring_ways.STEPPED_TRIAL
    assert ring_ways.set_14_verdict(model=trial)["adopted"] is True
    assert ring_ways.set_14_verdict(model=trials / ring_ways.BEFORE_STEPPED)["adopted"] is False
    later = json.loads(trial.read_text())
    later["gpus"]["NVIDIA H200"]["ring_scalar_b"]["share_by_depth"] = {"x": {"full": {}}}
    (tmp_path / "later.json").write_text(json.dumps(later))
    assert ring_ways.set_14_verdict(model=tmp_path / "later.json")["adopted"] is True
    later["gpus"]["NVIDIA H200"]["ring_copy"]["copy_gbps"] = 1.0  # priced again since
    (tmp_path / "moved.json").write_text(json.dumps(later))
    moved_on = ring_ways.set_14_verdict(model=tmp_path / "moved.json")
    assert moved_on["adopted"] is None
    with pytest.raises(findings.ProseMismatch, match="holds the stepped trial's prices"):
        findings.stepped_trial_values(moved_on)
    values = findings.stepped_trial_values(verdict)
    assert values["set14_committed_met"] == "21 and 20 of 24"
    assert values["set14_trial_met"] == "23 and 22 of 24"
    assert values["set14_state"] == findings.STEPPED_STATE[verdict["adopted"]]
    # A verdict against the trial would contradict the prose.
    with pytest.raises(findings.ProseMismatch, match="set 14 judged the stepped trial a win"):
        findings.stepped_trial_values({**verdict, "adopt": False})
    assert ring_ways.set_14_verdict(trial=tmp_path / "absent.json") is None
