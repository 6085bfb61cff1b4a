"""``matmul``, the entry point: it checks its arguments, picks the level's
kernel (``kernel_for``) and launches it, for numpy arrays, Numba device arrays
and CUDA torch tensors alike.

Three paths, from the quickest: on a GPU, two C-contiguous float32 device
matrices with the default options take ``_quick_matmul``, which works out
everything that depends only on the level, the shape and the GPU once
(``_quick_plan``) and then costs a launch; other GPU matrices take
``_fast_matmul``, which still launches through ``cuda.core`` without Numba's
argument handling; everything else (numpy arrays, the simulator, unusual
strides) takes Numba's own launch, after the checks that explain what is
wrong. The kernels themselves live in the level modules; the launch
machinery every kernel family shares lives in ``gpucourse.kernels.launch``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.launch import (core_launch, launch_config, launchable, matrix_argument,
                                      memset_zeros, packed_launch, pitched_copy)
from gpucourse.kernels.launch import current_gpu as _current_gpu, gpu_name as _gpu_name
from gpucourse.kernels.launch import is_torch_tensor as _is_torch_tensor
from gpucourse.kernels.launch import numba_empty as _numba_empty, torch_float32 as _torch_float32
from gpucourse.kernels.sgemm.config import (TileConfig, WarpTileConfig, _level, check_config,
                                            check_warp_config)
from gpucourse.kernels.sgemm.kernel_choice import kernel_for
from gpucourse.kernels.sgemm.padding import (LOADS_ONLY, PAD_BLOCK, PAD_COPIES, PAIRS, SHIFTED,
                                             pad_copy, pad_grid, pad_grid_wide, padded_b,
                                             padded_operands, padded_sizes, rounded_up_to_4,
                                             scratch)
from gpucourse.kernels.sgemm.pipelined import shifted_fits
from gpucourse.kernels.sgemm.shape_model import padded_plan, ring_reads_b_scalar
from gpucourse.kernels.sgemm.split_k import (A_MATRIX, C_BLOCK, C_MATRIX, SPLIT_SIGNATURE,
                                             STREAM, STREAM_SIGNATURE, SUM_BLOCK,
                                             _check_split_sum, _check_splits, _split_kernel,
                                             _stream_kernel, _sum_grid, split_ranges, sum_splits,
                                             zero_matrix)
from gpucourse.kernels.sgemm.tuned_table import _tuned_here, auto_plan, gpu_model
from gpucourse.kernels.sgemm.vectorized import copy_overlap_here, overlaps_the_copy


def _device_array_or_none(x):
    """x as a Numba device array if it is one or has __cuda_array_interface__, else None."""
    if not on_gpu():
        # The simulator's device arrays (FakeCUDAArray) have no __cuda_array_interface__.
        return x if type(x).__name__ == "FakeCUDAArray" else None
    if not hasattr(x, "__cuda_array_interface__"):
        return None
    try:
        return cuda.as_cuda_array(x)
    except Exception as error:  # e.g. a torch tensor that requires grad
        raise ValueError(f"a CUDA array could not be read through __cuda_array_interface__: "
                         f"{error}") from None


def _device_view(name, x):
    """A Numba device array viewing x (numpy arrays are copied to the device)."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise ValueError(f"{name} must have dtype float32, got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2D matrix, got {x.ndim} dimensions (shape {x.shape})")
        return cuda.to_device(np.ascontiguousarray(x))
    view = _device_array_or_none(x)
    if view is not None:
        if view.dtype != np.float32:
            raise ValueError(f"{name} must have dtype float32, got {view.dtype}")
        if view.ndim != 2:
            raise ValueError(f"{name} must be a 2D matrix, got {view.ndim} dimensions (shape {view.shape})")
        return view
    raise ValueError(f"{name} must be a numpy array, a Numba device array or a CUDA torch tensor "
                     f"(anything with __cuda_array_interface__), got {type(x).__name__}"
                     + (" on the CPU: use .numpy() or .cuda()" if _is_torch_tensor(x) else ""))


def _aligned_rows(x) -> bool:
    """True if 128-bit loads along x's rows are legal: C-contiguous, 16-byte aligned
    data and rows a multiple of 4 floats long."""
    if x.shape[1] % 4 or not x.is_c_contiguous():
        return False
    if not on_gpu():
        return True  # the simulator's fallback loads have no alignment to respect
    try:
        pointer = x.__cuda_array_interface__["data"][0]
    except (AttributeError, KeyError, TypeError):
        return False
    return pointer is not None and pointer % 16 == 0


# -----------------------------------------------------------------------------
# Launching on a GPU at the cost of a launch.
# `kernel[grid, block](a, b, c)` costs 30-45 us of Python on the H100, and
# wrapping each torch tensor in a Numba device array (`cuda.as_cuda_array`)
# another 18 us each; with a fresh output array a call of level 5 on a 1 x 1 x 1
# product took 270 us, where cuBLAS takes 21 (benchmarks/results). A matrix
# argument of a compiled kernel is nine numbers (meminfo, parent, element count,
# item size, data pointer, two extents, two strides in bytes), which is what
# Numba's own launch hands to `cuda.core.launch` at the end. For C-contiguous
# float32 matrices already on the GPU, matmul builds those numbers itself from
# the data pointers and launches directly; anything else takes Numba's path.


