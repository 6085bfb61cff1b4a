"""``flash_attention_backward``: the gradients of attention, without the N x N matrix.

The forward pass kept only O and the log-sum-exp L of each row of scaled scores.
Given dO, the gradient of the loss with respect to O, the backward pass needs
dQ, dK and dV without ever storing the N x N matrix of probabilities. It
recomputes each probability from the saved L, P_ij = exp(s q_i . k_j - L_i)
(s the scale), and uses the identities of the softmax's gradient (Dao 2023,
Algorithm 2):

    D_i   = sum_c dO_ic O_ic                   (one pre-pass, a number per row)
    dV_j  = sum_i P_ij dO_i
    dP_ij = dO_i . v_j
    dS_ij = P_ij (dP_ij - D_i)
    dK_j  = s sum_i dS_ij q_i
    dQ_i  = s sum_j dS_ij k_j

This module is the entry point: it checks the arguments, runs the pre-pass
(``_row_dot_kernel``) and then the kernels of the version asked for, whose
code lives in ``backward_v12`` (versions 1 and 2) and ``backward_v34``
(versions 3 and 4, the default). On CUDA torch tensors version 4 takes a
quick path straight to cuda.core (``QUICK_TORCH_PATH``), which saved
0.6-0.8 ms a call at seq 1024 on the H100 (the comment above the flag says
where that was measured).
"""

from __future__ import annotations

import ctypes
import sys
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels.attention.arguments import (_check_flag, _check_qkv, _check_scale,
                                                   _dtype_name, _kind)
from gpucourse.kernels.attention.backward_v12 import BLOCK, _kernels, _tiled_kernels
from gpucourse.kernels.attention.backward_v34 import _tiled_kernel_v4, _tiled_kernels_v3
from gpucourse.kernels.attention.forward import _IO_CONVERSIONS
from gpucourse.kernels.launch import (core_launch, flat_argument, launch_config, launchable,
                                       matrix_argument)
from gpucourse.kernels.launch import current_gpu as _current_gpu
from gpucourse.kernels.launch import empty_like as _empty_like, from_kernel as _from_kernel
from gpucourse.kernels.launch import launchable_with_shared as _compiled_flash
from gpucourse.kernels.launch import max_shared_bytes_per_block as _max_shared_bytes_per_block
from gpucourse.kernels.launch import to_kernel as _to_kernel
from numba.types import float16  # noqa: E402 (after gpucourse.device, which configures Numba)


@cuda.jit
def _row_dot_kernel(out, dout, delta):
    """delta[r] = sum_c dout[r, c] * out[r, c], one thread per row of (rows, head_dim),
    in float32 whatever the element type of out and dout."""
    r = cuda.grid(1)
    if r < delta.shape[0]:
        total = np.float32(0.0)
        for c in range(out.shape[1]):
            total += np.float32(dout[r, c]) * np.float32(out[r, c])
        delta[r] = total


VERSIONS = (1, 2, 3, 4, 5, 6)
FLOAT32_VERSIONS = (1, 2, 3, 4, 6)  # the versions that take float32 (5 takes halves alone)
# The fastest on the CUDA cores at every timed shape
# (results/attention_backward-h100-2026-11-25.json): version 4, the float32
# default except where version 6 (3xTF32 on the tensor cores) was timed faster
# (TF32_DEFAULT_HEAD_DIMS, below; results/attention_backward-h200-2026-11-29.json).
DEFAULT_VERSION = 4
# Version 4 on CUDA torch tensors through `_quick_v4_torch`: allocations by
# torch, launches straight to cuda.core with the arguments packed by hand, as
# sgemm.matmul and flash_attention do, instead of Numba's launch path (which
# wraps each of nine tensors in a device array and checks every argument on
# each of three launches). The benchmark times a single call from an idle GPU,
# so that Python is in the measurement: on the H100 the quick path took
# 0.6-0.8 ms less a call at seq 1024 (results/attention_backward-h100-
# 2026-11-26.json, rows flash_bwd and flash_bwd_long; launch_path_times reads
# them), and matched the long way's gradients there and in
# tests/test_attention_backward.py on the GPU. False sends every call the
# long way.
QUICK_TORCH_PATH = True


