"""The FlashAttention backward pass against float64 autograd (torch on the CPU)
and the naive backward in numpy, on ragged shapes, causal and not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpucourse.kernels import attention as A
from gpucourse.kernels.attention_backward import (BLOCK, TILED_CONFIGS, TILED_CONFIGS_V3,
                                                  TILED_CONFIGS_V4, check_tiled_config,
                                                  check_tiled_config_v3, shared_bytes_v3,
                                                  flash_attention_backward,
                                                  reference_attention_backward)

ATOL, RTOL = 2e-4, 2e-3


def inputs(shape, seed, logit_scale=1.0):
    rng = np.random.default_rng(seed)
    q, k, v, dout = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    return q * np.float32(logit_scale), k, v, dout


def autograd_grads(q, k, v, dout, causal, scale):
    """dQ, dK, dV by torch's autograd of plain attention, in float64."""
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    scores = scale * tq @ tk.transpose(-1, -2)
    if causal:  # query i sees keys 0..i (the top-left diagonal when the lengths differ)
        n, m = q.shape[-2], k.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, m, dtype=torch.bool).tril(), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ tv
    out.backward(torch.tensor(dout, dtype=torch.float64))
    return tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


@pytest.mark.parametrize("shape, causal, version", [
    ((1, 2, 37, 16), False, 2),   # ragged: two tiles, the second of 5 rows
    ((1, 2, 37, 16), True, 2),
    ((1, 1, BLOCK + 1, 32), True, 2),  # one row past a tile
    ((1, 1, 1, 16), False, 2),    # one key: dV = dO, dQ = dK = 0
    ((1, 2, 37, 16), True, 1),    # version 1, the reference version 2 is timed against
    ((1, 1, 1, 16), False, 1),
    ((1, 2, 37, 16), True, 3),    # version 3: tiles in dynamic shared memory
    ((1, 1, 1, 16), False, 3),
    ((1, 2, 37, 16), True, 4),    # version 4: one kernel, dQ by atomic adds
    ((1, 1, 1, 16), False, 4),
])
def test_gradients_equal_float64_autograd(shape, causal, version):
    q, k, v, dout = inputs(shape, seed=sum(shape) + causal)
    scale = 1.0 / np.sqrt(shape[-1])
    out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    out, lse = out.astype(np.float32), lse.astype(np.float32)
    got = flash_attention_backward(q, k, v, out, lse, dout, causal=causal, version=version)
    want = autograd_grads(q, k, v, dout, causal, scale)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype == np.float32 and g.shape == q.shape, name
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL, err_msg=name)


@pytest.mark.parametrize("seq, key_seq, causal, version", [
    (20, 45, False, 2),   # more keys than queries: two key tiles, one ragged
    (45, 20, True, 2),    # more queries: rows past the last key see every key
    (7, 40, True, 2),     # under the mask, keys past the last query get no gradient
    (45, 20, True, 1),
    (45, 20, True, 3),
    (45, 20, True, 4),
    (7, 40, True, 4),
])
def test_cross_attention_gradients_equal_float64_autograd(seq, key_seq, causal, version):
    q, _, _, dout = inputs((1, 2, seq, 16), seed=seq)
    _, k, v, _ = inputs((1, 2, key_seq, 16), seed=key_seq)
    out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    got = flash_attention_backward(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout,
                                   causal=causal, version=version)
    want = autograd_grads(q, k, v, dout, causal, 0.25)
    for name, g, w, like in zip(("dq", "dk", "dv"), got, want, (q, k, v)):
        assert g.dtype == np.float32 and g.shape == like.shape, name
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL, err_msg=name)
    if causal and key_seq > seq:
        assert not np.any(got[1][:, :, seq:]) and not np.any(got[2][:, :, seq:])


def test_with_the_forward_kernels_own_output_and_large_logits():
    # The forward kernel's O and log-sum-exp, scores scaled 30 times up: the
    # recomputed probabilities must not overflow.
    q, k, v, dout = inputs((1, 1, 40, 16), seed=5, logit_scale=30.0)
    out, lse = A.flash_attention(q, k, v, causal=True, return_lse=True)
    got = flash_attention_backward(q, k, v, out, lse, dout, causal=True)
    want = reference_attention_backward(q, k, v, dout, causal=True)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert np.all(np.isfinite(g)), name
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g / scale, w / scale, atol=1e-3, err_msg=name)


@pytest.mark.parametrize("head_dim, seq", [(64, 21), (128, 18)])
def test_version_2s_own_tiles_at_the_large_head_dims(head_dim, seq):
    """Head dims 64 and 128 have their own patch shapes (and d128 tiles of 16):
    ragged, causal, against float64 autograd."""
    q, k, v, dout = inputs((1, 1, seq, head_dim), seed=head_dim)
    out, lse = A.reference_attention(q, k, v, causal=True, return_lse=True)
    got = flash_attention_backward(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout,
                                   causal=True)
    want = autograd_grads(q, k, v, dout, True, 1.0 / np.sqrt(head_dim))
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL, err_msg=name)


@pytest.mark.parametrize("head_dim, seq, key_seq, version", [
    (64, 70, 45, 3), (64, 70, 45, 4), (128, 9, 13, 4)])
def test_versions_3_and_4_own_tiles_at_the_large_head_dims(head_dim, seq, key_seq, version):
    """Versions 3's and 4's 64-row tiles (128 or 256 threads, four-float loads),
    ragged, causal, cross-attention, against float64 autograd."""
    q, _, _, dout = inputs((1, 1, seq, head_dim), seed=head_dim)
    _, k, v, _ = inputs((1, 1, key_seq, head_dim), seed=head_dim + 1)
    out, lse = A.reference_attention(q, k, v, causal=True, return_lse=True)
    got = flash_attention_backward(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout,
                                   causal=True, version=version)
    want = autograd_grads(q, k, v, dout, True, 1.0 / np.sqrt(head_dim))
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=RTOL, err_msg=name)


