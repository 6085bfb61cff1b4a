"""Tests of gpucourse.memory: the published tables reproduced cell by cell,
formulas against hand-worked values, properties for any input, real sharded
training measured on 2 processes, and the errors bad input gets."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucourse import memory

GB = 1e9


# -----------------------------------------------------------------------------
# The published numbers


def test_zero_table1_has_all_54_printed_cells():
    cells = [(model, dp, stage) for (model, dp) in memory.ZERO_TABLE1 for stage in (1, 2, 3)]
    assert len(cells) == 54 == len(set(cells))
    assert {m for m, _, _ in cells} == set(memory.ZERO_TABLE1_PARAMS)
    assert {dp for _, dp, _ in cells} == set(memory.ZERO_TABLE1_DP)
    assert memory.ZERO_TABLE1_TRUNCATED <= set(cells)


@pytest.mark.parametrize("model, dp", list(memory.ZERO_TABLE1))
def test_zero_table1_every_cell_to_the_printed_precision(model, dp):
    # Each computed cell, written with the digits the paper prints, is the
    # printed string: rounded half up, except the cells the paper truncates.
    computed = memory.zero_table1_computed()[(model, dp)]
    for stage, value, printed in zip((1, 2, 3), computed, memory.ZERO_TABLE1[(model, dp)]):
        truncated = (model, dp, stage) in memory.ZERO_TABLE1_TRUNCATED
        assert memory.as_printed(value, printed, truncate=truncated) == printed, (model, dp, stage)
        # and the truncation note is honest: those cells do NOT round to what is printed
        assert (memory.as_printed(value, printed) == printed) is not truncated, (model, dp, stage)


def test_zero_table1_by_hand():
    # 7.5B, DP 4, stage 2: 2Ψ + 14Ψ/4 = 15 + 26.25 = 41.25 GB, printed 41.3.
    assert memory.model_states_per_gpu(7.5e9, 2, 4).total == 41.25e9
    # 1T, DP 64, stage 1: 4Ψ + 12Ψ/64 = 4000 + 187.5 GB; printed 4187 (truncated).
    assert memory.model_states_per_gpu(1e12, 1, 64).total == 4187.5e9
    assert ("1T", 64, 1) in memory.ZERO_TABLE1_TRUNCATED
    # 128B, DP 1024, stage 3: 16 x 128 / 1024 = 2 GB exactly.
    assert memory.model_states_per_gpu(128e9, 3, 1024).total == 2e9


def test_how_printed():
    assert memory.how_printed(41.25, "41.3") == "rounded"
    assert memory.how_printed(4187.5, "4187") == "truncated"
    assert memory.how_printed(1.875, "1.88") == "rounded"
    assert memory.how_printed(30.0, "30") == "rounded"
    assert memory.how_printed(31.0, "30") is None
    assert all(how for *_, how in memory.zero_table1_rows())


def test_zero_figure1():
    # Ψ = 7.5B, N_d = 64, K = 12: 120, 31.4, 16.6 and 1.9 GB.
    assert memory.ZERO_FIGURE1_GB == {0: "120", 1: "31.4", 2: "16.6", 3: "1.9"}
    for stage, printed in memory.ZERO_FIGURE1_GB.items():
        gb = memory.model_states_per_gpu(memory.ZERO_FIGURE1_PARAMS, stage, memory.ZERO_FIGURE1_DP).total / GB
        assert memory.how_printed(gb, printed) == "rounded", stage
    # by hand: 4 x 7.5 + 12 x 7.5 / 64 = 30 + 1.40625
    assert memory.model_states_per_gpu(7.5e9, 1, 64).total == pytest.approx(31.40625e9)


def test_playbook_table():
    assert set(memory.PLAYBOOK_MODEL_STATES_GB) == {1e9, 7e9, 70e9, 405e9}
    for n, (without, with_fp32_grads) in memory.PLAYBOOK_MODEL_STATES_GB.items():
        for precision in ("fp32", "mixed"):  # 4+4+8 and 2+2+12: both 16 bytes per parameter
            assert memory.how_printed(memory.model_states(n, 0, 1, precision).total / GB, without) == "rounded"
        assert memory.how_printed(memory.model_states(n, 0, 1, "mixed_fp32_grads").total / GB,
                                  with_fp32_grads) == "rounded"
    assert memory.model_states(405e9, 0, 1, "mixed_fp32_grads").total == 8100e9  # 20 x 405e9


# -----------------------------------------------------------------------------
# Formulas by hand


def test_model_states_by_hand():
    s = memory.model_states_per_gpu(1000, 0, 8)
    assert (s.params, s.grads, s.optimizer, s.total) == (2000, 2000, 12000, 16000)
    s = memory.model_states_per_gpu(1000, 1, 8)
    assert (s.params, s.grads, s.optimizer) == (2000, 2000, 1500)
    s = memory.model_states_per_gpu(1000, 2, 8)
    assert (s.params, s.grads, s.optimizer) == (2000, 250, 1500)
    s = memory.model_states_per_gpu(1000, 3, 8)
    assert (s.params, s.grads, s.optimizer) == (250, 250, 1500)
    # fp32 Adam, as measured below: 4 + 4 + 8 bytes.
    s = memory.model_states_per_gpu(1000, 3, 4, 8, param_bytes=4, grad_bytes=4)
    assert (s.params, s.grads, s.optimizer) == (1000, 1000, 2000)
    assert memory.model_states(1000, 0, 1, "fp32").total == 16000
    assert memory.model_states(1000, 2, 4, "mixed_fp32_grads").grads == 1500  # 6 bytes / 4


def test_fsdp_strategies():
    n = 8e9
    assert memory.fsdp_model_states_per_gpu(n, "FULL_SHARD", 16) == memory.model_states(n, 3, 16)
    assert memory.fsdp_model_states_per_gpu(n, "SHARD_GRAD_OP", 16) == memory.model_states(n, 2, 16)
    assert memory.fsdp_model_states_per_gpu(n, "NO_SHARD", 16) == memory.model_states(n, 0, 1)
    # HYBRID_SHARD over 64 GPUs in nodes of 8: sharded 8 ways, whatever the world size.
    hybrid = memory.fsdp_model_states_per_gpu(n, "HYBRID_SHARD", 64, shard_group_size=8)
    assert hybrid == memory.model_states(n, 3, 8)
    assert hybrid.total == 16 * 8e9 / 8


def test_gpt_params_by_hand():
    # h = 2, L = 1, v = 3: 6 + (48 + 26) + 4 = 84.
    assert memory.gpt_params(2, 1, 3) == 84
    # GPT-3 175B shapes (h 12288, L 96, v 50257): 174.58e9 without position embeddings.
    assert memory.gpt_params(12288, 96, 50257) == 12288 * 50257 + 96 * (12 * 12288**2 + 13 * 12288) + 2 * 12288
    assert memory.gpt_params(12288, 96, 50257) == pytest.approx(174.58e9, rel=1e-4)
    # The tiny measured model has exactly this many parameters.
    shapes = memory.tiny_param_shapes(memory.ODD)
    assert sum(math.prod(s) for s in shapes) == memory.gpt_params(48, 3, 517)


def test_activations_by_hand():
    s, b, h, a = 2048, 1, 12288, 96  # GPT-3: 5as/h = 5 x 96 x 2048 / 12288 = 80
    sbh = s * b * h
    assert memory.activation_bytes_per_layer(s, b, h, a) == sbh * (34 + 80)
    assert memory.activation_bytes_per_layer(s, b, h, a, tp=8) == sbh * (10 + 24 / 8 + 80 / 8)
    assert memory.activation_bytes_per_layer(s, b, h, a, tp=8, sequence_parallel=True) == sbh * (34 + 80) / 8
    assert memory.activation_bytes_per_layer(s, b, h, a, tp=8, recompute="selective") == sbh * 13
    assert memory.activation_bytes_per_layer(s, b, h, a, tp=8, sequence_parallel=True,
                                             recompute="selective") == sbh * 34 / 8
    assert memory.activation_bytes_per_layer(s, b, h, a, tp=8, recompute="full") == 2 * sbh
    assert memory.activation_bytes(s, b, h, a, 96) == 96 * sbh * 114
    # A tiny case by hand: s=4, b=2, h=8, a=2: 64 x (34 + 5) = 2496 bytes.
    assert memory.activation_bytes_per_layer(4, 2, 8, 2) == 2496


def test_planner_by_hand():
    # 70B on 80 GB: stage 3 needs 16 x 70 / 80 = 14 GPUs; ZeRO-1 and -2 keep
    # 4Ψ = 280 GB and 2Ψ = 140 GB on every GPU, which never fit.
    p = memory.plan(70e9, 80e9)
    assert p.min_dp == {0: None, 1: None, 2: None, 3: 14}
    assert p.fits
    # 7B: stage 1 needs 28 + 84/dp <= 80, so dp >= 1.6: 2.
    assert memory.plan(7e9, 80e9).min_dp == {0: None, 1: 2, 2: 2, 3: 2}
    assert memory.plan(405e9, 80e9).min_dp[3] == 81  # 6480 / 80 exactly
    assert memory.plan(1e9, 80e9).min_dp == {0: 1, 1: 1, 2: 1, 3: 1}
    # Nothing fits: with 60 GB of activations a GPU never holds 405B on 64 GPUs.
    p = memory.plan(405e9, 80e9, activation_bytes=60e9, max_dp=64)
    assert not p.fits and set(p.min_dp.values()) == {None}
    # Activations leave 20 GB: 6480 / 20 = 324 GPUs.
    assert memory.plan(405e9, 80e9, activation_bytes=60e9).min_dp[3] == 324


# -----------------------------------------------------------------------------
# Properties

params = st.floats(min_value=1, max_value=1e13)
dps = st.integers(min_value=1, max_value=100_000)
precisions = st.sampled_from(list(memory.PRECISIONS))


@given(n=params, dp=dps, precision=precisions)
def test_more_stages_never_use_more_memory(n, dp, precision):
    totals = [memory.model_states(n, s, dp, precision).total for s in memory.ZERO_STAGES]
    assert all(a >= b * (1 - 1e-12) for a, b in zip(totals, totals[1:]))


@given(n=params, dp=dps, k=st.floats(min_value=0, max_value=32))
def test_stage3_total_is_everything_over_dp(n, dp, k):
    assert memory.model_states_per_gpu(n, 3, dp, k).total == pytest.approx(n * (2 + 2 + k) / dp)
    assert memory.model_states_per_gpu(n, 0, dp, k).total == pytest.approx(n * (2 + 2 + k))


@given(n=st.floats(min_value=1e6, max_value=1e13), memory_gb=st.floats(min_value=1, max_value=200))
def test_planner_answer_is_the_smallest(n, memory_gb):
    p = memory.plan(n, memory_gb * GB)
    for stage, dp in p.min_dp.items():
        if dp is None:
            continue
        assert p.per_gpu_bytes(stage, dp) <= memory_gb * GB
        if dp > 1:
            assert p.per_gpu_bytes(stage, dp - 1) > memory_gb * GB


@given(rows=st.integers(1, 10_000), world_size=st.integers(1, 64))
def test_fsdp2_shards_cover_every_row_once(rows, world_size):
    shards = [memory.fsdp2_shard_rows(rows, world_size, r) for r in range(world_size)]
    assert sum(shards) == rows
    assert max(shards) == -(-rows // world_size)  # the padded chunk every rank allocates
    assert shards == sorted(shards, reverse=True)


@given(numels=st.lists(st.integers(1, 10_000), min_size=1, max_size=40), world_size=st.integers(1, 8))
def test_zero1_partition_gives_each_tensor_to_one_rank(numels, world_size):
    owned = memory.zero1_partition(numels, world_size)
    assert sorted(i for rank in owned for i in rank) == list(range(len(numels)))
    # Greedy by size: no rank exceeds the ideal share by more than the largest tensor.
    loads = [sum(numels[i] for i in rank) for rank in owned]
    assert max(loads) <= sum(numels) / world_size + max(numels)


def test_layout_predictions_by_hand():
    # 517 rows over 2 ranks: 259 and 258; over 4: 130, 130, 130, 127.
    assert [memory.fsdp2_shard_rows(517, 2, r) for r in range(2)] == [259, 258]
    assert [memory.fsdp2_shard_rows(517, 4, r) for r in range(4)] == [130, 130, 130, 127]
    assert [memory.fsdp2_shard_rows(5, 4, r) for r in range(4)] == [2, 2, 1, 0]
    assert memory.fsdp2_local_numel((517, 48), 4, 3) == 127 * 48
    assert memory.fsdp2_local_numel((517, 48), 4, 3, padded=True) == 130 * 48
    # Sizes 10, 6, 5, 4 over 2 ranks: 10 -> r0, 6 -> r1, 5 -> r1 (6 < 10), 4 -> r0 (10 < 11).
    assert memory.zero1_partition([5, 10, 4, 6], 2) == [[1, 2], [3, 0]]


# -----------------------------------------------------------------------------
# Measured against predicted, on 2 real processes (one launch for everything)


@pytest.fixture(scope="module")
def measured():
    return memory.measure(world_sizes=(2,), timeout_s=150)


def test_measured_shapes_are_the_predicted_shapes(measured):
    for r in measured:
        assert r["shapes"] == memory.tiny_param_shapes(memory.CONFIGS[r["model"]])
    assert {(r["model"], r["wrapper"], r["rank"]) for r in measured} == {
        (m, w, rank) for m in memory.CONFIGS for w in memory.WRAPPERS for rank in (0, 1)}


def test_even_sizes_match_the_formula_exactly(measured):
    rows = [r for r in memory.compare(measured) if r["model"] == "even"]
    assert len(rows) == 6
    for r in rows:
        assert r["measured"] == r["formula"] == r["layout"], r


def test_uneven_sizes_match_the_layout_exactly(measured):
    rows = [r for r in memory.compare(measured) if r["model"] == "odd"]
    for r in rows:
        assert r["measured"] == r["layout"], r
    # FSDP2 splits the 517-row embedding 259/258: rank 0 holds more than half,
    # rank 1 less, and together exactly the whole model.
    fsdp = {r["rank"]: r for r in rows if r["wrapper"] == "fsdp2"}
    assert fsdp[0]["measured"][0] > fsdp[0]["formula"][0] > fsdp[1]["measured"][0]
    n = memory.gpt_params(48, 3, 517)
    assert fsdp[0]["measured"][0] + fsdp[1]["measured"][0] == 4 * n


def test_fsdp2_allocates_the_padded_shard(measured):
    for r in measured:
        if r["wrapper"] != "fsdp2":
            continue
        shapes = memory.tiny_param_shapes(memory.CONFIGS[r["model"]])
        padded = sum(memory.fsdp2_local_numel(s, 2, r["rank"], padded=True) for s in shapes)
        assert r["params_allocated_bytes"] == 4 * padded


def test_rank_states_of_a_measurement(measured):
    rows = memory.rank_states(measured)
    assert [r["measured"] for r in rows] == [r["measured"] for r in memory.compare(measured)]
    for row, record in zip(rows, measured):
        assert row["shapes"] == memory.tiny_param_shapes(memory.CONFIGS[row["model"]])
        assert all(type(x) is int for x in row["measured"])
        assert row["params_allocated_bytes"] == record["params_allocated_bytes"]


@pytest.mark.parametrize("gpu_count", [2, 4])
def test_rank_states_of_a_gpu_run(gpu_count):
    """The GPU files give the same rows, with each model's shapes from the file's configs;
    what each rank held is what the layout predicts from those shapes."""
    record = memory.gpu_runs()[gpu_count]
    rows = memory.rank_states(record)
    assert len(rows) == len(record["results"]) == 9 * gpu_count
    assert [r["measured"] for r in rows] == [r["measured"] for r in memory.gpu_compare(record)]
    for row in rows:
        config = memory.TinyConfig(**record["configs"][row["model"]])
        assert row["shapes"] == memory.tiny_param_shapes(config)
        assert row["measured"] == memory.predict(config, row["wrapper"], gpu_count,
                                                 row["rank"])["layout"]


def test_warm_up_training_counts_one_process():
    one = memory.warm_up_training()
    n = memory.gpt_params(48, 3, 517)
    assert one["shapes"] == memory.tiny_param_shapes(memory.ODD)
    assert one["measured"] == (4 * n, 4 * n, 8 * n)  # fp32 Adam, nothing sharded
    one["shapes"].clear()  # the caller's copy: the next call is whole again
    assert memory.warm_up_training()["shapes"] == memory.tiny_param_shapes(memory.ODD)


# -----------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("call, match", [
    (lambda: memory.model_states_per_gpu(1e9, 4, 8), r"zero_stage must be one of 0, 1, 2, 3, got 4"),
    (lambda: memory.model_states_per_gpu(1e9, -1, 8), r"zero_stage must be one of 0, 1, 2, 3"),
    (lambda: memory.model_states_per_gpu(1e9, True, 8), r"zero_stage must be one of"),
    (lambda: memory.model_states_per_gpu(1e9, 1.5, 8), r"zero_stage must be one of"),
    (lambda: memory.model_states_per_gpu(1e9, 1, 0), r"dp must be a whole number >= 1, got 0"),
    (lambda: memory.model_states_per_gpu(1e9, 1, 2.5), r"dp must be a whole number >= 1"),
    (lambda: memory.model_states_per_gpu(0, 1, 8), r"n_params must be > 0"),
    (lambda: memory.model_states_per_gpu(-7e9, 1, 8), r"n_params must be > 0"),
    (lambda: memory.model_states_per_gpu(float("nan"), 1, 8), r"n_params must be finite"),
    (lambda: memory.model_states_per_gpu("7B", 1, 8), r"n_params must be a number"),
    (lambda: memory.model_states_per_gpu(1e9, 1, 8, -1), r"optimizer_multiplier must be >= 0"),
    (lambda: memory.model_states(1e9, 1, 8, "fp8"), r"precision must be one of mixed, fp32"),
    (lambda: memory.fsdp_model_states_per_gpu(1e9, "ZERO3", 8), r"strategy must be one of FULL_SHARD"),
    (lambda: memory.fsdp_model_states_per_gpu(1e9, "HYBRID_SHARD", 12, 8),
     r"shard_group_size must divide world_size \(12\)"),
    (lambda: memory.fsdp_model_states_per_gpu(1e9, "HYBRID_SHARD", 16), r"shard_group_size must be given"),
    (lambda: memory.fsdp_model_states_per_gpu(1e9, "FULL_SHARD", 16, 8), r"shard_group_size applies only"),
    (lambda: memory.activation_bytes_per_layer(2048, 1, 4096, 16, tp=3), r"tp must divide heads \(16\), got tp=3"),
    (lambda: memory.activation_bytes_per_layer(2048, 1, 4096, 16, tp=0), r"tp must be a whole number >= 1"),
    (lambda: memory.activation_bytes_per_layer(2048, 1, 4096, 16, recompute="some"),
     r"recompute must be one of none, selective, full"),
    (lambda: memory.activation_bytes_per_layer(0, 1, 4096, 16), r"seq_len must be a whole number >= 1"),
    (lambda: memory.activation_bytes_per_layer(2048, 1, 4096, 16, sequence_parallel="yes"),
     r"sequence_parallel must be True or False"),
    (lambda: memory.gpt_params(0, 1, 3), r"hidden must be a whole number >= 1"),
    (lambda: memory.gpt_params(8, 1, -3), r"vocab must be a whole number >= 1"),
    (lambda: memory.plan(0, 80e9), r"n_params must be > 0"),
    (lambda: memory.plan(7e9, 0), r"gpu_memory_bytes must be > 0"),
    (lambda: memory.plan(7e9, 80e9, activation_bytes=-1), r"activation_bytes must be >= 0"),
    (lambda: memory.plan(7e9, 80e9, max_dp=0), r"max_dp must be a whole number >= 1"),
    (lambda: memory.fsdp2_shard_rows(10, 4, 4), r"rank must be a whole number in \[0, 3\]"),
    (lambda: memory.fsdp2_local_numel((), 4, 0), r"shape must be a non-empty tuple"),
    (lambda: memory.zero1_partition([3, 0], 2), r"numels must be a whole number >= 1"),
    (lambda: memory.predict(memory.EVEN, "deepspeed", 2, 0), r"wrapper must be one of ddp, zero1, fsdp2"),
    (lambda: memory.measure(configs=("huge",)), r"configs must be drawn from even, odd"),
    (lambda: memory.measure(start="thread"), r"start must be one of spawn, fork"),
    (lambda: memory.rank_states([]), r"records must be the non-empty list of records measure"),
    (lambda: memory.rank_states([{"model": "even"}]), r"records must be the non-empty list"),
    (lambda: memory.as_printed(1.0, "about 1"), r"printed must be a number written as a string"),
    (lambda: memory.memory_breakdown("GPT-5"), r"model must be one of GPT-3 1.3B"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_importing_memory_imports_neither_torch_nor_numba():
    import subprocess
    import sys

    code = ("import sys, gpucourse.memory; "
            "print(any(m.split('.')[0] in ('torch', 'numba', 'matplotlib') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -----------------------------------------------------------------------------
# The GPU measurement (benchmarks/memory_gpu.py's results file)

N_EVEN = 4 * (12 * 64 ** 2 + 13 * 64)  # 4 layers of 12h² + 13h, h = 64: 199,936 parameters

# Allocator readings by hand, in units of 10 kB: (phase, step, allocated, peak).
HAND_PHASES = [("setup", -1, 100, 150), ("forward", 0, 600, 700), ("backward", 0, 300, 900),
               ("optimizer", 0, 500, 550), ("forward", 1, 800, 850), ("backward", 1, 500, 1000),
               ("optimizer", 1, 500, 520)]


def _hand_split(world_size):
    """The even split of the even model's fp32 Adam bytes over `world_size`
    ranks, by hand: DDP 4+4+8 bytes per parameter, ZeRO-1 Adam divided,
    FSDP2 all three divided (199,936 divides by 2 and 4)."""
    n, d = N_EVEN, world_size
    return {"ddp": (4 * n, 4 * n, 8 * n), "zero1": (4 * n, 4 * n, 8 * n // d),
            "fsdp2": (4 * n // d, 4 * n // d, 8 * n // d)}


def _hand_record(world_size=2, date="2026-01-01"):
    """A memory results record built by hand for the even model on
    `world_size` ranks: every row equals the even split, except FSDP2 rank 1,
    whose parameters are 4 bytes off. Every rank reads the same phases."""
    import dataclasses

    rows = []
    for wrapper, (p, g, o) in _hand_split(world_size).items():
        for rank in range(world_size):
            rows.append(dict(
                model="even", wrapper=wrapper, world_size=world_size, rank=rank,
                measured_bytes=dict(params=p + 4 * (wrapper == "fsdp2" and rank == 1),
                                    grads=g, optimizer=o),
                phases=[dict(phase=ph, step=s, allocated_bytes=a * 10_000, peak_bytes=k * 10_000)
                        for ph, s, a, k in HAND_PHASES]))
    return dict(benchmark="memory", gpu="Test GPU", gpu_count=world_size, date=date,
                backend="nccl", versions={}, configs={"even": dataclasses.asdict(memory.EVEN)},
                results=rows)


def test_gpu_compare_on_a_hand_made_record():
    rows = memory.gpu_compare(_hand_record())
    assert len(rows) == 6
    n = N_EVEN
    for r in rows:
        expected = {"ddp": (4 * n, 4 * n, 8 * n), "zero1": (4 * n, 4 * n, 4 * n),
                    "fsdp2": (2 * n, 2 * n, 4 * n)}[r["wrapper"]]
        assert tuple(r["formula"]) == tuple(r["layout"]) == expected  # even sizes: both agree
    off = [r for r in rows if r["measured"] != r["layout"]]
    assert [(r["wrapper"], r["rank"]) for r in off] == [("fsdp2", 1)]
    assert off[0]["measured"][0] == 2 * n + 4
    table = memory.compare_table(rows)
    assert table.count("| exact |") == 5 and table.count("**differs**") == 1
    assert "| even | ddp | 2 | 0 | 799.7 / 799.7 / 1,599.5 | 799.7 / 799.7 / 1,599.5 | exact |" in table


def test_gpu_phases_and_peaks_on_a_hand_made_record():
    record = _hand_record()
    phases = memory.gpu_phases(record, "even", rank=1)
    assert list(phases) == ["ddp", "zero1", "fsdp2"]
    assert [label for label, _, _ in phases["ddp"]] == [
        "setup", "forward 1", "backward 1", "optimizer 1", "forward 2", "backward 2", "optimizer 2"]
    assert phases["zero1"][2] == ("backward 1", 3_000_000, 9_000_000)
    peaks = {p["wrapper"]: p for p in memory.gpu_peaks(record, "even", rank=0)}
    n = N_EVEN
    ddp = peaks["ddp"]
    assert ddp["peak_bytes"] == 10_000_000 and ddp["peak_phase"] == "backward 2"
    assert ddp["model_states_bytes"] == ddp["measured_states_bytes"] == 16 * n
    assert ddp["states_share"] == pytest.approx(16 * n / 10_000_000)
    assert ddp["setup_bytes"] == 1_000_000
    assert ddp["forward_bytes"] == 6_000_000 - 1_000_000
    assert ddp["first_optimizer_bytes"] == 5_000_000 - 3_000_000
    assert ddp["final_extra_bytes"] == 5_000_000 - 16 * n
    assert peaks["fsdp2"]["model_states_bytes"] == 8 * n
    # rank 1's FSDP2 row counts its 4 extra bytes as measured, not as predicted
    fsdp_r1 = {p["wrapper"]: p for p in memory.gpu_peaks(record, "even", rank=1)}["fsdp2"]
    assert fsdp_r1["measured_states_bytes"] == 8 * n + 4 and fsdp_r1["model_states_bytes"] == 8 * n
    table = memory.gpu_peak_table(record, "even", 0)
    assert f"| DDP | {16 * n / 1e9:.3f} | 0.010 | {100 * 16 * n / 1e7:.0f}% | backward 2 |" in table


def test_gpu_runs_finds_the_committed_2_and_4_gpu_runs():
    from gpucourse import results

    runs = memory.gpu_runs()
    assert list(runs) == [2, 4]
    names = {p.name for p in results.find_results("memory")}
    assert {"memory-h200x2-2026-11-22.json", "memory-h200x4-2026-11-22.json"} <= names
    for count, record in runs.items():
        assert record["gpu_count"] == count
        assert {r["world_size"] for r in record["results"]} == {count}


@pytest.mark.parametrize("gpu_count", [2, 4])
def test_the_committed_gpu_files_match_the_predictions(gpu_count):
    record = memory.gpu_runs()[gpu_count]
    rows = memory.gpu_compare(record)
    raw = record["results"]
    assert len(rows) == len(raw) > 0
    # The counts straight from the file's own bytes and flags ...
    layout_in_file = sum(r["measured_bytes"] == r["layout_bytes"] for r in raw)
    formula_in_file = sum(r["measured_bytes"] == r["formula_bytes"] for r in raw)
    assert layout_in_file == sum(r["matches_layout"] for r in raw)
    assert formula_in_file == sum(r["matches_formula"] for r in raw)
    # ... equal what today's predict() gives: every row matches the layout,
    # and only rows of the odd model (uneven tensors) miss the even split.
    assert sum(r["measured"] == r["layout"] for r in rows) == layout_in_file == len(rows)
    assert sum(r["measured"] == r["formula"] for r in rows) == formula_in_file
    assert {(r["model"], r["wrapper"]) for r in rows if r["measured"] != r["formula"]} \
        <= {("odd", "fsdp2"), ("odd", "zero1")}
    # The parameters the file counted are the ones the config describes.
    for r in raw:
        shapes = memory.tiny_param_shapes(memory.TinyConfig(**record["configs"][r["model"]]))
        assert r["n_params"] == sum(math.prod(s) for s in shapes)


def test_the_4_gpu_counts_from_the_raw_json():
    """The x4 file read with json alone, against the summary line the
    benchmark printed ("36 of 36 rows match the tensor-by-tensor layout, 28
    also the even-split formula") and against gpu_compare."""
    import json

    from gpucourse import results

    raw = json.loads((results.results_dir() / "memory-h200x4-2026-11-22.json").read_text())
    rows = raw["results"]
    as_ints = [{k: int(v) for k, v in r["formula_bytes"].items()} for r in rows]
    layout_n = sum(r["measured_bytes"] == r["layout_bytes"] for r in rows)
    formula_n = sum(r["measured_bytes"] == f for r, f in zip(rows, as_ints))
    assert (len(rows), layout_n, formula_n) == (36, 36, 28)
    compared = memory.gpu_compare(memory.gpu_runs()[4])
    assert sum(r["measured"] == r["layout"] for r in compared) == layout_n
    assert sum(r["measured"] == r["formula"] for r in compared) == formula_n
    # The 8 misses: the odd model under ZeRO-1 and FSDP2, all 4 ranks each.
    missed = sorted((r["model"], r["wrapper"], r["rank"]) for r in compared
                    if r["measured"] != r["formula"])
    assert missed == sorted((m, w, k) for m, w in (("odd", "zero1"), ("odd", "fsdp2"))
                            for k in range(4))
    # Still whole: per ZeRO-1 row, Adam's bytes over the 4 ranks add up to
    # the full 8 bytes per parameter, and per FSDP2 row the shards to the full
    # 4 bytes of parameters (the uneven split moves bytes between ranks).
    odd_n = next(r["n_params"] for r in rows if r["model"] == "odd")
    for wrapper, part, per_param in (("zero1", "optimizer", 8), ("fsdp2", "params", 4)):
        assert sum(r["measured_bytes"][part] for r in rows
                   if (r["model"], r["wrapper"]) == ("odd", wrapper)) == per_param * odd_n


@pytest.mark.parametrize("gpu_count", [2, 4])
def test_the_committed_gpu_file_peaks(gpu_count):
    record = memory.gpu_runs()[gpu_count]
    for rank in range(gpu_count):
        for p in memory.gpu_peaks(record, "even_large", rank):
            row = next(r for r in record["results"] if r["model"] == "even_large"
                       and r["wrapper"] == p["wrapper"] and r["rank"] == rank)
            # the peak over the phases is the run's own max_memory_allocated
            assert p["peak_bytes"] == row["max_memory_allocated_bytes"]
            assert p["final_extra_bytes"] == row["final_minus_model_states_bytes"]
            assert p["model_states_bytes"] == p["measured_states_bytes"]  # even sizes: exact
            assert 0 < p["states_share"] < 1


def test_the_committed_scaling_follows_the_zero_stages():
    # From 2 to 4 GPUs, per rank of the even_large model (n parameters, fp32
    # Adam): DDP keeps 16n bytes, ZeRO-1 goes from 8n + 8n/2 to 8n + 8n/4,
    # FSDP2 from 16n/2 to 16n/4, by hand.
    record = memory.gpu_runs()[2]
    n = sum(math.prod(s) for s in memory.tiny_param_shapes(
        memory.TinyConfig(**record["configs"]["even_large"])))
    expected = {("ddp", 2): 16 * n, ("ddp", 4): 16 * n, ("zero1", 2): 12 * n,
                ("zero1", 4): 10 * n, ("fsdp2", 2): 8 * n, ("fsdp2", 4): 4 * n}
    rows = memory.gpu_scaling(memory.gpu_runs(), "even_large", 0)
    assert {(r["wrapper"], r["world_size"]): sum(r["measured"]) for r in rows} == expected
    assert {(r["wrapper"], r["world_size"]): r["model_states_bytes"] for r in rows} == expected


def _write_runs(tmp_path, records):
    import json

    for name, record in records.items():
        (tmp_path / name).write_text(json.dumps(record))
    return tmp_path


def test_gpu_runs_keys_by_gpu_count_and_keeps_the_newest(tmp_path):
    smoke = {**_hand_record(2, "2026-01-05"), "backend": "gloo"}
    _write_runs(tmp_path, {
        "memory-testx2-2026-01-01.json": _hand_record(2, "2026-01-01"),
        "memory-testx4-2026-01-02.json": _hand_record(4, "2026-01-02"),
        "memory-testx2-2026-01-03.json": _hand_record(2, "2026-01-03"),
        "memory-testx2-2026-01-04-quick.json": _hand_record(2, "2026-01-04"),  # a --quick run
        "memory-cpu-smokex2-2026-01-05.json": smoke,  # a CPU smoke test
        "sgemm-test-2026-01-06.json": dict(benchmark="sgemm", gpu="x", date="2026-01-06",
                                           versions={}, results=[]),
    })
    runs = memory.gpu_runs(tmp_path)
    assert list(runs) == [2, 4]
    assert runs[2]["date"] == "2026-01-03" and runs[4]["date"] == "2026-01-02"


def test_gpu_scaling_on_hand_made_runs():
    runs = {2: _hand_record(2), 4: _hand_record(4)}
    rows = memory.gpu_scaling(runs, "even", rank=0)
    assert [(r["wrapper"], r["world_size"]) for r in rows] == [
        (w, d) for d in (2, 4) for w in ("ddp", "zero1", "fsdp2")]
    peak = 10_000_000  # the largest peak of HAND_PHASES
    for r in rows:
        split = _hand_split(r["world_size"])[r["wrapper"]]
        assert r["predicted"] == r["measured"] == split
        assert r["model_states_bytes"] == sum(split)
        assert r["peak_bytes"] == peak and r["peak_phase"] == "backward 2"
        assert r["rest_bytes"] == peak - sum(split)
        assert r["states_share"] == pytest.approx(sum(split) / peak)
        assert r["forward_bytes"] == 6_000_000 - 1_000_000
    # rank 1's FSDP2 rows measure 4 bytes more than predicted
    fsdp_r1 = [r for r in memory.gpu_scaling(runs, "even", rank=1) if r["wrapper"] == "fsdp2"]
    assert all(r["measured"][0] == r["predicted"][0] + 4 for r in fsdp_r1)
    assert all(r["rest_bytes"] == peak - sum(r["predicted"]) - 4 for r in fsdp_r1)
    table = memory.gpu_scaling_table(runs, "even", 0)
    n = N_EVEN
    assert table.count("\n") == 2 + 6 - 1
    assert (f"| FSDP2 | 4 | {n / 1e9:.3f} + {n / 1e9:.3f} + {2 * n / 1e9:.3f} = {4 * n / 1e9:.3f} "
            f"| {4 * n / 1e9:.3f} | 0.010 | {100 * 4 * n / 1e7:.0f}% | {(1e7 - 4 * n) / 1e9:.3f} "
            "| 0.005 |") in table
    # rows sorted by wrapper, then GPUs
    lines = table.splitlines()[2:]
    assert [line.split(" | ")[0:2] for line in lines] == [
        [f"| {w}", str(d)] for w in ("DDP", "ZeRO-1", "FSDP2") for d in (2, 4)]


def test_gpu_rank_differences():
    assert memory.gpu_rank_differences(_hand_record(4), "even") == []
    record = _hand_record(4)
    row = next(r for r in record["results"] if (r["wrapper"], r["rank"]) == ("zero1", 3))
    row["phases"][4] = {**row["phases"][4], "allocated_bytes": row["phases"][4]["allocated_bytes"] + 512}
    assert memory.gpu_rank_differences(record, "even") == [
        dict(wrapper="zero1", rank=3, phase="forward 2", allocated_delta_bytes=512,
             peak_delta_bytes=0)]
    # the committed 2-GPU run: both ranks read the same, to the byte
    assert memory.gpu_rank_differences(memory.gpu_runs()[2]) == []


def test_plot_gpu_phases_draws_every_phase():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    record = _hand_record()
    _, ax = plt.subplots()
    assert memory.plot_gpu_phases(record, "even", ax=ax) is ax
    assert len(ax.patches) == 2 * 3 * len(HAND_PHASES)  # a peak and an allocated bar each
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert sorted(line.get_ydata()[0] for line in dashed) == pytest.approx(
        [8 * N_EVEN / 1e9, 12 * N_EVEN / 1e9, 16 * N_EVEN / 1e9])
    plt.close("all")


def test_plot_gpu_scaling_draws_every_run_and_wrapper():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {2: _hand_record(2), 4: _hand_record(4)}
    _, ax = plt.subplots()
    assert memory.plot_gpu_scaling(runs, "even", ax=ax) is ax
    assert len(ax.patches) == 6 * 4  # params, grads, Adam and the rest, per bar
    tops = sorted(p.get_y() + p.get_height() for p in ax.patches if p.get_facecolor()[:3]
                  == matplotlib.colors.to_rgb("0.8"))
    assert tops == pytest.approx([0.01] * 6)  # every bar reaches the 10 MB peak
    ticks = sorted(line.get_ydata()[0] for line in ax.get_lines())
    assert ticks == pytest.approx(sorted(sum(s) / 1e9 for d in (2, 4)
                                         for s in _hand_split(d).values()))
    shares = sorted(t.get_text() for t in ax.texts if t.get_text().endswith("%"))
    assert shares == sorted(f"{100 * sum(s) / 1e7:.0f}%" for d in (2, 4)
                            for s in _hand_split(d).values())
    plt.close("all")


def _without_readings():
    record = _hand_record()
    record["results"][0]["phases"][1]["peak_bytes"] = None  # as --cpu-smoke writes
    return record


@pytest.mark.parametrize("call, match", [
    (lambda: memory.gpu_compare({"benchmark": "sgemm", "results": []}),
     r"record must be a memory results file"),
    (lambda: memory.gpu_compare([1, 2]), r"record must be a memory results file"),
    (lambda: memory.gpu_compare({**_hand_record(), "configs": {}}),
     r"has no entry in its configs"),
    (lambda: memory.gpu_phases(_hand_record(), "huge"), r"model must be one of even, got 'huge'"),
    (lambda: memory.gpu_compare({**_hand_record(), "configs": {"even": {"width": 3}}}),
     r"record's configs\['even'\] must hold TinyConfig's fields"),
    (lambda: memory.gpu_peaks(_hand_record(), "even", rank=2), r"rank must be one of \[0, 1\], got 2"),
    (lambda: memory.gpu_peaks(_hand_record(), "even", rank=True), r"rank must be one of"),
    (lambda: memory.plot_gpu_phases(_without_readings(), "even"),
     r"record must hold CUDA allocator readings"),
    (lambda: memory.compare_table([]), r"rows must be a non-empty list"),
    (lambda: memory.gpu_scaling({}), r"runs must be a non-empty dict \{gpu_count: record\}"),
    (lambda: memory.gpu_scaling([_hand_record(2)]), r"runs must be a non-empty dict"),
    (lambda: memory.gpu_scaling({4: _hand_record(2)}, "even"),
     r"key 4 holds a run on 2 GPUs"),
    (lambda: memory.gpu_scaling({2: {"benchmark": "memory"}}), r"record must be a memory results"),
    (lambda: memory.gpu_scaling({2: _hand_record(2)}, "huge"), r"model must be one of even"),
    (lambda: memory.gpu_scaling({2: _hand_record(2), 4: _hand_record(4)}, "even", rank=3),
     r"rank must be one of \[0, 1\], got 3"),
    (lambda: memory.gpu_scaling_table({}), r"runs must be a non-empty dict"),
    (lambda: memory.plot_gpu_scaling({3: _hand_record(2)}, "even"), r"key 3 holds a run on 2"),
    (lambda: memory.gpu_rank_differences(_hand_record(2), "huge"), r"model must be one of even"),
    (lambda: memory.gpu_rank_differences(_without_readings(), "even"),
     r"record must hold CUDA allocator readings"),
    (lambda: memory.compare_table([{"model": "even"}]), r"rows must be compare\(\) rows with keys"),
])
def test_bad_gpu_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gpu_runs_bad_folders_are_named(tmp_path):
    with pytest.raises(ValueError, match=r"directory must be an existing folder of results files, got 3"):
        memory.gpu_runs(3)
    with pytest.raises(ValueError, match=r"directory must be an existing folder"):
        memory.gpu_runs(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"directory must hold memory-<gpu>x<N>-<date>.json"):
        memory.gpu_runs(tmp_path)  # empty
    _write_runs(tmp_path, {"memory-cpu-smokex2-2026-01-05.json":
                           {**_hand_record(2), "backend": "gloo"}})
    with pytest.raises(ValueError, match=r"results of a GPU run \(backend nccl\), found none"):
        memory.gpu_runs(tmp_path)  # only a smoke test
    _write_runs(tmp_path, {"memory-testx4-2026-01-01.json": {**_hand_record(2), "gpu_count": 4}})
    with pytest.raises(ValueError, match=r"records gpu_count 4 but rows with world_size \[2\]"):
        memory.gpu_runs(tmp_path)
    _write_runs(tmp_path, {"memory-testx4-2026-01-01.json": {**_hand_record(2), "gpu_count": "2"}})
    with pytest.raises(ValueError, match=r"must record gpu_count as a whole number >= 1, got '2'"):
        memory.gpu_runs(tmp_path)
