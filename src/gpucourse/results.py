"""The benchmark results files the book plots: where they are and how to read one.

Every GPU benchmark run writes `benchmarks/results/<benchmark>-<gpu>-<date>.json`
(the shape is in the project's CONVENTIONS: `benchmark`, `gpu`, `date`,
`versions`, `method`, `results`). A `--quick` run (a smoke test of a script)
writes a name ending in `-quick`, which the book never shows. The chapters
find their newest file here, so that a re-run on the same GPU on a later day
replaces what they show without an edit.
"""

from __future__ import annotations

import json
from pathlib import Path

REQUIRED_FIELDS = ("benchmark", "gpu", "date", "versions", "results")


def results_dir() -> Path:
    """benchmarks/results of the repository this package is installed from."""
    return Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def find_results(benchmark: str, directory=None) -> list[Path]:
    """The full (not --quick) results files of `benchmark` in `directory`
    (default results_dir()), oldest date first; empty if there are none."""
    if not isinstance(benchmark, str) or not benchmark.isidentifier():
        raise ValueError(f"benchmark must be a name such as 'sgemm', got {benchmark!r}")
    directory = results_dir() if directory is None else Path(directory)
    files = [p for p in directory.glob(f"{benchmark}-*.json") if not p.stem.endswith("-quick")]
    return sorted(files, key=lambda p: (p.stem[-10:], p.stem))  # the date ends the name


def _read_newest(name: str, path, kind: str) -> tuple:
    """(path, parsed JSON) of `path` itself, or of the newest <name>-<gpu>-<date>.json
    in the folder `path` (default results_dir()); ValueError naming what was wrong."""
    path = results_dir() if path is None else Path(path)
    if path.is_dir():
        files = find_results(name, path)
        if not files:
            raise ValueError(f"path must be a folder holding {name}-<gpu>-<date>.json "
                             f"{kind} files or such a file, found none in {path}")
        path = files[-1]
    if not path.is_file():
        raise ValueError(f"path must be a {name} {kind} file or a folder of them, got {path}")
    try:
        return path, json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a JSON file: {error}") from None


def load_results(benchmark: str, path=None) -> dict:
    """One results file of `benchmark`: `path` itself, or the newest in the
    folder `path` (default results_dir()). Raises ValueError naming what was
    wrong: no such file, or a file of another shape or benchmark."""
    path, record = _read_newest(benchmark, path, "results")
    missing = [f for f in REQUIRED_FIELDS if f not in record] if isinstance(record, dict) \
        else list(REQUIRED_FIELDS)
    if missing:
        raise ValueError(f"{path} is not a benchmark results file: it lacks {missing}")
    if record["benchmark"] != benchmark:
        raise ValueError(f"{path} holds benchmark {record['benchmark']!r}, not {benchmark!r}")
    return record


def load_ncu_summary(name: str, path=None) -> dict:
    """The newest Nsight Compute summary ``<name>-<gpu>-<date>.json`` in `path`
    (a folder or such a file; default results_dir()), written by
    benchmarks/ncu_summary.py: gpu, date, method, note and one profile per
    kernel (name, duration, registers, warps per SM, issue slots, executed
    warp instructions and their mix by opcode, stall reasons). Raises
    ValueError naming what was wrong."""
    path, record = _read_newest(name, path, "summary")
    if not (isinstance(record, dict) and record.get("benchmark") == "ncu_summary"
            and isinstance(record.get("profiles"), dict) and record["profiles"]
            and all(k in record for k in ("gpu", "date", "method"))):
        raise ValueError(f"{path} is not an Nsight Compute summary with gpu, date, method and "
                         f"profiles (benchmarks/ncu_summary.py writes one)")
    return record


def newest_by(benchmark: str, key, directory=None, keep=None, what=None) -> dict:
    """The newest results file of `benchmark` for each value of key(path,
    record), as {value: record} sorted by value: for instance one run per
    number of GPUs. Files oldest first, so that a newer one replaces an older
    one with the same key; `keep(record)` False leaves a file out. `key` may
    raise ValueError for a file it cannot place. Where `what` names the files
    a chapter needs ("collectives-<gpu>-<date>.json results files"), finding
    none raises ValueError saying so instead of returning {}."""
    if not callable(key) or (keep is not None and not callable(keep)):
        raise ValueError("key must be a function of (path, record), and keep None or a "
                         f"function of record; got key={key!r}, keep={keep!r}")
    runs = {}
    for path in find_results(benchmark, directory):
        record = load_results(benchmark, path)
        if keep is None or keep(record):
            runs[key(path, record)] = record
    if not runs and what is not None:
        where = results_dir() if directory is None else directory
        raise ValueError(f"directory must hold {what}, found none in {where}")
    return dict(sorted(runs.items()))


def gpu_slug(name: str) -> str:
    """The GPU's part of a results file's name: 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    if not isinstance(name, str):
        raise ValueError(f"name must be the GPU's name as a string, got {name!r}")
    words = [w for w in name.replace("NVIDIA", "").split() if w.lower() not in ("geforce", "tesla")]
    return (words[0] if words else "gpu").lower()
