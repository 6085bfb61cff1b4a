"""gpucourse.kernels.tensor_cores: the fragment places of mma.m16n8k16, the
tensor-core GEMM (level 1, the plain one; level 2, warps sharing tiles in
shared memory) on the simulator's stand-in and on a GPU, and the instruction
in the PTX a GPU would run (compiled here, without one); then the same for the
TF32 instruction mma.m16n8k8, the rounding of cvt.rna.tf32.f32 and tf32gemm
(plain TF32 and 3xTF32). Nothing here is timed: benchmarks/tensor_cores.py
does that on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from ptx_helpers import compile_without_a_gpu, ptxas_report

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels import tensor_cores as TC
from gpucourse.kernels.tensor_cores import cvt_rna_tf32
from gpucourse.kernels.tensor_cores.intrinsics import tf32_big_part


def assert_each_covers_its_matrix_once(fragments):
    """For each (places, shape): the 32 lanes' places cover every element of a
    matrix of that shape exactly once."""
    for places, shape in fragments:
        seen = np.zeros(shape, dtype=int)
        for lane in places:
            for row, col in lane:
                seen[row, col] += 1
        assert (seen == 1).all(), shape


def test_each_fragment_covers_its_matrix_once():
    assert_each_covers_its_matrix_once(((TC.A_FRAGMENT, (16, 16)), (TC.B_FRAGMENT, (16, 8)),
                                        (TC.C_FRAGMENT, (16, 8))))


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


def assert_tiles_fit_the_warps(warps, tiles, instruction, block, threads):
    """A block's (m, n, k) tile is its (m, n) warps' (m, n) instruction tiles of
    the instruction's (m, n, k) shape side by side, and its tiles of A and B
    load in whole rounds of its threads."""
    (warps_m, warps_n), (tiles_m, tiles_n) = warps, tiles
    (m, n, k), (block_m, block_n, block_k) = instruction, block
    assert warps_m * tiles_m * m == block_m
    assert warps_n * tiles_n * n == block_n
    assert block_k % k == 0
    assert (block_m * block_k) % threads == 0
    assert (block_k * block_n) % threads == 0


def test_level2_tiles_fit_its_warps():
    assert_tiles_fit_the_warps((TC.WARPS_M, TC.WARPS_N), (TC.TILES_M, TC.TILES_N),
                               (TC.M, TC.N, TC.K), (TC.BLOCK_M, TC.BLOCK_N, TC.BLOCK_K),
                               TC.THREADS_2)


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


# ---------------------------------------------------------------------------
# TF32: mma.m16n8k8 with .tf32, cvt.rna.tf32.f32 and tf32gemm (1 and 3 passes)
# ---------------------------------------------------------------------------


def test_each_tf32_fragment_covers_its_matrix_once():
    assert_each_covers_its_matrix_once(((TC.A_FRAGMENT_TF32, (16, 8)),
                                        (TC.B_FRAGMENT_TF32, (8, 8)),
                                        (TC.C_FRAGMENT_TF32, (16, 8))))


def test_tf32_fragment_places_follow_the_ptx_isa():
    # PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32: A row g for a0 and a2,
    # g + 8 for a1 and a3, column t for a0 and a1, t + 4 for a2 and a3; B row t
    # for b0, t + 4 for b1, column g. Lane 5: g = 1, t = 1, written out by hand.
    assert TC.A_FRAGMENT_TF32[5].tolist() == [[1, 1], [9, 1], [1, 5], [9, 5]]
    assert TC.B_FRAGMENT_TF32[5].tolist() == [[1, 1], [5, 1]]
    # Lane 31: g = 7, t = 3.
    assert TC.A_FRAGMENT_TF32[31].tolist() == [[7, 3], [15, 3], [7, 7], [15, 7]]
    assert TC.B_FRAGMENT_TF32[31].tolist() == [[3, 7], [7, 7]]
    # C and D: the same places as for mma.m16n8k16.
    assert np.array_equal(TC.C_FRAGMENT_TF32, TC.C_FRAGMENT)


def _bits(*patterns):
    return np.array(patterns, dtype=np.uint32).view(np.float32)


# Edge cases of rounding to TF32 (10 fraction bits; a TF32 unit in the last
# place is 2^13 float32 units): exact values and signed zeros; ties, which
# .rna sends away from zero (1 + 2^-11 is half-way between 1 and 1 + 2^-10,
# where ties-to-even would give 1); just below and above a tie; a carry into
# the exponent; the top of the range (the largest TF32, 0x7f7fe000, stays;
# the half-way point from it to 2^128, 0x7f7ff000, and the largest float32 go
# to infinity); subnormals (0x1000 is a tie between 0 and the smallest TF32
# subnormal, 0x2000).
EDGE_CASES = np.concatenate([
    np.array([1.0, -2.5, 0.0, -0.0, 3.0], dtype=np.float32),
    np.array([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11, 1 + 2.0**-11 - 2.0**-23,
              1 + 2.0**-11 + 2.0**-23, -(1 + 2.0**-11 - 2.0**-23), 2 - 2.0**-23,
              -(2 - 2.0**-23), 1e-3, -7.25e5], dtype=np.float32),
    _bits(0x7F7FE000, 0x7F7FEFFF, 0x7F7FF000, 0x7F7FFFFF, 0xFF7FF000, 0x00000001, 0x00000FFF,
          0x00001000, 0x80001000, 0x00003000, 0x007FFFFF, 0x00800000)])


def _tf32_reference(x):
    """Rounding to TF32 by arithmetic in float64 (not on the bits): |x| =
    f 2^e with f in [0.5, 1), a TF32 unit in the last place is 2^(e - 11)
    (2^-136 for subnormals), round |x| / ulp half up, put the sign back."""
    x64 = np.asarray(x, dtype=np.float64)
    _, exponent = np.frexp(np.abs(x64))
    ulp = np.ldexp(1.0, np.maximum(exponent, -125) - 11)
    rounded = np.copysign(np.floor(np.abs(x64) / ulp + 0.5) * ulp, x64)
    with np.errstate(over="ignore"):
        return rounded.astype(np.float32)  # beyond float32's range: inf


def test_round_to_tf32_rounds_to_nearest_with_ties_away_from_zero():
    got = TC.round_to_tf32(EDGE_CASES)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), _tf32_reference(EDGE_CASES).view(np.uint32))
    # Read by hand: the tie 1 + 2^-11 goes up, its negative down, the largest float32 to inf.
    assert got[5] == 1 + 2.0**-10 and got[6] == -(1 + 2.0**-10)
    assert np.isposinf(got[list(EDGE_CASES.view(np.uint32)).index(0x7F7FFFFF)])
    assert (got.view(np.uint32) & 0x1FFF == 0).all()  # the low 13 bits are zero
    # Infinities stay, a NaN stays a NaN.
    special = TC.round_to_tf32(np.array([np.inf, -np.inf, np.nan], dtype=np.float32))
    assert np.isposinf(special[0]) and np.isneginf(special[1]) and np.isnan(special[2])
    # And many random finite float32 bit patterns.
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x)]
    np.testing.assert_array_equal(TC.round_to_tf32(x).view(np.uint32),
                                  _tf32_reference(x).view(np.uint32))
    with pytest.raises(ValueError, match="x must be float32"):
        TC.round_to_tf32(np.array([1.0]))


@cuda.jit
def _round_each(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = cvt_rna_tf32(x[i])


def test_cvt_rna_tf32_in_a_kernel_equals_round_to_tf32():
    # On the simulator, the stand-in; on a GPU, the instruction itself: the
    # rounding rule above, checked against the hardware.
    x = np.concatenate([EDGE_CASES, np.array([np.inf, -np.inf, np.nan], dtype=np.float32)])
    out = np.full_like(x, 7.0)
    _round_each[1, 64](x, out)
    expected = TC.round_to_tf32(x)
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(out[finite].view(np.uint32), expected[finite].view(np.uint32))
    assert np.isnan(out[~finite]).all()


@cuda.jit
def _split_each(x, big, small):
    i = cuda.grid(1)
    if i < x.size:
        big[i] = tf32_big_part(x[i])
        small[i] = x[i] - big[i]


def test_tf32_big_part_rounds_as_cvt_rna_does_and_keeps_a_nan():
    # The 3xTF32 split's rounding on the bits (an add and a mask, two integer
    # instructions where cvt.rna.tf32.f32 takes four on sm_90): the same bits
    # as round_to_tf32 for every finite value (ties, the largest float32 to
    # infinity, subnormals) and for the infinities. A NaN's big part may not
    # be a NaN (the GPU's canonical 0x7FFFFFFF carries into the sign bit), so
    # the split must keep it in the small part: x - big is NaN, and the
    # small products bring it to the sums.
    rng = np.random.default_rng(9)
    x = rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32).view(np.float32)
    nans = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x7F800001], dtype=np.uint32)
    x = np.concatenate([EDGE_CASES, np.array([np.inf, -np.inf], dtype=np.float32),
                        x[np.isfinite(x)], nans.view(np.float32)])
    big, small = np.full_like(x, 7.0), np.full_like(x, 7.0)
    _split_each[-(-x.size // 128), 128](x, big, small)
    kept = ~np.isnan(x)
    np.testing.assert_array_equal(big[kept].view(np.uint32),
                                  TC.round_to_tf32(x[kept]).view(np.uint32))
    assert np.isnan(small[~kept]).all()


def _normwise(c, reference):
    """max |C - C_ref| / max |C_ref|."""
    return float(np.abs(c - reference).max() / np.abs(reference).max())


def _fp32_pair(m, n, k):
    rng = np.random.default_rng(m + 5 * n + 11 * k)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def test_3xtf32_is_close_to_fp32_and_tf32_is_not():
    # One block of 64 x 64, two steps of 32 along K. Passes 1 must equal the
    # float64 product of the inputs rounded to TF32 (so the simulator models
    # the rounding), up to fp32 sums; passes 3 must be within 8 units of
    # fp32's roundoff (2^-23 each) of the float64 product, normwise (the
    # simulator gave 1.5e-7; a model of the tensor cores' truncating sums
    # 3.8e-7 at worst over 20 seeds), and far better than passes 1 (3e-4).
    a, b = _fp32_pair(64, 64, 64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    rounded = TC.round_to_tf32(a).astype(np.float64) @ TC.round_to_tf32(b).astype(np.float64)
    one, three = TC.tf32gemm(a, b, passes=1), TC.tf32gemm(a, b)
    assert one.dtype == three.dtype == np.float32 and one.shape == three.shape == (64, 64)
    assert _normwise(one, rounded) <= 1e-6
    error_1, error_3 = _normwise(one, exact), _normwise(three, exact)
    assert 1e-4 <= error_1 <= 2e-3  # TF32's unit roundoff is 2^-11 = 4.9e-4
    assert error_3 <= 8 * 2.0**-23
    assert error_3 * 100 <= error_1


def test_tf32gemm_takes_any_sizes():
    # Two blocks side by side (columns from 64), ragged in every direction, K
    # not a multiple of an instruction's 8 (one pass: the test above covers the
    # small parts' places, and each pass costs the simulator seconds); and a
    # 1 x 1 x 1 product, exact in TF32 (one product of two 11-bit significands).
    a, b = _fp32_pair(20, 72, 12)
    rounded = TC.round_to_tf32(a).astype(np.float64) @ TC.round_to_tf32(b).astype(np.float64)
    assert _normwise(TC.tf32gemm(a, b, passes=1), rounded) <= 1e-6
    a, b = np.array([[1.5 + 2.0**-12]], dtype=np.float32), np.array([[-3.0]], dtype=np.float32)
    c = TC.tf32gemm(a, b, passes=1)
    assert c.shape == (1, 1) and c[0, 0] == np.float32(-4.5)  # 1.5 + 2^-12 rounds to 1.5


# On a GPU at real sizes, against float64, normwise. Plain TF32 rounds each
# input to 11 significant bits (unit roundoff 2^-11 = 4.9e-4); the rounding
# errors are random in sign, so the normwise error stays near 3e-4 whatever K
# (a numpy model: 3.1e-4 at 256 x 256 x 512, 2.8e-4 at 1000 x 1030 x 777):
# bound 2e-3. 3xTF32 represents each input to about 2^-22 and drops
# a_small b_small (about 2^-22 of each product); what dominates on hardware is
# the accumulation, which the tensor cores truncate: K/8 truncations of the big
# term's sum, each up to 2^-23 of it and biased. The model of that gave 1.8e-6
# and 2.6e-6 at the two sizes below (fp32 fmas rounded to nearest, one k at a
# time: 0.9e-6 and 1.1e-6): bound 1e-5, about four times that. The two must
# also differ by far (the model: about 100 times).
@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("m, n, k", [(256, 256, 512), (1000, 1030, 777)])
def test_tf32gemm_on_a_gpu(m, n, k):
    a, b = _fp32_pair(m, n, k)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    error_1 = _normwise(TC.tf32gemm(a, b, passes=1), exact)
    error_3 = _normwise(TC.tf32gemm(a, b, passes=3), exact)
    assert error_1 <= 2e-3
    assert error_3 <= 1e-5
    assert error_3 * 30 <= error_1


def test_tf32_tiles_fit_its_warps():
    assert_tiles_fit_the_warps((TC.TF32_WARPS_M, TC.TF32_WARPS_N),
                               (TC.TF32_TILES_M, TC.TF32_TILES_N),
                               (TC.TF32_M, TC.TF32_N, TC.TF32_K),
                               (TC.TF32_BLOCK_M, TC.TF32_BLOCK_N, TC.TF32_BLOCK_K),
                               TC.TF32_THREADS)


def test_tf32gemm_names_bad_input():
    a = np.zeros((4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="a must be a 2-D float32 array"):
        TC.tf32gemm(a.astype(np.float64), a)
    with pytest.raises(ValueError, match="b must be a 2-D float32 array"):
        TC.tf32gemm(a, a[0])
    with pytest.raises(ValueError, match="inner dimensions"):
        TC.tf32gemm(a, np.zeros((5, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="must be positive"):
        TC.tf32gemm(np.zeros((0, 4), dtype=np.float32), a)
    for passes in (0, 2, "3", True, None):
        with pytest.raises(ValueError, match="passes must be 1 or 3"):
            TC.tf32gemm(a, a, passes=passes)


TF32_PTX_SCRIPT = """
from numba import types
from gpucourse.kernels import tensor_cores as TC
single = types.Array(types.float32, 2, "C")
for passes in TC.PASSES:
    print(numba.cuda.compile_ptx(TC._TF32GEMM_KERNELS[passes].py_func, (single, single, single),
                                 cc=(9, 0))[0])
    print("===== end of kernel =====")
"""


def test_tf32gemm_issues_tf32_instructions_for_an_h100():
    one, three = compile_without_a_gpu(TF32_PTX_SCRIPT).split("===== end of kernel =====")[:2]
    tiles = TC.TF32_TILES_M * TC.TF32_TILES_N
    for ptx, passes in ((one, 1), (three, 3)):
        # One step of 8 along K written out: 2 x 4 tiles, 1 or 3 instructions each.
        assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == passes * tiles
        assert "cvt.rna.tf32.f32" in ptx
        assert ".shared" in ptx and "ld.shared" in ptx and "bar.sync" in ptx
        assert ".local" not in ptx  # the sums and the fragments stay in registers
        report = ptxas_report(ptx)
        assert "0 bytes spill stores" in report and "0 bytes lmem" in report, report
    # Recorded on 2026-11-25 (nvJitLink of the CUDA 13 wheels, sm_90): passes 1
    # uses 76 registers and 19,456 bytes of shared memory, passes 3 122 and
    # 37,888 (the separate sums of the small products cost registers).
