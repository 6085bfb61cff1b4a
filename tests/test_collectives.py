"""Tests of gpucourse.collectives.

The collectives are checked against torch.distributed's own (dist.all_reduce,
dist.reduce_scatter_single / _tensor, dist.all_gather_into_tensor /
_single, dist.all_gather) on random float64 data, on 2 and 4 gloo
processes. Spawning costs seconds, so one launch per world size runs every
check inside the workers (`checks_on_every_rank`) and the tests below read
its report. The cost model, the fit, the volumes and the CCR are checked
against values worked out by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucourse import collectives as C
from gpucourse.distributed import run_on_processes

# Lengths that are multiples of 2 and 4, that are not, and that are smaller
# than the world size (some ranks then own an empty chunk).
LENGTHS = (1, 2, 3, 5, 7, 8, 12, 13, 64, 1001)


# -----------------------------------------------------------------------------
# Everything that needs processes: one worker, many checks


def _builtin(name_new, name_old):
    import torch.distributed as dist

    return getattr(dist, name_new, None) or getattr(dist, name_old)


def checks_on_every_rank(rank, world_size):
    """Run each collective against the built-in on this rank; return a report
    {check name: (passed, detail)}. Ranks draw different random data."""
    import torch
    import torch.distributed as dist

    report = {}

    def record(name, ours, reference):
        same = ours.shape == reference.shape and torch.allclose(ours, reference, rtol=1e-12,
                                                                atol=1e-12)
        report[name] = (bool(same), f"ours {ours.flatten()[:4].tolist()} shape "
                        f"{tuple(ours.shape)}, built-in {reference.flatten()[:4].tolist()} "
                        f"shape {tuple(reference.shape)}")

    generator = torch.Generator().manual_seed(1234 + rank)

    def random(*shape):
        return torch.randn(*shape, dtype=torch.float64, generator=generator)

    for length in LENGTHS:
        x = random(length)
        reference = x.clone()
        dist.all_reduce(reference)
        ours = x.clone()
        returned = C.ring_all_reduce(ours)
        record(f"ring_all_reduce L={length}", ours, reference)
        report[f"ring_all_reduce returns its argument L={length}"] = (returned is ours, "")
        naive = x.clone()
        C.naive_all_reduce(naive, root=world_size - 1)
        record(f"naive_all_reduce L={length}", naive, reference)

        # Reduce-scatter: rank r gets block r of the sum, cut like array_split.
        start, stop = C.chunk_bounds(length, world_size)[rank]
        scattered = C.ring_reduce_scatter(x)
        record(f"ring_reduce_scatter L={length}", scattered, reference[start:stop])
        record(f"ring_reduce_scatter leaves its input L={length}", x, x.clone())
        # All-gather with total_rows undoes it: together they are an all-reduce.
        gathered = C.ring_all_gather(scattered, total_rows=length)
        record(f"reduce_scatter then all_gather L={length}", gathered, reference)

    # Even splits match the built-ins exactly, 2-d tensors included.
    reduce_scatter = _builtin("reduce_scatter_single", "reduce_scatter_tensor")
    all_gather_into = _builtin("all_gather_single", "all_gather_into_tensor")
    for rows in (world_size, 3 * world_size):
        x = random(rows, 5)
        out = torch.empty(rows // world_size, 5, dtype=torch.float64)
        reduce_scatter(out, x)
        record(f"ring_reduce_scatter vs built-in rows={rows}", C.ring_reduce_scatter(x), out)
        gathered = torch.empty(rows * world_size, 5, dtype=torch.float64)
        all_gather_into(gathered, x)
        record(f"ring_all_gather vs all_gather_into_tensor rows={rows}", C.ring_all_gather(x),
               gathered)
        pieces = [torch.empty_like(x) for _ in range(world_size)]
        dist.all_gather(pieces, x)
        record(f"ring_all_gather vs all_gather rows={rows}", C.ring_all_gather(x),
               torch.cat(pieces))

    # Any shape, a non-contiguous tensor, and an integer dtype.
    x = random(3, 4, 5)
    reference = x.clone()
    dist.all_reduce(reference)
    record("ring_all_reduce 3-d", C.ring_all_reduce(x.clone()), reference)
    y = random(6, 7).t()  # a transposed view: not contiguous
    reference = y.clone()
    dist.all_reduce(reference)
    C.ring_all_reduce(y)
    record("ring_all_reduce non-contiguous, in place", y, reference)
    z = torch.arange(10, dtype=torch.int64) * (rank + 1)
    reference = z.clone()
    dist.all_reduce(reference)
    record("ring_all_reduce int64", C.ring_all_reduce(z), reference)
    scalar = torch.tensor(float(rank), dtype=torch.float64)
    record("ring_all_reduce 0-d", C.ring_all_reduce(scalar),
           torch.tensor(float(sum(range(world_size))), dtype=torch.float64))

    # A subgroup: the even ranks only, addressed by their ranks in the group.
    evens = list(range(0, world_size, 2))
    group = dist.new_group(evens)
    if rank in evens:
        x = random(11)
        reference = x.clone()
        dist.all_reduce(reference, group=group)
        record("ring_all_reduce on a subgroup", C.ring_all_reduce(x.clone(), group=group),
               reference)

    # Bad input, on every rank alike (so nobody is left waiting).
    for name, call, match in [
        ("not a tensor", lambda: C.ring_all_reduce([1.0, 2.0]), "tensor must be a torch.Tensor"),
        ("bool tensor", lambda: C.ring_all_reduce(torch.ones(3, dtype=torch.bool)), "torch.bool"),
        ("0-d reduce-scatter", lambda: C.ring_reduce_scatter(torch.tensor(1.0)),
         "at least 1 dimension"),
        ("root out of range", lambda: C.naive_all_reduce(torch.ones(2), root=world_size),
         "root must be a rank of the group"),
        ("wrong block for total_rows", lambda: C.ring_all_gather(torch.ones(5), total_rows=5),
         "tensor must hold rank"),
        ("timing sizes", lambda: C.time_collectives(rank, world_size, sizes_bytes=(6,)),
         "sizes_bytes must be multiples of 4"),
        ("timing algorithm", lambda: C.time_collectives(rank, world_size, algorithms=("tree",)),
         "algorithms must be some of"),
    ]:
        try:
            call()
            report[f"ValueError: {name}"] = (False, "no error raised")
        except ValueError as error:
            report[f"ValueError: {name}"] = (match in str(error), str(error))

    # The chapter's own comparison reports exact agreement.
    rows = C.compare_with_builtin(rank, world_size, lengths=(3, 10))
    report["compare_with_builtin"] = (
        len(rows) == 4 and all(r["max_abs_diff"] < 1e-12 for r in rows), str(rows))

    # The timing worker runs and reports one row per algorithm and size.
    rows = C.time_collectives(rank, world_size, sizes_bytes=(8, 4096), repeats=2, warmup=1)
    report["time_collectives rows"] = (
        [(r["algorithm"], r["bytes"]) for r in rows]
        == [(a, s) for a in C.TIMED for s in (8, 4096)]
        and all(r["seconds"] > 0 and r["world_size"] == world_size for r in rows), str(rows))
    return report


@pytest.fixture(scope="module", params=[2, 4], ids=["2 processes", "4 processes"])
def report(request):
    world_size = request.param
    reports = run_on_processes(checks_on_every_rank, world_size, timeout_s=120)
    return world_size, reports


def _failures(report, prefix):
    world_size, reports = report
    chosen = {name for name in reports[0] if name.startswith(prefix)}
    assert chosen, f"no check starts with {prefix!r}"
    return [f"rank {rank}: {name}: {reports[rank][name][1]}"
            for rank in range(world_size) for name in sorted(chosen)
            if name in reports[rank] and not reports[rank][name][0]]


@pytest.mark.parametrize("prefix", [
    "ring_all_reduce", "naive_all_reduce", "ring_reduce_scatter", "reduce_scatter then",
    "ring_all_gather", "ValueError", "time_collectives", "compare_with_builtin",
])
def test_collectives_equal_the_builtins(report, prefix):
    failures = _failures(report, prefix)
    assert not failures, "\n".join(failures)


def test_every_length_was_checked(report):
    world_size, reports = report
    for length in LENGTHS:
        assert f"ring_all_reduce L={length}" in reports[0]
    assert any(length < world_size for length in LENGTHS)
    assert any(length % world_size for length in LENGTHS)


def test_collectives_need_a_process_group():
    import torch

    with pytest.raises(RuntimeError, match="initialised process group"):
        C.ring_all_reduce(torch.ones(4))


# -----------------------------------------------------------------------------
# Chunks and the NumPy simulation


def test_chunk_bounds_by_hand():
    assert C.chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert C.chunk_bounds(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert C.chunk_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert C.chunk_bounds(0, 3) == [(0, 0)] * 3


@given(length=st.integers(0, 500), n=st.integers(1, 16))
def test_chunk_bounds_match_array_split(length, n):
    sizes = [b - a for a, b in C.chunk_bounds(length, n)]
    assert sizes == [len(part) for part in np.array_split(np.arange(length), n)]


@given(n=st.integers(1, 7), length=st.integers(1, 30), seed=st.integers(0, 1000))
def test_simulated_ring_sums_every_array(n, length, seed):
    arrays = list(np.random.default_rng(seed).normal(size=(n, length)))
    results, history = C.simulate_ring_all_reduce(arrays, record=True)
    expected = np.sum(arrays, axis=0)
    for result in results:
        np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)
    assert len(history) == 2 * (n - 1) + 1
    # After the reduce-scatter, rank r holds all N contributions to chunk r.
    _, _, after_reduce_scatter = history[n - 1]
    assert all(after_reduce_scatter[r][r] == set(range(n)) for r in range(n))
    _, _, final = history[-1]
    assert all(cell == set(range(n)) for row in final for cell in row)


def test_simulated_ring_first_step_by_hand():
    # N = 3, step 1 of the reduce-scatter: rank r sends chunk (r - 1) mod 3 to
    # rank r + 1, so rank 1 adds rank 0's chunk 2, rank 2 adds rank 1's chunk 0,
    # rank 0 adds rank 2's chunk 1.
    _, history = C.simulate_ring_all_reduce([np.zeros(3)] * 3, record=True)
    phase, step, cells = history[1]
    assert (phase, step) == ("reduce-scatter", 1)
    assert cells[1][2] == {0, 1} and cells[2][0] == {1, 2} and cells[0][1] == {0, 2}
    assert cells[0][0] == {0}


# -----------------------------------------------------------------------------
# The alpha-beta model and its fit


def test_alpha_beta_by_hand():
    # Ring, N = 4, 1 MB, alpha = 10 us, beta = 10 GB/s:
    # 2 * 3 * 10e-6 + 2 * 3 / 4 * 1e6 / 10e9 = 60e-6 + 150e-6 = 210 us.
    assert C.alpha_beta_time_s(1e6, 4, 10e-6, 10e9) == pytest.approx(210e-6)
    # Naive, same numbers: 2 * 3 * (10e-6 + 1e6 / 10e9) = 6 * 110e-6 = 660 us.
    assert C.alpha_beta_time_s(1e6, 4, 10e-6, 10e9, "naive_all_reduce") == pytest.approx(660e-6)
    # Reduce-scatter alone: 3 * 10e-6 + 3 / 4 * 100e-6 = 105 us.
    assert C.alpha_beta_time_s(1e6, 4, 10e-6, 10e9, "ring_reduce_scatter") == pytest.approx(105e-6)
    assert C.alpha_beta_time_s(1e6, 1, 10e-6, 10e9) == 0  # alone, nothing to send
    np.testing.assert_allclose(C.alpha_beta_time_s(np.array([0, 4e6]), 2, 1e-6, 1e9),
                               [2e-6, 2e-6 + 4e-3])


@given(n=st.integers(2, 1024))
def test_ring_bytes_term_is_bandwidth_optimal(n):
    # Each rank must send at least (N-1)/N of the data and receive as much
    # (Patarasuk and Yuan, 2009): the ring's 2(N-1)/N is that bound, below 2;
    # the naive root carries N - 1 times more.
    latency, fraction = C.alpha_beta_terms("ring_all_reduce", n)
    assert latency == 2 * (n - 1)
    assert fraction == pytest.approx(2 * (n - 1) / n) and fraction < 2
    assert C.alpha_beta_terms("naive_all_reduce", n)[1] == pytest.approx(fraction * n)


def test_fit_recovers_known_latency_and_bandwidth():
    sizes = np.array([8 * 4 ** k for k in range(12)], dtype=float)
    alpha, beta = 30e-6, 2.5e9
    for n in (2, 4):
        exact = C.alpha_beta_time_s(sizes, n, alpha, beta)
        fit = C.fit_alpha_beta(sizes, exact, n)
        assert fit.latency_s == pytest.approx(alpha, rel=1e-9)
        assert fit.bandwidth_bytes_per_s == pytest.approx(beta, rel=1e-9)
        assert fit.rms_relative_error < 1e-9
    # Both world sizes at once, with 5% multiplicative noise.
    rng = np.random.default_rng(0)
    all_sizes = np.concatenate([sizes, sizes])
    world_sizes = np.repeat([2, 4], sizes.size)
    exact = np.concatenate([C.alpha_beta_time_s(sizes, n, alpha, beta) for n in (2, 4)])
    noisy = exact * rng.lognormal(0, 0.05, exact.size)
    fit = C.fit_alpha_beta(all_sizes, noisy, world_sizes)
    assert fit.latency_s == pytest.approx(alpha, rel=0.1)
    assert fit.bandwidth_bytes_per_s == pytest.approx(beta, rel=0.1)
    assert fit.points == 24
    np.testing.assert_allclose(fit.time_s(sizes, 4), exact[12:], rtol=0.15)


def test_fit_of_the_naive_model():
    sizes = np.array([1e2, 1e4, 1e6, 1e8])
    times = C.alpha_beta_time_s(sizes, 3, 5e-6, 1e9, "naive_all_reduce")
    fit = C.fit_alpha_beta(sizes, times, 3, algorithm="naive_all_reduce")
    assert fit.latency_s == pytest.approx(5e-6) and fit.bandwidth_bytes_per_s == pytest.approx(1e9)


def test_fit_without_measurable_latency_keeps_it_at_zero():
    sizes = np.array([1e3, 1e4, 1e5])
    times = C.alpha_beta_time_s(sizes, 2, 0, 1e9) * np.array([0.8, 1.0, 1.0])  # small message too fast: alpha < 0 unclamped
    fit = C.fit_alpha_beta(sizes, times, 2)
    assert fit.latency_s == 0 and fit.bandwidth_bytes_per_s > 0


# -----------------------------------------------------------------------------
# Communication volume and CCR


def test_data_parallel_volume_by_hand():
    # 1e9 parameters in bf16 on 8 GPUs: 2 * 7/8 * 1e9 * 2 = 3.5e9 bytes.
    assert C.data_parallel_comm_bytes(1e9, 8) == pytest.approx(3.5e9)
    assert C.data_parallel_comm_bytes(1e9, 8, zero_stage=1) == pytest.approx(3.5e9)
    assert C.data_parallel_comm_bytes(1e9, 8, zero_stage=2) == pytest.approx(3.5e9)
    # ZeRO-3: 3 * 7/8 * 2e9 = 5.25e9, 1.5 times the above.
    assert C.data_parallel_comm_bytes(1e9, 8, zero_stage=3) == pytest.approx(5.25e9)
    assert C.data_parallel_comm_bytes(1e9, 1) == 0


def test_tensor_parallel_volume_by_hand():
    # b = 1, s = 2048, h = 4096, 2 layers, t = 4, 2 bytes:
    # 2 * 4 * 2 * 3/4 * 2048 * 4096 * 2 = 201,326,592 bytes.
    assert C.tensor_parallel_comm_bytes(1, 2048, 4096, 2, 4) == 201_326_592
    assert C.tensor_parallel_comm_bytes(8, 2048, 4096, 1, 1) == 0


def test_transformer_flops_by_hand():
    # b = 2, s = 1024, h = 1024: 24 * 2 * 1024 * 1024^2 * (1 + 1024 / 6144)
    # = 51,539,607,552 * 7/6 = 60,129,542,144 forward; three times with backward.
    assert C.transformer_layer_flops(2, 1024, 1024, backward=False) == pytest.approx(60_129_542_144)
    assert C.transformer_layer_flops(2, 1024, 1024) == pytest.approx(3 * 60_129_542_144)


def test_ccr_by_hand():
    # 1 GB over 100 GB/s = 10 ms; 1e12 FLOPs at 1e14 FLOP/s = 10 ms: CCR 1.
    assert C.ccr(1e9, 1e12, 100e9, 1e14) == pytest.approx(1.0)
    assert C.ccr(0, 1e12, 100e9, 1e14) == 0
    # Tensor parallel closed form: 8(t-1) e h / (72 h^2 (1 + s/6h)) * F / B.
    h, s, t, F, B = 4096, 2048, 8, 989.5e12, 450e9
    expected = 8 * (t - 1) * 2 * h / (72 * h * h * (1 + s / (6 * h))) * F / B
    assert C.tensor_parallel_ccr(h, s, t, B, F) == pytest.approx(expected)


def test_data_parallel_ccr_by_hand():
    # Per parameter: 2 * 7/8 * 2 bytes = 3.5 bytes sent, 6 * 8192 FLOPs done.
    # (3.5 / 50e9) / (49152 / 989.5e12) = 7e-11 / 4.96735e-11 = 1.40920.
    assert C.data_parallel_ccr(8192, 8, 50e9, 989.5e12) == pytest.approx(1.40920, rel=1e-5)
    assert C.data_parallel_ccr(8192, 8, 50e9, 989.5e12, zero_stage=3) == pytest.approx(
        1.5 * 1.40920, rel=1e-5)
    with pytest.raises(ValueError, match="tokens_per_gpu must be > 0"):
        C.data_parallel_ccr(0, 8, 50e9, 1e15)


def test_interconnect_table():
    assert C.pcie_x16_bytes_per_s(16) == pytest.approx(31.5077e9, rel=1e-5)
    assert C.pcie_x16_bytes_per_s(32) == pytest.approx(63.0154e9, rel=1e-5)
    assert C.INTERCONNECTS["NVLink 4 (H100)"].bandwidth_bytes_per_s == 450e9  # 900 / 2
    assert C.INTERCONNECTS["InfiniBand NDR"].bandwidth_bytes_per_s == 50e9
    assert C.INTERCONNECTS["100 GbE"].bandwidth_bytes_per_s == 12.5e9
    for link in C.INTERCONNECTS.values():
        assert link.source and link.note and link.kind in ("NVLink", "PCIe", "InfiniBand",
                                                           "Ethernet")
    # NVLink 4 is 9 times faster than 400GbE, so the same layer's CCR is 9 times lower.
    nvlink = C.INTERCONNECTS["NVLink 4 (H100)"].bandwidth_bytes_per_s
    ethernet = C.INTERCONNECTS["400 GbE"].bandwidth_bytes_per_s
    assert (C.tensor_parallel_ccr(8192, 2048, 8, ethernet, 1e15)
            / C.tensor_parallel_ccr(8192, 2048, 8, nvlink, 1e15)) == pytest.approx(9)


def test_frameworks_table():
    names = [f.name for f in C.FRAMEWORKS]
    assert any("DeepSpeed" in n for n in names) and any("FSDP" in n for n in names)
    assert any("Megatron" in n for n in names)
    for f in C.FRAMEWORKS:
        assert f.strategies and f.reported and f.source and f.use_when
        year, month = f.reported_date.split("-")
        assert 2019 <= int(year) <= 2026 and 1 <= int(month) <= 12
    table = C.frameworks_markdown()
    assert table.count("\n") == len(C.FRAMEWORKS) + 1 and "{cite}`" in table


def test_suggest_strategy():
    gib80 = 80 * 2 ** 30
    assert C.suggest_strategy(1e9, gib80, 8) == "DDP"  # 16 GB of state fits
    assert C.suggest_strategy(13e9, gib80, 8) == "FSDP/ZeRO-3"  # 208 GB: fits 8 x 80 GiB
    assert C.suggest_strategy(175e9, gib80, 8) == "TP + PP + DP (Megatron-LM)"
    assert C.suggest_strategy(175e9, gib80, 8, fast_inter_node=False) == \
        "TP in node + hybrid-shard DP"
    assert C.suggest_strategy(175e9, gib80, 8, fast_intra_node=False) == "FSDP/ZeRO-3 + offload"


# -----------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("call, match", [
    (lambda: C.chunk_bounds(-1, 2), "length must be a whole number >= 0"),
    (lambda: C.chunk_bounds(2.5, 2), "length must be a whole number >= 0"),
    (lambda: C.chunk_bounds(4, 0), "world_size must be a whole number >= 1"),
    (lambda: C.alpha_beta_terms("tree", 4), "algorithm must be one of"),
    (lambda: C.alpha_beta_time_s(-1, 4, 1e-6, 1e9), "message_bytes must be >= 0"),
    (lambda: C.alpha_beta_time_s(1, 4, -1e-6, 1e9), "latency_s must be >= 0"),
    (lambda: C.alpha_beta_time_s(1, 4, 1e-6, 0), "bandwidth_bytes_per_s must be > 0"),
    (lambda: C.alpha_beta_time_s(1, 0, 1e-6, 1e9), "world_size must be a whole number"),
    (lambda: C.fit_alpha_beta([1, 2], [1e-3], 2), "must be 1-d and of equal length"),
    (lambda: C.fit_alpha_beta([8, 8], [1e-3, 1e-3], 2), "at least two different sizes"),
    (lambda: C.fit_alpha_beta([8, 16], [1e-3, 0], 2), "times_s must be > 0"),
    (lambda: C.fit_alpha_beta([8, 16], [1e-3, 1e-3], 1), "world_sizes must be >= 2"),
    (lambda: C.fit_alpha_beta([8, 16], [1e-3, 1e-3], [2, 3, 4]), "world_sizes must be one"),
    (lambda: C.fit_alpha_beta([8, 1e6], [1e-3, 1e-4], 2), "times_s must grow"),
    (lambda: C.data_parallel_comm_bytes(1e9, 8, zero_stage=4), "zero_stage must be 0, 1, 2 or 3"),
    (lambda: C.data_parallel_comm_bytes(0, 8), "n_params must be > 0"),
    (lambda: C.tensor_parallel_comm_bytes(1, 2048, 4096, 2, 0), "tp must be a whole number"),
    (lambda: C.tensor_parallel_ccr(4096, 2048, 1, 1e9, 1e12), "tp must be a whole number >= 2"),
    (lambda: C.ccr(1e9, 0, 1e9, 1e12), "flops must be > 0"),
    (lambda: C.ccr(1e9, 1e9, float("nan"), 1e12), "bandwidth_bytes_per_s must be finite"),
    (lambda: C.pcie_x16_bytes_per_s(16, lanes=0), "lanes must be a whole number"),
    (lambda: C.simulate_ring_all_reduce([]), "arrays must be a non-empty list"),
    (lambda: C.simulate_ring_all_reduce([np.zeros(3), np.zeros(4)]), "same length"),
    (lambda: C.plot_ring_all_reduce(1), "world_size must be a whole number >= 2"),
    (lambda: C.plot_ring_all_reduce(9), "world_size must be 2 to 8"),
    (lambda: C.suggest_strategy(1e9, 0, 8), "gpu_memory_bytes must be > 0"),
    (lambda: C.measure_collectives(world_sizes=(1,)), "world_sizes must be a whole number >= 2"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_plots_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = C.plot_ring_all_reduce(3)
    assert len(axes) == 5
    rows = [{"algorithm": a, "world_size": n, "bytes": s, "seconds": 1e-4 + s / 1e9}
            for a in C.TIMED for n in (2, 4) for s in (8, 1024, 2 ** 20)]
    fit = C.fit_alpha_beta([r["bytes"] for r in rows if r["algorithm"] == "ring"],
                           [r["seconds"] for r in rows if r["algorithm"] == "ring"],
                           [r["world_size"] for r in rows if r["algorithm"] == "ring"])
    assert C.plot_measured_vs_model(rows, fit).get_xscale() == "log"
    assert C.plot_ccr().get_yscale() == "log"
    assert len(C.plot_comm_volume(7e9, 64, 8, 2048, 4096, 32, 8).patches) == 3
    plt.close("all")


def test_importing_collectives_imports_neither_torch_nor_numba():
    import subprocess
    import sys

    code = ("import sys, gpucourse.collectives; "
            "assert 'torch' not in sys.modules and 'numba' not in sys.modules, "
            "[m for m in sys.modules if m.startswith(('torch', 'numba'))][:5]")
    subprocess.run([sys.executable, "-c", code], check=True)


# -----------------------------------------------------------------------------
# Measured on GPUs: the results file of benchmarks/collectives_gpu.py

BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "other": lambda n: (n - 1) / n}


def _row(algorithm, size, seconds, n=4):
    """A results row as the benchmark writes it, with bus bandwidth worked out
    here: algbw = bytes / seconds, times 2(N-1)/N for an all-reduce and
    (N-1)/N for a reduce-scatter or an all-gather."""
    all_reduce = algorithm in ("builtin", "ring", "naive")
    factor = BUS_FACTOR["all_reduce" if all_reduce else "other"](n)
    return {"algorithm": algorithm, "world_size": n, "bytes": size, "seconds": seconds,
            "algbw_bytes_per_s": size / seconds, "busbw_bytes_per_s": size / seconds * factor}


def _record(rows, **extra):
    record = {"benchmark": "collectives", "gpu": "Test GPU", "date": "2026-01-02",
              "versions": {"torch": "9.9", "nccl": "1.2.3"}, "results": rows}
    record.update(extra)
    return record


def test_measured_bus_bandwidth_and_ratio_by_hand():
    # N = 4: 4096 bytes in 1 us is 4.096 GB/s algbw, x 1.5 = 6.144 GB/s bus;
    # the ring's 2 us halves it; at 1024 bytes both take 1 us.
    record = _record([_row("builtin", 4096, 1e-6), _row("builtin", 1024, 1e-6),
                      _row("ring", 1024, 1e-6), _row("ring", 4096, 2e-6), _row("ring", 8192, 3e-6)])
    sizes, busbw = C.measured_bus_bandwidth(record, "builtin")
    np.testing.assert_array_equal(sizes, [1024, 4096])  # sorted by size
    np.testing.assert_allclose(busbw, [1.536e9, 6.144e9])
    # The largest size both have is 4096 (the ring's 8192 has no partner).
    assert C.bus_bandwidth_ratio(record) == pytest.approx(3.072e9 / 6.144e9)
    assert C.bus_bandwidth_ratio(record, message_bytes=1024) == pytest.approx(1.0)
    assert C.bus_bandwidth_ratio(record, "builtin", "ring") == pytest.approx(2.0)
    assert C.measured_algorithms(record) == ["builtin", "ring"]


def test_bandwidth_bound_bytes_by_hand():
    # Bus bandwidth 1, 5, 9, 7, 10 (peak 10). At share 0.8 (8): 7 at the
    # fourth size falls short after 9 had passed, so it "stays" only from the
    # fifth; at 0.5 from the second; at 1 only the peak itself; at 0.1 all.
    record = _record([_row("builtin", 2 ** k, 2 ** k / (b * 1e9 * 1.5), n=4)
                      for k, b in zip(range(10, 15), (1, 5, 9, 7, 10))])
    assert C.bandwidth_bound_bytes(record) == 2 ** 14
    assert C.bandwidth_bound_bytes(record, share=0.5) == 2 ** 11
    assert C.bandwidth_bound_bytes(record, share=1) == 2 ** 14
    assert C.bandwidth_bound_bytes(record, share=0.1) == 2 ** 10


def test_fit_measured_recovers_known_latency_and_bandwidth():
    sizes = [4096 * 4 ** k for k in range(8)]
    alpha, beta = 20e-6, 300e9
    rows = [_row("ring", s, C.alpha_beta_time_s(s, 2, alpha, beta), n=2) for s in sizes]
    rows += [_row("naive", s, 2 * alpha + 2 * s / beta, n=2) for s in sizes]  # naive by hand
    rows += [_row("ring_all_gather", s, alpha + s / 2 / beta, n=2) for s in sizes]
    record = _record(rows)
    for algorithm in ("ring", "naive", "ring_all_gather"):
        fit = C.fit_measured(record, algorithm)
        assert fit.latency_s == pytest.approx(alpha, rel=1e-9)
        assert fit.bandwidth_bytes_per_s == pytest.approx(beta, rel=1e-9)
        assert fit.points == len(sizes) and fit.algorithm == C.MEASURED_MODEL[algorithm]
    # From 1 MiB up: 4096 * 4^k >= 2^20 for k = 4 ... 7.
    assert C.fit_measured(record, "ring", min_bytes=2 ** 20).points == 4
    table = C.measured_fits_markdown(record, 2 ** 20)
    lines = table.splitlines()
    assert len(lines) == 2 + 3 and "from 1 MiB" in lines[0]
    assert lines[2].startswith("| all-reduce, our ring | 20 | 300 | 0.0% | 20 | 300 | 0.0% |")


def test_format_bytes_by_hand():
    assert C.format_bytes(100) == "100 B"
    assert C.format_bytes(4096) == "4 KiB"
    assert C.format_bytes(1536) == "1.5 KiB"
    assert C.format_bytes(256 * 2 ** 20) == "256 MiB"
    assert C.format_bytes(2 ** 31) == "2 GiB"
    with pytest.raises(ValueError, match="size must be >= 0"):
        C.format_bytes(-1)


def test_measured_checks_and_setup_by_hand():
    checks = [{"check": "a", "max_abs_diff": 0.0, "passed": True},
              {"check": "b", "max_abs_diff": 1e-13, "passed": True},
              {"check": "c", "max_abs_diff": 2.0, "passed": False}]
    record = _record([_row("ring", 8, 1e-6)], checks=checks)
    assert C.measured_checks(record) == {"passed": 2, "total": 3, "max_abs_diff": 2.0}
    topology = ("\t\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tNV12\t0-31\n"
                "GPU1\tNV12\t X \t0-31\n\nLegend: ...")
    setup = C.measured_setup(_record([], topology=topology, gpu_count=2,
                                     environment={"NCCL_NVLS_ENABLE": "0"}))
    assert setup == {"gpu": "Test GPU", "gpu_count": 2, "date": "2026-01-02", "torch": "9.9",
                     "nccl": "1.2.3", "link": "NV12", "links": ["NV12"], "multicast_off": True}
    bare = C.measured_setup(_record([]))
    assert bare["link"] is None and bare["links"] == [] and bare["multicast_off"] is False
    # Three GPUs, one pair on another kind of link: both kinds are listed,
    # and the CPU affinity column ("0-31") is not taken for a link.
    topology = ("\t\x1b[4mGPU0\tGPU1\tGPU2\tCPU Affinity\x1b[0m\n"
                "GPU0\t X \tNV12\tSYS\t0-31\nGPU1\tNV12\t X \tNV12\t0-31\n"
                "GPU2\tSYS\tNV12\t X \t0-31\n")
    setup = C.measured_setup(_record([], topology=topology))
    assert setup["link"] == "NV12" and setup["links"] == ["NV12", "SYS"]


COMMITTED_RUNS = {2: "collectives-h200x2-2026-11-22.json", 4: "collectives-h200x4-2026-11-22.json"}


def _committed(gpu_count):
    """One committed run, read straight from its file (not through measured_runs)."""
    from gpucourse import results

    return results.load_results("collectives", results.results_dir() / COMMITTED_RUNS[gpu_count])


@pytest.mark.parametrize("gpu_count", sorted(COMMITTED_RUNS))
def test_the_committed_gpu_run(gpu_count):
    record = _committed(gpu_count)
    assert record["gpu_count"] == gpu_count == C.measured_world_size(record)
    rows = record["results"]
    # The file's own arithmetic: bus bandwidth from bytes, seconds and N.
    for r in rows:
        kind = "all_reduce" if r["algorithm"] in ("builtin", "ring", "naive") else "other"
        assert r["busbw_bytes_per_s"] == pytest.approx(
            r["bytes"] / r["seconds"] * BUS_FACTOR[kind](r["world_size"]), rel=1e-9)
    # The ratio at the largest size, straight from the rows.
    largest = max(r["bytes"] for r in rows)
    at = {r["algorithm"]: r["busbw_bytes_per_s"] for r in rows if r["bytes"] == largest}
    assert C.bus_bandwidth_ratio(record) == pytest.approx(at["ring"] / at["builtin"], rel=1e-12)
    assert C.bus_bandwidth_ratio(record, "ring_all_gather", "builtin_all_gather") == \
        pytest.approx(at["ring_all_gather"] / at["builtin_all_gather"], rel=1e-12)
    # Refitting every size gives what the benchmark stored.
    for algorithm, stored in record["fits"].items():
        fit = C.fit_measured(record, algorithm)
        assert fit.latency_s == pytest.approx(stored["latency_s"], rel=1e-9)
        assert fit.bandwidth_bytes_per_s == pytest.approx(stored["bandwidth_bytes_per_s"], rel=1e-9)
        assert fit.rms_relative_error == pytest.approx(stored["rms_relative_error"], rel=1e-9)
    # The checks, counted here.
    summary = C.measured_checks(record)
    assert summary["total"] == len(record["checks"])
    assert summary["passed"] == sum(c["passed"] for c in record["checks"])
    assert summary["max_abs_diff"] == max(c["max_abs_diff"] for c in record["checks"])
    # The bandwidth-bound edge: NCCL's all-reduce is at >= 80% of its peak from
    # there on, and below it just before.
    edge = C.bandwidth_bound_bytes(record)
    builtin = sorted((r["bytes"], r["busbw_bytes_per_s"]) for r in rows
                     if r["algorithm"] == "builtin")
    peak = max(b for _, b in builtin)
    assert all(b >= 0.8 * peak for s, b in builtin if s >= edge)
    assert [b for s, b in builtin if s < edge][-1] < 0.8 * peak
    assert C.measured_setup(record)["gpu"] == record["gpu"]


@pytest.mark.parametrize("call, match", [
    (lambda: C.measured_bus_bandwidth([], "ring"), "record must be a collectives results record"),
    (lambda: C.measured_bus_bandwidth(_record([]), "ring"), "record must be a collectives"),
    (lambda: C.measured_bus_bandwidth(_record([{"algorithm": "ring"}]), "ring"),
     "record must hold rows with"),
    (lambda: C.measured_bus_bandwidth(_record([_row("ring", 8, 1e-6)]), "tree"),
     r"algorithm must be one measured in the record \(ring\)"),
    (lambda: C.measured_bus_bandwidth(_record([_row("ring", 8, 1e-6)] * 2), "ring"),
     "one row per message size"),
    (lambda: C.bus_bandwidth_ratio(_record([_row("ring", 8, 1e-6), _row("builtin", 16, 1e-6)])),
     "reference must share a message size"),
    (lambda: C.bus_bandwidth_ratio(_record([_row("ring", 8, 1e-6), _row("builtin", 8, 1e-6)]),
                                   message_bytes=16), "message_bytes must be a size both"),
    (lambda: C.bandwidth_bound_bytes(_record([_row("builtin", 8, 1e-6)]), share=0),
     r"share must be in \(0, 1\]"),
    (lambda: C.bandwidth_bound_bytes(_record([_row("builtin", 8, 1e-6)]), share=1.5),
     r"share must be in \(0, 1\]"),
    (lambda: C.fit_measured(_record([_row("ring", 8, 1e-6), _row("ring", 16, 2e-6)]), "ring",
                            min_bytes=16), "min_bytes must leave at least two"),
    (lambda: C.fit_measured(_record([_row("ring", 8, 1e-6)]), "ring", min_bytes=-1),
     "min_bytes must be >= 0"),
    (lambda: C.fit_measured(_record([_row("tree", 8, 1e-6), _row("tree", 16, 2e-6)]), "tree"),
     "algorithm must be one of builtin"),
    (lambda: C.measured_checks(_record([])), "record must carry a non-empty 'checks'"),
    (lambda: C.measured_checks(_record([], checks=[{"passed": True}])),
     "record must carry a non-empty 'checks'"),
    (lambda: C.measured_setup(["gpu"]), "record must be a results record"),
    (lambda: C.measured_setup({"gpu": "x"}), "it lacks"),
    (lambda: C.measured_fits_markdown(_record([_row("ring", 8, 1e-6)]), 0, algorithms=()),
     "algorithms must name at least one"),
    (lambda: C.plot_measured_bus_bandwidth(_record([_row("ring", 8, 1e-6)]), algorithms=()),
     "algorithms must name at least one"),
    (lambda: C.plot_measured_fit(_record([_row("ring", 8, 1e-6)]), algorithms=()),
     "algorithms must name at least one"),
    (lambda: C.measured_world_size(_record([_row("ring", 8, 1e-6, n=2), _row("ring", 16, 1e-6)])),
     r"record must hold rows of one world size, got \[2, 4\]"),
    (lambda: C.plot_measured_runs({}), r"runs must be a non-empty dict .* \(empty\)"),
    (lambda: C.plot_measured_runs([_record([_row("ring", 8, 1e-6)])]),
     "runs must be a non-empty dict"),
    (lambda: C.plot_measured_runs({2: _record([_row("ring", 8, 1e-6, n=4)])}),
     "runs must be keyed by each record's world size, but key 2 holds a run on 4 ranks"),
    (lambda: C.plot_measured_runs({4: _record([_row("ring", 8, 1e-6)])}, quantity="speed"),
     "quantity must be 'bus_bandwidth' or 'time', got 'speed'"),
    (lambda: C.plot_measured_runs({4: _record([_row("ring", 8, 1e-6)])}, algorithms=()),
     "algorithms must name at least one"),
    (lambda: C.plot_measured_runs({4: _record([_row("ring", 8, 1e-6)])}, algorithms=("tree",)),
     "algorithm must be one measured in the record"),
    (lambda: C.small_message_time_s(_record([_row("ring", 8, 1e-6)]), "ring", max_bytes=4),
     r"max_bytes must be at least the smallest size measured \(8\)"),
    (lambda: C.small_message_time_s(_record([_row("ring", 8, 1e-6)]), "ring", max_bytes=0),
     "max_bytes must be > 0"),
    (lambda: C.model_link_share("tree", 4), "algorithm must be one of ring_all_reduce"),
    (lambda: C.model_link_share("naive_all_reduce", 1), "world_size must be >= 2"),
    (lambda: C.model_link_share("naive_all_reduce", 2.5), "world_size must be a whole number"),
])
def test_bad_measured_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_measured_runs_reads_the_committed_files_by_gpu_count():
    runs = C.measured_runs()
    assert sorted(runs) == sorted(COMMITTED_RUNS)
    for n in COMMITTED_RUNS:
        assert runs[n] == _committed(n)
        assert C.measured_setup(runs[n])["links"] == ["NV18"]  # every pair, in both runs


def test_the_committed_four_gpu_run_by_hand():
    # What the chapter says of N = 4, recomputed from the rows themselves.
    record = _committed(4)
    rows = record["results"]
    largest = max(r["bytes"] for r in rows)
    at = {r["algorithm"]: r["busbw_bytes_per_s"] for r in rows if r["bytes"] == largest}
    for ours, nccl in (("ring", "builtin"), ("naive", "builtin"),
                       ("ring_reduce_scatter", "builtin_reduce_scatter"),
                       ("ring_all_gather", "builtin_all_gather")):
        assert C.bus_bandwidth_ratio(record, ours, nccl) == pytest.approx(at[ours] / at[nccl],
                                                                          rel=1e-12)
    # Bus bandwidth is algorithm bandwidth x 2(N-1)/N = x 1.5 on 4 ranks, so the
    # ratio of bus bandwidths is the inverse ratio of times.
    seconds = {r["algorithm"]: r["seconds"] for r in rows if r["bytes"] == largest}
    assert C.bus_bandwidth_ratio(record) == pytest.approx(seconds["builtin"] / seconds["ring"])
    # The small-message floor: the median of the ring's times up to 1 MiB.
    small = sorted(r["seconds"] for r in rows if r["algorithm"] == "ring" and r["bytes"] <= 2 ** 20)
    assert len(small) % 2 == 1  # an odd count: the median is the middle one
    assert C.small_message_time_s(record, "ring") == small[len(small) // 2]
    # 23 checks, none bit for bit off by more than the last bits of float64.
    checks = C.measured_checks(record)
    assert checks["passed"] == checks["total"] == len(record["checks"])
    assert 0 < checks["max_abs_diff"] < 1e-12


def test_measured_runs_from_a_folder(tmp_path):
    def write(name, gpu_count, world_size, seconds):
        record = _record([_row("ring", 8, seconds, n=world_size)], gpu_count=gpu_count)
        (tmp_path / name).write_text(json.dumps(record))

    with pytest.raises(ValueError, match="directory must hold collectives"):
        C.measured_runs(tmp_path)
    write("collectives-a100x2-2026-01-01.json", 2, 2, 1e-6)
    write("collectives-h200x4-2026-01-01.json", 4, 4, 2e-6)
    write("collectives-h200x2-2026-01-02.json", 2, 2, 3e-6)  # newer: replaces the a100x2 run
    write("collectives-h200x8-2026-01-03-quick.json", 8, 8, 4e-6)  # a smoke test: left out
    runs = C.measured_runs(tmp_path)
    assert list(runs) == [2, 4]
    assert runs[2]["results"][0]["seconds"] == 3e-6 and runs[4]["results"][0]["seconds"] == 2e-6
    write("collectives-h200x4-2026-01-04.json", 8, 4, 1e-6)  # says 8 GPUs, ran 4 ranks
    with pytest.raises(ValueError, match=r"gpu_count as the world size of its rows \(4\)"):
        C.measured_runs(tmp_path)


def test_small_message_time_and_model_share_by_hand():
    # Times 5, 1, 3 us up to 1 KiB (median 3), then 100 us at 4 KiB.
    record = _record([_row("ring", 256, 5e-6), _row("ring", 512, 1e-6), _row("ring", 1024, 3e-6),
                      _row("ring", 4096, 100e-6)])
    assert C.small_message_time_s(record, "ring", max_bytes=1024) == pytest.approx(3e-6)
    assert C.small_message_time_s(record, "ring", max_bytes=512) == pytest.approx(3e-6)  # (5+1)/2
    assert C.small_message_time_s(record, "ring", max_bytes=2 ** 20) == pytest.approx(4e-6)
    # The rings keep every link busy (share 1); the naive root's link carries
    # 2(N-1) messages where the ring sends 2(N-1)/N: 1/N.
    for n in (2, 3, 4, 8):
        assert C.model_link_share("ring_all_reduce", n) == pytest.approx(1)
        assert C.model_link_share("ring_reduce_scatter", n) == pytest.approx(1)
        assert C.model_link_share("ring_all_gather", n) == pytest.approx(1)
        assert C.model_link_share("naive_all_reduce", n) == pytest.approx(1 / n)


def test_measured_plots_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = C.measured_runs()
    record = runs[2]
    ax = C.plot_measured_bus_bandwidth(record)
    assert ax.get_xscale() == "log" and len(ax.get_lines()) == len(C.ALL_REDUCES)
    ax = C.plot_measured_bus_bandwidth(record, C.SCATTER_GATHERS)
    assert len(ax.get_lines()) == len(C.SCATTER_GATHERS)
    # One measured set of points and two model lines per algorithm.
    ax = C.plot_measured_fit(record, ("builtin", "ring"), min_bytes=C.bandwidth_bound_bytes(record))
    assert len(ax.collections) == 2 and len(ax.get_lines()) == 4 and ax.get_yscale() == "log"
    # Both runs on one axis: one line per algorithm and run, one colour per
    # algorithm, one line style per N, each line the file's own numbers.
    ax = C.plot_measured_runs(runs, ("builtin", "ring"))
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines) == ["all-reduce, NCCL, N = 2", "all-reduce, NCCL, N = 4",
                             "all-reduce, our ring, N = 2", "all-reduce, our ring, N = 4"]
    for name in ("NCCL", "our ring"):
        two, four = lines[f"all-reduce, {name}, N = 2"], lines[f"all-reduce, {name}, N = 4"]
        assert two.get_color() == four.get_color() and two.get_linestyle() != four.get_linestyle()
    ring4 = lines["all-reduce, our ring, N = 4"]
    sizes, busbw = C.measured_bus_bandwidth(runs[4], "ring")
    np.testing.assert_allclose(ring4.get_xdata(), sizes)
    np.testing.assert_allclose(ring4.get_ydata(), busbw / 1e9)
    ax = C.plot_measured_runs(runs, ("ring",), quantity="time")
    assert ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(),
                               [r["seconds"] * 1e6 for r in sorted(
                                   (r for r in runs[2]["results"] if r["algorithm"] == "ring"),
                                   key=lambda r: r["bytes"])])
    plt.close("all")