@lru_cache(maxsize=None)
def _launchable(kernel, device_id: int, signature=None):
    """The kernel compiled for `signature` (default: three C-contiguous float32
    matrices) on one GPU, and the default stream, in the forms
    `cuda.core.launch` takes."""
    return launchable(kernel, signature or (C_MATRIX, C_MATRIX, C_MATRIX))


def _matrix_argument(pointer: int, rows: int, cols: int, row_stride: int | None = None) -> tuple:
    """A float32 matrix as a compiled kernel takes it (see launch.matrix_argument)."""
    return matrix_argument(pointer, rows, cols, 4, row_stride)


def _on_gpu_matrix(x, device_id: int):
    """(data pointer, rows, cols) of a C-contiguous float32 matrix on GPU `device_id`, or
    None when x is anything else (it then takes Numba's own path)."""
    if _is_torch_tensor(x):
        if str(x.dtype) == "torch.float32" and x.is_cuda and x.dim() == 2 \
                and x.is_contiguous() and x.get_device() == device_id:
            return x.data_ptr(), int(x.shape[0]), int(x.shape[1])
        return None
    interface = getattr(x, "__cuda_array_interface__", None)
    if interface is None or interface.get("typestr") != "<f4" or len(interface["shape"]) != 2:
        return None
    rows, cols = interface["shape"]
    strides = interface.get("strides")
    if strides is not None and tuple(strides) != (cols * 4, 4) and rows > 1:
        return None
    # A Numba device array lives on Numba's GPU; other producers must say theirs.
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    if not isinstance(x, DeviceNDArray):
        return None
    return interface["data"][0], int(rows), int(cols)


def _fast_matmul(a, b, key, config, splits, out=None, split_sum="atomic"):
    """matmul on GPU matrices without Numba's argument handling; None if not possible."""
    device_id = _current_gpu()
    a_matrix, b_matrix = _on_gpu_matrix(a, device_id), _on_gpu_matrix(b, device_id)
    if a_matrix is None or b_matrix is None:
        return None
    (a_ptr, m, k), (b_ptr, k_b, n) = a_matrix, b_matrix
    if k != k_b:
        return None  # matmul's own checks explain the mismatch
    torch_out = _is_torch_tensor(a) and _is_torch_tensor(b)
    if torch_out:
        import torch

        if out is None:
            out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        c_ptr = out.data_ptr()
    else:
        if out is None:
            out = cuda.device_array((m, n), dtype=np.float32)
        c_ptr = out.__cuda_array_interface__["data"][0]
    if not (m and n):
        return out
    vectorized = (k % 4 == 0 and n % 4 == 0 and a_ptr % 16 == 0 and b_ptr % 16 == 0
                  and c_ptr % 16 == 0)
    key, config, splits = _resolved(key, m, n, k, config, splits, device_id)
    ranges = split_ranges(k, splits) if k and splits != STREAM else [(0, 0)]
    if len(ranges) == 1 or split_sum == "atomic":
        _quick_plan(key, m, n, k, vectorized, device_id, config, splits)(a_ptr, b_ptr, c_ptr)
        return out
    launch = core_launch()
    if torch_out:
        partial = torch.empty((len(ranges), m, n), dtype=torch.float32, device=a.device)
        p_ptr = partial.data_ptr()
    else:
        partial = cuda.device_array((len(ranges), m, n), dtype=np.float32)
        p_ptr = partial.__cuda_array_interface__["data"][0]
    for s, (k0, k1) in enumerate(ranges):
        kernel, grid, block = kernel_for(key, (m, n, k1 - k0), vectorized, config)
        function, stream = _launchable(kernel, device_id, (A_MATRIX, C_MATRIX, C_MATRIX))
        launch(stream, launch_config(grid, block), function,
               *_matrix_argument(a_ptr + 4 * k0, m, k1 - k0, row_stride=k),
               *_matrix_argument(b_ptr + 4 * k0 * n, k1 - k0, n),
               *_matrix_argument(p_ptr + 4 * s * m * n, m, n))
    function, stream = _launchable(sum_splits, device_id, (C_BLOCK, C_MATRIX))
    launch(stream, launch_config(_sum_grid(m, n), SUM_BLOCK), function,
           0, 0, len(ranges) * m * n, 4, p_ptr, len(ranges), m, n, m * n * 4, n * 4, 4,
           *_matrix_argument(c_ptr, m, n))
    return out


# The common call, matmul(a, b) or matmul(a, b, level, out=c) on two CUDA torch
# tensors or two Numba device arrays, in as little Python as it can be: a
# product of 1 x 1 x 1 costs what its Python costs (issue 16 asked for under
# 30 microseconds a call). Everything that depends only on the level, the
# shape, the GPU and the alignment (the kernel, its grid, its tiles, auto's
# plan, the compiled function) is worked out once per such key
# (`_quick_plan`); each call checks its arguments' types, dtype, layout and
# device, and launches. Any call it is unsure of (other dtypes, strides,
# devices, config= or splits=, bad arguments) goes the long way, through the
# checks that explain what is wrong.
_ON_GPU = on_gpu()  # decided when gpucourse.device loaded Numba, fixed from then on
_QUICK_LEVELS = {"auto": "auto", 6: "6", "6": "6", 5: "5", "5": "5", 7: "7", "7": "7"}
_QUICK_LEVEL_TYPES = (str, int)
_KIND_OF_TYPE: dict = {}  # type -> "torch", "numba" or None, found once per type


