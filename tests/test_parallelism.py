"""Tests of gpucourse.parallelism: the split layers against the unsplit ones
(on 2 and 4 real processes), the pipeline schedules against the bubble
formula and their dependencies, the router's invariants, and the errors bad
input gets."""

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucourse import parallelism as par

# The property tests set no per-example deadline: the test machine is shared, and
# these tests check behaviour, not speed.

# -----------------------------------------------------------------------------
# Tensor parallelism in one process (numpy shards)


@settings(deadline=None)
@given(rows=st.integers(1, 6), cols_per_rank=st.integers(1, 4), world_size=st.integers(1, 4),
       seed=st.integers(0, 1000))
def test_column_parallel_concatenates_to_the_unsplit_layer(rows, cols_per_rank, world_size, seed):
    rng = np.random.default_rng(seed)
    in_features, out_features = 5, cols_per_rank * world_size
    x, w = rng.normal(size=(rows, in_features)), rng.normal(size=(in_features, out_features))
    b = rng.normal(size=out_features)
    outputs = par.column_parallel_linear(x, w, b, world_size)
    assert len(outputs) == world_size
    np.testing.assert_allclose(np.concatenate(outputs, axis=-1), x @ w + b, rtol=1e-12, atol=1e-12)


@settings(deadline=None)
@given(rows=st.integers(1, 6), rows_per_rank=st.integers(1, 4), world_size=st.integers(1, 4),
       seed=st.integers(0, 1000))
def test_row_parallel_sums_to_the_unsplit_layer(rows, rows_per_rank, world_size, seed):
    rng = np.random.default_rng(seed)
    in_features = rows_per_rank * world_size
    x, w = rng.normal(size=(rows, in_features)), rng.normal(size=(in_features, 3))
    b = rng.normal(size=3)
    x_shards = np.split(x, world_size, axis=-1)
    out = par.row_parallel_linear(x_shards, par.shard_rows(w, world_size), b)
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-12, atol=1e-12)


def test_row_parallel_by_hand():
    # x = [1, 2 | 3, 4], W = diag-ish: rank 0 gives 1*1 + 2*0 = 1, rank 1 gives 3*2 + 4*1 = 10.
    out = par.row_parallel_linear([np.array([1.0, 2.0]), np.array([3.0, 4.0])],
                                  [np.array([[1.0], [0.0]]), np.array([[2.0], [1.0]])],
                                  np.array([0.5]))
    np.testing.assert_allclose(out, [11.5])


def test_megatron_mlp_split_on_explicit_shards():
    # Column-parallel W1, GeLU on each rank's own slice, row-parallel W2: equal to the whole MLP.
    rng = np.random.default_rng(3)
    w = par.init_mlp_weights(8, seed=1)
    x = rng.normal(size=(3, 8))
    hidden_shards = [par.gelu(h) for h in par.column_parallel_linear(x, w["w1"], w["b1"], 4)]
    out = par.row_parallel_linear(hidden_shards, par.shard_rows(w["w2"], 4), w["b2"])
    np.testing.assert_allclose(out, par.mlp_reference(x, w), rtol=1e-12, atol=1e-12)


def test_gelu_against_the_exact_erf_form():
    x = np.linspace(-5, 5, 101)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(par.gelu(x), exact, atol=1e-3)  # the tanh form is an approximation
    assert par.gelu(0.0) == 0.0


def test_attention_reference_by_hand():
    w = par.init_attention_weights(4, seed=5)
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    out = par.attention_reference(x, w, heads=2, causal=True)
    # Causal: the first position attends only to itself, so its output is its own value
    # projection passed through the output projection.
    first = (x[:, 0] @ w["wv"] + w["bv"]) @ w["wo"] + w["bo"]
    np.testing.assert_allclose(out[:, 0], first, rtol=1e-12)
    # Equal keys give uniform attention: the output is the mean of the values.
    same = np.repeat(x[:, :1], 3, axis=1)
    out = par.attention_reference(same, w, heads=2, causal=False)
    np.testing.assert_allclose(out, np.repeat(out[:, :1], 3, axis=1), rtol=1e-12)


# -----------------------------------------------------------------------------
# Tensor parallelism over real processes


