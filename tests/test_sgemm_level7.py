"""Week 8: level 7 of gpucourse.kernels.sgemm, warp tiling.

Its arithmetic and indexing are checked on Numba's CUDA simulator with small
warp-tile configurations (two warps each; one where every thread computes a
single patch, one where it computes 2 x 2 patches), against numpy in float64
on ragged shapes, with NaN and Inf; its configuration checks by hand-worked
cases; and what a GPU would run (128-bit loads, shared memory, no spills) from
the PTX compiled for an H100 on this machine, without a GPU. The default
configuration (WARP_TILE_DEFAULT, 128 x 256 tiles) runs once, through
test_sgemm's every-level test; the hand-worked cases and the PTX take the
worklog's sizes (WARP_TILE_WORKLOG), which the chapter draws. Nothing here is timed: benchmarks/sgemm_level7.py does that on a GPU.
"""

import json

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, WarpTileConfig
from ptx_helpers import compile_without_a_gpu, ptxas_report
from test_sgemm import ATOL, RTOL, _random, _reference, check_nan_and_inf

# Two warps side by side, each 16 x 32: a thread computes one 4 x 4 patch.
ONE_PATCH = WarpTileConfig(bm=32, bn=32, bk=8, wm=16, wn=32, wn_iter=1, tm=4, tn=4, threads=64)
# Two warps, each 32 x 64 in two passes down and two across: 2 x 2 patches of 4 x 4.
TWO_BY_TWO = WarpTileConfig(bm=64, bn=64, bk=8, wm=32, wn=64, wn_iter=2, tm=4, tn=4, threads=64)

# Ragged (no size a multiple of a tile or of 4: the scalar loads), aligned rows
# (k and n multiples of 4: the 128-bit loads) over several tiles of K, one row,
# one column, K = 1, and the empty sum (K = 0).
SHAPES = [(33, 37, 29), (70, 36, 24), (1, 24, 1), (9, 12, 1), (1, 1, 17), (13, 1, 6), (5, 3, 0)]


def _fails(function, *args, naming, **kwargs):
    with pytest.raises(ValueError, match=naming):
        function(*args, **kwargs)


@pytest.mark.parametrize("config", [ONE_PATCH, TWO_BY_TWO], ids=["one-patch", "2x2-patches"])
def test_level7_matches_numpy_on_ragged_shapes(config):
    assert (config.wm_iter, config.wn_iter) == ((1, 1) if config is ONE_PATCH else (2, 2))
    for index, (m, n, k) in enumerate(SHAPES):
        a, b = _random((m, k), index), _random((k, n), 50 + index)
        c = sgemm.matmul(a, b, "7", config=config)
        assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (m, n)
        np.testing.assert_allclose(c, _reference(a, b), rtol=RTOL, atol=ATOL,
                                   err_msg=f"level 7, {config}, at m, n, k = {m}, {n}, {k}")


