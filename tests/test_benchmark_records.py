"""What every benchmark script's record says of its run: --note and --suffix
(benchmarks/_common.py), so that a rerun or a trial is written under its own
name with its note from the start, not renamed and annotated by hand."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import benchmark_script


@pytest.fixture
def common():
    module = benchmark_script("_common")
    yield module
    module._RUN.update(note=None, suffix="")  # nothing leaks into another test's records


def _record(common):
    return common.record_start("sgemm_held_out_13", "NVIDIA H200", {"python": "3.11"}, "timed")


def test_a_note_follows_the_benchmarks_name_and_a_suffix_ends_the_files(common, tmp_path):
    parser = common.benchmark_parser("A benchmark.\n\nMore.")
    args = parser.parse_args(["--note", "set 13 with the peeled stores, second round",
                              "--suffix", "peeled-second", "--out", str(tmp_path)])
    path = common.write_record(_record(common), args.out)
    assert path.name.startswith("sgemm_held_out_13-h200-") and path.name.endswith(
        "-peeled-second.json")
    written = json.loads(path.read_text())
    assert list(written)[:3] == ["benchmark", "note", "gpu"]
    assert written["note"] == "set 13 with the peeled stores, second round"
    # A script's own suffix comes first; a record's own note is kept.
    record = {**_record(common), "note": "the script's"}
    path = common.write_record(record, tmp_path, "_trial")
    assert path.name.endswith("_trial-peeled-second.json")
    assert json.loads(path.read_text())["note"] == "the script's"


def test_without_them_the_record_and_its_name_are_as_before(common, tmp_path):
    common.benchmark_parser("A benchmark.").parse_args(["--out", str(tmp_path)])
    path = common.write_record(_record(common), tmp_path)
    assert path.name == f"sgemm_held_out_13-h200-{_record(common)['date']}.json"
    assert "note" not in json.loads(path.read_text())


@pytest.mark.parametrize("suffix", ["-peeled", "Peeled", "a b", "a/../b", "a--b", "a-"])
def test_a_suffix_that_is_not_lowercase_words_joined_by_hyphens_is_refused(common, suffix, capsys):
    with pytest.raises(SystemExit):
        common.benchmark_parser("A benchmark.").parse_args([f"--suffix={suffix}"])
    assert "--suffix must be lowercase words and digits joined by hyphens" in (
        capsys.readouterr().err)
