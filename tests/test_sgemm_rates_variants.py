"""Week 8: the split kernel's measured share (shape_model.split_kernel_share,
split_shares_from_record) and benchmarks/sgemm_grid.py --rates-variants, which
measures it.

With slices of K, auto runs split_k.py's edge-checked kernel, not the
interior kernel the rates time. The share fitted from a variants record
makes plan_cost give the measured split time from the measured time with K
whole; it changes split plans only, and only where the model's JSON holds it
(without it, every pick is the committed grid's). Nothing is timed here: the
records are made by hand, with their arithmetic in the comments.
"""

import json
import math

import pytest

from gpucourse import results
from gpucourse.kernels import sgemm
from gpucourse.kernels.sgemm import TileConfig, shape_model, shape_model_fit

H200 = "NVIDIA H200"
TILE = TileConfig(128, 128, 16, 8, 8)
KEY = "128x128x16 8x8"


def _fails(function, *args, naming, **kwargs):
    with pytest.raises(ValueError, match=naming):
        function(*args, **kwargs)


def _entry(edge_share=0.0):
    """The H200's limits with rates and constants simple enough to price by
    hand: for 128 x 128, q blocks an SM take 0.05 q us a column of K and no
    fixed time; a launch 5 us, zeroing C 10 us, and 432537.6 atomic additions
    a microsecond (1536 x 2816 x 2 of them: 20 us)."""
    entry = dict(sgemm.gpu_entry(H200))
    entry.pop("split_kernel", None)
    entry.pop("zero_matrix", None)  # zeroing C: the constant zero_us below
    entry["constants"] = {**entry["constants"], "gpu_launch_us": 5.0, "zero_us": 10.0,
                          "atomics_per_us": 432537.6, "edge_share": edge_share}
    entry["rates"] = {"us_per_column": {KEY: [0.05 * q for q in range(1, 9)]},
                      "us_fixed": {KEY: [0.0] * 8}}
    entry["scalar_loads"] = None
    return entry


def _row(variant, q, m, n, us, splits, k=4096, tile=TILE):
    return {"variant": variant, "config": {"bm": tile.bm, "bn": tile.bn, "bk": tile.bk,
                                           "tm": tile.tm, "tn": tile.tn},
            "blocks_per_sm": q, "m": m, "n": n, "k": k, "splits": splits, "ms": us / 1e3,
            "max_rel_err": 1e-7}


# By hand, K = 4096, the rates' products of 128 x 128 (tile_grid's near-square
# grids of q x 132 tiles):
# q = 2: 12 x 22 tiles, 1536 x 2816. K whole: the busiest SM 2 blocks, 0.1 x
#   4096 = 409.6 us, + 5 launch. Two slices: 4 blocks of 2048 columns, 0.2 x
#   2048 = 409.6 us, + 5 + 10 + 20 (atomics) = 35. Measured 10% slower than
#   the rates (f = 1.1) with a share of 0.05: T1 = 5 + 409.6 x 1.1 = 455.56,
#   T2 = 35 + 409.6 x 1.1 x 1.05 = 508.088.
# q = 4: 22 x 24 tiles, 2816 x 3072. 0.2 x 4096 = 819.2 whole; 8 blocks of
#   2048: 0.4 x 2048 = 819.2; atomics 2816 x 3072 x 2 / 432537.6 = 40, so 55
#   besides. f = 1, share 0.5: T1 = 824.2, T2 = 55 + 819.2 x 1.5 = 1283.8.
# q = 8: 32 x 33 tiles, 4096 x 4224. 0.4 x 4096 = 1638.4 whole; 16 blocks of
#   2048, two groups of 8: 2 x 0.4 x 2048 = 1638.4; atomics 80, so 95 besides.
#   f = 0.9, share 0.07: T1 = 5 + 1474.56 = 1479.56, T2 = 95 + 1638.4 x 0.9 x
#   1.07 = 1672.7792.
# The median of 0.05, 0.5, 0.07: 0.07.
HAND_ROWS = [_row("whole", 2, 1536, 2816, 455.56, 1), _row("split", 2, 1536, 2816, 508.088, 2),
             _row("transposed", 2, 2816, 1536, 400.0, 1),
             _row("whole", 4, 2816, 3072, 824.2, 1), _row("split", 4, 2816, 3072, 1283.8, 2),
             _row("whole", 8, 4096, 4224, 1479.56, 1), _row("split", 8, 4096, 4224, 1672.7792, 2)]


