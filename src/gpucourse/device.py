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
* The simulator runs one OS thread per CUDA thread, and the thread that runs
  a block busy-polls every other thread to find when all of them wait at a
  barrier: it takes the interpreter's lock from the threads doing the work
  (half the time of an attention backward on a small problem went to it).
  Here the barrier is event-driven instead: a thread that reaches
  ``syncthreads`` or ends says so, and the block's thread sleeps until one
  does (``_event_driven_barriers``; the interpreter's default switch
  interval then serves best). Attention's kernels run 3-5 times
  faster, level 6's SGEMM about 3 times.
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
        _event_driven_barriers()
    return numba_cuda


def _event_driven_barriers() -> None:
    """Make the simulator's barriers wait for events instead of polling.

    Numba's simulator runs a block by starting a thread per CUDA thread and
    then looping, in the launching thread, over every thread of the block to
    see whether all the live ones wait in ``syncthreads`` (then it wakes
    them) or one has raised (then it stops the others and raises). That
    loop never sleeps: it holds the interpreter's lock as often as the
    threads that do the work. Here each thread posts to its block's queue
    when it reaches a barrier and when it ends, and the launching thread
    sleeps on the queue between posts. The rules are the simulator's own: a
    barrier opens when every thread still running waits at it; a thread that
    raises stops the block and its exception is raised; the launch returns
    when every thread has ended (joined, so that anything a thread does as
    it ends, such as the sanitizer's bookkeeping, is done). The per-thread
    ``syncthreads_event`` and ``abort`` flag keep their meaning, so code that
    wakes a waiting thread to stop it still works. A post is one call into
    C (``SimpleQueue.put``) and no thread holds a lock around it: a thread
    stopped by an exception sent to it (``grader.tracing``) cannot leave the
    block's bookkeeping locked.
    """
    import queue

    import numpy as np
    from numba.cuda.simulator import kernel as simulator

    if getattr(simulator.BlockManager.run, "_gpucourse_event_driven", False):
        return
    run_thread = simulator.BlockThread.run

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        self.syncthreads_blocked = True
        self._manager._gpucourse_posts.put((self, False))  # waiting
        self.syncthreads_event.wait()
        self.syncthreads_event.clear()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def thread_run(self):
        try:
            run_thread(self)  # keeps an exception in self.exception
        finally:
            self._manager._gpucourse_posts.put((self, True))  # ended

    def block_run(self, grid_point, *args):
        posts = self._gpucourse_posts = queue.SimpleQueue()

        def target():
            self._f(*args)

        threads = [simulator.BlockThread(target, self, grid_point, point, self._debug)
                   for point in np.ndindex(*self._block_dim)]
        for thread in threads:
            thread.start()
        running, waiting = len(threads), []
        while running:
            try:  # a timeout now and then, so that a signal is seen promptly
                thread, ended = posts.get(timeout=1.0)
            except queue.Empty:
                continue
            if not ended:
                waiting.append(thread)
            elif thread.exception:
                for other in threads:  # wake and stop the others
                    other.abort = True
                    other.syncthreads_blocked = False
                    other.syncthreads_event.set()
                raise thread.exception[0].with_traceback(thread.exception[1])
            else:
                running -= 1
            if running and len(waiting) == running:  # everyone at the barrier
                for thread in waiting:
                    thread.syncthreads_blocked = False
                for thread in waiting:
                    thread.syncthreads_event.set()
                waiting = []
        for thread in threads:
            thread.join()

    block_run._gpucourse_event_driven = True
    simulator.BlockThread.syncthreads = syncthreads
    simulator.BlockThread.run = thread_run
    simulator.BlockManager.run = block_run


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
