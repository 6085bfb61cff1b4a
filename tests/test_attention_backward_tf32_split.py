"""Version 6 with dK and dV in two kernels (Tf32BackwardConfig.split_sums,
make_dkdv_kernel's sums): each kernel holds one sum, so that wider query
tiles fit the registers at head dim 128. The same products in the same order
as the one kernel's, so the same gradients bit for bit on the simulator
(NaN and infinity where it has them too), with dQ by its own kernel or added
atomically by the dK kernel; on a GPU, compiled offline for sm_90, the tiles
a GPU gets run without spilling."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from ptx_helpers import compile_without_a_gpu, ptxas_report

from gpucourse.device import on_gpu
from gpucourse.kernels import attention as A
from gpucourse.kernels.attention.tf32_backward import (Tf32BackwardConfig, backward_configs,
                                                       check_tf32_backward_config,
                                                       make_dkdv_kernel,
                                                       tf32_attention_backward)

simulator_only = pytest.mark.skipif(on_gpu(), reason="the simulator's bit-for-bit comparisons")


def inputs(seq, key_seq, causal, d=32, seed=0):
    rng = np.random.default_rng(seed)
    q, dout = (rng.standard_normal((1, 2, seq, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, key_seq, d)).astype(np.float32) for _ in range(2))
    out, lse = A.reference_attention(q, k, v, causal=causal, return_lse=True)
    return q, k, v, out.astype(np.float32), lse.astype(np.float32), dout


@simulator_only
@pytest.mark.parametrize("seq, key_seq, causal", [
    (20, 12, False),  # three query tiles of 8, the last ragged
    (12, 20, True),   # under the mask, keys past the last query get no gradient
])
def test_two_kernels_give_the_one_kernels_bits(seq, key_seq, causal):
    one = Tf32BackwardConfig(32, warps=1, block_cols=8)
    split = replace(one, split_sums=True)
    assert backward_configs(32, split_sums=True) == (split, one)
    xs = inputs(seq, key_seq, causal)
    want = tf32_attention_backward(*xs, causal=causal, configs=(one, one))
    got = tf32_attention_backward(*xs, causal=causal, configs=(split, one))
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=name)
    # and float64 autograd's gradients, as test_attention_backward_tf32 asks of the one kernel
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs[:3]]
    exact = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal), leaves, torch.tensor(xs[5], dtype=torch.float64))
    for name, g, w in zip(("dq", "dk", "dv"), got, exact):
        np.testing.assert_allclose(g, w.numpy(), atol=2e-4, rtol=2e-3, err_msg=name)
    if causal:
        assert not got[1][..., seq:, :].any() and not got[2][..., seq:, :].any()


@simulator_only
def test_dq_added_atomically_by_the_dk_kernel():
    # 16-query tiles (atomic dQ's pieces are 16 queries x 32 columns), causal,
    # cross-attention: dK and dV the same bits as the one kernel's, dQ within
    # float32 rounding of its own kernel's (another order of sums).
    one = Tf32BackwardConfig(32, warps=1, block_cols=16)
    split = replace(one, split_sums=True)
    xs = inputs(12, 20, True, seed=3)
    want = tf32_attention_backward(*xs, causal=True, configs=(one, one))
    got = tf32_attention_backward(*xs, causal=True, configs=(split, one), atomic_dq=True)
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-6 * np.abs(want[0]).max())
    for name, g, w in zip(("dk", "dv"), got[1:], want[1:]):
        np.testing.assert_array_equal(g, w, err_msg=name)


@simulator_only
def test_nan_and_infinity_where_the_one_kernel_has_them():
    one = Tf32BackwardConfig(32, warps=1, block_cols=8)
    split = replace(one, split_sums=True)
    q, k, v, out, lse, dout = inputs(16, 12, False, seed=7)
    q[0, 0, 3, 5] = np.nan
    dout[0, 1, 9, 2] = np.inf
    xs = (q, k, v, out, lse, dout)
    want = tf32_attention_backward(*xs, configs=(one, one))
    got = tf32_attention_backward(*xs, configs=(split, one))
    assert np.isnan(want[1]).any() and np.isnan(want[2]).any()  # something to compare
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=name)  # NaN where NaN


@simulator_only
def test_the_dv_kernel_walks_its_own_width():
    # dv_block_cols: the dV kernel (which keeps K alone in shared memory, no
    # V) walks 16 queries at a time while the dK kernel walks 8. dV is then
    # the bits of split sums walking 16 throughout, dK and dQ those of 8.
    from gpucourse.kernels.attention.tf32_backward import dv_tiles

    one = Tf32BackwardConfig(32, warps=1, block_cols=8)
    split = replace(one, split_sums=True)
    wide = replace(split, dv_block_cols=16)
    assert dv_tiles(wide) == replace(split, block_cols=16) and dv_tiles(split) == split
    for causal in (False, True):
        xs = inputs(20, 19, causal, seed=11)
        narrow = tf32_attention_backward(*xs, causal=causal, configs=(split, one))
        sixteen = tf32_attention_backward(*xs, causal=causal,
                                          configs=(replace(split, block_cols=16), one))
        got = tf32_attention_backward(*xs, causal=causal, configs=(wide, one))
        np.testing.assert_array_equal(got[0], narrow[0], err_msg=f"dq, causal={causal}")
        np.testing.assert_array_equal(got[1], narrow[1], err_msg=f"dk, causal={causal}")
        np.testing.assert_array_equal(got[2], sixteen[2], err_msg=f"dv, causal={causal}")


def test_the_dv_kernels_walk_is_checked():
    # The dV kernel holds K alone: at head dim 128, 8 warps walking 64 queries
    # need K (64 KiB), two stages of Q and dO (128) and their L and D (1):
    # 193 KiB, where the dK kernel's K and V and 64-query stages would need
    # 257. 128 queries would need 322 KiB, more than a block may have.
    from gpucourse.kernels.attention.tf32_backward import DYNAMIC_SHARED_LIMIT_BYTES, dv_tiles

    config = Tf32BackwardConfig(128, warps=8, block_cols=32, split_sums=True, dv_block_cols=64)
    assert check_tf32_backward_config(config) is config
    assert dv_tiles(config).shared_bytes(stats=True, own=1) == 1024 * (64 + 128 + 1)
    assert replace(config, block_cols=64).shared_bytes(stats=True) > DYNAMIC_SHARED_LIMIT_BYTES
    with pytest.raises(ValueError, match=r"the tiles \(dv_block_cols 128\) need 329728 bytes"):
        check_tf32_backward_config(replace(config, dv_block_cols=128))
    with pytest.raises(ValueError, match="dv_block_cols must be a positive multiple of 8"):
        check_tf32_backward_config(replace(config, dv_block_cols=20))
    with pytest.raises(ValueError, match="only split_sums=True builds"):
        check_tf32_backward_config(replace(config, split_sums=False))


def test_the_sums_asked_for_are_named():
    config = check_tf32_backward_config(Tf32BackwardConfig(32, warps=1, block_cols=16))
    with pytest.raises(ValueError, match="sums must be 'dkdv', 'dk' or 'dv'"):
        make_dkdv_kernel(config, False, False, "dq")
    with pytest.raises(ValueError, match="atomic dQ needs dS"):
        make_dkdv_kernel(config, False, True, "dv")
    with pytest.raises(ValueError, match="split_sums must be True or False"):
        check_tf32_backward_config(Tf32BackwardConfig(32, split_sums=1))


PTX_SCRIPT = """
import sys
from numba import types
from gpucourse.kernels.attention import tf32_backward as T
T.on_gpu = lambda: True  # the tiles a GPU gets
b, f, i = types.Array(types.uint16, 1, "C"), types.Array(types.float32, 1, "C"), types.int32
signature = (b,) * 4 + (f,) * 5 + (i, i, i, types.float32, types.float32)
config = T.backward_configs(128, split_sums=True)[0]
assert config == T.Tf32BackwardConfig(128, warps=8, block_cols=32, split_sums=True,
                                     dv_block_cols=64), config
