"""Timing kernels on a GPU, the course's way: CUDA events, warm-up, median.

:func:`median_time_s` times any function that launches work on the GPU.
:func:`time_sgemm` times SGEMM kernels (a student's, the library's levels of
:mod:`gpucourse.kernels.sgemm`, and cuBLAS through PyTorch when it is there)
on square products and checks each result against NumPy in float64 first: a
broken kernel can look fast. Without a GPU, :func:`committed_rows` reads the
same kind of rows from the benchmark's committed results file, so that a
chapter can show measured figures anywhere. :func:`format_table` and
:func:`plot_tflops` show either.

A row is a dict with ``variant``, ``m``, ``n``, ``k``, ``ms``, ``tflops``,
``vs_cublas`` (cuBLAS's time over this one's, None without cuBLAS) and
``max_rel_err`` (max |C - C_ref| / max |C_ref|); a kernel whose result is
wrong gets ``ms`` and ``tflops`` None and is not timed.
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.device import cuda, on_gpu

DEFAULT_SIZES = (512, 1024, 2048)
# A result further than this from NumPy's float64 product (relative to its
# largest element) is wrong: float32 rounding over K = 2048 terms stays near 1e-6.
WRONG_ABOVE = 1e-3


def _whole(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return int(value)


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


def committed_rows(sizes=DEFAULT_SIZES, path=None) -> tuple[dict, list[dict]]:
    """(record, rows): the newest committed sgemm results file (``path``: a file or a
    folder; default benchmarks/results) and its rows at the square ``sizes``, in
    the shape :func:`time_sgemm` returns."""
    from gpucourse import results

    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise ValueError(f"sizes must be a non-empty list of matrix sizes, got {sizes!r}")
    wanted = {_whole("sizes", s, 1) for s in sizes}
    record = results.load_results("sgemm", path)
    fields = ("variant", "m", "n", "k", "ms", "tflops", "vs_cublas", "max_rel_err")
    rows = [{f: r.get(f) for f in fields} for r in record["results"]
            if r["m"] == r["n"] == r["k"] and r["m"] in wanted]
    if not rows:
        measured = sorted({r["m"] for r in record["results"] if r["m"] == r["n"] == r["k"]})
        raise ValueError(f"sizes must include a measured square size, one of {measured}; "
                         f"got {sorted(wanted)}")
    return record, rows


def _check_rows(rows) -> list[dict]:
    if not isinstance(rows, list) or not rows or not all(
            isinstance(r, dict) and {"variant", "m", "tflops"} <= set(r) for r in rows):
        raise ValueError("rows must be a non-empty list of rows from time_sgemm or "
                         "committed_rows")
    return rows


def _variants(rows) -> list[str]:
    return list(dict.fromkeys(r["variant"] for r in rows))


def format_table(rows) -> str:
    """A text table: TFLOP/s of each variant (rows) at each size (columns), and its share
    of cuBLAS at the largest size; "wrong" where a result failed its check."""
    rows = _check_rows(rows)
    sizes = sorted({r["m"] for r in rows})
    by = {(r["variant"], r["m"]): r for r in rows}
    width = max(len(v) for v in _variants(rows)) + 2
    lines = [f"{'TFLOP/s':<{width}}" + "".join(f"{s:>10}" for s in sizes)
             + f"{'share of cuBLAS at ' + str(sizes[-1]):>28}"]
    for variant in _variants(rows):
        cells = []
        for size in sizes:
            row = by.get((variant, size))
            cells.append(f"{'':>10}" if row is None else
                         f"{'wrong':>10}" if row["tflops"] is None else f"{row['tflops']:10.2f}")
        last = by.get((variant, sizes[-1]))
        share = last.get("vs_cublas") if last else None
        lines.append(f"{variant:<{width}}" + "".join(cells)
                     + (f"{share:28.1%}" if share else f"{'':>28}"))
    return "\n".join(lines)


def plot_tflops(rows, ax=None, title: str | None = None):
    """TFLOP/s against matrix size, one line per variant (cuBLAS dashed); returns the axes."""
    import matplotlib.pyplot as plt

    rows = _check_rows(rows)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for variant in _variants(rows):
        points = sorted((r["m"], r["tflops"]) for r in rows
                        if r["variant"] == variant and r["tflops"] is not None)
        if points:
            ax.plot(*zip(*points), marker="o", label=variant,
                    linestyle="--" if variant == "cublas" else "-")
    ax.set_xscale("log", base=2)
    sizes = sorted({r["m"] for r in rows})
    ax.set_xticks(sizes, [str(size) for size in sizes])
    ax.minorticks_off()
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return ax
