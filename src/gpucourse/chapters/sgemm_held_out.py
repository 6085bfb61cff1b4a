"""Chapter 8's fair test of `auto`: shapes drawn at random and timed before
anything was changed for them (``benchmarks/sgemm_off_grid.py --held-out N``).

The grid and the shapes off it were looked at while the shape model changed,
so they cannot say how the model does on a shape nobody tuned for. Each set
of HELD_OUT in that script was drawn at random (its seed is in the script)
and committed before it was timed. This module reads those runs
(``sgemm_held_out_<N>``), says which shapes meet issue 33's targets
(``sgemm.grid_targets``), and, where an explore run timed the plans of the
menu at the misses (``sgemm_grid.py --explore --shapes``), whether the pick
or the menu fell short (``sgemm.explore_rows``).
"""

from __future__ import annotations

import math
import statistics

from gpucourse import results
from gpucourse.chapters.sgemm import (explore_rows, grid_targets, load_explore_results,
                                      shape_class)

# The explore runs that timed the menu at a set's misses (results/reruns/):
# set 2's four large misses, the day it was drawn; set 3's seven misses of
# its first run under the model as committed (and two shapes of the earlier
# sets); set 4's nine misses.
HELD_OUT_EXPLORES = {2: "reruns/sgemm_explore-h200-2026-11-30-held-out-2.json",
                     3: "reruns/sgemm_explore-h200-2026-11-30-held-out-3.json",
                     4: "reruns/sgemm_explore-h200-2026-11-30-held-out-4.json"}

# A trial of the model with a price factor per tile and way of walking K,
# fitted to the explores and not adopted (benchmarks/NOTES.md): the grid it ran,
# and the grid of the committed model it ran beside, in the same session.
PLAN_FACTOR_GRID = "reruns/sgemm_grid-h200-2026-11-30-plan-factor.json"
PLAN_FACTOR_BASE = "reruns/sgemm_grid-h200-2026-11-30-sixth.json"

# Each set's run before rings could read a ragged B as given (every ring on a
# ragged n copied B first): the runs the explores timed the menu beside.
BEFORE_SCALAR_B = "reruns/sgemm_held_out_{}-h200-2026-11-30-before-scalar-b.json"
# Each set's run before the shares by how full the SM is (rings reading B as
# given) and stream-K's shares by tile (twenty-third session); set 7's was
# timed in the same session as its run under them.
BEFORE_TILE_SHARES = "reruns/sgemm_held_out_{}-h200-2026-11-30-before-tile-shares.json"
# Each set's run before the zeroing's measured cost and the K-whole rings'
# registers joined the model (benchmarks/sgemm_model_json.py
# --trial-split-residency, tried in the twenty-fourth session, adopted in the
# twenty-fifth); set 9, drawn before, ran both in the same call, twice each.
BEFORE_SPLIT_RESIDENCY = "reruns/sgemm_held_out_{}-h200-2026-11-30-before-split-residency.json"
# Each set's run under the trial that zeroes C with the driver's memset and
# prices it by its measured line (sgemm_model_json.py --trial-zero-memset,
# twenty-fifth session); set 10, drawn before, ran it in turns with the
# committed model (zeroing kernel), twice each (the second rounds: -second).
TRIAL_ZERO_MEMSET = "reruns/sgemm_held_out_{}-h200-2026-11-30-trial-zero-memset.json"
# Each set's run with rings reading an even ragged B 4 bytes a copy, as before
# 8-byte copies (sgemm_off_grid.py --four-byte-pairs, twenty-sixth session);
# set 11, drawn before, ran it in turns with them, twice each (-second).
FOUR_BYTE_PAIRS = "reruns/sgemm_held_out_{}-h200-2026-11-30-four-byte.json"
# Set 11 under a trial pricing those 8-byte copies (sgemm_model_json.py
# --trial-ring-pairs, not adopted), and under the committed model in turns
# with it, twice each (-second); then rings read three ways at 1717 x 1730
# and five depths of K (sgemm_kernel_times.py), which say why it lost.
TRIAL_RING_PAIRS = "reruns/sgemm_held_out_{}-h200-2026-11-30-trial-ring-pairs.json"
BESIDE_RING_PAIRS = "reruns/sgemm_held_out_{}-h200-2026-11-30-beside-ring-pairs-trial.json"
PAIRS_DEPTH = "reruns/sgemm_kernel_times-h200-2026-11-30-pairs-depth.json"
# The ways of reading a ragged B in a ring, timed beside cuBLAS
# (benchmarks/sgemm_ring_pairs.py).
RING_PAIRS = "sgemm_ring_pairs-h200-2026-11-30.json"
# The same shapes timed again with B read shifted (entry_point.RING_SHIFTED)
# and with C's peeled stores (vectorized.PEELED_STORES), twenty-seventh
# session: both lost or tied, and stay off.
RING_SHIFTED = "reruns/sgemm_ring_pairs-h200-2026-11-30-shifted.json"
# The run meant to adopt the zero-memset trial (its block written into the
# model, sgemm_model_json.py --fit-zero-memset): the grid, and each set whose
# picks it moves, twenty-seventh session. Its moves lost; not adopted.
ZERO_MEMSET_GRID = "reruns/sgemm_grid-h200-2026-11-30-trial-zero-memset.json"
ZERO_MEMSET_ADOPTION = "reruns/sgemm_held_out_{}-h200-2026-11-30-trial-zero-memset-adoption.json"
# The zeroing kernel against the driver's memset (benchmarks/sgemm_zeroing.py).
ZEROING = "sgemm_zeroing-h200-2026-11-30.json"
# What ptxas counts for each ring's three kernels (benchmarks/sgemm_registers.py).
REGISTERS = "sgemm_registers-sm90-2026-11-30.json"
# The sgemm_kernel_times runs whose zeroing kernels give its measured cost
# (shape_model_fit.fit_zero_matrix; sgemm_model_json.py --trial-split-residency).
KERNEL_TIMES = ("sgemm_kernel_times-h200-2026-11-30.json",
                "reruns/sgemm_kernel_times-h200-2026-11-30-rounds.json")
