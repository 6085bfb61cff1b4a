"""Week 8: two questions left for the GPU about a ring on a ragged n (issue
33, twenty-seventh session), and what answers them.

Every large miss of the held-out sets has a ragged n. A ring there either
pads B first (a copy kernel and a second launch) or reads it as given, 4
bytes a copy. Where does the padded ring lose its time: in the copy, or in
the second launch? ``benchmarks/sgemm_ring_pairs.py --ways
padded,padded_copy_once`` times a way that pads B once and not again. And
can 4-byte copies cost less? ``pipelined.STEP_SCALAR_COPIES`` steps them
from one address down B's rows, as the 8-byte copies do: offline, fewer
instructions in the loop; on since ``--ways scalar,scalar_stepped`` timed it
on the H200 (2026-12-01: faster at 24 of 29 shapes). And can the product kernel start while the copy of B finishes?
``vectorized.RING_COPY_OVERLAP`` launches a padded ring's product kernel as
a programmatic dependent launch, the kernel waiting for the copy
(``griddepcontrol.wait``) before its first read (off until ``--ways
padded,padded_overlap`` has timed it). And can the copy itself be cheaper?
``padding.pad_copy_wide`` copies four floats a thread, one 16-byte store
each (``entry_point.RING_COPY_WIDE``, on since ``sgemm_ring_copy.py
--wide`` and ``--ways padded,padded_wide`` timed it: faster at 29 of 29).
The ways they replaced stay behind their switches, and are tested too."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, entry_point, pipelined
from benchmark_scripts import benchmark_script
from ptx_helpers import compile_without_a_gpu, innermost_loop, ptxas_report
from test_sgemm_pipelined import SMALL, fresh
from test_sgemm_split_k import _integers

def _reference(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def test_the_timed_winners_are_the_defaults():
    # On the H200 both beat the ways before them (results/reruns/
    # sgemm_ring_pairs-h200-2026-12-01-copy-ways.json, held-out set 13).
    assert pipelined.STEP_SCALAR_COPIES is True
    assert entry_point.RING_COPY_WIDE is True
    # What a benchmark's record saves of them, as they stand when it runs.
    switches = sgemm.ring_switches()
    assert switches["step_scalar_copies"] and switches["ring_copy_wide"]
    assert not switches["peeled_stores"] and not switches["ring_copy_overlap"]


def test_a_records_switches_are_the_ones_a_run_flipped(monkeypatch):
    monkeypatch.setattr(entry_point, "RING_COPY_WIDE", False)
    monkeypatch.setattr(pipelined, "STEP_SCALAR_COPIES", False)
    assert {key: value for key, value in sgemm.ring_switches().items()
            if key in ("ring_copy_wide", "step_scalar_copies")} == {
        "ring_copy_wide": False, "step_scalar_copies": False}
    off_grid = benchmark_script("sgemm_off_grid")
    # Each switch of sgemm_off_grid.py names a flag ring_switches reports.
    reported = {"ZERO_BY_MEMSET": "zeroing", "RING_PAIRS": "ring_pairs",
                "RING_SHIFTED": "ring_shifted", "PEELED_STORES": "peeled_stores",
                "RING_COPY_WIDE": "ring_copy_wide", "STEP_SCALAR_COPIES": "step_scalar_copies"}
    assert {flag for _, flag, *_ in off_grid.SWITCHES.values()} <= set(reported)


@pytest.fixture(params=[True, False], ids=["stepped", "unstepped"])
def stepped(monkeypatch, request):
    """Rings read a ragged B as given, 4 bytes a copy, with
    STEP_SCALAR_COPIES on (the default) and off (read when a kernel is
    built)."""
    monkeypatch.setattr(pipelined, "STEP_SCALAR_COPIES", request.param)
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", "scalar")
    monkeypatch.setattr(entry_point, "RING_PAIRS", False)
    fresh()
    yield
    monkeypatch.undo()
    fresh()


def test_4_byte_copies_that_step_down_bs_rows_multiply_exactly(stepped):
    # Odd and even ragged n, K ending inside a step and on one, a single
    # column; K whole, split and stream-K (each slice starts its own rows).
    config = replace(SMALL, stages=2)
    for (m, n, k), splits in [((37, 31, 70), 1), ((37, 30, 72), 1), ((5, 33, 41), 2),
                              ((40, 31, 90), "stream"), ((3, 1, 5), 1), ((64, 61, 64), 3)]:
        a, b = _integers((m, k), 5), _integers((k, n), 6)
        np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config, splits=splits),
                                      _reference(a, b), err_msg=f"{m} x {n} x {k}, {splits}")


STEPPED_PTX = """
import sys
from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import pipelined
pipelined.STEP_SCALAR_COPIES = sys.argv[1] == "on"
config = sgemm.TileConfig(64, 128, 16, 8, 8, stages=2)
kernel = sgemm._tiled_kernel("6", config, False, False, False)
print(numba.cuda.compile_ptx(kernel.py_func, sgemm.SPLIT_SIGNATURE[:3], cc=(9, 0))[0])
"""


def test_stepped_4_byte_copies_issue_fewer_instructions_in_the_same_registers():
    # The 64 x 128 ring of auto's menu, B read 4 bytes a copy: the same
    # copies (16 of B and 8 of A a thread a step), fewer instructions around
    # them (offline SASS: 1,384 per 1,024 FMAs off, 1,324 on), no more
    # registers than the 168 it has off, and no spills.
    found = {}
    for switch in ("off", "on"):
        text = compile_without_a_gpu(STEPPED_PTX, switch)
        loop = innermost_loop(text, marker="fma.rn.f32", most=True)
        others = [x for x in loop if not x.startswith(("fma.rn.f32", "ld.shared"))]
        report = ptxas_report(text)
        registers = int(re.search(r"Used (\d+) registers", report).group(1))
        assert set(re.findall(r"(\d+) bytes spill", report)) <= {"0"}, report
        found[switch] = (sum(x.startswith("fma.rn.f32") for x in loop),
                         sum(x.startswith("cp.async.ca.shared.global") for x in loop),
                         len(others), registers)
    (fma_off, copies_off, others_off, regs_off), (fma_on, copies_on, others_on, regs_on) = (
        found["off"], found["on"])
    assert fma_on == fma_off == 1024 and copies_on == copies_off
    assert others_on < others_off * 0.9, found
    assert regs_on <= regs_off <= 168, found


def _ring_pairs_script():
    return benchmark_script("sgemm_ring_pairs")


def test_the_benchmarks_ways_are_named_and_run_phase_by_phase():
    script = _ring_pairs_script()
    assert script.parse_ways("scalar_stepped, padded") == ("scalar_stepped", "padded")
    for bad in ("", "padded,nope", ","):
        with pytest.raises(ValueError, match="--ways takes names of ways"):
            script.parse_ways(bad)
    # Phases in their fixed order, each way in the order named.
    phases = script.phases_of(("scalar_stepped", "padded_peeled", "scalar", "padded"))
    assert [(phase, list(ways)) for phase, ways in phases] == [
        ("registers", ["scalar", "padded"]), ("peeled", ["padded_peeled"]),
        ("stepped", ["scalar_stepped"])]
    assert phases[0][1]["padded"] == ("padded", False, False, False)
    # The defaults are the committed runs' ways; every way has a phase.
    assert set(script.ALL_WAYS) - set(script.DEFAULT_WAYS) == {"padded_driver",
                                                               "padded_driver_staged"}
    assert {phase for phase, _ in script.WAYS.values()} == set(script.PHASES)


def test_a_phase_sets_the_switches_read_when_a_kernel_is_built(monkeypatch):
    from gpucourse.kernels.sgemm import vectorized

    script = _ring_pairs_script()
    monkeypatch.setattr(vectorized, "PEELED_STORES", False)
    monkeypatch.setattr(vectorized, "STAGED_STORES", False)
    monkeypatch.setattr(pipelined, "STEP_SCALAR_COPIES", False)
    monkeypatch.setattr(vectorized, "RING_COPY_OVERLAP", False)
    monkeypatch.setattr(entry_point, "RING_COPY_WIDE", False)
    try:
        for phase, wanted in (("stepped", (False, False, True, False, False)),
                              ("peeled", (True, False, False, False, False)),
                              ("staged", (False, True, False, False, False)),
                              ("overlap", (False, False, False, True, False)),
                              ("wide", (False, False, False, False, True)),
                              ("registers", (False, False, False, False, False))):
            script.set_phase(phase)
            assert (vectorized.PEELED_STORES, vectorized.STAGED_STORES,
                    pipelined.STEP_SCALAR_COPIES, vectorized.RING_COPY_OVERLAP,
                    entry_point.RING_COPY_WIDE) == wanted, phase
        with pytest.raises(ValueError, match="phase must be one of"):
            script.set_phase("stored")
    finally:
        fresh()


def test_each_way_is_judged_against_the_baseline_at_the_shapes_that_timed_both():
    from gpucourse.chapters.sgemm_held_out import ways_against

    rows = [{"m": 1, "n": 3, "k": 5, "way": way, "ms": ms}
            for way, ms in (("cublas", 1.0), ("padded", 2.0), ("padded_wide", 1.8),
                            ("padded_overlap", 2.2))]
    rows += [{"m": 2, "n": 3, "k": 5, "way": way, "ms": ms}
             for way, ms in (("padded", 4.0), ("padded_wide", 3.0))]
    rows += [{"m": 9, "n": 9, "k": 9, "way": "auto", "ms": 1.0},  # through registers
             {"m": 3, "n": 3, "k": 5, "way": "padded_wide", "ms": 1.0}]  # no baseline
    found = ways_against(rows)
    assert list(found) == ["padded_wide", "padded_overlap"]
    wide = found["padded_wide"]
    assert (wide["shapes"], wide["faster"]) == (2, 2)
    assert wide["change"] == pytest.approx((-0.25, -0.175, -0.1))
    assert found["padded_overlap"]["change"] == pytest.approx((0.1, 0.1, 0.1))
    assert found["padded_overlap"]["faster"] == 0
    assert ways_against(rows, "scalar") == {}


def test_copy_once_pads_each_b_on_its_first_call_only(monkeypatch):
    # The stand-in for entry_point._ring_copy_b behind "padded_copy_once":
    # whatever plan asks for it, each B (by its pointer) is copied once.
    script = _ring_pairs_script()
    made, copied = [], []

    def ring_copy_b(k, n, n4, device_id):
        made.append((k, n, n4))
        return lambda source, padded: copied.append((source, padded))

    monkeypatch.setattr(entry_point, "_ring_copy_b", ring_copy_b)
    seen = set()
    once = script.copy_once(entry_point, seen)
    for _ in range(2):  # two plans, as two turns build
        go = once(70, 31, 32, 0)
        go(1000, 2000)
        go(1000, 2000)
        go(3000, 2000)
    assert made == [(70, 31, 32)] * 2
    assert copied == [(1000, 2000), (3000, 2000)] and seen == {1000, 3000}



@pytest.fixture
def overlapping(monkeypatch):
    """vectorized.RING_COPY_OVERLAP on (read when a kernel is built), rings
    on a ragged B told to pad it."""
    from gpucourse.kernels.sgemm import vectorized

    assert vectorized.RING_COPY_OVERLAP is False  # off by default
    monkeypatch.setattr(vectorized, "RING_COPY_OVERLAP", True)
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", "padded")
    fresh()
    yield
    monkeypatch.undo()
    fresh()


def test_rings_that_wait_for_the_copy_of_b_multiply_exactly(overlapping):
    # On the simulator the wait does nothing (one kernel at a time); what is
    # checked is that the rings built with it are the same product.
    config = replace(SMALL, stages=2)
    for (m, n, k), splits in [((37, 31, 70), 1), ((37, 30, 72), 1), ((5, 33, 41), 2),
                              ((40, 31, 90), "stream")]:
        a, b = _integers((m, k), 7), _integers((k, n), 8)
        np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config, splits=splits),
                                      _reference(a, b), err_msg=f"{m} x {n} x {k}, {splits}")


def test_only_a_padded_ring_waits_for_the_grid_before_it(monkeypatch):
    from types import SimpleNamespace

    from numba.cuda import dispatcher

    from gpucourse.kernels.sgemm import padding, vectorized

    ring, through_registers = TileConfig(64, 128, 16, 8, 8, stages=2), TileConfig(64, 128, 16, 8, 8)
    assert not vectorized.overlaps_the_copy(ring, padding.LOADS_ONLY)  # off by default
    try:
        vectorized.RING_COPY_OVERLAP = True
        assert vectorized.overlaps_the_copy(ring, padding.LOADS_ONLY)
        # On a GPU, only where griddepcontrol exists (compute capability 9.0).
        monkeypatch.setattr("gpucourse.device.on_gpu", lambda: True)
        for capability, overlaps in (((8, 6), False), ((9, 0), True), ((10, 0), True)):
            device = SimpleNamespace(compute_capability=capability)
            monkeypatch.setattr(dispatcher, "get_current_device", lambda d=device: d,
                                raising=False)
            assert vectorized.overlaps_the_copy(ring, padding.LOADS_ONLY) == overlaps, capability
        monkeypatch.undo()
        for config, mode in ((ring, True), (ring, False), (ring, padding.PAIRS),
                             (through_registers, padding.LOADS_ONLY), (None, padding.LOADS_ONLY)):
            assert not vectorized.overlaps_the_copy(config, mode), (config, mode)
    finally:
        vectorized.RING_COPY_OVERLAP = False


OVERLAP_PTX = """
import sys
from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import padding, vectorized
vectorized.RING_COPY_OVERLAP = sys.argv[1] == "on"
config = sgemm.TileConfig(64, 128, 16, 8, 8, stages=2)
kernel = sgemm._tiled_kernel("6", config, padding.LOADS_ONLY, False, False)
print(numba.cuda.compile_ptx(kernel.py_func, sgemm.SPLIT_SIGNATURE[:3], cc=(9, 0))[0])
"""


def test_the_padded_rings_wait_is_one_instruction_before_its_loop():
    # With the switch, the padded 64 x 128 ring's PTX holds one
    # griddepcontrol.wait, before the loop, and the same registers; without
    # it, none.
    found = {}
    for switch in ("off", "on"):
        text = compile_without_a_gpu(OVERLAP_PTX, switch)
        loop = innermost_loop(text, marker="fma.rn.f32", most=True)
        report = ptxas_report(text)
        found[switch] = (text.count("griddepcontrol.wait"),
                         sum("griddepcontrol" in x for x in loop),
                         int(re.search(r"Used (\d+) registers", report).group(1)))
    assert found["off"][:2] == (0, 0) and found["on"][:2] == (1, 0), found
    assert abs(found["on"][2] - found["off"][2]) <= 2, found


def test_a_dependent_launch_config_asks_for_overlap_or_names_what_it_needs():
    pytest.importorskip("cuda.core")
    from gpucourse.kernels.launch import launch_config

    plain = launch_config((4, 2), 128)
    assert not getattr(plain, "programmatic_stream_serialization", False)
    try:
        dependent = launch_config((4, 2), 128, 0, True)
    except RuntimeError as error:  # an older cuda.core
        assert "cuda.core 1.2 or newer" in str(error)
    else:
        assert dependent.programmatic_stream_serialization is True
        assert tuple(dependent.grid) == (4, 2, 1) and tuple(dependent.block) == (128, 1, 1)


def test_the_wide_copy_pads_b_exactly_with_zeros_beyond_it():
    # pad_copy_wide against numpy: ragged columns (1, 2 and 3 past a multiple
    # of 4), rows padded too (as pad_copies pads B's K), a single column.
    from gpucourse.kernels.sgemm import padding

    rng = np.random.default_rng(33)
    for rows, cols, padded_rows in [(9, 13, 9), (5, 30, 8), (3, 31, 3), (7, 1, 8), (33, 8, 36)]:
        source = rng.standard_normal((rows, cols)).astype(np.float32)
        padded = np.full((padded_rows, padding.rounded_up_to_4(cols)), np.nan, np.float32)
        grid = padding.pad_grid_wide(*padded.shape)
        padding.pad_copy_wide[grid, padding.PAD_BLOCK](source, padded)
        wanted = np.zeros_like(padded)
        wanted[:rows, :cols] = source
        np.testing.assert_array_equal(padded, wanted, err_msg=f"{rows} x {cols}")
    with pytest.raises(ValueError, match="a multiple of 4 floats long, got 13"):
        padding.pad_grid_wide(9, 13)


@pytest.mark.parametrize("wide", [True, False], ids=["four-floats", "one-float"])
def test_rings_on_a_b_copied_four_floats_a_thread_multiply_exactly(monkeypatch, wide):
    monkeypatch.setattr(entry_point, "RING_COPY_WIDE", wide)
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", "padded")
    fresh()
    try:
        config = replace(SMALL, stages=2)
        for (m, n, k), splits in [((37, 31, 70), 1), ((37, 30, 72), 1), ((5, 33, 41), 2)]:
            a, b = _integers((m, k), 9), _integers((k, n), 10)
            np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config, splits=splits),
                                          _reference(a, b), err_msg=f"{m} x {n} x {k}, {splits}")
    finally:
        monkeypatch.undo()
        fresh()


WIDE_COPY_PTX = """
from gpucourse.kernels.sgemm import padding
from gpucourse.kernels.sgemm.split_k import C_MATRIX
for wide, early in ((False, False), (True, False), (False, True), (True, True)):
    kernel = padding.PAD_COPIES[wide, early]
    print(numba.cuda.compile_ptx(kernel.py_func, (C_MATRIX, C_MATRIX), cc=(9, 0))[0])
    print("=== next kernel ===")