def unsplit_gradients(run):
    """Gradients of sum(out * upstream) through the unsplit float64 layers,
    by torch autograd in this process."""
    import torch

    x = torch.tensor(run.x, requires_grad=True)
    up = torch.tensor(run.upstream)
    grads = {}
    w = {k: torch.tensor(v, requires_grad=True) for k, v in run.weights["mlp"].items()}
    out = torch.nn.functional.gelu(x @ w["w1"] + w["b1"], approximate="tanh") @ w["w2"] + w["b2"]
    (out * up).sum().backward()
    grads["mlp"] = (x.grad.numpy().copy(), {k: v.grad.numpy() for k, v in w.items()})
    x.grad = None
    a = {k: torch.tensor(v, requires_grad=True) for k, v in run.weights["attention"].items()}
    batch, seq, hidden = run.x.shape
    d = hidden // run.heads
    q, k, v = ((x @ a[f"w{n}"] + a[f"b{n}"]).reshape(batch, seq, run.heads, d).transpose(1, 2)
               for n in "qkv")
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d))
    scores = scores.masked_fill(~torch.ones(seq, seq, dtype=torch.bool).tril(), float("-inf"))
    ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, hidden)
    out = ctx @ a["wo"] + a["bo"]
    (out * up).sum().backward()
    grads["attention"] = (x.grad.numpy().copy(), {k: v.grad.numpy() for k, v in a.items()})
    return grads


@pytest.fixture(scope="module", params=[2, 4])
def tensor_parallel_run(request):
    # One launch per world size runs both blocks, forward and backward.
    return par.run_tensor_parallel(world_size=request.param, batch=2, seq=3, hidden=8, heads=4,
                                   seed=7, timeout_s=120)


def test_split_output_equals_the_unsplit_layer(tensor_parallel_run):
    run = tensor_parallel_run
    references = {"mlp": par.mlp_reference(run.x, run.weights["mlp"]),
                  "attention": par.attention_reference(run.x, run.weights["attention"], run.heads)}
    for block, reference in references.items():
        for rank in range(run.world_size):
            np.testing.assert_allclose(run.ranks[block][rank]["output"], reference,
                                       rtol=1e-12, atol=1e-12, err_msg=f"{block}, rank {rank}")
    assert run.max_abs_error() < 1e-12


def test_split_gradients_equal_the_unsplit_layer(tensor_parallel_run):
    run = tensor_parallel_run
    grads = unsplit_gradients(run)
    for block in ("mlp", "attention"):
        grad_x, grad_w = grads[block]
        for rank in range(run.world_size):
            result = run.ranks[block][rank]
            # f's all-reduce in the backward pass gives every rank the whole input gradient.
            np.testing.assert_allclose(result["grad_x"], grad_x, rtol=1e-10, atol=1e-12)
            # Each rank's weight gradients are its slice of the unsplit gradients.
            expected = par.tensor_parallel_shards(grad_w, rank, run.world_size, run.heads)
            assert set(result["grad_shards"]) == set(expected)
            for name, g in expected.items():
                np.testing.assert_allclose(result["grad_shards"][name], g, rtol=1e-10, atol=1e-12,
                                           err_msg=f"{block} {name}, rank {rank}")


def test_allreduces_per_layer(tensor_parallel_run):
    run = tensor_parallel_run
    batch, seq, hidden = run.x.shape
    for block in ("mlp", "attention"):
        for result in run.ranks[block]:
            assert result["allreduces"] == {"forward": 1, "backward": 1}
            # Each all-reduce carries one activation tensor: batch * seq * hidden float64s.
            assert result["allreduce_bytes"] == {"forward": batch * seq * hidden * 8,
                                                 "backward": batch * seq * hidden * 8}
    assert run.allreduces_per_layer() == par.MEGATRON_ALLREDUCES_PER_LAYER == {"forward": 2,
                                                                             "backward": 2}


def test_allreduce_bytes_by_hand():
    # One 1024-token sequence of the 8.3B model in fp16: 1024 * 3072 * 2 bytes = 6 MiB.
    assert par.tensor_parallel_allreduce_bytes(1, 1024, 3072) == 6 * 2 ** 20
    assert par.tensor_parallel_allreduce_bytes(2, 3, 8, bytes_per_element=8) == 384


# -----------------------------------------------------------------------------
# Pipeline schedules


def test_bubble_formula_by_hand():
    assert par.gpipe_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert par.gpipe_bubble_fraction(1, 5) == 0.0  # one stage never waits
    assert par.gpipe_bubble_fraction(8, 1) == pytest.approx(7 / 8)
    np.testing.assert_allclose(par.gpipe_bubble_fraction(2, np.array([1, 3])), [1 / 2, 1 / 4])


