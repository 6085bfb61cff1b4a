"""The tiny GPT: its corpus, its batches, and training on the course's kernels.

On this machine the course's kernels run on Numba's simulator, so the models
here are tiny (one layer, two heads of 16, windows of 16 tokens) and train for
a few steps. What is checked is what the GPU run relies on: the same seed gives
the same weights and batches whatever the kernels, and training on the
course's attention gives the losses PyTorch's attention gives, step by step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpucourse import tinygpt as T
from gpucourse.device import on_gpu

TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=16)
FEW_STEPS = T.TrainConfig(steps=2, batch_size=2, corpus_lines=200, warmup_steps=1,
                          learning_rate=3e-3)


def test_a_line_is_the_sum_written_backwards():
    assert T.addition_line(123, 989) == "123+989=2111\n"  # 1112 backwards
    assert T.addition_line(0, 7) == "000+007=7000\n"
    assert T.addition_line(999, 999) == "999+999=8991\n"
    assert len(T.addition_line(5, 5)) == T.LINE_LENGTH == 13
    for a, b in T.problems(200, seed=3):
        line = T.addition_line(int(a), int(b))
        left, answer = line[:-1].split("=")
        x, y = (int(n) for n in left.split("+"))
        assert int(answer[::-1]) == x + y == a + b


def test_text_round_trips_through_tokens():
    text = T.corpus(50, seed=1)
    ids = T.encode(text)
    assert ids.dtype == np.int64 and ids.max() < len(T.VOCAB)
    assert T.decode(ids) == text
    with pytest.raises(ValueError, match="characters"):
        T.encode("12-3")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="a must be"):
        T.addition_line(1000, 1)
    with pytest.raises(ValueError, match="n_head must divide"):
        T.GPTConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="head dims"):
        T.GPTConfig(n_embd=40, n_head=4, attention="course")  # head dim 10
    with pytest.raises(ValueError, match="attention must be"):
        T.GPTConfig(attention="flash")
    with pytest.raises(ValueError, match="steps"):
        T.TrainConfig(steps=0)
    model = T.build(T.GPTConfig(**TINY))
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros((1, 17), dtype=torch.int64))


def test_held_out_problems_are_not_in_the_corpus():
    config = T.TrainConfig(corpus_lines=5000)
    seen = {tuple(p) for p in T.problems(config.corpus_lines, config.seed).tolist()}
    held_out = T.held_out_problems(300, config)
    assert held_out.shape == (300, 2) and held_out.dtype == np.int64
    assert not seen & {tuple(p) for p in held_out.tolist()}
    assert len({tuple(p) for p in held_out.tolist()}) == 300


def test_batches_are_lines_shifted_by_one_and_score_only_the_sums():
    tokens = T.encode(T.corpus(100, seed=0))
    x, y = next(T.batches(tokens, 3 * T.LINE_LENGTH, 4, seed=5, answers_only=False))
    x2, y2 = next(T.batches(tokens, 3 * T.LINE_LENGTH, 4, seed=5))
    assert torch.equal(x, x2)  # the same seed, the same windows
    for row, target, masked in zip(x, y, y2):
        text = T.decode(row.tolist())
        assert text[: T.LINE_LENGTH][-1] == "\n" and "=" in text[: T.LINE_LENGTH]  # line-aligned
        assert torch.equal(row[1:], target[:-1])  # the targets are the next tokens
        kept = masked != -1
        # Scored: the four digits of each sum and the line's end, nothing else.
        assert int(kept.sum()) == 3 * (T.DIGITS + 2)
        assert set(T.decode(masked[kept].tolist())) <= set("0123456789\n")
        assert torch.equal(masked[kept], target[kept])


def test_the_learning_rate_warms_up_then_decays_to_a_tenth():
    config = T.TrainConfig(steps=1000, warmup_steps=100, learning_rate=1e-3)
    rates = [T.learning_rate(s, config) for s in range(1000)]
    assert rates[0] == pytest.approx(1e-5) and rates[99] == pytest.approx(1e-3)
    assert rates[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(rates[99:], rates[100:]))


def test_the_seed_alone_sets_the_weights():
    weights = [dict(T.build(T.GPTConfig(**TINY, attention=a, linear=lin), seed=4).state_dict())
               for a, lin in (("torch", "torch"), ("course", "course"))]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert sum(p.numel() for p in T.build(T.GPTConfig()).parameters()) == \
        T.parameter_count(T.GPTConfig())


def test_training_on_the_course_attention_follows_pytorch_step_by_step():
    """Two steps of AdamW: the second loss depends on the first step's gradients,
    so equal losses mean equal forward and backward passes (to fp32 rounding)."""
    losses = {}
    for attention in T.ATTENTIONS:
        _, history = T.train(T.GPTConfig(**TINY, attention=attention), FEW_STEPS, progress=False)
        losses[attention] = history["loss"]
    assert len(losses["course"]) == FEW_STEPS.steps
    np.testing.assert_allclose(losses["course"], losses["torch"], rtol=1e-5)
    assert losses["torch"][-1] < losses["torch"][0]  # and it learns


def test_the_course_linear_layer_matches_torch_forward_and_backward():
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(*shape, generator=generator, requires_grad=True)
                       for shape in ((2, 3, 8), (5, 8), (5,)))
    dy = torch.randn(2, 3, 5, generator=generator)
    ours = T.course_linear(x, weight, bias)
    grads = torch.autograd.grad(ours, (x, weight, bias), dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, weight, bias))
    want = F.linear(x64, w64, b64)
    want_grads = torch.autograd.grad(want, (x64, w64, b64), dy.double())
    assert ours.dtype == torch.float32 and ours.shape == (2, 3, 5)
    np.testing.assert_allclose(ours.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    for got, expected in zip(grads, want_grads):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_in_bf16_the_course_linear_layer_runs_on_half_matmul():
    # The bf16 model's linear layers: every product on half_matmul (the
    # simulator's tensor cores here), float32 sums rounded once to bf16, so
    # each output and gradient is within a unit or two of bf16 (2^-8,
    # relative to the largest) of the float64 product of the same bf16 values.
    # On a GPU the tensors are CUDA tensors, as the model's are.
    device = "cuda" if on_gpu() else "cpu"
    generator = torch.Generator().manual_seed(1)
    x, weight, bias = (torch.randn(*shape, generator=generator).to(device, torch.bfloat16)
                       .requires_grad_() for shape in ((2, 3, 8), (5, 8), (5,)))
    dy = torch.randn(2, 3, 5, generator=generator).to(device, torch.bfloat16)
    ours = T.course_linear(x, weight, bias)
    grads = torch.autograd.grad(ours, (x, weight, bias), dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, weight, bias))
    want = F.linear(x64, w64, b64)
    want_grads = torch.autograd.grad(want, (x64, w64, b64), dy.double())
    assert ours.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in grads)
    for got, expected in zip((ours, *grads), (want, *want_grads)):
        scale = float(expected.abs().max())
        assert float((got.double() - expected).abs().max()) <= 2 * 2.0 ** -8 * scale


def test_in_bf16_the_course_linear_layer_rounds_once_after_the_bias():
    # As cuBLAS's epilogue does for F.linear under autocast: the product and
    # the bias summed in float32, then rounded to bf16 once. A bias that
    # nearly cancels the product shows the difference: rounding the product
    # first loses bits the small result needs (an error of up to half a unit
    # of the product, 2^-8 of it, about eight times the result's own unit
    # here). Rounded once, each output is within half a unit of bf16 of the
    # float64 value (2^-8 relative). Rounding twice made the bf16 tiny GPT
    # fail to learn its carries on every character (benchmarks/NOTES.md).
    device = "cuda" if on_gpu() else "cpu"
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(1, 1, 8, generator=generator).to(torch.bfloat16)
    weight = torch.randn(5, 8, generator=generator).to(torch.bfloat16)
    product = x.double().reshape(1, 8) @ weight.double().t()
    bias = (-product.reshape(5) * (1 - 2.0 ** -5)).to(torch.bfloat16)
    want = product.reshape(1, 1, 5) + bias.double()
    ours = T.course_linear(x.to(device), weight.to(device), bias.to(device)).cpu()
    assert ours.dtype == torch.bfloat16
    error = (ours.double() - want).abs() / want.abs()
    assert float(error.max()) <= 2.0 ** -8, (
        f"relative error {float(error.max()):.2e} per output: the product was rounded to bf16 "
        f"before the bias was added")


def test_a_bf16_config_is_checked():
    with pytest.raises(ValueError, match="precision must be one of"):
        T.GPTConfig(**TINY, precision="fp8")


def test_a_model_answers_in_the_format_it_is_scored_on():
    model = T.build(T.GPTConfig(**TINY))
    score = T.addition_accuracy(model, [(12, 34), (500, 500)])
    assert score["n"] == 2 and 0.0 <= score["accuracy"] <= 1.0
    assert [e["problem"] for e in score["examples"]] == ["12+34", "500+500"]
    assert [e["expected"] for e in score["examples"]] == [46, 1000]
    completions = T.complete(model, ["12+34=", "99+99="], 4)
    assert [len(c) for c in completions] == [4, 4]
    with pytest.raises(ValueError, match="same length"):
        T.complete(model, ["1+1=", "12+34="], 2)


def test_a_run_has_learned_when_its_running_mean_falls_below_the_bar():
    losses = [1.0] * 60 + [0.0] * 60
    # The mean of the last 50 steps first drops below 0.01 when 50 of them are 0.
    assert T.steps_to_learn(losses, 0.01) == 109
    assert T.steps_to_learn(losses, 0.01, window=10) == 69
    assert T.steps_to_learn([1.0] * 200, 0.01) is None
    assert T.steps_to_learn([0.0] * 10, 0.01) is None  # shorter than the window


def test_the_loss_floor_is_the_entropy_of_the_operands():
    # Scored on the sums alone, a model that adds makes no mistake: floor 0.
    assert T.loss_floor(answers_only=True) == 0.0
    # On every character, a window of three lines has 18 operand digits among
    # its 39 targets (5 in the first line, whose first digit is the input, 6 in
    # each of the others, and the first digit of the fourth line): each costs ln 10.
    assert T.loss_floor(3 * T.LINE_LENGTH, answers_only=False) == pytest.approx(
        18 / 39 * math.log(10), rel=1e-12)
    # The same count, made from the batches themselves: a target is an operand
    # digit exactly where the line's text says so.
    tokens = T.encode(T.corpus(20, seed=1))
    _, y = next(T.batches(tokens, 2 * T.LINE_LENGTH, 3, seed=2, answers_only=False))
    line = T.addition_line(123, 456)
    operand = [c.isdigit() and i < 2 * T.DIGITS + 1 for i, c in enumerate(line)]
    share = np.mean([operand[t % T.LINE_LENGTH] for t in range(1, 2 * T.LINE_LENGTH + 1)])
    assert y.shape == (3, 2 * T.LINE_LENGTH)
    assert T.loss_floor(2 * T.LINE_LENGTH, answers_only=False) == pytest.approx(
        share * math.log(10), rel=1e-12)


def test_the_loss_floor_names_bad_input():
    with pytest.raises(ValueError, match="answers_only must be True or False"):
        T.loss_floor(39, answers_only="no")
    with pytest.raises(ValueError, match="block_size"):
        T.loss_floor(0, answers_only=False)


def test_final_losses_are_compared_above_the_floor():
    from gpucourse import results

    record = results.load_results("tinygpt_full")
    rows = T.final_loss_comparison(record)
    # PyTorch's run and at least one on the course's kernels, from each seed
    # (fp32, or bf16 beside PyTorch's bf16 run).
    assert {r["run"] for r in rows} & {"pytorch", "pytorch_bf16"}
    assert {r["run"] for r in rows} & {"course_attention", "course", "course_bf16"}
    for r in rows:
        assert r["floor"] == pytest.approx(T.loss_floor(record["configuration"]["model"]
                                                        ["block_size"], answers_only=False))
        # No run can end below the floor by more than the noise of a batch.
        assert r["above_floor"] > -0.01, r
        if r["run"] in ("pytorch", "pytorch_bf16"):
            assert r["vs_pytorch"] == 0.0
    fake = {"loss_floor": 1.0, "results": [
        dict(run="pytorch", seed=0, final_loss=1.10, accuracy=1.0),
        dict(run="course", seed=0, final_loss=1.21, accuracy=1.0)]}
    course = T.final_loss_comparison(fake)[1]
    assert course["vs_pytorch"] == pytest.approx(0.1) and course["above_floor"] == pytest.approx(0.21)
    # A bf16 run is compared with PyTorch's bf16 run, not its fp32 one.
    fake_bf16 = {"loss_floor": 1.0, "results": fake["results"] + [
        dict(run="pytorch_bf16", seed=0, precision="bf16", final_loss=1.20, accuracy=1.0),
        dict(run="course_bf16", seed=0, precision="bf16", final_loss=1.32, accuracy=1.0)]}
    assert T.final_loss_comparison(fake_bf16)[3]["vs_pytorch"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no 'pytorch_bf16' run"):
        T.final_loss_comparison({"loss_floor": 1.0, "results": fake_bf16["results"][3:]})
    with pytest.raises(ValueError, match="no loss floor"):
        T.final_loss_comparison({"loss_floor": 0.0, "results": []})
    with pytest.raises(ValueError, match="no 'pytorch' run"):
        T.final_loss_comparison({"loss_floor": 1.0, "results": fake["results"][1:]})
