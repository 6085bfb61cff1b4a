"""FlashAttention-2 in half precision (kernels.attention.half and
half_backward): on the simulator's stand-ins of mma.sync, ldmatrix and
cp.async the forward agrees with float64 attention as closely as float32
attention rounded to the type does (causal, cross-attention, ragged lengths,
fp16 and bf16), and the backward's gradients nearly so; the PTX an H100
would run holds the instructions, with no spills at the tiles a GPU gets;
bad tile shapes are named; the committed run meets the issue's forward
target. On a GPU, tests/test_attention.py and test_attention_backward.py
hold them to SDPA flash's error, and benchmarks/attention_half.py times them."""

from __future__ import annotations

import pytest
import torch
from ptx_helpers import compile_without_a_gpu, innermost_loop, ptxas_report

from gpucourse.device import on_gpu
from gpucourse.kernels.attention.half import (HALF_HEAD_DIMS, HalfConfig, check_half_config,
                                              half_attention)

on_the_simulator = pytest.mark.skipif(on_gpu(), reason="the simulator's run "
                                      "(tests/test_attention.py covers the GPU)")


def reference(q, k, v, causal):
    """(out, lse) in float64 from the same half-precision values."""
    scores = q.double() @ k.double().transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v.double(), torch.logsumexp(scores, -1)


@on_the_simulator
@pytest.mark.parametrize("dtype, causal, shape", [
    (torch.float16, True, (20, 50, 32)),  # cross-attention: 20 queries, 50 keys, ragged tiles
    (torch.bfloat16, False, (40, 24, 16)),
])
def test_half_attention_matches_float64(dtype, causal, shape):
    seq, key_seq, head_dim = shape
    gen = torch.Generator().manual_seed(seq + key_seq)
    q = torch.randn(1, 2, seq, head_dim, generator=gen).to(dtype)
    k, v = (torch.randn(1, 2, key_seq, head_dim, generator=gen).to(dtype) for _ in range(2))
    out, lse = half_attention(q, k, v, causal=causal)
    want, want_lse = reference(q, k, v, causal)
    # P is rounded to the type before P V, as in FlashAttention-2: within a few
    # units of the type, like float32 attention rounded once (a unit: 2^-11
    # for fp16, 2^-8 for bf16, relative to values of order one).
    unit = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
    assert out.dtype == dtype and bool(torch.isfinite(out).all())
    assert float((out.double() - want).abs().max()) <= 4 * unit
    assert torch.allclose(lse.double(), want_lse, atol=1e-5, rtol=1e-5)


def test_bad_tiles_are_named():
    with pytest.raises(ValueError, match="head_dim must be a multiple of 16"):
        check_half_config(HalfConfig(24))
    with pytest.raises(ValueError, match="block_cols must be a multiple of 16"):
        check_half_config(HalfConfig(64, block_cols=40))
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        half_attention(*(torch.zeros(1, 1, 16, 16) for _ in range(3)))


PTX_SCRIPT = """
import sys
from numba import types
from gpucourse.kernels.attention import half, half_backward
half.on_gpu = half_backward.on_gpu = lambda: True  # the tiles a GPU gets
h, f, i = types.Array(types.uint16, 1, "C"), types.Array(types.float32, 1, "C"), types.int32
scalars = (i, i, i, types.float32)
for head_dim in (128,):
    dkdv, dq = half_backward.backward_configs(head_dim)
    for name, kernel, signature in (
            ("forward", half.make_flash_half_kernel(half.half_config(head_dim), True, "bf16", True),
             (h, h, h, h, f) + scalars),
            ("dkdv", half_backward.make_dkdv_kernel(dkdv, True, "bf16"),
             (h, h, h, h, f, f, h, h, f) + scalars + (types.float32,)),
            ("dq", half_backward.make_dq_kernel(dq, True, "bf16"),
             (h, h, h, h, f, f, h) + scalars + (types.float32,))):
        ptx, _ = numba.cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0), fastmath=True)
        open(f"{sys.argv[1]}/{name}{head_dim}.ptx", "w").write(ptx)
# Version 5 in one kernel (dQ added atomically), its default at head dim 128
# and, under a causal mask, 64 (backward.ATOMIC_DQ_HEAD_DIMS), at the tiles a
# GPU gets.
for head_dim, causal in ((64, True), (128, True)):
    dkdv, _ = half_backward.backward_configs(head_dim, causal, atomic_dq=True)
    atomic = half_backward.make_dkdv_kernel(dkdv, causal, "f16", True)
    ptx, _ = numba.cuda.compile_ptx(atomic.py_func, (h, h, h, h, f, f, h, h, f) + scalars
                                    + (types.float32,), cc=(9, 0), fastmath=True)
    open(f"{sys.argv[1]}/atomic{head_dim}.ptx", "w").write(ptx)
"""


