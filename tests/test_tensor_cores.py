"""gpucourse.kernels.tensor_cores: the fragment places of mma.m16n8k16, the
tensor-core GEMM (level 1, the plain one; level 2, warps sharing tiles in
shared memory) on the simulator's stand-in and on a GPU, and the instruction
in the PTX a GPU would run (compiled here, without one). Nothing here is
timed: benchmarks/tensor_cores.py does that on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from ptx_helpers import compile_without_a_gpu, ptxas_report

from gpucourse.device import on_gpu
from gpucourse.kernels import tensor_cores as TC


def test_each_fragment_covers_its_matrix_once():
    for places, shape in ((TC.A_FRAGMENT, (16, 16)), (TC.B_FRAGMENT, (16, 8)),
                          (TC.C_FRAGMENT, (16, 8))):
        seen = np.zeros(shape, dtype=int)
        for lane in places:
            for row, col in lane:
                seen[row, col] += 1
        assert (seen == 1).all(), shape


def test_fragment_places_follow_the_ptx_isa():
    # Lane 5: group 1, thread 1 of its group (PTX ISA, "Matrix fragments for
    # mma.m16n8k16 with floating point type"), written out by hand.
    assert TC.A_FRAGMENT[5].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3],
                                         [1, 10], [1, 11], [9, 10], [9, 11]]
    assert TC.B_FRAGMENT[5].tolist() == [[2, 1], [3, 1], [10, 1], [11, 1]]
    assert TC.C_FRAGMENT[5].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3]]
    # Lane 31: group 7, thread 3.
    assert TC.A_FRAGMENT[31, 7].tolist() == [15, 15]
    assert TC.B_FRAGMENT[31, 3].tolist() == [15, 7]
    assert TC.C_FRAGMENT[31, 3].tolist() == [15, 7]


@pytest.mark.parametrize("m, n, k", [(16, 8, 16), (32, 16, 48)])
def test_hgemm_equals_numpy(m, n, k):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = TC.hgemm(a, b)
    assert c.dtype == np.float32 and c.shape == (m, n)
    # fp16 products are exact in float32; only the float32 sums round.
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
def test_hgemm_on_a_gpu_at_a_real_size():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((256, 512)).astype(np.float16)
    b = rng.standard_normal((512, 128)).astype(np.float16)
    np.testing.assert_allclose(TC.hgemm(a, b), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-3)


def _random_pair(m, n, k):
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    return (rng.standard_normal((m, k)).astype(np.float16),
            rng.standard_normal((k, n)).astype(np.float16))


# Level 2 on the simulator: one block with two steps along K (64 x 64 x 40,
# the second step ragged), one block ragged in every direction (40 x 24 x
# 20), two blocks side by side (16 x 72 x 16: the second block's columns from
# 64) and a 1 x 1 x 1 product. Each block costs seconds on the simulator.
@pytest.mark.parametrize("m, n, k", [(64, 64, 40), (40, 24, 20), (16, 72, 16), (1, 1, 1)])
def test_hgemm_level2_equals_numpy(m, n, k):
    a, b = _random_pair(m, n, k)
    c = TC.hgemm(a, b, level=2)
    assert c.dtype == np.float32 and c.shape == (m, n)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_level2_places_follow_the_fragment_lists():
    # The arithmetic level 2 writes out for each lane's places equals the lists.
    for lane in range(TC.WARP):
        g, t = lane // 4, lane % 4
        a = [(g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)) for i in range(8)]
        b = [(2 * t + i % 2 + 8 * (i // 2), g) for i in range(4)]
        c = [(g + 8 * (i // 2), 2 * t + i % 2) for i in range(4)]
        assert TC.A_FRAGMENT[lane].tolist() == [list(p) for p in a]
        assert TC.B_FRAGMENT[lane].tolist() == [list(p) for p in b]
        assert TC.C_FRAGMENT[lane].tolist() == [list(p) for p in c]


def test_level2_tiles_fit_its_warps():
    assert TC.WARPS_M * TC.TILES_M * TC.M == TC.BLOCK_M
    assert TC.WARPS_N * TC.TILES_N * TC.N == TC.BLOCK_N
    assert TC.BLOCK_K % TC.K == 0
    assert (TC.BLOCK_M * TC.BLOCK_K) % TC.THREADS_2 == 0
    assert (TC.BLOCK_K * TC.BLOCK_N) % TC.THREADS_2 == 0


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("m, n, k", [(256, 128, 512), (1000, 1030, 777)])
def test_hgemm_level2_on_a_gpu(m, n, k):
    a, b = _random_pair(m, n, k)
    np.testing.assert_allclose(TC.hgemm(a, b, level=2),
                               a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


def test_hgemm_names_bad_input():
    a = np.zeros((16, 16), dtype=np.float16)
    with pytest.raises(ValueError, match="a must be a 2-D float16 array"):
        TC.hgemm(a.astype(np.float32), a[:, :8])
    with pytest.raises(ValueError, match="inner dimensions"):
        TC.hgemm(a, np.zeros((32, 8), dtype=np.float16))
    with pytest.raises(ValueError, match="multiples of 16, 8 and 16"):
        TC.hgemm(np.zeros((8, 16), dtype=np.float16), a[:, :8])
    with pytest.raises(ValueError, match="must be positive"):
        TC.hgemm(np.zeros((0, 16), dtype=np.float16), a[:, :8], level=2)
    for level in (0, 3, "2", True):
        with pytest.raises(ValueError, match="level must be 1 or 2"):
            TC.hgemm(a, a[:, :8], level=level)


PTX_SCRIPT = """
from numba import types
from gpucourse.kernels import tensor_cores as TC
half, single = types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C")
places = types.Array(types.int32, 3, "C")
print(numba.cuda.compile_ptx(TC._hgemm_kernel.py_func,
                             (half, half, single, places, places, places), cc=(9, 0))[0])
"""


def test_the_kernel_issues_the_tensor_core_instruction_for_an_h100():
    ptx = compile_without_a_gpu(PTX_SCRIPT)
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 1
    assert ".local" not in ptx
    # ptxas, as the driver would run it, accepts the instruction for sm_90.
    assert "0 bytes spill stores" in ptxas_report(ptx)


LEVEL2_PTX_SCRIPT = """
from numba import types
from gpucourse.kernels import tensor_cores as TC
half, single = types.Array(types.float16, 2, "C"), types.Array(types.float32, 2, "C")
print(numba.cuda.compile_ptx(TC._hgemm_shared_kernel.py_func, (half, half, single),
                             cc=(9, 0))[0])
"""


def test_level2_reads_its_fragments_from_shared_memory_for_an_h100():
    ptx = compile_without_a_gpu(LEVEL2_PTX_SCRIPT)
    # One step of 16 along K written out: 2 x 4 instructions per warp.
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == \
        TC.TILES_M * TC.TILES_N
    assert ".shared" in ptx and "ld.shared.u16" in ptx and "bar.sync" in ptx
    assert ".local" not in ptx  # the 32 sums and the fragments stay in registers
    report = ptxas_report(ptx)
    assert "0 bytes spill stores" in report
    assert "0 bytes lmem" in report