@settings(max_examples=60, deadline=None)
@given(stages=st.integers(1, 8), micro_batches=st.integers(1, 24),
       schedule=st.sampled_from(par.SCHEDULES),
       forward=st.floats(0.1, 3), backward=st.floats(0.1, 3))
def test_simulated_bubble_equals_the_formula(stages, micro_batches, schedule, forward, backward):
    run = par.simulate_pipeline(stages, micro_batches, schedule, forward, backward)
    p, m = stages, micro_batches
    assert run.total_time_s == pytest.approx((m + p - 1) * (forward + backward))
    assert run.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)
    assert run.bubble_fraction == pytest.approx(par.gpipe_bubble_fraction(p, m), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 8), micro_batches=st.integers(1, 24))
def test_peak_in_flight_is_m_for_gpipe_and_p_for_1f1b(stages, micro_batches):
    gpipe = par.simulate_pipeline(stages, micro_batches, "gpipe")
    one_f_one_b = par.simulate_pipeline(stages, micro_batches, "1f1b")
    assert gpipe.peak_in_flight() == micro_batches
    assert all(gpipe.peak_in_flight(s) == micro_batches for s in range(stages))
    assert one_f_one_b.peak_in_flight() == min(stages, micro_batches)
    # Stage s of 1F1B holds at most p - s micro-batches: the first stage holds the most.
    for s in range(stages):
        assert one_f_one_b.peak_in_flight(s) == min(stages - s, micro_batches)


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 6), micro_batches=st.integers(1, 12),
       schedule=st.sampled_from(par.SCHEDULES), layers_extra=st.integers(0, 7))
def test_schedule_respects_dependencies(stages, micro_batches, schedule, layers_extra):
    run = par.simulate_pipeline(stages, micro_batches, schedule, layers=stages + layers_extra)
    ends = {(op.kind, op.stage, op.micro_batch): op.end_s for op in run.ops}
    assert len(ends) == len(run.ops) == 2 * stages * micro_batches  # every pass exactly once
    for op in run.ops:
        if op.kind == "F" and op.stage > 0:
            assert op.start_s >= ends[("F", op.stage - 1, op.micro_batch)] - 1e-12
        if op.kind == "B":
            before = ("B", op.stage + 1, op.micro_batch) if op.stage < stages - 1 else \
                ("F", op.stage, op.micro_batch)
            assert op.start_s >= ends[before] - 1e-12
    for s in range(stages):  # a stage runs one pass at a time
        mine = sorted((op.start_s, op.end_s) for op in run.ops if op.stage == s)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(mine, mine[1:]))


def test_pipeline_order_by_hand():
    # 1F1B, 3 stages, 4 micro-batches: stage 0 warms up with 2 forwards.
    order = par.pipeline_order(3, 4, "1f1b")
    assert order[0] == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("B", 2),
                        ("B", 3)]
    assert order[2] == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3),
                        ("B", 3)]
    assert par.pipeline_order(2, 2, "gpipe")[1] == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]


def test_uneven_stages_grow_the_bubble():
    assert par.partition_layers(10, 4) == [3, 3, 2, 2]
    assert par.partition_layers(8, 8) == [1] * 8
    even = par.simulate_pipeline(4, 8, "1f1b", layers=8)
    uneven = par.simulate_pipeline(4, 8, "1f1b", layers=10)
    assert even.bubble_fraction == pytest.approx(3 / 11)
    assert uneven.bubble_fraction > even.bubble_fraction
    # Slower than the same 10 layers perfectly balanced, 2.5 per stage: (m + p - 1) slots
    # of 2.5 layers * (1 + 2) time units; and no faster than the busiest stage alone.
    assert uneven.total_time_s > (8 + 3) * 2.5 * 3.0
    assert uneven.total_time_s >= uneven.busy_time_s(stage=0) == 8 * 3 * 3.0


# -----------------------------------------------------------------------------
# Mixture of experts


def test_expert_capacity_by_hand():
    assert par.expert_capacity(64, 8, 1, 1.0) == 8
    assert par.expert_capacity(64, 8, 1, 1.25) == 10  # not 11 by round-off
    assert par.expert_capacity(64, 8, 2, 1.0) == 16  # GShard's 2N/E
    assert par.expert_capacity(10, 4, 1, 1.0) == 3  # 2.5 rounded up
    assert par.expert_capacity(4, 8, 1, 0.1) == 1  # at least one place


