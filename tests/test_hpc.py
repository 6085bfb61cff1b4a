"""Tests of gpucourse.hpc: hand-derived values, independent references,
properties that must hold for any input, and the errors bad input gets."""

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucourse import hpc

fractions = st.floats(min_value=0, max_value=1)
worker_counts = st.floats(min_value=1, max_value=1e9)


# -----------------------------------------------------------------------------
# Amdahl and Gustafson


def test_amdahl_by_hand():
    # p = 0.95, n = 1024: (1 - p) + p / n = 0.05 + 0.95 / 1024
    # = 0.05 + 0.000927734375 = 0.050927734375, and 1 / 0.050927734375 = 19.6356...
    assert hpc.amdahl_speedup(0.95, 1024) == pytest.approx(19.6357, abs=1e-4)
    assert hpc.amdahl_speedup(0.5, 2) == pytest.approx(4 / 3)  # 1 / (0.5 + 0.25)
    assert hpc.amdahl_speedup(0.0, 1000) == 1.0  # nothing parallel, nothing gained
    assert hpc.amdahl_speedup(1.0, 64) == pytest.approx(64)  # all parallel: linear
    assert hpc.amdahl_speedup(0.9, 1) == 1.0  # one worker is the baseline
    assert isinstance(hpc.amdahl_speedup(0.9, 8), float)


def test_amdahl_accepts_arrays():
    speedup = hpc.amdahl_speedup(0.5, np.array([1, 2, 4, 8]))
    np.testing.assert_allclose(speedup, [1, 4 / 3, 1.6, 16 / 9])
    np.testing.assert_allclose(hpc.amdahl_speedup(0.5, [1, 2]), [1, 4 / 3])


def test_amdahl_limit():
    assert hpc.amdahl_limit(0.95) == pytest.approx(20)
    assert hpc.amdahl_limit(0.0) == 1.0
    assert hpc.amdahl_limit(1.0) == math.inf


def test_workers_needed_by_hand():
    # p = 0.9, S = 6: n = 0.9 / (1/6 - 0.1) = 13.5, so 14 workers; 13 give 5.91.
    assert hpc.amdahl_workers_needed(0.9, 6) == 14
    # p = 0.95, S = 10: n = 0.95 / (0.1 - 0.05) = 19 exactly (round-off must not make it 20).
    assert hpc.amdahl_workers_needed(0.95, 10) == 19
    assert hpc.amdahl_workers_needed(0.5, 1.5) == 3  # 1 / (0.5 + 0.5/3) = 1.5
    assert hpc.amdahl_workers_needed(0.3, 1) == 1
    assert hpc.amdahl_workers_needed(1.0, 100.5) == 101


@given(p=st.floats(min_value=0.01, max_value=0.999), share=st.floats(min_value=0.0, max_value=0.99))
def test_workers_needed_is_the_fewest(p, share):
    # Any target between 1 and the limit: n reaches it and n - 1 does not.
    target = 1 + share * (hpc.amdahl_limit(p) - 1)
    n = hpc.amdahl_workers_needed(p, target)
    assert hpc.amdahl_speedup(p, n) >= target * (1 - 1e-9)
    if n > 1:
        assert hpc.amdahl_speedup(p, n - 1) < target * (1 + 1e-9)


def test_gustafson_by_hand():
    assert hpc.gustafson_speedup(0.95, 1024) == pytest.approx(0.05 + 0.95 * 1024)  # 972.85
    assert hpc.gustafson_speedup(0.5, 4) == 2.5
    assert hpc.gustafson_speedup(0.0, 100) == 1.0
    np.testing.assert_allclose(hpc.gustafson_speedup(0.5, np.array([1.0, 3.0])), [1.0, 2.0])


@given(p=fractions, n=worker_counts, extra=st.floats(min_value=0, max_value=1e6))
def test_amdahl_properties(p, n, extra):
    s = hpc.amdahl_speedup(p, n)
    assert s >= 1 - 1e-12
    assert s <= hpc.amdahl_limit(p) * (1 + 1e-12)
    assert s <= n * (1 + 1e-12)  # never better than linear
    assert hpc.amdahl_speedup(p, n + extra) >= s * (1 - 1e-12)  # more workers never hurt


@given(p=fractions, n=worker_counts)
def test_gustafson_never_below_amdahl(p, n):
    assert hpc.gustafson_speedup(p, n) >= hpc.amdahl_speedup(p, n) * (1 - 1e-12)


