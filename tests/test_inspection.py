"""The kernel inspection tools behind the kernel exercises' graders.

Counting: each simulated thread's reads and writes are recorded exactly, a
thread that does the whole job (NumPy in disguise) is named in the message,
and an out-of-range index names the thread instead of wrapping around.
Compiling: PTX for a real GPU target is produced on this CPU-only machine and
shows shared memory, barriers, 128-bit loads and accumulators; a kernel that
cannot run on a GPU fails with the compiler's message.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucourse.device import cuda, on_gpu
from gpucourse.grader import ptx, tracing
from gpucourse.kernels.vector import load_float4
from numba import float32

BLOCK = 4
TM = 4


# Deliberate variants of test_puzzles.py's add_one, add_one_unguarded and
# swap_halves_shared (and of test_inspection_factories.py's scaled_copy): each file
# keeps its own small kernels, since the PTX compiler reads a kernel's own file.
@cuda.jit
def add_one(a, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < a.size:
        out[i] = a[i] + 1


@cuda.jit
def whole_job_in_thread_zero(a, out):
    if cuda.threadIdx.x == 0 and cuda.blockIdx.x == 0:
        out[:] = np.asarray(a) + 1


@cuda.jit
def unguarded(a, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i] = a[i] + 1


@cuda.jit
def neighbours_sum(a, out):
    # Each thread reads three elements of a from global memory: no reuse.
    i = cuda.threadIdx.x
    if 0 < i < a.size - 1:
        out[i] = a[i - 1] + a[i] + a[i + 1]


@cuda.jit
def reverse_block(a, out):
    tile = cuda.shared.array(BLOCK, float32)
    i = cuda.threadIdx.x
    tile[i] = a[i]
    cuda.syncthreads()
    out[i] = tile[BLOCK - 1 - i]


@cuda.jit(device=True)
def twice(x):
    return 2 * x


@cuda.jit
def column_of_four(a, b, c):
    row = cuda.threadIdx.x
    acc = cuda.local.array(TM, float32)
    for i in range(TM):
        acc[i] = 0.0
    for k in range(a.shape[1]):
        x = a[row, k]
        for i in range(TM):
            acc[i] += x * b[k, i]
    for i in range(TM):
        c[row, i] = twice(acc[i])


@cuda.jit
def vector_rows(a, out):
    i = cuda.threadIdx.x
    x0, x1, x2, x3 = load_float4(a, i, 0)
    out[i] = x0 + x1 + x2 + x3


def numbers(n):
    return np.arange(n, dtype=np.float32)


def test_trace_counts_each_thread_and_writes_results_back():
    a, out = numbers(10), np.zeros(10, np.float32)
    run = tracing.trace(add_one, 3, 4, a, out)  # 12 threads for 10 elements
    assert np.array_equal(out, a + 1)
    assert len(run.threads) == 12
    assert run.counts("a")[((0, 0, 0), (2, 0, 0))] == 1
    assert run.counts("a")[((2, 0, 0), (3, 0, 0))] == 0  # thread 11 is past the end
    assert run.total("a") == 10 and run.total("out", "write") == 10
    assert np.array_equal(run.element_counts("a"), np.ones(10))
    run.expect(reads={"a": 1}, writes={"out": 1}, uses_shared=False)


def test_a_thread_doing_the_whole_job_is_named():
    a, out = numbers(8), np.zeros(8, np.float32)
    run = tracing.trace(whole_job_in_thread_zero, 2, 4, a, out)
    assert np.array_equal(out, a + 1)  # the values alone would pass
    with pytest.raises(AssertionError, match=r"block \(0, 0, 0\), thread \(0, 0, 0\) read 8 "
                                             r"elements of a \(a\[0\], a\[1\]"):
        run.expect(reads={"a": 1}, writes={"out": 1})


def test_rereading_neighbours_is_counted():
    a, out = numbers(6), np.zeros(6, np.float32)
    run = tracing.trace(neighbours_sum, 1, 6, a, out)
    assert run.most("a") == (3, ((0, 0, 0), (1, 0, 0)))
    with pytest.raises(AssertionError, match="read 3 elements of a .*at most 1 element of a"):
        run.expect(reads={"a": 1})


def test_out_of_range_and_negative_indices_name_the_thread():
    # 12 threads for 11 elements: only the last thread is out of range.
    with pytest.raises(IndexError, match=r"block \(2, 0, 0\), thread \(3, 0, 0\) used index "
                                         r"\(11,\) of a, whose shape is \(11,\)"):
        tracing.trace(unguarded, 3, 4, numbers(11), np.zeros(11, np.float32))
    with pytest.raises(IndexError, match="axis 0 must be in"):
        tracing.trace(cuda.jit(_negative), 1, 2, numbers(4), np.zeros(4, np.float32))


def _negative(a, out):
    out[cuda.threadIdx.x] = a[cuda.threadIdx.x - 1]


def test_shared_arrays_are_counted_under_their_names():
    a, out = numbers(BLOCK), np.zeros(BLOCK, np.float32)
    run = tracing.trace(reverse_block, 1, BLOCK, a, out)
    assert np.array_equal(out, a[::-1])
    assert run.shared_names() == ["shared tile"]
    run.expect(reads={"a": 1}, writes={"out": 1}, shared_reads=1, shared_writes=1,
               uses_shared=True)
    with pytest.raises(AssertionError, match="must not use shared memory; it declares "
                                             "shared tile"):
        run.expect(uses_shared=False)
    with pytest.raises(AssertionError, match="made 1 shared-memory reads"):
        run.expect(shared_reads=0)
    assert "shared tile" in run.table()


def test_trace_rejects_bad_launches():
    a, out = numbers(4), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="grid must be a whole number"):
        tracing.trace(add_one, 0, 4, a, out)
    with pytest.raises(ValueError, match="takes 2 arguments"):
        tracing.trace(add_one, 1, 4, a)
    with pytest.raises(ValueError, match="kernel must be a @cuda.jit function"):
        tracing.trace(len, 1, 4, a, out)
    run = tracing.trace(add_one, 1, 4, a, out)
    with pytest.raises(ValueError, match="name must be one of"):
        run.counts("b")
    with pytest.raises(ValueError, match="not an argument of the launch"):
        run.expect(reads={"b": 1})


def test_ptx_shows_shared_memory_and_barriers():
    found = ptx.expect_structure(reverse_block, numbers(BLOCK), numbers(BLOCK),
                                 shared=True, barriers=True, max_shared_bytes=64)
    assert found.shared_bytes == 4 * BLOCK and found.barriers == 1
    assert ".target sm_90" in found.text
    with pytest.raises(AssertionError, match="must stage tiles in shared memory"):
        ptx.expect_structure(add_one, numbers(4), numbers(4), shared=True)
    with pytest.raises(AssertionError, match="must synchronise its block"):
        ptx.expect_structure(add_one, numbers(4), numbers(4), barriers=True)


def test_ptx_counts_accumulators_and_vector_loads():
    a, b, c = (np.ones(s, np.float32) for s in ((4, 8), (8, 4), (4, 4)))
    found = ptx.expect_structure(column_of_four, a, b, c, min_fma=TM, max_local_bytes=0)
    assert found.fma >= TM and found.local_bytes == 0
    with pytest.raises(AssertionError, match="at least 64 accumulators"):
        ptx.expect_structure(column_of_four, a, b, c, min_fma=64)
    vector = ptx.expect_structure(vector_rows, a, np.zeros(4, np.float32),
                                  vector_global_loads=True)
    assert vector.vector_global_loads == 1
    with pytest.raises(AssertionError, match="must load A and B 128 bits at a time"):
        ptx.expect_structure(add_one, numbers(4), numbers(4), vector_global_loads=True)
    assert ptx.facts(reverse_block, numbers(4), numbers(4), cc=(8, 0)).shared_bytes == 16


def test_a_kernel_that_cannot_run_on_a_gpu_fails_with_the_compilers_message():
    with pytest.raises(AssertionError, match="does not compile for a GPU"):
        ptx.ptx(whole_job_in_thread_zero, numbers(4), numbers(4))


@pytest.mark.skipif(on_gpu(), reason="on a GPU Numba compiles the kernel itself and names "
                    "the object in its own typing error")
def test_objects_a_gpu_cannot_use_are_named():
    lookup = {1: 2}

    @cuda.jit
    def uses_a_dict(a, out):
        out[0] = lookup[1]

    with pytest.raises(ptx.KernelSourceError, match="lookup, a dict"):
        ptx.ptx(uses_a_dict, numbers(4), numbers(4))
    globals()["LOOKUP_TABLE"] = lookup
    try:
        @cuda.jit
        def uses_a_global_dict(a, out):
            out[0] = LOOKUP_TABLE[1]  # noqa: F821

        with pytest.raises(ptx.KernelSourceError, match="LOOKUP_TABLE, a dict"):
            ptx.ptx(uses_a_global_dict, numbers(4), numbers(4))
    finally:
        del globals()["LOOKUP_TABLE"]


def test_ptx_rejects_bad_arguments():
    with pytest.raises(ValueError, match="cc must be a compute capability"):
        ptx.ptx(add_one, numbers(4), numbers(4), cc="9.0")
    with pytest.raises(ValueError, match="argument 1 must be a numpy array or a number"):
        ptx.ptx(add_one, numbers(4), [1.0])
    with pytest.raises(ValueError, match="text must be the PTX of a kernel"):
        ptx.ptx_facts("not ptx")


@pytest.mark.skipif(on_gpu(), reason="on a GPU kernels compile in the notebook's own process")
def test_the_compiler_outlives_an_interrupted_cell():
    # Interrupting a notebook cell signals the kernel's whole process group; the compiler
    # serves the later cells, so it runs in a group of its own and still answers.
    import os

    ptx.start_compiler()
    process = ptx._compiler._process
    assert os.getpgid(process.pid) != os.getpgid(0)
    assert ptx.facts(add_one, numbers(4), numbers(4)).barriers == 0
    assert ptx._compiler._process is process
