"""Tests of gpucourse.kernels.attention.

The kernels run on whatever device gpucourse.device picked: Numba's CUDA
simulator on a machine without a GPU (sizes stay small: the simulator runs one
OS thread per CUDA thread), or a real GPU with GPUCOURSE_DEVICE=gpu. Every
result is compared with ``reference_attention`` (float64 numpy) or with values
worked out by hand.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels import attention as A
from gpucourse.kernels.attention import flash as launch_path  # where the GPU queries are read

ATOL = 2e-5  # float32 kernels against float64, for O(1) inputs and head_dim <= 128
RTOL = 1e-4


def qkv(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return tuple((scale * rng.standard_normal(shape)).astype(np.float32) for _ in range(3))


def assert_tiles_compute_attention(config, shape, seed, causal, scale):
    """The flash kernel in tiles `config` (numpy in and out) on random q, k, v of
    `shape` gives the reference's output and log-sum-exp."""
    q, k, v = qkv(shape, seed=seed)
    out, lse = A._run_flash("numpy", q, k, v, config, causal, scale, False)
    ref, ref_lse = A.reference_attention(q, k, v, causal=causal, scale=scale, return_lse=True)
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(lse, ref_lse, atol=ATOL, rtol=RTOL)


# -----------------------------------------------------------------------------
# The reference and the numpy model of the algorithm


def test_reference_by_hand():
    # q = k = 0: every score is 0, so the weights are uniform and each output row
    # is the mean of v's rows; the log-sum-exp is log(seq).
    v = np.arange(12, dtype=np.float32).reshape(1, 1, 4, 3)
    zeros = np.zeros_like(v)
    out, lse = A.reference_attention(zeros, zeros, v, return_lse=True)
    np.testing.assert_allclose(out[0, 0], np.tile([4.5, 5.5, 6.5], (4, 1)))
    np.testing.assert_allclose(lse, np.log(4.0))
    # Causal: row i averages rows 0..i, and its log-sum-exp is log(i + 1).
    out, lse = A.reference_attention(zeros, zeros, v, causal=True, return_lse=True)
    np.testing.assert_allclose(out[0, 0, :, 0], [0, 1.5, 3, 4.5])
    np.testing.assert_allclose(lse[0, 0], np.log([1, 2, 3, 4]))


def test_reference_two_keys_by_hand():
    # One query (1, 0) against keys (2, 0) and (0, 0) with scale 1: scores 2 and 0,
    # weights e^2 / (e^2 + 1) and 1 / (e^2 + 1).
    q = np.array([[[[1.0, 0.0]]]])
    k = np.array([[[[2.0, 0.0], [0.0, 0.0]]]])
    v = np.array([[[[1.0, 0.0], [0.0, 1.0]]]])
    q2 = np.concatenate([q, q], axis=2)  # two identical queries (shapes must match)
    out = A.reference_attention(q2, k, v, scale=1.0)
    w = math.exp(2) / (math.exp(2) + 1)
    np.testing.assert_allclose(out[0, 0, 0], [w, 1 - w])