def test_routing_by_hand():
    # Four tokens, two experts, capacity ceil(1.0 * 4 / 2) = 2. Three tokens prefer expert 0:
    # the first two get in, the third is dropped; the fourth goes to expert 1.
    logits = np.array([[2.0, 0.0], [1.0, 0.0], [3.0, 0.0], [0.0, 1.0]])
    r = par.route_tokens(logits, k=1, capacity_factor=1.0)
    assert r.capacity == 2
    np.testing.assert_array_equal(r.expert_index[:, 0], [0, 0, -1, 1])
    np.testing.assert_array_equal(r.tokens_per_expert, [2, 1])
    assert (r.routed, r.dropped) == (3, 1)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(r.gates[:, 0], [probs[0, 0], probs[1, 0], 0.0, probs[3, 1]])
    # Top-2 with capacity 4 per expert: nothing dropped, gates renormalised to sum to 1.
    r2 = par.route_tokens(logits, k=2, capacity_factor=1.0)
    assert r2.capacity == 4 and r2.dropped == 0
    np.testing.assert_allclose(r2.gates.sum(axis=1), 1.0)
    np.testing.assert_array_equal(r2.expert_index[:, 1], [1, 1, 1, 0])


def test_second_choices_queue_behind_first_choices():
    # Capacity 1 per expert (k=2, 2 tokens, 4 experts, factor 1): token 1's first choice
    # (expert 1) must win over token 0's second choice (also expert 1).
    logits = np.array([[5.0, 4.0, 0.0, 0.0], [0.0, 5.0, 0.0, 4.0]])
    r = par.route_tokens(logits, k=2, capacity_factor=1.0)
    assert r.capacity == 1
    np.testing.assert_array_equal(r.expert_index, [[0, -1], [1, 3]])



def test_gshard_random_second_expert_by_hand():
    # GShard's Algorithm 1: the second expert gets the token only if a uniform draw
    # is below 2 * g2 (g1, g2 renormalised). A tie (g2 = 1/2) always goes; a second
    # choice with a gate of e^-20 never does, and takes no place, so it is not dropped.
    logits = np.array([[0.0, 0.0, -50.0], [10.0, -10.0, -50.0]])
    r = par.route_tokens(logits, k=2, capacity_factor=2.0, second_expert="random", seed=3)
    np.testing.assert_array_equal(r.expert_index, [[0, 1], [0, -1]])
    np.testing.assert_array_equal(r.not_sampled, [[False, False], [False, True]])
    assert (r.routed, r.dropped, r.skipped) == (3, 0, 1)
    assert r.gates[1, 1] == 0 and r.gates[0, 1] == pytest.approx(0.5)


def test_gshard_random_second_expert_goes_with_probability_twice_its_gate():
    # Room for every token: the share of second choices dispatched is the mean of 2 * g2,
    # computed here from the softmax directly; first choices are the same as with "always".
    logits = par.synthetic_router_logits(20_000, 8, skew=1.0, seed=5)
    r = par.route_tokens(logits, k=2, capacity_factor=8.0, second_expert="random", seed=11)
    always = par.route_tokens(logits, k=2, capacity_factor=8.0)
    np.testing.assert_array_equal(r.expert_index[:, 0], always.expert_index[:, 0])
    p = np.sort(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True), axis=1)[:, ::-1]
    chance = 2 * p[:, 1] / (p[:, 0] + p[:, 1])
    sent = r.expert_index[:, 1] >= 0
    assert r.dropped == 0 and sent.sum() + r.skipped == len(logits)
    assert abs(sent.mean() - chance.mean()) < 4 * np.sqrt(np.sum(chance * (1 - chance))) / len(logits)
    # Same seed, same draws; "always" skips nothing.
    again = par.route_tokens(logits, k=2, capacity_factor=8.0, second_expert="random", seed=11)
    np.testing.assert_array_equal(again.expert_index, r.expert_index)
    assert always.skipped == 0

router_cases = st.tuples(st.integers(1, 40), st.integers(1, 10), st.integers(0, 10_000),
                         st.floats(0.05, 4.0), st.floats(0, 4))