def _kind_of(x):
    kind = _KIND_OF_TYPE.get(type(x), False)
    if kind is False:
        kind = "torch" if _is_torch_tensor(x) else None
        if kind is None and _ON_GPU:
            from numba.cuda.cudadrv.devicearray import DeviceNDArray

            kind = "numba" if isinstance(x, DeviceNDArray) else None
        _KIND_OF_TYPE[type(x)] = kind
    return kind


def _quick_torch_matrix(x, float32_type, device_id):
    """(pointer, rows, cols) of a 2D C-contiguous float32 CUDA tensor on GPU device_id, or None."""
    if x.dtype is not float32_type or x.dim() != 2 or not x.is_cuda or not x.is_contiguous() \
            or x.get_device() != device_id:
        return None
    rows, cols = x.shape
    return x.data_ptr(), rows, cols


def _quick_numba_matrix(x):
    """(pointer, rows, cols) of a 2D C-contiguous float32 Numba device array, or None."""
    if x.dtype != np.float32 or x.ndim != 2 or not x.is_c_contiguous():
        return None
    rows, cols = x.shape
    return x.device_ctypes_pointer.value or 0, rows, cols


def _quick_matmul(a, b, level, out):
    """matmul's common case (see above), or None to take the long way."""
    kind = _kind_of(a)
    if kind is None or _kind_of(b) != kind or level.__class__ not in _QUICK_LEVEL_TYPES:
        return None  # bools, floats (6.0 == 6) and the rest: the long way says what it takes
    key = _QUICK_LEVELS.get(level)
    if key is None:
        return None
    device_id = _current_gpu()
    if kind == "torch":
        f32 = _torch_float32()
        a_matrix = _quick_torch_matrix(a, f32, device_id)
        b_matrix = _quick_torch_matrix(b, f32, device_id)
    else:  # Numba's arrays live on Numba's GPU, the current one
        a_matrix, b_matrix = _quick_numba_matrix(a), _quick_numba_matrix(b)
    if a_matrix is None or b_matrix is None:
        return None
    (a_ptr, m, k), (b_ptr, k_b, n) = a_matrix, b_matrix
    if k != k_b:
        return None  # the long way explains the mismatch
    if out is None:
        out = _torch_empty(a, m, n) if kind == "torch" else _numba_empty(m, n, device_id)
    elif _kind_of(out) != kind:
        return None
    c_matrix = (_quick_torch_matrix(out, f32, device_id) if kind == "torch"
                else _quick_numba_matrix(out))
    if c_matrix is None or c_matrix[1] != m or c_matrix[2] != n:
        return None
    if m and n:
        aligned = not (k % 4 or n % 4 or a_ptr % 16 or b_ptr % 16 or c_matrix[0] % 16)
        _quick_plan(key, m, n, k, aligned, device_id)(a_ptr, b_ptr, c_matrix[0])
    return out


def _torch_empty(like, m: int, n: int):
    """An uninitialised m x n float32 tensor on `like`'s device."""
    import torch

    return torch.empty((m, n), dtype=torch.float32, device=like.device)


def _resolved(key: str, m: int, n: int, k: int, config, splits, device_id: int) -> tuple:
    """(key, config, splits) that matmul runs for `key` at this shape: auto is
    level 6 with the tiles and slices measured nearest the shape (each where
    not given), level 6 takes this GPU's tuned tiles where none are given,
    and splits default to 1."""
    if key == "auto":
        planned, planned_splits = auto_plan((m, n, k), _gpu_name(device_id))
        return "6", config or planned, splits or planned_splits
    if config is None and key == "6":
        config = _tuned_here(_gpu_name(device_id))
    return key, config, splits or 1


# Whether auto pads a ragged product's operands (padding, shape_model's
# padded plans): None, as the model says for the GPU (never where its entry
# holds no "padding" block); True or False forces it, for benchmarks that
# time both ways and for tests.
PAD_RAGGED = None


def _pads(m: int, n: int, k: int, gpu_name: str) -> bool:
    """Whether auto copies A and B into padded buffers for this product."""
    if not (k and (k % 4 or n % 4)):
        return False
    return padded_plan(gpu_name, m, n, k) if PAD_RAGGED is None else bool(PAD_RAGGED)


@lru_cache(maxsize=1024)
def _quick_plan(key: str, m: int, n: int, k: int, vectorized: bool, device_id: int,
                config=None, splits=None):
    """go(a_ptr, b_ptr, c_ptr): the launches matmul makes for `key` (with `config`
    and `splits` of K where given; see _resolved) at this shape on this GPU,
    one kernel or split-K in one launch, everything but the three pointers
    worked out once. Auto on a ragged product may first copy A and B into
    padded buffers (``_pads``; see padding)."""
    pad = (not vectorized and key == "auto" and config is None and splits is None
           and _pads(m, n, k, _gpu_name(device_id)))
    key, config, splits = _resolved(key, m, n, k, config, splits, device_id)
    if k and key in ("5", "6") and getattr(config, "stages", 0):
        return _ring_plan(key, m, n, k, device_id, config, splits)
    if not pad:
        return _launches(key, m, n, k, n, vectorized, device_id, config, splits)
    k4, n4, pad_a, floats = padded_sizes(m, n, k)
    multiply = _launches(key, m, n, k4, n4, True if n % 4 == 0 else LOADS_ONLY, device_id,
                         config, splits)
    # A is used as given where K is a multiple of 4: only if it starts on 16
    # bytes, which the plan (kept per shape, not per pointer) cannot know.
    scalar = None if pad_a else _launches(key, m, n, k, n, False, device_id, config, splits)
    copies = pad_copies(m, n, k, device_id)

    def go_padded(a_ptr, b_ptr, c_ptr):
        if scalar is not None and a_ptr % 16:
            return scalar(a_ptr, b_ptr, c_ptr)
        base = scratch(device_id, floats).device_ctypes_pointer.value
        a_padded = base if pad_a else a_ptr
        b_padded = base + 4 * m * k4 if pad_a else base
        copies(a_ptr, b_ptr, a_padded, b_padded)
        multiply(a_padded, b_padded, c_ptr)
    return go_padded