@cuda.jit
def _zero_kernel(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = np.float32(0.0)


@lru_cache(maxsize=None)
def _rounding_kernel(io: str):
    """A kernel that copies flat float32 src into flat dst of element type io."""
    to_io = _IO_CONVERSIONS[io]()

    @cuda.jit
    def rounding(src, dst):
        i = cuda.grid(1)
        if i < src.size:
            dst[i] = to_io(src[i])
    return rounding


def flash_attention_backward(q, k, v, out, lse, dout, *, causal=False, scale=None,
                             version=None, config=None):
    """dQ, dK and dV of attention, from the forward pass's output and log-sum-exp.

    q, out, dout: shape (batch, heads, seq, head_dim); k, v: shape (batch,
    heads, key_seq, head_dim) (key_seq may differ from seq: cross-attention),
    head_dim in attention.SUPPORTED_HEAD_DIMS; all float32, or all float16
    (versions 3 and 4: they convert each element to float32 as they load it
    and round each gradient once; and version 5), or all bfloat16 (version 5
    alone); lse: float32, shape (batch, heads, seq), as
    ``flash_attention(..., return_lse=True)`` returns it. All numpy arrays,
    all Numba device arrays or all CUDA torch tensors.
    causal and scale: as given to the forward pass. version: None (the
    default) is 5 for bfloat16, and for float16 CUDA tensors on a GPU with
    tensor cores (head_dim in half.HALF_HEAD_DIMS); 6 for float32 CUDA tensors
    on such a GPU at TF32_DEFAULT_HEAD_DIMS (head dim 64, where it was timed
    faster than version 4); DEFAULT_VERSION otherwise. Versions 5 and 6 run
    in one kernel, dQ added atomically, at ATOMIC_DQ_HEAD_DIMS (where the H200
    timed it faster), else in two. With PyTorch's deterministic mode on
    (torch.use_deterministic_algorithms(True)), a call without a version
    adds nothing atomically: 3 instead of 4, two kernels for 5 and 6;
    otherwise 4 (DEFAULT_VERSION: version 3 in one kernel, dQ summed with atomic adds, so
    its last bits can change from call to call), 1 (one row per thread, the
    plainest form; kept as the reference the speed-ups are measured against),
    2 (tiles of queries and keys with register tiling) or 3 (bigger tiles in
    dynamic shared memory, read four floats at a time; the fastest whose
    result does not depend on the order blocks run in) or 5 (FlashAttention-2
    in half precision on the tensor cores, ``attention.half_backward``: fp16
    or bf16 CUDA torch tensors on a GPU with tensor cores (on the simulator,
    ``half_backward.half_attention_backward`` takes CPU tensors); its gradients are summed in float32 from products
    of halves, P and dS rounded to the inputs' type) or 6 (the same
    kernels for float32 on the tensor cores in 3xTF32,
    ``attention.tf32_backward``: head_dim 32, 64 or 128; float32 CUDA torch
    tensors on a GPU with tensor cores, numpy arrays or CPU torch tensors on
    the simulator; the float32 default at head dims 64 and 128 on a GPU with
    tensor cores: 0.63-0.75x and 0.81-0.95x SDPA memory-efficient's backward
    on the H200, version 4 0.95-1.48x and 1.01-1.45x,
    results/attention_backward-h200-2026-11-29.json).
    config: version 2's, 3's or 4's tiles, (tile, threads, SQ, SK, VK, VC)
    (versions 3 and 4: optionally a seventh number, registers per thread);
    default TILED_CONFIGS, TILED_CONFIGS_V3 or TILED_CONFIGS_V4[head_dim];
    version 6's, a pair of tf32_backward.Tf32BackwardConfig (dK and dV's
    kernel's, dQ's), default tf32_backward.backward_configs(head_dim).

    Returns (dq, dk, dv) in the kind and dtype of the inputs, of the shapes of
    q, k and v. Memory beyond the gradients: one float per query row (D); the
    seq x key_seq matrix is never stored.
    """
    kind, (batch, heads, seq, head_dim), key_seq = _check_qkv(
        q, k, v, dtypes=("float32", "float16", "bfloat16"))
    io = _dtype_name(q, kind)
    for name, x in (("out", out), ("dout", dout)):
        if _kind(x) != kind or tuple(x.shape) != tuple(q.shape):
            raise ValueError(f"{name} must be of q's kind and shape {tuple(q.shape)}, "
                             f"got {type(x).__name__} of shape {tuple(x.shape)}")
    if _kind(lse) != kind or tuple(lse.shape) != (batch, heads, seq):
        raise ValueError(f"lse must be of q's kind and shape {(batch, heads, seq)}, "
                         f"got {type(lse).__name__} of shape {tuple(lse.shape)}")
    for name, x, dtype in (("out", out, io), ("dout", dout, io), ("lse", lse, "float32")):
        if str(x.dtype).split(".")[-1] != dtype:
            raise ValueError(f"{name} must be {dtype}" + (" (q's dtype)" if name != "lse" else "")
                             + f", got {x.dtype}")
    causal = _check_flag("causal", causal)
    s = _check_scale(scale, head_dim)
    if version is None:
        version = _default_version(kind, io, head_dim)
    if isinstance(version, bool) or version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    if io == "bfloat16" and version != 5:
        raise ValueError(f"bfloat16 inputs run on version 5 alone (FlashAttention-2 in half "
                         f"precision); pass version=5, got version={version}")
    if io != "float32" and version not in (3, 4, 5):  # so version 6 takes float32 alone
        raise ValueError(f"{io} inputs run on versions 3, 4 and 5 alone; pass one of them, "
                         f"got version={version}")
    if version == 5:
        if io == "float32":
            raise ValueError("version 5 takes float16 or bfloat16 torch tensors; float32 runs "
                             "on versions 1-4 and 6")
        return _half_backward(kind, io, q, k, v, out, lse, dout, causal, s)
    if version == 6:
        return _tf32_backward(kind, q, k, v, out, lse, dout, causal, s, config)

    if QUICK_TORCH_PATH and kind == "torch" and version == 4 and io in ("float32", "float16") \
            and on_gpu():
        grads = _quick_v4_torch(q, k, v, out, lse, dout, causal, np.float32(s), config, io)
        if grads is not None:
            return grads
    rows = batch * heads
    qd, od, dod = (_to_kernel(x, kind).reshape((rows, seq, head_dim)) for x in (q, out, dout))
    kd, vd = (_to_kernel(x, kind).reshape((rows, key_seq, head_dim)) for x in (k, v))
    lsed = _to_kernel(lse, kind).reshape((rows, seq))
    delta = cuda.device_array((rows, seq), dtype=np.float32)
    _row_dot_kernel[(rows * seq + 127) // 128, 128](
        od.reshape((rows * seq, head_dim)), dod.reshape((rows * seq, head_dim)),
        delta.reshape(rows * seq))
    grads = [_empty_like(kind, q, (batch, heads, n, head_dim), io)
             for n in (seq, key_seq, key_seq)]
    dq, dk, dv = (kernel_side.reshape((rows, n, head_dim))
                  for (_, kernel_side), n in zip(grads, (seq, key_seq, key_seq)))
    if version in (3, 4):
        launch = _launch_v4 if version == 4 else _launch_v3
        launch(qd, kd, vd, dod, lsed, delta, dq, dk, dv, seq, key_seq, head_dim, causal,
               np.float32(s), config, io)
        return tuple(_from_kernel(caller_side, kind) for caller_side, _ in grads)
    if version == 1:
        dkdv_kernel, dq_kernel = _kernels(head_dim, causal)
        threads, tile = BLOCK, BLOCK
    else:
        dkdv_kernel, dq_kernel, threads, tile = _tiled_kernels(
            head_dim, causal, None if config is None else tuple(config))
    key_grid = ((key_seq + tile - 1) // tile, rows)  # a block per tile of keys ...
    query_grid = ((seq + tile - 1) // tile, rows)  # ... and per tile of queries
    dkdv_kernel[key_grid, threads](qd, kd, vd, dod, lsed, delta, dk, dv, np.float32(s))
    dq_kernel[query_grid, threads](qd, kd, vd, dod, lsed, delta, dq, np.float32(s))
    return tuple(_from_kernel(caller_side, kind) for caller_side, _ in grads)


def _opt_in(kernels, shared, version):
    """On a GPU: refuse tiles whose dynamic shared memory this GPU cannot give a
    block, else opt each kernel in to it (once per kernel, where it passes 48
    KiB)."""
    if not on_gpu():
        return
    device_id = _current_gpu()
    if shared > _max_shared_bytes_per_block(device_id):
        raise ValueError(f"version {version} needs {shared} bytes of shared memory per block, "
                         f"more than this GPU gives; use version=2 or smaller tiles")
    for kernel in kernels:
        _compiled_flash(kernel, shared, device_id)  # the opt-in, once


def _launch_v3(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, head_dim, causal, scale,
               config, io="float32"):
    """Version 3's two kernels on the (rows, seq, head_dim) device arrays, passed
    flat, with the dynamic shared memory their tiles take (opted in to, once
    per kernel, where it passes 48 KiB)."""
    dkdv, dq_kernel, threads, tile, shared = _tiled_kernels_v3(
        head_dim, causal, None if config is None else tuple(config), io)
    _opt_in((dkdv, dq_kernel), shared, 3)
    rows = q.shape[0]
    flat = [x.reshape(x.size) for x in (q, k, v, dout, lse, delta, dq, dk, dv)]
    qf, kf, vf, dof, lsef, deltaf, dqf, dkf, dvf = flat
    sizes = (np.int32(seq), np.int32(key_seq), scale)
    dkdv[((key_seq + tile - 1) // tile, rows), threads, 0, shared](
        qf, kf, vf, dof, lsef, deltaf, dkf, dvf, *sizes)
    dq_kernel[((seq + tile - 1) // tile, rows), threads, 0, shared](
        qf, kf, vf, dof, lsef, deltaf, dqf, *sizes)


def _launch_v4(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, head_dim, causal, scale,
               config, io="float32"):
    """Version 4's kernel on the (rows, seq, head_dim) device arrays, passed flat:
    dQ accumulates in float32 (dq itself when it is float32, else a scratch
    array rounded into dq afterwards), zeroed first."""
    fused, threads, tile, shared = _tiled_kernel_v4(
        head_dim, causal, None if config is None else tuple(config), io)
    _opt_in((fused,), shared, 4)
    rows = q.shape[0]
    qf, kf, vf, dof, lsef, deltaf, dqf, dkf, dvf = (
        x.reshape(x.size) for x in (q, k, v, dout, lse, delta, dq, dk, dv))
    sums = dqf if io == "float32" else cuda.device_array(dqf.size, dtype=np.float32)
    _zero_kernel[(sums.size + 255) // 256, 256](sums)
    fused[((key_seq + tile - 1) // tile, rows), threads, 0, shared](
        qf, kf, vf, dof, lsef, deltaf, sums, dkf, dvf, np.int32(seq), np.int32(key_seq), scale)
    if io != "float32":
        _rounding_kernel(io)[(sums.size + 255) // 256, 256](sums, dqf)


def _quick_v4_torch(q, k, v, out, lse, dout, causal, scale, config, io):
    """Version 4 on checked CUDA torch tensors (see QUICK_TORCH_PATH): (dq, dk, dv),
    or None where a tensor is not C-contiguous on the current GPU (the long way
    then handles it)."""
    import torch

    device_id = _current_gpu()
    tensors = (q, k, v, out, lse, dout)
    if not all(x.is_cuda and x.is_contiguous() and x.get_device() == device_id for x in tensors):
        return None
    batch, heads, seq, head_dim = q.shape
    key_seq, rows = k.shape[2], batch * heads
    plan = _quick_v4_plan(head_dim, causal, None if config is None else tuple(config), io,
                          device_id)
    launch, (row_dot, zero, fused, rounding), stream, (threads, tile, shared) = plan
    element = q.element_size()
    delta = torch.empty(rows * seq, dtype=torch.float32, device=q.device)
    dq, dk, dv = (torch.empty((batch, heads, n, head_dim), dtype=q.dtype, device=q.device)
                  for n in (seq, key_seq, key_seq))
    sums = dq if io == "float32" else torch.empty(dq.numel(), dtype=torch.float32,
                                                  device=q.device)
    queries, keys = rows * seq * head_dim, rows * key_seq * head_dim

    def flat(x, size, itemsize):
        return flat_argument(x.data_ptr(), size, itemsize)

    launch(stream, launch_config((rows * seq + 127) // 128, 128, 0), row_dot,
           *matrix_argument(out.data_ptr(), rows * seq, head_dim, element),
           *matrix_argument(dout.data_ptr(), rows * seq, head_dim, element),
           *flat(delta, rows * seq, 4))
    launch(stream, launch_config((queries + 255) // 256, 256, 0), zero, *flat(sums, queries, 4))
    launch(stream, launch_config(((key_seq + tile - 1) // tile, rows), threads, shared), fused,
           *flat(q, queries, element), *flat(k, keys, element), *flat(v, keys, element),
           *flat(dout, queries, element), *flat(lse, rows * seq, 4), *flat(delta, rows * seq, 4),
           *flat(sums, queries, 4), *flat(dk, keys, element), *flat(dv, keys, element),
           ctypes.c_int32(seq), ctypes.c_int32(key_seq), ctypes.c_float(scale))
    if io != "float32":
        launch(stream, launch_config((queries + 255) // 256, 256, 0), rounding,
               *flat(sums, queries, 4), *flat(dq, queries, element))
    return dq, dk, dv


@lru_cache(maxsize=None)
def _quick_v4_plan(head_dim: int, causal: bool, config, io: str, device_id: int):
    """What _quick_v4_torch launches, found once per head dim, mask, tiles,
    element type and GPU: cuda.core's launch, the four compiled functions
    (D's pre-pass, the zeroing of dQ's sums, the fused kernel, the rounding
    of dQ for float16), the stream, and (threads, tile, shared bytes)."""
    from numba import float32, types

    fused, threads, tile, shared = _tiled_kernel_v4(head_dim, causal, config, io)
    _opt_in((fused,), shared, 4)
    function, stream = _compiled_flash(fused, shared, device_id)
    element = float16 if io == "float16" else float32
    matrix, flat32 = types.Array(element, 2, "C"), types.Array(float32, 1, "C")
    row_dot, _ = launchable(_row_dot_kernel, (matrix, matrix, flat32))
    zero, _ = launchable(_zero_kernel, (flat32,))
    rounding = None
    if io != "float32":
        rounding, _ = launchable(_rounding_kernel(io), (flat32, types.Array(element, 1, "C")))
    return core_launch(), (row_dot, zero, function, rounding), stream, (threads, tile, shared)


# Head dims at which version 6 (3xTF32 on the tensor cores) is the float32
# default on a GPU with tensor cores: where the H200 timed it faster than
# version 4 (results/attention_backward-h200-2026-11-29.json: 1.41-2.06x as
# fast at head dim 64, in one kernel with dQ added atomically; 1.26-1.52x at
# 128, where dK and dV are two kernels of one sum each,
# tf32_backward.SPLIT_SUMS_HEAD_DIMS; the one kernel there, whose registers
# fit 8-row tiles alone, had been 0.72-0.81x on 2026-11-28). Head dim 32 has
# not been timed.
TF32_DEFAULT_HEAD_DIMS = (64, 128)
# Head dims at which versions 5 and 6 add dQ atomically from dK and dV's
# kernel by default (half_backward_atomic, tf32_backward_atomic: five tile
# products instead of seven, but dQ's last bits then vary between calls, as
# in FlashAttention-2's backward): where the H200 timed one kernel faster than
# the two at both masks. Version 5 in the sweep at N 4096
# (results/attention_half_sweep-h200-2026-11-28.json), head dim 64: 1.81x
# SDPA flash's backward instead of 2.09x causal, 2.03x instead of 2.04x
# without a mask; head dim 128: 1.99x instead of 2.05x causal, but 2.20x
# instead of 2.16x without a mask. With the main loops cut since (shared_word,
# branch-free P and dS), the full table (results/attention_half-h200-2026-11-28.json,
# N 1024 and 4096, both masks, fp16 and bf16, the default as a call runs it
# beside flash_bwd_two_kernels_*): the two kernels took 1.00-1.59x the one
# kernel's time at 14 of the 16 shapes (1.59x at head dim 64, N 4096, causal);
# at head dim 64, N 1024 without a mask, 0.78x in fp16 and 0.88x in bf16, a
# shape whose times moved by 20% between two runs, SDPA flash's too. Version 6 at head dim 64:
# 0.76-1.14x SDPA memory-efficient's backward as a call runs it, at N 1024 and
# 4096, both masks (results/attention_backward-h200-2026-11-28.json).
# Head dim 64 without a mask, version 5, timed again on 2026-11-29
# (results/attention_half-h200-2026-11-29.json): the two kernels took 0.79x
# (fp16) and 0.72x (bf16) of the one kernel's time at N 1024, 0.99x at N
# 4096; the day before 0.78x and 0.88x, and 1.00x. So there, two
# kernels, which also give the same bits every call. Causal, one kernel
# stays (the two took 1.07x-1.13x fp16, 0.90x-1.27x bf16 at N 1024, 1.54-1.59x at
# N 4096). Version 6 at head dim 128, its dK and dV in two kernels: the dK
# kernel adding dQ took 0.74-0.81x the time of the two with dQ's own kernel
# (results/reruns/attention_backward-h200-2026-11-29-third.json,
# tf32_split_sums_bwd).
# Each head dim maps to the masks (causal True or False) under which dQ is
# added atomically by default.
ATOMIC_DQ_HEAD_DIMS = {5: {64: (True,), 128: (False, True)},
                       6: {64: (False, True), 128: (False, True)}}


def _deterministic() -> bool:
    """Whether PyTorch's deterministic mode is on
    (torch.use_deterministic_algorithms(True)): then no default adds
    gradients atomically, so every call gives the same bits."""
    torch = sys.modules.get("torch")  # not imported for numpy inputs
    return torch is not None and torch.are_deterministic_algorithms_enabled()


def _atomic_dq(version: int, head_dim: int, causal: bool) -> bool:
    """Whether version 5 or 6 adds dQ atomically by default at head_dim, with
    or without a causal mask: listed in ATOMIC_DQ_HEAD_DIMS for that mask,
    and PyTorch's deterministic mode off."""
    return bool(causal) in ATOMIC_DQ_HEAD_DIMS[version].get(head_dim, ()) \
        and not _deterministic()


def _default_version(kind: str, io: str, head_dim: int) -> int:
    """The version a call without one runs: 5 for bfloat16, and for float16
    CUDA tensors on a GPU with tensor cores at the half kernels' head dims
    (3-4 times as fast as version 4 there: results/attention_half-h200-2026-11-28.json);
    6 for float32 CUDA tensors on such a GPU at TF32_DEFAULT_HEAD_DIMS;
    DEFAULT_VERSION otherwise, or 3 (two kernels, no atomic additions) where
    that is 4 and PyTorch's deterministic mode is on."""
    from gpucourse.kernels.attention.half import HALF_HEAD_DIMS
    from gpucourse.kernels.launch import has_tf32_tensor_cores

    if io == "bfloat16":
        return 5
    tensor_cores = kind == "torch" and on_gpu() and has_tf32_tensor_cores(_current_gpu())
    if io == "float16" and head_dim in HALF_HEAD_DIMS and tensor_cores:
        return 5
    if io == "float32" and head_dim in TF32_DEFAULT_HEAD_DIMS and tensor_cores:
        return 6
    return 3 if DEFAULT_VERSION == 4 and _deterministic() else DEFAULT_VERSION


def _half_backward(kind, io, q, k, v, out, lse, dout, causal, scale):
    """Version 5 (attention.half_backward) on checked inputs: torch tensors,
    CUDA ones on a GPU with tensor cores."""
    from gpucourse.kernels.attention.half_backward import (atomic_dq_runs_here,
                                                           half_attention_backward)
    from gpucourse.kernels.launch import has_tf32_tensor_cores

    if kind != "torch":
        raise ValueError(f"version 5 takes torch tensors (fp16 or bf16), got {kind} arrays")
    tensors = (q, k, v, out, lse, dout)
    if on_gpu():
        device_id = _current_gpu()
        if not all(x.is_cuda and x.get_device() == device_id for x in tensors):
            raise ValueError(f"version 5 needs CUDA tensors on the GPU Numba launches on "
                             f"(cuda:{device_id})")
        if not has_tf32_tensor_cores(device_id):
            raise ValueError("version 5 needs a GPU with tensor cores (compute capability 8.0 "
                             "or later); use version 4")
    return half_attention_backward(*(x.contiguous() for x in tensors), causal=causal,
                                   scale=float(scale),
                                   atomic_dq=_atomic_dq(5, q.shape[3], causal)
                                   and atomic_dq_runs_here())


def _tf32_backward(kind, q, k, v, out, lse, dout, causal, scale, config):
    """Version 6 (attention.tf32_backward) on checked float32 inputs: CUDA
    torch tensors on a GPU with tensor cores (16-byte aligned); numpy arrays
    on the simulator."""
    from gpucourse.kernels.attention.tf32_backward import (TF32_BACKWARD_HEAD_DIMS,
                                                           Tf32BackwardConfig,
                                                           tf32_attention_backward)
    from gpucourse.kernels.launch import has_tf32_tensor_cores

    head_dim = q.shape[3]
    if head_dim not in TF32_BACKWARD_HEAD_DIMS:
        raise ValueError(f"version 6 takes head_dim in {TF32_BACKWARD_HEAD_DIMS}, got "
                         f"{head_dim}; use version 4")
    if config is not None and not (isinstance(config, tuple) and len(config) == 2 and all(
            isinstance(c, Tf32BackwardConfig) and c.head_dim == head_dim for c in config)):
        raise ValueError(f"version 6's config must be a pair of Tf32BackwardConfig of head_dim "
                         f"{head_dim} (dK and dV's tiles, dQ's), got {config!r}")
    tensors = (q, k, v, out, lse, dout)
    if on_gpu():
        device_id = _current_gpu()
        if kind != "torch" or not all(x.is_cuda and x.get_device() == device_id
                                      for x in tensors):
            raise ValueError(f"version 6 takes float32 CUDA torch tensors on the GPU Numba "
                             f"launches on (cuda:{device_id}), got {kind} arrays")
        if not has_tf32_tensor_cores(device_id):
            raise ValueError("version 6 needs a GPU with tensor cores (compute capability 8.0 "
                             "or later); use version 4")
        tensors = tuple(x.contiguous() for x in tensors)
        if any(x.data_ptr() % 16 for x in tensors[:3] + tensors[5:]):
            raise ValueError("version 6 copies q, k, v and dout 16 bytes at a time: their "
                             "data must start on a 16-byte boundary")
    elif kind != "numpy":
        raise ValueError(f"version 6 takes numpy arrays on the simulator, got {kind} arrays")
    atomic = config is None and _atomic_dq(6, head_dim, causal)  # with its own tiles
    return tf32_attention_backward(*tensors, causal=causal, scale=float(scale), configs=config,
                                   atomic_dq=atomic)