@settings(max_examples=60, deadline=None)
@given(case=router_cases, k_choice=st.integers(1, 3))
def test_router_invariants(case, k_choice):
    tokens, experts, seed, capacity_factor, skew = case
    k = min(k_choice, experts)
    logits = par.synthetic_router_logits(tokens, experts, skew, seed)
    policy = "random" if k == 2 and seed % 2 else "always"
    r = par.route_tokens(logits, k, capacity_factor, second_expert=policy, seed=seed)
    assert r.capacity == par.expert_capacity(tokens, experts, k, capacity_factor)
    assert np.all(r.tokens_per_expert <= r.capacity)  # no expert above capacity
    assert r.dropped + r.routed + r.skipped == tokens * k
    assert policy == "random" or r.skipped == 0
    assert r.tokens_per_expert.sum() == r.routed
    np.testing.assert_array_equal(
        r.tokens_per_expert, np.bincount(r.expert_index[r.expert_index >= 0], minlength=experts))
    # Each token's choices are distinct experts, in falling probability.
    assert all(len(set(row)) == k for row in r.choices)
    chosen_probs = np.take_along_axis(r.probs, r.choices, axis=1)
    assert np.all(np.diff(chosen_probs, axis=1) <= 0)
    # A dropped assignment happens only to a full expert.
    for t, j in zip(*np.nonzero((r.expert_index < 0) & ~r.not_sampled)):
        assert r.tokens_per_expert[r.choices[t, j]] == r.capacity
    # Gates: zero where dropped, in [0, 1] everywhere.
    assert np.all(r.gates[r.expert_index < 0] == 0)
    assert np.all((r.gates >= 0) & (r.gates <= 1 + 1e-12))


@settings(max_examples=40, deadline=None)
@given(case=router_cases)
def test_top1_with_room_for_everyone_is_argmax(case):
    tokens, experts, seed, _, skew = case
    logits = par.synthetic_router_logits(tokens, experts, skew, seed)
    r = par.route_tokens(logits, k=1, capacity_factor=experts)  # capacity = all tokens
    assert r.dropped == 0
    np.testing.assert_array_equal(r.expert_index[:, 0], np.argmax(logits, axis=1))
    np.testing.assert_allclose(r.gates[:, 0], r.probs.max(axis=1))


def test_load_balancing_loss_values():
    # A perfectly uniform router: P_i = 1/N, sum f_i = 1, so N * sum f_i P_i = 1.
    for experts in (1, 2, 8, 64):
        assert par.load_balancing_loss(np.full((16, experts), 1 / experts)) == pytest.approx(1.0)
    # Every token to expert 0 with certainty: f_0 = P_0 = 1, loss = N.
    collapsed = np.zeros((10, 4))
    collapsed[:, 0] = 1
    assert par.load_balancing_loss(collapsed) == pytest.approx(4.0)
    # Hand-worked: 2 experts, probabilities [0.75, 0.25] and [0.5, 0.5] (the tie goes to 0):
    # f = [1, 0], P = [0.625, 0.375], loss = 2 * 0.625 = 1.25; alpha scales it.
    probs = np.array([[0.75, 0.25], [0.5, 0.5]])
    assert par.load_balancing_loss(probs) == pytest.approx(1.25)
    assert par.load_balancing_loss(probs, alpha=0.01) == pytest.approx(0.0125)
    # A balanced but confident router also scores 1: f = P = 1/N.
    assert par.load_balancing_loss(np.eye(4)) == pytest.approx(1.0)


def test_more_skew_drops_more_and_costs_more():
    even = par.route_tokens(par.synthetic_router_logits(512, 8, 0.0, 1), 1, 1.0)
    skewed = par.route_tokens(par.synthetic_router_logits(512, 8, 3.0, 1), 1, 1.0)
    assert skewed.dropped > even.dropped
    assert skewed.load_balancing_loss > even.load_balancing_loss
    drops = par.dropped_fractions(par.synthetic_router_logits(256, 8, 2.0, 0), [0.5, 1, 2, 8])
    assert np.all(np.diff(drops) <= 0) and drops[-1] == 0  # more room never drops more


# -----------------------------------------------------------------------------
# ZeRO


def test_zero_stages_shard_one_more_state_each():
    assert par.zero_sharded_states(0) == ()
    assert par.zero_sharded_states(1) == ("optimizer states",)
    assert set(par.zero_sharded_states(2)) == {"optimizer states", "gradients"}
    assert set(par.zero_sharded_states(3)) == set(par.TRAINING_STATES)