def test_the_kernels_a_gpu_runs_use_the_half_tensor_cores_without_spilling(tmp_path):
    # The forward, and the backward's two kernels, at the tiles a GPU gets for
    # head dim 128, where registers are tightest (64 has room to spare).
    compile_without_a_gpu(PTX_SCRIPT, str(tmp_path))
    for head_dim in (128,):
        for name in ("forward", "dkdv", "dq"):
            ptx = (tmp_path / f"{name}{head_dim}.ptx").read_text()
            assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx, name
            assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx, name
            assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx, name
            assert "cp.async.cg.shared.global" in ptx and "cvt.rn.bf16x2.f32" in ptx, name
            assert "ex2.approx" in ptx, name
            assert ".local" not in ptx, name  # tiles and sums in registers
            report = ptxas_report(ptx)
            assert "0 bytes spill stores" in report and "0 bytes lmem" in report, name
        forward = (tmp_path / f"forward{head_dim}.ptx").read_text()
        assert "shfl.sync.bfly" in forward  # the row maxima and sums
    assert set(HALF_HEAD_DIMS) >= {64, 128}
    for head_dim in (64, 128):
        atomic = (tmp_path / f"atomic{head_dim}.ptx").read_text()
        assert "red.global.add.v2.f32" in atomic
        assert "ldmatrix.sync.aligned.m8n8.x4.trans" in atomic
        report = ptxas_report(atomic)
        assert "0 bytes spill stores" in report and "0 bytes lmem" in report, head_dim
    # Each walked tile's L and D come from shared memory at constant offsets
    # (shared_word), every element without a branch: the main loop issues
    # under 8.5 PTX instructions an mma at head dim 64 (11.9 when each read
    # indexed a float32 view of shared memory behind a branch) and under 7 at
    # 128 (7.6 when each element read them from global memory, 16 loads a tile).
    for head_dim, most in ((64, 8.5), (128, 7)):
        loop = innermost_loop((tmp_path / f"atomic{head_dim}.ptx").read_text(), most=True)
        mma = sum("mma.sync" in line for line in loop)
        assert mma and len(loop) < most * mma, (head_dim, len(loop), mma)
        # Global loads: the next tile's L or D alone, which the staging threads
        # read (16 a tile when each element read its own).
        assert sum("ld.global" in line for line in loop) <= 2, head_dim


@pytest.mark.parametrize("direction, most", [("forward", 1.5), ("backward", 2.0)])
def test_the_committed_run_meets_the_issues_targets(direction, most):
    # Issue 29: in fp16 and bf16, the forward at most 1.5x the time of SDPA's
    # flash backend and the backward at most 2.0x its backward's, at B4 H16,
    # N 1024 and 4096, head dim 64 and 128, causal or not, in the same run;
    # ours timed as a call runs it (the backward's default kernels), and
    # every row within its type's tolerance (the peer's error on the same
    # inputs).
    from gpucourse import results
    from gpucourse.chapters.attention import _half_cases

    record = results.load_results("attention_half")
    assert all(row["passed"] for row in record["results"])
    cases, _ = _half_cases(record)
    timed = {key: ms for key, ms in cases.items() if key[0] == direction}
    shapes = {(seq, d, causal) for seq in (1024, 4096) for d in (64, 128)
              for causal in (False, True)}
    for dtype in ("fp16", "bf16"):
        assert {key[2:] for key in timed if key[1] == dtype} == shapes
    worst = max(timed, key=lambda key: timed[key]["ours"] / timed[key]["flash"])
    assert timed[worst]["ours"] <= most * timed[worst]["flash"], (worst, timed[worst])


