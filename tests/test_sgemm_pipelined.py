"""Week 8: level 6's kernel with the walk along K by cp.async (issue 33).

``TileConfig(..., stages=s)`` builds level 6's kernel with a ring of s copies
of the shared tiles, filled by cp.async s - 1 steps ahead (sgemm.pipelined),
instead of fetching each next tile into registers. Checked here on Numba's
CUDA simulator against numpy in float64 (integer-valued inputs: exact), on
ragged shapes whose K wraps the ring several times, with B as given and B
padded (ragged N), over the whole of K, split-K slices and stream-K pieces; NaN and
Inf; the configurations it refuses, each named; and, without a GPU, the PTX
for an H100/H200: cp.async copies of 4 and 16 bytes, no loads from global
memory into registers, two barriers, no spills. On the simulator every copy
lands when it is issued, so a race between the ring's copies and the reads of
another warp shows only on a GPU: ``benchmarks/half_precision_gpu.sh
sgemm_split_tests`` runs this file there, and benchmarks/sgemm_pipelined.py
checks every kernel it times against float64 first.
"""

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig
from ptx_helpers import compile_without_a_gpu, innermost_loop, ptxas_report
from test_sgemm import ATOL, RTOL, _random, _reference
from test_sgemm_split_k import _integers

# 32 x 32 x 8 tiles, 4 x 8 a thread: one warp. K = 70 is nine steps of 8 (the
# last ragged, 6), enough to go round a ring of 5 more than once; B's rows of
# 30 floats are first copied into rows of 32 (entry_point's _ring_plan), rows
# of 36 are copied from B as given, four floats at a time.
SMALL = TileConfig(32, 32, 8, 4, 8)
SHAPES = [((37, 30, 70), "B padded"), ((33, 36, 72), "B as given")]


def fresh():
    """Kernels are built once per configuration: build them anew (after a
    build knob changed)."""
    from gpucourse.kernels.sgemm import kernel_choice

    kernel_choice._compiled.cache_clear()
    kernel_choice._tiled_kernel.cache_clear()


@pytest.mark.parametrize("stages", (2, 3, 4, 5))
def test_every_ring_multiplies_exactly(stages):
    config = replace(SMALL, stages=stages)
    for index, ((m, n, k), _) in enumerate(SHAPES):
        a, b = _integers((m, k), index), _integers((k, n), 10 + index)
        want = _reference(a, b)
        # Longer rings differ only in going round: K whole is enough for them.
        for splits in ((1, 3, "stream") if stages <= 3 else (1,)):
            got = sgemm.matmul(a, b, 6, config=config, splits=splits)
            np.testing.assert_array_equal(got, want, err_msg=f"{stages} stages, {m} x {n} x "
                                                             f"{k}, splits {splits}")


def test_copies_that_find_their_addresses_once_multiply_exactly(monkeypatch):
    # pipelined.COPY_ADDRESSES = "once" (a benchmark's other way: addresses
    # worked out before the walk, tiles inside the matrices copied
    # unchecked): the same products, whole, split and stream-K; a value it
    # does not know is named.
    from gpucourse.kernels.sgemm import pipelined

    monkeypatch.setattr(pipelined, "COPY_ADDRESSES", "once")
    fresh()
    try:
        for index, ((m, n, k), _) in enumerate(SHAPES):
            a, b = _integers((m, k), index), _integers((k, n), 10 + index)
            for splits in (1, 3, "stream"):
                got = sgemm.matmul(a, b, 6, config=replace(SMALL, stages=2), splits=splits)
                np.testing.assert_array_equal(got, _reference(a, b), err_msg=f"{m} x {n} x {k}")
        monkeypatch.setattr(pipelined, "COPY_ADDRESSES", "every step")
        fresh()
        with pytest.raises(ValueError, match="COPY_ADDRESSES must be 'once' or 'each'"):
            sgemm.matmul(*(_integers((8, 8), 0),) * 2, 6, config=replace(SMALL, stages=2))
    finally:
        monkeypatch.undo()
        fresh()