@pytest.mark.parametrize("version", [3, 4])
def test_versions_3_and_4_in_float16_compute_in_float32(version):
    """float16 in and out, float32 inside (version 4 sums dQ in a float32 array
    and rounds it once): each gradient's error against float64 on the float16
    values is its own rounding to float16 and little more."""
    q, _, _, dout = inputs((1, 2, 37, 16), seed=8)
    _, k, v, _ = inputs((1, 2, 29, 16), seed=9)
    q, k, v, dout = (x.astype(np.float16) for x in (q, k, v, dout))
    out, lse = A.reference_attention(q, k, v, causal=True, return_lse=True)
    got = flash_attention_backward(q, k, v, out.astype(np.float16), lse.astype(np.float32),
                                   dout, causal=True, version=version)
    # The reference from the same rounded O the kernel was given (D uses it).
    want = autograd_grads(q, k, v, dout, True, 0.25)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype == np.float16, name
        rounding = np.abs(w.astype(np.float16).astype(np.float64) - w)
        err = np.abs(g.astype(np.float64) - w)
        assert np.all(err <= rounding + 1e-3 * np.abs(w).max()), (name, float(err.max()))
    with pytest.raises(ValueError, match="versions 3, 4 and 5 alone"):
        flash_attention_backward(q, k, v, out.astype(np.float16), lse.astype(np.float32), dout,
                                 version=2)
    with pytest.raises(ValueError, match="dout must be float16"):
        flash_attention_backward(q, k, v, out.astype(np.float16), lse.astype(np.float32),
                                 dout.astype(np.float32), version=version)


def test_version_4_checks_its_larger_shared_memory():
    # Version 4 keeps one more 64 x 68 tile (dS transposed) than version 3.
    assert shared_bytes_v3(128, 64, version=4) - shared_bytes_v3(128, 64) == 4 * 64 * 68
    for head_dim, config in TILED_CONFIGS_V4.items():
        assert check_tiled_config_v3(head_dim, config, version=4) == config
    # Tiles of 112 rows at head dim 64 fit version 3's 227 KiB but not version 4's.
    config = (112, 224, 7, 8, 4, 8)
    assert check_tiled_config_v3(64, config) == config
    with pytest.raises(ValueError, match="shared memory"):
        check_tiled_config_v3(64, config, version=4)
    with pytest.raises(ValueError, match="version must be 3 or 4"):
        check_tiled_config_v3(64, TILED_CONFIGS_V4[64], version=2)


# Tile configurations the checks refuse, each with words of the refusal.
@pytest.mark.parametrize("check, words, head_dim, config", [
    (check_tiled_config, "must each take all 128 threads", 64, (32, 128, 2, 2, 4, 4)),
    (check_tiled_config, "must divide", 64, (32, 128, 3, 2, 4, 4)),
    (check_tiled_config, "shared memory", 128, (32, 256, 2, 2, 2, 8)),
    (check_tiled_config, "six whole numbers", 64, (32, 128, 4)),
    (check_tiled_config_v3, "multiples of 4", 64, (64, 256, 4, 4, 2, 8)),
    (check_tiled_config_v3, "must each take all 128 threads", 64, (64, 128, 4, 4, 4, 4)),
    (check_tiled_config_v3, "shared memory", 128, (128, 1024, 4, 4, 4, 4)),
    (check_tiled_config_v3, "six whole numbers", 64, (64, 256, 4, 4, 4, True)),
    (check_tiled_config_v3, "registers per thread", 64, (64, 256, 4, 4, 4, 4, 300)),
])
def test_a_bad_tile_configuration_is_refused(check, words, head_dim, config):
    with pytest.raises(ValueError, match=words):
        check(head_dim, config)


def test_version_3_configurations_are_checked():
    # (the configurations it refuses: test_a_bad_tile_configuration_is_refused)
    for head_dim, config in TILED_CONFIGS_V3.items():
        assert check_tiled_config_v3(head_dim, config) == config
    from gpucourse.kernels.attention_backward import V3_SWEEP

    for head_dim, configs in V3_SWEEP.items():
        for config in configs:
            assert check_tiled_config_v3(head_dim, config) == config


V3_PTX_SCRIPT = """
from gpucourse.kernels import attention_backward as AB
for io in ("float32", "float16"):
    dkdv, dq, *_ = AB._v3_functions(64, True, None, io)
    for name, function in (("dkdv", dkdv), ("dq", dq)):
        signature = AB.v3_signature(name, io)
        print(numba.cuda.compile_ptx(function, signature, cc=(9, 0))[0])
        print("=== end of kernel ===")
for io in ("float32", "float16"):
    fused, *_ = AB._v4_functions(64, True, None, io)
    print(numba.cuda.compile_ptx(fused, AB.v3_signature("fused", io), cc=(9, 0))[0])
    print("=== end of kernel ===")
"""


