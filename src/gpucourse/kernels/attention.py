"""Weeks 9-10: FlashAttention, the tiled online-softmax forward pass, in Numba-CUDA.

Self-attention for one head is O = softmax(s Q K^T) V, with Q, K, V of shape
(seq, head_dim) and s = 1 / sqrt(head_dim). This module computes it three ways:

* ``reference_attention``: numpy in float64, the yardstick every test uses;
* ``naive_attention``: three Numba kernels that write the whole seq x seq
  score matrix to device memory (scores, row softmax, then P V);
* ``flash_attention``: one Numba kernel in the loop order of FlashAttention-2
  (Dao 2023). A block of threads owns a tile of query rows; it streams key and
  value tiles through shared memory, keeps a running maximum and a running sum
  for each row (the online softmax of Milakov and Gimelshein 2018), rescales
  its output accumulator when the maximum grows, and divides by the sum once,
  at the end. The score matrix never leaves the chip. Where the GPU has TF32
  tensor cores, its two tile products run there in 3xTF32 (the kernel of
  ``attention_tensor_cores``); ``tensor_cores=False`` keeps them on the CUDA
  cores, one fp32 FMA each, the kernel described below.

Inside a block, each thread owns ``tm`` query rows (one in every
``block_rows / tm``) and a slice of the columns: one key in every
``thread_cols`` of the score tile while scores are computed, and groups of
four neighbouring columns of the output while P V is accumulated. Shared
tiles are read four floats at a time (128-bit loads). The row statistics need the
maximum over all the threads that share a row; on a GPU those threads sit in
one warp and exchange values with warp shuffles, and on Numba's simulator
(which has no shuffles) they go through shared memory. Scores are kept in
base 2 (the scale carries a factor log2 e) so that each exponential is one
``exp2``; shared-memory indices in the inner loops are unsigned and those
loops are ``while`` loops, which keeps Numba's index arithmetic out of them
(see ``unsigned``). On a GPU the kernel takes raw pointers, which keeps the
Python work of a launch small (see ``_launch_flash``).

The module also counts what the chapter discusses: floating-point operations,
device-memory (HBM) bytes and shared-memory (SRAM) bytes of the naive and the
tiled versions, and the extra memory each needs.

Inputs are float32 arrays of shape (batch, heads, seq, head_dim) (keys and
values may have another sequence length than the queries: cross-attention;
``flash_attention`` also takes float16 and bfloat16, computing in float32):
numpy arrays (the result comes back as numpy), Numba device arrays (the
result stays on the device) or CUDA torch tensors (the result is a torch
tensor on the same device). Importing this module imports Numba (through ``gpucourse.device``)
but not torch.
"""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from gpucourse import results as results_files
from gpucourse.device import cuda, on_gpu
from gpucourse.kernels.launch import core_launch, launch_config
from gpucourse.kernels.launch import current_gpu as _current_gpu
from gpucourse.kernels.launch import empty_like as _empty_like, from_kernel as _from_kernel
from gpucourse.kernels.launch import has_tf32_tensor_cores as _has_tf32_tensor_cores
from gpucourse.kernels.launch import is_device_array as _is_device_array
from gpucourse.kernels.launch import launchable_with_shared as _compiled_flash
from gpucourse.kernels.launch import max_shared_bytes_per_block as _max_shared_bytes_per_block
from gpucourse.kernels.launch import to_kernel as _to_kernel, torch_float32 as _torch_float32
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4_flat
from gpucourse.kernels.attention_tensor_cores import (TensorCoreConfig, check_tc_config,
                                                      flash_forward_tc, reset_simulator)
from numba import float32, int32, types, uint32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)
from numba.types import float16  # noqa: E402

# Inside the tiled kernel, shared-memory indices are unsigned on a GPU: Numba
# then skips the fix-up it applies to negative, Python-style indices, which
# costs integer instructions on every access of the inner loops. Numba's
# simulator runs the kernel as Python, where a plain int is the fast choice.
unsigned = uint32 if on_gpu() else int
unsigned64 = uint64 if on_gpu() else int  # for offsets into the whole q, k, v arrays
# The tiled kernel's small device functions are inlined into it on a GPU.
_INLINE = {"forceinline": True} if on_gpu() else {}

# Head dimensions the tiled kernel is compiled for. Each gets its own tile
# shape; the defaults fit the four shared-memory tiles in the 48 KiB a block
# may declare statically (larger shapes go to dynamic shared memory).
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
STATIC_SHARED_LIMIT_BYTES = 48 * 1024
# Past 48 KiB a block's shared memory must be dynamic, and the kernel must opt
# in to it; 227 KiB is the most a block may have on compute capability 9.0
# (H100, H200).
DYNAMIC_SHARED_LIMIT_BYTES = 227 * 1024
WARP_SIZE = 32
FLOAT32_BYTES = 4