@on_the_simulator
@pytest.mark.parametrize("seq, key_seq, causal", [(20, 40, True), (70, 24, False)])
def test_the_half_backward_matches_float64(seq, key_seq, causal):
    # attention.half_backward (flash_attention_backward's version 5 on a
    # GPU): dQ, dK and dV of cross-attention in bf16, against float64
    # autograd: causal with one tile of queries, and not causal with three
    # (the last ragged), so that the dK and dV kernel walks from one tile's
    # L and D to the next's. Float32 gradients rounded once to bf16 err by
    # half a unit; like FlashAttention-2, this kernel also rounds P and dS to
    # bf16 before their products (a unit each, at most), so it is held to 3x
    # that error. (On a GPU, tests/test_attention_backward.py holds it to
    # SDPA flash's.)
    from gpucourse.kernels.attention.half_backward import half_attention_backward

    gen = torch.Generator().manual_seed(7)
    q, dout = (torch.randn(1, 1, seq, 16, generator=gen).to(torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(1, 1, key_seq, 16, generator=gen).to(torch.bfloat16)
            for _ in range(2))
    out, lse = half_attention(q, k, v, causal=causal)
    got = half_attention_backward(q, k, v, out, lse, dout, causal=causal)
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    want = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        *leaves, is_causal=causal), leaves, dout.double())
    singles = [x.float().requires_grad_() for x in (q, k, v)]
    peers = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
        *singles, is_causal=causal), singles, dout.float())
    for name, g, w, peer in zip(("dq", "dk", "dv"), got, want, peers):
        assert g.dtype == torch.bfloat16 and g.shape == w.shape, name
        error = float((g.double() - w).abs().max())
        peer_error = float((peer.to(torch.bfloat16).double() - w).abs().max())
        assert error <= 3 * peer_error + 1e-6, (name, error, peer_error)


@on_the_simulator
def test_the_half_backward_takes_other_tiles_and_names_bad_ones():
    # benchmarks/attention_half_sweep.py times version 5 with tiles other than
    # backward_configs'; the gradients are the same sums in another order.
    from gpucourse.kernels.attention.half_backward import half_attention_backward

    gen = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(1, 1, 32, 16, generator=gen).to(torch.float16)
                     for _ in range(4))
    out, lse = half_attention(q, k, v)
    default = half_attention_backward(q, k, v, out, lse, dout)
    other = (HalfConfig(16, warps=1, block_cols=16), HalfConfig(16, warps=1, block_cols=32))
    got = half_attention_backward(q, k, v, out, lse, dout, configs=other)
    for name, a, b in zip(("dq", "dk", "dv"), got, default):
        scale = float(b.float().abs().max())
        assert float((a.float() - b.float()).abs().max()) <= 4 * 2.0 ** -11 * scale, name
    with pytest.raises(ValueError, match="pair of HalfConfig"):
        half_attention_backward(q, k, v, out, lse, dout, configs=other[0])
    with pytest.raises(ValueError, match="head_dim 16, got 32"):
        half_attention_backward(q, k, v, out, lse, dout,
                                configs=(HalfConfig(32), HalfConfig(32)))
    with pytest.raises(ValueError, match="block_cols must be a multiple of 16"):
        half_attention_backward(q, k, v, out, lse, dout,
                                configs=(HalfConfig(16, block_cols=24), other[1]))