"""


def test_the_wide_copy_stores_sixteen_bytes_at_once_and_the_early_ones_let_the_ring_start():
    # In the PTX a GPU would run: pad_copy stores one float a thread,
    # pad_copy_wide one 16-byte vector and no single float; the copies a
    # ring overlaps (RING_COPY_OVERLAP) first let it start its blocks, once,
    # before any load, and the others never do.
    narrow, wide, narrow_early, wide_early = compile_without_a_gpu(WIDE_COPY_PTX).split(
        "=== next kernel ===")[:4]
    assert narrow.count("st.global.f32") == 1 and "st.global.v4.f32" not in narrow
    assert wide.count("st.global.v4.f32") == 1 and "st.global.f32" not in wide
    assert wide.count("ld.global.f32") == 4
    for plain, early in ((narrow, narrow_early), (wide, wide_early)):
        assert "griddepcontrol" not in plain
        assert early.count("griddepcontrol.launch_dependents") == 1
        assert early.index("griddepcontrol.launch_dependents") < early.index("ld.global")
        assert early.count("st.global") == plain.count("st.global")


def test_the_depth_grid_holds_every_ring_tile_in_every_regime_it_has_at_every_depth():
    # benchmarks/sgemm_kernel_times.py --depth-grid: the runs a price for
    # reading B as given by how full the SM is and how deep K runs needs.
    from gpucourse.kernels.sgemm import shape_model

    script = benchmark_script("sgemm_kernel_times")
    entry = shape_model.gpu_entry("NVIDIA H200")
    for parity, n_mod_4 in (("odd", {1, 3}), ("even", {2})):
        grid = script.depth_grid(sgemm, "NVIDIA H200", parity)
        cells = {(shape_model.tile_key(config), regime) for _, config, regime in grid}
        tiles = {tile for tile, _ in cells}
        assert {"64x64x16 8x4 s2", "64x128x16 8x8 s2"} <= tiles
        for tile in tiles:  # one and full always; part where a tile holds more than two
            assert {(tile, "one"), (tile, "full")} <= cells
        assert ("64x128x16 8x8 s2", "part") in cells
        # part of an SM at both ends where a tile holds four or more: two
        # blocks, and one short of full (three of a 64 x 128 ring's four)
        parts = {(shape_model.tile_key(config), m) for (m, _, _), config, regime in grid
                 if regime == "part"}
        assert len(grid) == 3 * (len(cells) + len(parts) - len({t for t, _ in parts}))
        busiest_of = {}
        for (m, n, k), config, regime in grid:
            assert n % 4 in n_mod_4 and k % config.bk == 0 and config.stages
            cost = shape_model.plan_cost((m, n, k), config, 1, entry)
            busiest, resident = cost["busiest_sm_blocks"], cost["blocks_per_sm"]
            assert cost["blocks"] == busiest * entry["sms"], (m, n, k)  # every SM alike
            assert shape_model.blocks_regime(busiest, resident) == regime, (m, n, k, regime)
            busiest_of.setdefault((shape_model.tile_key(config), regime), set()).add(
                (busiest, resident))
        assert busiest_of[("64x128x16 8x8 s2", "part")] == {(2, 4), (3, 4)}
        # each cell at one depth in each band of a block's steps of K: every
        # band's share measured (the grid of K 256, 1024, 4096 had no
        # shallow one)
        bands = {}
        for (m, n, k), config, regime in grid:
            steps = shape_model.plan_cost((m, n, k), config, 1, entry)["block_steps"]
            bands.setdefault((shape_model.tile_key(config), m), []).append(
                shape_model.depth_band(steps))
        assert all(sorted(found) == ["deep", "middle", "shallow"] for found in bands.values())
        # a grid run in parts: only the regimes asked for
        full = script.depth_grid(sgemm, "NVIDIA H200", parity, regimes=("full",))
        assert full == [cell for cell in grid if cell[2] == "full"]
        plans = script.depth_grid_plans(grid[0][0], grid[0][1])
        assert [ring_b for _, _, ring_b in plans.values()] == (
            ["padded", "scalar"] + (["pairs"] if parity == "even" else []))
    with pytest.raises(ValueError, match="'odd' or 'even'"):
        script.depth_grid(sgemm, "NVIDIA H200", "ragged")
    with pytest.raises(ValueError, match="some of one, part, full, got most"):
        script.depth_grid(sgemm, "NVIDIA H200", "odd", regimes=("one", "most"))