def _record(rows=HAND_ROWS, benchmark="sgemm_rates_variants"):
    return {"benchmark": benchmark, "gpu": H200, "date": "2026-11-29", "results": list(rows)}


def test_split_shares_from_a_record_made_by_hand():
    shares = shape_model_fit.split_shares_from_record(_record(), _entry())
    assert list(shares) == [KEY] and math.isclose(shares[KEY], 0.07, rel_tol=1e-9)
    # One q alone gives its own share (0.05 at q = 2, 0.5 at q = 4).
    for rows, share in ((HAND_ROWS[:2], 0.05), (HAND_ROWS[3:5], 0.5)):
        found = shape_model_fit.split_shares_from_record(_record(rows), _entry())[KEY]
        assert math.isclose(found, share, rel_tol=1e-9)
    # The edge share plan_cost already charges split plans is not counted
    # twice: with edge_share 0.05, the same q = 2 times say (1 + 0.05) / (1 +
    # 0.05) - 1 = 0 beyond it.
    found = shape_model_fit.split_shares_from_record(_record(HAND_ROWS[:2]), _entry(0.05))[KEY]
    assert abs(found) < 1e-12
    # Nor a share the entry holds already: it is left out when fitting.
    held = {**_entry(), "split_kernel": {"share": {KEY: 0.3}}}
    assert math.isclose(shape_model_fit.split_shares_from_record(_record(), held)[KEY], 0.07)


def test_the_share_prices_split_plans_only_and_reproduces_the_measured_time():
    entry = _entry()
    with_share = {**entry, "split_kernel": {"source": "by hand", "share": {KEY: 0.5}}}
    assert shape_model.split_kernel_share(with_share, TILE) == 0.5
    assert shape_model.split_kernel_share(entry, TILE) == 0.0
    assert shape_model.split_kernel_share(with_share, TileConfig(64, 256, 16, 8, 8)) == 0.0
    # A share measured below 0 prices a split plan as K whole a step, no less.
    faster = {**entry, "split_kernel": {"source": "by hand", "share": {KEY: -0.09}}}
    assert shape_model.split_kernel_share(faster, TILE) == 0.0
    # q = 4 above (f = 1): with the share, plan_cost gives T2 = 1283.8 us.
    split = shape_model.plan_cost((2816, 3072, 4096), TILE, 2, with_share)
    assert math.isclose(split["gpu_us"], 1283.8) and split["split_share"] == 0.5
    for shape in [(2816, 3072, 4096), (1000, 1000, 1000), (4000, 4001, 4000), (512, 512, 32768)]:
        for splits in (1, 2, 4, 8):
            before = shape_model.plan_cost(shape, TILE, splits, entry)
            after = shape_model.plan_cost(shape, TILE, splits, with_share)
            if before["slices"] == 1:  # K whole: every number the same
                assert after == before, (shape, splits)
            else:  # slices: the busiest SM's time 1.5 times, the rest the same
                assert math.isclose(after["sm_us"], 1.5 * before["sm_us"])
                assert math.isclose(after["gpu_us"] - after["sm_us"],
                                    before["gpu_us"] - before["sm_us"])