def test_a_ring_copies_b_alone_and_only_where_its_rows_are_ragged(monkeypatch):
    # The ring reads A a float at a time, so a ragged K costs no copy; where N
    # is ragged, B alone is copied into rows of N rounded up to 4 (zeros
    # beyond), read 16 bytes at a time, and C stored a float at a time.
    from gpucourse.kernels.sgemm import entry_point, padding

    seen = []

    def padded_b(b_dev, device_id=None):
        seen.append(tuple(b_dev.shape))
        return padding.padded_b(b_dev, device_id)

    monkeypatch.setattr(entry_point, "padded_b", padded_b)
    monkeypatch.setattr(entry_point, "padded_operands", lambda *_: pytest.fail("A was padded"))
    kinds = []
    real_kernel_for = entry_point.kernel_for
    monkeypatch.setattr(entry_point, "kernel_for", lambda key, shape, vectorized, config: (
        kinds.append(vectorized), real_kernel_for(key, shape, vectorized, config))[1])
    config = replace(SMALL, stages=2)
    for (m, n, k), padded, kind in [((37, 30, 70), (70, 30), padding.LOADS_ONLY),
                                    ((33, 36, 71), None, True)]:
        seen.clear()
        kinds.clear()
        a, b = _integers((m, k), 5), _integers((k, n), 6)
        np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config), _reference(a, b),
                                      err_msg=f"{m} x {n} x {k}")
        assert seen == ([padded] if padded else []), (m, n, k)
        assert kinds == [kind], (m, n, k)


def test_rings_of_64_rows_read_an_even_ragged_b_8_bytes_a_copy_by_default():
    # On the H200 8-byte copies of B (and stores of C) made 64 x 128 rings
    # 7-12% faster than 4-byte ones where n % 4 == 2
    # (results/sgemm_ring_pairs-h200-2026-11-30.json): on by default for the
    # rings of auto's menu with 64 rows, not for its 128 x 128 ring.
    from gpucourse.kernels.sgemm import entry_point

    assert entry_point.RING_PAIRS is True and entry_point.RING_PAIRS_MOST_ROWS == 64
    assert entry_point._ring_pairs(TileConfig(64, 128, 16, 8, 8, stages=2))
    assert entry_point._ring_pairs(TileConfig(64, 64, 16, 8, 4, stages=2))
    assert not entry_point._ring_pairs(TileConfig(128, 128, 16, 8, 8, stages=2))