# The sgemm_kernel_times run timed with C zeroed by the driver's memset: the
# zero-memset trial's line (sgemm_model_json.py --trial-zero-memset).
KERNEL_TIMES_MEMSET = ("reruns/sgemm_kernel_times-h200-2026-11-30-memset.json",)


# Each set's run that the chapter's history reads as "after" the changes it
# tells of (the split residency's adoption, set 10's memset trial and set
# 11's copies in pairs in turns, the zero-memset adoption): a set run again
# later, with the kernels of its day, becomes its newest run (the table and
# the figure read that), and the history keeps reading these.
HISTORY_RUN = "sgemm_held_out_{}-h200-2026-11-30.json"


def load_held_out_results(number: int, path=None) -> dict | None:
    """The newest run of held-out set `number` (1, 2, ...), or the record at
    `path`; None while none is committed. Raises ValueError for a number that
    is not a whole number >= 1."""
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"number must be a held-out set's number (1, 2, ...), got {number!r}")
    name = f"sgemm_held_out_{number}"
    if path is None and not results.find_results(name):
        return None
    return results.load_results(name, path)


def load_held_out_sets() -> dict:
    """{set number: its newest run} of every held-out set committed, 1, 2, ...
    in turn until one is missing ({} while none is)."""
    found, number = {}, 1
    while (record := load_held_out_results(number)) is not None:
        found[number] = record
        number += 1
    return found


def _misses(records: dict) -> list:
    """(GFLOP, m, n, k, share) of every miss of `records` ({set: run})."""
    _check_records(records)
    return [(2 * m * n * k / 1e9, m, n, k, share) for record in records.values()
            for name in ("large", "mid") for m, n, k, share in grid_targets(record)[name]["missed"]]


def largest_miss_gflop(records: dict, at_most: float | None = None) -> float:
    """The work (2 m n k, in GFLOP) of the largest product of `records` ({set
    number: run}) that misses its target, of those of `at_most` GFLOP or less
    where given; 0.0 where none does. Raises ValueError unless records is
    such a dict (``grid_targets``: of runs with rows)."""
    if at_most is not None:
        _check_gflop("at_most", at_most)
    return max((work for work, *_ in _misses(records) if at_most is None or work <= at_most),
               default=0.0)


def misses_above(records: dict, gflop: float) -> list[tuple[str, float]]:
    """(shape as text, share of cuBLAS) of each miss of `records` ({set: run})
    whose product is more than `gflop` GFLOP of work, the largest first."""
    _check_gflop("gflop", gflop)
    return [(shape_text(m, n, k), share) for work, m, n, k, share in
            sorted(_misses(records), reverse=True) if work > gflop]