# How a cp.async ring reads a B whose rows do not allow 16-byte copies (n not
# a multiple of 4, or B or C not on 16 bytes): "padded", B first copied into
# rows of n4 by a second launch (``padding.padded_b``), then 16 bytes a copy;
# "scalar", B as given, 4 bytes a copy, in one launch; None, as the shape
# model prices the plan (shape_model.ring_reads_b_scalar: one launch where
# the host's time a call decides, the copy where the loop's does).
RING_RAGGED_B = None


# Whether a ring reading B as given copies it, and stores C, 8 bytes at a
# time where their rows allow that (padding.PAIRS), for tiles of at most
# RING_PAIRS_MOST_ROWS rows; else 4 bytes. Offline (ptxas 13, sm_90) the 64 x
# 128 ring's loop then issues 1,259 instructions per 1,024 FMAs against 1,384
# (1,224 with 16-byte copies), its stores 32 against 64, in 162 registers
# against 168. On the H200 (benchmarks/results/sgemm_ring_pairs-h200-2026-11-30.json,
# n % 4 == 2, wall clock in turns beside cuBLAS) 64 x 128 rings ran 7-12%
# faster than with 4-byte copies at 9 of 10 shapes (the tenth, a 20 us call,
# 10% slower by the wall clock and 10% faster by CUDA events) and 5-38% faster
# than with B padded first; 64 x 64 rings within 1-7% of both, mostly ahead;
# the one 128 x 128 ring timed (640 x 906 x 16631, 13 slices) 4% slower.
RING_PAIRS = True
RING_PAIRS_MOST_ROWS = 64


def _ring_pairs(config) -> bool:
    """Whether `config`'s ring reads an even ragged B 8 bytes a copy."""
    return RING_PAIRS and config.bm <= RING_PAIRS_MOST_ROWS


# Whether a ring on a ragged B that it does not read in pairs copies B in
# 16-byte chunks of its memory wherever its rows start and moves the rows
# into place in shared memory (padding.SHIFTED), instead of copying it into
# padded rows first or reading it 4 bytes a copy (whichever the model
# chose): no copy of B first, and 16-byte loads in the loop, for one more
# barrier and 16 floats moved a thread a step (64 x 128 tiles); only rings
# that fit (pipelined.shifted_fits). Off: on the H200 it made the call
# slower than the fastest other way at all 29 shapes timed, by 22% at the
# median and up to 56% (benchmarks/results/reruns/sgemm_ring_pairs-h200-
# 2026-11-30-shifted.json), though offline its loop issues only about 5% more
# instructions than with B aligned: most likely the wait at the move's two
# barriers every step is what costs.
RING_SHIFTED = False


def _paired_rows(x) -> bool:
    """True if 8-byte copies and stores along x's rows are legal: C-contiguous,
    8-byte aligned data and rows an even number of floats long."""
    if x.shape[1] % 2 or not x.is_c_contiguous():
        return False
    if not on_gpu():
        return True
    pointer = x.__cuda_array_interface__["data"][0]
    return pointer is not None and pointer % 8 == 0


def _ring_b(gpu_name: str, m: int, n: int, k: int, config, splits) -> str:
    """"scalar" or "padded": RING_RAGGED_B, or where None the model's choice."""
    if RING_RAGGED_B not in (None, "padded", "scalar"):
        raise ValueError(f"RING_RAGGED_B must be None, 'padded' or 'scalar', got "
                         f"{RING_RAGGED_B!r}")
    if RING_RAGGED_B is not None:
        return RING_RAGGED_B
    scalar = ring_reads_b_scalar(gpu_name, m, n, k, config, splits or 1)
    return "scalar" if scalar else "padded"


