"""Auto's padded plans for ragged products (sgemm.padding): the operands copied
into buffers whose rows are a multiple of 4 long, then the 128-bit kernel.

Checked on the simulator against float64 (every way of cutting K, NaN and
Inf), in PTX for a GPU (128-bit loads, single stores), and in the shape
model: what a copy costs, and that auto pads only where the GPU's entry
allows it and the copy is cheaper than the scalar loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import entry_point, padding, shape_model
from ptx_helpers import compile_without_a_gpu

RAGGED = [(33, 37, 29), (40, 36, 30), (37, 42, 40), (65, 70, 131)]  # k, n, both, neither % 4


def product(m, n, k, seed=0):
    gen = np.random.default_rng(seed)
    return (gen.standard_normal((m, k)).astype(np.float32),
            gen.standard_normal((k, n)).astype(np.float32))


def relative_error(got, a, b):
    want = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture
def spy(monkeypatch):
    """The kernels' shapes and modes matmul asked for, and the padded copies made."""
    seen = {"kernels": [], "padded": []}
    kernel_for, padded_operands = entry_point.kernel_for, entry_point.padded_operands

    def asked_kernel(key, shape, vectorized, config):
        seen["kernels"].append((shape, vectorized))
        return kernel_for(key, shape, vectorized, config)

    def copied(a, b, *rest):
        out = padded_operands(a, b, *rest)
        seen["padded"].append((tuple(out[0].shape), tuple(out[1].shape)))
        return out

    monkeypatch.setattr(entry_point, "kernel_for", asked_kernel)
    monkeypatch.setattr(entry_point, "padded_operands", copied)
    return seen


