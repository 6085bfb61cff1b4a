"""Week 8: a ring reading a ragged B in 16-byte chunks wherever its rows
start (issue 33, twenty-sixth session; ``padding.SHIFTED``,
``entry_point.RING_SHIFTED``, off: a GPU timed it slower).

Where n is odd no row of B but one in four starts on 16 bytes, and none in
two on 8: a ring copies B first into padded rows (a second kernel and
launch) or reads it 4 bytes a copy. "Shifted" copies each row of a tile as
the 16-byte chunks of memory that hold it, one more than the row's floats
need, into a raw tile where the row starts (its address % 16) / 4 floats
in; each step the block then moves the rows into an aligned tile, which the
loop reads 16 bytes at a time. Floats past a row's end are the next row's,
and they meet only C's columns past n. Offline the 64 x 128 ring's main
loop issues about 1,290 instructions per 1,024 FMAs, against 1,224 with B
aligned and 1,384 read 4 bytes a copy.

Timed on an H200 (twenty-seventh session, sgemm_ring_pairs.py) the shifted
rings were slower than the best other way at every shape, and the peeled
stores within a few percent either way: both stay off."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from gpucourse.chapters import sgemm_held_out
from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, entry_point, kernel_choice, padding, pipelined
from gpucourse.kernels.sgemm import vectorized as vectorized_module
from ptx_helpers import compile_without_a_gpu, ptxas_report
from test_sgemm_pipelined import PTX_SCRIPT
from test_sgemm_split_k import _integers

RING = replace(TileConfig(32, 32, 8, 4, 8), stages=2)


def _reference(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


@pytest.mark.parametrize("m, n, k", [(37, 33, 21), (5, 35, 17), (40, 31, 9), (33, 70, 40),
                                     (3, 1, 5), (64, 61, 64)])
def test_the_shifted_kernel_is_exact_wherever_bs_rows_start(m, n, k):
    # Odd, even and single columns; K shorter and longer than a step; n
    # shorter than a tile (every chunk past a row's end), one past it.
    from gpucourse.device import cuda

    a, b = _integers((m, k), 3), _integers((k, n), 4)
    kernel, grid, block = sgemm.kernel_choice.kernel_for("6", (m, n, k), padding.SHIFTED, RING)
    c = cuda.to_device(np.full((m, n), np.nan, dtype=np.float32))
    kernel[grid, block](cuda.to_device(a), cuda.to_device(b), c)
    np.testing.assert_array_equal(c.copy_to_host(), _reference(a, b))


@pytest.mark.parametrize("ragged_b", ["scalar", "padded"])
def test_matmul_reads_b_shifted_only_where_told_and_where_it_may(monkeypatch, ragged_b):
    # RING_SHIFTED (off by default): a ring on a ragged B that it does not
    # read in pairs reads it shifted, whether the model would have read it
    # 4 bytes a copy or copied it first (nothing is copied); K whole, split-K
    # and stream-K all exact.
    assert entry_point.RING_SHIFTED is False
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", ragged_b)
    monkeypatch.setattr(entry_point, "RING_SHIFTED", True)
    monkeypatch.setattr(entry_point, "padded_b", lambda *_: pytest.fail("B was copied"))
    kinds = []
    for name in ("kernel_for", "_split_kernel", "_stream_kernel"):
        real = getattr(entry_point, name)
        monkeypatch.setattr(entry_point, name, lambda *args, real=real: (
            kinds.append(next(x for x in args if x in (True, False, padding.SHIFTED,
                                                        padding.PAIRS, padding.LOADS_ONLY))),
            real(*args))[1])
    for (m, n, k), splits, kind in [((37, 33, 70), 1, padding.SHIFTED),
                                    ((5, 35, 41), 2, padding.SHIFTED),
                                    ((40, 31, 90), "stream", padding.SHIFTED),
                                    ((33, 36, 71), 1, True),  # aligned rows: as before
                                    # even: in pairs where read as given
                                    ((37, 30, 70), 1, padding.PAIRS if ragged_b == "scalar"
                                     else padding.SHIFTED)]:
        kinds.clear()
        a, b = _integers((m, k), 5), _integers((k, n), 6)
        np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=RING, splits=splits),
                                      _reference(a, b), err_msg=f"{m} x {n} x {k}")
        assert set(kinds) == {kind}, (m, n, k, kinds)
    # A B whose rows lie apart in memory (a slice of columns) is read as the
    # model says (4 bytes a copy, or copied first): shifted, its rows'
    # chunks would hold floats of other columns.
    from gpucourse.device import cuda

    monkeypatch.undo()
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", ragged_b)
    monkeypatch.setattr(entry_point, "RING_SHIFTED", True)
    real = entry_point.kernel_for
    monkeypatch.setattr(entry_point, "kernel_for", lambda key, shape, v, c: (
        kinds.append(v), real(key, shape, v, c))[1])
    kinds.clear()
    wide, a = _integers((70, 40), 7), _integers((37, 70), 8)
    out = sgemm.matmul(cuda.to_device(a), cuda.to_device(wide)[:, :33], 6, config=RING)
    np.testing.assert_array_equal(out.copy_to_host(), _reference(a, wide[:, :33]))
    assert kinds == [False if ragged_b == "scalar" else padding.LOADS_ONLY]


def test_a_shifted_copy_never_reads_past_bs_last_float():
    # B the first rows of a larger matrix: the chunks of its last rows are
    # copied only up to its last float (on the simulator a read past it
    # raises; on a GPU it would read the rows after). And a split-K slice
    # whose K ends before B's rows do gets zeros past its end.
    from gpucourse.device import cuda

    big = np.full((80, 33), np.nan, dtype=np.float32)
    big[:41] = _integers((41, 33), 9)
    a = _integers((20, 41), 10)
    b = cuda.to_device(big)[:41]
    kernel, grid, block = sgemm.kernel_choice.kernel_for("6", (20, 33, 41), padding.SHIFTED, RING)
    c = cuda.device_array((20, 33), dtype=np.float32)
    kernel[grid, block](cuda.to_device(a), b, c)
    np.testing.assert_array_equal(c.copy_to_host(), _reference(a, big[:41]))


def test_only_rings_that_fit_read_b_shifted(monkeypatch):
    # 64 x 256 rings (two raw copies of B's rows and the aligned tile over
    # 48 KB) and tiles through registers read B 4 bytes a copy even with
    # RING_SHIFTED; the menu's other rings fit.
    for config, fits in [(TileConfig(64, 128, 16, 8, 8, stages=2), True),
                         (TileConfig(64, 64, 16, 8, 4, stages=2), True),
                         (TileConfig(128, 128, 16, 8, 8, stages=2), True),
                         (TileConfig(64, 256, 16, 8, 16, stages=2), False),
                         (TileConfig(64, 64, 8, 8, 4), False)]:
        assert pipelined.shifted_fits(config) is fits, config
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", "scalar")
    monkeypatch.setattr(entry_point, "RING_SHIFTED", True)
    monkeypatch.setattr(pipelined, "_shifted_layout", lambda *_: (_ for _ in ()).throw(
        ValueError("no layout")))
    monkeypatch.setattr(entry_point, "shifted_fits", pipelined.shifted_fits)
    kinds = []
    real = entry_point.kernel_for
    monkeypatch.setattr(entry_point, "kernel_for", lambda key, shape, v, c: (
        kinds.append(v), real(key, shape, v, c))[1])
    a, b = _integers((37, 70), 5), _integers((70, 33), 6)
    np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=RING), _reference(a, b))
    assert kinds == [False]


def test_the_layout_a_shifted_ring_needs_is_named():
    # A thread's rows must share one shift: they lie a multiple of 4 rows
    # apart, so bn / 4 threads copy a row and threads / (bn / 4) is one.
    assert pipelined._shifted_layout(128, 16, 128) == (32, 4)
    assert pipelined._shifted_layout(64, 16, 128) == (16, 8)
    with pytest.raises(ValueError, match="a multiple of 4 that divides bk"):
        pipelined._shifted_layout(128, 16, 64)  # 2 rows apart
    # 64 x 256 tiles: two raw copies of B's rows and the aligned tile do not
    # fit the 48 KB a block may declare.
    with pytest.raises(ValueError, match="shifted ring's tiles need"):
        sgemm.kernel_choice._tiled_kernel("6", TileConfig(64, 256, 16, 8, 16, stages=2),
                                          padding.SHIFTED)


@pytest.fixture(scope="module")
def shifted_ptx():
    from dataclasses import asdict

    ring = TileConfig(64, 128, 16, 8, 8, stages=2)
    wanted = [[{**asdict(ring), "level": "6"}, padding.SHIFTED, False]]
    printed = compile_without_a_gpu(PTX_SCRIPT, json.dumps(wanted))
    return ring, json.loads(printed.strip().splitlines()[-1])[0]


def test_the_shifted_rings_ptx(shifted_ptx):
    # The 64 x 128 ring: A 4 bytes a copy, B 16 bytes a copy (with a byte
    # count: a chunk past B's end is copied in part), each copy site written
    # for steps inside B and at its end; the moves read the raw tile a float
    # at a time where the shift is not 0, 16 bytes where it is; C stored a
    # float at a time; three barriers (the step's, the move's, the walk's
    # end); no spills, and registers for three blocks an SM.
    ring, text = shifted_ptx
    a_copies = ring.bm * ring.bk // ring.threads
    b_copies = ring.bk * ring.bn // 4 // ring.threads + 1  # and one row's last chunk
    assert text.count("cp.async.ca.shared.global") == 2 * a_copies
    assert text.count("cp.async.cg.shared.global") == 2 * 2 * b_copies
    assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16, %r", text)
    moves = ring.bk * ring.bn // 4 // ring.threads
    assert text.count("ld.shared.f32") == 4 * moves
    assert "st.global.f32" in text and "st.global.v4.f32" not in text
    assert text.count("bar.sync") == 3 and ".local" not in text
    report = ptxas_report(text)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
    registers = int(re.search(r"[Uu]sed (\d+) registers", report).group(1))
    assert registers <= 168, report


@pytest.fixture
def peeled_stores(monkeypatch):
    """vectorized.PEELED_STORES on (read when a kernel is built), and the
    kernels built either side of it forgotten."""
    kernel_choice._compiled.cache_clear()
    kernel_choice._tiled_kernel.cache_clear()
    monkeypatch.setattr(vectorized_module, "PEELED_STORES", True)
    yield
    monkeypatch.undo()
    kernel_choice._compiled.cache_clear()
    kernel_choice._tiled_kernel.cache_clear()


@pytest.mark.parametrize("mode", [padding.SHIFTED, padding.LOADS_ONLY])
def test_peeled_stores_write_exactly_c_and_nothing_past_it(peeled_stores, mode):
    # Each four of a row stored as its address allows (16 bytes, two 8, or a
    # float, 8 and a float), the fours at C's right edge a float at a time:
    # exact, whether C's rows are n floats apart or n + 3 (C the first n
    # columns of a wider matrix, each row starting somewhere else in its 16
    # bytes), and nothing written past a row's end (the NaN there stays).
    # B padded for "loads", as matmul pads it.
    from gpucourse.device import cuda

    for m, n, k in [(37, 33, 21), (9, 66, 12), (40, 31, 9), (3, 1, 5), (33, 70, 40)]:
        a, b = _integers((m, k), 11), _integers((k, n), 12)
        given = b if mode == padding.SHIFTED else np.pad(b, ((0, 0), (0, -n % 4)))
        kernel, grid, block = kernel_choice.kernel_for("6", (m, n, k), mode, RING)
        for gap in (0, 3):
            wide = cuda.to_device(np.full((m, n + gap), np.nan, dtype=np.float32))
            kernel[grid, block](cuda.to_device(a), cuda.to_device(given), wide[:, :n])
            got = wide.copy_to_host()
            np.testing.assert_array_equal(got[:, :n], _reference(a, b), err_msg=f"{m}x{n}x{k}")
            assert np.isnan(got[:, n:]).all(), (m, n, k, gap)


def test_the_peeled_stores_ptx(peeled_stores):
    # The 64 x 128 shifted ring with peeled stores: each of a thread's 16
    # fours has its 16-byte store, its two 8-byte ones and its float, 8
    # bytes and float (the fours at C's edge a float at a time); no spills,
    # registers for three blocks an SM.
    from dataclasses import asdict

    ring = TileConfig(64, 128, 16, 8, 8, stages=2)
    script = PTX_SCRIPT.replace(
        "from gpucourse.kernels import sgemm",
        "from gpucourse.kernels import sgemm\n"
        "import gpucourse.kernels.sgemm.vectorized as vectorized\n"
        "vectorized.PEELED_STORES = True", 1)
    wanted = [[{**asdict(ring), "level": "6"}, padding.SHIFTED, False]]
    text = json.loads(compile_without_a_gpu(script, json.dumps(wanted)).strip().splitlines()[-1])[0]
    fours = ring.tm * ring.tn // 4
    assert text.count("st.global.v4.f32") == fours
    assert text.count("st.global.v2.f32") == 3 * fours
    report = ptxas_report(text)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
    assert int(re.search(r"[Uu]sed (\d+) registers", report).group(1)) <= 168, report



def _ring_run(path, rows):
    path.write_text(json.dumps({"benchmark": "sgemm_ring_pairs", "gpu": "NVIDIA H200",
                                "date": "2026-11-30", "versions": {}, "results": rows}))


def _ring_row(n, way, ms, err=0.0):
    return {"m": 600, "n": n, "k": 300, "way": way, "ms": ms, "max_rel_err": err}


def test_shifted_rings_are_judged_against_the_fastest_other_way(tmp_path):
    # A hand-made run: at n = 701 shifted (1.1) against padded (1.0) and
    # scalar (1.2); at n = 702 (0.9) against pairs (1.0). Peeled stores at
    # n = 701 only, 0.95 of padded's time.
    rows = [
        _ring_row(701, "padded", 1.0), _ring_row(701, "scalar", 1.2),
        _ring_row(701, "shifted", 1.1), _ring_row(701, "padded_peeled", 0.95),
        _ring_row(702, "padded", 1.3), _ring_row(702, "pairs", 1.0),
        _ring_row(702, "shifted", 0.9), _ring_row(702, "cublas", 0.5)]
    path = tmp_path / "run.json"
    _ring_run(path, rows)
    found = sgemm_held_out.shifted_rings(path)
    assert found["shifted"]["shapes"] == 2 and found["shifted"]["slower"] == 1
    assert found["shifted"]["over_best"] == pytest.approx((-0.1, 0.0, 0.1))
    assert found["peeled"] == {"shapes": 1, "faster": 1,
                               "change": pytest.approx((-0.05, -0.05, -0.05))}
    _ring_run(path, rows + [_ring_row(703, "shifted", 1.0, 0.5)])
    with pytest.raises(ValueError, match="shifted was wrong at 600 x 703 x 300"):
        sgemm_held_out.shifted_rings(path)
    _ring_run(path, rows[:3])
    with pytest.raises(ValueError, match="did not time the shifted and the peeled ways"):
        sgemm_held_out.shifted_rings(path)


def test_on_the_gpu_shifted_lost_everywhere_and_peeled_stores_came_out_even():
    found = sgemm_held_out.shifted_rings()
    if found is None:
        pytest.skip("the shifted rings' run is not committed")
    shifted, peeled = found["shifted"], found["peeled"]
    assert shifted["shapes"] == shifted["slower"] == 29
    assert shifted["over_best"][1] > 0.15  # the median call, 15% longer or more
    assert peeled["shapes"] == 29 and peeled["faster"] == 19
    assert abs(peeled["change"][1]) < 0.02 and peeled["change"][0] < -0.05
    assert entry_point.RING_SHIFTED is False and vectorized_module.PEELED_STORES is False
