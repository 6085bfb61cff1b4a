"""``half_matmul``: C = A B for fp16 or bf16 matrices on the tensor cores, as a user calls it.

The entry point of the HGEMM ladder (``hgemm_ladder``): it takes torch tensors
(CUDA ones on a GPU; CPU ones, and numpy fp16 arrays, on Numba's simulator,
where the kernels run at small tiles), checks them, pads what the 16-byte
copies cannot take, picks the level's configuration and launches. On a GPU
the launch goes straight to ``cuda.core`` with the compiled function, found
once per GPU and configuration (``kernels.launch``), so a call costs
microseconds of Python, like ``torch.mm``.
"""

from __future__ import annotations

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba import float32, uint16  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.launch import (compiled_launchable, core_launch, current_gpu,
                                      is_torch_tensor, launch_config, launch_with_shared,
                                      matrix_argument, multiprocessors)
from gpucourse.kernels.tensor_cores.hgemm_ladder import (CHUNK, LEVELS, SIMULATOR_TILES,
                                                        check_config, make_hgemm_kernel,
                                                        make_sum_slices)
from gpucourse.kernels.tensor_cores.moves import forget_earlier_moves

DTYPES = ("float16", "bfloat16")
_SIGNATURES = {out: (uint16[:, ::1], uint16[:, ::1], c)
               for out, c in (("half", uint16[:, ::1]), ("float32", float32[:, ::1]))}
OUT_DTYPES = ("float16", "bfloat16", "float32")


def _dtype_name(dtype) -> str:
    """'float16', 'bfloat16', 'float32', ... for a torch or numpy dtype, or a name."""
    if str(dtype).startswith("torch."):
        return str(dtype)[len("torch."):]
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)  # "bfloat16", which numpy does not know


# Level 7's choice of tiles and of a split of K, a model of the GPU rather
# than a table of measured shapes. The GPU runs its SMs' worth of blocks at
# once (two of these 128-thread blocks per SM fit); a product whose C has
# fewer tiles of 128 x 128 than the GPU has SMs leaves SMs idle, so it takes
# tiles of 64 x 64 (four times the blocks); if that still leaves SMs idle and
# K is deep, K is cut into slices that run side by side (split-K), enough
# for two blocks per SM, each block summing one slice of at least
# SLICE_TILES tiles of K, and a second kernel adds the slices up. Measured
# on an H100 (benchmarks/results/reruns/hgemm_sweep-h100-2026-11-28.json):
# 64 x 64 tiles at 1024^3 0.68 of cuBLAS against 0.65 with 128 x 128; at
# 2048^3 (256 tiles of 128 x 128 on 132 SMs) 128 x 128 is better, 0.52
# against 0.46.
SMALL_TILES = dict(bm=64, bn=64)
SLICE_TILES = 8  # the fewest tiles of K (of bk) a slice of split-K gets
MAX_SLICES = 16