def _ring_plan(key: str, m: int, n: int, k: int, device_id: int, config, splits):
    """go(a_ptr, b_ptr, c_ptr) for level 5 or 6's kernel with a cp.async ring
    (config.stages). The ring copies A a float at a time, so A is read as
    given whatever K is; B is copied 16 bytes at a time, from B itself where
    its rows allow it (n a multiple of 4, B and C on 16 bytes); else, as
    ``_ring_b`` says, 4 bytes at a time from B itself, or 16 from a copy of B
    padded to k x n4 (``padding.padded_b``), C then stored a float at a
    time. Read as given, B is copied 8 bytes at a time and C stored 8 bytes
    at a time where their rows allow that (n even, B and C on 8 bytes, tiles
    of at most 64 rows: ``padding.PAIRS``, ``_ring_pairs``), or, with
    RING_SHIFTED, in 16-byte chunks wherever its rows start
    (``padding.SHIFTED``). Each way is compiled the first time it is needed."""
    n4 = rounded_up_to_4(n)
    ways = {}

    def way(aligned: bool):
        if aligned not in ways:
            ways[aligned] = _launches(key, m, n, k, n if aligned else n4,
                                      True if aligned else LOADS_ONLY, device_id, config, splits)
        return ways[aligned]

    copy_b = None
    scalar = _ring_b(_gpu_name(device_id), m, n, k, config, splits) == "scalar"
    fits = shifted_fits(config)

    def go(a_ptr, b_ptr, c_ptr):
        nonlocal copy_b
        if not (n % 4 or b_ptr % 16 or c_ptr % 16):
            return way(True)(a_ptr, b_ptr, c_ptr)
        pairs = scalar and _ring_pairs(config) and not (n % 2 or b_ptr % 8 or c_ptr % 8)
        shifted = RING_SHIFTED and not pairs and fits
        if scalar or shifted:
            mode = PAIRS if pairs else SHIFTED if shifted else False
            if mode not in ways:
                ways[mode] = _launches(key, m, n, k, n, mode, device_id, config, splits)
            return ways[mode](a_ptr, b_ptr, c_ptr)
        if copy_b is None:
            copy_b = _ring_copy_b(k, n, n4, device_id)
        b_padded = scratch(device_id, k * n4).device_ctypes_pointer.value
        copy_b(b_ptr, b_padded)
        way(False)(a_ptr, b_padded, c_ptr)
    return go


def _copy_launch(rows: int, cols: int, padded_rows: int, padded_cols: int, device_id: int,
                 wide: bool = False, early: bool = False):
    """copy(source_ptr, padded_ptr): pad_copy's launch (with `wide`,
    pad_copy_wide's; with `early`, letting the ring launched after it start
    its blocks, padding.PAD_COPIES) from a rows x cols matrix into a
    padded_rows x padded_cols buffer, on the default stream."""
    launch = core_launch()
    grid = pad_grid_wide if wide else pad_grid
    copy, stream = _launchable(PAD_COPIES[wide, early], device_id, (C_MATRIX, C_MATRIX))
    shape = launch_config(grid(padded_rows, padded_cols), PAD_BLOCK)

    def go(source_ptr, padded_ptr):
        launch(stream, shape, copy, *_matrix_argument(source_ptr, rows, cols),
               *_matrix_argument(padded_ptr, padded_rows, padded_cols))
    return go


# Whether a ring's copy of a ragged B into rows of n4 (entry_point's
# _ring_plan) is the driver's pitched copy (launch.pitched_copy) rather than
# pad_copy, a kernel of one float a thread that ran at 1-2.5 TB/s on the
# H200 (benchmarks/results/sgemm_kernel_times-*: 15 us for B of 2545 x 1646).
# The copy leaves the padding columns as they were: they meet only C's
# columns past n, which are never stored. Off: on the H200 the driver's copy
# made the call slower than pad_copy did at 26 of 29 shapes
# (benchmarks/results/sgemm_ring_pairs-h200-2026-11-30.json, "padded_driver").
RING_COPY_BY_DRIVER = False
# Whether that copy, where it is a kernel, is pad_copy_wide (four floats a
# thread, one 16-byte store) rather than pad_copy. On: on the H200 it copied
# B at 3.5-4.8 TB/s where pad_copy reached 2.1-2.7 (copies of 20 MB or more;
# benchmarks/results/reruns/sgemm_ring_copy-h200-2026-12-01-wide.json), made
# the call faster at all 29 ring shapes of sgemm_ring_pairs.py, by 1.9% at
# the median (reruns/sgemm_ring_pairs-h200-2026-12-01-copy-ways.json,
# "padded_wide"), and with pipelined.STEP_SCALAR_COPIES took held-out set 13
# from 21 to 23 of its 24 large shapes at 85% of cuBLAS, in every round
# (results/sgemm_held_out_13-h200-2026-12-01.json and its reruns). The
# model still prices pad_copy's rate (its "ring_copy"), until a trial of the
# wide copy's price is judged on a held-out set.
RING_COPY_WIDE = True


def _ring_copy_b(k: int, n: int, n4: int, device_id: int):
    """copy(source_ptr, padded_ptr): B (k x n) into rows of n4 floats for a
    ring, by the driver's pitched copy where RING_COPY_BY_DRIVER and the
    driver allow, else by pad_copy (zeros in the padding)."""
    if RING_COPY_BY_DRIVER:
        _, stream = _launchable(pad_copy, device_id, (C_MATRIX, C_MATRIX))
        copy = pitched_copy(stream, k, 4 * n, 4 * n, 4 * n4)
        if copy is not None:
            return copy
    return _copy_launch(k, n, k, n4, device_id, RING_COPY_WIDE, copy_overlap_here())


def pad_copies(m: int, n: int, k: int, device_id: int):
    """copy(a_ptr, b_ptr, a_padded, b_padded): pad_copy's launches for an m x
    n x k product on one GPU, B (k x n) into the k4 x n4 buffer at b_padded
    and, where K is ragged, A (m x k) into the m x k4 one at a_padded
    (padding.padded_sizes), on the default stream."""
    k4, n4, pad_a, _ = padded_sizes(m, n, k)
    copy_a = _copy_launch(m, k, m, k4, device_id) if pad_a else None
    copy_b = _copy_launch(k, n, k4, n4, device_id)

    def go(a_ptr, b_ptr, a_padded, b_padded):
        if copy_a is not None:
            copy_a(a_ptr, a_padded)
        copy_b(b_ptr, b_padded)
    return go


