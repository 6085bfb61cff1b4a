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
* The simulator runs one OS thread per CUDA thread and its barriers busy-wait;
  a shorter thread switch interval makes it several times faster.
* The simulator's ``cuda.shared.array`` looks up the block's array for the
  calling line and creates it if it is missing, without a lock. Two threads
  that reach the line at the same moment can both create one, and the loser
  then works on a private copy that nobody else sees: a wrong answer, now and
  then (it showed as garbage in one row of a FlashAttention test, once in
  several hundred runs). The lookup is made under a lock here.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from functools import lru_cache

ENV_VAR = "GPUCOURSE_DEVICE"
ACCEPTED = ("auto", "gpu", "sim")
SIMULATOR_SWITCH_INTERVAL_S = 1e-4


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
    if chosen == "sim":
        sys.setswitchinterval(SIMULATOR_SWITCH_INTERVAL_S)
    _patch_numpy_for_numba_cuda()
    return chosen


def on_gpu() -> bool:
    """True when kernels run on a real GPU, False on the simulator."""
    return mode() == "gpu"


def _lock_simulator_shared_arrays() -> None:
    """Make the simulator's shared-array lookup atomic (see the module notes).

    The replacement keeps the simulator's rule (one array per block and source
    line, or the dynamic buffer for shape 0) and only adds the lock. It names
    the calling line itself, since a wrapper around the original would make
    every allocation look as if it came from the wrapper's line.
    """
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_gpucourse_locked", False):
        return
    original = shared.array

    def empty_array(block, shape, dtype, frame):
        return kernelapi.np.empty(shape, dtype)

    array = _shared_array_by_calling_line(empty_array, original)
    array._gpucourse_locked = True
    array.__doc__ = original.__doc__
    shared.array = array


def _shared_array_by_calling_line(make_array, original=None):
    """A replacement for the simulator's ``cuda.shared.array``: one array per
    block and calling source line, looked up under a lock, made by
    ``make_array(block, shape, dtype, frame)`` (`frame` the caller's) the first
    time a block's threads reach that line. With `original`, aligned arrays and
    the dynamic buffer (shape 0) are left to it. Used here to lock the lookup
    and by gpucourse.grader.tracing to count the accesses to shared arrays."""
    import threading

    from numba.cuda.simulator import kernelapi

    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if original is not None and (alignment is not None or shape == 0):
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            found = self._allocations.get(caller)
            if found is None:
                found = self._allocations[caller] = make_array(self, shape, dtype, frame)
        return found

    return array


def get_cuda():
    """Return the ``numba.cuda`` module, configured for the chosen mode."""
    chosen = mode()
    from numba import cuda as numba_cuda

    if chosen == "sim":
        _lock_simulator_shared_arrays()
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