@pytest.mark.skipif(sgemm.on_gpu(), reason="the simulator's long path (on a GPU: the grid)")
@pytest.mark.parametrize("shape", RAGGED)
def test_padded_products_equal_float64_and_load_four_floats_at_a_time(shape, spy, monkeypatch):
    m, n, k = shape
    a, b = product(m, n, k)
    monkeypatch.setattr(entry_point, "PAD_RAGGED", True)
    got = sgemm.matmul(a, b)
    assert relative_error(got, a, b) < 1e-6
    k4, n4 = -(-k // 4) * 4, -(-n // 4) * 4
    if k % 4 or n % 4:
        # B padded whenever K or N is ragged, A when K is; the kernel then
        # loads four floats at a time and stores C singly where N is ragged.
        assert spy["padded"] == [((m, k4) if k % 4 else (m, k), (k4, n4))]
        assert spy["kernels"] == [((m, n, k4), True if n % 4 == 0 else padding.LOADS_ONLY)]
    else:  # nothing to pad: the 128-bit kernel on the operands as given
        assert spy["padded"] == [] and spy["kernels"] == [((m, n, k), True)]
    monkeypatch.setattr(entry_point, "PAD_RAGGED", False)
    spy["kernels"].clear()
    unpadded = sgemm.matmul(a, b)
    assert relative_error(unpadded, a, b) < 1e-6
    assert spy["kernels"] == [((m, n, k), not (k % 4 or n % 4))]


@pytest.mark.skipif(sgemm.on_gpu(), reason="the simulator's long path")
@pytest.mark.parametrize("split_sum", ["atomic", "partials"])
def test_padded_operands_cut_into_slices_of_k(split_sum, spy, monkeypatch):
    # Auto's plan replaced by one with 3 slices: K = 77 padded to 80, the
    # slices cut from the padded K, each sum within float32's rounding.
    m, n, k = 37, 41, 77
    a, b = product(m, n, k, seed=1)
    monkeypatch.setattr(entry_point, "PAD_RAGGED", True)
    monkeypatch.setattr(entry_point, "auto_plan", lambda shape: (sgemm.TileConfig(32, 32, 16, 4, 4), 3))
    got = sgemm.matmul(a, b, split_sum=split_sum)
    assert relative_error(got, a, b) < 1e-6
    assert spy["padded"] == [((m, 80), (80, 44))]


@pytest.mark.skipif(sgemm.on_gpu(), reason="the simulator's long path")
def test_padding_carries_nan_and_inf_through_and_adds_only_zeros(monkeypatch):
    # The padded zeros meet only padded zeros (A's extra columns B's extra
    # rows), so an Inf in the data gives no NaN from 0 x Inf, and a NaN stays.
    m, n, k = 9, 11, 13
    a, b = product(m, n, k, seed=2)
    a[2, 12], b[5, 10] = np.inf, np.nan
    monkeypatch.setattr(entry_point, "PAD_RAGGED", True)
    got = sgemm.matmul(a, b)
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert np.abs(got[finite] - want[finite]).max() < 1e-4


def test_a_copy_costs_a_read_and_a_write_of_each_ragged_operand():
    # By hand, at 2500 GB/s (2.5e6 bytes a microsecond) and the entry's launch:
    # 1000 x 1001 x 1000 (N ragged): B alone, 1000 x 1001 read and 1000 x
    # 1004 written, 4 bytes each, 8.02e6 bytes: 3.208 us and one launch.
    entry = {"constants": {"gpu_launch_us": 6.0}, "padding": {"copy_gbps": 2500.0}}
    copies, us = shape_model.padding_us((1000, 1001, 1000), entry)
    assert copies == 1 and us == pytest.approx(4 * (1000 * 1001 + 1000 * 1004) / 2.5e6 + 6.0)
    # K ragged (999): A too, 1000 x 999 read and 1000 x 1000 written.
    copies, us = shape_model.padding_us((1000, 1000, 999), entry)
    moved = 4 * (999 * 1000 + 1000 * 1000) + 4 * (1000 * 999 + 1000 * 1000)
    assert copies == 2 and us == pytest.approx(moved / 2.5e6 + 12.0)
    assert shape_model.padding_us((1000, 1000, 1000), entry) == (0, 0.0)


def test_auto_pads_only_where_the_entry_allows_and_the_copy_is_cheaper():
    entry = shape_model.gpu_entry("NVIDIA H200")
    assert not shape_model.padding_on(entry)  # no "padding" block until the GPU measures it
    tile = sgemm.TileConfig(128, 128, 16, 8, 8)
    ragged = (4001, 4003, 4005)
    plain = shape_model.plan_cost(ragged, tile, 1, entry)
    assert plain["padded"] is False and plain["scalar_loads"] is True
    allowed = {**entry, "padding": {"copy_gbps": 2500.0}}
    padded = shape_model.plan_cost(ragged, tile, 1, allowed, padding=True)
    # The tile's scalar-load share (0.055 of the busiest SM's 3 ms) is worth
    # more than two copies of 64 MB each way: padded, cheaper by the difference.
    copies, copy_us = shape_model.padding_us(ragged, allowed)
    assert padded["padded"] is True and padded["scalar_loads"] is False and copies == 2
    share = shape_model.scalar_load_share(entry, tile)
    assert padded["gpu_us"] == pytest.approx(
        plain["gpu_us"] - plain["sm_us"] * share / (1 + share + entry["constants"]["edge_share"])
        + copy_us)
    # A small ragged product: the copies cost more than they save.
    small = shape_model.plan_cost((100, 101, 99), sgemm.TileConfig(64, 64, 16, 8, 4), 1, allowed,
                                  padding=True)
    assert small["padded"] is False and small["scalar_loads"] is True
    # Without the block, auto's plans never pad: the committed grid's ragged shapes.
    for shape in [(1000, 1001, 1000), (3001, 2999, 1009), (8192, 50257, 768)]:
        assert shape_model.choose_plan(shape, "NVIDIA H200")["padded"] is False


PTX_SCRIPT = """
import json, sys
from numba import float32, types
from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import padding
matrix = types.Array(float32, 2, "C")
config = sgemm.TileConfig(128, 128, 16, 8, 8)
kernel = sgemm._tiled_kernel("6", config, padding.LOADS_ONLY)
loads_only = numba.cuda.compile_ptx(kernel.py_func, (matrix, matrix, matrix), cc=(9, 0))[0]
copy = numba.cuda.compile_ptx(padding.pad_copy.py_func, (matrix, matrix), cc=(9, 0))[0]
print(json.dumps([loads_only, copy]))
"""


def test_the_padded_kernel_loads_four_floats_and_stores_one():
    loads_only, copy = json.loads(compile_without_a_gpu(PTX_SCRIPT).strip().splitlines()[-1])
    config = sgemm.TileConfig(128, 128, 16, 8, 8)
    a_loads = config.bm * config.bk // 4 // config.threads
    b_loads = config.bk * config.bn // 4 // config.threads
    assert loads_only.count("ld.global.v4.f32") == a_loads + b_loads
    assert "st.global.v4.f32" not in loads_only and "st.global.f32" in loads_only
    assert ".local" not in loads_only
    assert "ld.global.f32" in copy and "st.global.f32" in copy


def test_the_benchmark_times_the_grids_ragged_shapes(monkeypatch):
    # benchmarks/sgemm_grid.py --padding: its option, and the shapes it times
    # (the grid's with K or N not a multiple of 4).
    from gpucourse import results

    monkeypatch.syspath_prepend(str(results.find_results("sgemm_grid")[0].parents[1]))
    import sgemm_grid

    assert sgemm_grid.build_parser().parse_args(["--padding"]).padding
    ragged = [shape for _, shape in sgemm_grid.grid_shapes() if shape[2] % 4 or shape[1] % 4]
    assert (3001, 2999, 1009) in ragged and (8192, 50257, 768) in ragged
    assert (4096, 4096, 4096) not in ragged and len(ragged) == 7


def test_padding_goes_on_only_where_it_won_wherever_the_model_pads(monkeypatch):
    # sgemm_grid.padding_block on rows made by hand: two ragged shapes, the
    # model padding the first only.
    from gpucourse import results

    monkeypatch.syspath_prepend(str(results.find_results("sgemm_grid")[0].parents[1]))
    from sgemm_grid import padding_block

    def rows(padded_ms, other_ms, ok=True):
        made = []
        for (m, n, k), model_pads, times in (((9, 9, 9), True, padded_ms), ((5, 5, 5), False,
                                                                             other_ms)):
            made += [{"m": m, "n": n, "k": k, "padded": p, "model_pads": model_pads, "ms": t,
                      "ok": ok} for p, t in zip((False, True), times)]
        return made

    block, why = padding_block(rows((1.0, 0.9), (1.0, 1.2)), 2500.0, "f.json")
    assert block == {"copy_gbps": 2500.0, "source": "benchmarks/results/f.json: padded faster "
                     "at all 1 ragged grid shapes the model pads"} and why.startswith("padding on")
    assert padding_block(rows((1.0, 1.1), (1.0, 0.5)), 2500.0, "f.json") == (
        None, "padding stays off: faster at 0 of the 1 shapes it pads")
    assert padding_block(rows((1.0, 0.9), (1.0, 0.9), ok=False), 2500.0, "f.json")[0] is None
    assert padding_block([], 2500.0, "f.json")[0] is None


def test_the_parts_benchmark_prices_the_bytes_the_copies_move(monkeypatch):
    # benchmarks/sgemm_padding_parts.py: the five parts, timed at the same
    # ragged shapes as --padding, the copies' GB/s from padding_bytes, the
    # bytes padding_us prices: by hand at 8192 x 50257 x 768 (N ragged, K
    # not), B read (768 x 50257) and written (768 x 50260), 4 bytes each.
    from gpucourse import results

    monkeypatch.syspath_prepend(str(results.find_results("sgemm_grid")[0].parents[1]))
    import sgemm_padding_parts

    assert sgemm_padding_parts.PARTS == ("copy", "padded_kernel", "scalar_kernel",
                                         "aligned_kernel", "cublas")
    assert shape_model.padding_bytes((8192, 50257, 768)) == 4 * 768 * (50257 + 50260)
    # K ragged too: A (1537 x 771) and its 1537 x 772 buffer besides B's.
    assert shape_model.padding_bytes((1537, 1023, 771)) == \
        4 * (771 * 1023 + 772 * 1024) + 4 * 1537 * (771 + 772)
    assert shape_model.padding_bytes((4096, 4096, 4096)) == 0
    entry = {"constants": {"gpu_launch_us": 6.0}, "padding": {"copy_gbps": 2000.0}}
    assert shape_model.padding_us((1537, 1023, 771), entry)[1] == pytest.approx(
        shape_model.padding_bytes((1537, 1023, 771)) / 2e6 + 12.0)