@dataclass(frozen=True)
class FlashConfig:
    """The tile shape of the tiled kernel for one head dimension.

    block_rows (Br) query rows per block, block_cols (Bc) keys per inner
    step; each thread owns ``thread_rows`` query rows and one in every
    ``thread_cols`` columns of the score tile and of the output.
    ``steps_per_pass``: steps of the two tile products' loops (four head-dim
    values of S = Q K^T, one key of O += P V) written out per pass, at
    constant offsets from addresses that advance once a pass: 1, 2 or 4.
    More steps, fewer instructions, but more registers: the package's own
    shapes take the most that ptxas compiles for sm_90 without spilling.
    """

    head_dim: int
    block_rows: int
    block_cols: int
    thread_rows: int
    thread_cols: int
    steps_per_pass: int = 1

    @property
    def threads(self) -> int:
        return (self.block_rows // self.thread_rows) * self.thread_cols

    @property
    def score_cols_per_thread(self) -> int:
        return self.block_cols // self.thread_cols

    @property
    def out_cols_per_thread(self) -> int:
        return self.head_dim // self.thread_cols

    # Row lengths of the shared tiles. Q and K are stored as they are (a row
    # per query or key), padded by four floats: rows stay 16-byte aligned for
    # 128-bit loads, and neighbouring keys start four banks apart, so that a
    # quarter-warp's loads of eight keys hit eight different groups of banks.
    # P is stored transposed (a row per key), padded the same way.
    @property
    def q_row(self) -> int:
        return self.head_dim + 4

    @property
    def k_row(self) -> int:
        return self.head_dim + 4

    @property
    def p_row(self) -> int:
        return self.block_rows + 4

    @cached_property  # read on every call; a frozen dataclass keeps it in __dict__
    def shared_bytes(self) -> int:
        q = self.block_rows * self.q_row  # Q tile, pre-scaled
        k = self.block_cols * self.k_row  # K tile
        v = self.block_cols * self.head_dim  # V tile
        p = self.block_cols * self.p_row  # P^T tile (probabilities)
        return FLOAT32_BYTES * (q + k + v + p)

    @cached_property
    def dynamic_shared(self) -> bool:
        """Tiles past the 48 KiB a block may declare statically live in
        dynamic shared memory, which the launch sizes and opts in to."""
        return self.shared_bytes > STATIC_SHARED_LIMIT_BYTES

    def grid(self, batch: int, heads: int, seq: int) -> tuple:
        """Blocks of a launch: one per query tile along x, per head along y, per
        batch along z."""
        return ((seq + self.block_rows - 1) // self.block_rows, heads, batch)


# Tile shapes that fit the 48 KiB of shared memory every CUDA GPU gives a
# block: they run anywhere, and on the simulator. Small ones keep the
# simulator fast (it runs one OS thread per CUDA thread).
PORTABLE_FLASH_CONFIGS = {
    16: FlashConfig(16, block_rows=32, block_cols=32, thread_rows=4, thread_cols=4,
                    steps_per_pass=4),
    32: FlashConfig(32, block_rows=32, block_cols=32, thread_rows=4, thread_cols=8,
                    steps_per_pass=4),
    64: FlashConfig(64, block_rows=64, block_cols=32, thread_rows=8, thread_cols=8),
    128: FlashConfig(128, block_rows=32, block_cols=16, thread_rows=4, thread_cols=8),
}
# steps_per_pass: the most that ptxas 13.5 compiles for sm_90 without spilling
# (tests/test_attention.py checks the tuned shapes): 4 where the kernel has
# registers to spare, 1 (as before the loops were written out) at the shapes
# already at 248-255 registers. On the H100 the d64 shape ran 5.1% faster at
# seq 1024 and 5.5% at 4096 with 4 steps than with 1 (0.514 against 0.542 ms,
# 7.52 against 7.95 ms; the tuning table of
# results/attention-h100-2026-11-26.json, read by steps_per_pass_times), and
# won the sweep.
# The tile shape flash_attention uses per head dimension, tuned on the H100
# (benchmarks/attention.py). For head_dim 64 a block of 128 query rows wins:
# its 67 KiB of tiles live in dynamic shared memory, which GPUs of compute
# capability 8.0 and later give a block (up to 99 to 227 KiB) but older ones
# (a T4: 64 KiB) cannot; there flash_attention falls back to the portable
# shape (see `_config_for`).
FLASH_CONFIGS = {
    **PORTABLE_FLASH_CONFIGS,
    64: FlashConfig(64, block_rows=128, block_cols=32, thread_rows=8, thread_cols=8,
                    steps_per_pass=4),
    # For head_dim 128, 128 query rows and 64 keys per step (164 KiB of tiles, 256
    # threads): 1.29-1.36x SDPA memory-efficient's time at seq 1024 and 4096, causal
    # and not, against 1.65-1.80x for the portable 32 x 16 (H100 probe of 30
    # shapes, benchmarks/NOTES.md).
    128: FlashConfig(128, block_rows=128, block_cols=64, thread_rows=4, thread_cols=8),
}
# Causal masks at short sequences want smaller query tiles: with 128 rows a
# causal head of 512 keys has four query tiles, the last doing four times the
# work of the first, too few blocks to even the work out over the GPU. Per head
# dim, (longest sequence, tile shape) pairs, shortest first; longer causal
# sequences use FLASH_CONFIGS. Chosen by benchmarks/attention.py's causal
# tuning on the H100 (results/attention-h100-2026-11-26.json, causal_tuning:
# ten shapes at seq 512, 1024 and 2048, B4 H16, d64, in turns with SDPA
# memory-efficient): 64 x 64 tiles were fastest at 512 and 1024 (0.97x and
# 1.01x SDPA's time, the kernel called directly), the tuned 128 x 32 with four
# steps a pass at 2048 (0.985x). No shape helped head_dim 128.
CAUSAL_FLASH_CONFIGS = {
    64: ((1024, FlashConfig(64, block_rows=64, block_cols=64, thread_rows=8, thread_cols=16)),
         (2048, FlashConfig(64, block_rows=128, block_cols=32, thread_rows=8, thread_cols=8,
                            steps_per_pass=4))),
}
# The tensor-core kernel (attention_tensor_cores: both tile products in
# 3xTF32 on mma.sync, the way PyTorch's memory-efficient attention computes in
# fp32), which flash_attention runs where the GPU has TF32 tensor cores
# (compute capability 8.0 and later). Tuned on the H100 by
# benchmarks/attention.py in turns with the CUDA-core shapes
# (results/attention-h100-2026-11-26.json, tuning and causal_tuning; the
# probes before it: benchmarks/NOTES.md). Every shape keeps K and V split
# into their TF32 parts in shared memory. For head_dim 64 the fastest was
# eight warps of 16 rows with registers capped at 128 (two blocks a
# multiprocessor; ptxas then spills 40-48 bytes a thread), and under a
# causal mask up to seq 512, four warps with 64 keys a step; head_dim 128
# takes eight warps, uncapped, at every length.
TENSOR_CORE_CONFIGS = {
    64: TensorCoreConfig(64, warps=8, block_cols=32, prefetch=True, split_kv=True,
                         max_registers=128),
    128: TensorCoreConfig(128, warps=8, block_cols=32, prefetch=True, split_kv=True),
}
CAUSAL_TENSOR_CORE_CONFIGS = {
    64: ((512, TensorCoreConfig(64, warps=4, block_cols=64, prefetch=False, split_kv=True)),),
}
# Let the compiler use approximate exp and division on the GPU (the simulator
# ignores it). Chosen by the H100 runs in benchmarks/attention.py.
FAST_MATH = False


def check_config(config: FlashConfig | TensorCoreConfig) -> FlashConfig | TensorCoreConfig:
    """Refuse a tile shape the kernel cannot run (ValueError naming the field)."""
    if isinstance(config, TensorCoreConfig):
        return check_tc_config(config)
    if config.block_rows % config.thread_rows:
        raise ValueError(f"thread_rows must divide block_rows ({config.block_rows}), "
                         f"got thread_rows={config.thread_rows}")
    for name, size in (("block_cols", config.block_cols), ("head_dim", config.head_dim)):
        if size % config.thread_cols:
            raise ValueError(f"thread_cols must divide {name} ({size}), "
                             f"got thread_cols={config.thread_cols}")
    if WARP_SIZE % config.thread_cols:
        # The threads that share a row must sit in one warp for the shuffles.
        raise ValueError(f"thread_cols must divide the warp size (32), got {config.thread_cols}")
    if config.threads % WARP_SIZE or config.threads > 1024:
        raise ValueError(f"threads per block must be a multiple of 32 up to 1024, "
                         f"got {config.threads}")
    for name, size in (("block_rows * head_dim", config.block_rows * config.head_dim),
                       ("block_cols * head_dim", config.block_cols * config.head_dim)):
        if size % config.threads:
            raise ValueError(f"the threads per block ({config.threads}) must divide "
                             f"{name} ({size}), so that each loads the same share")
    if config.threads % config.head_dim and config.head_dim % config.threads:
        raise ValueError(f"threads per block ({config.threads}) and head_dim "
                         f"({config.head_dim}) must divide one another")
    if config.shared_bytes > DYNAMIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"the tiles need {config.shared_bytes} bytes of shared memory; "
                         f"a block may have at most {DYNAMIC_SHARED_LIMIT_BYTES} (and "
                         f"{STATIC_SHARED_LIMIT_BYTES} without opting in to dynamic "
                         f"shared memory)")
    steps = config.steps_per_pass
    if steps not in (1, 2, 4) or config.block_cols % steps or config.head_dim % (4 * steps):
        raise ValueError(f"steps_per_pass must be 1, 2 or 4 and divide block_cols "
                         f"({config.block_cols}) and head_dim / 4 ({config.head_dim // 4}), "
                         f"got {steps!r}")
    if config.thread_rows % 4 or config.out_cols_per_thread % 4:
        # Reads of P and V come four floats at a time (128-bit loads).
        raise ValueError(f"thread_rows and head_dim / thread_cols must be multiples of 4 "
                         f"(the kernel reads P and V four floats at a time), got "
                         f"thread_rows={config.thread_rows}, head_dim / thread_cols="
                         f"{config.out_cols_per_thread}")
    return config


# -----------------------------------------------------------------------------
# Checking arguments


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


# -----------------------------------------------------------------------------
# The reference


def reference_attention(q, k, v, causal=False, scale=None, return_lse=False):
    """softmax(scale * q k^T) v in float64 numpy, with an optional causal mask.

    q: shape (..., seq, head_dim); k and v: one shape (..., key_seq, head_dim),
    q's but for the sequence length (cross-attention when key_seq differs);
    any real dtype (converted to float64). The causal mask is PyTorch's
    ``is_causal``: query i sees keys 0..i, aligned at the top left when the
    lengths differ. Returns a float64 array of q's shape, and with
    ``return_lse`` also the log-sum-exp of each row of scaled scores, of shape
    (..., seq).
    """
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    arrays = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        a = np.asarray(x)
        if a.dtype.kind not in "iuf":
            raise ValueError(f"{name} must hold real numbers, got dtype {a.dtype}")
        if a.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., seq, head_dim), "
                             f"got shape {a.shape}")
        arrays.append(a.astype(np.float64))
    q64, k64, v64 = arrays
    _check_cross_shapes(q64.shape, k64.shape, v64.shape)
    seq, head_dim = q64.shape[-2:]
    s = _check_scale(scale, head_dim)
    scores = s * (q64 @ np.swapaxes(k64, -1, -2))
    if causal:
        # Query i sees keys 0..i: everything above the diagonal is masked
        # (with more keys than queries, the diagonal starts at the top left).
        scores = np.where(np.tri(seq, k64.shape[-2], dtype=bool), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - row_max)
    row_sum = weights.sum(axis=-1, keepdims=True)
    out = (weights / row_sum) @ v64
    if return_lse:
        return out, (row_max + np.log(row_sum))[..., 0]
    return out


# -----------------------------------------------------------------------------
# The algorithm in numpy: online softmax, one tile step, the causal tile skip