def test_versions_3_and_4_compile_for_an_h100_with_four_float_shared_loads():
    """What a GPU would run, compiled here without one: the kernels read their
    tiles with 128-bit shared loads and keep every patch in registers."""
    from ptx_helpers import compile_without_a_gpu

    texts = compile_without_a_gpu(V3_PTX_SCRIPT).split("=== end of kernel ===")
    kernels, (fused, fused16) = texts[:4], texts[4:6]
    for text in kernels + [fused, fused16]:
        assert ".target sm_90" in text
        assert ".extern .shared .align 16" in text  # the dynamic tiles, aligned for v4
        assert text.count("ld.shared.v4.f32") >= 16
        assert ".local" not in text  # no patch spilled to local memory
    # In float16 the kernels read 16-bit elements, convert them to float32 and
    # round each gradient once: no half-precision arithmetic.
    for text in kernels[2:] + [fused16]:
        assert "ld.global.u16" in text or "ld.global.b16" in text
        assert "cvt.f32.f16" in text and "cvt.rn.f16.f32" in text
        assert not any(op in text for op in ("fma.rn.f16", "mul.f16", "add.f16"))
    # Version 4 adds each thread's patch of dQ (VK x VC floats) to global
    # memory with float32 atomic adds, and writes dS twice (one more tile).
    vk, vc = TILED_CONFIGS_V4[64][4:6]
    assert fused.count("atom.global.add.f32") == vk * vc
    assert fused16.count("atom.global.add.f32") == vk * vc  # dQ summed in float32


def test_tile_configurations_are_checked():
    # (the configurations it refuses: test_a_bad_tile_configuration_is_refused)
    for head_dim, config in TILED_CONFIGS.items():
        assert check_tiled_config(head_dim, config) == config


def test_numpy_reference_equals_autograd():
    q, k, v, dout = inputs((1, 1, 9, 16), seed=2)
    for causal in (False, True):
        for got, want in zip(reference_attention_backward(q, k, v, dout, causal=causal),
                             autograd_grads(q, k, v, dout, causal, 0.25)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_bad_input_is_named():
    q, k, v, dout = inputs((1, 1, 8, 16), seed=1)
    out, lse = A.reference_attention(q, k, v, return_lse=True)
    out, lse = out.astype(np.float32), lse.astype(np.float32)
    with pytest.raises(ValueError, match="dout must be of q's kind and shape"):
        flash_attention_backward(q, k, v, out, lse, dout[:, :, :4])
    with pytest.raises(ValueError, match="lse must be of q's kind and shape"):
        flash_attention_backward(q, k, v, out, lse[..., :4], dout)
    with pytest.raises(ValueError, match="out must be float32"):
        flash_attention_backward(q, k, v, out.astype(np.float64), lse, dout)
    with pytest.raises(ValueError, match="causal must be True or False"):
        flash_attention_backward(q, k, v, out, lse, dout, causal="yes")
    with pytest.raises(ValueError, match="version must be one of"):
        flash_attention_backward(q, k, v, out, lse, dout, version=7)
    with pytest.raises(ValueError, match="version 5 takes float16 or bfloat16"):
        flash_attention_backward(q, k, v, out, lse, dout, version=5)


@pytest.mark.parametrize("causal", [False, True])
def test_the_autograd_function_trains_like_plain_attention(causal):
    from gpucourse.kernels.attention_backward import flash_attention_autograd

    q, k, v, dout = inputs((1, 2, 20, 16), seed=11 + causal)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    out = flash_attention_autograd(tq, tk, tv, causal=causal)
    ref = A.reference_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=ATOL, rtol=RTOL)
    (out * torch.tensor(dout)).sum().backward()  # the gradient of this loss is dout
    for name, got, want in zip(("dq", "dk", "dv"), (tq.grad, tk.grad, tv.grad),
                               autograd_grads(q, k, v, dout, causal, 0.25)):
        np.testing.assert_allclose(got.numpy(), want, atol=ATOL, rtol=RTOL, err_msg=name)


def test_the_autograd_function_does_cross_attention():
    from gpucourse.kernels.attention_backward import flash_attention_autograd

    q, _, _, dout = inputs((1, 1, 12, 16), seed=3)
    _, k, v, _ = inputs((1, 1, 30, 16), seed=4)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    (flash_attention_autograd(tq, tk, tv, causal=True) * torch.tensor(dout)).sum().backward()
    for name, got, want in zip(("dq", "dk", "dv"), (tq.grad, tk.grad, tv.grad),
                               autograd_grads(q, k, v, dout, True, 0.25)):
        np.testing.assert_allclose(got.numpy(), want, atol=ATOL, rtol=RTOL, err_msg=name)


def test_the_autograd_function_in_float16():
    from gpucourse.kernels.attention_backward import flash_attention_autograd

    q, k, v, dout = inputs((1, 1, 21, 16), seed=6)
    tq, tk, tv = (torch.tensor(x, dtype=torch.float16, requires_grad=True) for x in (q, k, v))
    out = flash_attention_autograd(tq, tk, tv, causal=True)
    assert out.dtype == torch.float16
    (out.float() * torch.tensor(dout)).sum().backward()
    want = autograd_grads(*(x.detach().double().numpy() for x in (tq, tk, tv)), dout, True, 0.25)
    for name, got, w in zip(("dq", "dk", "dv"), (tq.grad, tk.grad, tv.grad), want):
        assert got.dtype == torch.float16, name
        np.testing.assert_allclose(got.double().numpy(), w, atol=3e-3 * np.abs(w).max(),
                                   err_msg=name)
    with pytest.raises(ValueError, match="float32 or float16"):
        flash_attention_autograd(tq.bfloat16(), tk.bfloat16(), tv.bfloat16())


def test_the_autograd_function_refuses_what_is_not_a_tensor():
    from gpucourse.kernels.attention_backward import flash_attention_autograd

    q = np.zeros((1, 1, 4, 16), dtype=np.float32)
    with pytest.raises(ValueError, match="q must be a torch tensor"):
        flash_attention_autograd(q, q, q)