def test_the_committed_grid_ran_the_picks_of_its_json():
    # The H200's grid of 2026-11-29 (its fourth of the day, now in
    # results/reruns/...-fourth; the sixth, in results/, ran a kernel whose
    # scalar loads are checked four at a time) ran auto's picks
    # of the JSON as committed: the split shares and each tile's own
    # scalar-load share. The day's third grid ran the same JSON with one
    # scalar-load share, 0.1099, for every tile (results/reruns/...-third):
    # that share moves the picks at four ragged shapes, from 128 x 128, which
    # ran faster there in the fourth grid than the third's picks in the
    # third (1537 x 1023 x 771 93.1 / 94.0 us, 2500 x 1999 x 3001 823 / 832,
    # 777 x 1313 x 2047 157 / 164, 3001 x 2999 x 1009 536 / 570). A block of
    # zero split shares prices every plan exactly as none.
    entry = sgemm.gpu_entry(H200)
    assert "split_kernel" in entry and "tile_share" in entry["scalar_loads"]
    folder = results.find_results("sgemm_grid")[0].parent
    grids = [results.load_results("sgemm_grid", path) for path in (
        folder / "reruns" / "sgemm_grid-h200-2026-11-29-fourth.json",
        folder / "reruns" / "sgemm_grid-h200-2026-11-29-third.json")]
    rows, third = ({(r["m"], r["n"], r["k"]): r for r in grid["results"] if r["variant"] == "auto"}
                   for grid in grids)
    assert len(rows) == len(third) == 37
    # Those grids ran before the cp.async rings and 192 x 128 joined the menu,
    # stream-K was priced, the rates had short depths (us_short) and zeroing
    # C had its measured line and the rings their registers: their picks are
    # the model's without them (zeroing at the constant zero_us).
    later = ([192, 128, 16, 12, 8],)
    line_rates = {key: value for key, value in entry["rates"].items() if key != "us_short"}
    split_kernel = {key: value for key, value in entry["split_kernel"].items()
                    if key != "whole_registers"}
    before_rings = {**{key: value for key, value in entry.items()
                       if key not in ("stream_kernel", "zero_matrix")},
                    "rates": line_rates, "split_kernel": split_kernel,
                    "menu": [row for row in entry["menu"]
                             if not (row[5:6] and row[5]) and row not in later]}
    one = {**before_rings, "scalar_loads": {"share": 0.1099}}
    bare = {key: value for key, value in entry.items() if key != "split_kernel"}
    zeros = {**bare, "split_kernel": {"share": {shape_model.tile_key(c): 0.0
                                                for c in shape_model.menu(entry)}}}
    # The newest grid (2026-11-30, the day's sixth) ran the picks of the JSON
    # as committed, rings included. The fifth (reruns/...-fifth) ran 4096 x
    # 4096 x 96 in 64 x 64 rings, priced by the short depths' rates before
    # they were limited to one round of blocks an SM; the sixth ran the 64 x
    # 128 rings the model picks there now, faster (81.8 us against 87.6).
    newest = {(r["m"], r["n"], r["k"]): r for r in results.load_results("sgemm_grid")["results"]
              if r["variant"] == "auto"}
    assert len(newest) == 37 and any(r["config"].get("stages") for r in newest.values())
    since = (4096, 4096, 96)
    fifth = results.load_results("sgemm_grid", folder / "reruns" /
                                 "sgemm_grid-h200-2026-11-30-fifth.json")
    there = next(r for r in fifth["results"] if r["variant"] == "auto"
                 and (r["m"], r["n"], r["k"]) == since)
    assert newest[since]["config"]["bn"] == 128 != there["config"]["bn"]
    assert newest[since]["ms"] < there["ms"]
    moved = []
    for shape, row in rows.items():
        for trial, ran in ((before_rings, row), (one, third[shape]), (entry, newest[shape])):
            plan = shape_model.choose_plan(shape, entry=trial)
            config = {f: getattr(plan["config"], f) for f in ("bm", "bn", "bk", "tm", "tn")}
            ran = {"stages": 0, **ran["config"]}
            assert {**config, "stages": plan["config"].stages, "splits": plan["splits"]} == ran, \
                shape
        priced = shape_model.choose_plan(shape, entry=zeros)["candidates"]
        without = shape_model.choose_plan(shape, entry=bare)["candidates"]
        assert [p["predicted_us"] for p in priced] == [p["predicted_us"] for p in without]
        if row["config"] != third[shape]["config"]:
            moved.append(shape)
            assert (row["config"]["bm"], row["config"]["bn"]) == (128, 128), shape
            assert row["ms"] < third[shape]["ms"], shape
    assert moved == [(1537, 1023, 771), (2500, 1999, 3001), (777, 1313, 2047),
                     (3001, 2999, 1009)]