def online_softmax(x, block=4):
    """softmax(x) along the last axis, reading x in blocks of ``block`` columns.

    One pass keeps a running maximum m and a running sum l = sum exp(x - m);
    when a block raises the maximum from m to m', the sum so far is multiplied
    by exp(m - m'), which makes it exactly the sum it would have been with m'
    from the start. A second pass writes exp(x - m) / l. Computed in float64.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have at least one element along its last axis, "
                         f"got shape {x.shape}")
    block = _count("block", block)
    row_max = np.full(x.shape[:-1], -np.inf)
    row_sum = np.zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block):
        chunk = x[..., start:start + block]
        new_max = np.maximum(row_max, chunk.max(axis=-1))
        shift = np.where(np.isneginf(new_max), 0.0, new_max)
        row_sum = row_sum * np.exp(row_max - shift) + np.exp(chunk - shift[..., None]).sum(axis=-1)
        row_max = new_max
    return np.exp(x - row_max[..., None]) / row_sum[..., None]


def online_softmax_step(row_max, row_sum, acc, scores, values):
    """One key/value tile of the tiled kernel, for a tile of query rows (numpy).

    row_max, row_sum: shape (rows,), the statistics so far (start at -inf, 0).
    acc: shape (rows, head_dim), the unnormalized output so far (starts at 0).
    scores: shape (rows, cols), this tile's scaled scores; -inf where masked.
    values: shape (cols, head_dim), this tile's rows of V.
    Returns the new (row_max, row_sum, acc); the output is acc / row_sum once
    every tile has been seen.
    """
    row_max, row_sum = np.asarray(row_max, float), np.asarray(row_sum, float)
    acc, scores, values = (np.asarray(a, float) for a in (acc, scores, values))
    if scores.ndim != 2 or values.ndim != 2 or acc.ndim != 2:
        raise ValueError("scores, values and acc must be 2-D (rows x cols, cols x head_dim, "
                         "rows x head_dim)")
    rows, cols = scores.shape
    if row_max.shape != (rows,) or row_sum.shape != (rows,):
        raise ValueError(f"row_max and row_sum must have shape ({rows},) to match scores, "
                         f"got {row_max.shape} and {row_sum.shape}")
    if values.shape[0] != cols or acc.shape != (rows, values.shape[1]):
        raise ValueError(f"values must have {cols} rows and acc shape ({rows}, head_dim), "
                         f"got values {values.shape} and acc {acc.shape}")
    new_max = np.maximum(row_max, scores.max(axis=1))
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # a row with nothing seen yet
    alpha = np.exp(row_max - shift)
    p = np.exp(scores - shift[:, None])
    return new_max, row_sum * alpha + p.sum(axis=1), acc * alpha[:, None] + p @ values


def causal_key_tiles(query_tile, block_rows, block_cols, seq):
    """How many key tiles query tile ``query_tile`` visits under a causal mask.

    Its last row is min((query_tile + 1) * block_rows, seq) - 1; key tiles that
    start after that row hold only future keys, so they are skipped.
    """
    block_rows, block_cols, seq = (_count(n, x) for n, x in
                                   (("block_rows", block_rows), ("block_cols", block_cols),
                                    ("seq", seq)))
    if isinstance(query_tile, (bool, np.bool_)) or not isinstance(query_tile, numbers.Integral) \
            or not 0 <= query_tile < -(-seq // block_rows):
        raise ValueError(f"query_tile must be a whole number in [0, {-(-seq // block_rows)}), "
                         f"got {query_tile!r}")
    last_row = min((query_tile + 1) * block_rows, seq) - 1
    return last_row // block_cols + 1


def tiled_attention(q, k, v, *, causal=False, scale=None, block_rows=64, block_cols=32,
                    return_lse=False):
    """The tiled kernel's algorithm in float64 numpy: query tiles outer, key
    tiles inner, ``online_softmax_step`` per tile, one division at the end.

    q, k, v: as ``reference_attention`` takes them. A model to read and to
    test against, not a fast path.
    """
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    block_rows, block_cols = _count("block_rows", block_rows), _count("block_cols", block_cols)
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    _check_cross_shapes(q64.shape, k64.shape, v64.shape)
    seq, head_dim = q64.shape[-2:]
    key_seq = k64.shape[-2]
    key_tiles = -(-key_seq // block_cols)
    s = _check_scale(scale, head_dim)
    out = np.empty_like(q64)
    lse = np.empty(q64.shape[:-1])
    for index in np.ndindex(q64.shape[:-2]):
        for qt in range(-(-seq // block_rows)):
            rows = np.arange(qt * block_rows, min((qt + 1) * block_rows, seq))
            row_max = np.full(len(rows), -np.inf)
            row_sum = np.zeros(len(rows))
            acc = np.zeros((len(rows), head_dim))
            n_tiles = (min(causal_key_tiles(qt, block_rows, block_cols, seq), key_tiles)
                       if causal else key_tiles)
            for kt in range(n_tiles):
                keys = np.arange(kt * block_cols, min((kt + 1) * block_cols, key_seq))
                scores = s * q64[index][rows] @ k64[index][keys].T
                if causal:
                    scores = np.where(keys[None, :] > rows[:, None], -np.inf, scores)
                row_max, row_sum, acc = online_softmax_step(row_max, row_sum, acc, scores,
                                                            v64[index][keys])
            out[index][rows] = acc / row_sum[:, None]
            lse[index][rows] = row_max + np.log(row_sum)
    return (out, lse) if return_lse else out


# -----------------------------------------------------------------------------
# The naive pipeline: scores, softmax and P V, with the score matrix in memory

NAIVE_TILE = 16  # threads per block side for the scores and P V kernels
NAIVE_ROWS_PER_BLOCK = 64  # threads per block for the softmax, one per row


@cuda.jit
def _scores_kernel(q, k, scores, scale, causal):
    # One thread per score: scores[b, h, i, j] = scale * q[b, h, i] . k[b, h, j].
    j, i = cuda.grid(2)
    bh = cuda.blockIdx.z
    heads = q.shape[1]
    b = bh // heads
    h = bh % heads
    if i >= q.shape[2] or j >= k.shape[2]:
        return
    if causal and j > i:
        scores[b, h, i, j] = -math.inf
        return
    total = 0.0
    for d in range(q.shape[3]):
        total += q[b, h, i, d] * k[b, h, j, d]
    scores[b, h, i, j] = scale * total


@cuda.jit
def _softmax_kernel(scores, lse):
    # One thread per row, in place: three passes (max, sum, normalize).
    i = cuda.grid(1)
    bh = cuda.blockIdx.y
    heads = scores.shape[1]
    b = bh // heads
    h = bh % heads
    keys = scores.shape[3]
    if i >= scores.shape[2]:
        return
    row_max = -math.inf
    for j in range(keys):
        row_max = max(row_max, scores[b, h, i, j])
    row_sum = 0.0
    for j in range(keys):
        e = math.exp(scores[b, h, i, j] - row_max)
        scores[b, h, i, j] = e
        row_sum += e
    for j in range(keys):
        scores[b, h, i, j] = scores[b, h, i, j] / row_sum
    lse[b, h, i] = row_max + math.log(row_sum)


@cuda.jit
def _pv_kernel(p, v, out):
    # One thread per output element: out[b, h, i, c] = sum_j p[b, h, i, j] v[b, h, j, c].
    c, i = cuda.grid(2)
    bh = cuda.blockIdx.z
    heads = v.shape[1]
    b = bh // heads
    h = bh % heads
    if i >= p.shape[2] or c >= v.shape[3]:
        return
    total = 0.0
    for j in range(v.shape[2]):
        total += p[b, h, i, j] * v[b, h, j, c]
    out[b, h, i, c] = total


def naive_attention(q, k, v, *, causal=False, scale=None, return_lse=False):
    """Attention as three kernels that write the (seq x key_seq) score matrix to memory.

    Same arguments, validation and return kinds as ``flash_attention``; any
    head_dim >= 1 is accepted. It needs batch * heads * seq * key_seq * 4 extra
    bytes of device memory for the scores (allocated through torch for torch
    inputs, so that torch's memory statistics see it).
    """
    kind, (batch, heads, seq, head_dim), key_seq = _check_qkv(q, k, v, head_dims=None)
    causal = _check_flag("causal", causal)
    return_lse = _check_flag("return_lse", return_lse)
    s = _check_scale(scale, head_dim)
    qd, kd, vd = (_to_kernel(x, kind) for x in (q, k, v))
    _, scores = _empty_like(kind, q, (batch, heads, seq, key_seq))
    lse, lse_d = _empty_like(kind, q, (batch, heads, seq))
    out, out_d = _empty_like(kind, q, (batch, heads, seq, head_dim))
    tiles = (seq + NAIVE_TILE - 1) // NAIVE_TILE
    key_tiles = (key_seq + NAIVE_TILE - 1) // NAIVE_TILE
    _scores_kernel[(key_tiles, tiles, batch * heads), (NAIVE_TILE, NAIVE_TILE)](
        qd, kd, scores, np.float32(s), causal)
    rows = (seq + NAIVE_ROWS_PER_BLOCK - 1) // NAIVE_ROWS_PER_BLOCK
    _softmax_kernel[(rows, batch * heads), NAIVE_ROWS_PER_BLOCK](scores, lse_d)
    col_tiles = (head_dim + NAIVE_TILE - 1) // NAIVE_TILE
    _pv_kernel[(col_tiles, tiles, batch * heads), (NAIVE_TILE, NAIVE_TILE)](scores, vd, out_d)
    del scores
    if return_lse:
        return _from_kernel(out, kind), _from_kernel(lse, kind)
    return _from_kernel(out, kind)


# -----------------------------------------------------------------------------
# The tiled kernel


@lru_cache(maxsize=None)
def _flash_kernel(config: FlashConfig, causal: bool, use_shuffles: bool,
                  fastmath: bool = False, io: str = "float32"):
    """Compile the tiled forward kernel for one tile shape.

    io: the element type of q, k, v and the output ("float32", or "float16"
    and "bfloat16" on a GPU, "float16" on the simulator). Whatever it is,
    the kernel converts each element to float32 as it loads it and does all
    its arithmetic in float32; only the output is rounded back to io.

    Every size the kernel's arrays need is a constant captured here: Numba
    (and its simulator) want shared and local array shapes known when the
    kernel is compiled. On a GPU the kernel is compiled at once, for raw
    float32 pointers (see `_launch_flash`); the simulator runs the same body
    on flat numpy arrays, which index the same way.
    """
    to_io = _IO_CONVERSIONS[io]()  # float32 -> the output's element type
    if isinstance(config, TensorCoreConfig):  # the tile products on tensor cores
        function = flash_forward_tc(config, causal, use_shuffles, to_io)
        if on_gpu():
            cap = {"max_registers": config.max_registers} if config.max_registers else {}
            return cuda.jit(_flash_signature(io), fastmath=fastmath, **cap)(function)
        return cuda.jit(function)
    check_config(config)
    D = config.head_dim
    BR, BC = config.block_rows, config.block_cols
    TM, TX = config.thread_rows, config.thread_cols
    NY = BR // TM  # row groups: a thread's rows are ty + NY * i
    CS = config.score_cols_per_thread  # score columns a thread owns
    CO = config.out_cols_per_thread  # output columns a thread owns
    GROUPS = CO // 4  # ... in groups of four neighbours
    THREADS = config.threads
    # Row lengths of the shared tiles, and the sizes of the flat arrays.
    Q_ROW, K_ROW, P_ROW = unsigned(config.q_row), unsigned(config.k_row), unsigned(config.p_row)
    D_U = unsigned(D)
    Q_SIZE = BR * config.q_row
    K_SIZE = BC * config.k_row
    V_SIZE = BC * D
    P_SIZE = BC * config.p_row
    # Where each tile starts when all four share one dynamic array.
    DYNAMIC = config.dynamic_shared
    K_BASE, V_BASE = Q_SIZE, Q_SIZE + K_SIZE
    P_BASE = V_BASE + V_SIZE
    P_END = P_BASE + P_SIZE
    # Shared reductions on the simulator: one slot per (row, thread of that row).
    RED_SIZE = BR * TX
    NEG_INF = np.float32(-np.inf)
    LN2 = np.float32(math.log(2.0))
    Q_LOADS = BR * D // THREADS  # elements of the Q tile each thread loads
    KV_LOADS = BC * D // THREADS  # ... and of each K and V tile
    ALIGN = SHARED_ALIGNMENT  # 16 bytes on a GPU, so that four floats load as one

    @cuda.jit(device=True, **_INLINE)
    def fetch_kv(k, v, k_next, v_next, base, valid, t):
        # This thread's share of a K and a V tile, from element `base` of the
        # flat arrays, into registers: consecutive threads read consecutive
        # elements (coalesced); elements from `valid` on (past the end of the
        # sequence) read as zero.
        for it in range(KV_LOADS):
            idx = t + it * THREADS
            k_next[it] = float32(0.0)
            v_next[it] = float32(0.0)
            if idx < valid:
                k_next[it] = float32(k[unsigned64(base + idx)])
                v_next[it] = float32(v[unsigned64(base + idx)])

    # The two products of each tile, S = Q K^T and O += P V, are loops over
    # the head dimension (four values a step) and over the tile's keys. Each
    # step's shared-memory addresses are a base plus constants; STEPS_PER_PASS
    # steps are written out per pass, so that only the base advances, once a
    # pass (a counter, a compare and a branch per pass instead of per step;
    # the same change took the backward kernels' outer-product loops from 63%
    # FFMA to 83%, see attention_backward.py).
    STEPS_PER_PASS = config.steps_per_pass
    HEAD_STEP, P_STEP, V_STEP = unsigned(4), P_ROW, D_U  # one step along each tile

    @cuda.jit(device=True, **_INLINE)
    def score_step(q_tile, k_tile, s, k4, k_at, q_at):
        # Four head-dim values of this thread's CS keys (from k_at, one key
        # K_ROW apart) and of its TM query rows (from q_at, NY rows apart):
        # s[i, jj] += q[i] . k[jj] over those four.
        for jj in range(CS):
            x0, x1, x2, x3 = load_float4_flat(k_tile, k_at + unsigned(TX * jj) * K_ROW)
            k4[jj, 0] = x0
            k4[jj, 1] = x1
            k4[jj, 2] = x2
            k4[jj, 3] = x3
        for i in range(TM):
            a0, a1, a2, a3 = load_float4_flat(q_tile, q_at + unsigned(NY * i) * Q_ROW)
            for jj in range(CS):
                s[i, jj] += a0 * k4[jj, 0]
                s[i, jj] += a1 * k4[jj, 1]
                s[i, jj] += a2 * k4[jj, 2]
                s[i, jj] += a3 * k4[jj, 3]

    @cuda.jit(device=True, **_INLINE)
    def score_steps(q_tile, k_tile, s, k4, k_at, q_at):
        score_step(q_tile, k_tile, s, k4, k_at, q_at)
        if STEPS_PER_PASS >= 2:
            score_step(q_tile, k_tile, s, k4, k_at + HEAD_STEP, q_at + HEAD_STEP)
        if STEPS_PER_PASS == 4:
            score_step(q_tile, k_tile, s, k4, k_at + unsigned(2) * HEAD_STEP,
                       q_at + unsigned(2) * HEAD_STEP)
            score_step(q_tile, k_tile, s, k4, k_at + unsigned(3) * HEAD_STEP,
                       q_at + unsigned(3) * HEAD_STEP)

    @cuda.jit(device=True, **_INLINE)
    def value_step(p_tile, v_tile, acc, p_rows, p_at, v_at):
        # One key's share of O += P V: its probabilities for this thread's TM
        # rows (neighbours in P^T, from p_at) times this thread's columns of
        # its row of V (groups of four, TX * 4 apart, from v_at).
        for i4 in range(TM // 4):
            x0, x1, x2, x3 = load_float4_flat(p_tile, p_at + unsigned(4 * i4))
            p_rows[4 * i4] = x0
            p_rows[4 * i4 + 1] = x1
            p_rows[4 * i4 + 2] = x2
            p_rows[4 * i4 + 3] = x3
        for g in range(GROUPS):
            v0, v1, v2, v3 = load_float4_flat(v_tile, v_at + unsigned(g * TX * 4))
            for i in range(TM):
                acc[i, 4 * g] += p_rows[i] * v0
                acc[i, 4 * g + 1] += p_rows[i] * v1
                acc[i, 4 * g + 2] += p_rows[i] * v2
                acc[i, 4 * g + 3] += p_rows[i] * v3

    @cuda.jit(device=True, **_INLINE)
    def value_steps(p_tile, v_tile, acc, p_rows, p_at, v_at):
        value_step(p_tile, v_tile, acc, p_rows, p_at, v_at)
        if STEPS_PER_PASS >= 2:
            value_step(p_tile, v_tile, acc, p_rows, p_at + P_STEP, v_at + V_STEP)
        if STEPS_PER_PASS == 4:
            value_step(p_tile, v_tile, acc, p_rows, p_at + unsigned(2) * P_STEP,
                       v_at + unsigned(2) * V_STEP)
            value_step(p_tile, v_tile, acc, p_rows, p_at + unsigned(3) * P_STEP,
                       v_at + unsigned(3) * V_STEP)

    def flash_forward(q, k, v, out, lse, seq, key_seq, heads, scale):
        # q and out are the (batch, heads, seq, head_dim) arrays, k and v the
        # (batch, heads, key_seq, head_dim) ones, as flat float32 memory (the
        # caller checked that they are contiguous), so that an element's
        # address is one addition away: query rows r .. r + n of one head are
        # the contiguous elements (bh * seq + r) * D onwards, key rows
        # (bh * key_seq + r) * D onwards.
        t = cuda.threadIdx.x
        tx = t % TX  # which slice of columns
        ty = t // TX  # which group of TM rows
        # This thread's query rows are ty, ty + NY, ty + 2 NY, ... (NY row
        # groups): the row groups of one warp then read neighbouring rows of
        # Q, which start in different banks (a thread's rows next to each
        # other would start TM * Q_ROW floats apart: the same bank, since
        # both are multiples of four, a bank conflict on every load). Its
        # probabilities go to TM neighbouring slots row0 .. row0 + TM of P^T.
        row0 = ty * TM
        # Under a causal mask the last query tiles do the most work (they see the
        # most keys). Blocks start roughly in the order of blockIdx.x, so the
        # causal kernel takes the tiles last to first: the heavy ones start
        # early and the light ones fill the gaps at the end, instead of a few
        # heavy blocks running on alone after the rest are done.
        if causal:
            q_start = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * BR
        else:
            q_start = cuda.blockIdx.x * BR
        bh = cuda.blockIdx.z * heads + cuda.blockIdx.y  # which (batch, head)
        head_base = bh * seq * D  # this head's queries and outputs
        kv_base = bh * key_seq * D  # ... and its keys and values
        # Element t + it * THREADS of a (rows x D) tile is (row, col) =
        # (t // D + it * THREADS // D, t % D + it * THREADS % D): the parts
        # that depend on `it` are constants once the loops are unrolled.
        t_row = unsigned(t // D)
        t_col = unsigned(t % D)
        # Unsigned copies of the indices the inner loops use (see `unsigned`).
        tx_u = unsigned(tx)
        row0_u = unsigned(row0)
        ty_u = unsigned(ty)

        # The tiles, flat and 16-byte aligned, so that four neighbours in a row
        # are one 128-bit load (load_float4_flat: ld.shared.v4.f32). Each
        # shared array on its own line (the simulator aliases two on one).
        if DYNAMIC:
            # Past 48 KiB: one dynamic array, sized by the launch, carved into
            # the four tiles (every offset is a multiple of four floats).
            tiles = cuda.shared.array(0, float32, alignment=ALIGN)
            q_tile = tiles[:K_BASE]
            k_tile = tiles[K_BASE:V_BASE]
            v_tile = tiles[V_BASE:P_BASE]
            p_tile = tiles[P_BASE:P_END]
        else:
            q_tile = cuda.shared.array(Q_SIZE, float32, alignment=ALIGN)  # Q * scale * log2(e)
            k_tile = cuda.shared.array(K_SIZE, float32, alignment=ALIGN)
            v_tile = cuda.shared.array(V_SIZE, float32, alignment=ALIGN)
            p_tile = cuda.shared.array(P_SIZE, float32, alignment=ALIGN)  # P^T: [j, r] = P[r, j]
        reduce_buf = cuda.shared.array(RED_SIZE, float32)

        # The query tile, loaded once: consecutive threads read consecutive
        # elements (coalesced), and rows past the end read as zero. Loops with
        # a constant trip count are unrolled, so all the loads are in flight
        # before the first is needed.
        q_base = head_base + q_start * D
        q_valid = (seq - q_start) * D  # elements of this tile that exist
        for it in range(Q_LOADS):
            idx = t + it * THREADS
            value = float32(0.0)
            if idx < q_valid:
                value = float32(q[unsigned64(q_base + idx)]) * scale
            r = t_row + unsigned((it * THREADS) // D)
            q_tile[r * Q_ROW + t_col + unsigned((it * THREADS) % D)] = value

        # Running statistics and the output accumulator live in registers.
        row_max = cuda.local.array(TM, float32)
        row_sum = cuda.local.array(TM, float32)  # this thread's share of the sum
        acc = cuda.local.array((TM, CO), float32)
        s = cuda.local.array((TM, CS), float32)
        k4 = cuda.local.array((CS, 4), float32)  # four head-dim values of each owned key
        p_rows = cuda.local.array(TM, float32)  # P[this thread's rows, j]
        tile_max = cuda.local.array(TM, float32)
        shift = cuda.local.array(TM, float32)
        alpha = cuda.local.array(TM, float32)
        k_next = cuda.local.array(KV_LOADS, float32)  # the next K and V tile, in flight
        v_next = cuda.local.array(KV_LOADS, float32)
        for i in range(TM):
            row_max[i] = NEG_INF
            row_sum[i] = 0.0
            for c in range(CO):
                acc[i, c] = 0.0

        n_tiles = (key_seq + BC - 1) // BC
        if causal:
            # Key tiles that start after this block's last query row are fully
            # masked: skip them. About half the tiles, for long sequences.
            last_row = min(q_start + BR, seq) - 1
            n_tiles = min(n_tiles, last_row // BC + 1)

        # The first K and V tile goes to registers; the loop below stores each
        # tile to shared memory and then starts reading the next one, which
        # arrives while the current one is being used.
        fetch_kv(k, v, k_next, v_next, kv_base, key_seq * D, t)

        for kt in range(n_tiles):
            k_start = kt * BC
            cuda.syncthreads()  # everyone is done with the previous tiles
            for it in range(KV_LOADS):
                j = t_row + unsigned((it * THREADS) // D)
                c = t_col + unsigned((it * THREADS) % D)
                k_tile[j * K_ROW + c] = k_next[it]
                v_tile[j * D_U + c] = v_next[it]
            cuda.syncthreads()
            if kt + 1 < n_tiles:
                fetch_kv(k, v, k_next, v_next, kv_base + (k_start + BC) * D,
                         (key_seq - k_start - BC) * D, t)

            # S = (scale Q) K^T for this thread's TM rows x CS columns, four
            # head-dim values at a time: one 128-bit load brings four values of
            # a key (or of a query row), and the FMAs run in the same order as
            # one value at a time would. A quarter-warp's key loads fall in
            # different banks (K_ROW is 4 more than a multiple of 32, so
            # neighbouring keys start 4 banks apart); all the threads of a row
            # group read the same query values (a broadcast), and the row
            # groups of one warp read neighbouring rows (see row0 above).
            for i in range(TM):
                for jj in range(CS):
                    s[i, jj] = 0.0
            # STEPS_PER_PASS steps of four head-dim values a pass (see score_step).
            k_at = tx_u * K_ROW
            q_at = ty_u * Q_ROW
            for _ in range(D // (4 * STEPS_PER_PASS)):
                score_steps(q_tile, k_tile, s, k4, k_at, q_at)
                k_at += unsigned(4 * STEPS_PER_PASS)
                q_at += unsigned(4 * STEPS_PER_PASS)

            # The online softmax, in short loops over this thread's rows and
            # columns (short loops with constant bounds are unrolled by the
            # compiler, which keeps the small arrays in registers).
            # 1. Mask keys past the end and, when causal, keys after the query.
            #    Only the last tile and (causal) the tiles that cross the
            #    diagonal hold such keys; the others skip this step.
            if k_start + BC > key_seq or (causal and k_start + BC - 1 > q_start):
                for i in range(TM):
                    row = q_start + ty + NY * i
                    for jj in range(CS):
                        key = k_start + tx + TX * jj
                        if key >= key_seq or (causal and key > row):
                            s[i, jj] = NEG_INF
            # 2. This tile's maximum of each row, first over this thread's columns...
            for i in range(TM):
                tile_max[i] = s[i, 0]
                for jj in range(1, CS):
                    tile_max[i] = max(tile_max[i], s[i, jj])
            # ...then over the TX threads that share the row.
            if use_shuffles:
                offset = 1
                while offset < TX:
                    for i in range(TM):
                        tile_max[i] = max(tile_max[i],
                                          cuda.shfl_xor_sync(0xFFFFFFFF, tile_max[i], offset))
                    offset *= 2
            else:
                for i in range(TM):
                    reduce_buf[(row0 + i) * TX + tx] = tile_max[i]
                cuda.syncthreads()
                for i in range(TM):
                    for other in range(TX):
                        tile_max[i] = max(tile_max[i], reduce_buf[(row0 + i) * TX + other])
                cuda.syncthreads()
            # 3. The new running maximum, and the factor alpha = exp(old - new)
            #    that rescales what was summed so far. A row with nothing visible
            #    yet keeps max -inf; subtracting 0 then avoids exp(-inf + inf) = NaN.
            for i in range(TM):
                new_max = max(row_max[i], tile_max[i])
                shift[i] = new_max if new_max != NEG_INF else float32(0.0)
                alpha[i] = math.exp2(row_max[i] - shift[i])
                row_max[i] = new_max
            # 4. P = exp(S - max) into shared memory; rescale the sum and the output.
            for i in range(TM):
                tile_sum = float32(0.0)
                for jj in range(CS):
                    p = math.exp2(s[i, jj] - shift[i])
                    tile_sum += p
                    p_tile[(tx_u + unsigned(TX * jj)) * P_ROW + row0_u + unsigned(i)] = p
                row_sum[i] = row_sum[i] * alpha[i] + tile_sum
            for i in range(TM):
                for c in range(CO):
                    acc[i, c] *= alpha[i]
            cuda.syncthreads()  # P is complete

            # O += P V for this thread's TM rows x CO columns. The thread's
            # columns come in groups of four neighbours, TX * 4 apart, so
            # that a warp's 128-bit loads of a row of V are contiguous (no
            # bank conflicts), and its TM probabilities of key j are
            # neighbours in P^T (TM / 4 broadcast loads).
            p_at = row0_u
            v_at = tx_u * unsigned(4)
            for _ in range(BC // STEPS_PER_PASS):
                value_steps(p_tile, v_tile, acc, p_rows, p_at, v_at)
                p_at += unsigned(STEPS_PER_PASS) * P_ROW
                v_at += unsigned(STEPS_PER_PASS) * D_U

        # The one division at the end, by the sum over all the row's threads.
        if use_shuffles:
            offset = 1
            while offset < TX:
                for i in range(TM):
                    row_sum[i] += cuda.shfl_xor_sync(0xFFFFFFFF, row_sum[i], offset)
                offset *= 2
        else:
            cuda.syncthreads()
            for i in range(TM):
                reduce_buf[(row0 + i) * TX + tx] = row_sum[i]
            cuda.syncthreads()
            for i in range(TM):
                row_sum[i] = float32(0.0)
                for other in range(TX):
                    row_sum[i] += reduce_buf[(row0 + i) * TX + other]
        for i in range(TM):
            row = q_start + ty + NY * i
            if row < seq:
                inverse = float32(1.0) / row_sum[i]
                out_base = head_base + row * D + tx * 4
                for g in range(GROUPS):
                    for x in range(4):
                        out[unsigned64(out_base + g * TX * 4 + x)] = to_io(
                            acc[i, 4 * g + x] * inverse)
                if tx == 0:  # back from base 2 to natural logarithms
                    lse[unsigned64(bh * seq + row)] = (row_max[i] + math.log2(row_sum[i])) * LN2

    if on_gpu():
        return cuda.jit(_flash_signature(io), fastmath=fastmath)(flash_forward)
    return cuda.jit(flash_forward)


# The tiled kernel's parameters on a GPU: q, k, v, out and lse as raw float32
# pointers, then seq, key_seq, heads and the scale. A launch then costs little Python:
# Numba passes a pointer as one integer, where an array argument is first
# wrapped in a device array (tens of microseconds for each torch tensor,
# which showed in the timings at short sequences).
_FLOAT_POINTER = types.CPointer(float32)
FLASH_SIGNATURE = types.void(*(_FLOAT_POINTER,) * 5, int32, int32, int32, float32)

# Element types of q, k, v and the output besides float32: the kernel reads
# them, converts to float32 and rounds its output back (the log-sum-exp stays
# float32). bfloat16 has no numpy dtype, so it comes only as CUDA torch tensors.
HALF_DTYPES = ("float16", "bfloat16")
FLASH_DTYPES = ("float32",) + HALF_DTYPES


def _bfloat16():
    from numba.cuda.bf16 import bfloat16, float2bfloat16

    return bfloat16, float2bfloat16


# The conversion from float32 to each element type, found when a kernel is built
# (numba-cuda's bfloat16 module is imported only for a bfloat16 kernel).
_IO_CONVERSIONS = {"float32": lambda: float32, "float16": lambda: float16,
                   "bfloat16": lambda: _bfloat16()[1]}


def _flash_signature(io: str):
    """FLASH_SIGNATURE with q, k, v and out of element type io."""
    element = {"float32": float32, "float16": float16}.get(io) or _bfloat16()[0]
    pointer = types.CPointer(element)
    return types.void(pointer, pointer, pointer, pointer, _FLOAT_POINTER, int32, int32, int32,
                      float32)


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
    tensors: numpy has no bfloat16). Half-precision inputs are converted to
    float32 as they are loaded; the arithmetic is float32 and the output is
    rounded back to the inputs' type.
    causal: mask keys after each query (and skip key tiles that are fully
    masked): query i sees keys 0..i, PyTorch's ``is_causal``, whose diagonal
    starts at the top left when key_seq differs from seq.
    scale: the factor on the scores; None means 1 / sqrt(head_dim).
    return_lse: also return the log-sum-exp of each row of scaled scores,
    shape (batch, heads, seq), which a backward pass would need.
    tensor_cores: run both tile products on the tensor cores in 3xTF32 (about
    fp32's accuracy; ``attention_tensor_cores``) rather than as fp32 FMAs on
    the CUDA cores. None (the default): on a GPU with TF32 tensor cores
    (compute capability 8.0 on), for head dims 64 and 128; on CUDA cores
    elsewhere, the simulator included. True asks for them wherever the head
    dim has a tensor-core shape (on the simulator too: slow, for small
    inputs); a GPU without them still gets the CUDA-core kernel.

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
    config = _config_for(head_dim, device_id, causal=causal, seq=int(q.shape[2]),
                         tensor_cores=tensor_cores)
    out, lse = _run_flash(kind, q, k, v, config, causal, s, FAST_MATH, device_id,
                          io=_dtype_name(q, kind))
    return (out, lse) if return_lse else out


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


# -----------------------------------------------------------------------------
# Counting work and traffic


def attention_flops(batch, heads, seq, head_dim, causal=False) -> float:
    """Floating-point operations of the forward pass: 4 * batch * heads * seq^2 * head_dim.

    Two matrix products (Q K^T and P V), each 2 * seq^2 * head_dim per head
    (a multiply and an add). The causal mask halves it, the usual convention
    for reporting FLOP/s (Dao 2023). The softmax's exponentials are not counted.
    """
    batch, heads, seq, head_dim = (_count(n, x) for n, x in
                                   (("batch", batch), ("heads", heads), ("seq", seq),
                                    ("head_dim", head_dim)))
    causal = _check_flag("causal", causal)
    flops = 4.0 * batch * heads * seq * seq * head_dim
    return flops / 2 if causal else flops


def naive_hbm_bytes(batch, heads, seq, head_dim, dtype_bytes=FLOAT32_BYTES) -> int:
    """Device-memory bytes the three-kernel pipeline must move, at the least.

    Scores: read Q and K, write S (seq^2). Softmax: read S, write P. P V: read
    P and V, write O. Per head that is 4 seq head_dim + 4 seq^2 elements; each
    input read once (caches may re-read more, never less).
    """
    batch, heads, seq, head_dim, dtype_bytes = (_count(n, x) for n, x in
                                                (("batch", batch), ("heads", heads),
                                                 ("seq", seq), ("head_dim", head_dim),
                                                 ("dtype_bytes", dtype_bytes)))
    per_head = 4 * seq * head_dim + 4 * seq * seq
    return batch * heads * per_head * dtype_bytes


def flash_hbm_bytes(batch, heads, seq, head_dim, block_rows=None,
                    dtype_bytes=FLOAT32_BYTES, causal=False, kv_cached=False) -> int:
    """Device-memory bytes of the tiled kernel.

    Q is read once and O written once (plus 4 bytes of log-sum-exp a row).
    With ``kv_cached=False`` every block of ``block_rows`` query rows reads all
    of K and V again (only the tiles it does not skip when causal): what the
    kernel asks of the memory system, and what reaches HBM when no cache
    helps. With ``kv_cached=True`` K and V are read from HBM once, as when the
    L2 cache holds a head's K and V while its query tiles run (a few MB per
    head, against the H100's 50 MB of L2): the compulsory traffic.
    """
    batch, heads, seq, head_dim, dtype_bytes = (_count(n, x) for n, x in
                                                (("batch", batch), ("heads", heads),
                                                 ("seq", seq), ("head_dim", head_dim),
                                                 ("dtype_bytes", dtype_bytes)))
    causal = _check_flag("causal", causal)
    kv_cached = _check_flag("kv_cached", kv_cached)
    if block_rows is None:
        block_rows = FLASH_CONFIGS[head_dim].block_rows if head_dim in FLASH_CONFIGS else 64
    block_rows = _count("block_rows", block_rows)
    query_tiles = -(-seq // block_rows)
    if kv_cached:
        kv_rows = seq
    elif causal:
        # Query tile t sees keys 0 .. (t + 1) * block_rows - 1 (at most seq).
        kv_rows = sum(min((t + 1) * block_rows, seq) for t in range(query_tiles))
    else:
        kv_rows = query_tiles * seq
    elements = 2 * seq * head_dim + 2 * kv_rows * head_dim
    return batch * heads * (elements * dtype_bytes + seq * FLOAT32_BYTES)


def flash_shared_bytes(batch, heads, seq, head_dim, config: FlashConfig | None = None) -> int:
    """Shared-memory (SRAM) bytes the tiled kernel reads and writes, counted
    from its loops (non-causal): per key tile, the K and V tiles are written
    once; each thread reads head_dim * (TM + CS) values for its scores, writes
    TM * CS probabilities, and reads block_cols * (TM + CO) values for P V."""
    batch, heads, seq, head_dim = (_count(n, x) for n, x in
                                   (("batch", batch), ("heads", heads), ("seq", seq),
                                    ("head_dim", head_dim)))
    if config is None:
        if head_dim not in FLASH_CONFIGS:
            raise ValueError(f"head_dim must be one of {', '.join(map(str, SUPPORTED_HEAD_DIMS))}"
                             f" (or pass a config), got {head_dim}")
        config = FLASH_CONFIGS[head_dim]
    c = check_config(config)
    query_tiles = -(-seq // c.block_rows)
    key_tiles = -(-seq // c.block_cols)
    per_thread = (head_dim * (c.thread_rows + c.score_cols_per_thread)
                  + c.thread_rows * c.score_cols_per_thread
                  + c.block_cols * (c.thread_rows + c.out_cols_per_thread))
    per_tile = 2 * c.block_cols * head_dim + c.threads * per_thread
    q_load = c.block_rows * head_dim
    elements = query_tiles * (q_load + key_tiles * per_tile)
    return batch * heads * elements * FLOAT32_BYTES


def extra_memory_bytes(batch, heads, seq, variant) -> int:
    """Device memory beyond Q, K, V and O: the score matrix for the naive
    pipeline (batch * heads * seq^2 float32), the log-sum-exp for flash."""
    batch, heads, seq = (_count(n, x) for n, x in
                         (("batch", batch), ("heads", heads), ("seq", seq)))
    if variant == "naive":
        return batch * heads * seq * seq * FLOAT32_BYTES
    if variant == "flash":
        return batch * heads * seq * FLOAT32_BYTES
    raise ValueError(f"variant must be 'naive' or 'flash', got {variant!r}")


# -----------------------------------------------------------------------------
# Benchmark results and figures

VARIANT_LABELS = {
    "flash": "ours: tiled online softmax (Numba, fp32; tensor cores, 3xTF32)",
    "flash_cuda_cores": "ours on the CUDA cores (Numba, fp32 FMA)",
    "naive_numba": "naive, 3 Numba kernels (fp32)",
    "torch_naive": "PyTorch softmax(QKᵀ)V (fp32)",
    "sdpa_math": "SDPA math backend (fp32)",
    "sdpa_efficient": "SDPA memory-efficient (fp32)",
    "sdpa_flash_fp16": "SDPA flash backend (fp16, context)",
}
VARIANT_COLORS = {"flash": "C3", "flash_cuda_cores": "C5", "naive_numba": "C0", "torch_naive": "C1", "sdpa_math": "C2",
                  "sdpa_efficient": "C4", "sdpa_flash_fp16": "C7"}
_RESULT_FIELDS = ("variant", "batch", "heads", "seq", "head_dim", "causal", "ms", "tflops",
                  "peak_mem_bytes", "max_abs_err", "mean_rel_err")


def find_benchmark_results(directory=None):
    """Paths of the attention results files, newest date last (empty if none)."""
    return results_files.find_results("attention", directory)


def load_benchmark(path):
    """Read one attention results file and check that it has the expected shape."""
    data = results_files.load_results("attention", path)
    for row in data["results"]:
        missing = [f for f in _RESULT_FIELDS if f not in row]
        if missing:
            raise ValueError(f"{path}: a result row lacks {missing}")
    return data


def _rows(results, variant, causal, head_dim=64):
    return sorted((r for r in results if r["variant"] == variant and r["causal"] == causal
                   and r.get("head_dim", 64) == head_dim), key=lambda r: r["seq"])


def first_oom_seq(results, variant, causal=False, head_dim=64):
    """The shortest sequence at which ``variant`` ran out of memory (None if never)."""
    rows = [r for r in _rows(results, variant, causal, head_dim) if r.get("status") == "oom"]
    return rows[0]["seq"] if rows else None


def plot_benchmark(results, metric="ms", causal=False, ax=None, head_dim=64):
    """One line per variant against the sequence length, at one head dimension;
    an x marks where a variant ran out of memory. metric: 'ms', 'tflops' or
    'peak_mem_bytes'."""
    import matplotlib.pyplot as plt

    labels = {"ms": "time per call (ms)", "tflops": "TFLOP/s",
              "peak_mem_bytes": "peak extra memory (GB)"}
    if metric not in labels:
        raise ValueError(f"metric must be one of {', '.join(labels)}, got {metric!r}")
    causal = _check_flag("causal", causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    scale = 1e-9 if metric == "peak_mem_bytes" else 1.0
    for variant, label in VARIANT_LABELS.items():
        rows = _rows(results, variant, causal, head_dim)
        done = [r for r in rows if r.get(metric) is not None]
        if not done:
            continue
        style = dict(lw=2.5 if variant == "flash" else 1.3, color=VARIANT_COLORS[variant])
        (line,) = ax.plot([r["seq"] for r in done], [r[metric] * scale for r in done],
                          marker="o", ms=4, label=label, **style)
        oom = first_oom_seq(results, variant, causal, head_dim)
        if oom is not None:
            ax.plot([oom], [done[-1][metric] * scale], marker="x", ms=10, mew=2.5,
                    color=line.get_color(), ls="none")
            ax.annotate("out of memory", (oom, done[-1][metric] * scale), fontsize=7,
                        xytext=(4, 4), textcoords="offset points", color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(labels[metric])
    ax.grid(True, which="both", alpha=0.3)
    return ax


def plot_tiling(seq=256, block_rows=64, block_cols=32, causal=True, query_tile=2, ax=None):
    """The score matrix cut into tiles: one block of threads owns a row of
    tiles (query_tile) and sweeps it left to right; with causal masking the
    tiles above the diagonal are never visited."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    seq, block_rows, block_cols = (_count(n, x) for n, x in
                                   (("seq", seq), ("block_rows", block_rows),
                                    ("block_cols", block_cols)))
    causal = _check_flag("causal", causal)
    q_tiles, k_tiles = -(-seq // block_rows), -(-seq // block_cols)
    if query_tile is not None and not 0 <= query_tile < q_tiles:
        raise ValueError(f"query_tile must be in [0, {q_tiles}) or None, got {query_tile!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    for qt in range(q_tiles):
        visited = causal_key_tiles(qt, block_rows, block_cols, seq) if causal else k_tiles
        for kt in range(k_tiles):
            x, y = kt * block_cols, qt * block_rows
            w, h = min(block_cols, seq - x), min(block_rows, seq - y)
            if kt >= visited:
                color = "#eeeeee"  # skipped: fully masked
            elif qt == query_tile:
                color = "#d62728" if kt == 1 else "#f4a6a6"
            else:
                color = "#9ecae1"
            ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="white", lw=1.5))
    if causal:
        ax.plot([0, seq], [0, seq], color="black", lw=1, ls="--")
    ax.set_xlim(0, seq)
    ax.set_ylim(seq, 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"keys j (tiles of Bc = {block_cols})")
    ax.set_ylabel(f"queries i (tiles of Br = {block_rows})")
    ax.set_title("score matrix S = QKᵀ, by tiles" + (" (causal)" if causal else ""))
    return ax