@settings(max_examples=30, deadline=None)
@given(seq=st.integers(1, 40), block=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_online_softmax_is_exact(seq, block, seed):
    x = np.random.default_rng(seed).normal(0, 50, size=(3, seq))
    expected = np.exp(x - x.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(A.online_softmax(x, block=block), expected, rtol=1e-12, atol=1e-300)


@settings(max_examples=25, deadline=None)
@given(seq=st.integers(1, 24), head_dim=st.integers(1, 6), block_rows=st.integers(1, 9),
       block_cols=st.integers(1, 9), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_tiled_model_matches_reference(seq, head_dim, block_rows, block_cols, causal, seed):
    q, k, v = qkv((2, seq, head_dim), seed, scale=3.0)
    out, lse = A.tiled_attention(q, k, v, causal=causal, block_rows=block_rows,
                                 block_cols=block_cols, return_lse=True)
    ref, ref_lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-10, atol=1e-12)


def test_online_softmax_step_by_hand():
    # One row; first tile scores (0, 0) with values 1 and 3: max 0, sum 2, acc 4.
    m, l, acc = A.online_softmax_step([-np.inf], [0.0], [[0.0]], [[0.0, 0.0]], [[1.0], [3.0]])
    assert (m[0], l[0], acc[0, 0]) == (0.0, 2.0, 4.0)
    # Second tile: score log(2) (larger) with value 5. The old sum and acc are
    # scaled by exp(0 - log 2) = 1/2: sum 1 + 1 = 2, acc 2 + 5 = 7.
    m, l, acc = A.online_softmax_step(m, l, acc, [[math.log(2)]], [[5.0]])
    assert m[0] == pytest.approx(math.log(2))
    assert l[0] == pytest.approx(2.0) and acc[0, 0] == pytest.approx(7.0)
    # The output 7 / 2 = 3.5 is the softmax average (1 + 3 + 2 * 5) / 4.
    assert acc[0, 0] / l[0] == pytest.approx(3.5)
    # A fully masked tile changes nothing.
    m2, l2, acc2 = A.online_softmax_step(m, l, acc, [[-np.inf]], [[9.0]])
    assert (m2[0], l2[0], acc2[0, 0]) == (m[0], l[0], acc[0, 0])


def test_causal_key_tiles_against_brute_force():
    for seq in (1, 5, 37, 64, 100):
        for block_rows in (1, 4, 16, 32, 64):
            for block_cols in (1, 8, 32):
                for qt in range(-(-seq // block_rows)):
                    rows = range(qt * block_rows, min((qt + 1) * block_rows, seq))
                    # A key tile is needed if some row sees some key of it (key <= row).
                    needed = [kt for kt in range(-(-seq // block_cols))
                              if any(kt * block_cols <= r for r in rows)]
                    assert A.causal_key_tiles(qt, block_rows, block_cols, seq) == len(needed)
                    assert needed == list(range(len(needed)))  # always a prefix


def test_causal_skips_about_half_the_tiles():
    seq, br, bc = 4096, 64, 32
    visited = sum(A.causal_key_tiles(t, br, bc, seq) for t in range(seq // br))
    full = (seq // br) * (seq // bc)
    assert visited / full == pytest.approx(0.5, abs=0.01)


# -----------------------------------------------------------------------------
# The tiled kernel against the reference

CASES = [  # (batch, heads, seq, head_dim, causal)
    (1, 2, 37, 16, False),
    (2, 1, 37, 16, True),
    (1, 1, 64, 32, False),
    (1, 2, 50, 32, True),
    (1, 1, 1, 16, False),  # one key: the output is v
    (1, 1, 70, 64, True),  # two query tiles, ragged
    (1, 1, 20, 128, False),
]


@pytest.mark.parametrize("batch, heads, seq, head_dim, causal", CASES)
def test_flash_matches_reference(batch, heads, seq, head_dim, causal):
    q, k, v = qkv((batch, heads, seq, head_dim), seed=seq + head_dim + causal)
    out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    assert out.dtype == np.float32 and out.shape == q.shape and lse.shape == q.shape[:3]
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(lse, ref_lse, atol=ATOL, rtol=RTOL)


def test_flash_custom_scale_and_rescaling_across_tiles():
    # Scores grow along the sequence (the maximum rises in every key tile), so
    # each tile rescales the running sum and the accumulator.
    seq, head_dim = 64, 32
    q, k, v = qkv((1, 1, seq, head_dim), seed=7)
    k = k + np.linspace(0, 4, seq, dtype=np.float32)[None, None, :, None] * q.mean(axis=2,
                                                                                    keepdims=True)
    k = k.astype(np.float32)
    out = A.flash_attention(q, k, v, scale=0.5)
    np.testing.assert_allclose(out, A.reference_attention(q, k, v, scale=0.5), atol=ATOL,
                               rtol=RTOL)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_survives_logits_of_1e4(causal):
    # Scores that are exact multiples of 1e4 (so float32 computes them exactly):
    # exp(1e4) overflows float32 and float64 alike, so only the subtraction of
    # the running maximum keeps the result finite. The largest key sits in the
    # last tile, so the earlier tiles' sums are rescaled by exp(-2e4) = 0.
    seq, head_dim = 40, 16
    rng = np.random.default_rng(3)
    q = np.zeros((1, 1, seq, head_dim), np.float32)
    k = np.zeros_like(q)
    q[..., 0] = 100.0
    k[..., 0] = 100.0 * rng.integers(-2, 2, size=seq)  # scores -2e4 .. 1e4
    k[0, 0, -1, 0] = 300.0  # score 3e4 for the last key
    v = rng.standard_normal(q.shape).astype(np.float32)
    out, lse = A.flash_attention(q, k, v, causal=causal, scale=1.0, return_lse=True)
    ref, ref_lse = A.reference_attention(q, k, v, causal=causal, scale=1.0, return_lse=True)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse))
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-6)
    if not causal:
        np.testing.assert_allclose(out[0, 0], np.tile(v[0, 0, -1], (seq, 1)), atol=1e-6)


def test_flash_takes_and_returns_device_arrays():
    q, k, v = qkv((1, 1, 33, 16), seed=11)
    out = A.flash_attention(cuda.to_device(q), cuda.to_device(k), cuda.to_device(v))
    assert not isinstance(out, np.ndarray) and hasattr(out, "copy_to_host")
    np.testing.assert_allclose(out.copy_to_host(), A.reference_attention(q, k, v), atol=ATOL,
                               rtol=RTOL)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if on_gpu() and torch.cuda.is_available() else None


@pytest.mark.skipif(_torch_cuda() is None, reason="needs a GPU and torch with CUDA")
def test_flash_takes_torch_cuda_tensors():
    torch = _torch_cuda()
    q, k, v = qkv((2, 2, 100, 64), seed=5)
    tq, tk, tv = (torch.from_numpy(x).cuda() for x in (q, k, v))
    out, lse = A.flash_attention(tq, tk, tv, causal=True, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.is_cuda and out.dtype == torch.float32
    ref, ref_lse = A.reference_attention(q, k, v, causal=True, return_lse=True)
    np.testing.assert_allclose(out.cpu().numpy(), ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(lse.cpu().numpy(), ref_lse, atol=ATOL, rtol=RTOL)


@pytest.mark.skipif(_torch_cuda() is None, reason="needs a GPU and torch with CUDA")
def test_flash_refuses_tensors_on_another_gpu(monkeypatch):
    # Raw pointers carry no device: tensors on a GPU other than the one the
    # launch runs on must be refused, not read at another GPU's addresses.
    torch = _torch_cuda()
    q = torch.zeros((1, 1, 8, 64), device="cuda")
    monkeypatch.setattr(launch_path, "_current_gpu", lambda: q.get_device() + 1)
    message = _error(A.flash_attention, q, q, q)
    assert "GPU Numba launches on" in message and "select_device" in message


@pytest.mark.skipif(not on_gpu(), reason="larger sizes only on a real GPU")
def test_flash_falls_back_to_the_portable_shape_on_gpu(monkeypatch):
    # A GPU that cannot give a block the tuned shape's shared memory runs the
    # portable one, and still gets the right answer.
    monkeypatch.setattr(launch_path, "_max_shared_bytes_per_block", lambda device: 64 * 1024)
    assert A._config_for(64) == A.PORTABLE_FLASH_CONFIGS[64]
    q, k, v = qkv((1, 2, 150, 64), seed=13)
    np.testing.assert_allclose(A.flash_attention(q, k, v, causal=True),
                               A.reference_attention(q, k, v, causal=True), atol=ATOL,
                               rtol=RTOL)


@pytest.mark.skipif(not on_gpu(), reason="larger sizes only on a real GPU")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_on_gpu_at_real_sizes(head_dim, causal):
    q, k, v = qkv((2, 3, 517, head_dim), seed=head_dim)
    out = A.flash_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(out, A.reference_attention(q, k, v, causal=causal), atol=ATOL,
                               rtol=RTOL)


@pytest.mark.skipif(not on_gpu(), reason="larger sizes only on a real GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_with_tiles_past_48_kib_on_gpu(causal):
    # Dynamic shared memory and the opt-in launch, on the hardware that needs them.
    config = A.FlashConfig(64, 128, 32, 8, 16)
    assert config.dynamic_shared
    assert_tiles_compute_attention(config, (1, 2, 300, 64), seed=9, causal=causal, scale=0.125)


# -----------------------------------------------------------------------------
# Cross-attention: queries and keys of different lengths


def sdpa_float64(q, k, v, causal):
    """PyTorch's scaled_dot_product_attention in float64 on the CPU: the
    definition of ``is_causal`` for unequal lengths (the top-left diagonal),
    independent of the course's reference."""
    import torch
    import torch.nn.functional as F

    tq, tk, tv = (torch.from_numpy(x.astype(np.float64)) for x in (q, k, v))
    return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).numpy()


CROSS_CASES = [  # (queries, keys): fewer and more keys, ragged tiles
    (5, 37),
    (37, 5),
    (70, 33),
]


@pytest.mark.parametrize("seq, key_seq", CROSS_CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_cross_attention_reference_and_numpy_model_equal_pytorch(seq, key_seq, causal):
    q = qkv((1, 2, seq, 16), seed=seq)[0]
    k, v = qkv((1, 2, key_seq, 16), seed=key_seq)[1:]
    want = sdpa_float64(q, k, v, causal)
    np.testing.assert_allclose(A.reference_attention(q, k, v, causal=causal), want,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(A.tiled_attention(q, k, v, causal=causal, block_rows=16,
                                                 block_cols=8), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seq, key_seq, head_dim, causal", [
    (5, 37, 16, True),    # few queries: under the mask they see the first keys only
    (37, 5, 16, True),    # few keys: rows past the last key see them all
    (70, 33, 32, False),  # two query tiles, two key tiles, both ragged
    (20, 45, 64, True),
])
def test_flash_cross_attention_equals_pytorch(seq, key_seq, head_dim, causal):
    q = qkv((1, 2, seq, head_dim), seed=seq + head_dim)[0]
    k, v = qkv((1, 2, key_seq, head_dim), seed=key_seq)[1:]
    out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    np.testing.assert_allclose(out, sdpa_float64(q, k, v, causal), atol=ATOL, rtol=RTOL)
    _, want_lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    np.testing.assert_allclose(lse, want_lse, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("causal", [False, True])
def test_naive_cross_attention_equals_pytorch(causal):
    q = qkv((1, 1, 9, 16), seed=9)[0]
    k, v = qkv((1, 1, 23, 16), seed=23)[1:]
    out = A.naive_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(out, sdpa_float64(q, k, v, causal), atol=ATOL, rtol=RTOL)


# -----------------------------------------------------------------------------
# Half precision: float16 (and, on a GPU, bfloat16) in and out, float32 inside


@pytest.mark.parametrize("seq, key_seq, head_dim, causal", [
    (37, 37, 16, True),
    (20, 45, 64, False),
])
def test_flash_in_float16_is_float32_arithmetic_rounded_once(seq, key_seq, head_dim, causal):
    """The kernel reads float16, computes in float32 and rounds its output once:
    its error against float64 on the float16 inputs is float16's rounding of
    the output (half a unit in the last place, 2^-11 relative), not the
    larger error of float16 arithmetic; the log-sum-exp stays float32."""
    q = qkv((1, 2, seq, head_dim), seed=seq, scale=2.0)[0].astype(np.float16)
    k, v = (x.astype(np.float16) for x in qkv((1, 2, key_seq, head_dim), seed=key_seq)[1:])
    out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
    assert out.dtype == np.float16 and out.shape == q.shape
    assert lse.dtype == np.float32
    want, want_lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    rounding = np.abs(want.astype(np.float16).astype(np.float64) - want)
    assert np.all(np.abs(out.astype(np.float64) - want) <= rounding + 1e-6 + 1e-5 * np.abs(want))
    np.testing.assert_allclose(lse, want_lse, atol=ATOL, rtol=RTOL)


def test_flash_refuses_mixed_or_unsupported_dtypes():
    q, k, v = qkv((1, 1, 8, 16), seed=0)
    message = _error(A.flash_attention, q.astype(np.float16), k, v)
    assert "one dtype" in message and "float16" in message
    message = _error(A.flash_attention, q.astype(np.float64), k, v)
    assert "float32 or float16 or bfloat16" in message and "float64" in message
    # The naive pipeline and the backward pass stay float32.
    assert "must be float32, got float16" in _error(
        A.naive_attention, *(x.astype(np.float16) for x in (q, k, v)))


@pytest.mark.skipif(_torch_cuda() is None, reason="needs a GPU and torch with CUDA")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_flash_takes_half_precision_torch_tensors(dtype):
    # With tensor_cores=False, half-precision inputs are converted to float32
    # as they are loaded and the output is rounded once: float32 attention
    # on the same values, within half a unit of the type.
    torch = _torch_cuda()
    q, k, v = qkv((2, 4, 300, 128), seed=4)
    tq, tk, tv = (torch.from_numpy(x).cuda().to(getattr(torch, dtype)) for x in (q, k, v))
    out, lse = A.flash_attention(tq, tk, tv, causal=True, return_lse=True, tensor_cores=False)
    assert out.dtype == getattr(torch, dtype) and lse.dtype == torch.float32
    want = A.reference_attention(*(x.float().cpu().numpy() for x in (tq, tk, tv)), causal=True)
    step = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}[dtype]  # half a unit, relative
    got = out.float().cpu().numpy()
    assert np.all(np.abs(got - want) <= step * np.abs(want) + 1e-5)


@pytest.mark.skipif(_torch_cuda() is None, reason="needs a GPU and torch with CUDA")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
def test_half_precision_flash_errs_no_more_than_sdpa_flash(dtype, head_dim):
    # By default half-precision inputs run FlashAttention-2 in half
    # precision (attention.half), P rounded to the type as FlashAttention-2
    # does: held to the error of PyTorch's flash backend on the same inputs,
    # against float64; the log-sum-exp, from float32 scores, to float32's.
    torch = _torch_cuda()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = qkv((2, 4, 300, head_dim), seed=5)
    tq, tk, tv = (torch.from_numpy(x).cuda().to(getattr(torch, dtype)) for x in (q, k, v))
    for causal in (False, True):
        out, lse = A.flash_attention(tq, tk, tv, causal=causal, return_lse=True)
        assert out.dtype == tq.dtype and bool(torch.isfinite(out).all())
        ref = sdpa(tq.double(), tk.double(), tv.double(), is_causal=causal)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            peer = sdpa(tq, tk, tv, is_causal=causal)
        error = float((out.double() - ref).abs().max())
        assert error <= 2 * float((peer.double() - ref).abs().max()) + 1e-4, (causal, error)
        scores = tq.double() @ tk.double().transpose(-1, -2) * head_dim ** -0.5
        if causal:
            scores = scores.masked_fill(torch.ones(300, 300, dtype=torch.bool,
                                                   device="cuda").triu(1), float("-inf"))
        assert torch.allclose(lse.double(), torch.logsumexp(scores, -1), atol=1e-4, rtol=1e-5)


# -----------------------------------------------------------------------------
# The naive pipeline


@pytest.mark.parametrize("causal", [False, True])
def test_naive_matches_reference(causal):
    q, k, v = qkv((1, 1, 21, 16), seed=2 + causal)
    out, lse = A.naive_attention(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(lse, ref_lse, atol=ATOL, rtol=RTOL)


# -----------------------------------------------------------------------------
# Counting


def test_flops_by_hand():
    # The source's configuration: 4 * 4 * 16 * 1024^2 * 64 = 2^34.
    assert A.attention_flops(4, 16, 1024, 64) == 2.0**34
    assert A.attention_flops(4, 16, 1024, 64, causal=True) == 2.0**33


def test_traffic_by_hand():
    # One head, seq 2, head_dim 1: 4 * 2 * 1 + 4 * 2 * 2 = 24 elements, 96 bytes.
    assert A.naive_hbm_bytes(1, 1, 2, 1) == 96
    # seq 4, head_dim 2, tiles of 2 rows: Q and O 16 elements, K and V read by
    # two tiles 2 * 2 * 4 * 2 = 32 elements; 48 * 4 bytes + 16 bytes of log-sum-exp.
    assert A.flash_hbm_bytes(1, 1, 4, 2, block_rows=2) == 208
    # Causal: tile 0 reads 2 rows of K and V, tile 1 reads 4: 16 + 2 * 6 * 2 = 40.
    assert A.flash_hbm_bytes(1, 1, 4, 2, block_rows=2, causal=True) == 176
    assert A.extra_memory_bytes(4, 16, 1024, "naive") == 4 * 16 * 1024 * 1024 * 4


def test_tiled_traffic_grows_linearly_naive_quadratically():
    small, large = (A.naive_hbm_bytes(1, 1, n, 64) for n in (4096, 8192))
    assert large / small == pytest.approx(4, rel=0.01)
    small, large = (A.flash_hbm_bytes(1, 1, n, 64) for n in (4096, 8192))
    assert large / small == pytest.approx(4, rel=0.02)  # K, V re-read per query tile
    # With head_dim 64, re-reading K and V per tile of Br query rows costs
    # 2 N^2 d / Br against the score matrix's 4 N^2: 32 / Br (1/2 for 64 rows).
    naive = A.naive_hbm_bytes(4, 16, 4096, 64)
    for block_rows in (64, 128):
        ratio = A.flash_hbm_bytes(4, 16, 4096, 64, block_rows=block_rows) / naive
        assert ratio == pytest.approx(32 / block_rows, rel=0.02)
    assert A.flash_hbm_bytes(4, 16, 4096, 64) == A.flash_hbm_bytes(
        4, 16, 4096, 64, block_rows=A.FLASH_CONFIGS[64].block_rows)
    # When the cache holds K and V, only Q, K, V and O cross: linear in seq.
    small, large = (A.flash_hbm_bytes(1, 1, n, 64, kv_cached=True) for n in (4096, 8192))
    assert large / small == pytest.approx(2)
    assert A.flash_hbm_bytes(1, 1, 4, 2, kv_cached=True) == (4 * 4 * 2) * 4 + 16
    assert A.extra_memory_bytes(1, 1, 8192, "flash") * 8192 == A.extra_memory_bytes(
        1, 1, 8192, "naive")


def test_shared_traffic_counts_the_loops():
    c = A.FLASH_CONFIGS[64]
    per_thread = 64 * (c.thread_rows + c.score_cols_per_thread) + \
        c.thread_rows * c.score_cols_per_thread + \
        c.block_cols * (c.thread_rows + c.out_cols_per_thread)
    per_tile = 2 * c.block_cols * 64 + c.threads * per_thread
    expected = (1024 // c.block_rows) * (c.block_rows * 64 + (1024 // c.block_cols) * per_tile)
    assert A.flash_shared_bytes(1, 1, 1024, 64) == 4 * expected


def test_every_config_fits():
    # The portable shapes fit the static 48 KiB every GPU gives a block; the
    # tuned ones fit the most an H100 gives, and fall back to the portable one.
    for configs in (A.PORTABLE_FLASH_CONFIGS, A.FLASH_CONFIGS):
        assert sorted(configs) == list(A.SUPPORTED_HEAD_DIMS)
    for head_dim, config in A.PORTABLE_FLASH_CONFIGS.items():
        assert config.head_dim == head_dim
        assert A.check_config(config).shared_bytes <= A.STATIC_SHARED_LIMIT_BYTES
    for head_dim, config in A.FLASH_CONFIGS.items():
        assert config.head_dim == head_dim
        assert A.check_config(config).shared_bytes <= A.DYNAMIC_SHARED_LIMIT_BYTES
    for head_dim, shapes in A.CAUSAL_FLASH_CONFIGS.items():
        assert [longest for longest, _ in shapes] == sorted({longest for longest, _ in shapes})
        for _, config in shapes:
            assert config.head_dim == head_dim
            assert A.check_config(config).shared_bytes <= A.DYNAMIC_SHARED_LIMIT_BYTES


def test_causal_short_sequences_get_their_own_tiles():
    (short, first), (longer, second) = A.CAUSAL_FLASH_CONFIGS[64]
    cuda_cores = dict(tensor_cores=False)  # the CUDA-core kernel's shapes
    for seq, expected in ((1, first), (short, first), (short + 1, second), (longer, second),
                          (longer + 1, A.FLASH_CONFIGS[64])):
        assert A._config_for(64, causal=True, seq=seq, **cuda_cores) == expected, seq
        assert A._config_for(64, causal=False, seq=seq, **cuda_cores) == A.FLASH_CONFIGS[64], seq
    assert A._config_for(128, causal=True, seq=512, **cuda_cores) == A.FLASH_CONFIGS[128]


@pytest.mark.parametrize("config", [shape for _, shape in A.CAUSAL_FLASH_CONFIGS[64]])
def test_causal_tile_shapes_compute_attention(config):
    # Three query tiles of the smaller shape (two of the larger), the last one ragged.
    assert_tiles_compute_attention(config, (1, 1, 70, 64), seed=7, causal=True, scale=0.125)


def test_a_gpu_without_the_shared_memory_gets_the_portable_shape(monkeypatch):
    monkeypatch.setattr(launch_path, "on_gpu", lambda: True)
    monkeypatch.setattr(launch_path, "_current_gpu", lambda: 0)
    # The CUDA-core kernel's shapes (test_attention_tensor_cores.py: the tensor cores').
    monkeypatch.setattr(launch_path, "_has_tf32_tensor_cores", lambda device: False)
    tuned = A.FLASH_CONFIGS[64]
    assert tuned.dynamic_shared  # the case this test is about
    for max_bytes, expected in ((64 * 1024, A.PORTABLE_FLASH_CONFIGS[64]),
                                (227 * 1024, tuned)):
        monkeypatch.setattr(launch_path, "_max_shared_bytes_per_block", lambda device: max_bytes)
        assert A._config_for(64) == expected
    assert A._config_for(32) == A.FLASH_CONFIGS[32]  # static shapes never fall back


# -----------------------------------------------------------------------------
# Bad input


def _error(function, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        function(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("function", [A.flash_attention, A.naive_attention])
def test_bad_input(function):
    q, k, v = qkv((1, 1, 8, 16), seed=0)
    message = _error(function, q, k[:, :, :4].copy(), v)
    assert "k and v must have the same shape" in message and "(1, 1, 4, 16)" in message
    other_heads = np.zeros((1, 2, 8, 16), np.float32)
    assert "q's batch, heads and head_dim" in _error(function, q, other_heads, other_heads)
    other_dim = np.zeros((1, 1, 8, 32), np.float32)
    assert "q's batch, heads and head_dim" in _error(function, q, other_dim, other_dim)
    assert "float32" in _error(function, q.astype(np.float64), k, v)
    assert "float32" in _error(function, q, k, v.astype(np.float16))
    assert "4 dimensions" in _error(function, q[0], k[0], v[0])
    big = np.zeros((1, 1, 16, 16), np.float32)
    assert "C-contiguous" in _error(function, big[:, :, ::2], k, v)
    assert "numpy arrays" in _error(function, q.tolist(), k, v)
    assert "one kind" in _error(function, q, cuda.to_device(k), v)
    assert "scale" in _error(function, q, k, v, scale=-1.0)
    assert "scale" in _error(function, q, k, v, scale=float("nan"))
    assert "causal" in _error(function, q, k, v, causal="yes")
    assert "return_lse" in _error(function, q, k, v, return_lse=1)
    assert "empty" in _error(function, *(np.zeros((1, 0, 8, 16), np.float32),) * 3)


def test_flash_refuses_unsupported_head_dim():
    q, k, v = qkv((1, 1, 8, 48), seed=0)
    message = _error(A.flash_attention, q, k, v)
    assert "head_dim" in message and "16, 32, 64, 128" in message


def test_bad_counts_and_configs():
    assert "seq" in _error(A.attention_flops, 1, 1, 0, 64)
    assert "batch" in _error(A.naive_hbm_bytes, 1.5, 1, 8, 64)
    assert "head_dim" in _error(A.flash_shared_bytes, 1, 1, 8, 48)
    assert "variant" in _error(A.extra_memory_bytes, 1, 1, 8, "fast")
    assert "query_tile" in _error(A.causal_key_tiles, 2, 32, 32, 64)
    assert "block" in _error(A.online_softmax, [1.0, 2.0], block=0)
    assert "row_max" in _error(A.online_softmax_step, [0.0], [1.0], [[0.0]],
                               [[1.0], [2.0]], [[1.0]])
    assert "thread_cols" in _error(A.check_config, A.FlashConfig(64, 64, 32, 8, 12))
    assert "divide one another" in _error(A.check_config, A.FlashConfig(48, 32, 32, 4, 8))
    assert "shared memory" in _error(A.check_config, A.FlashConfig(128, 128, 128, 8, 16))
    assert "multiples of 4" in _error(A.check_config, A.FlashConfig(16, 32, 32, 2, 8))
    assert "multiples of 4" in _error(A.check_config, A.FlashConfig(32, 32, 32, 4, 16))


@pytest.mark.parametrize("config", [
    # More threads than head_dim, query tiles shorter than key tiles.
    A.FlashConfig(16, 32, 64, 4, 4),
    # Two groups of four output columns per thread, query tiles longer than key tiles.
    A.FlashConfig(16, 64, 16, 4, 2),
    # Tiles past the 48 KiB of static shared memory: one dynamic array, carved up.
    A.FlashConfig(16, 64, 128, 4, 4),
])
def test_flash_kernel_other_tile_shape(config):
    # Tile shapes other than the defaults compute the same function.
    assert_tiles_compute_attention(config, (1, 1, 45, 16), seed=3, causal=True, scale=0.25)


@pytest.mark.parametrize("steps", [2, 4])
def test_loops_written_out_several_steps_per_pass_compute_the_same(steps):
    # FlashConfig.steps_per_pass writes 2 or 4 steps of the two tile products
    # out per pass; a ragged causal head must come out as with one step.
    config = A.FlashConfig(16, 32, 32, 4, 4, steps_per_pass=steps)
    assert_tiles_compute_attention(config, (1, 2, 45, 16), seed=5, causal=True, scale=0.25)


def test_steps_per_pass_is_checked():
    assert "steps_per_pass" in _error(A.check_config, A.FlashConfig(16, 32, 32, 4, 4, 3))
    # Four keys a pass need block_cols a multiple of 4; two do for 34 keys.
    assert "steps_per_pass" in _error(A.check_config, A.FlashConfig(16, 64, 34, 4, 2, 4))
    assert A.check_config(A.FlashConfig(16, 64, 34, 4, 2, 2))


FORWARD_PTX_SCRIPT = """
import json
from gpucourse.kernels import attention as A
from gpucourse.kernels.attention import forward
forward.on_gpu = lambda: False  # build the lazy kernel: compile_ptx compiles it here for sm_90
shapes = [A.FLASH_CONFIGS[64], A.FLASH_CONFIGS[128]]
shapes += [shape for _, shape in A.CAUSAL_FLASH_CONFIGS[64]]
texts = [numba.cuda.compile_ptx(A._flash_kernel(c, True, True).py_func,
                                A._flash_signature("float32"), cc=(9, 0))[0] for c in shapes]
print(json.dumps(texts))
"""


def test_the_tuned_shapes_compile_for_an_h100_without_spilling():
    """Each tuned shape's steps per pass is the most that ptxas (sm_90) keeps
    in registers: what a GPU would run, compiled here without one."""
    import json

    from ptx_helpers import compile_without_a_gpu, ptxas_report

    texts = json.loads(compile_without_a_gpu(FORWARD_PTX_SCRIPT).strip().splitlines()[-1])
    for text in texts:
        assert ".target sm_90" in text
        report = ptxas_report(text)
        assert "0 bytes spill stores" in report, report


# -----------------------------------------------------------------------------
# The chapter's reading of a results file


def _result(variant, seq, causal, ms):
    return dict(variant=variant, batch=4, heads=16, seq=seq, head_dim=64, causal=causal,
                ms=ms, tflops=1.0, peak_mem_bytes=1, max_abs_err=0.0, mean_rel_err=0.0,
                status="ok" if ms else "oom")


def test_benchmark_markdown_states_the_ratios_to_the_peer():
    results = [_result("flash", 1024, False, 0.5), _result("sdpa_efficient", 1024, False, 0.625),
               _result("torch_naive", 1024, False, 1.0),
               _result("flash", 2048, False, 2.2), _result("sdpa_efficient", 2048, False, 2.0),
               _result("flash", 4096, False, 8.0), _result("sdpa_efficient", 4096, False, None),
               _result("flash", 1024, True, 0.3), _result("sdpa_efficient", 1024, True, 0.25),
               _result("flash", 2048, True, 0.9), _result("sdpa_efficient", 2048, True, 1.0)]
    data = dict(benchmark="attention", gpu="Test GPU", date="2026-01-01",
                versions={}, results=results)
    text = A.benchmark_markdown(data)
    assert "takes 0.80 times its time (faster)" in text  # 0.5 / 0.625
    assert "2.00x" in text  # the naive time over ours
    # Ratios only where both ran (4096 is out of memory for the peer).
    assert "Over N = 1,024 to 2,048 ours takes 0.80 to 1.10 times" in text
    assert "0.90 to 1.20 times with the causal mask" in text


def test_the_committed_results_file_reads():
    paths = A.find_benchmark_results()
    assert paths, "benchmarks/results holds an attention run"
    data = A.load_benchmark(paths[-1])
    text = A.benchmark_markdown(data)
    assert data["gpu"] in text and "Validation grid" in text


def _timing_row(variant, seq, head_dim, causal, ms):
    return dict(variant=variant, batch=4, heads=16, seq=seq, head_dim=head_dim, causal=causal,
                ms=ms, tflops=1.0, peak_mem_bytes=1, max_abs_err=0.0, mean_rel_err=0.0,
                status="ok")


def test_benchmark_summary_keeps_head_dims_apart():
    rows = [_timing_row(v, n, d, c, ms * (2.0 if d == 128 else 1.0) * (1.5 if c else 1.0))
            for d in (64, 128) for c in (False, True) for n in (1024, 4096)
            for v, ms in (("flash", 1.2), ("sdpa_efficient", 1.0), ("torch_naive", 3.0))]
    # Ours takes 1.2 times the peer's time at head_dim 64 and 1.5 times at 128.
    for r in rows:
        if r["head_dim"] == 128 and r["variant"] == "flash":
            r["ms"] *= 1.25
    assert A._ratio_span(rows, "flash", "sdpa_efficient", False) == \
        pytest.approx((1.2, 1.2, 1024, 4096))
    assert A._ratio_span(rows, "flash", "sdpa_efficient", True, head_dim=128) == \
        pytest.approx((1.5, 1.5, 1024, 4096))
    data = dict(gpu="Test GPU", date="2026-01-01", versions={}, method="m", results=rows)
    text = A.benchmark_markdown(data)
    assert "takes 1.20 times its time (slower)" in text
    assert "1.20 to 1.20 times the memory-efficient backend's time without a mask" in text
    assert "At head dimension 128, over N = 1,024 to 4,096, ours takes 1.50 to 1.50" in text
    for r in rows:  # now as fast as the peer at head_dim 64
        if r["variant"] == "flash" and r["head_dim"] == 64:
            r["ms"] /= 1.2
    assert "(the same, to two digits)" in A.benchmark_markdown(data)


def test_half_precision_tables_read_a_results_file():
    # A results file of benchmarks/attention_half.py, made up: ours 0.6 ms
    # against SDPA flash's 0.1 ms forward (6x) and 3.0 against 0.3 backward (10x);
    # ours in fp32 0.5 ms, so fp16 takes 1.2 times its fp32 time.
    def row(variant, dtype, ms):
        return dict(variant=variant, dtype=dtype, batch=4, heads=16, seq=1024, head_dim=64,
                    causal=False, ms=ms)

    record = {"results": [row("flash_fp16", "fp16", 0.6), row("sdpa_flash_fp16", "fp16", 0.1),
                          row("sdpa_efficient_fp16", "fp16", 0.2), row("flash_fp32", "fp32", 0.5),
                          row("flash_bwd_fp16", "fp16", 3.0),
                          row("sdpa_flash_bwd_fp16", "fp16", 0.3)]}
    ratios = A.half_precision_ratios(record)
    assert ratios["forward"] == pytest.approx((6.0, 6.0))
    assert ratios["backward"] == pytest.approx((10.0, 10.0))
    assert ratios["half_over_fp32"] == pytest.approx((1.2, 1.2))
    table = A.half_precision_markdown(record).splitlines()
    assert table[2] == "| forward | fp16 | 1,024 | 64 | no | 0.600 | 0.100 | 0.200 | 0.500 | 6.0 |"
    assert table[3] == "| backward | fp16 | 1,024 | 64 | no | 3.000 | 0.300 | – | – | 10.0 |"


def test_throughput_reads_ours_and_the_peer_at_a_length_both_ran():
    rows = [dict(_timing_row(v, n, d, False, 1.0), tflops=rate)
            for d, n, v, rate in ((64, 1024, "flash", 20.0), (64, 1024, "sdpa_efficient", 21.0),
                                  (64, 4096, "flash", 28.0), (64, 4096, "sdpa_efficient", 28.5),
                                  (128, 1024, "flash", 25.0),
                                  (128, 1024, "sdpa_efficient", 33.0),
                                  (128, 4096, "flash", 31.0))]  # no peer at d128, N 4096
    rows.append(dict(_timing_row("flash", 1024, 64, True, 1.0), tflops=99.0))  # causal: ignored
    assert A.throughput(rows) == ({64: (20.0, 21.0), 128: (25.0, 33.0)}, 1024)
    with pytest.raises(ValueError, match="one of \\[1024\\]"):
        A.throughput(rows, seq=4096)
    rates, seq = A.throughput(A.load_benchmark(A.find_benchmark_results()[-1])["results"])
    assert seq >= 1024 and set(rates) >= {64, 128}


def test_steps_per_pass_times_pairs_one_shape_at_each_steps_per_pass():
    def tuned(text, ms, ms_long):
        return dict(config=text, ms=ms, ms_seq4096=ms_long)

    record = {"tuning": [
        tuned("FlashConfig(head_dim=64, block_rows=128, block_cols=32, thread_rows=8, "
              "thread_cols=8, steps_per_pass=1)", 0.57, 8.0),
        tuned("FlashConfig(head_dim=64, block_rows=64, block_cols=32, thread_rows=8, "
              "thread_cols=8, steps_per_pass=1)", 0.58, 8.1),  # another shape: left out
        tuned("FlashConfig(head_dim=64, block_rows=128, block_cols=32, thread_rows=8, "
              "thread_cols=8, steps_per_pass=4)", 0.55, 7.6),
        dict(config="FlashConfig(head_dim=64, block_rows=128, block_cols=32, thread_rows=8, "
                    "thread_cols=8, steps_per_pass=2)", passed=False, error="x"),  # not timed
    ]}
    shape = A.FlashConfig(64, 128, 32, 8, 8, 4)
    assert A.steps_per_pass_times(record, shape) == {1: (0.57, 8.0), 4: (0.55, 7.6)}
    # Files from before steps_per_pass name no steps: one a pass.
    old = {"tuning": [tuned("FlashConfig(head_dim=64, block_rows=128, block_cols=32, "
                            "thread_rows=8, thread_cols=8)", 0.6, 8.2)]}
    assert A.steps_per_pass_times(old, shape) == {1: (0.6, 8.2)}
    with pytest.raises(ValueError, match="did not time"):
        A.steps_per_pass_times(old, A.FlashConfig(64, 64, 64, 8, 16))


def test_the_committed_run_timed_the_tuned_shape_at_one_and_four_steps():
    data = A.load_benchmark(A.find_benchmark_results()[-1])
    times = A.steps_per_pass_times(data, A.FLASH_CONFIGS[64])
    # What chapter 9 says of the run: four steps a pass beat one at both lengths.
    assert A.FLASH_CONFIGS[64].steps_per_pass == 4 and {1, 4} <= set(times)
    assert times[4][0] < times[1][0] and times[4][1] < times[1][1]
