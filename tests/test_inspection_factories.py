"""gpucourse.grader.tracing and .ptx with kernel factories, decorators and vector-only loads.

A kernel whose tile sizes are captured from an enclosing function (how the
simulator lets shared-array sizes vary) compiles to PTX with those values as
constants; decorators with their own options do not get in the way; the
structure check can demand that every global load is 128 bits wide.
"""

import re
import signal
import threading

import numpy as np
import pytest

from gpucourse.device import cuda, on_gpu
from gpucourse.grader import ptx, tracing
from gpucourse.kernels import vector
from gpucourse.kernels.vector import load_float4
from numba import float32

OPTIONS = {"device": True}  # a decorator argument the compiler process cannot see


def make_scaled_copy(width, factor):
    elements = 2 * width  # a size computed outside the kernel, as the simulator wants

    @cuda.jit(**OPTIONS)
    def scale(x):
        return x * factor

    # Staged through shared memory like test_inspection.py's reverse_block: a
    # deliberate variant, its sizes captured from the factory.
    @cuda.jit
    def scaled_copy(a, out):
        tile = cuda.shared.array(elements, float32)
        i = cuda.threadIdx.x
        tile[i] = a[i]
        cuda.syncthreads()
        for j in range(width):
            out[i] = scale(tile[j])

    return scaled_copy


def test_a_factory_kernel_compiles_with_its_captured_values_as_constants():
    kernel = make_scaled_copy(8, 3.0)
    source, name = ptx.kernel_module_source(kernel)
    assert name == "scaled_copy"
    assert re.search(r"^elements = 16$", source, re.M) and re.search(r"^factor = 3.0$", source, re.M)
    assert "OPTIONS" not in source  # the decorator line is not carried over
    facts = ptx.facts(kernel, np.zeros(8, np.float32), np.zeros(8, np.float32))
    assert facts.shared_bytes == 16 * 4 and facts.barriers == 1


def test_a_factory_kernel_runs_and_is_traced_on_the_simulator():
    a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run = tracing.trace(make_scaled_copy(8, 2.0), 1, 8, a, out)
    np.testing.assert_array_equal(out, np.full(8, 14.0))
    run.expect(reads={"a": 1}, writes={"out": 8}, shared_reads=8)


def test_one_name_with_two_values_is_refused():
    width = 4

    @cuda.jit(device=True)
    def first(x):
        return x * width

    def make(width):
        @cuda.jit
        def kernel(out):
            out[0] = first(float32(width))

        return kernel

    with pytest.raises(ptx.KernelSourceError, match="sees width as"):
        ptx.kernel_module_source(make(8))


@cuda.jit
def vector_and_scalar_loads(a, out):
    x0, x1, x2, x3 = load_float4(a, 0, 0)
    out[0, 0] = x0 + x1 + x2 + x3 + a[1, 1]


@cuda.jit
def vector_loads_only(a, out):
    x0, x1, x2, x3 = load_float4(a, 0, 0)
    out[0, 0] = x0 + x1 + x2 + x3


def test_every_global_load_can_be_required_to_be_128_bits():
    example = (np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32))
    ptx.expect_structure(vector_loads_only, *example, vector_global_loads=True,
                         max_scalar_global_loads=0)
    with pytest.raises(AssertionError, match="1 narrower loads from global memory beside 1"):
        ptx.expect_structure(vector_and_scalar_loads, *example, what="level 5",
                             vector_global_loads=True, max_scalar_global_loads=0)


def test_the_compiler_can_be_started_ahead():
    ptx.start_compiler()
    ptx.start_compiler()  # a second call keeps the running process
    assert ptx.facts(vector_loads_only, np.zeros((4, 4), np.float32),
                     np.zeros((4, 4), np.float32)).vector_global_loads == 1


@cuda.jit(device=True)
def sum_of_four(a, col):
    x0, x1, x2, x3 = load_float4(a, 0, col)
    return x0 + x1 + x2 + x3


