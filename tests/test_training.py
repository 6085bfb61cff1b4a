"""Tests of gpucourse.training: the activation ledger against bytes counted
by hand, the measured effects of mixed precision, accumulation and
recomputation, the layer's FLOPs against the published formula, and the
input pipeline."""

import numpy as np
import pytest
import torch

from gpucourse import collectives, training
from gpucourse.training import TinyGPT

SMALL = TinyGPT(vocab=64, hidden=32, heads=4, layers=3, seq_len=16)


def mlp_blocks(n=3, width=64, inner=256):
    torch.manual_seed(0)
    return torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(width, inner), torch.nn.GELU(),
                                                   torch.nn.Linear(inner, width)) for _ in range(n))


def live_bytes_per_block(run_block):
    """Three MLP blocks under an ActivationLedger: a 32 x 64 input through them
    (run_block(block, h) runs one), then a loss (the output squared, averaged),
    all inside the ledger. Returns (ledger, live bytes after each block, loss)."""
    blocks = mlp_blocks()
    ledger = training.ActivationLedger(blocks)
    seen = []
    with ledger:
        h = torch.randn(32, 64)
        for block in blocks:
            h = run_block(block, h)
            seen.append(ledger.live_bytes)
        loss = h.square().mean()
    return ledger, seen, loss


def test_ledger_counts_saved_activations_by_hand():
    # Linear -> GELU -> Linear on a 32 x 64 fp32 input saves the input
    # (32 x 64 x 4 = 8,192 bytes), the GELU's input (32 x 256 x 4 = 32,768) and
    # the second Linear's input (32,768): 73,728 bytes per block. The weights
    # are parameters and are not counted again.
    ledger, seen, loss = live_bytes_per_block(lambda block, h: block(h))
    assert seen == [73_728, 2 * 73_728, 3 * 73_728]
    loss.backward()
    assert ledger.live_bytes == 0  # the backward pass frees them all


def test_ledger_with_recomputation_keeps_only_block_inputs():
    from torch.utils.checkpoint import checkpoint

    _, seen, _ = live_bytes_per_block(lambda block, h: checkpoint(block, h, use_reentrant=False))
    assert seen == [8_192, 2 * 8_192, 3 * 8_192]  # each block's 32 x 64 x 4-byte input


def test_step_timeline_books():
    record = training.measure_step(SMALL, batch=4)
    model = training.build_model(SMALL)
    param_bytes = 4 * training.param_count(model)
    n_tensors = len(list(model.parameters()))
    start, *_, after_step, after_zero = record.points
    assert start.params == param_bytes and start.grads == start.optimizer == start.activations == 0
    # Adam keeps two fp32 moments per parameter and a 4-byte step count per tensor.
    assert after_step.grads == param_bytes
    assert after_step.optimizer == 2 * param_bytes + 4 * n_tensors
    assert after_zero.grads == 0 and after_zero.activations == 0
    # Activations grow block by block in the forward pass and shrink in the backward pass.
    forward = [p.activations for p in record.points if p.label.startswith("forward block")]
    backward = [p.activations for p in record.points if p.label.startswith("backward reaches")]
    assert len(forward) == len(backward) == SMALL.layers
    assert forward == sorted(forward) and backward == sorted(backward, reverse=True)
    # Blocks are identical, so each saves the same bytes.
    steps = np.diff(forward)
    assert np.all(steps == steps[0])


def test_techniques_change_memory_not_gradients():
    records = training.compare_techniques(SMALL, batch=8, accumulation_steps=4)
    base = records["fp32"]
    bf16 = records["bf16 autocast"]
    accumulated = records["accumulation x4"]
    recomputed = records["recomputation"]
    assert bf16.peak_activation_bytes < 0.85 * base.peak_activation_bytes
    # Four micro-batches of 2 hold a quarter of the activations of one batch of 8.
    assert accumulated.peak_activation_bytes == pytest.approx(base.peak_activation_bytes / 4, rel=0.02)
    assert recomputed.peak_activation_bytes < 0.5 * base.peak_activation_bytes
    # The same gradients: accumulation up to float rounding, recomputation exactly.
    for name, g in base.grads.items():
        np.testing.assert_allclose(accumulated.grads[name], g, rtol=1e-4, atol=1e-7)
        np.testing.assert_array_equal(recomputed.grads[name], g)
        np.testing.assert_allclose(bf16.grads[name], g, rtol=0.1, atol=2e-3)
    assert accumulated.loss == pytest.approx(base.loss, rel=1e-6)


def test_layer_flops_match_the_published_formula():
    for s, h, a, b in [(2048, 12288, 96, 1), (1024, 4096, 32, 4), (128, 64, 4, 2)]:
        ops = training.layer_ops(s, h, a, b)
        matmuls = sum(o.flops for o in ops if o.kind == "matmul")
        assert matmuls == pytest.approx(collectives.transformer_layer_flops(b, s, h, backward=False))
        softmax = next(o for o in ops if o.name == "softmax")
        assert softmax.flops == 5 * b * a * s * s


