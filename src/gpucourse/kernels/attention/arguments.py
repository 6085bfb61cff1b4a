"""The checks every entry point runs on its arguments, before any launch.

``flash_attention``, ``naive_attention``, the backward pass and the numpy
models take the same kinds of inputs (numpy arrays, Numba device arrays or
CUDA torch tensors of shape (batch, heads, seq, head_dim)) and the same
options (``causal``, ``scale``). Their checks live in one module so that
every entry point refuses a bad argument the same way: a ValueError that
names the argument and says what it accepts.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from gpucourse.kernels.attention.config import SUPPORTED_HEAD_DIMS
from gpucourse.kernels.launch import is_device_array as _is_device_array
from gpucourse.kernels.launch import torch_float32 as _torch_float32


def _kind(x) -> str:
    """'numpy', 'device' (a Numba device array) or 'torch' (a CUDA tensor)."""
    if isinstance(x, np.ndarray):
        return "numpy"
    if type(x).__module__.split(".")[0] == "torch":
        if not x.is_cuda:
            raise ValueError("torch tensors must be on a CUDA device (for a CPU tensor, "
                             "pass tensor.numpy())")
        return "torch"
    if _is_device_array(x):
        return "device"
    raise ValueError(f"q, k and v must be numpy arrays, Numba device arrays or CUDA torch "
                     f"tensors, got {type(x).__name__}")


def _is_c_contiguous(x, kind: str) -> bool:
    if kind == "numpy":
        return x.flags.c_contiguous
    if kind == "torch":
        return x.is_contiguous()
    return x.is_c_contiguous()


def _dtype_name(x, kind: str) -> str:
    dtype = x.dtype
    if kind == "torch" and dtype is _torch_float32():
        return "float32"
    return str(dtype).replace("torch.", "")


def _check_qkv(q, k, v, *, head_dims=SUPPORTED_HEAD_DIMS, dtypes=("float32",)):
    """Validate q, k, v; return (kind, (batch, heads, seq, head_dim), key_seq).

    q is (batch, heads, seq, head_dim); k and v are (batch, heads, key_seq,
    head_dim), of one shape, with q's batch, heads and head_dim: key_seq may
    differ from seq (cross-attention). head_dims=None accepts any head
    dimension; dtypes names the element types accepted (one for all three).
    (Written for few Python operations: it runs on every call, ahead of the
    launch.)"""
    kind = _kind(q)
    if _kind(k) != kind or _kind(v) != kind:
        kinds = {name: _kind(x) for name, x in (("q", q), ("k", k), ("v", v))}
        raise ValueError(f"q, k and v must be of one kind (all numpy, all device arrays or "
                         f"all torch tensors), got {kinds}")
    named = (("q", q), ("k", k), ("v", v))
    for name, x in named:
        if len(x.shape) != 4:
            raise ValueError(f"{name} must have 4 dimensions (batch, heads, seq, head_dim), "
                             f"got shape {tuple(x.shape)}")
        if _dtype_name(x, kind) not in dtypes:
            raise ValueError(f"{name} must be {' or '.join(dtypes)}, got {_dtype_name(x, kind)}")
    if len(dtypes) > 1 and not _dtype_name(q, kind) == _dtype_name(k, kind) == _dtype_name(v, kind):
        raise ValueError(f"q, k and v must have one dtype, got {_dtype_name(q, kind)}, "
                         f"{_dtype_name(k, kind)} and {_dtype_name(v, kind)}")
    shape = tuple(map(int, q.shape))
    key_shape = tuple(map(int, k.shape))
    if tuple(v.shape) != key_shape:
        raise ValueError(f"k and v must have the same shape (batch, heads, key_seq, head_dim); "
                         f"k is {key_shape} but v is {tuple(v.shape)}")
    if key_shape[:2] != shape[:2] or key_shape[3] != shape[3]:
        raise ValueError(f"k and v must have q's batch, heads and head_dim (only the sequence "
                         f"length may differ); q is {shape} but k and v are {key_shape}")
    if min(shape) < 1 or key_shape[2] < 1:
        raise ValueError(f"q, k and v must not be empty, got shapes {shape} and {key_shape}")
    if head_dims is not None and shape[3] not in head_dims:
        raise ValueError(f"head_dim must be one of {', '.join(map(str, head_dims))}, "
                         f"got {shape[3]}")
    for name, x in named:
        if not _is_c_contiguous(x, kind):
            raise ValueError(f"{name} must be C-contiguous (row-major); got a strided view; "
                             f"pass a contiguous copy (np.ascontiguousarray or .contiguous())")
    return kind, shape, key_shape[2]


def _check_flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _check_scale(scale, head_dim) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a positive number or None, got {scale!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive, finite number or None, got {scale!r}")
    return float(scale)


def _count(name, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


def _check_cross_shapes(q_shape, k_shape, v_shape) -> None:
    """q (..., seq, head_dim); k and v one shape (..., key_seq, head_dim), q's
    but for the sequence length."""
    if len(q_shape) < 2 or k_shape != v_shape or len(k_shape) != len(q_shape) \
            or k_shape[:-2] != q_shape[:-2] or k_shape[-1] != q_shape[-1]:
        raise ValueError(f"q must have shape (..., seq, head_dim) and k and v one shape "
                         f"(..., key_seq, head_dim) that differs from q's only in the "
                         f"sequence length; got {q_shape}, {k_shape} and {v_shape}")
