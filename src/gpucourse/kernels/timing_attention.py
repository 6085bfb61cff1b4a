"""Timing the FlashAttention exercises' kernels on a GPU, beside the library's and PyTorch's.

:func:`time_attention` times kernels of chapter 9's exercise contract (see
:mod:`gpucourse.grader.attention`) at a few sequence lengths, next to the
library's ``flash_attention`` and PyTorch's memory-efficient SDPA, and checks
each result against the float64 reference first: a broken kernel can look
fast. It sits beside :mod:`gpucourse.kernels.timing` (SGEMM's timing, and
:func:`~gpucourse.kernels.timing.median_time_s`, which it uses) because it
measures and nothing else: the committed H100 rows, the table and the plot
are in :mod:`gpucourse.chapters.attention_timing`.
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.grader.attention import _flag, _head_dim, launch_shape
from gpucourse.grader.launches import _quiet, _whole
from gpucourse.kernels import attention

TIMED_SEQS = (512, 1024, 2048)
# A result further than this from the float64 reference (largest absolute error) is wrong.
WRONG_ABOVE = 1e-3


def _check_kernels(kernels) -> dict:
    if kernels is None:
        return {}
    if not isinstance(kernels, dict) or not all(
            isinstance(name, str) and isinstance(entry, tuple) and len(entry) == 2
            and hasattr(entry[0], "py_func") and isinstance(entry[1], bool)
            for name, entry in kernels.items()):
        raise ValueError("kernels must be a dict {name: (kernel, causal)} of @cuda.jit kernels "
                         f"of the exercises' contract, causal True or False; got {kernels!r}")
    return dict(kernels)


def _sdpa(torch, causal: bool):
    """A function of (q, k, v) running PyTorch's memory-efficient SDPA in float32 (the
    default choice of backend where that one is not available), and its variant name."""
    import torch.nn.functional as F

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # an older PyTorch: its own choice of backend
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)), \
            "sdpa"

    def efficient(q, k, v):
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return efficient, "sdpa_efficient"


def time_attention(kernels=None, seqs=TIMED_SEQS, *, batch: int = 4, heads: int = 16,
                   head_dim: int = 64, library: bool = True, sdpa: bool = True,
                   warmup: int = 3, repeats: int = 10, seed: int = 0, time_s=None) -> list[dict]:
    """Time attention kernels at each sequence length of ``seqs`` (fp32, batch x heads
    heads of head_dim), on the GPU.

    ``kernels``: {name: (kernel, causal)}, kernels of the exercises' contract, launched
    on the batch's heads as (batch * heads, seq, head_dim) arrays. ``library``: time
    ``attention.flash_attention`` beside them, ``sdpa``: PyTorch's memory-efficient
    SDPA (TF32 off) when PyTorch with CUDA is installed, each with every causal flag
    that a kernel uses (both without kernels). Each result is checked first, on the
    first and the last head, against the float64 reference: a wrong one (largest
    error above WRONG_ABOVE, or NaN) gets ``ms`` and ``tflops`` None and is not
    timed. ``time_s(run)``: seconds of one call of run(); default
    :func:`gpucourse.kernels.timing.median_time_s` (CUDA events, needs a GPU).

    Returns rows {variant, batch, heads, seq, head_dim, causal, ms, tflops,
    max_abs_err}, TFLOP/s counted as :func:`attention.attention_flops` counts them.
    """
    own = _check_kernels(kernels)
    if not isinstance(seqs, (list, tuple)) or not seqs:
        raise ValueError(f"seqs must be a non-empty list of sequence lengths, got {seqs!r}")
    seqs = [_whole("seqs", s) for s in seqs]
    batch, heads, head_dim = _whole("batch", batch), _whole("heads", heads), _head_dim(head_dim)
    warmup, repeats = _whole("warmup", warmup, 0), _whole("repeats", repeats, 1)
    library, sdpa = _flag("library", library), _flag("sdpa", sdpa)
    if time_s is None:
        from gpucourse.kernels import timing

        if not on_gpu():
            timing._need_gpu("time_attention")

        def time_s(run):
            return timing.median_time_s(run, warmup, repeats)
    elif not callable(time_s):
        raise ValueError(f"time_s must be a function of one run() function, got {time_s!r}")
    torch = None
    if sdpa:
        from gpucourse.kernels.timing import _torch_cuda

        torch = _torch_cuda()
    flags = sorted({causal for _, causal in own.values()}) if own else [False, True]
    rows = []
    for seq in seqs:
        rng = np.random.default_rng(seed + seq)
        shape = (batch, heads, seq, head_dim)
        q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
        scale = 1 / math.sqrt(head_dim)
        checked = ((0, 0), (batch - 1, heads - 1))
        q_dev, k_dev, v_dev = (cuda.to_device(x) for x in (q, k, v))
        flat = [x.reshape(batch * heads, seq, head_dim) for x in (q_dev, k_dev, v_dev)]
        out = cuda.device_array((batch * heads, seq, head_dim), dtype=np.float32)
        lse = cuda.device_array((batch * heads, seq), dtype=np.float32)
        grid, block = launch_shape(batch * heads, seq)
        if torch is not None:
            torch.backends.cuda.matmul.allow_tf32 = False
            q_t, k_t, v_t = (torch.from_numpy(x).cuda() for x in (q, k, v))
        for causal in flags:
            expected = {head: attention.reference_attention(q[head], k[head], v[head],
                                                            causal=causal)
                        for head in checked}
            candidates = []
            for name, (kernel, kernel_causal) in own.items():
                if kernel_causal == causal:
                    def launch(kernel=kernel):
                        kernel[grid, block](*flat, out, lse, np.float32(scale))

                    def result():
                        return out.copy_to_host().reshape(shape)

                    candidates.append((name, launch, result, True))
            if library:
                held = {}

                def call_library(causal=causal, held=held):
                    held["out"] = attention.flash_attention(q_dev, k_dev, v_dev, causal=causal)

                candidates.append(("flash", call_library,
                                   lambda held=held: held["out"].copy_to_host(), False))
            if torch is not None:
                function, variant = _sdpa(torch, causal)
                held_t = {}

                def call_sdpa(function=function, held=held_t):
                    held["out"] = function(q_t, k_t, v_t)

                candidates.append((variant, call_sdpa,
                                   lambda held=held_t: held["out"].cpu().numpy(), False))
            for name, launch, result, poison in candidates:
                if poison:  # every element must be written
                    out.copy_to_device(np.full(out.shape, np.nan, dtype=np.float32))
                with _quiet():
                    launch()
                cuda.synchronize()
                got = result()
                error = max(float(np.abs(got[head] - expected[head]).max()) for head in checked)
                row = {"variant": name, "batch": batch, "heads": heads, "seq": seq,
                       "head_dim": head_dim, "causal": causal, "ms": None, "tflops": None,
                       "max_abs_err": error}
                if math.isfinite(error) and error <= WRONG_ABOVE:
                    seconds = float(time_s(launch))
                    flops = attention.attention_flops(batch, heads, seq, head_dim, causal)
                    row.update(ms=seconds * 1e3, tflops=flops / seconds / 1e12)
                rows.append(row)
    return rows
