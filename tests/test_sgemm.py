"""Week 8: the SGEMM kernels of gpucourse.kernels.sgemm.

Every level is checked against numpy in float64 on square, ragged and
degenerate shapes, with NaN and Inf propagating as numpy's. The sizes suit
Numba's CUDA simulator (one OS thread per CUDA thread); the same tests pass on
a GPU (GPUCOURSE_DEVICE=gpu). Nothing here is timed.
"""

import json

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, building_blocks

# float32 products of K terms of size ~1: rounding error grows like sqrt(K) * 6e-8.
RTOL, ATOL = 1e-5, 1e-5


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


# Square, ragged (no dimension a multiple of any tile or of 4), a row times a
# column (1 x K x 1), an outer product (K = 1), and the empty sum (K = 0).
SHAPES = [(16, 16, 16), (32, 32, 32), (17, 20, 13), (1, 24, 1), (9, 12, 1), (5, 3, 0)]


@pytest.mark.parametrize("level", sgemm.LEVELS)
def test_every_level_matches_numpy(level):
    for index, (m, n, k) in enumerate(SHAPES):
        a, b = _random((m, k), index), _random((k, n), 100 + index)
        c = sgemm.matmul(a, b, level)
        assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (m, n)
        np.testing.assert_allclose(c, _reference(a, b), rtol=RTOL, atol=ATOL,
                                   err_msg=f"level {level} at m, n, k = {m}, {n}, {k}")


# The simulator runs kernels in numpy, which warns about 0 * Inf; a GPU does not.
def check_nan_and_inf(multiply):
    """multiply(a, b) (a 17 x 12 by 12 x 20 product) keeps NaN and Inf where
    numpy does, and is close to it elsewhere."""
    a, b = _random((17, 12), 1), _random((12, 20), 2)
    a[3, 5] = np.nan  # row 3 of C becomes NaN
    b[7, 11] = np.inf  # column 11 of C becomes +-Inf...
    a[9, 7] = 0.0  # ...except C[9, 11], where 0 * Inf is NaN
    expected = _reference(a, b)
    c = multiply(a, b)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(c[finite], expected[finite], rtol=RTOL, atol=ATOL)
    assert np.isnan(c[9, 11]) and np.isnan(c[3]).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("level", ["1", "3", "4b", "6"])
def test_nan_and_inf_propagate_like_numpy(level):
    check_nan_and_inf(lambda a, b: sgemm.matmul(a, b, level))


def test_hand_worked_product_and_integer_levels():
    # [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]], exact in float32.
    a = np.array([[1, 2], [3, 4]], np.float32)
    b = np.array([[5, 6], [7, 8]], np.float32)
    for level in (1, 2, 3, "4A", 5, 6):
        np.testing.assert_array_equal(sgemm.matmul(a, b, level), [[19, 22], [43, 50]])


def test_non_contiguous_numpy_input_and_own_config():
    a = _random((40, 26), 3)[:, ::2]  # 40 x 13, strided
    b = _random((13, 24), 4)
    np.testing.assert_allclose(sgemm.matmul(a, b, 5), _reference(a, b), rtol=RTOL, atol=ATOL)
    small = TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4)  # 64 threads: two warps
    np.testing.assert_allclose(sgemm.matmul(a, b, 6, config=small), _reference(a, b),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("unroll", [2, 4, 8])
def test_dot_loop_written_out_2_4_or_all_8_steps_per_pass_gives_the_same_product(unroll,
                                                                                   monkeypatch):
    # Levels 5 and 6 can write 2, 4 or all of a tile's steps of their
    # dot-product loop out per pass (sgemm.DOT_UNROLL); each must compute the
    # product (bk = 8: with 8 no loop is left).
    monkeypatch.setattr(building_blocks, "DOT_UNROLL", unroll)
    config = TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4)
    a, b = _random((33, 24), 5), _random((24, 36), 6)
    out = _run_level6_kernel(config, a, b)
    np.testing.assert_allclose(out, _reference(a, b), rtol=RTOL, atol=ATOL)


