"""The tiles each level runs with on each GPU: level 6's, measured best by
``autotune`` and read from ``sgemm_tuned.json`` beside this module
(``tuned_config``), and auto's, chosen per shape by the shape model
(``auto_config``, ``auto_plan``; see ``shape_model``).

The table is written by ``autotune`` (``autotuning``) on a GPU and read on
every call of ``matmul``, so reading is cheap: the file is parsed again only
when it changes, and the answers are kept per GPU (``_tuned_here``) and, for
auto, per GPU and shape (``shape_model.planned``); a writer of the table or
of the model clears those caches. Reading lives apart from writing because
writing needs a GPU and the whole entry point, and reading needs neither.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from gpucourse.device import on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.launch import current_gpu as _current_gpu, gpu_name as _gpu_name
from gpucourse.kernels.sgemm.config import DEFAULT_TUNED, TileConfig, _whole_or_zero, check_config
from gpucourse.kernels.sgemm.shape_model import choose_plan, planned


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
    (1024^3 in 128 x 256 tiles is 32 blocks for 132 SMs), and a shape just
    past a multiple of the tiles wastes most of its last wave. "auto" takes
    the plan of the shape model (``shape_model.choose_plan``: waves of blocks
    on the GPU's SMs, the tail of the last wave, the padding of edge tiles,
    split-K), priced with the GPU's calibrated constants from
    ``sgemm_shape_model.json`` (`path`: another such file), or an H100's where
    the file has none for this GPU.
    """
    return auto_plan(shape, gpu_name, path)[0]


def auto_plan(shape, gpu_name: str | None = None, path=None) -> tuple:
    """(TileConfig, splits of K) that level "auto" uses for an (m, n, k) product:
    the shape model's cheapest plan (see `auto_config`)."""
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    m, n, k = (max(1, _whole_or_zero(name, v)) for name, v in zip("mnk", shape))
    if gpu_name is None:
        gpu_name = gpu_model()
    if path is None:  # the package's own model: the answer is kept per shape
        return planned(gpu_name, m, n, k)
    plan = choose_plan((m, n, k), gpu_name, path)
    return plan["config"], plan["splits"]


@lru_cache(maxsize=None)
def _tuned_here(gpu_name: str) -> TileConfig:
    """tuned_config(gpu_name) from the default table, read once per process
    (autotune, which rewrites the table, forgets it)."""
    return tuned_config(gpu_name)