def test_a_ring_told_to_read_b_as_given_copies_nothing(monkeypatch):
    # entry_point.RING_RAGGED_B "scalar": a ragged B is read as given, in the
    # one launch, with no copy of B first: 8 bytes a copy where its rows are
    # an even number of floats long ("pairs", C stored 8 bytes at a time
    # too), else 4; exact on integers, split and stream-K included. A value
    # other than None, "padded" or "scalar" is named.
    from gpucourse.kernels.sgemm import entry_point, padding

    monkeypatch.setattr(entry_point, "padded_b", lambda *_: pytest.fail("B was copied"))
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", "scalar")
    monkeypatch.setattr(entry_point, "RING_PAIRS", True)
    kinds = []
    real_kernel_for = entry_point.kernel_for
    monkeypatch.setattr(entry_point, "kernel_for", lambda key, shape, vectorized, config: (
        kinds.append(vectorized), real_kernel_for(key, shape, vectorized, config))[1])
    config = replace(SMALL, stages=2)
    for (m, n, k), splits in [((37, 30, 70), 1), ((5, 33, 41), 2), ((40, 31, 90), "stream"),
                              ((33, 36, 71), 1), ((37, 31, 70), 1), ((5, 34, 41), 2),
                              ((40, 30, 90), "stream")]:
        kinds.clear()
        a, b = _integers((m, k), 5), _integers((k, n), 6)
        np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config, splits=splits),
                                      _reference(a, b), err_msg=f"{m} x {n} x {k}")
        kind = True if n % 4 == 0 else padding.PAIRS if n % 2 == 0 else False
        assert kinds == ([kind] if splits == 1 else []), (m, n, k)
    # Off (entry_point.RING_PAIRS), an even ragged n is read 4 bytes a copy;
    # so it is, on by default, by a ring of more than RING_PAIRS_MOST_ROWS
    # rows (the one 128 x 128 ring timed ran 4% slower 8 bytes a copy).
    monkeypatch.setattr(entry_point, "RING_PAIRS", False)
    kinds.clear()
    a, b = _integers((37, 30), 5), _integers((30, 30), 6)
    np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config), _reference(a, b))
    assert kinds == [False]
    monkeypatch.setattr(entry_point, "RING_PAIRS", True)
    monkeypatch.setattr(entry_point, "RING_PAIRS_MOST_ROWS", 16)
    kinds.clear()
    np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config), _reference(a, b))
    assert kinds == [False]
    monkeypatch.setattr(entry_point, "RING_RAGGED_B", "copy")
    with pytest.raises(ValueError, match="RING_RAGGED_B must be None, 'padded' or 'scalar'"):
        sgemm.matmul(_integers((3, 5), 1), _integers((5, 7), 2), 6, config=config)


def test_either_order_of_fmas_multiplies_exactly(monkeypatch):
    # vectorized.FMA_ORDER (kernels through registers, "rows" by default) and
    # RING_FMA_ORDER (rings, "serpentine": odd rows of a thread's patch right
    # to left), each the other way: the same products; a value neither knows
    # is named.
    from gpucourse.kernels.sgemm import vectorized

    monkeypatch.setattr(vectorized, "FMA_ORDER", "serpentine")
    monkeypatch.setattr(vectorized, "RING_FMA_ORDER", "rows")
    fresh()
    try:
        (m, n, k), _ = SHAPES[1]
        a, b = _integers((m, k), 7), _integers((k, n), 8)
        for config in (SMALL, replace(SMALL, stages=2)):
            np.testing.assert_array_equal(sgemm.matmul(a, b, 6, config=config), _reference(a, b),
                                          err_msg=str(config))
        monkeypatch.setattr(vectorized, "RING_FMA_ORDER", "columns")
        fresh()
        with pytest.raises(ValueError, match="RING_FMA_ORDER must be 'rows' or 'serpentine', "
                                             "got 'columns'"):
            sgemm.matmul(a, b, 6, config=SMALL)
    finally:
        monkeypatch.undo()
        fresh()


def test_the_ring_matches_float64_on_random_floats_and_passes_nan_and_inf():
    config = TileConfig(32, 32, 16, 4, 8, stages=2)
    a, b = _random((21, 45), 3), _random((45, 17), 4)
    np.testing.assert_allclose(sgemm.matmul(a, b, 6, config=config), _reference(a, b),
                               rtol=RTOL, atol=ATOL)
    a[2, 5], b[7, 3] = np.nan, np.inf
    got, want = sgemm.matmul(a, b, 6, config=config), a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL, atol=ATOL)


def test_configurations_the_ring_refuses_are_named():
    with pytest.raises(ValueError, match=r"stages must be 0 .* or one of \(2, 3, 4, 5\) .*, got 1"):
        sgemm.check_config(replace(SMALL, stages=1))
    with pytest.raises(ValueError, match="stages must be 0"):
        sgemm.check_config(replace(SMALL, stages=True))
    # Three copies of 128 x 128 x 32 tiles: 3 * 4 * (132 * 32 + 32 * 128) bytes.
    with pytest.raises(ValueError, match=r"stages\*\(4\*\(\(bm \+ 4\)\*bk \+ bk\*bn\)\) must be "
                                         r"at most 49152 bytes, got 99840"):
        sgemm.check_config(TileConfig(128, 128, 32, 8, 8, stages=3))
    # 768 threads (32 x 96 tiles of 4 x 1) cannot share the 128 floats of A's tile.
    with pytest.raises(ValueError, match="threads must share the 32 x 4 tile of A"):
        sgemm.check_config(TileConfig(32, 96, 4, 4, 1, stages=2), vectorized=False)
    assert TileConfig(64, 128, 16, 8, 8, stages=2).shared_bytes == 2 * 4 * (68 * 16 + 16 * 128)


