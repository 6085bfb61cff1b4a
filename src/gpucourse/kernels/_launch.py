"""What the kernel modules share to launch at the cost of a launch (a GPU only).

Numba's ``kernel[grid, block](...)`` re-checks every argument and looks up the
context on each call: tens of microseconds of Python, which dominate a small
product or a short sequence. The kernels' entry points (``sgemm.matmul``,
``attention.flash_attention``) instead hand ``cuda.core.launch`` the compiled
function and the arguments in the form it takes, found once per GPU.
"""

from __future__ import annotations

from functools import lru_cache


def current_gpu() -> int:
    """The GPU of the calling thread's current CUDA context: the one a launch
    runs on, and the one Numba reports (it attaches to the current context).
    Asked of the driver directly, since Numba's `get_current_device` costs
    several microseconds of Python on every call (and so would importing the
    driver's bindings on every call: they are looked up once, `_driver`)."""
    get_device, success = _driver()
    error, device = get_device()
    if error != success:  # no context yet: Numba makes one
        from gpucourse.device import cuda

        return cuda.get_current_device().id
    return int(device)


@lru_cache(maxsize=None)
def _driver() -> tuple:
    """(cuCtxGetDevice, CUDA_SUCCESS) from the CUDA driver's Python bindings."""
    from cuda.bindings import driver

    return driver.cuCtxGetDevice, driver.CUresult.CUDA_SUCCESS


@lru_cache(maxsize=None)
def core_launch():
    """`cuda.core.launch`, imported once (an import statement on every call costs
    a microsecond or two of Python)."""
    from cuda.core import launch

    return launch


@lru_cache(maxsize=1024)
def launch_config(grid, block, shared: int = 0):
    """cuda.core's LaunchConfig for `grid` and `block` (ints, or tuples of up to
    three) and `shared` bytes of dynamic shared memory, built once per
    distinct launch shape (building one costs microseconds of Python)."""
    from cuda.core import LaunchConfig

    grid = grid if isinstance(grid, tuple) else (grid,)
    block = block if isinstance(block, tuple) else (block,)
    return LaunchConfig(grid=grid + (1,) * (3 - len(grid)), block=block + (1,) * (3 - len(block)),
                        shmem_size=shared)


def launchable(kernel, signature) -> tuple:
    """(function, stream): `kernel` (a Numba dispatcher) compiled for `signature`
    on the current GPU, and Numba's default stream, in the forms
    `cuda.core.launch` takes."""
    compiled = kernel.compile(signature)
    return compiled._codelibrary.get_cufunc().kernel, kernel.configure((1,), (1,)).stream


def flat_argument(pointer: int, size: int, itemsize: int) -> tuple:
    """A C-contiguous 1D array as a compiled kernel takes it (Numba's array
    model: meminfo, parent, nitems, itemsize, data, shape, strides)."""
    return (0, 0, size, itemsize, pointer, size, itemsize)


def matrix_argument(pointer: int, rows: int, cols: int, itemsize: int = 4,
                    row_stride: int | None = None) -> tuple:
    """A 2D array as a compiled kernel takes it: C-contiguous, or with rows
    `row_stride` elements apart (a slice of columns; the kernel must then be
    compiled for layout "A")."""
    return (0, 0, rows * cols, itemsize, pointer, rows, cols, (row_stride or cols) * itemsize,
            itemsize)