def test_bad_records_are_refused_naming_what_is_wrong():
    entry = _entry()
    fit = shape_model_fit.split_shares_from_record
    _fails(fit, _record(benchmark="sgemm_rates"), entry, naming="sgemm_rates_variants record")
    _fails(fit, _record([HAND_ROWS[2]]), entry, naming="no rows of whole and split")
    _fails(fit, _record(HAND_ROWS[1:2]), entry, naming=f"{KEY} q 2: needs a row of whole")
    _fails(fit, _record(HAND_ROWS[:2] + HAND_ROWS[:1]), entry, naming="two rows of whole")
    _fails(fit, _record([HAND_ROWS[0], _row("split", 2, 1536, 2560, 500.0, 2)]), entry,
           naming="of the same shape")
    _fails(fit, _record([HAND_ROWS[0], _row("split", 2, 1536, 2816, 500.0, 1)]), entry,
           naming="split splits >= 2")
    _fails(fit, _record([HAND_ROWS[0], _row("split", 2, 1536, 2816, 0.0, 2)]), entry,
           naming="ms must be > 0")
    _fails(fit, _record([HAND_ROWS[0], _row("split", 2, 1536, 2816, 30.0, 2)]), entry,
           naming="below the model's fixed costs")
    other = TileConfig(64, 256, 16, 8, 8)  # the hand entry has rates for 128 x 128 only
    _fails(fit, _record([_row("whole", 2, 768, 5632, 800.0, 1, tile=other),
                         _row("split", 2, 768, 5632, 850.0, 2, tile=other)]), entry,
           naming="no measured rates")


@pytest.fixture
def grid(monkeypatch):
    """benchmarks/sgemm_grid.py as a module (it imports the benchmarks' _common)."""
    folder = results.find_results("sgemm_grid")[0].parents[1]
    monkeypatch.syspath_prepend(str(folder))
    import sgemm_grid

    return sgemm_grid


def test_the_command_line_and_the_products_it_times(grid):
    parser = grid.build_parser()
    assert parser.parse_args(["--rates-variants", "--out", "x"]).rates_variants
    assert not parser.parse_args([]).rates_variants
    # 128 x 128 at q = 2 on 132 SMs: 12 x 22 tiles, and turned 22 x 12; its
    # tiles are square, so the nearest-square matrix is one of the two.
    assert grid.variant_products(TILE, 2, 132) == [
        ("whole", 1536, 2816, 4096, 1), ("split", 1536, 2816, 4096, 2),
        ("transposed", 2816, 1536, 4096, 1)]
    # 128 x 256 at q = 8: 1056 tiles as 32 x 33 (4096 x 8448), turned 33 x 32
    # (4224 x 8192), and nearest square 48 x 22 (6144 x 5632: 6144 / 5632 =
    # 1.09; the next, 44 x 24, gives 5632 x 6144, 1 / 1.09).
    wide = grid.variant_products(TileConfig(128, 256, 16, 8, 16), 8, 132)
    assert [r[:3] for r in wide] == [("whole", 4096, 8448), ("split", 4096, 8448),
                                     ("transposed", 4224, 8192), ("square", 6144, 5632)]
    assert grid.variant_blocks(1) == [1, 2, 8] and grid.variant_blocks(2) == [2, 8]
    assert grid.variant_blocks(12) == [2, 8]