def test_backward_times_reads_the_default_version_of_the_day():
    from gpucourse.kernels.attention_backward import backward_markdown, backward_times

    def row(variant, ms, seq=1024):
        return dict(variant=variant, seq=seq, head_dim=64, causal=False, ms=ms)

    old = {"results": [row("flash_bwd", 6.0), row("flash_bwd_v1", 9.0), row("flash_bwd_v4", 3.2),
                       row("sdpa_efficient_bwd", 2.0), row("flash_bwd", 500.0, seq=16384)]}
    # Files without default_version timed version 2 as "flash_bwd"; the long
    # run (no SDPA beside it) is left out.
    assert backward_times(old) == {(1024, 64, False): {2: 6.0, 1: 9.0, 4: 3.2, "sdpa": 2.0}}
    new = {"default_version": 4,
           "results": [row("flash_bwd", 3.1), row("flash_bwd_v2", 6.1), row("flash_bwd_v3", 4.0),
                       row("sdpa_efficient_bwd", 2.0)]}
    assert backward_times(new) == {(1024, 64, False): {4: 3.1, 2: 6.1, 3: 4.0, "sdpa": 2.0}}
    table = backward_markdown(new)
    assert "version 2 (ms) | version 3 (ms) | version 4 (ms)" in table
    assert table.endswith("| 1,024 | 64 | no | 6.1 | 4.0 | 3.1 | 2.0 | 1.55 |")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_quick_torch_path_gives_what_the_long_way_gives(dtype, monkeypatch):
    # Version 4 on CUDA tensors through _quick_v4_torch (QUICK_TORCH_PATH):
    # the same kernels launched with hand-packed arguments, against the long
    # way and float64 autograd; ragged, causal and not, cross-attention, d64
    # and d128. A GPU only: the simulator has no such path.
    from gpucourse.device import on_gpu
    from gpucourse.kernels.attention import backward as AB  # the module that reads QUICK_TORCH_PATH

    if not (torch.cuda.is_available() and on_gpu()):
        pytest.skip("needs a CUDA GPU")
    for b, h, n, nk, d, causal in [(1, 2, 77, 77, 64, True), (2, 1, 130, 200, 128, False),
                                   (1, 3, 300, 300, 64, False)]:
        g = torch.Generator(device="cuda").manual_seed(n + d)
        q = torch.randn(b, h, n, d, device="cuda", generator=g, dtype=dtype)
        k, v = (torch.randn(b, h, nk, d, device="cuda", generator=g, dtype=dtype)
                for _ in range(2))
        dout = torch.randn(b, h, n, d, device="cuda", generator=g, dtype=dtype)
        out, lse = A.flash_attention(q, k, v, causal=causal and n == nk, return_lse=True)
        mask = causal and n == nk
        monkeypatch.setattr(AB, "QUICK_TORCH_PATH", False)
        long_way = AB.flash_attention_backward(q, k, v, out, lse, dout, causal=mask, version=4)
        monkeypatch.setattr(AB, "QUICK_TORCH_PATH", True)
        quick = AB.flash_attention_backward(q, k, v, out, lse, dout, causal=mask, version=4)
        for name, fast, slow in zip(("dq", "dk", "dv"), quick, long_way):
            assert fast.dtype == dtype and fast.shape == slow.shape, name
            scale = float(slow.double().abs().max())
            # dQ's atomic adds may sum in another order: equal to float32 rounding.
            assert float((fast.double() - slow.double()).abs().max()) <= 1e-5 * scale + (
                1e-3 * scale if dtype == torch.float16 else 0.0), name
    # A transposed (not contiguous) tensor goes the long way.
    qt = q.transpose(2, 3).contiguous().transpose(2, 3)
    assert AB._quick_v4_torch(qt, k, v, out, lse, dout, False, np.float32(0.1), None,
                              "float16" if dtype == torch.float16 else "float32") is None


def test_launch_path_times_pairs_the_quick_and_the_long_way():
    from gpucourse.kernels.attention_backward import launch_path_times

    def row(variant, ms, seq=1024, causal=False):
        return dict(variant=variant, seq=seq, head_dim=64, causal=causal, ms=ms)

    record = {"results": [row("flash_bwd", 2.0), row("flash_bwd_long", 2.6),
                          row("flash_bwd_v3", 3.0), row("flash_bwd", 200.0, seq=16384),
                          row("flash_bwd", 1.2, causal=True), row("flash_bwd_long", 2.0, causal=True)]}
    assert launch_path_times(record) == {(1024, 64, False): (2.0, 2.6), (1024, 64, True): (1.2, 2.0)}
    assert launch_path_times({"results": [row("flash_bwd", 2.0)]}) == {}


