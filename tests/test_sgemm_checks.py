"""gpucourse.grader.sgemm: the checks behind chapter 8's kernel exercises.

The library's own kernels (gpucourse.kernels.sgemm, written independently of
these checks) launched with the exercises' contracts must pass every check of
their level; kernels that only look right (NumPy in disguise, one output per
thread, scalar loads at level 5, a kernel with a wrong mapping) must fail the
check that is about them, with a message that says what is wrong. Shapes stay
small: the simulator runs one OS thread per CUDA thread.
"""

import numpy as np
import pytest

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels import sgemm
from gpucourse.grader import sgemm as check
from gpucourse.kernels.sgemm import TileConfig
from gpucourse.kernels.vector import load_float4
from numba import float32

CONFIG_4A = (16, 16, 4, 4)
CONFIG_4B = (16, 16, 4, 4, 4)

# The library's kernels, with tile sizes matching the exercises' launches.
LIBRARY = {
    "1": (sgemm.sgemm_naive, None, (20, 12, 7)),
    "2": (sgemm.sgemm_coalesced, None, (12, 20, 10)),
    "3": (sgemm._make_shared_kernel(check.TILE), None, (17, 12, 20)),
    "4a": (sgemm._make_1d_kernel(TileConfig(*CONFIG_4A, 1)), CONFIG_4A, (17, 20, 13)),
    "4b": (sgemm._make_2d_kernel(TileConfig(*CONFIG_4B)), CONFIG_4B, (17, 20, 13)),
    "5": (sgemm._make_vectorized_kernel(TileConfig(*CONFIG_4B), True), CONFIG_4B, (17, 20, 12)),
}


@pytest.mark.parametrize("level", list(LIBRARY))
def test_the_librarys_kernels_pass_every_check_of_their_level(level):
    kernel, config, (m, n, k) = LIBRARY[level]
    check.expect_product(kernel, level, m, n, k, config)
    check.expect_product(kernel, level, 1, n, k, config, seed=1)  # a single row
    check.expect_product(kernel, level, m, n, k, config, seed=2, special=True)  # NaN, Inf
    check.expect_accesses(kernel, level, m, n, k, config)
    facts = check.expect_level_structure(kernel, level, config)
    assert (facts.barriers > 0) == (level not in ("1", "2"))


def test_nan_and_inf_inputs_make_what_numpy_makes():
    a, b = check._inputs(5, 6, 4, 0, special=True)
    with np.errstate(invalid="ignore"):
        expected = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isnan(expected[2]).all()  # the row holding the NaN
    assert np.isinf(expected[:2, 3]).all() and np.isnan(expected[4, 3])  # 0 * Inf in row 4


@cuda.jit
def numpy_in_disguise(a, b, c):
    # The first thread computes all of C with NumPy; on the simulator that works.
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.threadIdx.x == 0 \
            and cuda.threadIdx.y == 0:
        c[:, :] = np.dot(np.asarray(a), np.asarray(b))


def test_numpy_in_disguise_passes_by_value_and_fails_by_counts_and_compile():
    if on_gpu():  # there the kernel is compiled, and NumPy in it fails at once
        with pytest.raises(Exception):
            check.expect_product(numpy_in_disguise, "1", 20, 12, 7)
    else:  # on the simulator a kernel is Python: value tests alone are fooled
        check.expect_product(numpy_in_disguise, "1", 20, 12, 7)
    with pytest.raises(AssertionError, match=r"thread \(0, 0, 0\) read 140 elements of a"):
        check.expect_accesses(numpy_in_disguise, "1", 20, 12, 7)
    with pytest.raises(AssertionError, match="does not compile for a GPU"):
        check.expect_level_structure(numpy_in_disguise, "1")


def test_a_swapped_mapping_fails_with_the_thread_and_element_named():
    # The coalesced kernel launched as level 1 on a square shape: values right, mapping wrong.
    check.expect_product(sgemm.sgemm_coalesced, "1", 16, 16, 3)
    with pytest.raises(AssertionError,
                       match=r"thread \(0, 1, 0\) wrote c\[1, 0\]; it must write c\[0, 1\] once"):
        check.expect_accesses(sgemm.sgemm_coalesced, "1", 16, 16, 3)