def test_the_shares_are_written_into_the_models_json(grid, tmp_path):
    # The save path --rates-variants takes, into a copy of the model's JSON:
    # the H200's entry gains "split_kernel" with the shares that
    # split_shares_from_record finds from that entry, and nothing else changes.
    import types

    path = tmp_path / "model.json"
    path.write_text(sgemm.MODEL_PATH.read_text())
    before = json.loads(path.read_text())
    entry = {"name": H200, **before["gpus"][H200]}
    entry.pop("split_kernel", None)
    # Times the H200's own rates price exactly (f = 1), 4% more with slices.
    rows = []
    for q in (2, 8):
        rows_, cols = grid.tile_grid(q * 132)
        m, n = rows_ * 128, cols * 128
        whole = shape_model.plan_cost((m, n, 4096), TILE, 1, entry)
        split = shape_model.plan_cost((m, n, 4096), TILE, 2, entry)
        rows += [_row("whole", q, m, n, whole["gpu_us"], 1),
                 _row("split", q, m, n, split["gpu_us"] + 0.04 * split["sm_us"], 2)]
    fake = types.SimpleNamespace(MODEL_PATH=path, shape_model=shape_model,
                                 shape_model_fit=shape_model_fit)
    grid.save_split_shares(fake, _record(rows), "benchmarks/results/x.json (--rates-variants)")
    after = json.loads(path.read_text())
    block = after["gpus"][H200].pop("split_kernel")
    before["gpus"][H200].pop("split_kernel", None)
    assert after == before
    assert block["source"] == "benchmarks/results/x.json (--rates-variants)"
    assert block["share"] == {KEY: 0.04}
    # With merge (--tiles), the tile's share joins the others the JSON holds.
    path.write_text(sgemm.MODEL_PATH.read_text())
    old = json.loads(path.read_text())["gpus"][H200]["split_kernel"]
    grid.save_split_shares(fake, _record(rows), "benchmarks/results/x.json (--rates-variants)",
                           merge=True)
    merged = json.loads(path.read_text())["gpus"][H200]["split_kernel"]
    assert merged["share"] == {**old["share"], KEY: 0.04} and len(old["share"]) > 1
    assert merged["source"] == (f"{old['source']}; benchmarks/results/x.json (--rates-variants) "
                                f"({KEY})")


def test_explore_takes_the_shapes_it_is_given(grid):
    # --shapes narrows --explore (half_precision_gpu.sh's sgemm_explore_deep);
    # a piece that is not three positive sizes is named in the error.
    assert grid.parse_shapes("1000x1000x1000, 1537X1023x771") == [(1000, 1000, 1000),
                                                                  (1537, 1023, 771)]
    assert grid.parse_shapes("") == []
    for bad in ("1000x1000", "0x5x5", "axbxc", "1000x1000x1000,7x7"):
        with pytest.raises(ValueError, match="three positive integers joined by x"):
            grid.parse_shapes(bad)
    assert grid.build_parser().parse_args(["--explore", "--shapes", "8x8x8"]).shapes == "8x8x8"
    # The deep-step candidates are tiles matmul can run (a thread's outputs
    # whole, the loads shared evenly), not in the menu.
    from gpucourse.kernels import sgemm

    menu = sgemm.shape_model.menu(sgemm.gpu_entry("NVIDIA H200"))
    for fields in grid.DEEP_STEP_CANDIDATES:
        config = sgemm.TileConfig(*fields)
        assert config.bk == 32 and config not in menu
        sgemm.check_config(config)


RING = TileConfig(64, 128, 16, 8, 8, stages=2)
RING_KEY = "64x128x16 8x8 s2"


