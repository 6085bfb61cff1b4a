"""gpucourse.results: finding and reading the benchmark results files."""

import json

import pytest

from gpucourse import results


def _write(folder, name, **fields):
    record = dict(benchmark=name.split("-")[0], gpu="Test GPU", date=name[-10:],
                  versions={}, results=[])
    record.update(fields)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record))
    return path


def test_newest_full_run_is_chosen(tmp_path):
    old = _write(tmp_path, "sgemm-h100-2026-01-02")
    new = _write(tmp_path, "sgemm-a100-2026-03-01")
    _write(tmp_path, "sgemm-h100-2026-12-31-quick")  # a smoke test: never shown
    _write(tmp_path, "attention-h100-2027-01-01")  # another benchmark
    assert results.find_results("sgemm", tmp_path) == [old, new]
    assert results.load_results("sgemm", tmp_path)["date"] == "2026-03-01"
    assert results.load_results("sgemm", old)["date"] == "2026-01-02"


def test_bad_paths_and_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="found none in"):
        results.load_results("sgemm", tmp_path)
    with pytest.raises(ValueError, match="results file or a folder of them"):
        results.load_results("sgemm", tmp_path / "missing.json")
    other = _write(tmp_path, "attention-h100-2026-01-01")
    with pytest.raises(ValueError, match="holds benchmark 'attention', not 'sgemm'"):
        results.load_results("sgemm", other)
    broken = tmp_path / "sgemm-h100-2026-01-01.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON file"):
        results.load_results("sgemm", broken)
    broken.write_text(json.dumps({"benchmark": "sgemm"}))
    with pytest.raises(ValueError, match="lacks"):
        results.load_results("sgemm", broken)
    with pytest.raises(ValueError, match="benchmark must be a name"):
        results.find_results("../sgemm", tmp_path)


@pytest.mark.parametrize("benchmark", ["sgemm", "attention", "collectives", "memory"])
def test_the_committed_runs_read(benchmark):
    record = results.load_results(benchmark)
    assert record["benchmark"] == benchmark and record["results"]
    assert record["gpu"].startswith("NVIDIA")


def test_gpu_slug_names_the_model():
    assert results.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert results.gpu_slug("NVIDIA H200") == "h200"
    assert results.gpu_slug("Tesla T4") == "t4"
    assert results.gpu_slug("NVIDIA") == "gpu"


def test_newest_by_keeps_the_newest_per_key(tmp_path):
    _write(tmp_path, "memory-a-2026-01-01", gpu_count=2)
    _write(tmp_path, "memory-b-2026-01-03", gpu_count=2)
    _write(tmp_path, "memory-c-2026-01-02", gpu_count=4, backend="gloo")
    runs = results.newest_by("memory", lambda path, record: record["gpu_count"], tmp_path)
    assert {n: r["date"] for n, r in runs.items()} == {2: "2026-01-03", 4: "2026-01-02"}
    kept = results.newest_by("memory", lambda path, record: record["gpu_count"], tmp_path,
                             keep=lambda record: record.get("backend") != "gloo")
    assert list(kept) == [2]


def test_gpu_slug_and_newest_by_refuse_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="name must be the GPU's name as a string"):
        results.gpu_slug(None)
    with pytest.raises(ValueError, match="key must be a function"):
        results.newest_by("memory", "gpu_count", tmp_path)