def plot_traffic(batch=4, heads=16, head_dim=64, seqs=(512, 1024, 2048, 4096, 8192, 16384),
                 ax=None):
    """Device-memory bytes of the naive pipeline and of the tiled kernel
    (re-reading K and V per query tile, and with K and V read once)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4))
    seqs = [_count("seqs", n) for n in seqs]
    curves = {
        "naive: writes and re-reads S and P": [naive_hbm_bytes(batch, heads, n, head_dim)
                                               for n in seqs],
        "tiled: K, V re-read per query tile": [flash_hbm_bytes(batch, heads, n, head_dim)
                                               for n in seqs],
        "tiled: K, V read once (held in L2)": [flash_hbm_bytes(batch, heads, n, head_dim,
                                                               kv_cached=True) for n in seqs],
    }
    for (label, values), color in zip(curves.items(), ("C0", "C3", "C2")):
        ax.plot(seqs, [v / 1e9 for v in values], marker="o", ms=4, label=label, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("bytes to and from device memory (GB)")
    ax.set_title(f"B = {batch}, H = {heads}, d = {head_dim}, fp32")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# The configuration of the chapter's table of measurements: batch 4, 16 heads,
# seq 1024, head_dim 64.
SOURCE_CONFIG = dict(batch=4, heads=16, seq=1024, head_dim=64)

NO_RESULTS_MESSAGE = (
    "No GPU results are committed yet. On a machine with an NVIDIA GPU, run "
    "`PYTHONPATH=src python benchmarks/attention.py`; it writes "
    "`benchmarks/results/attention-<gpu>-<date>.json`, and this section then "
    "shows its tables and figures.")


def _fmt(value, spec, missing="–"):
    return missing if value is None else format(value, spec)


def _ratio_span(results, variant, peer, causal, head_dim=64):
    """(least, greatest) of variant's time over peer's, over the sequence
    lengths where both ran at one head dimension, with the least and greatest
    of those lengths; None if they never both ran."""
    ours = {r["seq"]: r["ms"] for r in _rows(results, variant, causal, head_dim) if r["ms"]}
    theirs = {r["seq"]: r["ms"] for r in _rows(results, peer, causal, head_dim) if r["ms"]}
    both = sorted(set(ours) & set(theirs))
    if not both:
        return None
    ratios = [ours[n] / theirs[n] for n in both]
    return min(ratios), max(ratios), both[0], both[-1]


def benchmark_markdown(data, causal=False):
    """Markdown for the chapter: the measured table at `SOURCE_CONFIG`, the validation summary and where the naive versions ran out
    of memory, all read from one results file (see ``load_benchmark``)."""
    causal = _check_flag("causal", causal)
    results = data["results"]
    at = [r for r in results if r["causal"] == causal and all(
        r[k] == v for k, v in SOURCE_CONFIG.items())]
    by_variant = {r["variant"]: r for r in at}
    naive = by_variant.get("torch_naive", {}).get("ms")
    lines = [f"Measured on an **{data['gpu']}** on {data['date']} "
             f"(numba-cuda {data['versions'].get('numba_cuda')}, "
             f"torch {data['versions'].get('torch')}); {data.get('method', '')}.", "",
             "| variant | time (ms) | TFLOP/s | peak extra memory (MB) | max abs error | "
             "speed-up over PyTorch naive |",
             "|---|---|---|---|---|---|"]
    for variant, label in VARIANT_LABELS.items():
        r = by_variant.get(variant)
        if r is None:
            continue
        if r["ms"] is None:
            lines.append(f"| {label} | {r.get('status', 'not run')} | | | | |")
            continue
        speedup = f"{naive / r['ms']:.2f}x" if naive else "–"
        mem = None if r["peak_mem_bytes"] is None else r["peak_mem_bytes"] / 1e6
        lines.append(f"| {label} | {r['ms']:.3f} | {_fmt(r['tflops'], '.1f')} | "
                     f"{_fmt(mem, '.0f')} | {_fmt(r['max_abs_err'], '.1e')} | {speedup} |")
    ours, efficient = by_variant.get("flash", {}), by_variant.get("sdpa_efficient", {})
    if ours.get("ms") and ours.get("kernel_ms"):
        lines += ["", f"Of our {ours['ms']:.3f} ms, the kernel itself takes "
                  f"{ours['kernel_ms']:.3f} ms (launched with its arguments prepared once); "
                  f"the rest is the Python work of a `flash_attention` call: checking the "
                  f"inputs, allocating the outputs and launching."]
    if ours.get("ms") and efficient.get("ms"):
        ratio = ours["ms"] / efficient["ms"]
        verdict = (" (the same, to two digits)." if f"{ratio:.2f}" == "1.00" else
                   " (faster)." if ratio < 1 else " (slower).")
        lines += ["", f"Against PyTorch's memory-efficient backend, the fp32 peer, ours takes "
                  f"{ratio:.2f} times its time" + verdict]
    spans = [_ratio_span(results, "flash", "sdpa_efficient", mask) for mask in (False, True)]
    if all(spans):
        (low, high, n_low, n_high), (c_low, c_high, _, _) = spans
        lines += ["", f"Over N = {n_low:,} to {n_high:,} ours takes {low:.2f} to {high:.2f} "
                  f"times the memory-efficient backend's time without a mask, and "
                  f"{c_low:.2f} to {c_high:.2f} times with the causal mask."]
    spans = [_ratio_span(results, "flash", "sdpa_efficient", mask, 128) for mask in (False, True)]
    if all(spans):
        (low, high, n_low, n_high), (c_low, c_high, _, _) = spans
        lines += ["", f"At head dimension 128, over N = {n_low:,} to {n_high:,}, ours takes "
                  f"{low:.2f} to {high:.2f} times the memory-efficient backend's time without a "
                  f"mask, and {c_low:.2f} to {c_high:.2f} times with the causal mask."]
    validation = data.get("validation", [])
    if validation:
        passed = sum(r["passed"] for r in validation)
        lines += ["", f"Validation grid: **{passed} of {len(validation)}** configurations "
                  f"(batch × heads × seq × head_dim × causal) pass both acceptance tests; the "
                  f"worst maximum absolute error is "
                  f"{max(r['max_abs_err'] for r in validation):.1e} and the worst mean "
                  f"relative error {max(r['mean_rel_err'] for r in validation):.1e}."]
    ran = [r["seq"] for r in _rows(results, "flash", causal) if r["ms"] is not None]
    for variant in ("torch_naive", "naive_numba", "sdpa_math"):
        oom = first_oom_seq(results, variant, causal)
        if oom is not None:
            lines += ["", f"{VARIANT_LABELS[variant]} ran out of memory at N = {oom:,}"
                      + (f"; ours ran up to N = {max(ran):,}." if ran else ".")]
    return "\n".join(lines)


def throughput(results, seq=None, ours="flash"):
    """{head_dim: (ours, peer)} in TFLOP/s without a mask, ours (the variant
    `ours`: "flash", or "flash_cuda_cores" for the kernel on the CUDA cores)
    and SDPA memory-efficient's, at sequence length `seq` (default: the
    longest at which both ran at every head dimension measured), from the rows
    of an attention results file; with that seq. TFLOP/s as the benchmark
    records them: 4 B H N^2 d floating-point operations over the time."""
    if ours not in ("flash", "flash_cuda_cores"):
        raise ValueError(f"ours must be 'flash' or 'flash_cuda_cores', got {ours!r}")
    rates = {}
    for r in results:
        if not r["causal"] and r["variant"] in (ours, "sdpa_efficient") and r.get("tflops"):
            rates.setdefault(r["head_dim"], {}).setdefault(r["seq"], {})[r["variant"]] = \
                r["tflops"]
    both = [{n for n, v in by_seq.items() if len(v) == 2} for by_seq in rates.values()]
    common = set.intersection(*both) if both else set()
    if seq is None:
        if not common:
            raise ValueError("no sequence length at which ours and the memory-efficient backend "
                             "both ran at every head dimension")
        seq = max(common)
    elif seq not in common:
        raise ValueError(f"seq must be one at which both ran at every head dimension, one of "
                         f"{sorted(common)}; got {seq!r}")
    return {d: (by_seq[seq][ours], by_seq[seq]["sdpa_efficient"])
            for d, by_seq in sorted(rates.items())}, seq


def kernel_ratios(results, seqs=(512, 1024, 4096)) -> dict:
    """{(head_dim, causal, seq): (tensor cores, CUDA cores)}: our kernel on the
    tensor cores ("flash") and on the CUDA cores ("flash_cuda_cores"), each as
    a multiple of SDPA memory-efficient's time in the same run, from the rows
    of an attention results file, at the sequence lengths of `seqs` where all
    three ran; head dims ascending, no mask before causal."""
    times = {(r["variant"], r["head_dim"], r["causal"], r["seq"]): r["ms"] for r in results
             if r.get("ms")}
    found = {}
    for d in sorted({r["head_dim"] for r in results}):
        for causal in (False, True):
            for n in seqs:
                peer = times.get(("sdpa_efficient", d, causal, n))
                ours = times.get(("flash", d, causal, n))
                cores = times.get(("flash_cuda_cores", d, causal, n))
                if peer and ours and cores:
                    found[d, causal, n] = (ours / peer, cores / peer)
    return found


def kernels_markdown(data, seqs=(512, 1024, 4096)) -> str:
    """Markdown table for the chapter: kernel_ratios at `seqs`, with the
    issue's targets beside them (at most 1.1 at N = 512, 1.0 from 1024 on)."""
    ratios = kernel_ratios(data["results"], seqs)
    if not ratios:
        return "This results file has no rows of both kernels beside SDPA memory-efficient."
    lines = ["| head dim | mask | N | tensor cores / SDPA | CUDA cores / SDPA | target |",
             "|---|---|---|---|---|---|"]
    for (d, causal, n), (ours, cores) in ratios.items():
        target = "≤ 1.1" if n < 1024 else "≤ 1.0"
        lines.append(f"| {d} | {'causal' if causal else 'none'} | {n:,} | "
                     f"{ours:.2f} | {cores:.2f} | {target} |")
    return "\n".join(lines)


