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
from gpucourse.kernels.launch import (core_launch, current_gpu, is_torch_tensor, launch_config,
                                      launchable_with_shared, matrix_argument)
from gpucourse.kernels.tensor_cores.hgemm_ladder import (CHUNK, LEVELS, SIMULATOR_TILES,
                                                        check_config, make_hgemm_kernel)
from gpucourse.kernels.tensor_cores.moves import forget_earlier_moves

DTYPES = ("float16", "bfloat16")
OUT_DTYPES = ("float16", "bfloat16", "float32")


def _dtype_name(dtype) -> str:
    """'float16', 'bfloat16', 'float32', ... for a torch or numpy dtype, or a name."""
    return str(dtype).replace("torch.", "")


def choose_config(level: int, m: int, n: int, k: int) -> dict:
    """The configuration a level runs with for an m x n x k product: the
    level's own switches (LEVELS); on the simulator, at SIMULATOR_TILES."""
    config = dict(LEVELS[level])
    if not on_gpu():
        config.update(SIMULATOR_TILES)
    return config


_KERNELS: dict = {}


def kernel_for(config: dict):
    """The kernel of a full configuration, built once."""
    key = tuple(sorted(config.items()))
    if key not in _KERNELS:
        _KERNELS[key] = make_hgemm_kernel(**config)
    return _KERNELS[key]


_LAUNCHABLE: dict = {}


def _launchable(kernel, device_id: int):
    """(function, stream) of a kernel compiled for uint16 A and B and its C."""
    key = (id(kernel), device_id)
    if key not in _LAUNCHABLE:
        from numba import float32, uint16

        out = uint16[:, ::1] if kernel.config["out"] == "half" else float32[:, ::1]
        kernel.compile((uint16[:, ::1], uint16[:, ::1], out))
        _LAUNCHABLE[key] = launchable_with_shared(kernel, kernel.shared_bytes, device_id)
    return _LAUNCHABLE[key]


def launch_torch(a, b, c, config: dict):
    """C = A B on CUDA torch tensors a (M x K), b (K x N) of halves and c (M x
    N, halves or float32), C-contiguous, K and N multiples of 8, unchecked:
    one launch of the configuration's kernel (benchmarks time this beside
    half_matmul)."""
    kernel = kernel_for(config)
    function, stream = _launchable(kernel, current_gpu())
    m, k = a.shape
    n = b.shape[1]
    core_launch()(stream, launch_config(kernel.blocks(m, n), kernel.threads, kernel.shared_bytes),
                  function, *matrix_argument(a.data_ptr(), m, k, 2),
                  *matrix_argument(b.data_ptr(), k, n, 2),
                  *matrix_argument(c.data_ptr(), m, n, c.element_size()))
    return c


def launch_arrays(a, b, c, config: dict):
    """The same for Numba device arrays or numpy arrays (the simulator's way):
    a and b of uint16 bits, c uint16 or float32."""
    kernel = kernel_for(config)
    forget_earlier_moves()
    m, n = c.shape
    kernel[kernel.blocks(m, n), kernel.threads, 0, kernel.shared_bytes](a, b, c)
    return c


def _check(a, b, out_dtype):
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
    if k != k2:
        raise ValueError(f"inner dimensions must match: a is {m} x {k}, b is {k2} x {n}")
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
    out = np.zeros((rows, cols), dtype=x.dtype)
    out[:x.shape[0], :x.shape[1]] = x
    return out


def half_matmul(a, b, out_dtype=None, level: int = 7, config: dict | None = None):
    """C = A B on the tensor cores, for fp16 or bf16 A (M x K) and B (K x N).

    The products are summed in float32 and C is rounded once, to the inputs'
    dtype (out_dtype None, the default) or kept in float32 (out_dtype
    float32). a and b: CUDA torch tensors on a GPU; on Numba's simulator,
    CPU torch tensors (fp16 or bf16) or numpy float16 arrays. C comes back
    in the same kind. Any positive M, N and K (K and N are padded with zeros
    to multiples of 8 when they are not).

    level: 3 to 7, the rungs of the ladder (hgemm_ladder's docstring says
    what each adds); 7, the default, is the fastest. config: switches of
    hgemm_ladder.make_hgemm_kernel to use instead of the level's (for
    benchmarks and the chapter's experiments).
    Raises ValueError naming what is accepted.
    """
    if isinstance(level, bool) or level not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, got {level!r}")
    dtype, out, m, n, k = _check(a, b, out_dtype)
    full = check_config(dict(config if config is not None else choose_config(level, m, n, k),
                             kind="f16" if dtype == "float16" else "bf16",
                             out="half" if out != "float32" else "float32"))
    kp, np_ = -(-k // CHUNK) * CHUNK, -(-n // CHUNK) * CHUNK
    a, b = _padded_to(a, m, kp), _padded_to(b, kp, np_)
    if is_torch_tensor(a):
        return _torch_matmul(a, b, m, n, out, full)
    if on_gpu():
        a_bits, b_bits = cuda.to_device(a.view(np.uint16)), cuda.to_device(b.view(np.uint16))
    else:
        a_bits, b_bits = a.view(np.uint16), b.view(np.uint16)
    c = np.zeros((m, np_), dtype=np.uint16 if out != "float32" else np.float32)
    if on_gpu():
        c = launch_arrays(a_bits, b_bits, cuda.to_device(c), full).copy_to_host()
    else:
        launch_arrays(a_bits, b_bits, c, full)
    c = c[:, :n]
    return c.view(np.float16) if out == "float16" else c


def _torch_matmul(a, b, m, n, out, config):
    """half_matmul for torch tensors (a and b already padded)."""
    import torch

    np_ = b.shape[1]
    c = torch.empty((m, np_), dtype=getattr(torch, out), device=a.device)
    if a.is_cuda:
        launch_torch(a, b, c, config)
    elif on_gpu():
        raise ValueError("on a GPU, a and b must be CUDA tensors (a.cuda())")
    else:  # the simulator: the kernels read numpy arrays of bits
        bits = c.view(torch.int16) if out != "float32" else c
        launch_arrays(a.view(torch.int16).numpy().view(np.uint16),
                      b.view(torch.int16).numpy().view(np.uint16),
                      bits.numpy().view(np.uint16) if out != "float32" else bits.numpy(), config)
    return c[:, :n] if np_ != n else c
