"""``flash_attention``: the entry point, which picks a kernel and a tile shape and launches it.

A call checks its inputs (``arguments``), picks the tile shape for the head
dimension, the mask, the sequence length and the GPU (``_config_for``: the
tensor-core kernel where the GPU has TF32 tensor cores, the CUDA-core kernel
elsewhere, and the portable shape where the GPU cannot give a block the tuned
shape's shared memory), and launches the kernel that ``forward`` compiles;
fp16 and bf16 CUDA tensors on a GPU with tensor cores go instead to
FlashAttention-2 in half precision (``half``; ``_half_kernel_runs``).

This module is where the Python cost of a call lives, which is why it is
apart from the kernels. On a GPU the kernel takes raw pointers and the launch
goes straight to cuda.core (``_launch_flash``); the common case, CUDA torch
tensors with the default options, takes a shorter path still
(``_quick_torch_flash``): before it, a call cost 24.8 microseconds on the H100
at a tiny shape, of which 9.5 were the launch itself (benchmarks/NOTES.md).
The questions asked of the GPU (``on_gpu``, ``_current_gpu``,
``_has_tf32_tensor_cores``, ``_max_shared_bytes_per_block``) are names of
this module, which the tests replace to play a GPU of another kind.
"""

from __future__ import annotations

import ctypes
import math
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels.attention.arguments import (_check_flag, _check_qkv, _check_scale,
                                                   _dtype_name)
from gpucourse.kernels.attention.config import (CAUSAL_FLASH_CONFIGS,
                                                CAUSAL_TENSOR_CORE_CONFIGS, FAST_MATH,
                                                FLASH_CONFIGS, PORTABLE_FLASH_CONFIGS,
                                                SUPPORTED_HEAD_DIMS, TENSOR_CORE_CONFIGS)
from gpucourse.kernels.attention.forward import FLASH_DTYPES, _flash_kernel
from gpucourse.kernels.attention.half import HALF_HEAD_DIMS, KINDS as HALF_KINDS
from gpucourse.kernels.attention.half import half_config, launch_half
from gpucourse.kernels.attention.tensor_cores import TensorCoreConfig, reset_simulator
from gpucourse.kernels.launch import core_launch, launch_config
from gpucourse.kernels.launch import current_gpu as _current_gpu
from gpucourse.kernels.launch import from_kernel as _from_kernel, to_kernel as _to_kernel
from gpucourse.kernels.launch import has_tf32_tensor_cores as _has_tf32_tensor_cores
from gpucourse.kernels.launch import launchable_with_shared as _compiled_flash
from gpucourse.kernels.launch import max_shared_bytes_per_block as _max_shared_bytes_per_block


def _config_for(head_dim: int, device_id: int | None = None, *, causal: bool = False,
                seq: int | None = None, tensor_cores: bool | None = None):
    """The tile shape for head_dim (and, for a causal mask, the sequence
    length). With tensor_cores (None: where the GPU has them, never on the
    simulator, whose stand-in of the instruction is slow), the tensor-core
    kernel's (CAUSAL_TENSOR_CORE_CONFIGS' or TENSOR_CORE_CONFIGS'), where there
    is one for head_dim; else the CUDA-core kernel's (CAUSAL_FLASH_CONFIGS' or
    FLASH_CONFIGS'). A GPU (device_id, default the current one) that cannot
    give a block that much shared memory, or has no TF32 tensor cores, gets
    the portable CUDA-core shape."""
    gpu = on_gpu()
    if gpu:
        device_id = _current_gpu() if device_id is None else device_id
    if tensor_cores is None:
        tensor_cores = gpu and _has_tf32_tensor_cores(device_id)
    if tensor_cores and head_dim in TENSOR_CORE_CONFIGS:
        configs, causal_configs = TENSOR_CORE_CONFIGS, CAUSAL_TENSOR_CORE_CONFIGS
    else:
        configs, causal_configs = FLASH_CONFIGS, CAUSAL_FLASH_CONFIGS
    config = configs[head_dim]
    if causal and seq is not None:
        config = next((shape for longest, shape in causal_configs.get(head_dim, ())
                       if seq <= longest), config)
    if not gpu:
        return config
    return _fitting_config(config, device_id)