def test_the_default_backward_tiles_are_the_sweeps_fastest(monkeypatch):
    # benchmarks/attention_half_sweep.py timed each kernel's spill-free tiles
    # with the other kernel at the defaults of the day (4 warps; 64-wide walks
    # at head dim 64, dK/dV 32 and dQ 16 at 128: `then`; later runs record
    # theirs). A GPU gets, for each head dim, mask and kernel, the tiles that
    # ran fastest there (or as fast).
    import json

    from gpucourse import results
    from gpucourse.kernels.attention import half_backward

    then = {64: {"dkdv": (4, 64), "dq": (4, 64)}, 128: {"dkdv": (4, 32), "dq": (4, 16)}}
    path = results.find_results("attention_half_sweep")[-1]
    rows = json.loads(path.read_text())["results"]
    monkeypatch.setattr(half_backward, "on_gpu", lambda: True)
    for head_dim in (64, 128):
        for causal in (False, True):
            timed = [r for r in rows if r["head_dim"] == head_dim and r["causal"] == causal]
            assert timed and all(r["passed"] for r in timed)
            default = next(r for r in timed if r["variant"] == "default")
            chosen = half_backward.backward_configs(head_dim, causal)
            for kernel, config in zip(("dkdv", "dq"), chosen):
                # Later runs name their default's tiles; the first did not.
                tiles = tuple(default.get(f"{kernel}_tiles") or then[head_dim][kernel])
                options = {tiles: default["ms"]}
                options.update({(r["warps"], r["block_cols"]): r["ms"] for r in timed
                                if r["kernel"] == kernel})
                mine = options[(config.warps, config.block_cols)]
                # Within 1% (the spread of a run) of the fastest: a tie keeps the old tiles.
                assert mine <= 1.01 * min(options.values()), (head_dim, causal, kernel, options)
            # In one kernel (dQ added atomically), the tiles of the fastest atomic row.
            one = half_backward.backward_configs(head_dim, causal, atomic_dq=True)[0]
            atomic = {(r["warps"], r["block_cols"], r["max_registers"]): r["ms"] for r in timed
                      if r["kernel"] == "atomic"}
            mine = atomic[(one.warps, one.block_cols, None)]
            assert mine <= 1.01 * min(atomic.values()), (head_dim, causal, atomic)


@on_the_simulator
def test_dq_added_atomically_by_the_key_blocks_equals_its_own_kernels():
    # half_backward_atomic: dK and dV's kernel adds each walked tile's dQ over
    # its keys to a float32 copy (FlashAttention-2's way), the warps sharing
    # the tile's 16 queries by columns here (head dim 32, 2 warps, 16-query
    # tiles); ragged and causal. The same sums in another order as the dQ
    # kernel's: within a few units of fp16 of the largest, and dK, dV untouched.
    from gpucourse.kernels.attention.half_backward import half_attention_backward
    from gpucourse.kernels.attention.half_backward_atomic import atomic_dq_layout

    gen = torch.Generator().manual_seed(5)
    q, dout = (torch.randn(1, 2, 20, 32, generator=gen).to(torch.float16) for _ in range(2))
    k, v = (torch.randn(1, 2, 36, 32, generator=gen).to(torch.float16) for _ in range(2))
    out, lse = half_attention(q, k, v, causal=True)
    tiles = (HalfConfig(32, warps=2, block_cols=16),) * 2
    assert atomic_dq_layout(tiles[0])[:2] == (1, 16)  # each warp: 16 queries x 16 columns
    own = half_attention_backward(q, k, v, out, lse, dout, causal=True, configs=tiles)
    added = half_attention_backward(q, k, v, out, lse, dout, causal=True, configs=tiles,
                                    atomic_dq=True)
    for name, a, b in zip(("dq", "dk", "dv"), added, own):
        assert a.dtype == torch.float16 and a.shape == b.shape, name
        scale = float(b.float().abs().max())
        assert float((a.float() - b.float()).abs().max()) <= 4 * 2.0 ** -11 * scale, name
    with pytest.raises(ValueError, match="atomic_dq must be True or False"):
        half_attention_backward(q, k, v, out, lse, dout, atomic_dq="yes")
    with pytest.raises(ValueError, match="max_registers must be None or a whole number"):
        half_attention_backward(q, k, v, out, lse, dout, max_registers=300)
    with pytest.raises(ValueError, match="multiple of warps"):
        atomic_dq_layout(HalfConfig(64, warps=4, block_cols=96))