# -----------------------------------------------------------------------------
# What a GPU would run: the ring's PTX for compute capability 9.0

PTX_SCRIPT = """
import json, sys
from gpucourse.kernels import sgemm
found = []
for fields, vectorized, interior in json.loads(sys.argv[1]):
    kernel = sgemm._tiled_kernel(fields.pop("level"), sgemm.TileConfig(**fields), vectorized,
                                 False, interior)
    found.append(numba.cuda.compile_ptx(kernel.py_func, sgemm.SPLIT_SIGNATURE[:3],
                                        cc=(9, 0))[0])
print(json.dumps(found))
"""

# The tiles that ran 1000^3 at 86% of cuBLAS on the H200 (auto's plan 82%):
# 64 x 128 x 16, 8 x 8 a thread (128 threads), two stages.
RING = TileConfig(64, 128, 16, 8, 8, stages=2)
# (vectorized, interior): tiles inside the matrices with 128-bit loads; rows a
# multiple of 4 with edges; B padded to rows a multiple of 4 where n is ragged
# (entry_point's _ring_plan: 16-byte copies, C stored a float at a time).
# Then level 6's kernel through registers.
KINDS = [(True, True), (True, False), ("loads", False), ("pairs", False)]


@pytest.fixture(scope="module")
def ring_ptx():
    from dataclasses import asdict

    wanted = [[{**asdict(RING), "level": "6"}, vectorized, interior] for vectorized, interior in KINDS]
    wanted.append([{**asdict(replace(RING, stages=0)), "level": "6"}, True, True])
    printed = compile_without_a_gpu(PTX_SCRIPT, json.dumps(wanted))
    return json.loads(printed.strip().splitlines()[-1])


def _loop_besides_the_arithmetic(text):
    """The instructions of the kernel's main loop other than its FMAs and its
    reads of fragments from shared memory, and its FMAs."""
    loop = innermost_loop(text, marker="fma.rn.f32", most=True)
    fmas = sum(x.startswith("fma.rn.f32") for x in loop)
    return [x for x in loop if not x.startswith(("fma.rn.f32", "ld.shared"))], fmas