def _fitting_config(config, device_id: int):
    too_big = config.dynamic_shared and config.shared_bytes > _max_shared_bytes_per_block(
        device_id)
    if too_big or (isinstance(config, TensorCoreConfig)
                   and not _has_tf32_tensor_cores(device_id)):
        return PORTABLE_FLASH_CONFIGS[config.head_dim]
    return config


def _launch_flash(config, causal, fastmath, buffers, batch, heads, seq, key_seq, scale,
                  device_id=None, io="float32"):
    """Launch the tiled kernel on (q, k, v, out, lse): raw device pointers on a
    GPU, flat arrays on the simulator. `scale` already carries log2(e); io is
    the element type of q, k, v and out.

    On a GPU the launch goes straight to `cuda.core.launch`, the call Numba's
    `kernel[grid, block](...)` ends in, with the arguments already in the
    form it takes: pointers as integers, the scalars as ctypes values. Numba's
    own path re-checks every argument's type and looks up the context on each
    call, about 20 microseconds of Python that showed in the timings."""
    if on_gpu():
        device_id = _current_gpu() if device_id is None else device_id
        launch, function, stream, threads, dynamic_bytes = _launch_plan(
            config, causal, fastmath, io, device_id)
        launch(stream, launch_config(config.grid(batch, heads, seq), threads, dynamic_bytes),
               function, *buffers, ctypes.c_int32(seq), ctypes.c_int32(key_seq),
               ctypes.c_int32(heads), ctypes.c_float(scale))
        return
    grid = config.grid(batch, heads, seq)
    kernel = _flash_kernel(config, causal, False, fastmath, io)
    dynamic_bytes = config.shared_bytes if config.dynamic_shared else 0
    reset_simulator()
    kernel[grid, config.threads, 0, dynamic_bytes](*buffers, np.int32(seq), np.int32(key_seq),
                                                   np.int32(heads), np.float32(scale))


@lru_cache(maxsize=None)
def _launch_plan(config, causal: bool, fastmath: bool, io: str, device_id: int) -> tuple:
    """What a launch of one tile shape needs on one GPU, found once: cuda.core's
    launch, the compiled function and stream (_compiled_flash), and the
    threads and dynamic shared bytes of a block."""
    kernel = _flash_kernel(config, causal, True, fastmath, io)
    dynamic_bytes = config.shared_bytes if config.dynamic_shared else 0
    function, stream = _compiled_flash(kernel, dynamic_bytes, device_id)
    return core_launch(), function, stream, config.threads, dynamic_bytes