def test_tiles_narrow_the_rates_to_new_ones_and_their_numbers_join_the_others(grid, tmp_path):
    # --tiles names tiles by their five sizes and, for a cp.async ring, its
    # stages; a piece that is not that is named in the error.
    assert grid.parse_tiles("64x128x16x8x8s2, 128x128x16x8x8") == [(64, 128, 16, 8, 8, 2),
                                                                  (128, 128, 16, 8, 8, 0)]
    assert grid.parse_tiles("") == []
    for bad in ("64x128x16x8", "64x128x16x8x8s", "64x128x16x8x8t2", "0x128x16x8x8"):
        with pytest.raises(ValueError, match="five positive integers joined by x"):
            grid.parse_tiles(bad)
    entry = sgemm.gpu_entry(H200)
    assert grid.rate_tiles(sgemm, entry, [(64, 128, 16, 8, 8, 2)]) == [RING]
    assert shape_model.tile_key(RING) == RING_KEY
    assert grid.rate_tiles(sgemm, entry, []) == shape_model.menu(entry) + [
        TileConfig(*t) for t in grid.RATE_CANDIDATES if TileConfig(*t) not in shape_model.menu(entry)]
    # A rates record of the ring alone, by hand: at q blocks an SM, 1 us of
    # fixed time (after the 5 us launch the line's intercept holds) and 0.01 q
    # us a column, at three depths; merged, the ring's rates join the H200's,
    # which stay as they were.
    import types

    path = tmp_path / "model.json"
    path.write_text(sgemm.MODEL_PATH.read_text())
    before = json.loads(path.read_text())
    launch = before["gpus"][H200]["constants"]["gpu_launch_us"]
    rows = [{"config": {"bm": 64, "bn": 128, "bk": 16, "tm": 8, "tn": 8, "stages": 2},
             "blocks_per_sm": q, "k": k, "ms": (launch + 1.0 + 0.01 * q * k) / 1e3}
            for q in range(1, 9) for k in (512, 1024, 4096)]
    fake = types.SimpleNamespace(MODEL_PATH=path, shape_model=shape_model,
                                 shape_model_fit=shape_model_fit)
    grid.save_rates(fake, {"gpu": H200, "results": rows}, "benchmarks/results/r.json (--rates)",
                    merge=True)
    after = json.loads(path.read_text())["gpus"][H200]["rates"]
    old = before["gpus"][H200]["rates"]
    assert after["source"] == f"{old['source']}; benchmarks/results/r.json (--rates) ({RING_KEY})"
    assert after["us_per_column"] == {**old["us_per_column"],
                                      RING_KEY: [pytest.approx(0.01 * q) for q in range(1, 9)]}
    assert after["us_fixed"][RING_KEY] == [pytest.approx(1.0)] * 8
    assert {k: v for k, v in after["us_fixed"].items() if k != RING_KEY} == \
        {k: v for k, v in old["us_fixed"].items() if k != RING_KEY}
    # Two depths leave no fixed time, which the entry's other tiles have: refused.
    two = [r for r in rows if r["k"] != 4096]
    with pytest.raises(ValueError, match=r"the record's rates lack \['us_fixed'\]"):
        grid.save_rates(fake, {"gpu": H200, "results": two}, "x", merge=True)


def test_the_rates_products_hold_q_blocks_an_sm_and_their_rows_read_back(grid):
    # sgemm_grid.rate_products and rate_row, shared by --rates and
    # sgemm_rates_short.py: q x SMs whole tiles at each depth; rows that
    # shape_model.rates_from_record reads.
    tile = TileConfig(64, 128, 16, 8, 8)
    products = list(grid.rate_products(tile, 132, (512, 1024)))
    assert [(q, k) for q, _, _, k in products] == [(q, k) for q in grid.RATE_BLOCKS
                                                  for k in (512, 1024)]
    assert all(m % 64 == 0 and n % 128 == 0 and (m // 64) * (n // 128) == 132 * q
               for q, m, n, _ in products)
    row = grid.rate_row(tile, 2, 128, 256, 512, 0.5, 1e-7)
    assert row["tflops"] == pytest.approx(2 * 128 * 256 * 512 / 0.5 / 1e9)
    assert sgemm.tile_config_of(row["config"]) == tile and row["blocks_per_sm"] == 2