def _run_level6_kernel(config, a, b, vectorized=True, **options):
    """C = a @ b by level 5-6's kernel for `config` (built with `options`) on
    a grid of 2 x 2 blocks, into an output of NaN, so that one left unwritten
    shows."""
    kernel = sgemm._make_vectorized_kernel(config, vectorized, **options)
    out = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    kernel[(2, 2), (config.threads,)](a, b, out)
    return out


@pytest.mark.parametrize("vectorized", [True, False])
def test_two_copies_of_the_fragments_give_the_same_bits(vectorized):
    # vectorized.FRAGMENT_COPIES: with two copies a step reads the next step's
    # fragments before its own FMAs, the same FMAs in the same order, so the
    # same bits as one copy, at a ragged shape (one float at a time, or 128-bit
    # loads on rows a multiple of 4 long). Only with the whole tile written
    # out; 3 copies, or a loop over the steps, are refused by name.
    config = TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4)
    m, n, k = (45, 39, 21) if not vectorized else (45, 40, 20)
    a, b = _random((m, k), 9), _random((k, n), 10)
    outs = [_run_level6_kernel(config, a, b, vectorized, fragment_copies=copies)
            for copies in (1, 2)]
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_allclose(outs[1], _reference(a, b), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="fragment_copies must be 1 or 2"):
        sgemm._make_vectorized_kernel(config, vectorized, fragment_copies=3)
    with pytest.raises(ValueError, match="needs the whole tile written out"):
        sgemm._make_vectorized_kernel(config, vectorized, unroll=2, fragment_copies=2)


def test_scalar_loads_unchecked_inside_checked_at_the_edges():
    # One float at a time (rows not a multiple of 4 long), a thread's four
    # neighbours of a row are loaded with one check where all four lie inside,
    # one check each where they cross an edge. 45 x 21 times 21 x 39 in
    # 32 x 32 x 8 tiles: A's columns 20-23 cross K's edge (21), B's columns
    # 36-39 cross N's (39), rows 45 on lie past M's; C starts as NaN, so an
    # output left unwritten shows.
    config = TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4)
    a, b = _random((45, 21), 7), _random((21, 39), 8)
    out = _run_level6_kernel(config, a, b, vectorized=False)
    np.testing.assert_allclose(out, _reference(a, b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("level, config", [
    (6, TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4)),
    (7, sgemm.WarpTileConfig(bm=32, bn=32, bk=8, wm=16, wn=32, wn_iter=1, tm=4, tn=4, threads=64))])
def test_products_the_tiles_cover_exactly_take_the_kernel_without_edge_checks(level, config):
    # 64 x 96 x 24 in 32 x 32 x 8 tiles: every load is inside, so the kernel
    # built without edge checks runs, and must still be exact; one row, column
    # or step of K more and the checked kernel runs instead.
    exact = sgemm.kernel_for(level, (64, 96, 24), True, config)[0]
    assert exact is sgemm._tiled_kernel(str(level), config, True, False, True)
    for shape in [(65, 96, 24), (64, 97, 24), (64, 96, 28), (64, 96, 0)]:
        assert sgemm.kernel_for(level, shape, True, config)[0] is not exact
    assert sgemm.kernel_for(level, (64, 96, 24), False, config)[0] is not exact
    a, b = _random((64, 24), 7), _random((24, 96), 8)
    np.testing.assert_allclose(sgemm.matmul(a, b, level, config=config), _reference(a, b),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("vectorized, k, unroll", [(True, 24, 1), (False, 29, 2)])
def test_double_buffered_tiles_give_the_same_product(vectorized, k, unroll):
    # With two copies of the shared tiles (sgemm.DOUBLE_BUFFER) each step reads
    # one copy and writes the other, with one barrier: several tiles of K (and
    # a ragged last one on the scalar path) must still add up to the product.
    config = TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4)
    a, b = _random((33, k), 7), _random((k, 36), 8)
    kernel = sgemm._make_vectorized_kernel(config, vectorized, unroll, double_buffer=True)
    out = np.full((33, 36), np.nan, np.float32)
    kernel[(2, 2), (config.threads,)](a, b, out)
    np.testing.assert_allclose(out, _reference(a, b), rtol=RTOL, atol=ATOL)


def test_dot_unroll_must_be_1_2_or_4_and_divide_bk():
    with pytest.raises(ValueError, match="unroll"):
        sgemm._make_vectorized_kernel(TileConfig(bm=32, bn=32, bk=8, tm=4, tn=4), True, 3)
    with pytest.raises(ValueError, match="unroll"):
        sgemm._make_vectorized_kernel(TileConfig(bm=32, bn=32, bk=4, tm=4, tn=4), True, 8)


def test_device_arrays_in_give_device_arrays_out():
    from gpucourse.device import cuda

    a, b = _random((20, 16), 5), _random((16, 12), 6)  # rows multiples of 4: vector path
    c = sgemm.matmul(cuda.to_device(a), cuda.to_device(b), 6)
    assert hasattr(c, "copy_to_host") and not isinstance(c, np.ndarray)
    np.testing.assert_allclose(c.copy_to_host(), _reference(a, b), rtol=RTOL, atol=ATOL)


def test_cuda_torch_tensors_give_cuda_tensors():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and sgemm.on_gpu()):
        pytest.skip("needs a CUDA GPU")
    a, b = torch.randn(33, 20, device="cuda"), torch.randn(20, 17, device="cuda")
    c = sgemm.matmul(a, b, 6)
    assert isinstance(c, torch.Tensor) and c.is_cuda
    expected = a.double() @ b.double()
    assert torch.allclose(c.double(), expected, rtol=RTOL, atol=ATOL)