for name, atomic in (("dv", False), ("dk", True)):
    kernel = T.make_dkdv_kernel(config, True, atomic, name)
    ptx, _ = numba.cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
    open(f"{sys.argv[1]}/{name}{'_atomic' if atomic else ''}.ptx", "w").write(ptx)
"""


def test_the_two_kernels_a_gpu_runs_at_head_dim_128_do_not_spill(tmp_path):
    # 8 warps, 32-row query tiles: the dK kernel with atomic dQ under the
    # causal mask at 241-242 registers (ptxas 13.5 here, 13.0 on the H200;
    # 174 without the mask on the H200), where the one kernel took 255 for
    # 8-row tiles; the dV kernel walks 64 queries at a time (dv_block_cols),
    # at 255 registers. The output groups are written out in add_product: in
    # a loop the compiler left rolled, the dK kernel's sum went to local
    # memory at these tiles. Under the causal mask (its extra code) and with
    # atomic dQ, the default; the kernels without the mask are left to the
    # GPU-only test of the compiled kernels' local memory
    # (test_attention_backward_tf32), about a minute of compiling each here.
    compile_without_a_gpu(PTX_SCRIPT, str(tmp_path))
    names = ("dv", "dk_atomic")
    for name in names:
        ptx = (tmp_path / f"{name}.ptx").read_text()
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx, name
        assert "cp.async.cg.shared.global" in ptx and "ld.shared.v4.f32" in ptx, name
        assert ".local" not in ptx, name  # tiles and the sum in registers
        report = ptxas_report(ptx)
        assert "0 bytes spill stores" in report and "0 bytes lmem" in report, name
