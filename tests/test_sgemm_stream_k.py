"""Week 8: stream-K in gpucourse.kernels.sgemm (issue 33, products a wave short).

With splits="stream", matmul lays all the tiles' steps of K end to end and
gives each of `workers` blocks an equal run of them; a run may start partway
through one tile and end partway through another, and each piece is added
into C, zeroed first, with float32 atomic adds (a piece that is a whole
tile is stored). Checked here on Numba's CUDA
simulator against numpy in float64 on ragged shapes, with worker counts whose
runs cross tiles at every place (integer-valued inputs: every partial sum is
exact in float32, whatever order the pieces arrive in, so the comparison is
exact); and, without a GPU, the PTX for an H100/H200: atomic adds and
128-bit stores, 128-bit loads, no spills. Nothing here is timed: benchmarks/sgemm_stream.py
does that.
"""

import json
import re

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig
from ptx_helpers import compile_without_a_gpu, ptxas_report
from test_sgemm import ATOL, RTOL, SMALL_TILES, _random, _reference
from test_sgemm_level7 import ONE_PATCH
from test_sgemm_split_k import _integers

# 37 x 70 x 45 on 32 x 32 tiles: 2 x 3 tiles of 3 steps of 16 columns (the
# last ragged, 13): 18 steps, loads of one float (rows not a multiple of 4).
# 37 x 72 x 44: the same steps with 128-bit loads. Runs of 18/w steps for
# these worker counts start and end at every step of a tile, and 1 worker
# walks them all.
SHAPES = [((37, 70, 45), False), ((37, 72, 44), True)]
WORKERS = (1, 4, 5, 7, 18)


@pytest.mark.parametrize("level, config, workers", [("6", SMALL_TILES, WORKERS),
                                                    ("7", ONE_PATCH, (5,))],
                         ids=["level6", "level7"])
def test_every_worker_count_adds_up_to_the_product(level, config, workers):
    for index, ((m, n, k), vectorized) in enumerate(SHAPES):
        a, b = _integers((m, k), index), _integers((k, n), 10 + index)
        want = _reference(a, b)
        for count in workers:
            kernel, grid, block, arguments = sgemm.stream_kernel_for(
                level, (m, n, k), vectorized=vectorized, config=config, workers=count)
            across, steps, step, total, used = (int(x) for x in arguments)
            assert (step, steps) == (16, 3) and total == steps * across * -(-m // config.bm)
            assert grid == (used,) == (min(count, total),)
            c = np.zeros((m, n), np.float32)
            kernel[grid, block](a, b, c, *arguments)
            np.testing.assert_array_equal(c, want, err_msg=f"level {level}, {m} x {n} x {k}, "
                                                           f"{count} workers")


def test_the_kernel_adds_into_c_so_matmul_zeroes_it_first():
    a, b = _integers((13, 40), 7), _integers((40, 24), 8)
    want = _reference(a, b)
    kernel, grid, block, arguments = sgemm.stream_kernel_for(6, (13, 24, 40), config=SMALL_TILES)
    ones = np.ones((13, 24), np.float32)
    kernel[grid, block](a, b, ones, *arguments)
    np.testing.assert_array_equal(ones, want + 1)
    from gpucourse.device import cuda

    poisoned = cuda.to_device(np.full((13, 24), np.nan, np.float32))
    c = sgemm.matmul(cuda.to_device(a), cuda.to_device(b), 6, config=SMALL_TILES,
                     splits="stream", out=poisoned)
    np.testing.assert_array_equal(c.copy_to_host(), want)


def test_stream_k_matches_float64_on_random_floats_and_passes_nan_and_inf():
    a, b = _random((21, 33), 3), _random((33, 17), 4)
    np.testing.assert_allclose(sgemm.matmul(a, b, 5, splits="stream"), _reference(a, b),
                               rtol=RTOL, atol=ATOL)
    a[2, 5], b[7, 3] = np.nan, np.inf
    got, want = sgemm.matmul(a, b, 6, config=SMALL_TILES, splits="stream"), a.astype(
        np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL, atol=ATOL)
    # K of zero: the empty sum, no launch of the stream kernel.
    np.testing.assert_array_equal(sgemm.matmul(a[:, :0], b[:0], 6, splits="stream"),
                                  np.zeros((21, 17), np.float32))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="splits must be a whole number from 1 to 64 or 'stream'"):
        sgemm.matmul(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), 6,
                     splits="streams")
    with pytest.raises(ValueError, match="splits applies to levels 5, 6, 7 and auto"):
        sgemm.stream_kernel_for(3, (4, 4, 64))
    with pytest.raises(ValueError, match="workers must be a whole number of at least 1"):
        sgemm.stream_kernel_for(6, (4, 4, 64), workers=0)
    with pytest.raises(ValueError, match="stream_kernel_for"):
        sgemm.split_kernel_for(6, (4, 4, 64), "stream")


# -----------------------------------------------------------------------------
# What a GPU would run: the stream-K kernel's PTX for compute capability 9.0

PTX_SCRIPT = """
import json, sys
from gpucourse.kernels import sgemm
fields = json.loads(sys.argv[1])
kernel = sgemm._tiled_kernel("6", sgemm.TileConfig(**fields), True, "stream")
print(json.dumps(numba.cuda.compile_ptx(kernel.py_func, sgemm.STREAM_SIGNATURE, cc=(9, 0))[0]))
"""

# Auto's tiles on the H200 at 1537 x 1023 x 771 (one wave of 104 tiles).
ONE_WAVE = TileConfig(128, 128, 16, 8, 8)


def test_the_stream_kernel_adds_with_atomics_and_keeps_its_loads_and_registers():
    from dataclasses import asdict

    text = json.loads(compile_without_a_gpu(PTX_SCRIPT, json.dumps(asdict(ONE_WAVE)))
                      .strip().splitlines()[-1])
    outputs = ONE_WAVE.tm * ONE_WAVE.tn
    assert ".target sm_90" in text
    # Every output of the thread added once into C where the piece is part of
    # a tile, or stored, four at a time, where it is the whole tile (one
    # walk, inlined once inside the loop over the run's pieces).
    assert text.count("atom.global.add.f32") + text.count("red.global.add.f32") == outputs
    assert text.count("st.global.v4.f32") == outputs // 4
    assert text.count("st.global") == outputs // 4
    loads = (ONE_WAVE.bm * ONE_WAVE.bk + ONE_WAVE.bk * ONE_WAVE.bn) // 4 // ONE_WAVE.threads
    assert text.count("ld.global.v4.f32") == loads
    assert text.count("bar.sync") == 1 and ".local" not in text
    # Uncapped: one block of 256 threads an SM, no spills (ptxas 13.5: 164
    # registers). Under two blocks' cap of 128, which auto's stream-K plans
    # run (building_blocks.STREAM_REGISTERS), some values spill (240 bytes
    # with ptxas 13.5 through nvJitLink), and it still ran faster than
    # uncapped at six of eight shapes on the H200
    # (results/sgemm_stream-h200-2026-11-29.json).
    report = ptxas_report(text)
    registers = int(re.search(r"[Uu]sed (\d+) registers", report).group(1))
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
    assert registers <= 255 and registers * ONE_WAVE.threads <= 65536, report
    capped = ptxas_report(text, max_registers=128)
    assert int(re.search(r"[Uu]sed (\d+) registers", capped).group(1)) <= 128, capped
    spilled = int(re.search(r"(\d+) bytes spill stores", capped).group(1))
    assert spilled <= 256, capped