@pytest.mark.skipif(not (A.on_gpu() and torch.cuda.is_available()),
                    reason="needs a GPU and torch with CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_version5_errs_no_more_than_sdpa_flash_backward(dtype, head_dim):
    # Version 5, FlashAttention-2's backward in half precision
    # (attention.half_backward), against float64 autograd, held to the error
    # of PyTorch's flash backend's backward on the same inputs: in two
    # kernels, in one (dQ added atomically), and as a call runs it by default.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from gpucourse.kernels.attention import flash_attention_backward
    from gpucourse.kernels.attention.half_backward import half_attention_backward

    gen = torch.Generator(device="cuda").manual_seed(head_dim)
    q, dout = (torch.randn(2, 3, 300, head_dim, device="cuda", generator=gen).to(dtype)
               for _ in range(2))
    k, v = (torch.randn(2, 3, 260, head_dim, device="cuda", generator=gen).to(dtype)
            for _ in range(2))
    for causal, atomic in [(c, a) for c in (False, True) for a in (False, True, None)]:
        out, lse = A.flash_attention(q, k, v, causal=causal, return_lse=True)
        got = (flash_attention_backward(q, k, v, out, lse, dout, causal=causal, version=5)
               if atomic is None else  # the default
               half_attention_backward(q, k, v, out, lse, dout, causal=causal,
                                       atomic_dq=atomic))
        leaves = [x.double().requires_grad_() for x in (q, k, v)]
        want = torch.autograd.grad(sdpa(*leaves, is_causal=causal), leaves, dout.double())
        if causal:  # SDPA flash puts a cross-attention mask's diagonal at the bottom right
            peers = [None] * 3
        else:
            halves = [x.clone().requires_grad_() for x in (q, k, v)]
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                peers = torch.autograd.grad(sdpa(*halves), halves, dout)
        for name, g, w, peer in zip(("dq", "dk", "dv"), got, want, peers):
            assert g.dtype == dtype and bool(torch.isfinite(g).all()), name
            error = float((g.double() - w).abs().max() / w.abs().max())
            bound = 4 * {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
            if peer is not None:
                bound = 2 * float((peer.double() - w).abs().max() / w.abs().max()) + 1e-4
            assert error <= bound, (name, causal, atomic, error, bound)


@pytest.mark.skipif(not (A.on_gpu() and torch.cuda.is_available()),
                    reason="needs a GPU and torch with CUDA")
def test_deterministic_mode_gives_the_same_bits_each_call():
    # With torch.use_deterministic_algorithms(True), two calls give the same
    # gradients to the last bit, where the default adds dQ atomically (versions
    # 4, 5 and 6 on a GPU with tensor cores): fp16 and float32 at head dim 64,
    # float32 at 128. Many key blocks add to each query's dQ, so that without
    # the mode their order, and dQ's last bits, may differ (not asserted).
    from gpucourse.kernels.attention import flash_attention_backward

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for dtype, head_dim in ((torch.float16, 64), (torch.float32, 64), (torch.float32, 128)):
            gen = torch.Generator(device="cuda").manual_seed(head_dim)
            q, k, v, dout = (torch.randn(2, 4, 1000, head_dim, device="cuda",
                                         generator=gen).to(dtype) for _ in range(4))
            out, lse = A.flash_attention(q, k, v, return_lse=True)
            first, again = (flash_attention_backward(q, k, v, out, lse, dout) for _ in range(2))
            for name, a, b in zip(("dq", "dk", "dv"), first, again):
                assert torch.equal(a, b), (name, dtype, head_dim)
    finally:
        torch.use_deterministic_algorithms(before)


def test_the_default_version_follows_the_timings(monkeypatch):
    # Which version a call without one runs, by dtype, kind and head dim, on a
    # GPU with tensor cores and without (the GPU's answers stood in for here):
    # version 6 for float32 CUDA tensors at head dims 64 and 128, where the H200
    # timed it faster than version 4 (at 128 in two kernels, split_sums);
    # version 5 for halves; else version 4.
    from gpucourse.kernels import launch
    from gpucourse.kernels.attention import backward as AB

    monkeypatch.setattr(AB, "on_gpu", lambda: True)
    monkeypatch.setattr(AB, "_current_gpu", lambda: 0)
    for tensor_cores in (True, False):
        monkeypatch.setattr(launch, "has_tf32_tensor_cores", lambda _gpu: tensor_cores)
        tc = tensor_cores
        cases = {("torch", "float32", 64): 6 if tc else 4,
                 ("torch", "float32", 128): 6 if tc else 4,
                 ("torch", "float32", 32): 4, ("numba", "float32", 64): 4,
                 ("torch", "float16", 64): 5 if tc else 4, ("torch", "bfloat16", 128): 5}
        for (kind, io, head_dim), want in cases.items():
            assert AB._default_version(kind, io, head_dim) == want, (kind, io, head_dim, tc)
    assert AB.TF32_DEFAULT_HEAD_DIMS == (64, 128)


def stand_in_for_versions_5_and_6(monkeypatch, gpu: bool):
    """Versions 5's and 6's kernels stood in for by a record, {version:
    atomic_dq asked for}; and inputs for backward._half_backward and
    _tf32_backward at head dim 64 (CUDA tensors on a GPU, as their checks
    ask): (record, halves, kind of the floats, floats)."""
    from gpucourse.kernels.attention import half_backward, tf32_backward

    asked = {}

    def stand_in(version):
        def run(*args, atomic_dq=False, **kwargs):
            asked[version] = atomic_dq
            return args[:3]
        return run

    monkeypatch.setattr(half_backward, "half_attention_backward", stand_in(5))
    monkeypatch.setattr(tf32_backward, "tf32_attention_backward", stand_in(6))
    where = "cuda" if gpu else "cpu"
    halves = [torch.zeros(1, 1, 16, 64, dtype=torch.float16, device=where) for _ in range(6)]
    halves[4] = torch.zeros(1, 1, 16, device=where)
    floats = [np.zeros((1, 1, 16, 64), np.float32) for _ in range(6)]
    floats[4] = np.zeros((1, 1, 16), np.float32)
    if gpu:  # version 6 takes CUDA tensors there
        return asked, halves, "torch", [torch.from_numpy(x).cuda() for x in floats]
    return asked, halves, "numpy", floats


def test_atomic_dq_is_asked_for_at_the_head_dims_and_masks_listed(monkeypatch):
    # backward.ATOMIC_DQ_HEAD_DIMS: where versions 5 and 6 add dQ atomically by
    # default (where the H200 timed one kernel faster than two), head dim by
    # head dim, with or without a causal mask; listed, a call asks for it,
    # version 6 only with its own tiles. The kernels are stood in for.
    from gpucourse.kernels.attention import backward as AB
    from gpucourse.kernels.attention import tf32_backward

    # Version 5 at head dim 64: two kernels without a mask (0.72-0.88x the one
    # kernel's time at N 1024 in two runs), one under a causal mask. Version 6
    # at 128: dQ added by the dK kernel of the split sums.
    assert AB.ATOMIC_DQ_HEAD_DIMS == {5: {64: (True,), 128: (False, True)},
                                      6: {64: (False, True), 128: (False, True)}}
    asked, halves, kind, floats = stand_in_for_versions_5_and_6(monkeypatch, AB.on_gpu())
    for listed in ({}, {64: (False,)}, {64: (True,)}, {64: (False, True)}):
        monkeypatch.setattr(AB, "ATOMIC_DQ_HEAD_DIMS", {5: listed, 6: listed})
        for causal in (False, True):
            AB._half_backward("torch", "float16", *halves, causal, 0.125)
            AB._tf32_backward(kind, *floats, causal, 0.125, None)
            want = causal in listed.get(64, ())
            assert asked == {5: want, 6: want}, (listed, causal)
            config = tf32_backward.backward_configs(64)
            AB._tf32_backward(kind, *floats, causal, 0.125, config)
            assert asked[6] is False  # tiles of the caller's: two kernels


def test_deterministic_mode_turns_the_atomic_defaults_off(monkeypatch):
    # With torch.use_deterministic_algorithms(True), a call without a version
    # adds nothing atomically, so two calls give the same bits: version 3 where
    # the default is 4, two kernels for versions 5 and 6 at the head dims
    # where one kernel is their default. Off again, the defaults come back.
    # The kernels are stood in for, as above, with the simulator's inputs.
    from gpucourse.kernels.attention import backward as AB
    from gpucourse.kernels.attention import half_backward

    monkeypatch.setattr(half_backward, "atomic_dq_runs_here", lambda: True)
    monkeypatch.setattr(AB, "ATOMIC_DQ_HEAD_DIMS", {5: {64: (False,)}, 6: {64: (False,)}})
    monkeypatch.setattr(AB, "on_gpu", lambda: False)
    asked, halves, _, floats = stand_in_for_versions_5_and_6(monkeypatch, False)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        for deterministic in (True, False):
            torch.use_deterministic_algorithms(deterministic)
            AB._half_backward("torch", "float16", *halves, False, 0.125)
            AB._tf32_backward("numpy", *floats, False, 0.125, None)
            assert asked == {5: not deterministic, 6: not deterministic}, deterministic
            want = 3 if deterministic else AB.DEFAULT_VERSION
            assert AB._default_version("numpy", "float32", 64) == want, deterministic
    finally:
        torch.use_deterministic_algorithms(before)


def test_chapter_9_reads_the_ladder_and_version_6_from_the_runs_that_timed_them(tmp_path):
    # A run of version 6 alone (beside version 4) is newer than the run of the
    # ladder: the ladder's table still comes from the run that timed 1-4, and
    # version 6's ranges from the run that timed it.
    import json

    from gpucourse.chapters.attention import ladder_record, tensor_core_record, version6_ratios

    def row(variant, ms, d=64, causal=False):
        return dict(variant=variant, seq=1024, head_dim=d, causal=causal, ms=ms)

    def write(name, date, rows):
        record = dict(benchmark="attention_backward", gpu="GPU " + date, date=date,
                      versions={}, method="", default_version=4, results=rows)
        (tmp_path / f"attention_backward-{name}-{date}.json").write_text(json.dumps(record))

    write("h100", "2026-11-26", [row("flash_bwd", 3.0)] + [
        row(f"flash_bwd_v{v}", 3.0 + v) for v in (1, 2, 3)] + [row("sdpa_efficient_bwd", 2.0)])
    write("h200", "2026-11-28", [
        row("flash_bwd", 2.0), row("flash_bwd_v6", 1.5), row("sdpa_efficient_bwd", 1.6),
        row("flash_bwd", 2.2, causal=True), row("flash_bwd_v6", 1.8, causal=True),
        row("sdpa_efficient_bwd", 2.0, causal=True),
        row("flash_bwd", 3.0, d=128), row("flash_bwd_v6", 4.5, d=128),
        row("sdpa_efficient_bwd", 2.5, d=128)])
    assert ladder_record(tmp_path)["date"] == "2026-11-26"
    run = tensor_core_record(tmp_path)
    assert run["date"] == "2026-11-28"
    ratios = version6_ratios(run)
    assert ratios[64][6] == pytest.approx((0.9, 0.9375)) and ratios[64][4] == pytest.approx((1.1, 1.25))
    assert ratios[128] == {4: pytest.approx((1.2, 1.2)), 6: pytest.approx((1.8, 1.8))}
    (tmp_path / "attention_backward-h100-2026-11-26.json").unlink()
    with pytest.raises(ValueError, match="timing versions 1-4"):
        ladder_record(tmp_path)
    with pytest.raises(ValueError, match="must time versions 4 and 6"):
        version6_ratios({"results": [row("flash_bwd", 2.0), row("sdpa_efficient_bwd", 1.0)][:0]})


def test_chapter_9_reads_a_variants_range_against_sdpa():
    # chapters.attention.variant_ratios: a variant's time over SDPA's in the
    # same run, shape by shape (a shape without SDPA's time is not counted);
    # a record without the variant is named.
    from gpucourse.chapters.attention import variant_ratios

    def row(variant, ms, seq=1024, causal=False):
        return dict(variant=variant, seq=seq, head_dim=128, causal=causal, ms=ms)

    record = {"results": [row("tf32_one_kernel_bwd", 3.0), row("sdpa_efficient_bwd", 2.0),
                          row("tf32_one_kernel_bwd", 1.0, causal=True),
                          row("sdpa_efficient_bwd", 2.0, causal=True),
                          row("tf32_one_kernel_bwd", 9.0, seq=4096),
                          row("flash_bwd_v6", 1.0), row("tf32_split_sums_bwd", 5.0)]}
    assert variant_ratios(record, "tf32_one_kernel") == pytest.approx((0.5, 1.5))
    assert variant_ratios(record, "tf32_split_sums") == pytest.approx((2.5, 2.5))
    with pytest.raises(ValueError, match="'tf32_rounded'"):
        variant_ratios(record, "tf32_rounded")


@pytest.mark.parametrize("heavy_last", [False, True])
@pytest.mark.parametrize("group", [1, 2, 5])
def test_causal_blocks_take_every_tile_once_heaviest_first(heavy_last, group):
    """Under a causal mask the blocks take the tiles heaviest first, the heads
    in groups (limits.heaviest_first): each (head, tile) exactly once; a group
    of heads, the last one smaller (5 heads in 2s), before the next; inside a
    group a block never starts on a tile lighter than one a later block takes."""
    from gpucourse.kernels.attention.limits import heaviest_first

    tiles, heads = 7, 5
    placed = [heaviest_first(start, tiles, heads, heavy_last, group)
              for start in range(tiles * heads)]
    assert sorted(placed) == [(h, t) for h in range(heads) for t in range(tiles)]
    groups = [list(range(first, min(first + group, heads))) for first in range(0, heads, group)]
    start = 0
    for members in groups:
        mine = placed[start:start + tiles * len(members)]
        start += tiles * len(members)
        assert {h for h, _ in mine} == set(members), "a group's blocks are its heads'"
        # Key tile t walks the queries from t on (work tiles - t); query tile t
        # the keys up to t (work t + 1).
        work = [(t + 1) if heavy_last else (tiles - t) for _, t in mine]
        assert work == sorted(work, reverse=True), "a lighter tile started before a heavier one"
        assert {h for h, _ in mine[:len(members)]} == set(members), "each head's heaviest first"


def test_heads_are_grouped_by_what_they_stream_and_by_the_tail():
    # limits.head_group by hand: L2_SHARE_BYTES 24 MiB; a head streams tiles x
    # tile_bytes. The fp32 backward's key tiles at d 128, N 4096 (64 tiles of
    # 64 rows, Q, dO and dq: 64 x 128 x 12 bytes a tile) stream 6 MiB a head:
    # 4 heads fit, 256 blocks. At d 64 in half precision the forward streams
    # 64 x 64 x 4 bytes a tile, 1 MiB a head: 24 heads.
    from gpucourse.kernels.attention import limits

    assert limits.L2_SHARE_BYTES == 24 * 2**20 and limits.GROUP_MIN_BLOCKS == 256
    assert limits.head_group(64, 64, 64 * 128 * 12) == 4
    assert limits.head_group(64, 64, 64 * 64 * 4) == 24
    assert limits.head_group(256, 64, 64 * 128 * 12) == 1  # N 16384: 24 MiB a head
    assert limits.head_group(8, 64, 64 * 128 * 12) == 32  # N 512: 32 heads for 256 blocks
    assert limits.head_group(64, 3, 64 * 64 * 4) == 3  # never more than there are
    assert limits.head_group(4096, 8, 2**20) == 1  # a head alone past the whole share


@pytest.mark.skipif(A.on_gpu(), reason="the simulator: the same sums in the same order")
@pytest.mark.parametrize("kernel", ["half forward", "version 5", "version 6"])
@pytest.mark.parametrize("group", [None, 2])
def test_under_a_causal_mask_each_head_gets_its_own_tiles(kernel, group, monkeypatch):
    # Under a causal mask the blocks take the tiles heaviest first, the heads
    # in groups: each head's results must be what that head alone gives, with
    # two or more tiles of keys and of queries (the last ragged), three heads:
    # in one group (head_group's choice at this size) and in groups of 2, the
    # last of one head (the simulator runs block_place as Python, so the
    # group function can be replaced). Head 2, the last of both groupings, is
    # compared bit for bit with its run alone; every head is compared with
    # float64 autograd, which tells a head's results from another's (a run
    # alone of each head took more of this test's minutes on the simulator).
    from gpucourse.kernels.attention import limits
    from gpucourse.kernels.attention.half import half_attention
    from gpucourse.kernels.attention.half_backward import half_attention_backward
    from gpucourse.kernels.attention.tf32_backward import tf32_attention_backward

    gen = torch.Generator().manual_seed(3)
    dtype, head_dim = (torch.float32, 32) if kernel == "version 6" else (torch.float16, 16)
    q, k, v, dout = (torch.randn(1, 3, 40, head_dim, generator=gen).to(dtype) for _ in range(4))

    def run(q, k, v, dout):
        if kernel == "half forward":
            return half_attention(q, k, v, causal=True)
        out, lse = A.reference_attention(*(x.float().numpy() for x in (q, k, v)), causal=True,
                                         return_lse=True)
        out, lse = torch.from_numpy(out).to(dtype), torch.from_numpy(lse.astype(np.float32))
        backward = tf32_attention_backward if kernel == "version 6" else half_attention_backward
        return backward(q, k, v, out, lse, dout, causal=True)

    if group is not None:
        monkeypatch.setattr(limits, "_head_group", lambda tiles, heads, tile_bytes: group)
    together = run(q, k, v, dout)
    alone = run(*(x[:, 2:3].contiguous() for x in (q, k, v, dout)))
    for name, got, want in zip(("first", "second", "third"), together, alone):
        assert torch.equal(torch.as_tensor(got)[:, 2:3], torch.as_tensor(want)), (kernel, name)
    wide = [x.double().requires_grad_() for x in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*wide, is_causal=True)
    if kernel == "half forward":
        wants = [out]
    else:
        out.backward(dout.double())
        wants = [x.grad for x in wide]
    tolerance = 2e-3 if kernel == "version 6" else 3e-2  # float32 inputs, or half's
    for name, got, want in zip(("first", "second", "third"), together, wants):
        torch.testing.assert_close(torch.as_tensor(got).double(), want.detach(), atol=tolerance,
                                   rtol=tolerance, msg=lambda m: f"{kernel}, {name}: {m}")


def test_heaviest_first_shortens_a_causal_launchs_tail():
    # chapters.attention.causal_launch_tail, the chapter's numbers: blocks
    # started in order on the first place to come free. By hand, 2 tiles of 2
    # heads on 2 places: lightest first per head (costs 1, 2, 1, 2) ends at 4,
    # heaviest first (2, 2, 1, 1) at 3, the perfect share of 6 steps.
    from gpucourse.chapters.attention import causal_launch_tail

    assert causal_launch_tail(2, 2, 2, False) == pytest.approx(4 / 3)
    assert causal_launch_tail(2, 2, 2, True) == pytest.approx(1.0)
    for first in (False, True):  # one place: any order is the whole work
        assert causal_launch_tail(5, 3, 1, first) == pytest.approx(1.0)
    assert causal_launch_tail(64, 64, 264, False) > 1.05 > 1.01 > causal_launch_tail(64, 64, 264,
                                                                                     True)
    # In the kernels' groups of heads (4 heads of 64 tiles: limits.head_group
    # for the fp32 backward at d 128) the tail stays short.
    assert causal_launch_tail(64, 64, 264, True, 64 * 128 * 12) < 1.01


def test_a_causal_launch_in_groups_of_heads_by_hand(monkeypatch):
    # 2 tiles of 3 heads on 2 places, a head a group (12 MiB a tile, 24 MiB
    # a head; no minimum of blocks): costs 2 1 2 1 2 1 start on the place
    # that comes free first and end at 5, against the perfect share 9 / 2.
    from gpucourse.chapters.attention import causal_launch_tail
    from gpucourse.kernels.attention import limits

    monkeypatch.setattr(limits, "GROUP_MIN_BLOCKS", 1)
    assert limits.head_group(2, 3, 12 * 2**20) == 1
    assert causal_launch_tail(2, 3, 2, True, 12 * 2**20) == pytest.approx(5 / 4.5)
    assert causal_launch_tail(2, 3, 2, True) == pytest.approx(5 / 4.5)  # 2 2 2 1 1 1: 5 too
    with pytest.raises(ValueError, match="slots must be a whole number"):
        causal_launch_tail(2, 2, 0, True)


def test_the_measured_block_orders_are_compared_kernel_by_kernel():
    # chapters.attention.causal_order_times and _summary on a record made by
    # hand: ours in three orders (groups 9 ms, index 10, all heads 12 at one
    # shape; 11, 10, 11 at another), the peers left out of the comparison.
    from gpucourse.chapters.attention import causal_order_summary, causal_order_times

    def row(order, variant, seq, ms):
        return dict(order=order, variant=variant, seq=seq, head_dim=128, ms=ms)

    record = {"benchmark": "causal_order", "gpu": "G", "date": "D", "results": [
        row("groups", "flash_bwd", 1024, 9.0), row("index", "flash_bwd", 1024, 10.0),
        row("all_heads", "flash_bwd", 1024, 12.0), row("groups", "flash_fp16", 4096, 11.0),
        row("index", "flash_fp16", 4096, 10.0), row("all_heads", "flash_fp16", 4096, 11.0),
        row("groups", "sdpa_flash_fp16", 4096, 1.0)]}
    assert causal_order_times(record) == [("flash_bwd", 1024, 128, 0.9, 0.75),
                                          ("flash_fp16", 4096, 128, 1.1, 1.0)]
    summary = causal_order_summary(record)
    assert (summary["pairs"], summary["faster"], summary["faster_range"]) == ("2", "1", "0.90-0.90")
    assert summary["slower"] == "the fp16 forward at d = 128, N = 4096 (1.10x)"
    assert summary["all_heads_range"] == "0.75-1.00"
    with pytest.raises(ValueError, match="lacks the \\['index'\\] order of flash_bwd"):
        causal_order_times({**record, "results": record["results"][:1] + record["results"][2:]})
    with pytest.raises(ValueError, match="causal_order results record"):
        causal_order_times({"benchmark": "attention_half"})


def test_chapter_9_names_where_the_half_backward_runs_in_one_kernel():
    # chapters.attention.one_kernel_head_dims, the glued text, from
    # backward.ATOMIC_DQ_HEAD_DIMS: version 5 in one kernel at 128 with or
    # without a mask, at 64 under a causal mask alone.
    from gpucourse.chapters.attention import one_kernel_head_dims

    assert one_kernel_head_dims(5) == {"both": "128", "causal": "64"}
    assert one_kernel_head_dims(6) == {"both": "64 and 128", "causal": ""}
    with pytest.raises(ValueError, match="version must be one of \\[5, 6\\]"):
        one_kernel_head_dims(4)
