"""Fitting auto's shape model to measurements: what benchmarks/sgemm_grid.py
and sgemm_model_json.py run, on a GPU's timings, to write the constants,
shares and factors that ``shape_model`` prices plans with.

``shape_model`` holds the pricing a student reads (``plan_cost``,
``choose_plan``); this module holds the fits that turn timings into its
numbers, each from rows of (shape, TileConfig, splits, microseconds):

* ``calibrate``: the cost model's constants, a coordinate search on their
  logarithms (``search_bounds`` adds the plans a sweep timed no faster than
  its winner as lower bounds; ``measured_rows`` reads a results record);
* ``split_shares_from_record`` and ``measured_share``: how much longer the
  split-K kernel works than the rates' one, tile by tile;
* ``fit_scalar_load_shares``: what loading one float at a time costs each
  tile, from the explores (``explore_rows``, ``scalar_load_rows``);
* ``fit_ring_scalar_b``: what reading a ragged B 4 bytes a copy costs each
  ring (by how full its busiest SM is, where an entry is given), and what
  copying it first costs the host, from benchmarks/sgemm_kernel_times.py;
* ``fit_stream_tile_shares``: stream-K's share tile by tile, from the
  explores;
* ``fit_plan_factors``: measured over priced time for each tile and way of
  walking K, from the explores: a correction tried on 2026-11-30 and not
  adopted (benchmarks/NOTES.md), kept so that a trial can be rerun.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from gpucourse.kernels.sgemm.config import _shape, _whole, check_config, tile_config_of
from gpucourse.kernels.sgemm.shape_model import (CONSTANTS, STREAM, STREAM_MIN_STEPS, STREAM_MIN_US,
                                                 blocks_regime, depth_band, menu, plan_cost,
                                                 plan_kind, ring_scalar_b_share, tile_key)


def measured_share(t_whole: float, whole: dict, t_other: float, other: dict) -> float:
    """The share x of `other`'s busiest SM (a plan_cost, priced without its
    share) that makes the model give its measured t_other us, the rates'
    drift between runs cancelled by `whole`, priced and measured (t_whole) in
    the same run: f = (t_whole - rest) / sm_us, x = (t_other - rest') /
    (f sm_us') - 1, rest being gpu_us less sm_us. Raises ValueError where
    t_whole is not above its plan's fixed costs (no drift can be read)."""
    rest, rest_other = whole["gpu_us"] - whole["sm_us"], other["gpu_us"] - other["sm_us"]
    if not t_whole > rest:
        raise ValueError(f"t_whole must exceed the plan's fixed costs ({rest:.1f} us), "
                         f"got {t_whole!r}")
    return (t_other - rest_other) / ((t_whole - rest) / whole["sm_us"] * other["sm_us"]) - 1


def split_shares_from_record(record: dict, entry: dict) -> dict:
    """{tile key: split share} from an sgemm_rates_variants record
    (benchmarks/sgemm_grid.py --rates-variants; sgemm_rates_variants_tiles
    with --tiles): for each tile, the median
    over its counts of blocks an SM (q) of the share x that makes plan_cost
    give the measured split time from the measured time with K whole. At
    one q, with T1 and T2 the measured microseconds with K whole and with
    slices (rows "whole" and "split" of one shape), and plan_cost's sm_us and
    the rest of its gpu_us (launch; with slices also zero_us and the atomics)
    for both, priced by the entry without any split shares:

        f = (T1 - rest1) / sm1          (this run's kernel against the rates)
        x = (T2 - rest2) / (f sm2) - 1

    so that rest2 + f sm2 (1 + x) = T2: the charges plan_cost already makes
    for splitting are not counted twice, and the rates' drift between runs
    (f) cancels. Raises ValueError, naming what is wrong, for a record of
    another benchmark, one without such pairs, a row without its partner or
    twice, of another shape than its partner, a time that is not > 0, a tile
    the entry has no measured rates for, or a time below the model's fixed
    costs."""
    if not isinstance(record, dict) or record.get("benchmark") not in (
            "sgemm_rates_variants", "sgemm_rates_variants_tiles"):
        raise ValueError("the record must be an sgemm_rates_variants record (benchmarks/"
                         "sgemm_grid.py --rates-variants, or _tiles with --tiles), got "
                         f"{record.get('benchmark') if isinstance(record, dict) else record!r}")
    bare = {key: value for key, value in entry.items() if key != "split_kernel"}
    pairs: dict = {}
    for row in record.get("results", []):
        if row.get("variant") not in ("whole", "split"):
            continue
        config = tile_config_of(row["config"])
        key, q = tile_key(config), row["blocks_per_sm"]
        if not (isinstance(row.get("ms"), (int, float)) and row["ms"] > 0):
            raise ValueError(f"{key} q {q} {row['variant']}: ms must be > 0, got {row.get('ms')!r}")
        here = pairs.setdefault(key, {}).setdefault(q, {})
        if row["variant"] in here:
            raise ValueError(f"{key} q {q}: two rows of {row['variant']}")
        here[row["variant"]] = ((row["m"], row["n"], row["k"]), row.get("splits", 1), config,
                                row["ms"] * 1e3)
    if not pairs:
        raise ValueError("the record holds no rows of whole and split (sgemm_grid.py "
                         "--rates-variants)")
    shares = {}
    for key, by_q in pairs.items():
        found = []
        for q, here in sorted(by_q.items()):
            if set(here) != {"whole", "split"}:
                raise ValueError(f"{key} q {q}: needs a row of whole and one of split, got "
                                 f"{sorted(here)}")
            (shape, one, config, t1), (shape2, splits, _, t2) = here["whole"], here["split"]
            if shape != shape2 or one != 1 or splits < 2:
                raise ValueError(f"{key} q {q}: whole must be splits 1 and split splits >= 2 "
                                 f"of the same shape, got {shape} ({one}) and {shape2} ({splits})")
            p1, p2 = plan_cost(shape, config, 1, bare), plan_cost(shape, config, splits, bare)
            if p1["rate"] != "measured":
                raise ValueError(f"{key}: the entry has no measured rates for this tile "
                                 "(sgemm_grid.py --rates first)")
            rest1, rest2 = p1["gpu_us"] - p1["sm_us"], p2["gpu_us"] - p2["sm_us"]
            if t1 <= rest1 or t2 <= rest2:
                raise ValueError(f"{key} q {q}: measured {t1:.1f} / {t2:.1f} us, below the "
                                 f"model's fixed costs {rest1:.1f} / {rest2:.1f} us")
            found.append(measured_share(t1, p1, t2, p2))
        shares[key] = statistics.median(found)
    return shares


def explore_rows(record: dict) -> list:
    """(shape, TileConfig, splits, microseconds) of every plan a
    benchmarks/sgemm_grid.py --explore (or --explore-off-grid) record timed as
    auto runs it, tiles outside the menu included (their rates are measured
    too); or, of a grid record, its rows of auto."""
    if record.get("benchmark", "").startswith("sgemm_explore"):
        return [((r["m"], r["n"], r["k"]),
                 tile_config_of(r["config"]),
                 r["config"]["splits"], r["ms"] * 1e3) for r in record.get("results", [])]
    return measured_rows(record, variants=("auto",))


def scalar_load_rows(rows) -> list:
    """The rows (shape, TileConfig, splits, microseconds) whose products matmul
    runs with scalar loads: n or k not a multiple of 4 (plan_cost's test)."""
    return [row for row in rows if row[0][1] % 4 or row[0][2] % 4]


def fit_scalar_load_share(rows, entry: dict, low: float = 0.0, high: float = 0.5) -> float:
    """The scalar_share that makes plan_cost's times closest to measured ones
    (least squares of log ratios, a golden-section search over [low, high]),
    the entry's other constants and rates kept. rows: (shape, TileConfig,
    splits, microseconds) as ``explore_rows`` gives them; only rows of
    products with scalar loads say anything about it. Raises ValueError when
    none of the rows has scalar loads."""
    rows = _rows(rows, "rows")
    ragged = scalar_load_rows(rows)
    if not ragged:
        raise ValueError("no row has scalar loads (n or k not a multiple of 4): nothing to fit")

    def error(share):
        trial = {**entry, "scalar_loads": {"share": share}}
        return sum(math.log(plan_cost(shape, config, splits, trial)["predicted_us"] / us) ** 2
                   for shape, config, splits, us in ragged)

    golden = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a, b = high - golden * (high - low), low + golden * (high - low)
        if error(a) < error(b):
            high = b
        else:
            low = a
    return (low + high) / 2


def fit_scalar_load_shares(rows, entry: dict, min_shapes: int = 3) -> dict:
    """The entry's "scalar_loads" block fitted to timings (rows as
    ``explore_rows`` gives them): {"share": one share for every tile
    (``fit_scalar_load_share`` over every ragged row), "tile_share": {tile
    key: the share fitted to that tile's ragged rows alone}} for each tile
    timed at `min_shapes` ragged shapes or more. The cost is the tile's own:
    four scalar loads replace each 128-bit one, and what that costs depends
    on what else the tile's threads wait for. On the H200's explores
    (2026-11-29) 128 x 128 paid 0.06, 64 x 256 0.13, 64 x 64 (4 x 8) 0.19 and
    64 x 64 x 8 nothing; loads per multiply-add alone do not explain them, so
    they are measured, not derived. Raises ValueError as
    fit_scalar_load_share does."""
    rows = _rows(rows, "rows")
    ragged = scalar_load_rows(rows)
    by_tile: dict = {}
    for row in ragged:
        by_tile.setdefault(tile_key(row[1]), []).append(row)
    return {"share": fit_scalar_load_share(ragged, entry, high=0.6),
            "tile_share": {key: fit_scalar_load_share(found, entry, high=0.6)
                           for key, found in by_tile.items()
                           if len({row[0] for row in found}) >= min_shapes}}


def _prediction_error(constants: dict, entry: dict, rows: list, bounds: list) -> float:
    """Mean squared log ratio of predicted to measured time over `rows`, plus,
    for each of `bounds` predicted faster than its measured lower bound (less
    a 3% margin, the spread of a quick timing), the square of the log ratio."""
    trial = {**entry, "constants": constants}
    errors = [math.log(plan_cost(shape, config, splits, trial)["predicted_us"] / us) ** 2
              for shape, config, splits, us in rows]
    for shape, config, splits, at_least in bounds:
        short = math.log(plan_cost(shape, config, splits, trial)["predicted_us"] / (0.97 * at_least))
        errors.append(min(0.0, short) ** 2)
    return sum(errors) / len(errors)


def _rows(rows, name: str) -> list:
    checked = [(_shape(tuple(shape)), check_config(config), _whole("splits", splits), float(us))
               for shape, config, splits, us in rows]
    if any(not us > 0 for *_, us in checked):
        raise ValueError(f"{name} must be (shape, config, splits, microseconds > 0) rows")
    return checked


def calibrate(rows, entry: dict, bounds=(), rounds: int = 30, fixed=("call_us",)) -> dict:
    """Constants that fit measured times, from the entry's constants as a start.

    rows: (shape, TileConfig, splits, measured microseconds) of level 6's kernel
    as a user calls it. bounds: rows of the same form whose time is a lower
    bound (a plan a search measured no faster than its winner: ``search_bounds``),
    so that the model does not pick what the sweep found slower. A coordinate
    search on each constant's logarithm (steps of x2, then smaller), keeping any
    change that lowers the error; the constants named in `fixed` stay. Returns
    {"constants": ..., "rms_log_error": ..., "rows": ..., "bounds": ...}.
    """
    rows, bounds = _rows(rows, "rows"), _rows(bounds, "bounds")
    if not rows:
        raise ValueError("rows must hold at least one measured (shape, config, splits, microseconds)")
    constants = dict(entry["constants"])
    best = _prediction_error(constants, entry, rows, bounds)
    step = 2.0
    for _ in range(rounds):
        improved = False
        for name in CONSTANTS:
            if name in fixed:
                continue
            for factor in (step, 1 / step):
                trial = {**constants, name: constants[name] * factor}
                if name == "eff_max" and trial[name] > 1:
                    continue
                error = _prediction_error(trial, entry, rows, bounds)
                if error < best:
                    constants, best, improved = trial, error, True
        if not improved:
            step = math.sqrt(step)
            if step < 1.01:
                break
    return {"constants": constants, "rms_log_error": math.sqrt(best), "rows": len(rows),
            "bounds": len(bounds)}


def search_bounds(record: dict, entry: dict) -> list:
    """Lower bounds from a benchmarks/sgemm_shapes.py record's search: at each
    shape it searched, every configuration of the GPU's menu that its search
    space held was timed with one slice of K and was no faster than the
    winner; the winner itself was timed with every number of slices the
    search tried; and where it tried split-K in its quick pass (tiles of
    64 x 128 and more, at its SPLIT_SHAPES: 2048^3 and where a winner has
    slices), so was every such configuration of the menu."""
    search = record.get("search") or {}
    space = search.get("space") or {}
    tried_splits = [s for s in search.get("splits") or (1,) if s > 1]
    found = []
    for best in search.get("by_shape", []):
        shape = (best["m"], best["n"], best["k"])
        winner = (tile_config_of(best), best.get("splits", 1))
        split_shape = best.get("splits", 1) > 1 or shape == (2048, 2048, 2048)
        for config in menu(entry):
            if any(getattr(config, f) not in space.get(f, ()) for f in ("bm", "bn", "bk", "tm", "tn")):
                continue
            splits = [1] + (tried_splits if split_shape and config.bm * config.bn >= 64 * 128 else [])
            found += [(shape, config, s, best["ms"] * 1e3) for s in splits if (config, s) != winner]
        found += [(shape, winner[0], s, best["ms"] * 1e3) for s in [1] + tried_splits
                  if s != winner[1] and (shape, winner[0], s, best["ms"] * 1e3) not in found]
    return found


def measured_rows(record: dict, variants=("auto", "level6")) -> list:
    """(shape, TileConfig, splits, microseconds) of a benchmark record's rows of
    level 6's kernel (sgemm_shapes or sgemm_grid results: rows with a "config"
    of bm, bn, bk, tm, tn and a wall-clock "ms"), for ``calibrate`` and the tests."""
    found = []
    for row in record.get("results", []):
        config = row.get("config")
        if row.get("variant") not in variants or not config or row.get("failed"):
            continue
        tiles = tile_config_of(config)
        found.append(((row["m"], row["n"], row["k"]), tiles, config.get("splits", 1),
                      row["ms"] * 1e3))
    return found


def fit_plan_factors(rows, entry: dict, min_rows: int = 3, weight: float = 2.0) -> dict:
    """{"tile key kind": factor} for the entry's "plan_factor" block
    (``shape_model.plan_factor``), from timings (rows as ``explore_rows``
    gives them): for each tile and way of walking K (``shape_model.plan_kind``:
    "whole", "split" or "stream") timed `min_rows` times or more, the median
    over its rows of the busiest SM's measured time over its priced one,
    (us - the plan's other costs) / sm_us, priced by the entry without any
    factors, pulled toward 1 as if `weight` more rows had measured exactly
    the price: 1 + (median - 1) n / (n + weight). Rows the host decides
    (host_us >= gpu_us) say nothing of the kernel and are left out. Raises
    ValueError for rows that are not (shape, config, splits, us > 0)."""
    bare = {key: value for key, value in entry.items() if key != "plan_factor"}
    found: dict = {}
    for shape, config, splits, us in rows:
        if not (isinstance(us, (int, float)) and us > 0):
            raise ValueError(f"rows must be (shape, config, splits, microseconds > 0), got {us!r}")
        plan = plan_cost(shape, check_config(config), splits, bare)
        if plan["host_us"] >= plan["gpu_us"]:
            continue
        ratio = (us - (plan["gpu_us"] - plan["sm_us"])) / plan["sm_us"]
        found.setdefault(f"{tile_key(config)} {plan_kind(plan)}", []).append(ratio)
    pulled = {key: 1 + (statistics.median(ratios) - 1) * len(ratios) / (len(ratios) + weight)
              for key, ratios in sorted(found.items()) if len(ratios) >= min_rows}
    return {key: round(factor, 4) for key, factor in pulled.items()}


def fit_ring_scalar_b(record: dict, min_shapes: int = 3, entry: dict | None = None,
                      min_regime_shapes: int = 2, way: str = "scalar") -> dict:
    """The entry's "ring_scalar_b" block fitted to a sgemm_kernel_times record
    (benchmarks/sgemm_kernel_times.py; several runs' rows may be joined in one
    "results"): each ring plan timed at a ragged n twice, B copied first
    (variant X) and B read 4 bytes a copy (X_scalar_b).
    {"share": {tile key: the median over its pairs of the product kernel's
    time read scalar over its time padded, less 1}, for each tile timed at
    `min_shapes` shapes or more; "copy_call_us": the median of the host's
    time a call padded less scalar (the copy's launch, on the host)}. Given
    the GPU's `entry`, also "share_by_blocks": {tile key: {regime: the
    median of the tile's pairs whose plan (``plan_cost`` on `entry`) puts
    that many blocks on the busiest SM (``shape_model.blocks_regime``: "one",
    "part", "full")}}, for each regime timed at `min_regime_shapes` shapes or
    more (each a pair of one kernel timed two ways in one run: two shapes
    that agree are evidence enough). With `way` "pairs", the same of the rings
    timed reading an even ragged B 8 bytes a copy (variant X_pairs_b,
    entry_point.RING_PAIRS): the model's "ring_pairs_b" block; with "shifted",
    of B read in 16-byte chunks wherever its rows start (X_shifted_b,
    entry_point.RING_SHIFTED).

    The product kernel is each call's longest (the copy of B and split-K's
    zeroing are shorter). Raises ValueError where the record holds no pair."""
    ratios: dict = {}
    regimes: dict = {}
    host = []
    for row, twin, ratio, config, pair in _rings_both_ways(record, way):
        key = tile_key(config)
        ratios.setdefault(key, {})[pair] = ratio
        if entry is not None:
            plan = plan_cost(pair[:3], config, row["config"].get("splits", 1), entry)
            regime = blocks_regime(plan["busiest_sm_blocks"], plan["blocks_per_sm"])
            regimes.setdefault(key, {}).setdefault(regime, {})[pair] = ratio
        host.append(twin["host_us"] - row["host_us"])

    def medians(found, least):
        return _share_medians(found, least, way)

    fit = {"share": medians(ratios, min_shapes), "copy_call_us": round(statistics.median(host), 2)}
    if entry is not None:
        fit["share_by_blocks"] = {key: found for key, found in
                                  ((key, medians(by_regime, min_regime_shapes))
                                   for key, by_regime in sorted(regimes.items())) if found}
    return fit


def _rings_both_ways(record: dict, way: str):
    """(row read `way`, its twin with B padded, the product kernel's time the
    one over the other, the ring's TileConfig, (m, n, k, variant)) for each
    ring of a sgemm_kernel_times record timed both ways (variants X and
    X_<way>_b at one shape; the product kernel is each call's longest).
    ValueError for another way, or where the record holds no such pair."""
    if way not in ("scalar", "pairs", "shifted"):
        raise ValueError(f"way must be 'scalar', 'pairs' or 'shifted', got {way!r}")
    suffix = f"_{way}_b"
    rows = record.get("results", [])
    padded = {(r["m"], r["n"], r["k"], r["variant"]): r for r in rows}
    found = []
    for row in rows:
        if not row["variant"].endswith(suffix):
            continue
        twin = padded.get((row["m"], row["n"], row["k"], row["variant"][:-len(suffix)]))
        if twin is None:
            continue
        main = [max(kernel["us"] for kernel in r["kernels"]) for r in (row, twin)]
        found.append((row, twin, main[0] / main[1], tile_config_of(row["config"]),
                      (row["m"], row["n"], row["k"], row["variant"])))
    if not found:
        raise ValueError(f"the record holds no ring timed both ways (variants X and "
                         f"X{suffix} at one shape)")
    return found


def _share_medians(found: dict, least: int, way: str) -> dict:
    """{key: the median of its ratios less 1} for each key of `found` ({key:
    {(m, n, k, variant): ratio}}) timed at `least` shapes or more, rounded.
    Against B padded first, whose C is stored a float at a time, 8-byte
    copies and stores ran up to 12% faster (short K, where storing C is much
    of a tile's time); against an aligned n's 16-byte stores they cannot be:
    the pairs' shares stop at 0."""
    floor = 0.0 if way == "pairs" else -math.inf
    return {key: round(max(floor, statistics.median(pairs.values()) - 1), 4)
            for key, pairs in sorted(found.items())
            if len({shape[:3] for shape in pairs}) >= least}


def fit_ring_b_by_depth(record: dict, entry: dict, way: str = "scalar",
                        min_shapes: int = 1) -> dict:
    """The share for reading a ragged B as given by tile, by how full the
    busiest SM is and by how deep K runs: {tile key: {regime: {band: the
    median of the pairs there less 1}}}, a regime of
    ``shape_model.blocks_regime`` and a band of ``shape_model.depth_band``
    (a block's steps of K), each from the plan ``plan_cost`` on `entry`
    makes of the pair's shape; for the entry's "share_by_depth" of
    "ring_scalar_b" (`way` "scalar") or "ring_pairs_b" ("pairs"). Fitted to
    records of ``sgemm_kernel_times.py --depth-grid``, where each cell of the
    grid is one shape a depth: `min_shapes` 1. ValueError as
    ``fit_ring_scalar_b``'s."""
    cells: dict = {}
    for row, _, ratio, config, pair in _rings_both_ways(record, way):
        plan = plan_cost(pair[:3], config, row["config"].get("splits", 1), entry)
        regime = blocks_regime(plan["busiest_sm_blocks"], plan["blocks_per_sm"])
        band = depth_band(plan["block_steps"])
        cells.setdefault((tile_key(config), regime), {}).setdefault(band, {})[pair] = ratio
    fit: dict = {}
    for (key, regime), bands in sorted(cells.items()):
        found = _share_medians(bands, min_shapes, way)
        if found:
            fit.setdefault(key, {})[regime] = found
    return fit


def stream_share_samples(rows, entry: dict) -> dict:
    """{tile key: {shape: x}} from rows (shape, TileConfig, splits, us;
    ``explore_rows``) of stream-K plans that the model prices (on the GPU
    STREAM_MIN_US or more, STREAM_MIN_STEPS steps a worker or more): the
    share x that makes plan_cost on `entry` (without any stream share) give
    the measured time, x = (us - rest) / sm_us - 1, sm_us being the busiest
    SM's time (a ring reading B as given: its share included), rest the
    launch, zeroing, atomic adds and any copy of B. Rings on a ragged n are priced the way
    `entry` says they read B (an entry without "ring_scalar_b" copies it
    first, as the explores timed before rings read B as given did)."""
    bare = {**entry, "stream_kernel": {"share": 0.0}}
    found: dict = {}
    for shape, config, splits, us in rows:
        if splits != STREAM:
            continue
        plan = plan_cost(shape, check_config(config), STREAM, bare)
        if plan["gpu_us"] < STREAM_MIN_US or plan["worker_steps"] < STREAM_MIN_STEPS:
            continue
        as_given = ring_scalar_b_share(bare, config, plan["busiest_sm_blocks"],
                                       plan["blocks_per_sm"]) if plan["ring_scalar_b"] else 0.0
        sm_us = plan["sm_us"] * (1 + (as_given or 0.0))
        found.setdefault(tile_key(config), {})[tuple(shape)] = (
            us - (plan["gpu_us"] - sm_us)) / sm_us - 1
    return found


def fit_stream_tile_shares(samples: dict, min_shapes: int = 3) -> dict:
    """{tile key: stream-K's share}: for each tile of `samples`
    (``stream_share_samples``, several joined) timed at `min_shapes` shapes
    or more, the median of its shares, at least 0: a worker runs the
    kernel's steps and adds its pieces, so stream-K is never priced faster a
    step than the rates (as ``shape_model.split_kernel_share`` for slices;
    the 64 x 128 rings' median, -0.055 on 2026-11-30, would have moved 91 of
    229 picks off plans that ran at 86-105% of cuBLAS)."""
    return {key: max(0.0, round(statistics.median(shares.values()), 4))
            for key, shares in sorted(samples.items()) if len(shares) >= min_shapes}


def _zeroes_c(name: str) -> bool:
    """Whether a profiled GPU operation is the zeroing of C: the zeroing kernel
    (split_k.zero_matrix) or, from 2026-11-30, the driver's memset (the
    profiler names it "Memset (Device)")."""
    return "zero_matrix" in name or name.startswith("Memset")


def fit_zero_matrix(records, min_points: int = 3) -> dict:
    """The cost of zeroing C before split-K's or stream-K's adds, from
    benchmarks/sgemm_kernel_times.py records (one, or a list of them; their
    rows' kernels under the profiler): a straight line through the median durations
    of the zeroing kernel, or of the driver's memset that replaced it,
    against C's size in millions of floats (least squares), plus the gap a
    second kernel adds to a call that the GPU paces (the median, over its
    shapes, of the wall clock beyond the kernels with two kernels less that
    with one). Returns {"fixed_us": intercept + gap, "us_per_million": slope,
    "points": how many durations}. Raises ValueError with fewer than
    min_points durations at two sizes or more, or no shape timed both ways."""
    points, beyond = [], defaultdict(dict)
    for row in (row for record in ([records] if isinstance(records, dict) else records)
                for row in record.get("results", [])):
        kernels = row.get("kernels") or []
        # cuBLAS's rows are left out: it runs memsets of its own.
        zero = [k["us"] for k in kernels if _zeroes_c(k["name"])] if row["variant"] != "cublas" \
            else []
        if zero:
            points.append((row["m"] * row["n"] / 1e6, zero[0]))
        if row["variant"] != "cublas" and row["wall_us"] > 1.1 * row["host_us"]:
            total = sum(k["us"] * k["per_call"] for k in kernels)
            beyond[(row["m"], row["n"], row["k"])].setdefault(len(kernels), []).append(
                row["wall_us"] - total)
    if len(points) < min_points or len({x for x, _ in points}) < 2:
        raise ValueError(f"the record holds {len(points)} durations of the zeroing kernel; "
                         f"the line needs {min_points} or more, at two sizes or more")
    gaps = [statistics.median(by[2]) - statistics.median(by[1])
            for by in beyond.values() if 1 in by and 2 in by]
    if not gaps:
        raise ValueError("no shape of the record was timed with one kernel and with two, "
                         "whose difference is a second kernel's gap")
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
             / sum((x - mean_x) ** 2 for x, _ in points))
    return {"fixed_us": round(mean_y - slope * mean_x + statistics.median(gaps), 3),
            "us_per_million": round(slope, 3), "points": len(points)}
