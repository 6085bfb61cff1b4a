"""Week 8: single-launch split-K in gpucourse.kernels.sgemm (issue 16, deep K).

With splits > 1 and split_sum="atomic" (matmul's default), one launch has a
third grid dimension: block z multiplies slice z of K (a multiple of 16
columns, the last one ragged) and adds its outputs into C, zeroed first,
with float32 atomic adds. Checked here on Numba's CUDA simulator against
numpy in float64 on ragged shapes (integer-valued inputs, whose sums are
exact in any order, so the comparison is exact), with C poisoned before the
call; splits=1 stays the one-launch, store-once kernel; and, without a GPU,
the PTX for an H100: atomic adds instead of stores, 128-bit loads, no spills.
The partials path and NaN/Inf through both sums: test_sgemm's split-K test.
Nothing here is timed: benchmarks/sgemm_shapes.py --split-k does that.
"""

import json
import re

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, entry_point
from ptx_helpers import compile_without_a_gpu, ptxas_report
from test_sgemm import ATOL, RTOL, SMALL_TILES, _random, _reference
from test_sgemm_level7 import ONE_PATCH

# (m, n, k), splits: K ragged (not a multiple of 4 or 16) in 2 or 3 slices
# (70 in slices of 48 or 32); rows a multiple of 4 (the 128-bit loads) with
# a ragged last slice of 8; K shorter than splits x 16 (20 with splits=4:
# two slices of 16 and 4).
CASES = [((17, 20, 70), 2), ((17, 20, 70), 3), ((17, 20, 70), 4), ((13, 24, 72), 3),
         ((5, 7, 20), 4)]


def _integers(shape, seed):
    """Small whole numbers as float32: every partial sum is exact in float32."""
    return np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float32)


def _no_partials(*args, **kwargs):
    raise AssertionError("the partial-products path ran")


@pytest.mark.parametrize("level, config", [("6", SMALL_TILES), ("7", ONE_PATCH)],
                         ids=["level6", "level7"])
def test_one_launch_split_k_is_exact_on_ragged_shapes(level, config, monkeypatch):
    from gpucourse.device import cuda

    monkeypatch.setattr(entry_point, "sum_splits", _no_partials)  # one launch, no buffer
    for index, ((m, n, k), splits) in enumerate(CASES):
        a, b = _integers((m, k), index), _integers((k, n), 30 + index)
        kernel, grid, block, chunk = sgemm.split_kernel_for(level, (m, n, k), splits,
                                                            config=config)
        assert grid[2] == len(sgemm.split_ranges(k, splits)) > 1 and chunk % 16 == 0
        # C poisoned first: matmul must zero it before the slices add into it.
        out = cuda.to_device(np.full((m, n), np.nan, np.float32))
        c = sgemm.matmul(cuda.to_device(a), cuda.to_device(b), level, config=config,
                         splits=splits, out=out)
        np.testing.assert_array_equal(c.copy_to_host(), _reference(a, b),
                                      err_msg=f"level {level}, {m} x {n} x {k}, {splits} splits")
    a, b = _random((17, 70), 1), _random((70, 20), 2)  # and random floats, to float32 rounding
    np.testing.assert_allclose(sgemm.matmul(a, b, level, config=config, splits=3),
                               _reference(a, b), rtol=RTOL, atol=ATOL)


def test_the_split_kernel_adds_into_c_and_splits_1_stores_as_before(monkeypatch):
    a, b = _integers((13, 40), 7), _integers((40, 24), 8)
    expected = _reference(a, b)
    # The kernel by itself adds each slice's share: into ones, C + 1.
    kernel, grid, block, chunk = sgemm.split_kernel_for(6, (13, 24, 40), 3, config=SMALL_TILES)
    assert (grid, chunk) == ((1, 1, 3), 16)
    ones = np.ones((13, 24), np.float32)
    kernel[grid, block](a, b, ones, np.uint64(chunk))
    np.testing.assert_array_equal(ones, expected + 1)
    # splits=1 is the one-launch kernel that stores C: no zeroing, no partials,
    # the same bits as without splits (and a K too short to split, likewise).
    one = sgemm.matmul(a, b, 6, config=SMALL_TILES)
    monkeypatch.setattr(entry_point, "zero_matrix", _no_partials)
    monkeypatch.setattr(entry_point, "sum_splits", _no_partials)
    for splits, k in ((1, 40), (4, 10)):
        for split_sum in sgemm.SPLIT_SUMS:
            c = sgemm.matmul(a[:, :k], b[:k], 6, config=SMALL_TILES, splits=splits,
                             split_sum=split_sum)
            np.testing.assert_array_equal(c, one if k == 40 else _reference(a[:, :k], b[:k]))