@pytest.mark.parametrize("vectorized", [True, False])
def test_every_output_is_written_once_on_both_load_paths(vectorized):
    # Poisoned output, three blocks across and two down, several tiles of K:
    # each element of C must be written, by the right thread, on both paths.
    a, b = _random((70, 32), 1), _random((32, 72), 2)
    kernel = sgemm._make_warp_tiled_kernel(ONE_PATCH, vectorized)
    out = np.full((70, 72), np.nan, np.float32)
    kernel[(3, 3), (ONE_PATCH.threads,)](a, b, out)
    np.testing.assert_allclose(out, _reference(a, b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("unroll", [1, 4, 8])
def test_dot_loop_written_out_1_4_or_all_8_steps_per_pass_gives_the_same_product(unroll):
    a, b = _random((33, 16), 3), _random((16, 36), 4)
    kernel = sgemm._make_warp_tiled_kernel(ONE_PATCH, True, unroll)
    out = np.full((33, 36), np.nan, np.float32)
    kernel[(2, 2), (ONE_PATCH.threads,)](a, b, out)
    np.testing.assert_allclose(out, _reference(a, b), rtol=RTOL, atol=ATOL)
    _fails(sgemm._make_warp_tiled_kernel, ONE_PATCH, True, 3,
           naming=r"unroll must be one of 1, 2, 4, 8, 16, 32 and divide bk \(8\), got 3")
    _fails(sgemm._make_warp_tiled_kernel, ONE_PATCH, True, 16, naming="divide bk")


# The simulator runs kernels in numpy, which warns about 0 * Inf; a GPU does not.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_and_inf_propagate_like_numpy():
    check_nan_and_inf(lambda a, b: sgemm.matmul(a, b, "7", config=ONE_PATCH))


def test_device_arrays_and_split_k():
    from gpucourse.device import cuda

    a, b = _random((20, 48), 5), _random((48, 12), 6)
    c = sgemm.matmul(cuda.to_device(a), cuda.to_device(b), 7, config=ONE_PATCH)
    assert hasattr(c, "copy_to_host") and not isinstance(c, np.ndarray)
    np.testing.assert_allclose(c.copy_to_host(), _reference(a, b), rtol=RTOL, atol=ATOL)
    a, b = _random((9, 50), 7), _random((50, 13), 8)  # three slices of K, ragged
    np.testing.assert_allclose(sgemm.matmul(a, b, "7", config=ONE_PATCH, splits=3),
                               _reference(a, b), rtol=RTOL, atol=ATOL)


# -----------------------------------------------------------------------------
# Configurations


def test_default_and_candidates_pass_and_hand_worked_properties():
    worklog = sgemm.WARP_TILE_WORKLOG
    assert sgemm.check_warp_config(worklog) is worklog
    # 4 warps of 64 x 64; one pass of a warp is 64 x 16 (8 x 4 lanes of 8 x 4 patches).
    assert (worklog.warps, worklog.wm_iter, worklog.wn_iter) == (4, 1, 4)
    assert worklog.shared_bytes == 2 * 4 * (128 * 16 + 16 * 128) == 32768
    # 128 accumulators + 8 + 16 fragment values + 32 staged floats + 32 overhead.
    assert worklog.register_estimate == 128 + 24 + 32 + 32
    # The default: the same warps' tiles and patches, twice the block (8 warps),
    # so a thread stages half as much of each tile: 24 floats, not 32.
    default = sgemm.WARP_TILE_DEFAULT
    assert (default.bm, default.bn, default.warps, default.wm_iter, default.wn_iter) == (128, 256, 8, 1, 4)
    assert default.register_estimate == 128 + 24 + 24 + 32 and worklog in sgemm.WARP_TILE_CANDIDATES
    assert TWO_BY_TWO.wm_iter == 2 and TWO_BY_TWO.register_estimate == 64 + 16 + 16 + 32
    candidates = sgemm.WARP_TILE_CANDIDATES
    assert default in candidates and 8 <= len(candidates) <= 14
    assert len(set(candidates)) == len(candidates)
    for config in candidates:
        assert sgemm.check_warp_config(config) is config
        assert config.shared_bytes <= 48 * 1024 and config.register_estimate <= 255


def test_check_warp_config_names_each_constraint():
    def config(**changes):
        fields = {f: getattr(sgemm.WARP_TILE_WORKLOG, f) for f in
                  ("bm", "bn", "bk", "wm", "wn", "wn_iter", "tm", "tn", "threads")}
        return WarpTileConfig(**{**fields, **changes})

    check = sgemm.check_warp_config
    _fails(check, config(threads=100), naming="thread limit")
    _fails(check, config(threads=2048), naming="thread limit")
    _fails(check, config(wm=48), naming="warp tiling")  # 48 does not divide 128
    _fails(check, config(threads=256), naming="warp tiling")  # 4 warp tiles for 8 warps
    _fails(check, config(wn_iter=3), naming="warp patches")  # 3 * 4 does not divide 64
    _fails(check, config(wn=32, bn=64, wn_iter=8), naming="warp patches")  # 1 lane across
    _fails(check, config(bk=6), naming="vector alignment")
    _fails(check, config(tn=2, wn_iter=8), naming="vector alignment")
    # 1024 threads load A's 128 x 16 tile 4 float4 a row: 256 rows at a time, for 128 rows.
    _fails(check, WarpTileConfig(128, 128, 16, 32, 16, 1, 4, 4, 1024), naming="tile loading")
    # Two copies of 256 x 32 and 32 x 128: 8 * (8192 + 4096) bytes > 48 KiB.
    _fails(check, WarpTileConfig(256, 128, 32, 64, 64, 4, 8, 4, 256), naming="shared-memory limit")
    # 1 warp of 128 x 64, 256 accumulators: over 255 registers.
    _fails(check, WarpTileConfig(128, 64, 8, 128, 64, 4, 8, 4, 32), naming="register limit")
    _fails(check, config(wm=0), naming="wm must be >= 1")
    _fails(check, config(tn=4.0), naming="tn must be a whole number")
    _fails(check, TileConfig(128, 128, 8, 8, 8), naming="must be a WarpTileConfig")


def test_matmul_checks_which_config_goes_with_which_level():
    a, b = _random((4, 4), 0), _random((4, 4), 1)
    _fails(sgemm.matmul, a, b, 7, config=TileConfig(32, 32, 8, 4, 4),
           naming="must be a WarpTileConfig")
    _fails(sgemm.matmul, a, b, 6, config=ONE_PATCH, naming="config must be a TileConfig")
    _fails(sgemm.matmul, a, b, 3, config=ONE_PATCH, naming="7 \\(a WarpTileConfig\\)")
    _fails(sgemm.matmul, a, b, "7", config=WarpTileConfig(32, 32, 8, 16, 32, 1, 4, 4, 96),
           naming="warp tiling")
    _fails(sgemm.matmul, a, b, 8, naming="level must be one of 1, 2, 3, 4a, 4b, 5, 6, 7")


def test_level7_in_the_level_tables_and_models():
    assert sgemm.LEVELS[-1] == "7" and sgemm.LEVEL_NAMES["7"] == "warp tiling"
    kernel, grid, block = sgemm.kernel_for("7", (300, 500, 64))  # 128 x 256 tiles, 8 warps
    assert (grid, block) == ((2, 3), (256,))
    assert kernel is sgemm.kernel_for(7, (1, 1, 1))[0]  # compiled once per configuration
    model = sgemm.traffic_model("7", 4096, 4096, 4096, sgemm.WARP_TILE_WORKLOG)
    # 128 x 128 tiles: intensity 32 FLOP/byte, as level 4b's; shared loads (8 + 16)/128 per FMA.
    assert model["intensity_flop_per_byte"] == pytest.approx(32.0)
    assert model["shared_loads_per_fma"] == pytest.approx(24 / 128)
    if not sgemm.on_gpu():
        with pytest.raises(RuntimeError, match="needs a real GPU"):
            sgemm.resource_usage("7")


# -----------------------------------------------------------------------------
# What a GPU would run: the PTX for compute capability 9.0, compiled here

PTX_SCRIPT = """
import json, sys
from numba import float32, types
from gpucourse.kernels import sgemm
matrix = types.Array(float32, 2, "C")
found = {}
for name, vectorized in json.loads(sys.argv[1]):
    config = sgemm.WarpTileConfig(**json.loads(name))
    kernel = sgemm._tiled_kernel("7", config, vectorized)
    found[name + str(vectorized)] = numba.cuda.compile_ptx(
        kernel.py_func, (matrix, matrix, matrix), cc=(9, 0))[0]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def level7_ptx():
    """PTX of the worklog's configuration (128-bit and scalar loads) and of the
    candidate with two passes down, compiled in a process without the simulator."""
    from dataclasses import asdict

    wanted = [(json.dumps(asdict(sgemm.WARP_TILE_WORKLOG)), True),
              (json.dumps(asdict(sgemm.WARP_TILE_WORKLOG)), False),
              (json.dumps(asdict(sgemm.WARP_TILE_CANDIDATES[2])), True)]
    printed = compile_without_a_gpu(PTX_SCRIPT, json.dumps(wanted))
    texts = json.loads(printed.strip().splitlines()[-1])
    return [texts[name + str(vectorized)] for name, vectorized in wanted]


def test_level7_ptx_loads_128_bits_stages_in_shared_memory_and_keeps_accumulators_in_registers(
        level7_ptx):
    default, scalar, two_down = level7_ptx
    config = sgemm.WARP_TILE_WORKLOG
    for text in level7_ptx:
        assert ".target sm_90" in text
        assert ".shared .align 16" in text  # the tiles, 16-byte aligned for ld.shared.v4
        assert "ld.shared.v4.f32" in text and "st.shared.v4.f32" in text
        # No local memory: accumulators, fragments and staged tiles all in registers.
        assert ".local" not in text
        # One barrier per step of K (double buffering): a single bar.sync in the loop.
        assert text.count("bar.sync") == 1
    # Each thread's share of the next tiles, a float4 at a time: 4 of A and 4 of B.
    a_loads = config.bm * config.bk // 4 // config.threads
    b_loads = config.bk * config.bn // 4 // config.threads
    assert default.count("ld.global.v4.f32") == a_loads + b_loads
    assert "ld.global.f32" not in default and "ld.global.nc.f32" not in default
    assert "st.global.v4.f32" in default
    # On unaligned rows the same kernel reads scalars: no vector access to global memory.
    assert "ld.global.v4.f32" not in scalar and "st.global.v4.f32" not in scalar
    # Every FMA of the tile written out: 128 per step, DOT_UNROLL steps per pass
    # (by default all bk of them), once for each copy of the tiles.
    steps = sgemm._steps_per_pass(None, config.bk)
    per_step = config.wm_iter * config.wn_iter * config.tm * config.tn
    assert default.count("fma.rn.f32") == per_step * steps * 2
    # Fragments read four at a time: (wm_iter*tm + wn_iter*tn)/4 vector loads per step.
    vectors = (config.wm_iter * config.tm + config.wn_iter * config.tn) // 4
    assert default.count("ld.shared.v4.f32") == vectors * steps * 2
    assert two_down.count("fma.rn.f32") == 128 * sgemm._steps_per_pass(None, sgemm.WARP_TILE_CANDIDATES[2].bk) * 2


def test_level7_machine_code_keeps_every_accumulator_in_registers(level7_ptx):
    # ptxas, not only the PTX: 128 accumulators, the fragments and the staged
    # tiles fit the 255 registers a thread may have, with no spill to local memory.
    import re

    report = ptxas_report(level7_ptx[0])
    registers = int(re.search(r"[Uu]sed (\d+) registers", report).group(1))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
    assert 128 < registers <= 255
    # The configuration's estimate is a fair guide (ptxas gave 218 for 216 here).
    assert abs(registers - sgemm.WARP_TILE_WORKLOG.register_estimate) <= 24


def test_the_chapters_picture_of_level_7_covers_the_block_tile_once():
    """sgemm_gap.warp_tile_patches, which the chapter draws: over every warp,
    lane and pass, the tm x tn patches cover the block's tile of C exactly once,
    and each warp stays inside its own wm x wn tile."""
    from gpucourse.chapters import sgemm_gap

    for config in (sgemm.WARP_TILE_DEFAULT, sgemm.WARP_TILE_WORKLOG, sgemm.WARP_TILE_CANDIDATES[2]):
        covered = np.zeros((config.bm, config.bn), dtype=int)
        for warp in range(config.warps):
            for lane in range(sgemm.WARP_SIZE):
                for row, col in sgemm_gap.warp_tile_patches(config, warp, lane):
                    covered[row:row + config.tm, col:col + config.tn] += 1
                    assert {row // config.wm * (config.bn // config.wn)
                            + col // config.wn} == {warp}
        assert (covered == 1).all(), config
    with pytest.raises(ValueError, match="warp must be in"):
        sgemm_gap.warp_tile_patches(sgemm.WARP_TILE_WORKLOG, warp=4)