def flash_attention(q, k, v, *, causal=False, scale=None, return_lse=False, tensor_cores=None):
    """softmax(scale q k^T) v by the tiled online-softmax kernel (FlashAttention-2 order).

    q: shape (batch, heads, seq, head_dim); k and v: one shape (batch, heads,
    key_seq, head_dim), which may differ from q's in the sequence length
    alone (cross-attention); C-contiguous, head_dim in SUPPORTED_HEAD_DIMS;
    numpy arrays, Numba device arrays or CUDA torch tensors (all of one
    kind), all float32 or all float16 (or all bfloat16, as CUDA torch
    tensors: numpy has no bfloat16). On a GPU with tensor cores, half-precision
    CUDA tensors run FlashAttention-2 in half precision (see tensor_cores
    below); otherwise half-precision inputs are converted to float32 as they
    are loaded, the arithmetic is float32 and the output is rounded back to
    the inputs' type.
    causal: mask keys after each query (and skip key tiles that are fully
    masked): query i sees keys 0..i, PyTorch's ``is_causal``, whose diagonal
    starts at the top left when key_seq differs from seq.
    scale: the factor on the scores; None means 1 / sqrt(head_dim).
    return_lse: also return the log-sum-exp of each row of scaled scores,
    shape (batch, heads, seq), which a backward pass would need.
    tensor_cores: run both tile products on the tensor cores rather than as
    fp32 FMAs on the CUDA cores. For float32 inputs that is 3xTF32 (about
    fp32's accuracy; ``attention.tensor_cores``); for fp16 and bf16 CUDA
    torch tensors it is FlashAttention-2 in half precision
    (``attention.half``): products on the fp16/bf16 tensor cores summed in
    float32, scores and statistics in float32, P rounded to the inputs' type
    for the product with V. None (the default): on a GPU with tensor cores
    (compute capability 8.0 on), for head dims 64 and 128 in float32 and
    16 to 128 in half precision; on CUDA cores elsewhere, the simulator
    included. True asks for them wherever the head dim has a tensor-core
    shape (on the simulator too, in float32: slow, for small inputs); a GPU
    without them still gets the CUDA-core kernel.

    Returns the output (in the inputs' kind and dtype) and, with return_lse,
    the log-sum-exp (float32).
    """
    if (scale is None and tensor_cores is None and causal.__class__ is bool
            and return_lse.__class__ is bool):
        done = _quick_torch_flash(q, k, v, causal)  # the common case, in few steps
        if done is not None:
            return done if return_lse else done[0]
    kind, (batch, heads, seq, head_dim), _ = _check_qkv(q, k, v, dtypes=FLASH_DTYPES)
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    if tensor_cores is not None and not isinstance(tensor_cores, (bool, np.bool_)):
        raise ValueError(f"tensor_cores must be None (where the GPU has them), True or False, "
                         f"got {tensor_cores!r}")
    s = _check_scale(scale, head_dim)
    device_id = _current_gpu() if on_gpu() else None
    io = _dtype_name(q, kind)
    if kind == "torch" and _half_kernel_runs(io, head_dim, device_id, tensor_cores):
        out, lse = _run_half(q, k, v, causal, s * math.log2(math.e), io, device_id)
        return (out, lse) if return_lse else out
    config = _config_for(head_dim, device_id, causal=causal, seq=int(q.shape[2]),
                         tensor_cores=tensor_cores)
    out, lse = _run_flash(kind, q, k, v, config, causal, s, FAST_MATH, device_id, io=io)
    return (out, lse) if return_lse else out


def _half_kernel_runs(io: str, head_dim: int, device_id, tensor_cores) -> bool:
    """Whether fp16/bf16 inputs go to FlashAttention-2 in half precision
    (attention.half): on a GPU with tensor cores, for HALF_HEAD_DIMS, unless
    tensor_cores is False."""
    return (io in HALF_KINDS and tensor_cores is not False and on_gpu()
            and head_dim in HALF_HEAD_DIMS and _has_tf32_tensor_cores(device_id))


def _run_half(q, k, v, causal: bool, scale2: float, io: str, device_id: int):
    """(out, lse) of the half-precision kernel on CUDA torch tensors."""
    import torch

    if not q.get_device() == k.get_device() == v.get_device() == device_id:
        devices = {name: x.device.index for name, x in (("q", q), ("k", k), ("v", v))}
        raise ValueError(f"q, k and v must be on the GPU Numba launches on (cuda:{device_id}), "
                         f"got {devices}; move them there, or select that GPU with "
                         f"numba.cuda.select_device")
    batch, heads, seq, head_dim = (int(n) for n in q.shape)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    launch_half(half_config(head_dim), causal, HALF_KINDS[io], q, k, v, out, lse, scale2)
    return out, lse