def test_split_kernel_for_checks_its_arguments():
    with pytest.raises(ValueError, match="splits applies to levels 5, 6, 7 and auto"):
        sgemm.split_kernel_for(3, (4, 4, 64), 2)
    with pytest.raises(ValueError, match="splits must be a whole number"):
        sgemm.split_kernel_for(6, (4, 4, 64), None)
    with pytest.raises(ValueError, match="shape must be a tuple"):
        sgemm.split_kernel_for(6, (4, 64), 2)
    with pytest.raises(ValueError, match="split-K applies to levels 5, 6, 7"):
        sgemm._tiled_kernel("4b", sgemm.CONFIG_4B, False, True)
    # auto: level 6's kernel with auto's tiles for the shape.
    kernel, grid, block, chunk = sgemm.split_kernel_for("auto", (1024, 1024, 8192), 4)
    config = sgemm.auto_config((1024, 1024, 8192))
    assert kernel is sgemm._tiled_kernel("6", config, True, True)
    assert grid == (1024 // config.bn, 1024 // config.bm, 4) and chunk == 2048
    assert block == (config.threads,)


# -----------------------------------------------------------------------------
# What a GPU would run: the split kernels' PTX for compute capability 9.0

PTX_SCRIPT = """
import json, sys
from gpucourse.kernels import sgemm
found = []
for level, fields in json.loads(sys.argv[1]):
    config = (sgemm.WarpTileConfig if level == "7" else sgemm.TileConfig)(**fields)
    kernel = sgemm._tiled_kernel(level, config, True, True)
    found.append(numba.cuda.compile_ptx(kernel.py_func, sgemm.SPLIT_SIGNATURE, cc=(9, 0))[0])
print(json.dumps(found))
"""

# Auto's tiles at 1024 x 1024 x 8192 on the H100 (64 x 128, 8 x 4 per
# thread), and level 7's default (128 outputs per thread).
DEEP_K = TileConfig(64, 128, 16, 8, 4)


@pytest.fixture(scope="module")
def split_ptx():
    from dataclasses import asdict

    wanted = [("6", asdict(DEEP_K)), ("7", asdict(sgemm.WARP_TILE_DEFAULT))]
    printed = compile_without_a_gpu(PTX_SCRIPT, json.dumps(wanted))
    return json.loads(printed.strip().splitlines()[-1])


def test_split_kernels_add_with_atomics_and_keep_128_bit_loads_and_registers(split_ptx):
    for text, config in zip(split_ptx, (DEEP_K, sgemm.WARP_TILE_DEFAULT)):
        outputs = config.tm * config.tn * getattr(config, "wm_iter", 1) * getattr(config, "wn_iter", 1)
        assert ".target sm_90" in text
        # Every output of the thread added once into C; C never stored.
        atomics = text.count("atom.global.add.f32") + text.count("red.global.add.f32")
        assert atomics == outputs
        assert "st.global" not in text
        # The slice's tiles still come 128 bits at a time, one barrier per step of K.
        loads = (config.bm * config.bk + config.bk * config.bn) // 4 // config.threads
        assert text.count("ld.global.v4.f32") == loads
        assert text.count("bar.sync") == 1 and ".local" not in text
        report = ptxas_report(text)
        registers = int(re.search(r"[Uu]sed (\d+) registers", report).group(1))
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
        # ptxas 13 gave 79 (estimate 76) and 213 (estimate 216).
        assert registers <= 255 and abs(registers - config.register_estimate) <= 24