def test_layer_ops_by_hand():
    # s = 4, h = 8, a = 2, b = 1, 2-byte elements.
    ops = {o.name: o for o in training.layer_ops(4, 8, 2)}
    assert ops["QKV projection"].flops == 2 * 4 * 8 * 24  # 1,536
    assert ops["QKV projection"].bytes == 2 * (32 + 192 + 96)  # x, W_qkv, Q K V
    assert ops["QK^T"].flops == 2 * 4 * 4 * 8  # 256
    assert ops["QK^T"].bytes == 2 * (64 + 32)  # Q and K in, 2 x 4 x 4 scores out
    assert ops["softmax"].bytes == 2 * 2 * 32
    assert ops["MLP up"].flops == ops["MLP down"].flops == 2 * 4 * 8 * 32


def test_attention_share_grows_with_sequence():
    h, a = 4096, 32
    shares = [training.attention_share(s, h, a)["attention_flops"] for s in (512, 4096, 32768, 262144)]
    assert shares == sorted(shares) and shares[0] < 0.1 and shares[-1] > 0.8
    # At s = 6h the attention matmuls equal the projections and MLP: the core
    # share is 4s^2h + 5as^2 over that plus 24sh^2, a bit above one half.
    s = training.crossover_seq_len(h)
    share = training.attention_share(s, h, a)["attention_flops"]
    expected = (4 * s * s * h + 5 * a * s * s) / (24 * s * h * h + 4 * s * s * h + 5 * a * s * s)
    assert share == pytest.approx(expected)
    assert 0.5 < share < 0.52
    # The bytes share is already large at short sequences: the s^2 scores dominate traffic.
    assert training.attention_share(2048, 4096, 32)["attention_bytes"] > 0.5


def test_transforms_agree():
    images = training.make_images(5, 6, seed=1)
    fast = training.fast_transform(images)
    slow = np.stack([training.slow_transform(i) for i in images])
    np.testing.assert_allclose(fast, slow, rtol=1e-6)
    # By hand: flipping puts the last column first; 255 maps to (255 - 127.5) / 64.
    assert fast[0, 0, 0, 0] == pytest.approx((float(images[0, 0, -1, 0]) - 127.5) / 64)


def test_pipelines_deliver_the_same_batches():
    images = training.make_images(40, 4)
    inline = list(training.batches(images, 16, "slow"))
    prefetched = list(training.prefetch(training.batches(images, 16, "fast"), depth=2))
    assert [len(b) for b in inline] == [16, 16, 8]
    for a, b in zip(inline, prefetched):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_prefetch_reraises_errors():
    def broken():
        yield 1
        raise KeyError("bad item")

    with pytest.raises(KeyError, match="bad item"):
        list(training.prefetch(broken()))


def test_run_pipeline_counts_samples():
    run = training.run_pipeline(training.make_images(10, 4), batch_size=4, step_s=0, transform="fast")
    assert run.samples == 10 and run.seconds > 0 and 0 <= run.busy_fraction <= 1


def test_pipeline_throughput_by_hand():
    # 30 ms to load and 10 ms to compute a batch of 32: in line 32 / 0.04 = 800/s;
    # overlapped the loader sets the pace, 32 / 0.03 = 1066.7/s.
    assert training.pipeline_throughput(0.03, 0.01, 32, overlap=False) == pytest.approx(800)
    assert training.pipeline_throughput(0.03, 0.01, 32, overlap=True) == pytest.approx(1066.667, rel=1e-5)
    assert training.pipeline_throughput(0.002, 0.01, 32, overlap=True) == pytest.approx(3200)


@pytest.mark.parametrize("call, message", [
    (lambda: training.measure_step(SMALL, batch=0), "batch must be a whole number >= 1"),
    (lambda: training.measure_step(SMALL, precision="fp16"), "precision must be one of fp32, bf16"),
    (lambda: training.measure_step(SMALL, batch=6, accumulation_steps=4),
     r"accumulation_steps must divide batch \(6\)"),
    (lambda: training.measure_step(SMALL, recompute="yes"), "recompute must be True or False"),
    (lambda: TinyGPT(hidden=30, heads=4), r"heads must divide hidden \(30\)"),
    (lambda: training.layer_ops(0, 64, 4), "seq_len must be a whole number >= 1"),
    (lambda: training.layer_ops(16, 64, 5), r"heads must divide hidden \(64\)"),
    (lambda: training.layer_ops(16, 64, 4, bytes_per_element=0), "bytes_per_element must be > 0"),
    (lambda: training.pipeline_throughput(0.01, -1, 32, True), "step_s must be >= 0"),
    (lambda: training.pipeline_throughput(0.01, 0.01, 32, "yes"), "overlap must be True or False"),
    (lambda: list(training.batches(training.make_images(2, 2), 2, "medium")), "transform must be"),
    (lambda: training.fast_transform(np.zeros((2, 3))), "images must have shape"),
])
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_figures_draw():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    record = training.measure_step(SMALL, batch=2)
    ax = training.plot_timeline(record)
    assert len(ax.get_xticklabels()) == len(record.points)
    training.plot_attention_share(4096, 32)
    runs = [training.run_pipeline(training.make_images(4, 4), 2, 0, "fast")]
    training.plot_pipelines(runs, step_s=0.01, batch_size=2)
    plt.close("all")


def test_importing_the_module_imports_neither_torch_nor_numba():
    import subprocess
    import sys

    code = ("import sys, gpucourse.training, gpucourse.planner, gpucourse.economics; "
            "print('torch' in sys.modules, 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