# -----------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("call, argument", [
    (lambda: par.shard_columns(np.ones((4, 6)), 4), "world_size must divide"),
    (lambda: par.shard_rows(np.ones((6, 4)), 4), "world_size must divide"),
    (lambda: par.shard_rows(np.ones((6, 4)), 0), "world_size"),
    (lambda: par.column_parallel_linear(np.ones(3), np.ones((3, 4)), np.ones(3), 2), "bias"),
    (lambda: par.column_parallel_linear(np.ones(2), np.ones((3, 4)), np.ones(4), 2), "x"),
    (lambda: par.row_parallel_linear([np.ones(2)], [np.ones((2, 1)), np.ones((2, 1))], [0.0]),
     "x_shards"),
    (lambda: par.run_tensor_parallel(world_size=3, hidden=8, heads=4), "world_size must divide hidden"),
    (lambda: par.run_tensor_parallel(world_size=2, hidden=8, heads=3), "heads must divide hidden"),
    (lambda: par.run_tensor_parallel(world_size=4, hidden=8, heads=2), "world_size must divide heads"),
    (lambda: par.run_tensor_parallel(world_size=0), "world_size"),
    (lambda: par.attention_reference(np.ones((1, 2, 6)), par.init_attention_weights(6), 4), "heads"),
    (lambda: par.init_mlp_weights(8, seed=-1), "seed"),
    (lambda: par.tensor_parallel_allreduce_bytes(0, 1024, 3072), "batch"),
    (lambda: par.partition_layers(3, 4), "stages must be at most the number of layers"),
    (lambda: par.simulate_pipeline(4, 8, layers=3), "stages must be at most the number of layers"),
    (lambda: par.simulate_pipeline(0, 8), "stages"),
    (lambda: par.simulate_pipeline(4, 0), "micro_batches"),
    (lambda: par.simulate_pipeline(4, 2.5), "micro_batches"),
    (lambda: par.simulate_pipeline(4, 8, "zigzag"), "schedule"),
    (lambda: par.simulate_pipeline(4, 8, forward_time_s=0), "forward_time_s"),
    (lambda: par.simulate_pipeline(4, 8, backward_time_s=-1), "backward_time_s"),
    (lambda: par.gpipe_bubble_fraction(4, 0), "micro_batches"),
    (lambda: par.expert_capacity(64, 8, 1, 0), "capacity_factor must be > 0"),
    (lambda: par.expert_capacity(64, 8, 1, -0.5), "capacity_factor must be > 0"),
    (lambda: par.route_tokens(np.zeros((4, 2)), 1, 0.0), "capacity_factor must be > 0"),
    (lambda: par.route_tokens(np.zeros((4, 2)), 3), "k must be at most the number of experts"),
    (lambda: par.route_tokens(np.zeros((4, 2)), 0), "k"),
    (lambda: par.route_tokens(np.zeros(4), 1), "router_logits"),
    (lambda: par.route_tokens(np.array([[np.nan, 0.0]]), 1), "logits"),
    (lambda: par.route_tokens(np.zeros((4, 2)), 2, second_expert="gumbel"), "second_expert"),
    (lambda: par.route_tokens(np.zeros((4, 3)), 1, second_expert="random"), "second_expert"),
    (lambda: par.load_balancing_loss(np.array([[0.5, 0.6]])), "router_probs"),
    (lambda: par.load_balancing_loss(np.ones(3)), "router_probs"),
    (lambda: par.synthetic_router_logits(0, 4), "tokens"),
    (lambda: par.zero_sharded_states(4), "stage must be 0, 1, 2 or 3"),
    (lambda: par.plot_zero_stages(gpus=0), "gpus"),
    (lambda: par.plot_pipeline("not a run"), "run"),
    (lambda: par.plot_tokens_per_expert(None), "routing"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_plots_return_their_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logits = par.synthetic_router_logits(64, 8, 1.0)
    gpipe, one_f_one_b = (par.simulate_pipeline(4, 6, s) for s in par.SCHEDULES)
    for plot in (lambda ax: par.plot_pipeline(gpipe, ax=ax),
                 lambda ax: par.plot_bubble_fraction(stage_counts=(2, 4), max_micro_batches=16,
                                                     ax=ax),
                 lambda ax: par.plot_in_flight([gpipe, one_f_one_b], ax=ax),
                 lambda ax: par.plot_tokens_per_expert(par.route_tokens(logits, 2), ax=ax),
                 lambda ax: par.plot_capacity_sweep(logits, [0.5, 1.0, 2.0], ax=ax),
                 lambda ax: par.plot_zero_stages(gpus=2, ax=ax)):
        _, ax = plt.subplots()
        assert plot(ax) is ax
        plt.close("all")


def test_import_is_light():
    # Importing the module must not drag in matplotlib, Numba or torch.
    code = ("import sys, gpucourse.parallelism; "
            "print(sorted(m for m in ('matplotlib', 'numba', 'torch') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