def test_the_quick_path_on_a_gpu_gives_what_the_long_way_gives():
    # On a GPU, matmul's common calls (two CUDA tensors or two Numba device
    # arrays, no config or splits) take a short path that plans each shape
    # once. Every case it must get right, and every case it must hand to the
    # long way (which raises, naming the problem), against float64.
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and sgemm.on_gpu()):
        pytest.skip("needs a CUDA GPU")
    from gpucourse.device import cuda

    def check(c, a, b):
        # Against float64, relative to the largest output (as the benchmarks
        # do): sums of up to 1000 float32 products differ from the exact sum
        # by more than RTOL in their own last digits.
        expected = (a.double() @ b.double()).cpu()
        error = (torch.as_tensor(c).to("cpu", torch.float64) - expected).abs().max()
        assert float(error) <= 1e-5 * max(float(expected.abs().max()), 1.0)

    for m, n, k in [(1, 1, 1), (33, 17, 20), (64, 256, 48), (300, 260, 1000), (5, 3, 0)]:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        for level in ("auto", 5, "6", 7):
            check(sgemm.matmul(a, b, level), a, b)
            out = torch.full((m, n), float("nan"), device="cuda")
            assert sgemm.matmul(a, b, level, out=out) is out
            check(out, a, b)
        c = sgemm.matmul(cuda.as_cuda_array(a), cuda.as_cuda_array(b))
        assert not isinstance(c, torch.Tensor)
        check(c.copy_to_host(), a, b)
    assert sgemm.matmul(torch.randn(0, 4, device="cuda"), torch.randn(4, 3, device="cuda")).shape \
        == (0, 3)
    # Misaligned (a view one float into its storage), transposed and sliced inputs.
    storage = torch.randn(64 * 32 + 1, device="cuda")
    a, b = storage[1:].view(64, 32), torch.randn(32, 48, device="cuda")
    check(sgemm.matmul(a, b), a, b)
    check(sgemm.matmul(b.t(), a.t()), b.t(), a.t())
    check(sgemm.matmul(a[:, :16], b[:16]), a[:, :16], b[:16])
    # Bad calls still raise, naming what is wrong.
    a, b = torch.randn(4, 4, device="cuda"), torch.randn(4, 4, device="cuda")
    _fails(sgemm.matmul, a, torch.randn(5, 4, device="cuda"), naming="inner dimensions")
    _fails(sgemm.matmul, a, b, out=torch.empty(4, 5, device="cuda"), naming="out must be")
    _fails(sgemm.matmul, a, b, out=torch.empty(4, 4, device="cuda", dtype=torch.float64),
           naming="out must be")
    _fails(sgemm.matmul, a, b, True, naming="level must be one of")
    _fails(sgemm.matmul, a, b, 6.0, naming="level must be one of")
    _fails(sgemm.matmul, a, b.double(), naming="float32")
    # A tensor and a Numba array: the long way, whose result is a Numba array.
    check(sgemm.matmul(a, cuda.as_cuda_array(b)).copy_to_host(), a, b)