def _one_output_at_a_time(bm, bn, bk, tm, tn):
    """Level 3 in level 4b's clothes: each output of the patch computed in turn with one
    accumulator, the tiles loaded again for each."""
    threads = (bm // tm) * (bn // tn)
    a_elements, b_elements = bm * bk, bk * bn
    a_loads, b_loads = a_elements // threads, b_elements // threads
    per_row = bn // tn

    @cuda.jit
    def one_at_a_time(a, b, c):
        a_tile = cuda.shared.array(a_elements, float32)
        b_tile = cuda.shared.array(b_elements, float32)
        m, k = a.shape
        n = b.shape[1]
        t = cuda.threadIdx.x
        row0, col0 = cuda.blockIdx.y * bm, cuda.blockIdx.x * bn
        for i in range(tm):
            for j in range(tn):
                r, q = (t // per_row) * tm + i, (t % per_row) * tn + j
                acc = float32(0.0)
                for k0 in range(0, k, bk):
                    for s in range(a_loads):
                        e = t + s * threads
                        inside = row0 + e // bk < m and k0 + e % bk < k
                        a_tile[e] = a[row0 + e // bk, k0 + e % bk] if inside else 0.0
                    for s in range(b_loads):
                        e = t + s * threads
                        inside = k0 + e // bn < k and col0 + e % bn < n
                        b_tile[e] = b[k0 + e // bn, col0 + e % bn] if inside else 0.0
                    cuda.syncthreads()
                    for dot in range(bk):
                        acc += a_tile[r * bk + dot] * b_tile[dot * bn + q]
                    cuda.syncthreads()
                if row0 + r < m and col0 + q < n:
                    c[row0 + r, col0 + q] = acc

    return one_at_a_time


def test_level_3_dressed_as_level_4b_fails_the_counts_and_the_accumulators():
    kernel = _one_output_at_a_time(*CONFIG_4B)
    check.expect_product(kernel, "4b", 17, 20, 13, CONFIG_4B)
    with pytest.raises(AssertionError, match="level 4b: .*shared-memory reads"):
        check.expect_accesses(kernel, "4b", 17, 20, 13, CONFIG_4B)
    with pytest.raises(AssertionError, match="at least 16 accumulators"):
        check.expect_level_structure(kernel, "4b", CONFIG_4B)


def test_level_4b_kernel_is_not_level_5_without_vector_loads():
    kernel = LIBRARY["4b"][0]
    check.expect_product(kernel, "5", 17, 20, 12, CONFIG_4B)
    check.expect_accesses(kernel, "5", 17, 20, 12, CONFIG_4B)
    with pytest.raises(AssertionError, match="level 5 must load A and B 128 bits at a time "
                                             r"\(load_float4\); your kernel issues only 32-bit"):
        check.expect_level_structure(kernel, "5", CONFIG_4B)


def test_launch_shapes_follow_the_exercises():
    assert check.launch_shape("1", 20, 12) == ((2, 1), (16, 16))
    assert check.launch_shape("2", 20, 12) == ((1, 2), (16, 16))
    assert check.launch_shape("3", 20, 33) == ((3, 2), (16, 16))
    assert check.launch_shape("4a", 17, 40, (16, 16, 4, 4)) == ((3, 2), (64,))
    assert check.launch_shape("4b", 33, 18, (32, 16, 8, 4, 2)) == ((2, 2), (64,))
    assert check.launch_shape("5", 17, 20, CONFIG_4B) == ((2, 2), (16,))


@pytest.mark.parametrize("call, message", [
    (lambda: check.launch_shape("4", 8, 8), "level must be one of"),
    (lambda: check.launch_shape("4b", 8, 8, (16, 16, 4, 4)), "config of level 4b must be"),
    (lambda: check.launch_shape("3", 8, 8, (16, 16, 4, 4)), "config applies to levels"),
    (lambda: check.launch_shape("4b", 8, 8, (16, 16, 4, 3, 4)), "tm dividing bm"),
    (lambda: check.launch_shape("5", 8, 8, (16, 16, 4, 2, 2)), "equal shares"),
    (lambda: check.launch_shape("5", 8, 8, (16, 16, 8, 4, 2)), "multiples of 4"),
    (lambda: check.launch_shape("1", 0, 8), "m must be a whole number"),
    (lambda: check.random_matrix(3, 2.5, 0), "cols must be"),
    (lambda: check.run(sgemm.sgemm_naive, np.zeros((2, 3)), np.zeros((3, 2)), 1, 1),
     "a must be a 2D float32"),
    (lambda: check.expect_accesses(LIBRARY["4b"][0], "4b", 8, 20, 4, CONFIG_4B),
     "m and n must be at least bm and bn"),
    (lambda: check.RecordingFactory({(1, 2): 1.0}), "seconds must map"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_kernel_that_writes_nothing_is_told_so():
    @cuda.jit
    def does_nothing(a, b, c):
        pass

    with pytest.raises(AssertionError, match="no element of C was written"):
        check.expect_product(does_nothing, "2", 4, 4, 2)


@cuda.jit
def loads_four(a, b, c):
    x0, x1, x2, x3 = load_float4(a, 0, 0)
    c[0, 0] = x0 + x1 + x2 + x3


def test_own_work_allows_the_vector_helpers_and_refuses_the_library():
    check.expect_own_work(loads_four)

    def make(bm, bn, bk, tm):
        return sgemm._make_1d_kernel(TileConfig(bm, bn, bk, tm, 1))

    with pytest.raises(AssertionError, match=r"make uses sgemm \(gpucourse.kernels.sgemm\)"):
        check.expect_own_work(make)
    with pytest.raises(AssertionError, match="comes from gpucourse.kernels.sgemm"):
        check.expect_own_work(sgemm.sgemm_coalesced)


def test_the_recording_factory_makes_right_and_wrong_kernels_and_times_launches():
    seconds = {(32, 32, 8, 4, 8): 2.0, (32, 64, 8, 8, 8): 1.0}
    factory = check.RecordingFactory(seconds, wrong={(32, 64, 8, 8, 8)})
    a, b = check.random_matrix(9, 8, 0), check.random_matrix(8, 12, 1)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    results = {}
    for config in seconds:
        kernel = factory(*config)
        grid, block = check.launch_shape("5", 9, 12, config)
        c = check.run(kernel, a, b, grid, block)
        results[config] = c
        assert factory.time_s(lambda: kernel[grid, block](a, b, np.zeros((9, 12), np.float32))) \
            == seconds[config]
    np.testing.assert_allclose(results[(32, 32, 8, 4, 8)], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[(32, 64, 8, 8, 8)], expected + 1, rtol=1e-5, atol=1e-5)
    assert factory.made == list(seconds) and factory.timed == list(seconds)
    with pytest.raises(AssertionError, match="launched nothing"):
        factory.time_s(lambda: None)
    unwritten = check.RecordingFactory({}, unwritten={(32, 32, 8, 4, 8)})
    c = check.run(unwritten(32, 32, 8, 4, 8), a, b, *check.launch_shape("5", 9, 12,
                                                                       (32, 32, 8, 4, 8)))
    assert np.isnan(c).all()