def test_the_ring_copies_with_cp_async_and_keeps_its_registers(ring_ptx):
    from gpucourse.kernels.sgemm import pipelined

    a_copies = RING.bm * RING.bk // RING.threads  # a float of A each
    for text, (vectorized, interior) in zip(ring_ptx, KINDS):
        b_width = 2 if vectorized == "pairs" else 4 if vectorized else 1
        b_copies = RING.bk * RING.bn // b_width // RING.threads
        assert ".target sm_90" in text
        # Each thread's copies of one step, written out twice: the ring's
        # first tile (stages - 1 of them) and the walk's one ahead, each copy
        # checked against the edges (COPY_ADDRESSES "each", the default; with
        # "once", twice more where tiles may lie across an edge: unchecked
        # inside, checked at the edge). Not more: a walk written out once per
        # copy of the ring (two branches, each copy named by a constant) ran
        # 1000^3 at half the speed on the H200 (benchmarks/NOTES.md).
        sites = 2 if interior or pipelined.COPY_ADDRESSES == "each" else 4
        eight = len(re.findall(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 8", text))
        four = text.count("cp.async.ca.shared.global") - eight
        sixteen = text.count("cp.async.cg.shared.global")
        if vectorized == "pairs":  # B 8 bytes a copy, C 8 bytes a store
            assert (four, eight, sixteen) == (sites * a_copies, sites * b_copies, 0)
            stores = RING.tm * (RING.tn // 4) * 2  # two pairs for each four outputs
            assert text.count("st.global.v2.f32") == stores
            assert "st.global.f32" not in text and "st.global.v4.f32" not in text
        elif vectorized:
            assert (four, sixteen) == (sites * a_copies, sites * b_copies)
        else:
            assert (four, sixteen) == (sites * (a_copies + b_copies), 0)
        assert "cp.async.wait_group 0" in text and "cp.async.commit_group" in text
        # Nothing comes from global memory through registers; one barrier a
        # step and one at the end of the walk; one step's FMAs, written once.
        assert "ld.global" not in text
        assert text.count("bar.sync") == 2 and ".local" not in text
        assert text.count("fma.rn.f32") == RING.tm * RING.tn * RING.bk
        report = ptxas_report(text)
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
        registers = int(re.search(r"[Uu]sed (\d+) registers", report).group(1))
        assert registers <= 255, report


def test_the_rings_loop_is_mostly_fmas(ring_ptx):
    # In the main loop of the kernel for tiles inside the matrices, the
    # instructions besides the FMAs and the fragments' reads stay under an
    # eighth of the FMAs (ptxas 13.5: 117 for the ring's 1,024 with
    # COPY_ADDRESSES "each", 74 with "once", level 6's through registers 87
    # for its 2,048; the ring's first build, which also worked each address
    # out every step but branched per copy, 223). Fewer is not faster by
    # itself: "once" ran 1000^3 11% slower than "each" on the H200, and the
    # loop written out once per copy of the ring, 44, at half the speed.
    ring, ring_fmas = _loop_besides_the_arithmetic(ring_ptx[0])
    registers, fmas = _loop_besides_the_arithmetic(ring_ptx[len(KINDS)])
    assert (ring_fmas, fmas) == (RING.tm * RING.tn * RING.bk, 2 * RING.tm * RING.tn * RING.bk)
    assert len(ring) <= ring_fmas // 8, ring


def test_a_padded_bs_padding_never_reaches_c():
    # The ring reads a B copied into rows of n4 floats (entry_point's
    # _ring_plan) with C's n bounding its work: whatever the padding columns
    # hold, even NaN, reaches only C's columns past n, which are never
    # stored. The driver's pitched copy (entry_point.RING_COPY_BY_DRIVER)
    # leaves them as they were, and relies on this. K whole, split-K and
    # stream-K.
    from gpucourse.device import cuda
    from gpucourse.kernels.sgemm import padding
    from gpucourse.kernels.sgemm.kernel_choice import _kernel_for
    from gpucourse.kernels.sgemm.split_k import _split_kernel, _stream_kernel

    config = replace(SMALL, stages=2)
    m, n, k = 37, 30, 70
    a, b = _integers((m, k), 5), _integers((k, n), 6)
    padded = np.full((k, 32), np.nan, dtype=np.float32)
    padded[:, :n] = b
    want = _reference(a, b)
    whole, w_grid, w_block = _kernel_for("6", m, n, padding.LOADS_ONLY, config)
    launches = {"whole": lambda c: whole[w_grid, w_block](a_dev, b_dev, c)}
    kernel, grid, block, chunk = _split_kernel("6", m, n, k, 3, padding.LOADS_ONLY, config)
    launches["split"] = lambda c: kernel[grid, block](a_dev, b_dev, c, np.uint64(chunk))
    stream, s_grid, s_block, arguments = _stream_kernel("6", m, n, k, padding.LOADS_ONLY, config)
    launches["stream"] = lambda c: stream[s_grid, s_block](a_dev, b_dev, c, *arguments)
    a_dev, b_dev = cuda.to_device(a), cuda.to_device(padded)
    for name, launch in launches.items():
        c_dev = cuda.to_device(np.zeros((m, n), dtype=np.float32))
        launch(c_dev)
        got = c_dev.copy_to_host()
        assert np.isfinite(got).all(), name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_stores_staged_through_shared_memory_multiply_exactly(monkeypatch):
    # vectorized.STAGED_STORES: a ring whose B is padded and whose C takes no
    # 16-byte stores writes C through B's free shared tile, a row of each
    # thread-row at a time. Exact on integers, edges included, B padded and
    # read as given; staged only with B padded, K whole and C's rows ragged
    # (split-K and stream-K add into C, and a C of rows a multiple of 4 takes
    # 16-byte stores). A tile whose rows do not fit B's tile is named.
    from gpucourse.kernels.sgemm import entry_point, vectorized

    monkeypatch.setattr(vectorized, "STAGED_STORES", True)
    staged = []  # the simulator's device functions look their globals up at each call
    real_store = vectorized.store_float4_flat
    monkeypatch.setattr(vectorized, "store_float4_flat",
                        lambda *args: (staged.append(1), real_store(*args)))
    fresh()
    try:
        config = replace(SMALL, stages=2)
        for ring_b in ("padded", "scalar"):
            monkeypatch.setattr(entry_point, "RING_RAGGED_B", ring_b)
            for (m, n, k), splits, through in [((37, 30, 70), 1, True), ((5, 33, 9), 1, True),
                                               ((33, 31, 41), "stream", False),
                                               ((40, 29, 90), 3, False), ((9, 32, 20), 1, False)]:
                staged.clear()
                a, b = _integers((m, k), 7), _integers((k, n), 8)
                np.testing.assert_array_equal(
                    sgemm.matmul(a, b, 6, config=config, splits=splits), _reference(a, b),
                    err_msg=f"{ring_b}: {m} x {n} x {k}, splits {splits}")
                # staged where B is padded, C's rows ragged and nothing adds into C
                assert bool(staged) == (through and ring_b == "padded"), (ring_b, m, n, k, splits)
        with pytest.raises(ValueError, match="staged stores need"):
            vectorized._make_vectorized_kernel(TileConfig(32, 32, 8, 1, 4, stages=2), "loads")
    finally:
        monkeypatch.undo()
        fresh()


STAGED_SCRIPT = """
import json
import gpucourse.kernels.sgemm.vectorized as vectorized
from gpucourse.kernels import sgemm
vectorized.STAGED_STORES = True
config = sgemm.TileConfig(64, 128, 16, 8, 8, stages=2)
kernel = sgemm._tiled_kernel("6", config, "loads", False, False)
print(json.dumps(numba.cuda.compile_ptx(kernel.py_func, sgemm.SPLIT_SIGNATURE[:3],
                                        cc=(9, 0))[0]))
"""


def test_the_staged_stores_go_through_shared_memory_in_the_registers_of_three_blocks():
    # The 64 x 128 ring with B padded and C stored through shared memory
    # (vectorized.STAGED_STORES): each of a thread's 8 rows goes in as two
    # 16-byte shared stores, then out as 8 single-float global stores (a
    # row of 128 floats a pass, 1,024 staged floats over 128 threads), two
    # barriers a row besides the walk's two; no spills, and at most 168
    # registers a thread, three blocks of 128 threads an SM.
    text = json.loads(compile_without_a_gpu(STAGED_SCRIPT).strip().splitlines()[-1])
    assert text.count("st.shared.v4.f32") == RING.tm * (RING.tn // 4)
    assert text.count("st.global.f32") == RING.tm * (RING.bm // RING.tm * RING.bn // RING.threads)
    assert "st.global.v4.f32" not in text
    assert text.count("bar.sync") == 2 + 2 * RING.tm
    report = ptxas_report(text)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report
    assert int(re.search(r"[Uu]sed (\d+) registers", report).group(1)) <= 168, report
