"""The fast half-precision GEMM (kernels.tensor_cores: moves, hgemm_ladder,
half_matmul): the swizzled layout has no bank conflicts, the simulator's
ldmatrix hands each lane its mma fragment, every level of the ladder and a
split of K agree with float64 in fp16 and bf16, NaN and Inf go where they
should, bad input is named, and the PTX a GPU would run holds the
instructions each level is about, with no spills. On a GPU, each level is
held to cuBLAS's error on the same inputs. Nothing is timed here:
benchmarks/hgemm.py does that."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ptx_helpers import compile_without_a_gpu, innermost_loop, ptxas_report

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels.tensor_cores import A_FRAGMENT, B_FRAGMENT
from gpucourse.kernels.tensor_cores.half_matmul import MAX_SLICES, half_matmul
from gpucourse.kernels.tensor_cores.hgemm_ladder import LEVELS, _swizzle, check_config
from gpucourse.kernels.tensor_cores.moves import (forget_earlier_moves, ldmatrix_x4,
                                                 ldmatrix_x4_trans, shared_address)
from numba import uint16  # noqa: E402 (after gpucourse.device)

RNG = np.random.default_rng(2026)


def halves(shape, dtype=np.float16):
    return RNG.standard_normal(shape).astype(dtype)


def bank_groups(chunks_per_row: int, swizzle: bool) -> np.ndarray:
    """For each 8 consecutive rows and each logical chunk: the 16-byte groups
    of banks (0-7; 32 banks of 4 bytes) that the 8 rows' copies of the chunk
    land in, as an array [first row, chunk, row] (rows of chunks_per_row
    16-byte chunks, stored one after another)."""
    shift, modulus = _swizzle(chunks_per_row) if swizzle else (1, 1)
    groups = np.zeros((16, chunks_per_row, 8), dtype=int)
    for first in range(16):
        for chunk in range(chunks_per_row):
            for r in range(8):
                row = first + r
                stored = chunk ^ ((row // shift) % modulus)
                groups[first, chunk, r] = (row * chunks_per_row + stored) % 8
    return groups


@pytest.mark.parametrize("chunks_per_row", [2, 4, 8, 16])
def test_the_swizzle_puts_the_rows_an_ldmatrix_reads_in_different_banks(chunks_per_row):
    # An ldmatrix matrix is 8 rows of one 16-byte chunk each: with the XOR
    # swizzle they fall in 8 different groups of banks, one pass of shared
    # memory; stored plainly, rows 128 bytes apart collide.
    aligned = bank_groups(chunks_per_row, swizzle=True)[::8]  # tiles start on multiples of 8
    assert all(len(set(rows)) == 8 for rows in aligned.reshape(-1, 8))
    plain = bank_groups(chunks_per_row, swizzle=False)[::8]
    assert any(len(set(rows)) < 8 for rows in plain.reshape(-1, 8))


@cuda.jit
def _ldmatrix_kernel(values, out_plain, out_trans):
    """One warp: a 16 x 16 tile of halves into shared memory, then each lane's
    four registers of ldmatrix.x4 (rows l % 16, column 8 (l // 16)) and of
    its .trans twin."""
    tile = cuda.shared.array(256, uint16)
    lane = cuda.threadIdx.x
    for i in range(8):
        tile[lane * 8 + i] = values[lane * 8 + i]
    cuda.syncthreads()
    address = shared_address(tile, (lane % 16) * 16 + (lane // 16) * 8)
    plain = ldmatrix_x4(address)
    trans = ldmatrix_x4_trans(address)
    for j in range(4):
        out_plain[lane, j] = plain[j]
        out_trans[lane, j] = trans[j]


def unpack(registers):
    """[lane, register] uint32 -> [lane, 2 * register + half] uint16 bits."""
    registers = np.asarray(registers, dtype=np.uint32)
    return np.stack([registers & 0xFFFF, registers >> 16], axis=-1).reshape(32, -1)


@pytest.mark.skipif(on_gpu(), reason="the simulator's stand-in (the GEMM tests cover the GPU)")
def test_ldmatrix_hands_each_lane_its_mma_fragment():
    tile = np.arange(256, dtype=np.uint16)  # element (row, col) holds row * 16 + col
    plain = np.zeros((32, 4), dtype=np.uint32)
    trans = np.zeros((32, 4), dtype=np.uint32)
    forget_earlier_moves()
    _ldmatrix_kernel[1, 32](tile, plain, trans)
    # Without .trans: the lane's 8 halves are its A fragment of the 16 x 16 tile.
    expected_a = A_FRAGMENT[..., 0] * 16 + A_FRAGMENT[..., 1]
    assert (unpack(plain) == expected_a).all()
    # With .trans, a tile stored k-row by k-row (B, K x N) arrives as two B
    # fragments: n-tile 0 (columns 0-7) in registers 0-1, n-tile 1 in 2-3.
    got = unpack(trans)
    for n_tile in range(2):
        expected_b = B_FRAGMENT[..., 0] * 16 + B_FRAGMENT[..., 1] + 8 * n_tile
        assert (got[:, 4 * n_tile:4 * n_tile + 4] == expected_b).all()


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_each_level_matches_float64(level):
    # Ragged: M, N and K not multiples of the tiles, K and N not of 8 either.
    a, b = halves((37, 29)), halves((29, 21))
    c = half_matmul(a, b, out_dtype=np.float32, level=level)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert c.shape == (37, 21) and c.dtype == np.float32
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


def test_bf16_in_torch_is_rounded_once_like_torch():
    a = torch.randn(40, 24, dtype=torch.bfloat16)
    b = torch.randn(24, 16, dtype=torch.bfloat16)
    if on_gpu():
        a, b = a.cuda(), b.cuda()
    c = half_matmul(a, b)
    assert c.dtype == torch.bfloat16 and c.shape == (40, 16) and c.device == a.device
    # float32 sums rounded once to bf16: the float64 product rounded to bf16,
    # give or take one unit in the last place where float32's sum rounds the
    # other way.
    ref = (a.double() @ b.double()).to(torch.bfloat16).double()
    ulp = ref.abs().clamp_min(2 ** -120) * 2 ** -7
    assert ((c.double() - ref).abs() <= ulp).all()


def test_a_split_of_k_sums_its_slices():
    # K = 64 is 4 tiles of 16 on the simulator: 3 slices take 2, 2 and none.
    a, b = halves((20, 64)), halves((64, 16))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    split = half_matmul(a, b, out_dtype=np.float32, slices=3)
    np.testing.assert_allclose(split, ref, rtol=1e-5, atol=1e-5)
    rounded = half_matmul(a, b, slices=3)  # the slices' sum rounded once to fp16
    np.testing.assert_array_equal(rounded, split.astype(np.float16))


def test_nan_and_inf_go_where_they_belong():
    a, b = halves((20, 16)), halves((16, 24))
    a[3, 5], b[7, 9] = np.nan, np.inf
    c = half_matmul(a, b, out_dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(np.isnan(c), np.isnan(ref))
    assert np.array_equal(np.isinf(c), np.isinf(ref))


@pytest.mark.parametrize("call, message", [
    (lambda: half_matmul(halves((4, 4), np.float32), halves((4, 4), np.float32)),
     "must be float16 or bfloat16"),
    (lambda: half_matmul(halves((4, 5)), halves((4, 4))), "inner dimensions must match"),
    (lambda: half_matmul(halves((4, 4, 4)), halves((4, 4))), "2-D matrix"),
    (lambda: half_matmul(halves((0, 4)), halves((4, 4))), "must be positive"),
    (lambda: half_matmul(halves((4, 4)), torch.zeros(4, 4, dtype=torch.float16)),
     "both be torch tensors"),
    (lambda: half_matmul(torch.zeros(4, 4, dtype=torch.float16),
                         torch.zeros(4, 4, dtype=torch.bfloat16)), "one dtype"),
    (lambda: half_matmul(halves((4, 4)), halves((4, 4)), out_dtype="bfloat16"),
     "out_dtype must be None"),
    (lambda: half_matmul(halves((4, 4)), halves((4, 4)), level=2), "level must be one of"),
    (lambda: half_matmul(halves((4, 4)), halves((4, 4)), slices=MAX_SLICES + 1),
     "slices must be a whole number"),
    (lambda: half_matmul(halves((4, 4)), halves((4, 4)), config=dict(bm=48)),
     "each warp's part"),
    (lambda: check_config(dict(tiles=3)), "unknown switches"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


PTX_SCRIPT = """
import re, sys
from numba import types
from gpucourse.kernels.tensor_cores.hgemm_ladder import LEVELS, make_hgemm_kernel
bits = types.Array(types.uint16, 2, "C")
for level, kind, transposed in ((3, "f16", False), (7, "f16", False), (7, "bf16", False),
                                (7, "f16", True)):
    kernel = make_hgemm_kernel(**dict(LEVELS[level], kind=kind, a_transposed=transposed,
                                      b_transposed=transposed))
    ptx, _ = numba.cuda.compile_ptx(kernel.py_func, (bits, bits, bits), cc=(9, 0))
    name = f"level{level}_{kind}" + ("_transposed" if transposed else "")
    open(f"{sys.argv[1]}/{name}.ptx", "w").write(ptx)
from gpucourse.kernels.tensor_cores.tf32_fast import DEFAULT, ONE_PASS_DEFAULT, make_tf32_kernel
kernel = make_tf32_kernel(3, **DEFAULT)
ptx, _ = numba.cuda.compile_ptx(kernel.py_func, (bits, bits, types.Array(types.float32, 2, "C")),
                                cc=(9, 0))
open(f"{sys.argv[1]}/tf32_3.ptx", "w").write(ptx)
kernel = make_tf32_kernel(1, **ONE_PASS_DEFAULT, rounded=True)  # what a call of one pass runs
ptx, _ = numba.cuda.compile_ptx(kernel.py_func, (bits, bits, types.Array(types.float32, 2, "C")),
                                cc=(9, 0))
open(f"{sys.argv[1]}/tf32_1_rounded.ptx", "w").write(ptx)
from gpucourse.kernels.tensor_cores.tf32_fast import round_to_tf32_kernel
flat = types.Array(types.float32, 1, "C")
ptx, _ = numba.cuda.compile_ptx(round_to_tf32_kernel.py_func, (flat, flat), cc=(9, 0))
open(f"{sys.argv[1]}/tf32_round.ptx", "w").write(ptx)
from gpucourse.kernels.tensor_cores.tf32_fast import TRANSPOSE_KERNELS
matrix = types.Array(types.float32, 2, "C")
for passes, kernel in TRANSPOSE_KERNELS.items():
    ptx, _ = numba.cuda.compile_ptx(kernel.py_func, (matrix, matrix), cc=(9, 0))
    open(f"{sys.argv[1]}/tf32_transpose{passes}.ptx", "w").write(ptx)
"""


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    """The PTX of levels 3 and 7 (fp16) and 7 (bf16), and of tf32_matmul's
    3xTF32 kernel, for an H100, compiled here."""
    folder = tmp_path_factory.mktemp("hgemm_ptx")
    compile_without_a_gpu(PTX_SCRIPT, str(folder))
    return {name.stem: name.read_text() for name in folder.glob("*.ptx")}


def test_level7_copies_with_cp_async_and_reads_with_ldmatrix(ptx):
    text = ptx["level7_f16"]
    config = LEVELS[7]
    warp_m, warp_n = config["bm"] // config["warps_m"], config["bn"] // config["warps_n"]
    per_step = (warp_m // 16) * (warp_n // 8)  # instructions per 16 of K
    # The loop over a stage's 32 of K is written out (two steps of 16, the
    # second's fragments read during the first: double buffering).
    assert text.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == \
        per_step * config["bk"] // 16
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in text
    assert "cp.async.cg.shared.global" in text and "cp.async.wait_group 2" in text
    assert "ld.shared" not in text and "st.shared" not in text  # nothing through registers
    assert ".local" not in text  # the sums and fragments stay in registers
    report = ptxas_report(text)
    assert "0 bytes spill stores" in report and "0 bytes lmem" in report


def test_transposed_operands_swap_their_reads_and_do_not_spill(ptx):
    # B given as N x K (nn.Linear's weight): its rows are the "col" fragment,
    # read by plain ldmatrix; A given as K x M, by ldmatrix.trans. The plain
    # kernel reads A plainly and B with .trans: as many of each, swapped.
    plain, swapped = ptx["level7_f16"], ptx["level7_f16_transposed"]
    trans = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    straight = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    assert (swapped.count(trans), swapped.count(straight)) == \
        (plain.count(straight), plain.count(trans))
    assert ".local" not in swapped and "0 bytes spill stores" in ptxas_report(swapped)


def test_transposed_operands_give_the_transposed_products():
    # C = A W^T for W of N x K (ragged: N not a multiple of 8, K not of 16).
    a, w = halves((37, 29)), halves((21, 29))
    c = half_matmul(a, w, out_dtype=np.float32, b_transposed=True)
    np.testing.assert_allclose(c, a.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(ValueError, match="b_transposed needs level 5, 6 or 7"):
        half_matmul(a, w, level=4, b_transposed=True)
    with pytest.raises(ValueError, match="b .transposed. is 21 x 28"):
        half_matmul(a, w[:, :28], b_transposed=True)
    # C = A^T B for A of K x M (a weight's gradient, dW = dY^T X), with B as K x N
    # and as N x K.
    at, b = halves((29, 37)), halves((29, 21))
    want = at.astype(np.float64).T @ b.astype(np.float64)
    for transposed_b in (False, True):
        c = half_matmul(at, b.T.copy() if transposed_b else b, out_dtype=np.float32,
                        a_transposed=True, b_transposed=transposed_b)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_bf16_uses_the_bf16_instruction(ptx):
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx["level7_bf16"]
    assert "cvt.rn.bf16x2.f32" in ptx["level7_bf16"]
    assert "cvt.rn.f16x2.f32" in ptx["level7_f16"]


def test_level3_goes_through_registers_without_spilling(ptx):
    text = ptx["level3_f16"]
    assert "ldmatrix" not in text and "cp.async" not in text
    assert "ld.shared" in text and "st.shared" in text
    assert "0 bytes spill stores" in ptxas_report(text)


def test_tf32_matmul_is_tf32_or_near_fp32():
    from gpucourse.kernels.tensor_cores import round_to_tf32
    from gpucourse.kernels.tensor_cores.tf32_fast import tf32_matmul

    a = RNG.standard_normal((37, 29)).astype(np.float32)
    b = RNG.standard_normal((29, 21)).astype(np.float32)
    # One pass: the product of the inputs rounded to TF32, summed in float32.
    model = round_to_tf32(a).astype(np.float64) @ round_to_tf32(b).astype(np.float64)
    np.testing.assert_allclose(tf32_matmul(a, b, passes=1), model, rtol=1e-5, atol=1e-5)
    # Three (3xTF32): the float64 product to about float32's accuracy, far
    # closer than TF32 alone (which errs by about 1e-3 here).
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(model - exact).max() > 1e-3
    np.testing.assert_allclose(tf32_matmul(a, b), exact, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="passes must be 1 or 3"):
        tf32_matmul(a, b, passes=2)
    with pytest.raises(ValueError, match="float32"):
        tf32_matmul(a.astype(np.float64), b)
    # A K past the copies' 32-bit bounds is refused before anything runs
    # (views of one float, no memory behind them).
    from gpucourse.kernels.tensor_cores.tf32_fast import MAX_K

    one = np.zeros(1, np.float32)
    wide = np.lib.stride_tricks.as_strided(one, (1, MAX_K + 1), (0, 0))
    tall = np.lib.stride_tricks.as_strided(one, (MAX_K + 1, 1), (0, 0))
    with pytest.raises(ValueError, match="K must be at most"):
        tf32_matmul(wide, tall)


def test_one_pass_rounds_the_inputs_once_and_gives_the_same_bits():
    # tf32_matmul(passes=1) rounds A and B to TF32 in a pass of their own and
    # runs the GEMM kernel built with rounded=True, which hands them to the
    # tensor cores as they are: the same roundings and sums as rounding each
    # value where it is read, so the same bits, NaN and infinity included.
    from gpucourse.kernels.tensor_cores import round_to_tf32
    from gpucourse.kernels.tensor_cores.tf32_fast import (SIMULATOR, _rounded_array,
                                                          make_tf32_kernel, tf32_matmul)
    from gpucourse.kernels.launch import launch_with_shared

    a = RNG.standard_normal((40, 24)).astype(np.float32)
    b = RNG.standard_normal((24, 36)).astype(np.float32)
    a[3, 5], a[7, 0], b[2, 9] = np.nan, np.inf, -np.inf
    np.testing.assert_array_equal(_rounded_array(a), round_to_tf32(a))
    kernel = make_tf32_kernel(1, **SIMULATOR)  # rounding as it reads; B goes in as B^T
    c = np.zeros((40, 36), np.float32)
    launch_with_shared(kernel, kernel.blocks(40, 36), kernel.threads, kernel.shared_bytes,
                       a.view(np.uint16), np.ascontiguousarray(b.T).view(np.uint16), c)
    ours = tf32_matmul(a, b, passes=1)
    np.testing.assert_array_equal(ours, c)
    with np.errstate(invalid="ignore"):
        exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(exact))
    with pytest.raises(ValueError, match="rounded inputs take one pass"):
        make_tf32_kernel(3, **SIMULATOR, rounded=True)


def test_torch_tensors_are_multiplied_as_numpy_arrays_and_left_as_they_were():
    # tf32_matmul on CPU torch tensors (the simulator's kind): the same bits as
    # on numpy arrays, ragged (padded) or aligned (used as they are, no copy:
    # the passes over A and B write new tensors, and the inputs keep theirs).
    import torch

    from gpucourse.kernels.tensor_cores.tf32_fast import tf32_matmul

    for m, k, n in ((24, 32, 36), (17, 30, 21)):
        a = RNG.standard_normal((m, k)).astype(np.float32)
        b = RNG.standard_normal((k, n)).astype(np.float32)
        ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
        for passes in (1, 3):
            got = tf32_matmul(ta, tb, passes=passes)
            assert isinstance(got, torch.Tensor) and tuple(got.shape) == (m, n)
            np.testing.assert_array_equal(got.numpy(), tf32_matmul(a, b, passes=passes))
        np.testing.assert_array_equal(ta.numpy(), a)
        np.testing.assert_array_equal(tb.numpy(), b)


def test_b_goes_in_transposed_and_rounded_in_one_pass():
    # tf32_matmul's pass over B: B^T, rounded to TF32 with one pass and as it
    # is with three, on a ragged shape of several 32 x 32 tiles each way
    # (the edge tiles check their bounds), NaN and infinity kept.
    from gpucourse.kernels.tensor_cores import round_to_tf32
    from gpucourse.kernels.tensor_cores.tf32_fast import _transposed_array

    b = RNG.standard_normal((70, 45)).astype(np.float32)
    b[69, 44], b[0, 33], b[40, 0] = np.nan, np.inf, -np.inf
    np.testing.assert_array_equal(_transposed_array(b, 1), round_to_tf32(b).T)
    np.testing.assert_array_equal(_transposed_array(b, 3), b.T)


def test_the_rounded_one_pass_kernel_has_no_conversions_left(ptx):
    # The GEMM kernel of one pass at its default tiles: mma and ldmatrix, no
    # cvt.rna.tf32 (the rounding kernel has it), no spills, and registers few
    # enough for three blocks to share an SM (why 128 x 64 with 4 warps beat
    # 128 x 128 with 8, one block an SM, on the H200; with B read as B^T by
    # ldmatrix, this ptxas gives 164 registers, where B's 32-bit reads took 210).
    import re

    gemm, rounding = ptx["tf32_1_rounded"], ptx["tf32_round"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in gemm
    assert "cvt.rna.tf32.f32" not in gemm and "cvt.rna.tf32.f32" in rounding
    # B is rounded in the pass that transposes it (three passes: transposed
    # alone), through shared memory, so both its reads and writes are rows.
    assert "cvt.rna.tf32.f32" in ptx["tf32_transpose1"]
    assert "cvt.rna.tf32.f32" not in ptx["tf32_transpose3"]
    assert all("st.shared" in ptx[f"tf32_transpose{p}"] for p in (1, 3))
    assert ".local" not in gemm
    report = ptxas_report(gemm)
    assert "0 bytes spill stores" in report and "0 bytes lmem" in report
    from gpucourse.kernels.tensor_cores.tf32_fast import ONE_PASS_DEFAULT

    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    warps = ONE_PASS_DEFAULT["warps_m"] * ONE_PASS_DEFAULT["warps_n"]
    per_warp = -(-registers * 32 // 256) * 256  # allocated 256 at a time
    blocks = 65536 // (per_warp * warps)  # an SM's register file
    assert blocks >= 3, f"{registers} registers, {warps} warps: {blocks} blocks an SM, not 3"
    # B's values come by shared_word at constant offsets from addresses worked
    # out once: the main loop issues under 4.5 PTX instructions an mma (6.8
    # when each read indexed a float32 view of shared memory).
    loop = innermost_loop(gemm)
    mma = sum("mma.sync" in line for line in loop)
    assert mma and len(loop) < 4.5 * mma, (len(loop), mma)
    # B^T's fragments come by ldmatrix like A's: one x4 read for 16 rows of A
    # or two n-tiles of B, and no 32-bit shared loads left in the loop (there
    # were two a tile and step when B came row by row).
    reads = sum("ldmatrix" in line for line in loop)
    assert not any("ld.shared.b32" in line or "ld.shared.u32" in line for line in loop)
    warps_m, warps_n = ONE_PASS_DEFAULT["warps_m"], ONE_PASS_DEFAULT["warps_n"]
    tiles_m = ONE_PASS_DEFAULT["bm"] // warps_m // 16
    tiles_n = ONE_PASS_DEFAULT["bn"] // warps_n // 8
    assert reads * tiles_m * tiles_n == mma * (tiles_m + tiles_n // 2), (reads, mma)


def test_tf32_matmul_reads_a_with_ldmatrix_and_does_not_spill(ptx):
    text = ptx["tf32_3"]
    assert text.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") >= 3
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in text  # A's fragments
    assert "cp.async.cg.shared.global" in text and "cvt.rna.tf32.f32" in text
    assert ".local" not in text
    report = ptxas_report(text)
    assert "0 bytes spill stores" in report and "0 bytes lmem" in report


@pytest.mark.skipif(not on_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_on_a_gpu_each_level_errs_no_more_than_cublas(level, dtype):
    for m, n, k in ((1000, 1032, 776), (77, 50, 29), (130, 136, 4104)):
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        ref = a.double() @ b.double()
        ours, peer = half_matmul(a, b, level=level), torch.mm(a, b)
        error = float((ours.double() - ref).norm() / ref.norm())
        peer_error = float((peer.double() - ref).norm() / ref.norm())
        assert error <= 2 * peer_error + 1e-6, (m, n, k, error, peer_error)
        # float32 C: ours within a few times cuBLAS's own float32-output error.
        ours32 = half_matmul(a, b, out_dtype=torch.float32, level=level)
        assert torch.allclose(ours32.double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
        if level >= 5:  # B given as N x K (nn.Linear's weight), A as K x M
            for flags in (dict(b_transposed=True), dict(a_transposed=True)):
                x = a.t().contiguous() if "a_transposed" in flags else a
                y = b.t().contiguous() if "b_transposed" in flags else b
                error = float((half_matmul(x, y, level=level, **flags).double() - ref).norm()
                              / ref.norm())
                assert error <= 2 * peer_error + 1e-6, (flags, m, n, k, error)


# ---------------------------------------------------------------------------
# The committed H100 run (benchmarks/hgemm.py): read, not re-run.

def committed_run():
    from gpucourse import results

    return results.load_results("hgemm")


def share(record, variant, dtype, size):
    rows = [r for r in record["results"] if r["variant"] == variant and r["dtype"] == dtype
            and (r["m"], r["n"], r["k"]) == (size, size, size)]
    assert len(rows) == 1, (variant, dtype, size)
    return rows[0]["vs_cublas"]


def test_the_committed_run_was_validated_before_it_was_timed():
    record = committed_run()
    assert record["gpu"].startswith("NVIDIA") and record["versions"]["torch"]
    cases = record["validation"]
    assert {c["level"] for c in cases} == set(LEVELS)
    assert {c["dtype"] for c in cases} == {"float16", "bfloat16"}
    assert all(c["ok"] for c in cases) and all(c["error"] < 1e-2 for c in cases)


def test_the_committed_run_meets_the_issues_targets():
    # Issue 29: at least 40% of cuBLAS (same dtype, same run) at 4096^3 and
    # 8192^3, at least 30% at 1024^3 and 2048^3, as a user calls half_matmul.
    record = committed_run()
    for dtype in ("fp16", "bf16"):
        for size, least in ((1024, 0.30), (2048, 0.30), (4096, 0.40), (8192, 0.40)):
            assert share(record, "half_matmul", dtype, size) >= least, (dtype, size)
        # Each level is faster than the one before, except level 6 (register
        # double buffering), which the compiler's own scheduling already gives
        # level 5: within 10% of it.
        levels = [share(record, f"level{level}", dtype, 4096) for level in sorted(LEVELS)]
        assert levels[0] < levels[1] < levels[2] < levels[4]
        assert abs(levels[3] - levels[2]) <= 0.1 * levels[2]


def test_level7_chooses_tiles_and_a_split_of_k_by_the_gpus_sms(monkeypatch):
    # The model of half_matmul.choose_config, as on an H100 (132 SMs): 128 x
    # 128 tiles when C has at least as many as the GPU has SMs; else 64 x 64;
    # and when those still leave SMs idle, K split into slices (enough for two
    # blocks per SM, each slice at least SLICE_TILES tiles of K).
    import importlib

    # The module (the package's name half_matmul is the function).
    H = importlib.import_module("gpucourse.kernels.tensor_cores.half_matmul")
    monkeypatch.setattr(H, "on_gpu", lambda: True)
    monkeypatch.setattr(H, "current_gpu", lambda: 0)
    monkeypatch.setattr(H, "multiprocessors", lambda device: 132)
    big, slices = H.choose_config(7, 2048, 2048, 2048)  # 256 tiles of 128 x 128
    assert (big["bm"], big["bn"], slices) == (128, 128, 1)
    small, slices = H.choose_config(7, 1024, 1024, 1024)  # 64 such tiles; 256 of 64 x 64
    assert (small["bm"], small["bn"], slices) == (64, 64, 1)
    deep, slices = H.choose_config(7, 512, 512, 32768)  # 64 tiles of 64 x 64: split K
    assert (deep["bm"], deep["bn"]) == (64, 64) and slices == -(-2 * 132 // 64)
    shallow, slices = H.choose_config(7, 512, 512, 256)  # K too short to split
    assert slices == 1
    assert H.choose_config(5, 512, 512, 32768) == (dict(LEVELS[5]), 1)  # other levels: as they are


def test_the_committed_run_meets_the_tf32_target():
    # Issue 29: tf32_matmul in one pass (TF32), with its default tiles and
    # timed as a call runs it, at least 0.40 of cuBLAS TF32's speed at 4096^3
    # in the same run; every validated case within its bound.
    from gpucourse import results

    record = results.load_results("hgemm")
    assert all(case["ok"] for case in record["validation"])
    row = next(r for r in record["results"] if r["variant"] == "tf32_matmul1" and r["m"] == 4096)
    assert (row["n"], row["k"]) == (4096, 4096) and row["vs_cublas"] >= 0.40, row
