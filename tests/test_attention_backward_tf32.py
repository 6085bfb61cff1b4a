"""Version 6 of the backward (attention.tf32_backward, fp32 on the tensor
cores in 3xTF32): its gradients agree with float64 autograd about as closely
as version 4's (fp32 on the CUDA cores) on the same inputs, causal and not,
cross-attention with ragged tiles; the PTX an H100 would run holds the TF32
mma and cp.async, with no spills at the tiles a GPU gets; its tiles' two read
patterns hit every bank group once; bad input is named. On the simulator the
instructions are the stand-ins (numpy inputs); on a GPU, CUDA tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ptx_helpers import compile_without_a_gpu, ptxas_report

from gpucourse.device import on_gpu
from gpucourse.kernels import attention as A
from gpucourse.kernels.attention import flash_attention_backward
from gpucourse.kernels.attention.tf32_backward import (TF32_BACKWARD_HEAD_DIMS,
                                                       Tf32BackwardConfig, bank_groups,
                                                       check_tf32_backward_config)

# 3xTF32 drops each product's small x small term and rounds the small parts
# to TF32: about 2^-22 of the product where an fp32 product is rounded to
# 2^-24. Both versions sum in float32 (this one a tile's share in the tensor
# cores, which truncate, then with rounded adds) and share the exp and the
# rounding of the output, so version 6 errs at most a few times as much as
# version 4: 4x. (On the simulator, whose stand-in sums exactly, it erred
# 0.4-1.0x as much on these inputs.)
FACTOR = 4


def arrays(*xs):
    """numpy on the simulator; CUDA tensors on a GPU (version 6 takes those)."""
    return tuple(torch.from_numpy(x).cuda() for x in xs) if on_gpu() else xs


def on_host(xs):
    """The arrays back as numpy (from CUDA tensors on a GPU)."""
    return [np.asarray(x.cpu()) if isinstance(x, torch.Tensor) else x for x in xs]


@pytest.mark.parametrize("seq, key_seq, causal", [
    (20, 12, False),  # dK and dV walk three query tiles, the last ragged (8, 8, 4)
    (12, 20, True),   # under the mask, keys past the last query get no gradient
])
def test_gradients_err_as_little_as_version_4s(seq, key_seq, causal):
    rng = np.random.default_rng(seq + key_seq)
    q, dout = (rng.standard_normal((1, 1, seq, 32)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, key_seq, 32)).astype(np.float32) for _ in range(2))
    out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    inputs = arrays(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout)
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    want = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal), leaves, torch.tensor(dout, dtype=torch.float64))
    ours = flash_attention_backward(*inputs, causal=causal, version=6)
    peers = flash_attention_backward(*inputs, causal=causal, version=4)
    for name, g, peer, w, like in zip(("dq", "dk", "dv"), ours, peers, want, (q, k, v)):
        g, peer, w = on_host((g, peer, w.detach()))
        assert g.dtype == np.float32 and g.shape == like.shape, name
        error, peer_error = np.abs(g - w).max(), np.abs(peer - w).max()
        assert error <= FACTOR * peer_error, (name, error, peer_error)
        np.testing.assert_allclose(g, w, atol=2e-4, rtol=2e-3, err_msg=name)
    if causal:  # keys 12..19 come after every query
        assert not ours[1][..., seq:, :].any() and not ours[2][..., seq:, :].any()


@pytest.mark.parametrize("head_dim, causal", [(64, True), (128, False)])
def test_a_call_without_tiles_runs_at_the_head_dims_it_is_the_default_at(head_dim, causal):
    # At backward.TF32_DEFAULT_HEAD_DIMS a call without tiles adds dQ
    # atomically (backward.ATOMIC_DQ_HEAD_DIMS), at 128 from the dK kernel of
    # the split sums (tf32_backward.SPLIT_SUMS_HEAD_DIMS): on the simulator
    # too, where dK and dV's tiles are then 16 queries wide (atomic dQ's
    # pieces). 20 queries: a tile and a ragged one.
    from gpucourse.kernels.attention import backward as AB
    from gpucourse.kernels.attention.tf32_backward import SPLIT_SUMS_HEAD_DIMS, backward_configs

    assert head_dim in AB.TF32_DEFAULT_HEAD_DIMS and causal in AB.ATOMIC_DQ_HEAD_DIMS[6][head_dim]
    assert backward_configs(head_dim)[0].split_sums == (head_dim in SPLIT_SUMS_HEAD_DIMS)
    rng = np.random.default_rng(head_dim)
    q, k, v, dout = (rng.standard_normal((1, 1, 20, head_dim)).astype(np.float32)
                     for _ in range(4))
    out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    inputs = arrays(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout)
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    want = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal), leaves, torch.tensor(dout, dtype=torch.float64))
    ours = on_host(flash_attention_backward(*inputs, causal=causal, version=6))
    for name, g, w in zip(("dq", "dk", "dv"), ours, want):
        np.testing.assert_allclose(g, w.numpy(), atol=2e-5, rtol=2e-4, err_msg=name)


def test_the_two_read_patterns_have_no_bank_conflicts():
    # Each quarter-warp's 128-bit reads, by rows and by pairs of rows, touch
    # the 8 groups of 4 banks once each (a conflict would repeat a group).
    for head_dim in TF32_BACKWARD_HEAD_DIMS:
        for reads in bank_groups(head_dim):
            assert all(sorted(row) == list(range(8)) for row in reads.tolist()), head_dim


def test_bad_input_is_named():
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((1, 1, 8, 16)).astype(np.float32) for _ in range(4))
    out, lse = A.reference_attention(q, k, v, return_lse=True)
    inputs = arrays(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout)
    with pytest.raises(ValueError, match=r"version 6 takes head_dim in \(32, 64, 128\)"):
        flash_attention_backward(*inputs, version=6)
    halves = [x.astype(np.float16) for x in (q, k, v, out, dout)]
    with pytest.raises(ValueError, match="float16 inputs run on versions 3, 4 and 5"):
        flash_attention_backward(*arrays(*halves[:4], lse.astype(np.float32), halves[4]),
                                 version=6)
    with pytest.raises(ValueError, match="version 6 takes head_dim"):
        check_tf32_backward_config(Tf32BackwardConfig(96))
    with pytest.raises(ValueError, match="block_cols must be a positive multiple of 8"):
        check_tf32_backward_config(Tf32BackwardConfig(64, block_cols=12))
    with pytest.raises(ValueError, match="block_cols may be at most half the threads"):
        check_tf32_backward_config(Tf32BackwardConfig(64, warps=1, block_cols=32))
    with pytest.raises(ValueError, match="bytes of shared memory"):
        check_tf32_backward_config(Tf32BackwardConfig(128, warps=8, block_cols=64))
    with pytest.raises(ValueError, match="split_walked must be True or False, got 'yes'"):
        check_tf32_backward_config(Tf32BackwardConfig(64, split_walked="yes"))


PTX_SCRIPT = """
import sys
from numba import types
from gpucourse.kernels.attention import tf32_backward as T
T.on_gpu = lambda: True  # the tiles a GPU gets
b, f, i = types.Array(types.uint16, 1, "C"), types.Array(types.float32, 1, "C"), types.int32
kernel = T.make_dkdv_kernel(T.backward_configs(64)[0], True, True)
signature = (b,) * 4 + (f,) * 5 + (i, i, i, types.float32, types.float32)
ptx, _ = numba.cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
open(f"{sys.argv[1]}/atomic.ptx", "w").write(ptx)
"""


def test_the_kernel_a_gpu_runs_uses_the_tf32_tensor_cores_without_spilling(tmp_path):
    # Version 6's default: at head dim 64, dK, dV and dQ in one kernel, dQ added
    # atomically (235 registers when the tiles were chosen: backward_configs).
    # Head dim 128's kernels, where registers are tightest, are compiled by
    # test_attention_backward_tf32_split (the split sums; the one kernel that
    # holds both sums there takes 255 registers and a minute of compiling, and
    # no GPU runs it unless asked for version 6 at 128).
    compile_without_a_gpu(PTX_SCRIPT, str(tmp_path))
    ptx = (tmp_path / "atomic.ptx").read_text()
    # dQ's atomic additions four neighbours at a time (half_backward_atomic.add_four)
    assert "red.global.add.v4.f32" in ptx and "atom.global.add.f32" not in ptx
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "cp.async.cg.shared.global" in ptx
    # Big parts rounded to TF32 on their bits (tf32_big_part: add half a
    # unit, keep the top 19 bits, 0xFFFFE000 = -8192), not by
    # cvt.rna.tf32.f32, four instructions on sm_90 (small parts as they are).
    assert "-8192;" in ptx and "cvt.rna.tf32.f32" not in ptx
    assert "ld.shared.v4.f32" in ptx  # the fragments, 128 bits a read
    assert ".local" not in ptx  # tiles and sums in registers
    report = ptxas_report(ptx)
    assert "0 bytes spill stores" in report and "0 bytes lmem" in report


@pytest.mark.skipif(not on_gpu(), reason="what the GPU's own toolchain made of the kernels")
@pytest.mark.parametrize("head_dim", TF32_BACKWARD_HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_kernels_a_gpu_compiled_keep_their_tiles_in_registers(head_dim, causal):
    # The PTX tests ask the CUDA wheels' ptxas. The GPU's machine may link
    # the same PTX with another version, and a kernel at the 255 registers
    # a thread may have is where versions choose differently: on 2026-11-29
    # the one kernel at head dim 64 took 255 registers and no stack from
    # ptxas 13.5 and 254 and an 8-byte stack from the GPU's. The compiled
    # kernels' own attributes say what runs.
    from gpucourse.kernels.attention import backward as AB
    from gpucourse.kernels.attention.tf32_backward import backward_configs, backward_kernels

    rng = np.random.default_rng(head_dim)
    q, k, v, dout = (rng.standard_normal((1, 2, 40, head_dim)).astype(np.float32)
                     for _ in range(4))
    out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    inputs = arrays(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout)
    flash_attention_backward(*inputs, causal=causal, version=6)  # compiles the defaults
    atomic = AB._atomic_dq(6, head_dim, causal)
    kernels = backward_kernels(*backward_configs(head_dim, atomic_dq=atomic), causal, atomic)
    for kernel, tiles, _, _ in kernels:
        (compiled,) = kernel.overloads.values()
        assert compiled.local_mem_per_thread == 0, (
            f"{kernel.py_func.__qualname__} at {tiles}: {compiled.regs_per_thread} registers "
            f"and {compiled.local_mem_per_thread} bytes of local memory a thread")


@pytest.mark.skipif(on_gpu(), reason="the simulator's bit-for-bit comparison")
def test_splitting_the_walked_tiles_once_gives_the_same_bits():
    # split_walked: each walked tile split into big and small parts once, by
    # the block, when it arrives; the same splits as each warp made for
    # itself, so the same gradients, bit for bit, causal and not.
    from gpucourse.kernels.attention.tf32_backward import tf32_attention_backward

    rng = np.random.default_rng(5)
    q, dout = (rng.standard_normal((1, 1, 16, 32)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 1, 12, 32)).astype(np.float32) for _ in range(2))
    for causal in (False, True):
        out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
        inputs = (q, k, v, out.astype(np.float32), lse.astype(np.float32), dout)
        plain = Tf32BackwardConfig(32, warps=1, block_cols=8)
        split = Tf32BackwardConfig(32, warps=1, block_cols=8, split_walked=True)
        assert split.shared_bytes(True) == plain.shared_bytes(True) + 4 * 2 * 8 * 32
        want = tf32_attention_backward(*inputs, causal=causal, configs=(plain, plain))
        got = tf32_attention_backward(*inputs, causal=causal, configs=(split, split))
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"{name}, causal={causal}")


def test_each_kernel_is_built_once_per_configuration():
    """A kernel factory that hands out a new kernel each call makes Numba compile
    it again on every backward pass: seconds a call on a GPU, where the same
    pass takes milliseconds (version 6's dK/dV factory lost its cache once, and
    only a timed run showed it). Equal configurations must give the same kernel."""
    from gpucourse.kernels.attention import tf32_backward as T

    for d in TF32_BACKWARD_HEAD_DIMS:
        for split in (False, True):
            config = Tf32BackwardConfig(head_dim=d, split_walked=split)
            twin = Tf32BackwardConfig(head_dim=d, split_walked=split)
            for causal in (False, True):
                for make in (T.make_dkdv_kernel, T.make_dq_kernel):
                    assert make(config, causal) is make(twin, causal), (make.__name__, d, split)
            assert T.make_stage_split(config, True) is T.make_stage_split(twin, True)


def test_dq_added_atomically_by_the_key_blocks_equals_its_own_kernels():
    # tf32_backward_atomic: dK and dV's kernel adds each walked tile's dQ over
    # its keys to dq; cross-attention, causal, several key blocks adding to
    # the same rows (on the simulator 16 keys a block, head dim 32; on a GPU
    # head dim 64's tiles). The same 3xTF32 products as the dQ kernel's, in
    # another order of sums: dQ within float32 rounding of it; dK and dV the
    # same bits on the simulator.
    from gpucourse.kernels.attention.tf32_backward import (backward_configs,
                                                           tf32_attention_backward)
    from gpucourse.kernels.attention.tf32_backward_atomic import atomic_dq_pieces

    d, seq, key_seq = (64, 300, 260) if on_gpu() else (32, 12, 20)
    rng = np.random.default_rng(11)
    q, dout = (rng.standard_normal((1, 2, seq, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, key_seq, d)).astype(np.float32) for _ in range(2))
    out, lse = A.reference_attention(q, k, v, causal=True, return_lse=True)
    inputs = arrays(q, k, v, out.astype(np.float32), lse.astype(np.float32), dout)
    tiles = backward_configs(d) if on_gpu() else (Tf32BackwardConfig(d, warps=1,
                                                                     block_cols=16),) * 2
    own = on_host(tf32_attention_backward(*inputs, causal=True, configs=tiles))
    added = on_host(tf32_attention_backward(*inputs, causal=True, configs=tiles,
                                            atomic_dq=True))
    for name, a, b in zip(("dq", "dk", "dv"), added, own):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max(), err_msg=name)
        if name != "dq" and not on_gpu():
            np.testing.assert_array_equal(a, b, err_msg=name)
    with pytest.raises(ValueError, match="block_cols must be a multiple of 16"):
        atomic_dq_pieces(Tf32BackwardConfig(64, warps=4, block_cols=8))
