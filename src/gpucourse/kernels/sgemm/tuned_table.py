"""The tile sizes measured best on each GPU: reading ``sgemm_tuned.json`` (beside
this module) for level 6 (``tuned_config``) and for auto (``auto_config``,
``auto_plan``: the tiles and split-K slices measured nearest a product's shape).

The table is written by ``autotune`` (``autotuning``) and by
benchmarks/sgemm_shapes.py on a GPU, and read on every call of ``matmul``, so
reading is cheap: the file is parsed again only when it changes, and the
answers for the package's own table are kept per GPU and per shape (the
caches ``_tuned_here``, ``_by_shape_here`` and ``_plan_here``, which a writer
of the table clears). Reading lives apart from writing because writing needs
a GPU and the whole entry point, and reading needs neither.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path

from gpucourse.device import on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.launch import current_gpu as _current_gpu, gpu_name as _gpu_name
from gpucourse.kernels.sgemm.config import (DEFAULT_TUNED, TileConfig, _whole, _whole_or_zero,
                                            check_config)


TUNED_PATH = Path(__file__).with_name("sgemm_tuned.json")


def tuned_config(gpu_name: str | None = None, path: str | os.PathLike | None = None) -> TileConfig:
    """The tile configuration level 6 uses on `gpu_name` (default: this GPU).

    Read from the JSON file `path` (default sgemm_tuned.json beside this module),
    which `autotune` writes; DEFAULT_TUNED when the file has no entry for it.
    """
    if gpu_name is None:
        gpu_name = gpu_model()
    if not isinstance(gpu_name, str):
        raise ValueError(f"gpu_name must be a string such as 'NVIDIA H100 80GB HBM3', got {gpu_name!r}")
    entry = _read_tuned(path).get(gpu_name)
    if entry is None:
        return DEFAULT_TUNED
    return check_config(TileConfig(**{f: entry[f] for f in ("bm", "bn", "bk", "tm", "tn")}))


def gpu_model() -> str:
    """The GPU's name as the driver gives it, or "simulator" under Numba's simulator."""
    if not on_gpu():
        return "simulator"
    return _gpu_name(_current_gpu())


def _read_tuned(path=None) -> dict:
    """The tuned table at `path`, read again only when the file changes (matmul asks
    for it on every call, and a file read would cost more than the launch)."""
    path = Path(TUNED_PATH if path is None else path)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return {}
    return _read_tuned_file(str(path), stamp)


@lru_cache(maxsize=8)
def _read_tuned_file(path: str, stamp: int) -> dict:
    with open(path) as f:
        return json.load(f)


def auto_config(shape, gpu_name: str | None = None, path=None) -> TileConfig:
    """The tile configuration level "auto" uses for an (m, n, k) product on `gpu_name`.

    A product too small for level 6's large tiles leaves most of the GPU idle
    (1024^3 in 128 x 256 tiles is 32 blocks for 132 SMs), so the tuned table
    keeps, per GPU, the configuration measured fastest at several shapes
    ("by_shape", written by benchmarks/sgemm_shapes.py). "auto" takes the one
    measured at the nearest shape, nearness counted in factors of two along
    m, n and k; with no such entry it is level 6's tuned configuration.
    """
    return auto_plan(shape, gpu_name, path)[0]


def auto_plan(shape, gpu_name: str | None = None, path=None) -> tuple:
    """(TileConfig, splits of K) that level "auto" uses for an (m, n, k) product:
    those measured at the nearest shape (see `auto_config`)."""
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    m, n, k = (max(1, _whole_or_zero(name, v)) for name, v in zip("mnk", shape))
    if gpu_name is None:
        gpu_name = gpu_model()
    if path is None:  # the package's own table: the answer is kept per shape
        return _plan_here(gpu_name, m, n, k)
    return _nearest_plan(_by_shape(_read_tuned(path).get(gpu_name, {})),
                         lambda: tuned_config(gpu_name, path), m, n, k)


def _nearest_plan(measured, fallback, m: int, n: int, k: int) -> tuple:
    if not measured:
        return fallback(), 1

    def distance(entry):
        em, en, ek = entry[0]
        return abs(math.log2(m / em)) + abs(math.log2(n / en)) + abs(math.log2(k / ek))

    _, config, splits = min(measured, key=distance)
    return config, splits


@lru_cache(maxsize=4096)
def _plan_here(gpu_name: str, m: int, n: int, k: int) -> tuple:
    """auto_plan from the package's table, found once per shape: a loop calling
    matmul on one shape pays for the search only once."""
    return _nearest_plan(_by_shape_here(gpu_name), lambda: _tuned_here(gpu_name), m, n, k)


def _by_shape(entry: dict) -> list:
    """[((m, n, k), TileConfig, splits)] of a GPU's entry in the tuned table, each
    checked: the by-shape measurements, and level 6's own configuration at the
    shape autotune measured it."""
    found = []
    for row in entry.get("by_shape", []) + ([entry] if "m" in entry else []):
        config = check_config(TileConfig(**{f: row[f] for f in ("bm", "bn", "bk", "tm", "tn")}))
        found.append(((row["m"], row["n"], row["k"]), config, _whole("splits", row.get("splits", 1))))
    return found


@lru_cache(maxsize=None)
def _by_shape_here(gpu_name: str) -> tuple:
    return tuple(_by_shape(_read_tuned().get(gpu_name, {})))


@lru_cache(maxsize=None)
def _tuned_here(gpu_name: str) -> TileConfig:
    """tuned_config(gpu_name) from the default table, read once per process
    (autotune, which rewrites the table, forgets it)."""
    return tuned_config(gpu_name)
