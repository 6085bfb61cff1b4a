"""gpucourse.device: the GPU-or-simulator choice, made once before numba.cuda loads.

Each case runs in a fresh interpreter, because the choice is global to a
process (Numba reads its setting when numba.cuda is first imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from gpucourse.device import probe_gpu

HAS_GPU = probe_gpu() is not None


def run_python(code: str, device: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GPUCOURSE_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    if device is not None:
        env["GPUCOURSE_DEVICE"] = device
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_importing_the_package_loads_no_numba_or_torch():
    done = run_python("""
        import sys
        import gpucourse, gpucourse.device, gpucourse.course, gpucourse.grading
        loaded = [m for m in ("numba", "numba.cuda", "torch") if m in sys.modules]
        assert not loaded, loaded
        """, device=None)
    assert done.returncode == 0, done.stderr


def test_sim_runs_a_kernel_on_the_simulator():
    done = run_python("""
        import numpy as np
        from gpucourse import device
        from gpucourse.device import cuda

        @cuda.jit
        def add_one(x):
            i = cuda.grid(1)
            if i < x.size:
                x[i] += 1.0

        x = np.arange(37, dtype=np.float32)
        add_one[2, 32](x)
        assert np.array_equal(x, np.arange(37, dtype=np.float32) + 1)
        from numba.cuda.core import config
        assert config.ENABLE_CUDASIM
        print(device.mode(), "|", device.describe())
        """, device="sim")
    assert done.returncode == 0, done.stderr
    mode, description = done.stdout.strip().split(" | ")
    assert mode == "sim"
    assert "simulator" in description


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU, so auto picks it")
def test_auto_picks_the_simulator_without_a_gpu():
    done = run_python("from gpucourse import device; print(device.mode())", device=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sim"


@pytest.mark.skipif(not HAS_GPU, reason="no GPU on this machine")
def test_auto_picks_the_gpu_and_names_it():
    done = run_python("from gpucourse import device; print(device.mode(), '|', device.describe())",
                      device=None)
    assert done.returncode == 0, done.stderr
    mode, description = done.stdout.strip().split(" | ")
    assert mode == "gpu"
    assert probe_gpu().name in description


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_forcing_gpu_without_one_is_a_clear_error():
    done = run_python("from gpucourse import device; device.mode()", device="gpu")
    assert done.returncode != 0
    assert "RuntimeError" in done.stderr and "no GPU" in done.stderr
    assert "GPUCOURSE_DEVICE" in done.stderr


def test_an_unknown_choice_names_the_variable_and_the_accepted_values():
    done = run_python("from gpucourse import device; device.mode()", device="tpu")
    assert done.returncode != 0
    assert "ValueError" in done.stderr
    for word in ("GPUCOURSE_DEVICE", "'tpu'", "auto", "gpu", "sim"):
        assert word in done.stderr


def test_a_conflicting_earlier_import_of_numba_cuda_is_reported():
    # numba.cuda loaded in simulator mode by someone else, then the GPU demanded.
    done = run_python("""
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        import numba.cuda
        from gpucourse import device
        device.mode()
        """, device="gpu")
    assert done.returncode != 0
    assert "already imported" in done.stderr


def test_numpy_without_row_stack_gets_it_back_as_vstack():
    # numpy 2.5 removed row_stack, which numba-cuda 0.30 still calls.
    done = run_python("""
        import numpy as np
        if hasattr(np, "row_stack"):
            del np.row_stack
        from gpucourse import device
        device.mode()
        assert np.row_stack is np.vstack
        from gpucourse.device import cuda
        print("ok")
        """, device="sim")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


SHARED_ARRAY_RACE = """
    import time
    import numpy as np
    from gpucourse.device import cuda
    from numba import float32

    class SlowLength:
        # A length that takes a while to read: every thread of the block is
        # then inside the simulator's shared-array allocation at once, which
        # is the moment two of them could each create their own array.
        def __index__(self):
            time.sleep(0.02)
            return 32

    SHAPE = (SlowLength(),)

    @cuda.jit
    def everyone_writes_then_reads(out):
        t = cuda.threadIdx.x
        tile = cuda.shared.array(SHAPE, float32)
        tile[t] = t
        cuda.syncthreads()
        seen = 0.0
        for i in range(32):
            seen += tile[i]
        out[t] = seen

    out = np.zeros(32, dtype=np.float32)
    everyone_writes_then_reads[1, 32](out)
    print(sorted(set(out.tolist())))
    """


def test_every_thread_of_a_block_gets_the_same_shared_array_on_the_simulator():
    # Numba's simulator creates a block's shared array on first use without a
    # lock; gpucourse.device adds one. With the race, threads that each made
    # their own array see only their own write, and out holds small partial sums.
    done = run_python(SHARED_ARRAY_RACE, device="sim")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([float(sum(range(32)))])


BARRIERS = """
    import threading, time
    import numpy as np
    from gpucourse.device import cuda

    @cuda.jit
    def barriers(out, slow):
        i = cuda.threadIdx.x
        if i == 0:
            time.sleep(slow)  # the others wait at the barrier meanwhile
        out[i] = i
        cuda.syncthreads()
        neighbour = out[(i + 1) % 64]  # written by another thread before the barrier
        cuda.syncthreads()
        out[i] += neighbour
        if i >= 32:
            return  # these end; the barrier below holds the others alone
        cuda.syncthreads()
        out[i] += 1000

    out = np.zeros(64, np.float32)
    started = time.thread_time()
    barriers[1, 64](out, 0.5)
    print(time.thread_time() - started)
    want = np.array([i + (i + 1) % 64 for i in range(64)], np.float32)
    want[:32] += 1000
    assert np.array_equal(out, want), out
"""


def test_the_simulator_waits_at_barriers_without_spinning():
    # gpucourse.simulator (installed by gpucourse.device) makes the simulator's
    # barriers event-driven: the thread that launched the block sleeps while one
    # thread works and the others wait (Numba's own loop polls them all the
    # while). The rules stay: a barrier opens when every thread still running
    # waits at it.
    done = run_python(BARRIERS, device="sim")
    assert done.returncode == 0, done.stderr
    launcher_cpu_s = float(done.stdout.split()[-1])
    assert launcher_cpu_s < 0.25, (f"the launching thread used {launcher_cpu_s:.2f} s of CPU "
                                   "while a thread slept 0.5 s: it polls")


def test_another_simulator_keeps_its_own_barriers():
    # gpucourse.simulator replaces the simulator's barrier only where its
    # classes hold what the replacement relies on (numba-cuda 0.30.4's); a
    # version whose classes differ keeps its own, slower but right.
    from types import SimpleNamespace

    from gpucourse import simulator

    class Block:
        def __init__(self, f, grid_dim, block_dim, debug):
            self.function, self.shape = f, block_dim  # other names than 0.30.4's

    class Thread:
        def __init__(self, manager):
            self._manager, self.abort, self.exception = manager, False, None
            self.syncthreads_event = self.syncthreads_blocked = None

        def run(self):
            self.exception = None

    assert not simulator._simulator_as_read(SimpleNamespace(BlockManager=Block, BlockThread=Thread))
    from numba.cuda.simulator import kernel as numba_simulator

    assert simulator._simulator_as_read(numba_simulator)  # the pinned version's