def _check_gflop(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of GFLOP >= 0, got {value!r}")


def _check_records(records) -> None:
    if not isinstance(records, dict) or not all(isinstance(r, dict) for r in records.values()):
        raise ValueError(f"records must be a dict {{set number: held-out run}}, got "
                         f"{type(records).__name__}")


def held_out_explore(number: int) -> dict | None:
    """The explore run that timed the menu at set `number`'s misses
    (HELD_OUT_EXPLORES), or None where there is none."""
    name = HELD_OUT_EXPLORES.get(number)
    folder = results.results_dir()
    if name is None or not (folder / name).exists():
        return None
    return load_explore_results(folder / name)


def auto_row(record: dict, shape: tuple) -> dict:
    """auto's row at `shape` (m, n, k) in a grid-format record. Raises
    ValueError where the record did not time it."""
    for row in record.get("results", []):
        if row["variant"] == "auto" and (row["m"], row["n"], row["k"]) == tuple(shape):
            return row
    raise ValueError(f"the record has no auto row at {shape!r}")


def share_at(record: dict, shape: tuple) -> float:
    """auto's share of cuBLAS at `shape` (m, n, k) in a grid-format record
    (``auto_row``'s "vs_cublas")."""
    return auto_row(record, shape)["vs_cublas"]


def ring_scalar_b_shares(entry: dict) -> dict:
    """The ring tiles' shares for reading a ragged B as given, in a GPU entry
    of the shape model: {"low": (share, "bm × bn"), "high": (share, "bm × bn")},
    the least and the most. Raises ValueError for an entry without them."""
    shares = (entry.get("ring_scalar_b") or {}).get("share")
    if not shares:
        raise ValueError("entry must hold a \"ring_scalar_b\" block with shares "
                         "(benchmarks/sgemm_kernel_times.py --save)")
    found = {}
    for name, pick in (("low", min), ("high", max)):
        key = pick(shares, key=shares.get)  # "64x64x16 8x4 s2": its first two sizes
        bm, bn = key.split("x")[:2]
        found[name] = (shares[key], f"{bm} × {bn}")
    return found


def large_spread(record: dict) -> dict:
    """auto's shares of cuBLAS over the shapes of a grid-format `record` held to
    the large target (M and N of 512 or more): {"shapes", "median", "worst",
    "worst_shape" (as text)}. Raises ValueError for a record without such rows."""
    try:
        large = grid_targets(record)["large"]
    except ValueError:  # no rows at all
        large = None
    if not large or not large["shapes"]:
        raise ValueError("record must be a grid-format run with auto rows of M and N >= 512")
    return {"shapes": large["shapes"], "median": large["median"], "worst": large["worst"],
            "worst_shape": shape_text(*large["worst_shape"])}


def plan_factor_trial() -> dict | None:
    """The grid of the price-factor trial (PLAN_FACTOR_GRID) beside the grid of
    the model it was a trial against (PLAN_FACTOR_BASE, else the newest
    committed grid), each as ``large_spread``: {"trial": ..., "committed": ...,
    "moved": how many of the grid's picks the trial changed}; None while
    either is missing."""
    folder = results.results_dir()
    if not (folder / PLAN_FACTOR_GRID).exists() or not results.find_results("sgemm_grid"):
        return None
    trial = results.load_results("sgemm_grid", folder / PLAN_FACTOR_GRID)
    base = folder / PLAN_FACTOR_BASE
    committed = results.load_results("sgemm_grid", base if base.exists() else None)
    plans = [{(r["m"], r["n"], r["k"]): r["config"] for r in record["results"]
              if r["variant"] == "auto"} for record in (trial, committed)]
    return {"trial": large_spread(trial), "committed": large_spread(committed),
            "moved": sum(plans[0][s] != plans[1].get(s) for s in plans[0])}


def _earlier_run(template: str, number: int) -> dict | None:
    """Set `number`'s run kept in results/ under `template` (a name with {} for
    the set), None where there is none."""
    path = results.results_dir() / template.format(number)
    return load_held_out_results(number, path) if path.exists() else None


def history_run(number: int) -> dict | None:
    """Set `number`'s run the chapter's history reads as the one after its
    changes (HISTORY_RUN), None where there is none."""
    return _earlier_run(HISTORY_RUN, number)


def ran_with_pairs(record: dict) -> bool:
    """Whether a held-out run's rings read an even ragged B 8 bytes a copy
    (entry_point.RING_PAIRS on, as its record's model says; runs from before
    the switch was recorded predate it)."""
    return record.get("model", {}).get("ring_pairs") is True


def before_scalar_b(number: int) -> dict | None:
    """Set `number`'s run before rings could read a ragged B as given
    (BEFORE_SCALAR_B), None where there is none."""
    return _earlier_run(BEFORE_SCALAR_B, number)


def before_tile_shares(number: int) -> dict | None:
    """Set `number`'s run before stream-K's shares by tile and the shares by
    how full the SM is (BEFORE_TILE_SHARES), None where there is none."""
    return _earlier_run(BEFORE_TILE_SHARES, number)


def before_split_residency(number: int) -> dict | None:
    """Set `number`'s run before the zeroing's measured cost and the K-whole
    rings' registers joined the model (BEFORE_SPLIT_RESIDENCY), None where
    there is none."""
    return _earlier_run(BEFORE_SPLIT_RESIDENCY, number)


def trial_zero_memset(number: int) -> dict | None:
    """Set `number`'s run under the zero-memset trial (TRIAL_ZERO_MEMSET),
    None where there is none."""
    return _earlier_run(TRIAL_ZERO_MEMSET, number)


def four_byte_pairs(number: int, second: bool = False) -> dict | None:
    """Set `number`'s run with rings reading an even ragged B 4 bytes a copy
    (FOUR_BYTE_PAIRS; with `second`, its second round), None where there is
    none."""
    return _earlier_run(FOUR_BYTE_PAIRS.replace(".json", "-second.json") if second
                        else FOUR_BYTE_PAIRS, number)


def reads_b_in_pairs(row: dict) -> bool:
    """Whether auto's `row` (a grid-format row) read B 8 bytes a copy with
    RING_PAIRS on: a ring of at most RING_PAIRS_MOST_ROWS rows that reads an
    even ragged B as given."""
    from gpucourse.kernels.sgemm.entry_point import RING_PAIRS_MOST_ROWS

    config = row["config"]
    return bool(row["n"] % 4 == 2 and config.get("stages") and row["model"].get("ring_scalar_b")
                and config["bm"] <= RING_PAIRS_MOST_ROWS)


def pairs_in_turns(number: int) -> dict | None:
    """Set `number` run in turns with 8-byte copies (its committed run and
    the -second round) and with 4-byte ones (``four_byte_pairs``), None
    unless all four runs are committed: {"pairs_shapes": its large shapes
    that read B 8 bytes a copy, "eight" and "four": (met, shapes) of the
    large class in each round, "flipped": the large shapes met in some runs
    and not in others, "flipped_pairs": how many of those read B 8 bytes a
    copy, "flipped_us": the longest of auto's calls at them (us)}."""
    eight = [history_run(number),
             _earlier_run("reruns/sgemm_held_out_{}-h200-2026-11-30-second.json", number)]
    four = [four_byte_pairs(number), four_byte_pairs(number, True)]
    if any(run is None for run in eight + four):
        return None
    large = [r for r in eight[0]["results"]
             if r["variant"] == "auto" and shape_class(r["m"], r["n"]) == "large"]
    met = [{(m, n, k) for m, n, k, _ in grid_targets(run)["large"]["missed"]}
           for run in eight + four]
    flipped = [r for r in large if len({(r["m"], r["n"], r["k"]) in missed for missed in met}) > 1]
    return {"pairs_shapes": sum(map(reads_b_in_pairs, large)),
            "eight": [class_met({number: run}) for run in eight],
            "four": [class_met({number: run}) for run in four],
            "flipped": len(flipped), "flipped_pairs": sum(map(reads_b_in_pairs, flipped)),
            "flipped_us": max((1e3 * auto_row(run, (r["m"], r["n"], r["k"]))["ms"]
                               for r in flipped for run in eight + four), default=0.0)}


def ring_pairs_trial(number: int) -> dict | None:
    """Set `number`'s runs in turns under the ring-pairs trial and the
    committed model, {"trial": [first, second], "committed": [first,
    second]}, None unless all four are committed."""
    found = {who: [_earlier_run(template, number),
                   _earlier_run(template.replace(".json", "-second.json"), number)]
             for who, template in (("trial", TRIAL_RING_PAIRS), ("committed", BESIDE_RING_PAIRS))}
    return None if any(run is None for runs in found.values() for run in runs) else found


def read_as_given_by_depth(m: int, n: int, path=None) -> dict | None:
    """How much longer the cheapest ring with K whole took, at each depth k
    that the PAIRS_DEPTH run (or the record at `path`) timed m x n, reading B
    as given than with B padded first, product kernel against product
    kernel: {k: {"scalar": 4 bytes a copy, "pairs": 8 bytes a copy}} (0.15:
    15% longer); None while the run is not committed. Raises ValueError
    where it did not time m x n."""
    path = results.results_dir() / PAIRS_DEPTH if path is None else path
    if not path.exists():
        return None
    depths = sorted({r["k"] for r in results.load_results("sgemm_kernel_times", path)["results"]
                     if (r["m"], r["n"]) == (m, n)})
    if not depths:
        raise ValueError(f"the run did not time {m} x {n}")
    found = {}
    for k in depths:
        times = kernel_times((m, n, k), path)
        found[k] = {way: times[f"ring_{way}_b"]["product"] / times["ring"]["product"] - 1
                    for way in ("scalar", "pairs")}
    return found


def ring_pairs_gains(path=None) -> dict | None:
    """What 8-byte copies of B (and stores of C) gave the rings timed by
    benchmarks/sgemm_ring_pairs.py at shapes with n % 4 == 2 (the record at
    `path`, default RING_PAIRS in results/; None while none is committed):
    {tile "BMxBN": {"shapes": how many, "faster_than_scalar": at how many
    the call was faster than with 4-byte copies, "over_scalar" and
    "over_padded": the median of the call's time those ways over its time
    with 8-byte copies, less 1}}. Raises ValueError where a way's result was
    wrong (its error over 1e-4)."""
    record = ring_pairs_record(RING_PAIRS if path is None else path)
    if record is None:
        return None
    ways: dict = {}
    for row in record["results"]:
        if row["n"] % 4 == 2 and not row.get("staged_stores") and row["way"] != "cublas":
            ways.setdefault((row["m"], row["n"], row["k"]), {})[row["way"]] = row
    found: dict = {}
    for timed in ways.values():
        if not {"pairs", "scalar", "padded"} <= set(timed):
            continue
        config = timed["pairs"]["config"]
        ratios = found.setdefault(f"{config['bm']}x{config['bn']}", {"scalar": [], "padded": []})
        for way in ("scalar", "padded"):
            ratios[way].append(timed[way]["ms"] / timed["pairs"]["ms"])
    return {tile: {"shapes": len(r["scalar"]),
                   "faster_than_scalar": sum(x > 1 for x in r["scalar"]),
                   "over_scalar": statistics.median(r["scalar"]) - 1,
                   "over_padded": statistics.median(r["padded"]) - 1}
            for tile, r in sorted(found.items())}


def ring_pairs_record(path):
    """The sgemm_ring_pairs record at `path` (a name in results/, or a path),
    None where there is none; ValueError where a way's result was wrong (its
    error over 1e-4), naming the way and the shape."""
    path = results.results_dir() / path
    if not path.exists():
        return None
    record = results.load_results("sgemm_ring_pairs", path)
    wrong = [r for r in record["results"] if r.get("max_rel_err", 0.0) > 1e-4]
    if wrong:
        raise ValueError(f"the ring_pairs record's {wrong[0]['way']} was wrong at "
                         f"{shape_text(wrong[0]['m'], wrong[0]['n'], wrong[0]['k'])}")
    return record


def _spread(ratios: list) -> tuple[float, float, float]:
    """(least, median, most) of `ratios`, each less 1 (0.05: 5% longer)."""
    return min(ratios) - 1, statistics.median(ratios) - 1, max(ratios) - 1


def shifted_rings(path=None) -> dict | None:
    """How B read shifted and C's peeled stores did in the sgemm_ring_pairs
    record at `path` (default RING_SHIFTED in results/; None while none is
    committed), call time against call time: {"shifted": {"shapes": how many
    timed it, "slower": at how many it took longer than the fastest other way
    of reading B there, "over_best": (least, median, most) of its time over
    that way's, less 1}, "peeled": {"shapes", "faster": at how many B padded
    with peeled stores beat B padded with 4-byte stores, "change": (least,
    median, most) of the one's time over the other's, less 1}}. Raises
    ValueError where a way's result was wrong (its error over 1e-4)."""
    record = ring_pairs_record(RING_SHIFTED if path is None else path)
    if record is None:
        return None
    rows = [row for row in record["results"] if not row.get("staged_stores")]
    ways: dict = {}
    for row in rows:
        ways.setdefault((row["m"], row["n"], row["k"]), {})[row["way"]] = row["ms"]
    over_best = [timed["shifted"] / min(ms for way, ms in timed.items()
                                        if way in ("padded", "scalar", "pairs"))
                 for timed in ways.values() if "shifted" in timed]
    peeled = ways_against(rows).get("padded_peeled")
    if not over_best or peeled is None:
        raise ValueError("the ring_pairs record did not time the shifted and the peeled ways")
    return {"shifted": {"shapes": len(over_best), "slower": sum(x > 1 for x in over_best),
                        "over_best": _spread(over_best)},
            "peeled": peeled}


def way_ratios(rows: list[dict], baseline: str = "padded") -> dict:
    """{way: [its call time over `baseline`'s, at each shape of the
    sgemm_ring_pairs rows that timed both]}, the ways in the order first met
    (cuBLAS and auto's plans through registers left out)."""
    times: dict = {}
    for row in rows:
        if row["way"] not in ("cublas", "auto"):
            times.setdefault((row["m"], row["n"], row["k"]), {})[row["way"]] = row["ms"]
    ratios: dict = {}
    for timed in times.values():
        for way, ms in timed.items():
            if way != baseline and baseline in timed:
                ratios.setdefault(way, []).append(ms / timed[baseline])
    return ratios


def ways_against(rows: list[dict], baseline: str = "padded") -> dict:
    """Each way's call time against `baseline`'s (``way_ratios``): {way:
    {"shapes": how many, "faster": at how many it took less time, "change":
    (least, median, most) of its time over the baseline's, less 1}}. What
    benchmarks/sgemm_ring_pairs.py prints at its end, to judge a way by."""
    return {way: {"shapes": len(r), "faster": sum(x < 1 for x in r), "change": _spread(r)}
            for way, r in way_ratios(rows, baseline).items()}


def zero_memset_adoption() -> dict | None:
    """The runs meant to adopt the zero-memset trial (ZERO_MEMSET_GRID, and
    ZERO_MEMSET_ADOPTION for each set that has one) beside the committed runs
    of the same grid and sets: {"trial": {0: grid, set: run, ...},
    "committed": {...}}, for ``moved_picks``, ``worst_moved`` and
    ``class_met``; None until the grid's is committed."""
    folder = results.results_dir()
    if not (folder / ZERO_MEMSET_GRID).exists() or not results.find_results("sgemm_grid"):
        return None
    trial = {0: results.load_results("sgemm_grid", folder / ZERO_MEMSET_GRID)}
    committed = {0: results.load_results("sgemm_grid")}
    for number in sorted(load_held_out_sets()):
        run = _earlier_run(ZERO_MEMSET_ADOPTION, number)
        if run is not None:
            trial[number], committed[number] = run, history_run(number)
    return {"trial": trial, "committed": committed}


def zeroing_times(path=None) -> dict | None:
    """{(m, n): {way: us a call}} from the sgemm_zeroing record at `path`
    (default ZEROING in results/): the zeroing kernel ("zero_kernel"), the
    driver's memset ("memset_d32") and the others it timed; None while none
    is committed. Raises ValueError where a way left C unzeroed."""
    path = results.results_dir() / ZEROING if path is None else path
    if not path.exists():
        return None
    record = results.load_results("sgemm_zeroing", path)
    wrong = [f"{c['m']} x {c['n']} {c['what']}" for c in record["checks"] if not c["zeroed"]]
    if wrong:
        raise ValueError(f"the zeroing record's checks failed at {', '.join(wrong)}")
    found: dict = {}
    for row in record["results"]:
        found.setdefault((row["m"], row["n"]), {})[row["what"]] = row["us"]
    return found


def ring_registers(path=None) -> dict | None:
    """{tile: {kernel: (registers a thread, blocks an SM)}} for each ring's
    kernels ("whole", "split", "stream") from the sgemm_registers record at
    `path` (default REGISTERS in results/), None while none is committed."""
    path = results.results_dir() / REGISTERS if path is None else path
    if not path.exists():
        return None
    found: dict = {}
    for row in results.load_results("sgemm_registers", path)["results"]:
        found.setdefault(row["tile"], {})[row["kernel"]] = (row["registers"], row["blocks_per_sm"])
    return found


def zero_matrix_line(names=KERNEL_TIMES) -> dict | None:
    """The zeroing's measured cost (shape_model_fit.fit_zero_matrix) over the
    sgemm_kernel_times runs `names` (in results/): by default KERNEL_TIMES,
    the zeroing kernel's; KERNEL_TIMES_MEMSET gives the driver's memset's.
    None while they are not committed."""
    from gpucourse.kernels.sgemm.shape_model_fit import fit_zero_matrix

    paths = [results.results_dir() / name for name in names]
    if not all(path.exists() for path in paths):
        return None
    return fit_zero_matrix([results.load_results("sgemm_kernel_times", path) for path in paths])


def _check_class(name: str) -> None:
    if name not in ("large", "mid"):
        raise ValueError(f"name must be 'large' or 'mid', got {name!r}")


def _check_pair(before: dict, after: dict) -> None:
    """Both {set: run}, over the same sets (a ValueError naming them else)."""
    _check_records(before)
    _check_records(after)
    if set(before) != set(after):
        raise ValueError(f"before and after must hold the same sets, got {sorted(before)} "
                         f"and {sorted(after)}")


def gains(before: dict, after: dict, name: str = "large") -> dict:
    """The shapes of class `name` that missed their target in `before` and
    meet it in `after` (each {set: run} over the same sets), split by
    whether auto ran the same plan in both: {"moved": [...], "same": [...]},
    each a list of (m, n, k). At the same plan a gain is the run's, not the
    model's (the host's pace, the clocks)."""
    _check_pair(before, after)
    _check_class(name)
    found = {"moved": [], "same": []}
    for number, record in after.items():
        missed = {s[:3] for s in grid_targets(before[number])[name]["missed"]}
        still = {s[:3] for s in grid_targets(record)[name]["missed"]}
        for shape in sorted(missed - still):
            same = auto_row(before[number], shape)["config"] == auto_row(record, shape)["config"]
            found["same" if same else "moved"].append(shape)
    return found


def reads_b_as_given(row: dict) -> bool:
    """Whether auto's `row` (a grid-format row) ran a ring that reads a ragged
    B as given (its plan's "ring_scalar_b"; 8 bytes a copy where n is even,
    ``reads_b_in_pairs``), rather than copying B first: part of the plan,
    though not of its tile. Rows from before rings could read it never did."""
    return bool((row.get("model") or {}).get("ring_scalar_b", False))


def moved_rows(before: dict, after: dict, reads: bool = False):
    """(set, auto's row before, its row after) at each shape of {set: run}
    `before` and `after` (the same sets) whose tile or slices differ; with
    `reads`, also where only how a ring reads a ragged B differs
    (``reads_b_as_given``), which a change of the model's ring_copy or
    ring_scalar_b block moves on its own."""
    _check_pair(before, after)
    for number, record in after.items():
        rows = {(r["m"], r["n"], r["k"]): r for r in before[number]["results"]
                if r["variant"] == "auto"}
        for row in record["results"]:
            old = rows.get((row["m"], row["n"], row["k"]))
            if row["variant"] == "auto" and old is not None and (
                    old["config"] != row["config"]
                    or reads and reads_b_as_given(old) != reads_b_as_given(row)):
                yield number, old, row


def moved_picks(before: dict, after: dict) -> dict:
    """What a change of the model did where it changed auto's plan: over the
    shapes of {set: run} `before` and `after` (the same sets, or two
    grid-format runs of the same shapes as {0: run}) whose plan differs,
    {"moved": how many, "faster": how many ran a larger share of cuBLAS
    after, "mean": the mean change of that share (0.017: 1.7 points)}."""
    changes = [row["vs_cublas"] - old["vs_cublas"] for _, old, row in moved_rows(before, after)]
    return {"moved": len(changes), "faster": sum(change > 0 for change in changes),
            "mean": sum(changes) / len(changes) if changes else 0.0}


def worst_moved(before: dict, after: dict, name: str = "large") -> tuple[dict, dict]:
    """(auto's row before, its row after) where a moved pick of class `name`
    (``grid_targets``'s "large" or "mid") lost most of its share of cuBLAS,
    over {set: run} `before` and `after`. Raises ValueError where no pick of
    that class moved."""
    _check_class(name)
    large = name == "large"
    moved = [(row["vs_cublas"] - old["vs_cublas"], old, row)
             for _, old, row in moved_rows(before, after)
             if (min(row["m"], row["n"]) >= 512) == large]
    if not moved:
        raise ValueError(f"no pick of the {name} shapes moved between before and after")
    _, old, row = min(moved, key=lambda t: t[0])
    return old, row


def class_met(records: dict, name: str = "large") -> tuple[int, int]:
    """(shapes at their target, shapes) of class `name` (``grid_targets``'s
    "large", M and N of 512 or more, or "mid") over {set: run}."""
    _check_records(records)
    _check_class(name)
    found = [grid_targets(record)[name] for record in records.values()]
    return sum(t["met"] for t in found), sum(t["shapes"] for t in found)


def misses_by_row_length(records: dict, name: str = "large") -> dict:
    """Where the misses of class `name` fall over {set: run}, split by C's row
    length: {"ragged": (missed, shapes), "aligned": (missed, shapes)}, n not a
    multiple of 4 or a multiple of 4 (rows that 16-byte copies and stores
    cannot, or can, take whole)."""
    _check_records(records)
    _check_class(name)
    found = {"ragged": [0, 0], "aligned": [0, 0]}
    for record in records.values():
        targets = grid_targets(record)[name]
        missed = {(m, n, k) for m, n, k, _ in targets["missed"]}
        for row in record["results"]:
            if row["variant"] != "auto" or shape_class(row["m"], row["n"]) != name:
                continue
            side = found["ragged" if row["n"] % 4 else "aligned"]
            side[0] += (row["m"], row["n"], row["k"]) in missed
            side[1] += 1
    return {side: tuple(counts) for side, counts in found.items()}


def kernel_times(shape: tuple, path=None) -> dict | None:
    """What one call costs at `shape` in the newest benchmarks/sgemm_kernel_times.py
    run (or the one at `path`): {variant: {"wall", "host", "kernels": its
    kernels' microseconds a call, "product": the longest kernel's}}, None
    while none is committed. Raises ValueError where the run did not time
    `shape`."""
    if path is None and not results.find_results("sgemm_kernel_times"):
        return None
    record = results.load_results("sgemm_kernel_times", path)
    rows = [r for r in record["results"] if (r["m"], r["n"], r["k"]) == tuple(shape)]
    if not rows:
        raise ValueError(f"shape must be one the sgemm_kernel_times run timed, got {shape!r}")
    return {r["variant"]: {"wall": r["wall_us"], "host": r["host_us"],
                           "kernels": sum(k["us"] * k["per_call"] for k in r["kernels"]),
                           "product": max(k["us"] for k in r["kernels"])} for r in rows}


def host_costs(path=None) -> dict | None:
    """{shape: {what: us per call}} of the newest benchmarks/sgemm_host_costs.py
    run (or the one at `path`), None while none is committed."""
    if path is None and not results.find_results("sgemm_host_costs"):
        return None
    record = results.load_results("sgemm_host_costs", path)
    found = {}
    for row in record["results"]:
        found.setdefault((row["m"], row["n"], row["k"]), {})[row["what"]] = row["us"]
    return found


def shape_text(m: int, n: int, k: int) -> str:
    """An m x n x k product as the prose writes it: "1,070 x 581 x 2,242"."""
    return f"{m:,} x {n:,} x {k:,}"


def count_text(count: int) -> str:
    """A small count as the prose writes it: "one" to "nine", else digits.
    Raises ValueError unless count is a whole number >= 0."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a whole number >= 0, got {count!r}")
    words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
    return words[count] if count < len(words) else str(count)


def miss_percent(share: float) -> str:
    """A miss's share of cuBLAS as a percentage to a tenth, rounded down, so
    that a share just under its target never reads as the target (0.8499:
    "84.9%", not "85.0%")."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or share != share:
        raise ValueError(f"share must be a number (a share of cuBLAS), got {share!r}")
    return f"{math.floor(share * 1000 + 1e-9) / 10:.1f}%"


def held_out_summary(record: dict, explore: dict | None = None) -> dict:
    """What a held-out run says of issue 33's targets: "shapes" (how many),
    "large" and "mid" (``grid_targets``'s classes: shapes, met, worst,
    missed), "missed_text" (the misses of both classes, "m x n x k (share)",
    the share rounded down, ``miss_percent``, worst first), and, with
    `explore` (an sgemm_explore record that timed the menu at some of the
    misses), "menu_short" and "pick_short": the misses
    where no plan of the menu reached the target, and those where one did
    and auto's pick did not, each as text with the best plan's share. Raises
    ValueError for a record without rows (``grid_targets``)."""
    targets = grid_targets(record)
    missed = sorted(targets["large"]["missed"] + targets["mid"]["missed"], key=lambda x: x[3])
    found = {"shapes": len({(r["m"], r["n"], r["k"]) for r in record["results"]}),
             "large": targets["large"], "mid": targets["mid"],
             "missed_text": ", ".join(f"{shape_text(m, n, k)} ({miss_percent(share)})"
                                      for m, n, k, share in missed)}
    if explore is not None:
        misses = {(m, n, k) for m, n, k, _ in missed}
        rows = [r for r in explore_rows(explore) if r["shape"] in misses]
        for verdict, key in (("kernel", "menu_short"), ("pick", "pick_short")):
            found[key] = ", ".join(f"{shape_text(*r['shape'])} (best {r['best']:.0%})"
                                   for r in rows if r["verdict"] == verdict)
        found["explored"] = len(rows)
    return found


def ring_variants(path=None) -> dict | None:
    """What benchmarks/sgemm_ring_variants.py found at the ragged products the
    menu runs short (the newest run, or the one at `path`; None while none is
    committed), at the first shape it timed: {"shape": as text; "menu": the
    share of cuBLAS of the best ring there that the GPU's menu holds (the
    shape model's); "best": the best share of a ring outside the menu, and
    "best_variant" its name}."""
    from gpucourse.kernels.sgemm import config as tiles, shape_model

    if path is None and not results.find_results("sgemm_ring_variants"):
        return None
    record = results.load_results("sgemm_ring_variants", path)
    rows = [r for r in record["results"] if "ms" in r and r["variant"] not in ("auto", "cublas")]
    first = (rows[0]["m"], rows[0]["n"], rows[0]["k"])
    here = [r for r in rows if (r["m"], r["n"], r["k"]) == first]
    menu = shape_model.menu(shape_model.gpu_entry(record["gpu"]))
    in_menu = lambda r: tiles.tile_config_of(r["config"]) in menu  # noqa: E731
    best = max((r for r in here if not in_menu(r)), key=lambda r: r["vs_cublas"])
    return {"shape": shape_text(*first), "menu": max(r["vs_cublas"] for r in here if in_menu(r)),
            "best": best["vs_cublas"], "best_variant": best["variant"]}


def cublas_tiles(path=None) -> list[str] | None:
    """The tiles ("bm x bn x bk") in the names of the kernels cuBLAS ran at the
    shapes benchmarks/sgemm_rates_short.py named (its newest run, or the one
    at `path`), the names that hold a "tilesize"; None while none is committed."""
    import re

    if path is None and not results.find_results("sgemm_rates_short"):
        return None
    named = results.load_results("sgemm_rates_short", path).get("cublas_kernels") or {}
    return sorted({t.replace("x", " x ") for names in named.values() for name in names
                   for t in re.findall(r"tilesize(\d+x\d+x\d+)", name)})


def short_depths(path=None) -> list[int] | None:
    """The depths of K benchmarks/sgemm_rates_short.py timed (its newest run,
    or the one at `path`), shallowest first; None while none is committed."""
    if path is None and not results.find_results("sgemm_rates_short"):
        return None
    return sorted({r["k"] for r in results.load_results("sgemm_rates_short", path)["results"]})


def plot_held_out(records: dict | None = None, ax=None):
    """Every shape of the held-out sets (`records`: {set number: run}; default
    the committed runs), auto's share of cuBLAS against the product's work
    (2 m n k, log scale), one colour per target class (large: M and N of 512
    or more; mid: the smaller 64 to 511), a marker per set, each class's
    target as a line. None while no held-out run is committed. Raises
    ValueError unless records is such a dict."""
    import itertools

    from gpucourse.chapters.sgemm import shape_class, shape_target

    records = load_held_out_sets() if records is None else records
    _check_records(records)
    if not records:
        return None
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(8, 4.6))[1]
    colours = {"large": "tab:blue", "mid": "tab:orange"}
    for (number, record), marker in zip(sorted(records.items()), itertools.cycle("osD^vPX*")):
        for name, colour in colours.items():
            rows = [r for r in record["results"] if r["variant"] == "auto"
                    and shape_class(r["m"], r["n"]) == name]
            if not rows:  # a set of large shapes only: no empty entry in the legend
                continue
            ax.scatter([2 * r["m"] * r["n"] * r["k"] for r in rows],
                       [r["vs_cublas"] for r in rows], color=colour, marker=marker, s=22,
                       alpha=0.8, label=f"set {number}, {name}")
    for name, colour in colours.items():
        size = 512 if name == "large" else 64
        ax.axhline(shape_target(size, size), color=colour, ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("work of the product, 2 m n k (FLOP)")
    ax.set_ylabel("auto's share of cuBLAS")
    gpu = next(iter(records.values()))["gpu"]
    ax.set_title(f"Shapes drawn at random, {gpu} (dashed: each class's target)")
    ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    return ax
