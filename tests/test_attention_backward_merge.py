"""benchmarks/attention_backward.py's partial runs and their merge (no GPU):
a run that compiles and times every kernel of both head dims can outlast a
call of the device tool, so it runs as one process per head dim, and
--merge joins the two into the file the chapters read."""

from __future__ import annotations

import json

import pytest

from gpucourse import results


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(results.find_results("attention_backward")[0].parents[1]))
    import attention_backward

    return attention_backward


def part(head_dim, long_sequence=False, **changes):
    rows = [dict(variant=name, batch=4, heads=16, seq=seq, head_dim=head_dim, causal=causal,
                 ms=1.0, status="ok")
            for seq in (1024, 4096) for causal in (False, True)
            for name in ("flash_bwd", "sdpa_efficient_bwd")]
    if long_sequence:
        rows.append(dict(variant="flash_bwd", batch=4, heads=16, seq=16384, head_dim=64,
                         causal=True, ms=9.0, peak_extra_bytes=1, status="ok"))
    record = {"benchmark": "attention_backward_partial", "gpu": "NVIDIA H200",
              "date": "2026-11-30", "versions": {}, "method": "the script's docstring",
              "default_version": 4, "variants": ["tf32_split_sums"],
              "validation": [{"head_dim": head_dim, "version": 6, "ok": True}],
              "results": rows,
              "restricted_to": {"head_dims": [head_dim], "variants": ["tf32_split_sums"],
                                "skipped": []}}
    record.update(changes)
    return record


def write(tmp_path, *records):
    paths = []
    for i, record in enumerate(records):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(record))
    return paths


def test_two_partial_runs_merge_into_the_full_table(bench, tmp_path):
    low, high = part(64, long_sequence=True), part(128)
    merged = bench.merge_partials(write(tmp_path, low, high))
    assert merged["benchmark"] == "attention_backward" and "restricted_to" not in merged
    assert merged["results"] == low["results"] + high["results"]
    assert merged["validation"] == low["validation"] + high["validation"]
    assert merged["merged_from"] == ["part0.json", "part1.json"]
    assert {r["head_dim"] for r in merged["results"]} == {64, 128}
    assert "one process per head dim" in merged["method"]


@pytest.mark.parametrize("change, message", [
    ({"variants": ["tf32_split_sums_atomic"]}, "variants"),
    ({"gpu": "NVIDIA H100 80GB HBM3"}, "gpu"),
    ({"benchmark": "attention_backward"}, "not a partial run"),
    ({"restricted_to": {"head_dims": [128], "variants": ["tf32_split_sums"],
                        "skipped": [[4096, 128, True]]}}, "left shapes untimed"),
    ({"restricted_to": {"head_dims": [64], "variants": ["tf32_split_sums"], "skipped": []}},
     "64 and 128, each once"),
])
def test_parts_that_do_not_make_one_table_are_refused(bench, tmp_path, change, message):
    paths = write(tmp_path, part(64, long_sequence=True), part(128, **change))
    with pytest.raises(ValueError, match=message):
        bench.merge_partials(paths)


def test_the_merge_wants_the_long_sequence(bench, tmp_path):
    with pytest.raises(ValueError, match="long sequence"):
        bench.merge_partials(write(tmp_path, part(64), part(128)))