# -----------------------------------------------------------------------------
# Roofline


def test_roofline_by_hand():
    # 10 TFLOP/s peak, 1 TB/s: ridge at 10 FLOP/B.
    assert hpc.ridge_point(10e12, 1e12) == 10
    assert hpc.roofline(10e12, 1e12, 2) == 2e12  # memory-bound: 1e12 B/s x 2 FLOP/B
    assert hpc.roofline(10e12, 1e12, 10) == 10e12  # at the ridge both roofs agree
    assert hpc.roofline(10e12, 1e12, 1000) == 10e12  # compute-bound
    assert hpc.roofline(10e12, 1e12, 0) == 0
    np.testing.assert_allclose(hpc.roofline(10e12, 1e12, [1, 100]), [1e12, 10e12])


def test_datasheet_ridges():
    # H100: 67e12 / 3.35e12 = 20 FLOP/B exactly; A100: 19.5e12 / 2.039e12 = 9.56.
    assert hpc.GPUS["H100"].ridge_flop_per_byte == pytest.approx(20)
    assert hpc.GPUS["A100"].ridge_flop_per_byte == pytest.approx(9.5635, abs=1e-4)
    assert hpc.GPUS["RTX A6000"].ridge_flop_per_byte == pytest.approx(38.7e12 / 768e9)


def test_rtx_2050_derivation():
    # 2048 x 2 x 1.477e9 = 6,049,792,000,000 FLOP/s; 64 / 8 x 14e9 = 112e9 B/s.
    rtx = hpc.GPUS["RTX 2050"]
    assert rtx.fp32_flops_per_s == pytest.approx(6.049792e12)
    assert rtx.bandwidth_bytes_per_s == pytest.approx(112e9)
    assert rtx.ridge_flop_per_byte == pytest.approx(54.016)


def test_a100_datasheet_agrees_with_its_cores_and_clock():
    # An independent check of the printed 19.5 TFLOPS: the A100 has 108 SMs x
    # 64 FP32 cores = 6912 cores at a 1410 MHz boost clock.
    assert hpc.peak_flops_per_s(6912, 1.41e9) == pytest.approx(hpc.GPUS["A100"].fp32_flops_per_s, rel=0.01)


@given(peak=st.floats(1e9, 1e16), bandwidth=st.floats(1e8, 1e13), intensity=st.floats(0, 1e6))
def test_roofline_is_under_both_roofs(peak, bandwidth, intensity):
    attainable = hpc.roofline(peak, bandwidth, intensity)
    assert attainable <= peak
    assert attainable <= bandwidth * intensity
    assert attainable == pytest.approx(min(peak, bandwidth * intensity))


def test_matmul_intensity_by_hand():
    # Square n x n x n in fp32: 2 n^3 FLOP over 4 x 3 n^2 bytes = n / 6 FLOP/B.
    assert hpc.matmul_intensity(4096, 4096, 4096) == pytest.approx(4096 / 6)  # 682.67
    assert hpc.matmul_intensity(256, 256, 256) == pytest.approx(256 / 6)
    assert hpc.matmul_intensity(4096, 4096, 4096, bytes_per_element=2) == pytest.approx(4096 / 3)
    # Matrix-vector, m = k = 4096, n = 1: 2 x 4096^2 / (4 x (4096^2 + 2 x 4096)) just under 1/2.
    assert hpc.matmul_intensity(4096, 1, 4096) == pytest.approx(0.5 * 4096 / 4098)


def test_attention_intensity_by_hand():
    # N = 1024, d = 64, fp32. FLOPs 4 N^2 d. Standard moves 4Nd + 4N^2 elements:
    # 4 x 1024^2 x 64 / (4 x (4 x 1024 x 64 + 4 x 1024^2)) = 1024 x 64 / (4 x 1088) = 15.06.
    assert hpc.standard_attention_intensity(1024, 64) == pytest.approx(1024 * 64 / (4 * 1088))
    # Flash moves 4Nd elements: 4 N^2 d / (4 x 4 N d) = N / 4 = 256.
    assert hpc.flash_attention_intensity(1024, 64) == pytest.approx(256)
    # Standard attention saturates at d / bytes = 16 however long the sequence.
    assert hpc.standard_attention_intensity(1 << 20, 64) == pytest.approx(16, rel=1e-3)