# Whether matmul's launches take packed arguments (launch.packed_launch): one
# buffer laid out once, three pointers written per call, instead of cuda.core
# converting some thirty arguments each time (about 5 us of Python a launch,
# results/sgemm_host_costs-h200-2026-11-30.json). Off: on the H200 (its image
# has cuKernelGetParamInfo but not cuda.bindings' _v2 launch, so the packed
# buffer goes through driver.cuLaunchKernel) both ways were right at nine
# shapes and the packed one was no faster, 13.1-20.3 us a call against
# 13.1-19.8 (reruns/sgemm_host_costs-h200-2026-11-30-packed.json): the
# bindings' own call costs what cuda.core's conversion saved.
# benchmarks/sgemm_host_costs.py checks both ways and times them.
PACKED_LAUNCHES = False

# Whether split-K and stream-K zero C with the driver's memset (launch.memset_zeros)
# rather than the zeroing kernel (split_k.zero_matrix, one float a thread). On
# the H200 the memset took 10.0 us at 3000 x 3000 and 17.9 at 4096 x 4096,
# the kernel 23.5 and 42.2 (results/sgemm_zeroing-h200-2026-11-30.json).
# Off: the kernel, as before 2026-11-30 (sgemm_off_grid.py --zero-kernel).
ZERO_BY_MEMSET = True


def _packed(kernel, signature, stream, shape, arguments, slots):
    """launch.packed_launch for a launch of `shape` (cuda.core's LaunchConfig),
    or None where PACKED_LAUNCHES is off or the fast path is not available."""
    if not PACKED_LAUNCHES:
        return None
    return packed_launch(kernel, signature, stream, tuple(shape.grid), tuple(shape.block),
                         arguments, slots, shape.shmem_size)