def make_summing(col):
    @cuda.jit
    def summing(a, out):
        y0, y1, y2, y3 = load_float4(a, 0, col)  # captured helper use and a device function
        out[0] = y0 + y1 + y2 + y3 + sum_of_four(a, 0)

    return summing


def test_tracing_runs_the_vector_helpers_as_python_and_puts_them_back():
    a, out = np.arange(8, dtype=np.float32).reshape(1, 8), np.zeros(1, np.float32)
    run = tracing.trace(make_summing(4), 1, 1, a, out)
    assert out[0] == (4 + 5 + 6 + 7) + (0 + 1 + 2 + 3)
    run.expect(reads={"a": 8})
    assert run.counts("a")[((0, 0, 0), (0, 0, 0))] == 8
    assert globals()["load_float4"] is vector.load_float4
    assert globals()["sum_of_four"] is sum_of_four


@cuda.jit
def spins(out):
    while True:
        pass


@cuda.jit
def one_fails_the_others_spin(out):
    if cuda.threadIdx.x == 0:
        out[5] = 1.0  # out of range: this thread raises
    while True:
        pass


def _still_running():
    from numba.cuda.simulator.kernel import BlockThread

    for thread in threading.enumerate():
        if isinstance(thread, BlockThread):
            thread.join(timeout=5)
    return [t for t in threading.enumerate() if isinstance(t, BlockThread) and t.is_alive()]


# The stopped threads end with SystemExit, which Python's thread hook ignores and pytest's reports.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.skipif(on_gpu(), reason="a spinning kernel on a GPU cannot be stopped this way")
def test_an_interrupted_launch_leaves_no_simulated_thread_running():
    # A real SIGINT, as Jupyter sends when a cell's time limit runs out, after
    # half a second (and again every 5 s should the launch not have started
    # yet): it wakes the main thread wherever it waits (_thread.interrupt_main
    # only sets a flag, which a thread blocked in a join never reads: under
    # load this test once hung there). Once the main thread has it, no more:
    # a second SIGINT during the stopping of the threads (which under load
    # took over 5 s once) would cut that short and leave one running.
    done, received = threading.Event(), threading.Event()

    def interrupt():
        wait = 0.5
        while not done.wait(wait) and not received.is_set():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            wait = 5.0

    def on_sigint(signum, frame):
        received.set()
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, on_sigint)
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with tracing.stopping_simulated_threads():
                spins[1, 8](np.zeros(1, np.float32))
    finally:
        done.set()
        signal.signal(signal.SIGINT, before)
    assert not _still_running()


# The stopped threads end with SystemExit, which Python's thread hook ignores and pytest's reports.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.skipif(on_gpu(), reason="a spinning kernel on a GPU cannot be stopped this way")
def test_a_failing_thread_takes_its_spinning_neighbours_down_with_it():
    with pytest.raises(IndexError):
        with tracing.stopping_simulated_threads():
            one_fails_the_others_spin[1, 8](np.zeros(1, np.float32))
    assert not _still_running()


@pytest.mark.parametrize("level, split, name", [(6, False, "sgemm_vectorized"),
                                                (6, True, "sgemm_vectorized_split"),
                                                (7, False, "sgemm_warp_tiled"),
                                                (7, True, "sgemm_warp_tiled_split")])
def test_the_library_kernels_named_by_their_level_compile_from_their_source(level, split, name):
    # Levels 5-7 build their kernels with one factory (sgemm.building_blocks._make_kernel)
    # that names each kernel after its level: the module written for the PTX
    # compiler must define the kernel under that name.
    from gpucourse.kernels import sgemm

    if split:
        kernel = sgemm.split_kernel_for(level, (256, 256, 256), 2)[0]
    else:
        kernel = sgemm.kernel_for(level, (256, 256, 256))[0]
    source, found = ptx.kernel_module_source(kernel)
    assert found == name
    # The module binds the kernel's name at its top level, by a def or (for a
    # renamed function) an assignment, so that the compiler process finds it.
    assert re.search(rf"^(def {name}\(|{name} = )", source, re.M), f"{name} is not defined"
    compile(source, "<kernel module>", "exec")  # and it is valid Python