def steps_per_pass_times(record, config: FlashConfig) -> dict:
    """{steps_per_pass: (ms at seq 1024, ms at seq 4096)} of the tile shape of
    `config` (any steps_per_pass) in the tuning sweep of an attention results
    file (benchmarks/attention.py times each candidate at both lengths, in
    turns): what writing the loops out more steps a pass bought that shape.
    ValueError if the sweep did not time the shape."""
    base = replace(config, steps_per_pass=1)
    found = {}
    for row in record.get("tuning", []):
        if row.get("ms") is None or row.get("ms_seq4096") is None:
            continue
        shape = _parse_config(row["config"])
        if shape is not None and replace(shape, steps_per_pass=1) == base:
            found[shape.steps_per_pass] = (row["ms"], row["ms_seq4096"])
    if not found:
        raise ValueError(f"the record's tuning sweep did not time {base} at any steps per pass")
    return dict(sorted(found.items()))


def _parse_config(text: str) -> FlashConfig | None:
    """A FlashConfig from its repr as the results files write it (files from
    before steps_per_pass have none: one step), or None if it is not one."""
    import re

    fields = dict(re.findall(r"(\w+)=(\d+)", text))
    try:
        return FlashConfig(int(fields["head_dim"]), int(fields["block_rows"]),
                           int(fields["block_cols"]), int(fields["thread_rows"]),
                           int(fields["thread_cols"]), int(fields.get("steps_per_pass", 1)))
    except KeyError:
        return None