def choose_config(level: int, m: int, n: int, k: int) -> tuple[dict, int]:
    """(configuration, slices of K) for an m x n x k product: the level's
    switches (LEVELS), and for level 7 on a GPU the tiles and split that
    the model above gives; on the simulator, SIMULATOR_TILES and no split."""
    config = dict(LEVELS[level])
    if not on_gpu():
        config.update(SIMULATOR_TILES)
        return config, 1
    if level != 7:
        return config, 1
    sms = multiprocessors(current_gpu())

    def tiles(bm, bn):
        return -(-m // bm) * -(-n // bn)

    if tiles(config["bm"], config["bn"]) >= sms:
        return config, 1
    config.update(SMALL_TILES)
    blocks = tiles(config["bm"], config["bn"])
    if blocks >= sms:
        return config, 1
    k_tiles = -(-k // config["bk"])
    slices = max(1, min(-(-2 * sms // blocks), k_tiles // SLICE_TILES, MAX_SLICES))
    return config, slices


_KERNELS: dict = {}


def kernel_for(config: dict):
    """The kernel of a full configuration, built once."""
    key = tuple(sorted(config.items()))
    if key not in _KERNELS:
        _KERNELS[key] = make_hgemm_kernel(**config)
    return _KERNELS[key]


def _sum_slices_kernel(kind: str, out: str):
    """make_sum_slices's kernel for a kind and an output, built once."""
    key = ("sum_slices", kind, out)
    if key not in _KERNELS:
        _KERNELS[key] = make_sum_slices(kind, out)
    return _KERNELS[key]


SUM_THREADS = 256


def _signature(out: str):
    """What a GEMM kernel is compiled for: A, B (uint16) and C of `out`."""
    return _SIGNATURES[out]


def _launchable(kernel, device_id: int):
    """(function, stream) of a GEMM kernel, compiled for uint16 A and B and its C."""
    return compiled_launchable(kernel, _signature(kernel.config["out"]), kernel.shared_bytes,
                               device_id)


def _launchable_sum(kind: str, out: str, device_id: int):
    """(function, stream) of the split-K sum for a kind and an output."""
    signature = (float32[:, ::1], _SIGNATURES[out][2])  # the slices' sums, C
    return compiled_launchable(_sum_slices_kernel(kind, out), signature, 0, device_id)


def _argument(x):
    """A C-contiguous 2-D torch tensor as a compiled kernel takes it."""
    return matrix_argument(x.data_ptr(), x.shape[0], x.shape[1], x.element_size())


def launch_torch(a, b, c, config: dict, slices: int = 1, parts=None):
    """C = A B on CUDA torch tensors a (M x K), b (K x N, or N x K with the
    configuration's b_transposed) of halves and c (M x N, halves or float32),
    C-contiguous, K and N multiples of 8, unchecked,
    as straight launches of the compiled kernels (benchmarks time this beside
    half_matmul). With slices > 1, K is split: `parts`, float32 of slices * M
    x N, takes the partial sums, which a second kernel adds into c."""
    device = current_gpu()
    m, n = c.shape
    if slices == 1:
        kernel = kernel_for(config)
        function, stream = _launchable(kernel, device)
        core_launch()(stream, launch_config(kernel.blocks(m, n), kernel.threads,
                                            kernel.shared_bytes),
                      function, *_argument(a), *_argument(b), *_argument(c))
        return c
    kernel = kernel_for(dict(config, out="float32"))
    function, stream = _launchable(kernel, device)
    core_launch()(stream, launch_config((kernel.blocks(m, n), slices), kernel.threads,
                                        kernel.shared_bytes),
                  function, *_argument(a), *_argument(b), *_argument(parts))
    function, stream = _launchable_sum(config["kind"], config["out"], device)
    core_launch()(stream, launch_config(-(-m * n // 2 // SUM_THREADS), SUM_THREADS), function,
                  *_argument(parts), *_argument(c))
    return c


def launch_arrays(a, b, c, config: dict, slices: int = 1):
    """The same for Numba device arrays or numpy arrays (the simulator's way):
    a and b of uint16 bits, c uint16 or float32."""
    m, n = c.shape
    forget_earlier_moves()
    if slices == 1:
        kernel = kernel_for(config)
        launch_with_shared(kernel, kernel.blocks(m, n), kernel.threads, kernel.shared_bytes,
                           a, b, c)
        return c
    kernel = kernel_for(dict(config, out="float32"))
    parts = (cuda.device_array if on_gpu() else np.empty)((slices * m, n), dtype=np.float32)
    launch_with_shared(kernel, (kernel.blocks(m, n), slices), kernel.threads,
                       kernel.shared_bytes, a, b, parts)
    sum_slices = _sum_slices_kernel(config["kind"], config["out"])
    sum_slices[-(-m * n // 2 // SUM_THREADS), SUM_THREADS](parts, c)
    return c


def _check(a, b, out_dtype, a_transposed=False, b_transposed=False):
    """(dtype name, out dtype name, m, n, k) if a and b can be multiplied; else
    ValueError naming what is accepted."""
    for name, x in (("a", a), ("b", b)):
        if not (is_torch_tensor(x) or isinstance(x, np.ndarray)):
            raise ValueError(f"{name} must be a torch tensor or a numpy array, got {type(x)}")
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(x.shape)}")
        if _dtype_name(x.dtype) not in DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16 (half_matmul's dtypes; "
                             f"matmul takes float32), got {_dtype_name(x.dtype)}")
    if _dtype_name(a.dtype) != _dtype_name(b.dtype):
        raise ValueError(f"a and b must have one dtype, got {_dtype_name(a.dtype)} and "
                         f"{_dtype_name(b.dtype)}")
    if is_torch_tensor(a) != is_torch_tensor(b) or (is_torch_tensor(a)
                                                     and a.device != b.device):
        raise ValueError("a and b must both be torch tensors on one device, or both numpy")
    (m, k), (k2, n) = a.shape, b.shape
    if a_transposed:
        m, k = k, m
    if b_transposed:
        n, k2 = k2, n
    if k != k2:
        shown_a = f"a (transposed) is {k} x {m}" if a_transposed else f"a is {m} x {k}"
        shown_b = f"b (transposed) is {n} x {k2}" if b_transposed else f"b is {k2} x {n}"
        raise ValueError(f"inner dimensions must match: {shown_a}, {shown_b}")
    if not (m and n and k):
        raise ValueError(f"M, N and K must be positive; got {m}, {n} and {k}")
    dtype = _dtype_name(a.dtype)
    out = dtype if out_dtype is None else _dtype_name(out_dtype)
    if out not in (dtype, "float32"):
        raise ValueError(f"out_dtype must be None (the inputs' {dtype}) or float32, got {out}")
    return dtype, out, m, n, k


def _padded_to(x, rows: int, cols: int):
    """x (torch or numpy), C-contiguous, with zero rows and columns added up to
    rows x cols (the 16-byte copies need K and N in multiples of 8)."""
    if is_torch_tensor(x):
        import torch

        if tuple(x.shape) == (rows, cols):
            return x.contiguous()
        return torch.nn.functional.pad(x, (0, cols - x.shape[1], 0, rows - x.shape[0]))
    if x.shape == (rows, cols):
        return np.ascontiguousarray(x)
    out = np.zeros((rows, cols), dtype=x.dtype)
    out[:x.shape[0], :x.shape[1]] = x
    return out


def half_matmul(a, b, out_dtype=None, level: int = 7, config: dict | None = None,
                slices: int | None = None, a_transposed: bool = False,
                b_transposed: bool = False):
    """C = A B on the tensor cores, for fp16 or bf16 A (M x K) and B (K x N).

    The products are summed in float32 and C is rounded once, to the inputs'
    dtype (out_dtype None, the default) or kept in float32 (out_dtype
    float32). a and b: CUDA torch tensors on a GPU; on Numba's simulator,
    CPU torch tensors (fp16 or bf16) or numpy float16 arrays. C comes back
    in the same kind. Any positive M, N and K (K and N are padded with zeros
    to multiples of 8 when they are not).

    level: 3 to 7, the rungs of the ladder (hgemm_ladder's docstring says
    what each adds); 7, the default, is the fastest, and chooses its tiles
    and a split of K from the shape and the GPU (choose_config). config
    and slices: switches of hgemm_ladder.make_hgemm_kernel and a number of
    slices of K, to use instead of the level's (for benchmarks and the
    chapter's experiments). b_transposed: b is given as N x K (C = A B^T, the
    product of nn.Linear with its weight); a_transposed: a is given as K x M
    (C = A^T B, the product of a weight's gradient); each read as it is,
    without a copy (levels 5 to 7). Raises ValueError naming what is accepted.
    """
    if isinstance(level, bool) or level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, got {level!r}")
    for name, flag in (("a_transposed", a_transposed), ("b_transposed", b_transposed)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
        if flag and level < 5:
            raise ValueError(f"{name} needs level 5, 6 or 7 (ldmatrix and cp.async), got "
                             f"level {level}")
    dtype, out, m, n, k = _check(a, b, out_dtype, a_transposed, b_transposed)
    chosen, chosen_slices = choose_config(level, m, n, k)
    if slices is not None and (isinstance(slices, bool) or not isinstance(slices, int)
                               or not 1 <= slices <= MAX_SLICES):
        raise ValueError(f"slices must be a whole number from 1 to {MAX_SLICES}, got {slices!r}")
    slices = slices or (1 if config is not None else chosen_slices)
    full = check_config(dict(config if config is not None else chosen,
                             kind="f16" if dtype == "float16" else "bf16",
                             out="half" if out != "float32" else "float32",
                             a_transposed=a_transposed, b_transposed=b_transposed))
    kp, np_ = -(-k // CHUNK) * CHUNK, -(-n // CHUNK) * CHUNK
    # The dimension each row runs along padded to whole 16-byte copies (K,
    # or for A given as K x M, M; for B as K x N, N); the other needs none:
    # the kernel fills missing rows with zeros.
    a = _padded_to(a, k, -(-m // CHUNK) * CHUNK) if a_transposed else _padded_to(a, m, kp)
    b = _padded_to(b, n, kp) if b_transposed else _padded_to(b, kp, np_)
    if is_torch_tensor(a):
        return _torch_matmul(a, b, m, n, out, full, slices)
    c = np.zeros((m, np_), dtype=np.uint16 if out != "float32" else np.float32)
    if on_gpu():
        c = launch_arrays(cuda.to_device(a.view(np.uint16)), cuda.to_device(b.view(np.uint16)),
                          cuda.to_device(c), full, slices).copy_to_host()
    else:
        launch_arrays(a.view(np.uint16), b.view(np.uint16), c, full, slices)
    c = c[:, :n]
    return c.view(np.float16) if out == "float16" else c


def _torch_matmul(a, b, m, n, out, config, slices):
    """half_matmul for torch tensors (a and b already padded)."""
    import torch

    np_ = -(-n // CHUNK) * CHUNK
    c = torch.empty((m, np_), dtype=getattr(torch, out), device=a.device)
    if a.is_cuda:
        parts = None if slices == 1 else torch.empty((slices * m, np_), dtype=torch.float32,
                                                     device=a.device)
        launch_torch(a, b, c, config, slices, parts)
    elif on_gpu():
        raise ValueError("on a GPU, a and b must be CUDA tensors (a.cuda())")
    else:  # the simulator: the kernels read numpy arrays of bits
        def bits(x):
            return x.view(torch.int16).numpy().view(np.uint16)

        launch_arrays(bits(a), bits(b), bits(c) if out != "float32" else c.numpy(), config,
                      slices)
    return c[:, :n] if np_ != n else c