def _launches(key: str, m: int, n: int, k: int, b_cols: int, vectorized, device_id: int,
              config, splits):
    """go(a_ptr, b_ptr, c_ptr) for a level's key other than auto: A m x k, B k x
    b_cols (n, or n rounded up for padded operands), C m x n."""
    launch = core_launch()
    a_head, a_tail = (0, 0, m * k, 4), (m, k, k * 4, 4)
    b_head, b_tail = (0, 0, k * b_cols, 4), (k, b_cols, b_cols * 4, 4)
    c_head, c_tail = (0, 0, m * n, 4), (m, n, n * 4, 4)
    # For a packed launch: the three matrices' arguments with their pointers
    # zero, and where those pointers sit (each matrix is nine arguments).
    matrices = (_matrix_argument(0, m, k) + _matrix_argument(0, k, b_cols)
                + _matrix_argument(0, m, n))
    slots = tuple(i * len(matrices) // 3 + len(a_head) for i in range(3))
    if k == 0 or splits != STREAM and len(split_ranges(k, splits)) == 1:
        kernel, grid, block = kernel_for(key, (m, n, k), vectorized, config)
        function, stream = _launchable(kernel, device_id)
        dependent = overlaps_the_copy(config, vectorized)  # may overlap B's copy
        shape = launch_config(grid, block, 0, dependent)
        packed = None if dependent else _packed(kernel, (C_MATRIX,) * 3, stream, shape,
                                                matrices, slots)
        if packed is not None:
            return packed

        def go(a_ptr, b_ptr, c_ptr):
            launch(stream, shape, function, *a_head, a_ptr, *a_tail, *b_head, b_ptr, *b_tail,
                   *c_head, c_ptr, *c_tail)
        return go
    # Split-K in one launch: C zeroed, then one launch whose blocks add their
    # slices into it; both on Numba's default stream, in that order. (Not
    # torch's zero_: it would run on torch's current stream, which need not be
    # this one.)
    # Stream-K likewise, its blocks adding their runs of steps (split_k).
    if splits == STREAM:
        kernel, grid, block, last = _stream_kernel(key, m, n, k, vectorized, config)
        signature = STREAM_SIGNATURE
    else:
        kernel, grid, block, chunk = _split_kernel(key, m, n, k, splits, vectorized, config)
        signature, last = SPLIT_SIGNATURE, (chunk,)
    last = tuple(int(x) for x in last)
    zero, stream = _launchable(zero_matrix, device_id, (C_MATRIX,))
    function, _ = _launchable(kernel, device_id, signature)
    zero_shape, shape = launch_config(_sum_grid(m, n), SUM_BLOCK), launch_config(grid, block)
    # C is zeroed by the driver's memset where it can be (about twice the
    # zeroing kernel's speed on a large C), else by the kernel.
    memset = memset_zeros(stream) if ZERO_BY_MEMSET else None
    zero_packed = None if memset is not None else _packed(
        zero_matrix, (C_MATRIX,), stream, zero_shape, _matrix_argument(0, m, n), (len(c_head),))
    split_packed = _packed(kernel, signature, stream, shape, matrices + last, slots)

    def zero_c(c_ptr):
        if memset is not None:
            memset(c_ptr, m * n)  # C is contiguous on this path
        elif zero_packed is not None:
            zero_packed(c_ptr)
        else:
            launch(stream, zero_shape, zero, *c_head, c_ptr, *c_tail)

    if split_packed is not None:
        def go_packed(a_ptr, b_ptr, c_ptr):
            zero_c(c_ptr)
            split_packed(a_ptr, b_ptr, c_ptr)
        return go_packed

    def go_split(a_ptr, b_ptr, c_ptr):
        zero_c(c_ptr)
        launch(stream, shape, function, *a_head, a_ptr, *a_tail, *b_head, b_ptr, *b_tail,
               *c_head, c_ptr, *c_tail, *last)
    return go_split


def _zero(c_dev) -> None:
    """C = 0 before split-K's or stream-K's adds, on Numba's default stream:
    the driver's memset where C is one contiguous run on a GPU (ZERO_BY_MEMSET),
    else the zeroing kernel (the simulator, or a C with gaps between rows)."""
    if ZERO_BY_MEMSET and on_gpu() and c_dev.is_c_contiguous():
        memset = memset_zeros(0)
        if memset is not None:
            memset(c_dev.__cuda_array_interface__["data"][0], c_dev.size)
            return
    zero_matrix[_sum_grid(*c_dev.shape), SUM_BLOCK](c_dev)


def matmul(a, b, level="auto", *, config: TileConfig | WarpTileConfig | None = None,
           splits: int | str | None = None, split_sum: str = "atomic", out=None):
    """C = A @ B in float32 with the SGEMM kernel of `level` (1, 2, 3, "4a", "4b", 5, 6, 7 or
    "auto": level 6's kernel with the plan the shape model prices cheapest for this shape
    and GPU, ``choose_plan``: tiles, a cp.async ring or not, and K whole, cut into slices
    or run as stream-K).

    a: M x K, b: K x N, both float32 and both of one kind: numpy arrays (the
    result is a numpy array), or device arrays with __cuda_array_interface__
    (a Numba device array gives a Numba device array, a CUDA torch tensor a
    CUDA torch tensor on the same device). Any M, N, K >= 0.
    config: tile sizes for levels 4a-6, a TileConfig (default: each level's
    own; level 6 reads sgemm_tuned.json), or for level 7, a WarpTileConfig
    (default WARP_TILE_DEFAULT).
    splits: cut K into this many slices, each multiplied by its own blocks,
    and add their products (split-K: more blocks for a product with few tiles
    of C and a deep K; levels 5, 6, 7 and auto; default 1, or auto's plan's). Slices are multiples of 16 columns, so
    a short K gets fewer. Or "stream" (stream-K): as many blocks as the
    GPU runs at once, each taking an equal run of all the tiles' steps of K
    (crossing from one tile to the next): pieces of a tile added into C,
    zeroed first, with atomic adds as split_sum "atomic" does, whole tiles
    stored. Every SM is busy for the same time whatever the number of tiles;
    split_sum does not apply.
    split_sum: how the slices are added when there are several. "atomic"
    (default): one launch whose blocks take their slice from blockIdx.z and
    add their outputs into C, zeroed first, with float32 atomic adds. The
    additions then run in an order that can change from call to call, so
    the last bits of C may differ between two calls on the same inputs.
    "partials": one launch per slice writing a buffer of partial products,
    then a kernel adding them in order (deterministic; more memory traffic
    and launches). With splits=1, the default for most shapes, neither
    runs: each output is summed by one thread and stored once, exact to
    float32 rounding and the same on every call.
    out: where to write C (returned): an M x N C-contiguous float32 array of
    the inputs' kind. A call that allocates C each time pays for the
    allocation; a loop can pass the same `out` instead.
    Auto on a ragged product (K or N not a multiple of 4) may copy A and B
    into padded buffers first, where the GPU's model allows it and finds it
    cheaper than loads of one float (``sgemm.padding``): the buffer is kept
    for the next call, as large as the largest such product so far. A plan
    on a cp.async ring (``TileConfig.stages``; auto's at most shapes on the
    H200) reads A as given and, where N is ragged or B or C does not start
    on 16 bytes, copies B alone into such a buffer (``padding.padded_b``).

    Raises ValueError naming what is accepted for a non-float32 dtype, a
    non-2D array, mismatched inner dimensions, an unknown level, a tile
    configuration that breaks a constraint, or an unfit `out`.
    """
    if config is None and splits is None and split_sum == "atomic" and _ON_GPU:
        result = _quick_matmul(a, b, level, out)
        if result is not None:
            return result
    key = _level(level, auto_ok=True)
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray) and not hasattr(x, "shape"):
            raise ValueError(f"{name} must be a numpy array, a Numba device array or a CUDA torch "
                             f"tensor (anything with __cuda_array_interface__), got "
                             f"{type(x).__name__}")
    a_is_numpy, b_is_numpy = isinstance(a, np.ndarray), isinstance(b, np.ndarray)
    if a_is_numpy != b_is_numpy:
        raise ValueError("a and b must be of one kind: both numpy arrays or both device arrays, "
                         f"got {type(a).__name__} and {type(b).__name__}")
    for name, x in (("a", a), ("b", b)):  # shape checks before any copy to the device
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) != 2:
            raise ValueError(f"{name} must be a 2D matrix, got {len(shape)} dimensions (shape {tuple(shape)})")
    if getattr(a, "shape", None) is not None and getattr(b, "shape", None) is not None:
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"inner dimensions must match: a is {a.shape[0]} x {a.shape[1]} so b "
                             f"must have {a.shape[1]} rows, got b of shape {tuple(b.shape)}")
    if config is not None:
        if key not in ("4a", "4b", "5", "6", "7", "auto"):
            raise ValueError(f"config applies to levels 4a, 4b, 5 and 6 (and auto; a TileConfig) "
                             f"and 7 (a WarpTileConfig) only, got level {level!r}")
        if key == "7":
            check_warp_config(config)
        else:
            check_config(config, vectorized=key in ("5", "6", "auto"))
    splits = _check_splits(splits, key)
    split_sum = _check_split_sum(split_sum)
    if out is not None:
        _check_out(out, a, (int(a.shape[0]), int(b.shape[1])))
    if on_gpu() and not a_is_numpy:
        result = _fast_matmul(a, b, key, config, splits, out, split_sum)
        if result is not None:
            return result
    a_dev, b_dev = _device_view("a", a), _device_view("b", b)
    m, k = a_dev.shape
    n = b_dev.shape[1]

    torch_out = _is_torch_tensor(a) and _is_torch_tensor(b)
    if torch_out:
        import torch

        if out is None:
            out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        c_dev = cuda.as_cuda_array(out)
    elif out is not None and not a_is_numpy:
        c_dev = out
    else:
        c_dev = cuda.device_array((m, n), dtype=np.float32)

    if m and n:  # with k == 0 every kernel writes zeros, the empty sum, as numpy does
        vectorized = _aligned_rows(a_dev) and _aligned_rows(b_dev) and _aligned_rows(c_dev)
        if key == "auto":
            pad = not (vectorized or config or splits) and (k % 4 or _aligned_rows(a_dev)) \
                and _pads(m, n, k, gpu_model())  # A as given (K % 4 == 0) must be aligned
            planned, planned_splits = auto_plan((m, n, k))
            key, config, splits = "6", config or planned, splits or planned_splits
            if pad and not config.stages:  # ragged rows copied into padded buffers (see padding)
                a_dev, b_dev = padded_operands(a_dev, b_dev)
                k, vectorized = a_dev.shape[1], True if n % 4 == 0 else LOADS_ONLY
        if k and key in ("5", "6") and config is not None and config.stages:
            # A cp.async ring reads A a float at a time: only B's rows (and
            # C's, for 128-bit stores) decide; else B alone is padded (_ring_plan).
            vectorized = _aligned_rows(b_dev) and _aligned_rows(c_dev)
            as_given = not vectorized and _ring_b(gpu_model(), m, n, k, config, splits) == "scalar"
            if as_given and _ring_pairs(config) and _paired_rows(b_dev) and _paired_rows(c_dev):
                vectorized = PAIRS
            elif not vectorized and RING_SHIFTED and b_dev.is_c_contiguous() \
                    and shifted_fits(config):
                vectorized = SHIFTED
            elif not vectorized and not as_given:
                b_dev, vectorized = padded_b(b_dev), LOADS_ONLY
        ranges = split_ranges(k, splits or 1) if k and splits != STREAM else [(0, 0)]
        if k and splits == STREAM:
            kernel, grid, block, arguments = _stream_kernel(key, m, n, k, vectorized, config)
            _zero(c_dev)
            kernel[grid, block](a_dev, b_dev, c_dev, *arguments)
        elif len(ranges) == 1:
            kernel, grid, block = kernel_for(key, (m, n, k), vectorized, config)
            kernel[grid, block](a_dev, b_dev, c_dev)
        elif split_sum == "atomic":
            kernel, grid, block, chunk = _split_kernel(key, m, n, k, splits, vectorized, config)
            _zero(c_dev)
            kernel[grid, block](a_dev, b_dev, c_dev, np.uint64(chunk))
        else:
            partial = cuda.device_array((len(ranges), m, n), dtype=np.float32)
            for s, (k0, k1) in enumerate(ranges):
                kernel, grid, block = kernel_for(key, (m, n, k1 - k0), vectorized, config)
                kernel[grid, block](a_dev[:, k0:k1], b_dev[k0:k1, :], partial[s])
            sum_splits[_sum_grid(m, n), SUM_BLOCK](partial, c_dev)
    if torch_out:
        return out
    if a_is_numpy:
        return c_dev.copy_to_host() if out is None else c_dev.copy_to_host(out)
    return c_dev


def _check_out(out, a, shape) -> None:
    """`out` must be an M x N C-contiguous float32 array of a's kind."""
    if isinstance(a, np.ndarray):
        kind, fits = "a numpy array", isinstance(out, np.ndarray) and out.dtype == np.float32 \
            and out.flags.c_contiguous
    elif _is_torch_tensor(a):
        kind = "a CUDA torch tensor on the inputs' GPU"
        fits = _is_torch_tensor(out) and str(out.dtype) == "torch.float32" and \
            out.device == a.device and out.is_contiguous()
    else:
        kind = "a Numba device array"
        fits = type(out) is type(a) and out.dtype == np.float32 and out.is_c_contiguous()
    if not fits or tuple(out.shape) != shape:
        raise ValueError(f"out must be {kind} of shape {shape}, C-contiguous float32, like the "
                         f"inputs; got {type(out).__name__} of shape "
                         f"{tuple(getattr(out, 'shape', ()))}")