# -----------------------------------------------------------------------------
# The compute bill


def test_gpt3_compute_bill():
    # 6 x 175e9 x 300e9 = 6 x 5.25e22 = 3.15e23 FLOP.
    assert hpc.training_flops(hpc.GPT3_PARAMS, hpc.GPT3_TOKENS) == pytest.approx(3.15e23)
    # The paper's 3,640 PF-days: 3640 x 1e15 x 86,400 s = 3.145e23 FLOP.
    assert hpc.GPT3_REPORTED_PF_DAYS * 1e15 * 86_400 == pytest.approx(hpc.GPT3_REPORTED_TRAIN_FLOPS, rel=0.01)
    # One V100 at 28 TFLOP/s: 3.14e23 / 28e12 = 1.1214e10 s; / 3.15576e7 s per year = 355.4 years.
    one_gpu_s = hpc.training_time_s(3.14e23, 28e12)
    assert one_gpu_s == pytest.approx(1.1214e10, rel=1e-4)
    assert one_gpu_s / hpc.SECONDS_PER_YEAR == pytest.approx(355.4, abs=0.1)
    # 10,000 of them, ideally: 1.1214e10 / 1e4 / 86,400 = 12.98 days.
    assert hpc.training_time_s(3.14e23, 28e12, devices=10_000) / 86_400 == pytest.approx(12.98, abs=0.01)


def test_training_time_utilization_and_serial_fraction():
    base = hpc.training_time_s(1e18, 1e12, devices=100)
    assert hpc.training_time_s(1e18, 1e12, devices=100, utilization=0.5) == pytest.approx(2 * base)
    # p = 0.99 on 100 devices: Amdahl speed-up 1 / (0.01 + 0.0099) = 50.25 instead of 100.
    slowed = hpc.training_time_s(1e18, 1e12, devices=100, parallel_fraction=0.99)
    assert slowed == pytest.approx(1e6 / (1 / (0.01 + 0.0099)))
    assert hpc.training_time_s(0, 1e12) == 0


# -----------------------------------------------------------------------------
# History


def test_top500_table_is_in_order_and_sane():
    years = [s.year for s in hpc.TOP500_NUMBER_ONE]
    assert years == sorted(years)
    rmax = [s.rmax_flops_per_s for s in hpc.TOP500_NUMBER_ONE]
    assert rmax == sorted(rmax)  # each #1 beats the previous
    frontier = next(s for s in hpc.TOP500_NUMBER_ONE if s.name == "Frontier")
    assert frontier.rmax_flops_per_s > hpc.EXASCALE_FLOPS_PER_S
    assert frontier.source == "https://top500.org/lists/top500/2022/06/"
    assert hpc.CRAY_1_PEAK_FLOPS_PER_S == pytest.approx(160e6)


def test_trend_recovers_a_known_exponential():
    # Doubling every year from 1e9 in 2000: slope log10(2) per year.
    years = np.arange(2000, 2011)
    trend = hpc.fit_exponential_trend(years, 1e9 * 2.0 ** (years - 2000))
    assert trend.growth_per_year == pytest.approx(2)
    assert trend.doubling_time_years == pytest.approx(1)
    assert trend.flops_per_s(2000) == pytest.approx(1e9)
    assert trend.year_reaching(1e9 * 2 ** 20) == pytest.approx(2020)


def test_top500_trend_and_zettascale():
    trend = hpc.top500_trend()
    # Sanity window: from 59.7 GFLOP/s (1993) to 1.742 EFLOP/s (2024) is x2.9e7
    # in 31.4 years, x1.73 a year; the fit must be close to that.
    assert 1.6 < trend.growth_per_year < 1.9
    assert 2030 < hpc.zettascale_year() < 2040
    assert trend.year_reaching(hpc.ZETTASCALE_FLOPS_PER_S) == pytest.approx(hpc.zettascale_year())


# -----------------------------------------------------------------------------
# Energy


def test_energy_ratio_and_break_even():
    # 640 pJ / 3.7 pJ = 172.97.
    assert hpc.energy_ratio("32-bit DRAM read", "32-bit float multiply") == pytest.approx(172.97, abs=0.01)
    # 640 / 4 = 160 pJ per byte; (0.9 + 3.7) / 2 = 2.3 pJ per FLOP; 160 / 2.3 = 69.57 FLOP/B.
    assert hpc.energy_break_even_intensity() == pytest.approx(160 / 2.3)
    assert hpc.dram_energy_share(160 / 2.3) == pytest.approx(0.5)
    shares = hpc.dram_energy_share(np.array([0.5, 682.7]))
    assert shares[0] > 0.99 and shares[1] < 0.1


