"""Choose, once, between a real CUDA GPU and Numba's CUDA simulator.

Numba reads ``NUMBA_ENABLE_CUDASIM`` when ``numba.cuda`` is first imported, so
the choice must be made before that import. Every kernel module of the course
gets ``cuda`` from here::

    from gpucourse.device import cuda

and never imports ``numba.cuda`` itself. The choice is:

* ``GPUCOURSE_DEVICE=gpu``: use the GPU, and fail loudly if there is none;
* ``GPUCOURSE_DEVICE=sim``: use the simulator even if a GPU is present;
* unset or ``auto``: use the GPU when the CUDA driver reports one, else the
  simulator.

The probe asks the CUDA driver library directly (through ``ctypes``), which
costs milliseconds and imports nothing of Numba's.

Two platform facts are handled here so that no chapter has to know them:

* numba-cuda 0.30 calls ``numpy.row_stack``, which numpy 2.5 removed. On such
  a numpy, ``row_stack`` is put back as an alias of ``vstack`` (what it always
  was) before ``numba.cuda`` is imported.
* Numba's simulator gets two fixes before its first launch
  (``gpucourse.simulator``): barriers that wait for events instead of
  polling, and a lock around the creation of a block's shared arrays.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from functools import lru_cache

ENV_VAR = "GPUCOURSE_DEVICE"
ACCEPTED = ("auto", "gpu", "sim")


@dataclass(frozen=True)
class GPUInfo:
    """What the CUDA driver says about device 0."""

    name: str
    count: int


def _requested() -> str:
    value = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if value not in ACCEPTED:
        raise ValueError(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not understood; "
            f"accepted values are {', '.join(ACCEPTED)} (unset means auto)"
        )
    return value


def probe_gpu() -> GPUInfo | None:
    """Ask the CUDA driver for a GPU without importing Numba.

    Returns the name and count of CUDA devices, or None when there is no
    driver or no device.
    """
    for library in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            driver = ctypes.CDLL(library)
            break
        except OSError:
            continue
    else:
        return None
    try:
        if driver.cuInit(0) != 0:
            return None
        count = ctypes.c_int(0)
        if driver.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        device = ctypes.c_int(0)
        if driver.cuDeviceGet(ctypes.byref(device), 0) != 0:
            return GPUInfo(name="CUDA device 0", count=count.value)
        name = ctypes.create_string_buffer(256)
        driver.cuDeviceGetName(name, len(name), device)
        return GPUInfo(name=name.value.decode(errors="replace"), count=count.value)
    except (AttributeError, OSError):
        return None


def _patch_numpy_for_numba_cuda() -> None:
    """numba-cuda 0.30 uses ``np.row_stack``; numpy 2.5 removed the alias."""
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


@lru_cache(maxsize=1)
def mode() -> str:
    """Return ``"gpu"`` or ``"sim"``, deciding (and configuring Numba) once."""
    requested = _requested()
    already_imported = "numba.cuda" in sys.modules
    if already_imported:
        # Someone imported numba.cuda first: its setting stands, and a forced
        # request that disagrees with it is an error rather than a surprise.
        from numba.cuda.core import config

        actual = "sim" if config.ENABLE_CUDASIM else "gpu"
        if requested not in ("auto", actual):
            raise RuntimeError(
                f"{ENV_VAR}={requested} was asked for, but numba.cuda was already "
                f"imported in {actual} mode; import gpucourse.device before numba.cuda"
            )
        return actual

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and requested == "auto":
        chosen = "sim"
    elif requested == "auto":
        chosen = "gpu" if probe_gpu() is not None else "sim"
    else:
        chosen = requested

    if chosen == "gpu" and probe_gpu() is None:
        raise RuntimeError(
            f"{ENV_VAR}=gpu was asked for, but the CUDA driver reports no GPU; "
            f"unset {ENV_VAR} (or set it to sim) to use Numba's CUDA simulator"
        )
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if chosen == "sim" else "0"
    _patch_numpy_for_numba_cuda()
    return chosen


def on_gpu() -> bool:
    """True when kernels run on a real GPU, False on the simulator."""
    return mode() == "gpu"


def get_cuda():
    """Return the ``numba.cuda`` module, configured for the chosen mode."""
    chosen = mode()
    from numba import cuda as numba_cuda

    if chosen == "sim":
        from gpucourse import simulator

        simulator.install()
    return numba_cuda


def describe() -> str:
    """One line saying where kernels run, for the top of every chapter."""
    if mode() == "sim":
        return f"Numba's CUDA simulator, on the CPU ({ENV_VAR}=gpu runs on an NVIDIA GPU)"
    numba_cuda = get_cuda()
    device = numba_cuda.get_current_device()
    name = device.name.decode() if isinstance(device.name, bytes) else device.name
    major, minor = device.compute_capability
    return f"GPU: {name} (compute capability {major}.{minor})"


def __getattr__(name: str):
    # ``from gpucourse.device import cuda`` resolves lazily, after the choice.
    if name == "cuda":
        return get_cuda()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