# -----------------------------------------------------------------------------
# Half precision (benchmarks/attention_half.py), as chapter 9 shows it


def _half_cases(record):
    """{(pass, type, seq, head_dim, causal): {"ours", "flash", "efficient": ms}}
    from an attention_half results file, pass "forward" or "backward", type
    "fp16" or "bf16"; and {(seq, head_dim, causal): ms} of ours in fp32."""
    cases, fp32 = {}, {}
    for r in record["results"]:
        shape = (r["seq"], r["head_dim"], r["causal"])
        if r["variant"] == "flash_fp32":
            fp32[shape] = min(r["ms"], fp32.get(shape, math.inf))
            continue
        direction = "backward" if "_bwd_" in r["variant"] else "forward"
        who = ("flash" if r["variant"].startswith("sdpa_flash") else
               "efficient" if r["variant"].startswith("sdpa_efficient") else "ours")
        cases.setdefault((direction, r["dtype"]) + shape, {})[who] = r["ms"]
    return cases, fp32


def half_precision_ratios(record) -> dict:
    """Ours over SDPA's flash backend (tensor cores) in the same precision, as
    (lowest, highest) per pass ("forward", "backward"); and ours in half
    precision over ours in fp32 on the same shapes (forward)."""
    cases, fp32 = _half_cases(record)
    found = {}
    for direction in ("forward", "backward"):
        ratios = [ms["ours"] / ms["flash"] for key, ms in cases.items()
                  if key[0] == direction and "ours" in ms and "flash" in ms]
        if ratios:
            found[direction] = (min(ratios), max(ratios))
    own = [ms["ours"] / fp32[key[2:]] for key, ms in cases.items()
           if key[0] == "forward" and "ours" in ms and key[2:] in fp32]
    if own:
        found["half_over_fp32"] = (min(own), max(own))
    return found


def half_precision_markdown(record) -> str:
    """An attention_half results file as a markdown table: per pass, type and
    shape, ours, SDPA flash and memory-efficient in ms, ours in fp32 (forward),
    and ours over SDPA flash."""
    cases, fp32 = _half_cases(record)
    lines = []
    for key in sorted(cases, key=lambda k: (k[0] != "forward", k[1], k[2:])):
        direction, dtype, seq, d, causal = key
        ms = cases[key]

        def cell(name, table=ms):
            return f"{table[name]:.3f}" if name in table else "–"

        own = f"{fp32[key[2:]]:.3f}" if direction == "forward" and key[2:] in fp32 else "–"
        ratio = f"{ms['ours'] / ms['flash']:.1f}" if "ours" in ms and "flash" in ms else "–"
        lines.append(f"| {direction} | {dtype} | {seq:,} | {d} | {'yes' if causal else 'no'} | "
                     f"{cell('ours')} | {cell('flash')} | {cell('efficient')} | {own} | {ratio} |")
    return ("| pass | type | N | head dim | causal | ours (ms) | SDPA flash (ms) | SDPA "
            "memory-efficient (ms) | ours in fp32 (ms) | ours / SDPA flash |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(lines))
