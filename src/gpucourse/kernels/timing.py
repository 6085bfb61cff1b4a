"""Timing kernels on a GPU, the course's way: CUDA events, warm-up, median.

:func:`median_time_s` times any function that launches work on the GPU.
:func:`time_sgemm` times SGEMM kernels (a student's, the library's levels of
:mod:`gpucourse.kernels.sgemm`, and cuBLAS through PyTorch when it is there)
on square products and checks each result against NumPy in float64 first: a
broken kernel can look fast. This module measures and nothing else: the
chapter's readers of the committed rows and its tables and plots of either
(``committed_rows``, ``format_table``, ``plot_tflops``) live in
:mod:`gpucourse.chapters.sgemm`, and are still importable from here for old
code. It imports :mod:`gpucourse.kernels.sgemm` only inside ``time_sgemm``,
and the kernels import only :func:`median_time_s` from here, so the two
modules never need each other to load.

A row is a dict with ``variant``, ``m``, ``n``, ``k``, ``ms``, ``tflops``,
``vs_cublas`` (cuBLAS's time over this one's, None without cuBLAS) and
``max_rel_err`` (max |C - C_ref| / max |C_ref|); a kernel whose result is
wrong gets ``ms`` and ``tflops`` None and is not timed.
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.checks import whole as _whole
from gpucourse.moved import served_from

DEFAULT_SIZES = (512, 1024, 2048)
# A result further than this from NumPy's float64 product (relative to its
# largest element) is wrong: float32 rounding over K = 2048 terms stays near 1e-6.
WRONG_ABOVE = 1e-3


def _need_gpu(what: str) -> None:
    if not on_gpu():
        raise RuntimeError(f"{what} needs an NVIDIA GPU: on Numba's CUDA simulator kernels run "
                           "as Python and their timings mean nothing (committed_rows() gives "
                           "the figures measured on the course's H100)")


def median_time_s(run, warmup: int = 3, repeats: int = 10) -> float:
    """Median seconds of one call of ``run()`` on the GPU.

    ``run`` launches work on the GPU (a kernel launch, a torch call). It is
    called ``warmup`` times first (the first call compiles a Numba kernel),
    then ``repeats`` times between two CUDA events each; the median of those
    times is returned. Needs a GPU.
    """
    if not callable(run):
        raise ValueError(f"run must be a function of no arguments that launches the work, "
                         f"got {run!r}")
    warmup, repeats = _whole("warmup", warmup, 0), _whole("repeats", repeats, 1)
    _need_gpu("median_time_s")
    for _ in range(warmup):
        run()
    cuda.synchronize()
    start, stop = cuda.event(), cuda.event()
    times = []
    for _ in range(repeats):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def _check_kernels(kernels) -> dict:
    if kernels is None:
        return {}
    if not isinstance(kernels, dict):
        raise ValueError("kernels must be a dict {name: (kernel, launch)}, where launch(m, n) "
                         f"returns (grid, block); got {type(kernels).__name__}")
    for name, entry in kernels.items():
        if not isinstance(name, str) or not (isinstance(entry, tuple) and len(entry) == 2
                                             and callable(entry[1])):
            raise ValueError(f"kernels must map names to (kernel, launch) pairs, where "
                             f"launch(m, n) returns (grid, block); got {name!r}: {entry!r}")
    return dict(kernels)


def _torch_cuda():
    """torch, if it is installed with CUDA on this machine; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def time_sgemm(kernels=None, sizes=DEFAULT_SIZES, levels=None, cublas: bool = True,
               warmup: int = 3, repeats: int = 10, seed: int = 0) -> list[dict]:
    """Time SGEMM kernels on square products of each size in ``sizes``, on the GPU.

    ``kernels``: {name: (kernel, launch)}, your own kernels, each launched as
    ``kernel[grid, block](a, b, c)`` with ``(grid, block) = launch(m, n)``.
    ``levels``: the library's levels to time beside them (default all of
    ``sgemm.LEVELS``; ``()`` for none). ``cublas``: time ``torch.mm`` with TF32
    off too, when PyTorch with CUDA is installed. Each result is checked
    against NumPy's float64 product before it is timed (see the module's
    docstring for the rows). Needs a GPU.
    """
    from gpucourse.kernels import sgemm

    own = _check_kernels(kernels)
    levels = sgemm.LEVELS if levels is None else tuple(sgemm._level(v) for v in levels)
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ValueError(f"sizes must be a non-empty list of matrix sizes, got {sizes!r}")
    sizes = [_whole("sizes", s, 1) for s in sizes]
    warmup, repeats = _whole("warmup", warmup, 0), _whole("repeats", repeats, 1)
    _need_gpu("time_sgemm")
    torch = _torch_cuda() if cublas else None
    rows = []
    for size in sizes:
        m = n = k = size
        rng = np.random.default_rng(seed + size)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        reference = a.astype(np.float64) @ b.astype(np.float64)
        scale = float(np.abs(reference).max()) or 1.0
        a_dev, b_dev = cuda.to_device(a), cuda.to_device(b)
        c_dev = cuda.device_array((m, n), dtype=np.float32)
        candidates = []
        if torch is not None:
            torch.backends.cuda.matmul.allow_tf32 = False
            a_t, b_t = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            out = torch.empty((m, n), dtype=torch.float32, device="cuda")
            candidates.append(("cublas", lambda: torch.mm(a_t, b_t, out=out),
                               lambda: out.cpu().numpy()))
        for level in levels:
            kernel, grid, block = sgemm.kernel_for(level, (m, n, k))
            candidates.append((f"level{level}",
                               _launcher(kernel, grid, block, a_dev, b_dev, c_dev),
                               c_dev.copy_to_host))
        for name, (kernel, launch) in own.items():
            grid, block = launch(m, n)
            candidates.append((name, _launcher(kernel, grid, block, a_dev, b_dev, c_dev),
                               c_dev.copy_to_host))
        measured = []
        for name, run, result in candidates:
            if name != "cublas":  # poison C: every element must be written
                c_dev.copy_to_device(np.full((m, n), np.nan, dtype=np.float32))
            run()
            cuda.synchronize()
            error = float(np.abs(result() - reference).max()) / scale
            row = {"variant": name, "m": m, "n": n, "k": k, "ms": None, "tflops": None,
                   "vs_cublas": None, "max_rel_err": error}
            if math.isfinite(error) and error <= WRONG_ABOVE:
                seconds = median_time_s(run, warmup, repeats)
                row.update(ms=seconds * 1e3, tflops=2 * m * n * k / seconds / 1e12)
            measured.append(row)
        cublas_ms = next((r["ms"] for r in measured if r["variant"] == "cublas"), None)
        for row in measured:
            if cublas_ms and row["ms"]:
                row["vs_cublas"] = cublas_ms / row["ms"]
        rows += measured
    return rows


def _launcher(kernel, grid, block, a, b, c):
    def run():
        kernel[grid, block](a, b, c)

    return run


# The chapter's readers and views of the rows moved to gpucourse.chapters.sgemm
# (which imports this module); they are served from here for old imports.
__getattr__ = served_from(__name__, "gpucourse.chapters.sgemm", (
    "committed_rows", "format_table", "plot_tflops", "_check_rows", "_variants"))
