"""Measuring on a GPU: ``autotune`` times level 6's kernel with each candidate
tile configuration and writes the fastest into the tuned table;
``resource_usage`` reports a level's registers, shared and local memory from
Numba's own compile report.

Both need a real GPU (on the simulator they raise, saying so). They sit at the
top of the package, above the entry point they call, so that nothing below
them depends on timing: the measuring itself is ``timing.median_time_s``.
"""

from __future__ import annotations

import datetime as _datetime
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from gpucourse.device import cuda, on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.config import (LEVEL_NAMES, TileConfig, WarpTileConfig, _level,
                                            _whole, candidate_configs, check_config)
from gpucourse.kernels.sgemm.entry_point import _aligned_rows, _quick_plan, matmul
from gpucourse.kernels.sgemm.kernel_choice import kernel_for
from gpucourse.kernels.timing import median_time_s  # timing imports no kernels at load
from gpucourse.kernels.sgemm.tuned_table import TUNED_PATH, _read_tuned, _tuned_here, gpu_model


# -----------------------------------------------------------------------------
# Resource reports and autotuning (a real GPU only)


def resource_usage(level, config: TileConfig | WarpTileConfig | None = None) -> dict:
    """Registers per thread, shared memory per block and local memory per thread
    of `level`'s kernel, from Numba's own compile report (compiling it first).

    Returns a dict with level, name, threads_per_block, registers_per_thread,
    shared_bytes_per_block and local_bytes_per_thread. Under the simulator
    there is no compiler, and this raises RuntimeError saying so.
    """
    key = _level(level)
    if not on_gpu():
        raise RuntimeError("resource_usage needs a real GPU: Numba's CUDA simulator runs "
                           "kernels as Python and has no compiler to report registers or "
                           "shared memory (run with GPUCOURSE_DEVICE=gpu on an NVIDIA GPU)")
    size = 256
    a = cuda.to_device(np.ones((size, size), np.float32))
    b = cuda.to_device(np.ones((size, size), np.float32))
    c = cuda.device_array((size, size), np.float32)
    kernel, grid, block = kernel_for(key, (size, size, size), True, config)
    kernel[grid, block](a, b, c)  # compiles for this signature
    cuda.synchronize()

    def first(value):  # one number when the kernel has one compiled signature
        return max(value.values()) if isinstance(value, dict) else value

    return {
        "level": key,
        "name": LEVEL_NAMES[key],
        "threads_per_block": int(np.prod(block)),
        "registers_per_thread": int(first(kernel.get_regs_per_thread())),
        "shared_bytes_per_block": int(first(kernel.get_shared_mem_per_block())),
        "local_bytes_per_thread": int(first(kernel.get_local_mem_per_thread())),
    }


def _time_ms(function, warmup: int, repeats: int) -> float:
    """Median milliseconds of function() over `repeats` runs, with CUDA events."""
    return median_time_s(function, warmup, repeats) * 1e3


def autotune(m, n, k, *, configs=None, path=None, repeats=5, progress=True) -> dict:
    """Time level 6's kernel with every candidate tile configuration at m x n x k
    and save the fastest, for this GPU model, in the JSON file `path` (default
    sgemm_tuned.json beside this module), which level 6 reads.

    configs: the TileConfigs to try (default candidate_configs(), every config
    in SEARCH_SPACE that passes check_config); each is checked first. Each
    result is compared with level 4b's before it counts. Returns a dict with
    the GPU name, the best config and every (config, ms, tflops) tried.
    Needs a real GPU (timings on the simulator would mean nothing).
    """
    m, n, k = _whole("m", m), _whole("n", n), _whole("k", k)
    repeats = _whole("repeats", repeats)
    configs = candidate_configs() if configs is None else list(configs)
    if not configs:
        raise ValueError("configs must hold at least one TileConfig")
    for config in configs:
        check_config(config, vectorized=True)
    if not on_gpu():
        raise RuntimeError("autotune needs a real GPU: on Numba's CUDA simulator timings mean "
                           "nothing (run with GPUCOURSE_DEVICE=gpu on an NVIDIA GPU)")
    from tqdm.auto import tqdm

    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((m, k), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((k, n), dtype=np.float32))
    reference = matmul(a, b, level="4b").copy_to_host()
    scale = float(np.abs(reference).max()) or 1.0
    tried = []
    c = cuda.device_array((m, n), dtype=np.float32)
    vectorized = _aligned_rows(a) and _aligned_rows(b)
    for config in tqdm(configs, desc=f"autotune {m}x{n}x{k}", disable=not progress):
        # Time the kernel launch alone, as the benchmark does: matmul's own
        # checks and its allocation of C would count against small tiles.
        kernel, grid, block = kernel_for(6, (m, n, k), vectorized, config)
        kernel[grid, block](a, b, c)
        error = float(np.abs(c.copy_to_host() - reference).max()) / scale
        if not np.isfinite(error) or error > 1e-4:
            tried.append({**asdict(config), "ms": None, "tflops": None, "error": error})
            continue
        ms = _time_ms(lambda: kernel[grid, block](a, b, c), warmup=1, repeats=repeats)
        tried.append({**asdict(config), "ms": ms, "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12,
                      "error": error})
    timed = [t for t in tried if t["ms"] is not None]
    if not timed:
        raise RuntimeError("autotune: no configuration gave a correct result")
    best = min(timed, key=lambda t: t["ms"])
    gpu = gpu_model()
    table = _read_tuned(path)
    table[gpu] = {**table.get(gpu, {}), **{f: best[f] for f in ("bm", "bn", "bk", "tm", "tn")},
                  "m": m, "n": n, "k": k, "ms": best["ms"], "tflops": best["tflops"],
                  "date": _datetime.date.today().isoformat()}
    with open(Path(TUNED_PATH if path is None else path), "w") as f:
        json.dump(table, f, indent=2, sort_keys=True)
        f.write("\n")
    _tuned_here.cache_clear()
    _quick_plan.cache_clear()
    best_config = TileConfig(**{f: best[f] for f in ("bm", "bn", "bk", "tm", "tn")})
    return {"gpu": gpu, "best": best_config, "tried": tried}