def _quick_torch_flash(q, k, v, causal: bool):
    """flash_attention's common case, the default scale and kernel on CUDA
    torch tensors of one float type, C-contiguous, on the GPU Numba launches
    on, with shapes _check_qkv accepts: (out, lse), or None for anything else
    (the long way then checks it and says what is wrong). A call to
    flash_attention costs Python time ahead of the launch that the GPU waits
    for: on the H100, 24.8 microseconds a call at a tiny shape before this
    path, of which 9.5 were the launch itself (benchmarks/NOTES.md)."""
    if not on_gpu():
        return None
    torch, io_names = _torch_for_quick_path()
    if torch is None:
        return None
    tensor = torch.Tensor
    if not (q.__class__ is tensor and k.__class__ is tensor and v.__class__ is tensor):
        return None
    dtype = q.dtype
    io = io_names.get(dtype)
    if io is None or k.dtype is not dtype or v.dtype is not dtype:
        return None
    shape, key_shape = q.shape, k.shape
    if len(shape) != 4 or v.shape != key_shape or len(key_shape) != 4:
        return None
    batch, heads, seq, head_dim = shape
    if key_shape[0] != batch or key_shape[1] != heads or key_shape[3] != head_dim \
            or head_dim not in SUPPORTED_HEAD_DIMS or not (batch and heads and seq
                                                           and key_shape[2]):
        return None
    if not (q.is_cuda and q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        return None
    device_id = _current_gpu()
    if not q.get_device() == k.get_device() == v.get_device() == device_id:
        return None
    if io in HALF_KINDS and head_dim in HALF_HEAD_DIMS and _has_tf32_tensor_cores(device_id):
        out = torch.empty_like(q)
        lse = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
        launch_half(half_config(head_dim), causal, HALF_KINDS[io], q, k, v, out, lse,
                    _default_scale2(head_dim))
        return out, lse
    config = _config_for(head_dim, device_id, causal=causal, seq=seq)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    _launch_flash(config, causal, FAST_MATH,
                  (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()),
                  batch, heads, seq, key_shape[2], _default_scale2(head_dim), device_id, io)
    return out, lse


@lru_cache(maxsize=None)
def _default_scale2(head_dim: int) -> float:
    """The default scale times log2(e), as _run_flash computes it."""
    return _check_scale(None, head_dim) * math.log2(math.e)


@lru_cache(maxsize=None)
def _torch_for_quick_path():
    """(torch, {torch dtype: the kernel's element type name}), imported once (this
    module does not import torch at import time); (None, {}) without torch."""
    try:
        import torch
    except ImportError:
        return None, {}
    return torch, {torch.float32: "float32", torch.float16: "float16",
                   torch.bfloat16: "bfloat16"}


def _run_flash(kind, q, k, v, config, causal, scale, fastmath, device_id=None, io="float32"):
    """Launch the tiled kernel on checked inputs of element type io (the
    benchmark also calls this, to compare tile shapes); device_id, where
    known, spares asking the driver again."""
    batch, heads, seq, head_dim = (int(n) for n in q.shape)
    key_seq = int(k.shape[2])
    # The kernel works with scores in base 2: it multiplies Q by scale * log2(e)
    # and uses exp2, since e^x = 2^(x log2 e) and exp2 is one instruction on a GPU.
    scale2 = scale * math.log2(math.e)
    if kind == "torch":
        import torch

        # Raw pointers carry no device: they must belong to the GPU Numba
        # launches on, or the kernel would read another GPU's addresses.
        numba_device = _current_gpu() if device_id is None else device_id
        if not q.get_device() == k.get_device() == v.get_device() == numba_device:
            devices = {name: x.device.index for name, x in (("q", q), ("k", k), ("v", v))}
            raise ValueError(f"q, k and v must be on the GPU Numba launches on (cuda:"
                             f"{numba_device}), got {devices}; move them there, or select "
                             f"that GPU with numba.cuda.select_device")
        out = torch.empty_like(q)  # q is contiguous: so is out, of q's dtype
        lse = q.new_empty((batch, heads, seq), dtype=torch.float32)
        buffers = [x.data_ptr() for x in (q, k, v, out, lse)]
        _launch_flash(config, causal, fastmath, buffers, batch, heads, seq, key_seq, scale2,
                      numba_device, io)
        return out, lse
    qd, kd, vd = (_to_kernel(x, kind) for x in (q, k, v))
    out = cuda.device_array((batch, heads, seq, head_dim), dtype=np.dtype(io))
    lse = cuda.device_array((batch, heads, seq), dtype=np.float32)
    arrays = (qd, kd, vd, out, lse)
    if on_gpu():
        buffers = [x.__cuda_array_interface__["data"][0] for x in arrays]
    else:
        buffers = [_flat(x) for x in arrays]
    _launch_flash(config, causal, fastmath, buffers, batch, heads, seq, key_seq, scale2,
                  io=io)
    return _from_kernel(out, kind), _from_kernel(lse, kind)


def _flat(array):
    """A contiguous device array as a 1-D view of the same memory."""
    return array.reshape(array.size)