def test_numba_results_from_the_pool_live_as_long_as_any_view_of_them():
    # matmul's result for Numba arrays comes from the GPU's stream-ordered
    # pool (_numba_empty), freed when its last array or view goes. Live
    # results must never share memory; a view must keep its memory alive
    # after the array it came from is gone; memory handed back and taken
    # again must hold the new product, not the old one.
    if not sgemm.on_gpu():
        pytest.skip("needs a CUDA GPU")
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from gpucourse.device import cuda

    a, b = _random((40, 24), 11), _random((24, 36), 12)
    a_dev, b_dev = cuda.to_device(a), cuda.to_device(b)
    results = [sgemm.matmul(a_dev, b_dev) for _ in range(4)]
    assert all(isinstance(c, DeviceNDArray) and c.shape == (40, 36) for c in results)
    pointers = {c.__cuda_array_interface__["data"][0] for c in results}
    assert len(pointers) == 4, "live results must not share memory"
    view = results[0][5:9, 3:]
    del results
    for seed in range(50):  # hand memory back and take it again, many times
        x = _random((40, 24), 100 + seed)
        c = sgemm.matmul(cuda.to_device(x), b_dev)
    np.testing.assert_allclose(c.copy_to_host(), _reference(x, b), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(view.copy_to_host(), _reference(a, b)[5:9, 3:], rtol=RTOL,
                               atol=ATOL)
    empty = sgemm.matmul(cuda.to_device(_random((0, 24), 1)), b_dev)
    assert empty.shape == (0, 36)


# -----------------------------------------------------------------------------
# Bad input


def _fails(function, *args, naming, **kwargs):
    with pytest.raises(ValueError, match=naming):
        function(*args, **kwargs)


def test_bad_input_raises_value_error_naming_what_is_accepted():
    a, b = _random((4, 4), 0), _random((4, 4), 1)
    _fails(sgemm.matmul, a.astype(np.float64), b, naming="a must have dtype float32")
    _fails(sgemm.matmul, a, b.astype(np.float16), naming="b must have dtype float32")
    _fails(sgemm.matmul, a, b.astype(np.int32), naming="float32")
    _fails(sgemm.matmul, a[0], b, naming="a must be a 2D matrix")
    _fails(sgemm.matmul, a, b[None], naming="b must be a 2D matrix")
    _fails(sgemm.matmul, a, _random((5, 4), 2), naming="inner dimensions must match")
    _fails(sgemm.matmul, a, b, 8, naming="level must be one of 1, 2, 3, 4a, 4b, 5, 6, 7")
    _fails(sgemm.matmul, a, b, 4, naming="'4a' and '4b'")
    _fails(sgemm.matmul, a, b, True, naming="level must be one of")
    _fails(sgemm.matmul, [[1.0]], b, naming="a must be a numpy array")
    _fails(sgemm.matmul, a, "b", naming="b must be a numpy array")
    _fails(sgemm.matmul, a, b, 2, config=sgemm.CONFIG_4B, naming="levels 4a, 4b, 5 and 6")
    _fails(sgemm.matmul, a, b, 6, config=TileConfig(128, 128, 8, 2, 2), naming="thread limit")


def test_check_config_names_each_constraint():
    assert sgemm.check_config(sgemm.DEFAULT_TUNED) is sgemm.DEFAULT_TUNED
    assert sgemm.check_config(sgemm.CONFIG_4A, vectorized=False) is sgemm.CONFIG_4A
    _fails(sgemm.check_config, TileConfig(128, 128, 8, 3, 8), naming="divisibility")
    _fails(sgemm.check_config, TileConfig(128, 128, 8, 4, 2), naming="thread limit")  # 2048
    _fails(sgemm.check_config, TileConfig(32, 32, 8, 8, 8), naming="thread limit")  # 16
    # 256 x 256 tiles, bk = 32: 4 * (8192 + 8192) = 65,536 bytes > 48 KiB.
    _fails(sgemm.check_config, TileConfig(256, 256, 32, 16, 8), naming="shared-memory limit")
    # 16 x 16 per thread: 256 + 32 + 32 = 320 registers > 255.
    _fails(sgemm.check_config, TileConfig(256, 256, 8, 16, 16), naming="register limit")
    _fails(sgemm.check_config, TileConfig(128, 128, 6, 8, 8), naming="vector alignment")
    # 512 threads, bk = 8: B's tile is 8 rows of 32 float4, so 16 rows' worth of threads.
    _fails(sgemm.check_config, TileConfig(128, 128, 8, 4, 8), naming="tile loading")
    _fails(sgemm.check_config, TileConfig(128, 0, 8, 8, 8), naming="bn must be >= 1")
    _fails(sgemm.check_config, TileConfig(128, 128, 8.0, 8, 8), naming="bk must be a whole number")
    _fails(sgemm.check_config, (128, 128, 8, 8, 8), naming="config must be a TileConfig")


def test_candidate_configs_all_pass_and_cover_the_defaults():
    configs = sgemm.candidate_configs()
    assert sgemm.DEFAULT_TUNED in configs and sgemm.CONFIG_5 in configs
    for config in configs:
        assert config.threads % 32 == 0 and config.threads <= 1024
        assert config.shared_bytes <= 48 * 1024
        assert config.bk % 4 == 0 and config.bn % 4 == 0
    # Independently of check_config, count by brute force with the same rules.
    space = {"bm": (64, 128), "bn": (64, 128), "bk": (8, 16), "tm": (4, 8), "tn": (4, 8)}
    found = sgemm.candidate_configs(space)
    assert all(isinstance(c, TileConfig) for c in found)
    expected = 0
    for bm in space["bm"]:
        for bn in space["bn"]:
            for bk in space["bk"]:
                for tm in space["tm"]:
                    for tn in space["tn"]:
                        threads = bm * bn // (tm * tn)
                        ok = (threads % 32 == 0 and threads <= 1024
                              and threads % (bk // 4) == 0 and bm % (threads // (bk // 4)) == 0
                              and threads % (bn // 4) == 0 and bk % (threads // (bn // 4)) == 0)
                        expected += ok
    assert len(found) == expected > 0
    _fails(sgemm.candidate_configs, {"bm": (64,)}, naming="space must be a dict")


def test_tuned_config_reads_the_json_and_falls_back(tmp_path):
    path = tmp_path / "tuned.json"
    assert sgemm.tuned_config("Some GPU", path) == sgemm.DEFAULT_TUNED  # no file yet
    path.write_text(json.dumps({"Some GPU": {"bm": 64, "bn": 128, "bk": 16, "tm": 8, "tn": 8,
                                             "ms": 1.0}}))
    assert sgemm.tuned_config("Some GPU", path) == TileConfig(64, 128, 16, 8, 8)
    assert sgemm.tuned_config("Other GPU", path) == sgemm.DEFAULT_TUNED
    path.write_text(json.dumps({"Bad GPU": {"bm": 64, "bn": 128, "bk": 16, "tm": 3, "tn": 8}}))
    _fails(sgemm.tuned_config, "Bad GPU", path, naming="divisibility")
    _fails(sgemm.tuned_config, 3, path, naming="gpu_name must be a string")
    # The committed file, if any, holds only configurations that pass the checks.
    for name in sgemm._read_tuned():
        sgemm.tuned_config(name)


def test_autotune_validates_before_needing_a_gpu():
    _fails(sgemm.autotune, 0, 64, 64, naming="m must be >= 1")
    _fails(sgemm.autotune, 64, 64, 64, configs=[], naming="configs must hold")
    _fails(sgemm.autotune, 64, 64, 64, configs=[TileConfig(128, 128, 6, 8, 8)],
           naming="vector alignment")
    if not sgemm.on_gpu():
        with pytest.raises(RuntimeError, match="needs a real GPU"):
            sgemm.autotune(64, 64, 64, configs=[sgemm.DEFAULT_TUNED])
        with pytest.raises(RuntimeError, match="needs a real GPU"):
            sgemm.resource_usage(6)


# -----------------------------------------------------------------------------
# The traffic model, against hand-worked numbers


def test_traffic_model_hand_worked():
    m = n = k = 4096
    flops = 2 * 4096**3
    assert sgemm.matmul_flops(m, n, k) == flops
    # Level 3 with 32 x 32 tiles: 8*m*n*k/32 bytes, intensity 32/4 = 8 FLOP/byte.
    assert sgemm.traffic_model(3, m, n, k)["intensity_flop_per_byte"] == pytest.approx(8.0)
    # 128 x 128 block tiles: 4*m*n*k*(2/128) bytes, intensity 128*128/(2*256) = 32.
    level4b = sgemm.traffic_model("4b", m, n, k)
    assert level4b["intensity_flop_per_byte"] == pytest.approx(32.0)
    assert level4b["shared_loads_per_fma"] == pytest.approx(16 / 64)
    # Level 1 vs 2: 33 sectors per warp per step of K against 5.
    ratio = (sgemm.traffic_model(1, m, n, k)["global_bytes"]
             / sgemm.traffic_model(2, m, n, k)["global_bytes"])
    assert ratio == pytest.approx(33 / 5)
    assert sgemm.minimum_bytes(2, 3, 4) == 4 * (8 + 12 + 6)
    _fails(sgemm.traffic_model, 9, m, n, k, naming="level must be one of")
    _fails(sgemm.traffic_model, 3, m, -1, k, naming="n must be >= 1")


# -----------------------------------------------------------------------------
# The ladder data and occupancy (gpucourse.chapters.sgemm and sgemm_gap)


def test_occupancy_hand_worked():
    from gpucourse.chapters import sgemm as ladder

    # 256 threads at 168 registers: 168 * 32 = 5376 per warp (21 units of 256),
    # 8 warps = 43,008 of 65,536 registers: 1 block, 8 of 64 warps.
    occ = ladder.occupancy(168, 8192, 256)
    assert (occ["blocks_per_sm"], occ["warps_per_sm"], occ["limiter"]) == (1, 8, "registers")
    assert occ["occupancy"] == pytest.approx(8 / 64)
    # 1024 threads at 28 registers: 2 blocks by threads (2048 per SM), 100%.
    occ = ladder.occupancy(28, 0, 1024)
    assert (occ["blocks_per_sm"], occ["occupancy"], occ["limiter"]) == (2, 1.0, "threads")
    # 128 threads, 32 registers, 48 KiB shared: 228 KiB // (48 KiB + 1 KiB) = 4 blocks.
    occ = ladder.occupancy(32, 48 * 1024, 128)
    assert (occ["blocks_per_sm"], occ["limiter"]) == (4, "shared memory")
    _fails(ladder.occupancy, 32, 0, 2048, naming="threads_per_block must be in")
    _fails(ladder.occupancy, -1, 0, 128, naming="registers_per_thread")


def test_loop_variant_probe_reads_the_committed_run():
    from gpucourse.chapters import sgemm as ladder

    record = ladder.load_results()
    rows = ladder.loop_variant_probe(record)
    assert [(r["double_buffer"], r["unroll"]) for r in rows] == [
        (False, 1), (False, 2), (False, 4), (True, 1), (True, 2), (True, 4)]
    raw = {(r["unroll"], r["double_buffer"]): r for r in record["loop_variant_probe"]}
    for r in rows:
        assert r["tflops"] == raw[r["unroll"], r["double_buffer"]]["tflops"]
        # Two copies of the tiles take twice the shared memory.
        single = raw[r["unroll"], False]["shared_bytes_per_block"]
        assert r["shared_bytes_per_block"] == (2 if r["double_buffer"] else 1) * single
    # The benchmark ran level 6 with the fastest pair, and the package's defaults match it.
    fastest = max(rows, key=lambda r: r["tflops"])
    assert (record["dot_unroll"], record["double_buffer"]) == (fastest["unroll"],
                                                              fastest["double_buffer"])
    # The package has since moved on to the whole tile written out (a later
    # measurement, benchmarks/results/sgemm_unroll-*.json), still double-buffered.
    assert sgemm.DOT_UNROLL == "tile" and sgemm.DOUBLE_BUFFER == fastest["double_buffer"]
    _fails(ladder.loop_variant_probe, {"results": []}, naming="loop_variant_probe")
    # Runs since the whole tile was written out also time "tile": it sorts
    # after the numbers, within each number of copies.
    mixed = {"loop_variant_probe": [
        {**raw[1, True], "unroll": "tile"}, raw[2, False], {**raw[1, False], "unroll": "tile"},
        raw[1, False]]}
    assert [(r["double_buffer"], r["unroll"]) for r in ladder.loop_variant_probe(mixed)] == [
        (False, 1), (False, 2), (False, "tile"), (True, "tile")]


def test_committed_results_have_every_level_and_the_conventions_shape(tmp_path):
    from gpucourse.chapters import sgemm as ladder

    record = ladder.load_results()
    for key in ("benchmark", "gpu", "date", "versions", "method", "results"):
        assert key in record
    rows = ladder.ladder(record, 4096)
    # The chapter's ladder, levels 1-6, in order: all measured in the committed
    # run. Level 7 joins the ladder (LEVEL_ORDER) once a run has measured it and
    # the chapter discusses it; until then the ladder has no place for it.
    assert [lv for lv in sgemm.LEVELS if lv in ladder.LEVEL_ORDER] == list(ladder.LEVEL_ORDER)
    assert [r["level"] for r in rows] == list(ladder.LEVEL_ORDER) + ["cublas"]
    for r in rows:
        assert r["max_rel_err"] < 1e-4 and "failed" not in r
        assert r["vs_cublas"] == pytest.approx(rows[-1]["ms"] / r["ms"])
    _fails(ladder.ladder, record, 4095, naming="m, n, k must be a measured shape")
    _fails(ladder.load_results, tmp_path, naming="path must be a folder holding")


def test_auto_runs_the_shape_models_plan_read_from_its_file(tmp_path):
    # auto's plan is the shape model's cheapest (tests/test_sgemm_shape_model.py
    # checks its choices); `path` reads another model file, whose menu it obeys.
    h100 = "NVIDIA H100 80GB HBM3"
    plan = sgemm.choose_plan((1024, 1024, 8192), h100)
    assert sgemm.auto_plan((1024, 1024, 8192), h100) == (plan["config"], plan["splits"])
    assert sgemm.auto_config((1024, 1024, 8192), h100) == plan["config"]
    model = json.loads(sgemm.MODEL_PATH.read_text())
    only = TileConfig(64, 64, 16, 4, 8)
    model["gpus"][h100]["menu"] = [[only.bm, only.bn, only.bk, only.tm, only.tn]]
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    assert sgemm.auto_config((4096, 4096, 4096), h100, path) == only
    _fails(sgemm.auto_config, (1, 2), h100, path, naming="shape must be a tuple")
    _fails(sgemm.auto_config, (1, -2, 3), h100, path, naming="n must be a whole number")


def test_auto_is_the_default_and_exact_on_ragged_shapes():
    rng = np.random.default_rng(11)
    a = rng.standard_normal((19, 13)).astype(np.float32)
    b = rng.standard_normal((13, 22)).astype(np.float32)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    for c in (sgemm.matmul(a, b), sgemm.matmul(a, b, "auto")):
        assert c.dtype == np.float32 and np.allclose(c, expected, rtol=1e-5, atol=1e-5)
    _fails(sgemm.matmul, a, b, "fast", naming="auto")


def test_split_ranges_cover_k_in_aligned_slices():
    assert sgemm.split_ranges(8192, 2) == [(0, 4096), (4096, 8192)]
    assert sgemm.split_ranges(50, 3) == [(0, 32), (32, 50)]  # 17 rounds up to 32
    assert sgemm.split_ranges(10, 4) == [(0, 10)]  # too short to split
    for k in (1, 15, 16, 17, 100, 1000):
        for splits in (1, 2, 3, 7):
            ranges = sgemm.split_ranges(k, splits)
            assert ranges[0][0] == 0 and ranges[-1][1] == k and len(ranges) <= splits
            assert all(k0 % 16 == 0 and k1 > k0 for k0, k1 in ranges)
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


SMALL_TILES = TileConfig(32, 32, 8, 4, 8)


@pytest.mark.parametrize("split_sum", sgemm.SPLIT_SUMS)
@pytest.mark.parametrize("level", ["5", "auto"])
def test_split_k_is_exact_and_propagates_nan_and_inf(level, split_sum):
    # Both ways of adding the slices: one launch with atomic adds into C, or
    # a partial C per slice added by a last kernel.
    rng = np.random.default_rng(5)
    a = rng.standard_normal((9, 50)).astype(np.float32)
    b = rng.standard_normal((50, 12)).astype(np.float32)
    a[2, 40] = np.nan  # in the second slice of K
    b[3, 5] = np.inf  # in the first
    expected = a.astype(np.float64) @ b.astype(np.float64)
    c = sgemm.matmul(a, b, level, config=SMALL_TILES, splits=3, split_sum=split_sum)
    assert c.dtype == np.float32 and c.shape == (9, 12)
    assert np.array_equal(np.isnan(c), np.isnan(expected))
    assert np.array_equal(np.isinf(c), np.isinf(expected))
    finite = np.isfinite(expected)
    assert np.allclose(c[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_splits_are_checked():
    a = np.ones((2, 3), np.float32)
    _fails(sgemm.matmul, a, a.T.copy(), 5, splits=0, naming="splits must be a whole number")
    _fails(sgemm.matmul, a, a.T.copy(), 3, splits=2, naming="splits applies to levels 5, 6")
    _fails(sgemm.matmul, a, a.T.copy(), 6, splits=2, split_sum="tree",
           naming="split_sum must be one of 'atomic', 'partials'")


def test_out_receives_the_product_and_is_checked():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    out = np.full((7, 6), np.nan, np.float32)
    assert sgemm.matmul(a, b, 2, out=out) is out
    assert np.allclose(out, expected, rtol=1e-5, atol=1e-5)
    a_dev, b_dev = sgemm.cuda.to_device(a), sgemm.cuda.to_device(b)
    out_dev = sgemm.cuda.device_array((7, 6), np.float32)
    assert sgemm.matmul(a_dev, b_dev, 1, out=out_dev) is out_dev
    assert np.allclose(out_dev.copy_to_host(), expected, rtol=1e-5, atol=1e-5)
    _fails(sgemm.matmul, a, b, 2, out=np.zeros((6, 7), np.float32), naming=r"shape \(7, 6\)")
    _fails(sgemm.matmul, a, b, 2, out=np.zeros((7, 6)), naming="C-contiguous float32")
    _fails(sgemm.matmul, a, b, 2, out=out_dev, naming="must be a numpy array")