# -----------------------------------------------------------------------------
# Numbers for the prose


def test_formatting():
    assert hpc.format_flops(59.7e9) == "59.7 GFLOP/s"
    assert hpc.format_flops(1.102e18) == "1.102 EFLOP/s"
    assert hpc.format_flops(160e6) == "160 MFLOP/s"
    assert hpc.format_flops(1e21) == "1 ZFLOP/s"
    assert hpc.format_si(3.35e12, "B/s") == "3.35 TB/s"
    assert hpc.format_si(12, "B") == "12 B"
    assert hpc.format_sci(3.15e23) == "3.15 × 10²³"
    assert hpc.format_sci(1.1214e-10, digits=2) == "1.1 × 10⁻¹⁰"


# -----------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("call, argument", [
    (lambda: hpc.amdahl_speedup(1.5, 4), "parallel_fraction"),
    (lambda: hpc.amdahl_speedup(-0.1, 4), "parallel_fraction"),
    (lambda: hpc.amdahl_speedup(float("nan"), 4), "parallel_fraction"),
    (lambda: hpc.amdahl_speedup(True, 4), "parallel_fraction"),
    (lambda: hpc.amdahl_speedup("0.5", 4), "parallel_fraction"),
    (lambda: hpc.amdahl_speedup(0.5, 0), "workers"),
    (lambda: hpc.amdahl_speedup(0.5, [1, 0.5]), "workers"),
    (lambda: hpc.amdahl_speedup(0.5, math.inf), "workers"),
    (lambda: hpc.amdahl_speedup(0.5, ["a"]), "workers"),
    (lambda: hpc.amdahl_limit(2), "parallel_fraction"),
    (lambda: hpc.amdahl_workers_needed(0.95, 20), "target_speedup"),
    (lambda: hpc.amdahl_workers_needed(0.95, 0.5), "target_speedup"),
    (lambda: hpc.amdahl_workers_needed(1.1, 2), "parallel_fraction"),
    (lambda: hpc.gustafson_speedup(1.01, 2), "parallel_fraction"),
    (lambda: hpc.gustafson_speedup(0.5, -3), "workers"),
    (lambda: hpc.roofline(0, 1e12, 1), "peak_flops_per_s"),
    (lambda: hpc.roofline(1e12, -1, 1), "bandwidth_bytes_per_s"),
    (lambda: hpc.roofline(1e12, 1e12, -1), "intensity_flop_per_byte"),
    (lambda: hpc.roofline(1e12, 1e12, None), "intensity_flop_per_byte"),
    (lambda: hpc.ridge_point(1e12, 0), "bandwidth_bytes_per_s"),
    (lambda: hpc.peak_flops_per_s(0, 1e9), "cores"),
    (lambda: hpc.peak_flops_per_s(2048.5, 1e9), "cores"),
    (lambda: hpc.peak_flops_per_s(2048, -1e9), "boost_clock_hz"),
    (lambda: hpc.memory_bandwidth_bytes_per_s(0, 14e9), "bus_width_bits"),
    (lambda: hpc.memory_bandwidth_bytes_per_s(64, 0), "data_rate_bits_per_s_per_pin"),
    (lambda: hpc.matmul_intensity(0, 4, 4), "m"),
    (lambda: hpc.matmul_intensity(4, -4, 4), "n"),
    (lambda: hpc.matmul_intensity(4, 4, 2.5), "k"),
    (lambda: hpc.matmul_intensity(4, 4, 4, bytes_per_element=0), "bytes_per_element"),
    (lambda: hpc.standard_attention_intensity(0, 64), "seq_len"),
    (lambda: hpc.flash_attention_intensity(1024, 0), "head_dim"),
    (lambda: hpc.flash_attention_intensity(1024, 64, bytes_per_element=-2), "bytes_per_element"),
    (lambda: hpc.attention_flops(1024, False), "head_dim"),
    (lambda: hpc.training_flops(-1, 3e11), "n_params"),
    (lambda: hpc.training_flops(1e9, 0), "n_tokens"),
    (lambda: hpc.training_time_s(-1.0, 28e12), "total_flops"),
    (lambda: hpc.training_time_s(1e20, 0), "flops_per_s_per_device"),
    (lambda: hpc.training_time_s(1e20, 28e12, devices=0), "devices"),
    (lambda: hpc.training_time_s(1e20, 28e12, utilization=0), "utilization"),
    (lambda: hpc.training_time_s(1e20, 28e12, utilization=1.5), "utilization"),
    (lambda: hpc.training_time_s(1e20, 28e12, parallel_fraction=2), "parallel_fraction"),
    (lambda: hpc.fit_exponential_trend([2000, 2001], [1e9, -1]), "flops_per_s"),
    (lambda: hpc.fit_exponential_trend([2000, 2000], [1e9, 2e9]), "years"),
    (lambda: hpc.fit_exponential_trend([2000, 2001, 2002], [1e9, 2e9]), "years"),
    (lambda: hpc.top500_trend().year_reaching(0), "flops_per_s"),
    (lambda: hpc.energy_ratio("32-bit DRAM read", "teleport"), "denominator"),
    (lambda: hpc.dram_energy_share(0), "intensity_flop_per_byte"),
    (lambda: hpc.format_flops(-1), "flops_per_s"),
    (lambda: hpc.format_si(-1, "B"), "value"),
    (lambda: hpc.format_flops(1e9, digits=0), "digits"),
    (lambda: hpc.format_sci(float("nan")), "value"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


def test_error_message_says_what_is_accepted():
    with pytest.raises(ValueError, match=r"parallel_fraction must be in \[0, 1\], got 1.5"):
        hpc.amdahl_speedup(1.5, 4)
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        hpc.amdahl_speedup(0.5, 0)


def test_plots_return_their_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for plot in (hpc.plot_amdahl, hpc.plot_gustafson, hpc.plot_roofline, hpc.plot_top500,
                 hpc.plot_energy):
        _, ax = plt.subplots()
        assert plot(ax=ax) is ax
        plt.close("all")
    with pytest.raises(ValueError, match="placed_on"):
        hpc.plot_roofline(placed_on="Cray-1")


def test_import_is_light():
    # Importing the week-1 module must not drag in matplotlib, Numba or torch.
    code = ("import sys, gpucourse.hpc; "
            "print(sorted(m for m in ('matplotlib', 'numba', 'torch') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -----------------------------------------------------------------------------
# Measured speed-ups and the laws fitted to them


def test_fits_recover_the_fraction_of_exact_data():
    workers = np.array([1, 2, 4, 8, 16])
    assert hpc.fit_amdahl(workers, hpc.amdahl_speedup(0.93, workers)) == pytest.approx(0.93)
    assert hpc.fit_gustafson(workers, hpc.gustafson_speedup(0.7, workers)) == pytest.approx(0.7)
    # Exact Amdahl data has the same serial fraction at every count.
    np.testing.assert_allclose(hpc.karp_flatt(workers, hpc.amdahl_speedup(0.93, workers)),
                               np.full(4, 0.07))


def test_fits_are_least_squares_against_numpy():
    rng = np.random.default_rng(3)
    workers = np.array([1, 2, 3, 4, 6, 8, 12, 16], dtype=float)
    speedups = hpc.amdahl_speedup(0.9, workers) * rng.uniform(0.9, 1.05, workers.size)
    x, y = 1 - 1 / workers, 1 - 1 / speedups
    slope = np.linalg.lstsq(x[:, None], y, rcond=None)[0][0]
    assert hpc.fit_amdahl(workers, speedups) == pytest.approx(slope)
    slope = np.linalg.lstsq((workers - 1)[:, None], speedups - 1, rcond=None)[0][0]
    assert hpc.fit_gustafson(workers, speedups) == pytest.approx(slope)


def test_fits_stay_in_zero_to_one():
    # Slower on more workers: the best slope is negative, clipped to 0.
    assert hpc.fit_amdahl([1, 2, 4], [1.0, 0.8, 0.6]) == 0.0
    assert hpc.fit_gustafson([1, 2, 4], [1.0, 3.0, 9.0]) == 1.0  # superlinear: clipped to 1


def test_karp_flatt_by_hand():
    # n = 4, S = 3: (1/3 - 1/4) / (3/4) = 1/9; the one-worker point is skipped.
    np.testing.assert_allclose(hpc.karp_flatt([1, 4], [1.0, 3.0]), [1 / 9])


@pytest.mark.parametrize("workers, speedups, naming", [
    ([1, 1], [1.0, 1.0], "workers"), ([1, 2], [1.0], "speedups"), ([0.5, 2], [1, 2], "workers"),
    ([1, 2], [1.0, -2.0], "speedups")])
def test_fits_refuse_bad_data(workers, speedups, naming):
    for fit in (hpc.fit_amdahl, hpc.fit_gustafson, hpc.karp_flatt):
        with pytest.raises(ValueError, match=naming):
            fit(workers, speedups)


@pytest.mark.parametrize("scaling", hpc.SCALINGS)
def test_the_recorded_speedups_are_a_measurement(scaling):
    m = hpc.recorded_speedups(scaling)
    assert m.workers[0] == 1 and m.workers[-1] >= 8 and np.all(np.diff(m.workers) > 0)
    np.testing.assert_allclose(m.speedups, m.one_worker_times_s / m.times_s)
    assert "logical CPUs" in m.machine and m.method.startswith("gpucourse.hpc.measure_speedups")
    # More workers help, but less than linearly.
    assert 1 < m.speedups[-1] < m.workers[-1]


def test_measure_speedups_runs_the_job_on_processes():
    m = hpc.measure_speedups((1, 2), "strong", serial_steps=1000, parallel_steps=20_000,
                             repeats=1)
    assert list(m.workers) == [1, 2] and m.speedups[0] == 1.0 and np.all(m.times_s > 0)
    assert hpc.speedup_record([m])["strong"]["workers"] == [1, 2]


def test_lcg_chain_is_the_generator():
    x = 1
    for _ in range(3):
        x = (1103515245 * x + 12345) % 2**31
    assert hpc.lcg_chain(3) == x


@pytest.mark.parametrize("kwargs, naming", [({"worker_counts": (1, 1)}, "worker_counts"),
                                            ({"scaling": "medium"}, "scaling"),
                                            ({"repeats": 0}, "repeats")])
def test_measure_speedups_refuses_bad_arguments(kwargs, naming):
    with pytest.raises(ValueError, match=naming):
        hpc.measure_speedups(**kwargs)


# -----------------------------------------------------------------------------
# Counting a kernel and placing it on a roofline


def test_kernel_counts_by_hand():
    assert hpc.kernel_counts("add", (10,)) == (10, 240)
    assert hpc.kernel_counts("triad", (10,), 4) == (20, 120)
    assert hpc.kernel_counts("matvec", (3, 5)) == (30, 8 * (15 + 5 + 3))
    assert hpc.kernel_counts("matmul", (2, 3, 4), 4) == (48, 104)
    # The ideal matmul count is the intensity matmul_intensity gives.
    flops, moved = hpc.kernel_counts("matmul", (64, 32, 16), 4)
    assert flops / moved == pytest.approx(hpc.matmul_intensity(64, 32, 16))


@pytest.mark.parametrize("kernel, shape, naming", [("copy", (4,), "kernel"),
                                                   ("matvec", (4,), "shape"),
                                                   ("add", (0,), "shape")])
def test_kernel_counts_refuse_bad_input(kernel, shape, naming):
    with pytest.raises(ValueError, match=naming):
        hpc.kernel_counts(kernel, shape)


def test_place_on_roofline_by_hand():
    # 1e9 FLOP over 4e9 bytes in 0.01 s on a 1e12 FLOP/s, 1e11 B/s machine (ridge 10):
    # intensity 0.25, achieved 1e11 FLOP/s, roof 2.5e10: memory-bound.
    placed = hpc.place_on_roofline(1e9, 4e9, 0.01, 1e12, 1e11)
    assert placed.intensity_flop_per_byte == 0.25
    assert placed.achieved_flops_per_s == pytest.approx(1e11)
    assert placed.attainable_flops_per_s == pytest.approx(2.5e10)
    assert placed.bound == "memory" and placed.fraction_of_attainable == pytest.approx(4)
    assert hpc.place_on_roofline(1e12, 1e10, 2.0, 1e12, 1e11).bound == "compute"  # at the ridge


def test_time_numpy_kernel_times_something():
    assert 0 < hpc.time_numpy_kernel("matvec", (64, 32), repeats=2) < 1
    with pytest.raises(ValueError, match="repeats"):
        hpc.time_numpy_kernel("add", (8,), repeats=0)
