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
