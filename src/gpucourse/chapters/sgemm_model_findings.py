"""Chapter 8's account of `auto`, as numbers: what the shape model's committed
runs found, each section's values by the name the chapter glues them under.

The chapter's sections on the shape model (*Choosing tiles by reasoning*
and the ones after it) quote many figures from many runs: the grid, the
shapes off it, the held-out sets and the runs each change of the model was
judged by. Each function here reads the runs behind one section and returns
``{name: text}`` for ``myst_nb.glue``, so that the notebook holds only
the prose, the figures and a loop; ``chapter_values`` joins them all. Where
the prose states a direction ("slower at every shape", "kept at zero"), the
function checks that the runs say so and raises ``ProseMismatch`` naming
the sentence where they do not: a rerun that turns a finding around stops
the build instead of printing a sentence the numbers contradict.

Every function returns an empty dict while the runs it reads are not
committed, so that a fresh course with no results still builds.
"""

from __future__ import annotations

from gpucourse import results
from gpucourse.chapters import sgemm as ladder
from gpucourse.chapters import sgemm_held_out as held
from gpucourse.chapters import sgemm_ring_ways as ring_ways
from gpucourse.kernels import sgemm

# The GPU whose calibrated model the chapter's table of plans prices.
MODEL_GPU = "NVIDIA H100 80GB HBM3"
# Shapes the prose names, each for the reason given where it is used.
DEEP_SKINNY = (160, 630, 19896)   # set 1's miss that changed the menu
SET5_WORST = (1310, 1087, 197)    # set 5's worst miss before rings read B as given
SMALL_CALL = (116, 237, 2146)     # one of set 1's small misses, a call of microseconds
SPLIT_JUDGED = 9                  # the set drawn before the registers' change, run both ways
SMALL_WORK = 20                   # GFLOP: misses of more work than this are named
# What each held-out set was drawn before: the table's second column.
DRAWN_BEFORE = {
    1: "the first held-out run",
    2: "skinny deep tiles joined the menu",
    3: "the short depths' rates joined the model",
    4: "the grid ran the model as committed; large shapes only from here on",
    5: "set 4's misses were explored",
    6: "rings could read B as given",
    7: "the shares by how full the SM is were timed",
    8: "anything changed after the grid and sets 1 to 7 ran",
    9: "the registers of split kernels were timed",
    10: "anything that came after the registers",
    11: "copies in pairs of floats were timed",
    12: "the shifted rings and the peeled stores were timed",
    13: "the wide copies and stepped four-byte copies were timed",
    14: "anything after the wide copies",
}


class ProseMismatch(RuntimeError):
    """The committed runs no longer say what the chapter's prose says."""


def _holds(condition: bool, sentence: str) -> None:
    if not condition:
        raise ProseMismatch(f"chapter 8 says {sentence!r}, and the committed runs do not: "
                            "rerun the analysis and rewrite the sentence")


def _met(records: dict, name: str = "large") -> str:
    met, shapes = held.class_met(records, name)
    return f"{met} of {shapes}"


def model_values(gpu: str = MODEL_GPU) -> dict:
    """*Choosing tiles by reasoning*: the tail worked by hand, the two shapes
    the table of plans is read at, and the measured rates."""
    entry = sgemm.gpu_entry(gpu)
    rows = ladder.shape_model_rows(gpu=gpu)
    sms = entry["sms"]
    blocks_a, blocks_b = sms - 4, sms + 8  # a few blocks fewer than the SMs, and a few more
    values = {"model_gpu": gpu, "model_sms": str(sms), "tail_blocks_a": str(blocks_a),
              "tail_share_a": f"{sgemm.tail_efficiency(blocks_a, sms):.0%}",
              "tail_blocks_b": str(blocks_b), "tail_extra": str(blocks_b - sms),
              "tail_idle": str(sms - (blocks_b - sms)),
              "model_calibrated": entry["calibrated"].split(" (")[0]}
    deep = {r["who"]: r for r in rows if r["shape"] == "512x512x16384"}
    _holds(deep["auto"]["splits"] > 1 and deep["auto"]["tflops"] > 2 * deep["level 6"]["tflops"],
           "cutting K fills the SMs of the skinny deep product")
    values.update(model_deep_splits=str(deep["auto"]["splits"]),
                  model_deep_auto=f"{deep['auto']['tflops']:.1f}",
                  model_deep_level6=f"{deep['level 6']['tflops']:.1f}")
    ragged = {r["who"]: r for r in rows if r["shape"] == "3001x2999x1009"}
    _holds(ragged["auto"]["tail_efficiency"] > ragged["level 6"]["tail_efficiency"],
           "auto's smaller tiles leave the SMs idle for less of the last wave")
    for who in ("auto", "level 6"):
        values[f"model_ragged_{who.replace(' ', '')}_idle"] = \
            f"{1 - ragged[who]['tail_efficiency']:.0%}"
    rates = ladder.measured_rates()  # None until a --rates run is committed
    if rates is not None:
        values.update(rates_gpu=rates["gpu"], rates_tile=rates["tile"],
                      rates_fits=f"{rates['rate_fits']:.0f}", rates_over=f"{rates['rate_over']:.0f}",
                      rates_fits_q=str(rates["fits"]), rates_model_q=str(rates["model_blocks"]))
    depths = held.short_depths()
    if depths:
        values["rates_short_ks"] = " and ".join(map(str, depths))
    return values


def grid_values() -> dict:
    """*How well auto picks*: the newest grid by class and target, level 7's
    default at the two square sizes, and the shapes off the grid."""
    grid = ladder.load_grid_results()
    if grid is None:
        return {}
    targets = ladder.grid_targets(grid)
    classes = sorted((r for r in ladder.grid_by_class(grid) if r["variant"] == "auto"),
                     key=lambda r: r["median"])
    best, worst = classes[-1], classes[0]
    values = {"grid_gpu": grid["gpu"],
              "grid_shapes": str(len({(r["m"], r["n"], r["k"]) for r in grid["results"]})),
              "grid_best_class": best["class"].replace("_", " "),
              "grid_best_median": f"{best['median']:.0%}",
              "grid_worst_class": worst["class"].replace("_", " "),
              "grid_worst_median": f"{worst['median']:.0%}"}
    for name in ("large", "mid"):
        t = targets[name]
        values.update({f"grid_{name}_met": f"{t['met']} of {t['shapes']}",
                       f"grid_{name}_target": f"{t['target']:.0%}",
                       f"grid_{name}_worst": f"{t['worst']:.0%}",
                       f"grid_{name}_worst_shape": " x ".join(f"{x:,}" for x in t["worst_shape"])})
    for size, share in targets["level7_square"].items():
        values[f"grid_level7_{size}"] = f"{share:.1%}"
    off_grid = ladder.load_off_grid_results()  # shapes the grid does not hold
    if off_grid is not None:
        off = ladder.grid_targets(off_grid)["large"]
        _holds(bool(off["missed"]), "the misses off the grid are named")
        values.update(
            offgrid_shapes=str(len({(r["m"], r["n"], r["k"]) for r in off_grid["results"]})),
            offgrid_large_met=f"{off['met']} of {off['shapes']}",
            offgrid_missed=", ".join(f"{m} x {n} x {k} ({share:.0%})"
                                     for m, n, k, share in off["missed"]))
    return values


def _runs_again_text(held_out: dict) -> str:
    """The chapter's sentences on which runs the held-out table counts: the
    sets run again after their history's run (``held.history_run``), when,
    and the sets whose committed run predates copies of an even ragged B in
    pairs, with how many of their large misses now read B in pairs."""
    again = [n for n in held_out
             if (h := held.history_run(n)) and held_out[n]["date"] != h["date"]]
    _holds(bool(again), "some sets ran again after their history's run")
    dates = sorted({held_out[n]["date"] for n in again})
    when = f"on {dates[0]}" if len(dates) == 1 else f"between {dates[0]} and {dates[-1]}"
    text = (f"Sets {_numbers(again)} ran again {when} with the kernels of their day, and the "
            "table counts those runs.")
    old = [n for n in held_out if not held.ran_with_pairs(held_out[n])]
    if not old:
        return text + " Every set's committed run reads an even ragged B in pairs."
    before_pairs = [shape for n in old
                    for *shape, _ in ladder.grid_targets(held_out[n])["large"]["missed"]
                    if held.reads_b_in_pairs(held.auto_row(held_out[n], tuple(shape)))]
    since = (f"{held.count_text(len(before_pairs))} of their large misses are shapes that now "
             "read B in pairs, and wait to be run again" if before_pairs else
             "none of their large misses is a shape that now reads B in pairs")
    return (text + f" {'Sets' if len(old) > 1 else 'Set'} {_numbers(old)} ran before rings "
            f"copied an even ragged B in pairs, and {since}.")


def held_out_table(held_out: dict | None = None) -> str:
    """A Markdown table of the held-out sets: what each was drawn before, how
    many of its large and smaller shapes met their targets, its misses, the
    day of its run and how its rings copied a ragged B; then the sets together."""
    held_out = held.load_held_out_sets() if held_out is None else held_out
    lines = ["| set | drawn before | large shapes at target | smaller shapes at target "
             "| misses (share of cuBLAS) | run on | its rings' copies of a ragged B |",
             "|---|---|---|---|---|---|---|"]
    for number, record in sorted(held_out.items()):
        told = held.held_out_summary(record, held.held_out_explore(number))
        counts = [f"{told[name]['met']} of {told[name]['shapes']}" if told[name]["shapes"]
                  else "none drawn" for name in ("large", "mid")]
        lines.append(f"| {number} | {DRAWN_BEFORE.get(number, '')} | {counts[0]} | {counts[1]} "
                     f"| {told['missed_text'] or 'none'} | {record['date']} "
                     f"| {_copies_of(record)} |")
    if held_out:
        totals = [_met(held_out, name) for name in ("large", "mid")]
        lines.append(f"| all | | **{totals[0]}** | **{totals[1]}** | | | |")
    return "\n".join(lines)


def _copies_of(record: dict) -> str:
    """How a held-out run's rings copied a ragged B, as its record's model
    says: before pairs, in pairs, or in pairs with the wide and stepped copies."""
    if not held.ran_with_pairs(record):
        return "before copies in pairs"
    model = record.get("model", {})
    if model.get("ring_copy_wide") and model.get("step_scalar_copies"):
        return "in pairs; wide and stepped"
    return "in pairs"


def _listed(items: list) -> str:
    """'4, 6 and 5' for [4, 6, 5], in the order given; 'none' for []."""
    words = [str(item) for item in items]
    return (", ".join(words[:-1]) + " and " + words[-1]) if len(words) > 1 else (
        words[0] if words else "none")


def _numbers(numbers: list) -> str:
    """'4, 5 and 6' for [4, 6, 5]; 'none' for []."""
    return _listed(sorted(numbers))


def held_out_values() -> dict:
    """*Shapes nobody chose*: the earlier runs of sets 1, 2 and 4 the prose
    reads, where the misses fall (by work and by the length of C's rows), and
    set 11 in turns (each set's counts are ``held_out_table``'s)."""
    held_out = held.load_held_out_sets()  # {set: run}, drawn at random
    if not set(held_out) >= {1, 2, 3, 4, 5}:
        return {}
    values = {}  # each set's counts are held_out_table's
    for number in (2, 4):  # both kinds of miss of these sets' runs the explores were timed beside
        told = held.held_out_summary(held.before_scalar_b(number), held.held_out_explore(number))
        _holds(bool(told["menu_short"] and told["pick_short"]),
               f"set {number}'s earlier run missed both for the menu and for the pick")
        values.update({f"heldout_{number}_before_met":
                       f"{told['large']['met']} of {told['large']['shapes']}",
                       f"heldout_{number}_menu_short": told["menu_short"],
                       f"heldout_{number}_pick_short": told["pick_short"]})
    before_menu = held.load_held_out_results(
        1, results.results_dir() / "reruns" / "sgemm_held_out_1-h200-2026-11-30-before-menu.json")
    before, after = (held.share_at(r, DEEP_SKINNY) for r in (before_menu, held.history_run(1)))
    _holds(before < 0.75 <= after, "the skinny deep tiles brought set 1's deep miss to its target")
    values.update(heldout_deep_shape=held.shape_text(*DEEP_SKINNY),
                  heldout_deep_before=f"{before:.0%}", heldout_deep_after=f"{after:.0%}")
    most = f"{held.largest_miss_gflop(held_out, SMALL_WORK):.0f}"
    larger = held.misses_above(held_out, SMALL_WORK)
    if larger:  # named, with how far each misses
        values["heldout_work_text"] = (
            f"every miss but {len(larger)} is a product of {most} GFLOP or less; the others: "
            + " and ".join(f"{text} ({held.miss_percent(share)})" for text, share in larger))
    else:
        _holds(held.share_at(held_out[5], (1792, 1040, 25863)) >= 0.85,
               "the deep products that missed within a point now reach the target")
        values["heldout_work_text"] = (
            f"every miss is a product of {most} GFLOP or less, and none above {SMALL_WORK} GFLOP "
            "misses (the deep products that did, within a point of the target, reach it since "
            "the registers of split kernels joined the model)")
    values["heldout_runs_text"] = _runs_again_text(held_out)
    by_row = held.misses_by_row_length(held_out)  # C's rows ragged or not
    _holds(by_row["ragged"][0] > by_row["aligned"][0], "the large misses have ragged rows")
    for side, (missed, shapes) in by_row.items():
        values.update({f"rows_{side}_missed": str(missed), f"rows_{side}_shapes": str(shapes)})
    turns = held.pairs_in_turns(11)
    if turns is not None:
        values["heldout_11_pairs_shapes"] = held.count_text(turns["pairs_shapes"])
        for way in ("eight", "four"):
            values[f"heldout_11_{way}_met"] = (" and ".join(str(met) for met, _ in turns[way])
                                               + f" of {turns[way][0][1]}")
        values.update(heldout_11_flipped=str(turns["flipped"]),
                      heldout_11_flipped_us=f"{turns['flipped_us']:.0f}")
    return values


def call_time_values() -> dict:
    """*Where a call's time goes*: set 5's worst shape under the profiler, the
    shares for reading B as given, and what that change did to every set."""
    held_out = held.load_held_out_sets()
    grid = ladder.load_grid_results()
    call = held.kernel_times(SET5_WORST)
    if grid is None or call is None or 5 not in held_out:
        return {}
    padded, as_given, peer = call["ring"], call["ring_scalar_b"], call["cublas"]
    _holds(padded["host"] > padded["kernels"] and as_given["host"] < as_given["kernels"],
           "with B padded the host set the pace, read as given the GPU did")
    values = {"kt_shape": held.shape_text(*SET5_WORST)}
    for name, value in (("ring_product", padded["product"]), ("cublas_product", peer["product"]),
                        ("copy", padded["kernels"] - padded["product"]),
                        ("ring_host", padded["host"]), ("ring_kernels", padded["kernels"]),
                        ("ring_wall", padded["wall"]), ("scalar_product", as_given["product"]),
                        ("scalar_host", as_given["host"]), ("scalar_wall", as_given["wall"]),
                        ("cublas_wall", peer["wall"])):
        values[f"kt_{name}"] = f"{value:.1f}"
    entry = sgemm.gpu_entry(grid["gpu"])
    values["kt_copy_host"] = f"{entry['ring_scalar_b']['copy_call_us']:.1f}"
    for name, (share, tile) in held.ring_scalar_b_shares(entry).items():
        values.update({f"ring_share_{name}": f"{share:.0%}", f"ring_share_{name}_tile": tile})
    befores = {n: r for n in held_out if (r := held.before_scalar_b(n)) is not None}
    afters = {n: held.before_tile_shares(n) for n in befores}  # the run right after
    for when, records in (("before", befores), ("after", afters)):
        for name in ("large", "mid"):
            values[f"heldout_{name}_{when}"] = _met(records, name)
    then = held.auto_row(befores[5], SET5_WORST)  # that call in the held-out run
    _holds(then["ms"] * 1e3 > padded["wall"], "the held-out run's call was slower than profiled")
    values.update(kt_heldout_wall=f"{then['ms'] * 1e3:.1f}",
                  kt_shape_before=f"{held.share_at(befores[5], SET5_WORST):.1%}",
                  kt_shape_after=f"{held.share_at(afters[5], SET5_WORST):.1%}")
    return values


def regime_shares_then(entry: dict) -> dict:
    """The ring tiles' shares for reading a ragged B as given by how full the
    busiest SM is, {tile key: {regime: share}}, as first fitted: to the
    kernel-times runs of 2026-11-30 (sgemm_held_out.KERNEL_TIMES), 4-byte
    copies worked out from row and column. Fitted again here
    (``shape_model_fit.fit_ring_scalar_b`` on `entry`, whose plans say how
    many blocks each shape puts on an SM), since the committed model's block
    is replaced whenever the shares are fitted again."""
    records = [results.load_results("sgemm_kernel_times", results.results_dir() / name)
               for name in held.KERNEL_TIMES]
    joined = {"results": [row for record in records for row in record["results"]]}
    return sgemm.shape_model_fit.fit_ring_scalar_b(joined, entry=entry)["share_by_blocks"]


def price_values() -> dict:
    """*Prices that depend on the SM*: the shares by how full the SM is and
    stream-K's by tile (judged on every set and the newest), then the split
    kernels' registers and the zeroing kernel's line (judged on set 9)."""
    held_out = held.load_held_out_sets()
    grid = ladder.load_grid_results()
    shares_before = {n: r for n in held_out if (r := held.before_tile_shares(n))}
    if grid is None or not shares_before:
        return {}
    entry = sgemm.gpu_entry(grid["gpu"])
    shares_after = {n: held.before_split_residency(n) for n in shares_before}
    values = {}
    for name in ("large", "mid"):
        for when, records in (("before", shares_before), ("after", shares_after)):
            values[f"tiles_{name}_{when}"] = _met(records, name)
    newest = max(shares_before)  # drawn before the change, run under both models in one session
    for label, before, after in (("all", shares_before, shares_after),
                                 ("new", {newest: shares_before[newest]},
                                  {newest: shares_after[newest]})):
        moved = held.moved_picks(before, after)
        _holds(moved["faster"] > moved["moved"] / 2 and moved["mean"] > 0,
               "the shares by load moved picks mostly faster")
        values.update({f"tiles_{label}_moved": str(moved["moved"]),
                       f"tiles_{label}_faster": str(moved["faster"]),
                       f"tiles_{label}_mean": f"{100 * moved['mean']:.1f}"})
    crossed, fell = held.gains(shares_before, shares_after), held.gains(shares_after, shares_before)
    values.update(tiles_new_set=str(newest), tiles_gained_moved=str(len(crossed["moved"])),
                  tiles_gained_same=str(len(crossed["same"])),
                  tiles_lost_moved=str(len(fell["moved"])),
                  tiles_mid_same=str(len(held.gains(shares_before, shares_after, "mid")["same"])))
    wide_ring = regime_shares_then(entry)["64x128x16 8x8 s2"]
    _holds(wide_ring["part"] < wide_ring["full"] < wide_ring["one"],
           "a 64 x 128 ring pays most alone on its SM, least with part of it")
    for regime, share in wide_ring.items():
        values[f"ring_wide_{regime}"] = f"{share:.0%}"
    stream = entry["stream_kernel"]
    _holds(stream["tile_share"]["64x128x16 8x8 s2"] == 0, "64 x 128 rings' stream share is kept at zero")
    values.update(stream_share_all=f"{stream['share']:.1%}",
                  stream_share_wide=f"{stream['tile_share']['64x256x16 8x16 s2']:.1%}")
    values.update(_register_values(held_out, entry))
    return values


def _register_values(held_out: dict, entry: dict) -> dict:
    """The split kernels' registers and the zeroing kernel's line, and what
    the change did to the sets (SPLIT_JUDGED drawn before it)."""
    registers = held.ring_registers()  # what ptxas counts, compiled without a GPU
    split_before = {n: r for n in held_out if (r := held.before_split_residency(n))}
    if not (registers and split_before):
        return {}
    square = registers["128x128x16 8x8 s2"]
    _holds(square["split"][1] > square["whole"][1], "the split kernel fits more blocks an SM")
    values = {}
    for kernel in ("whole", "split"):
        values.update({f"regs_square_{kernel}": str(square[kernel][0]),
                       f"blocks_square_{kernel}": held.count_text(square[kernel][1])})
    zero = held.zero_matrix_line()  # the zeroing kernel under the profiler
    values.update(zero_fixed=f"{zero['fixed_us']:.1f}",
                  zero_per_million=f"{zero['us_per_million']:.1f}",
                  zero_const=f"{entry['constants']['zero_us']:.1f}")
    split_after = {n: held.history_run(n) for n in split_before}
    for label, before, after in (("all", split_before, split_after),
                                 ("new", {SPLIT_JUDGED: split_before[SPLIT_JUDGED]},
                                  {SPLIT_JUDGED: split_after[SPLIT_JUDGED]})):
        moved = held.moved_picks(before, after)
        values.update({f"split_{label}_moved": str(moved["moved"]),
                       f"split_{label}_faster": str(moved["faster"]),
                       f"split_{label}_mean": f"{100 * moved['mean']:.1f}",
                       f"split_{label}_before": _met(before), f"split_{label}_after": _met(after)})
    values.update(split_new_set=str(SPLIT_JUDGED),
                  split_other_sets=", ".join(str(n) for n in sorted(split_before)
                                             if n != SPLIT_JUDGED))
    was, now = held.worst_moved(split_before, split_after)  # the largest loss
    _holds(was["config"]["splits"] == "stream" and isinstance(now["config"]["splits"], int),
           "the worst loss cut a ring into slices where stream-K had run")
    values.update(split_loss_shape=held.shape_text(was["m"], was["n"], was["k"]),
                  split_loss_before=f"{was['vs_cublas']:.0%}",
                  split_loss_after=f"{now['vs_cublas']:.0%}")
    return values


def trial_values() -> dict:
    """*Changes that lost*: the driver's memset (set 10's trial, then written
    into the model), price factors fitted to the explores, and pricing the
    copies in pairs (set 11)."""
    held_out = held.load_held_out_sets()
    values = {}
    zeroing = held.zeroing_times()
    memset_runs = {n: r for n in held_out if (r := held.trial_zero_memset(n))}
    if zeroing and 10 in memset_runs:
        for size in ((3000, 3000), (8192, 8192)):
            ways = zeroing[size]
            _holds(ways["memset_d32"] < ways["zero_kernel"] / 2,
                   "the memset takes under half the zeroing kernel's time")
            values.update({f"zeroing_{size[0]}_kernel": f"{ways['zero_kernel']:.0f}",
                           f"zeroing_{size[0]}_memset": f"{ways['memset_d32']:.0f}"})
        ways = zeroing[(3000, 3000)]
        values["zeroing_3000_rate"] = f"{4 * 3000 * 3000 / ways['memset_d32'] / 1e6:.1f}"
        line = held.zero_matrix_line(held.KERNEL_TIMES_MEMSET)
        ten, trial = {10: held.history_run(10)}, {10: memset_runs[10]}
        moved = held.moved_picks(ten, trial)
        _holds(moved["moved"] >= 1 and moved["faster"] == moved["moved"],
               "the memset trial's moves on set 10 were faster")
        values.update(memset_fixed=f"{line['fixed_us']:.1f}",
                      memset_per_million=f"{line['us_per_million']:.2f}",
                      memset_moved=held.count_text(moved["moved"]),
                      memset_mean=f"{100 * moved['mean']:.1f}",
                      memset_committed_met=_met(ten), memset_trial_met=_met(trial),
                      memset_missed=held.held_out_summary(memset_runs[10])["missed_text"])
    adoption = held.zero_memset_adoption()  # the memset's price, written in and run
    if adoption is not None:
        trial, committed = adoption["trial"], adoption["committed"]
        moved = held.moved_picks(committed, trial)
        grid_moved = held.moved_picks({0: committed[0]}, {0: trial[0]})
        _holds(moved["mean"] < 0 and grid_moved["faster"] == 0,
               "the memset written into the model lost where it moved picks")
        was, now = held.worst_moved(committed, trial)
        values.update(zm_sets=", ".join(str(n) for n in sorted(trial) if n),
                      zm_moved=str(moved["moved"]), zm_faster=str(moved["faster"]),
                      zm_mean=f"{-100 * moved['mean']:.1f}",
                      zm_grid_moved=held.count_text(grid_moved["moved"]),
                      zm_worst_shape=held.shape_text(now["m"], now["n"], now["k"]),
                      zm_worst_before=f"{was['vs_cublas']:.0%}",
                      zm_worst_after=f"{now['vs_cublas']:.0%}")
    factor = held.plan_factor_trial()  # price factors fitted to the explores
    if factor is not None:
        _holds(factor["trial"]["worst"] < factor["committed"]["worst"] < factor["trial"]["median"],
               "the price factors raised the median and lowered the worst")
        values["factor_moved"] = str(factor["moved"])
        for who in ("trial", "committed"):
            values.update({f"factor_{who}_median": f"{factor[who]['median']:.0%}",
                           f"factor_{who}_worst": f"{factor[who]['worst']:.1%}",
                           f"factor_{who}_worst_shape": factor[who]["worst_shape"]})
    values.update(_pairs_trial_values())
    return values


def _pairs_trial_values() -> dict:
    """The trial that priced copies in pairs, and what reading B as given
    costs at 1717 x 1730 by depth."""
    runs = held.ring_pairs_trial(11)
    depth = held.read_as_given_by_depth(1717, 1730)
    if runs is None or depth is None:
        return {}
    values = {f"pairs_{who}_met": " and ".join(str(held.class_met({11: r})[0]) for r in them)
              + f" of {held.class_met({11: them[0]})[1]}" for who, them in runs.items()}
    first = {who: {11: them[0]} for who, them in runs.items()}
    moved = held.moved_picks(first["committed"], first["trial"])
    was, now = held.worst_moved(first["committed"], first["trial"])
    _holds(now["vs_cublas"] < was["vs_cublas"] - 0.05, "the pairs trial's worst move lost")
    values.update(pairs_trial_moved=str(moved["moved"]),
                  pairs_trial_worst_shape=held.shape_text(now["m"], now["n"], now["k"]),
                  pairs_trial_worst_before=f"{was['vs_cublas']:.0%}",
                  pairs_trial_worst_after=f"{now['vs_cublas']:.0%}",
                  pairs_depth_low=f"{min(depth):,}", pairs_depth_high=f"{max(depth):,}")
    for way in ("pairs", "scalar"):
        costs = [depth[k][way] for k in depth]
        _holds(min(costs) > 0.05, "reading B as given costs at 1717 x 1730")
        values.update({f"depth_{way}_low": f"{min(costs):.0%}",
                       f"depth_{way}_high": f"{max(costs):.0%}"})
    return values


def ragged_values() -> dict:
    """*Why the misses have ragged rows*: copies in pairs of floats, B read
    shifted and C's peeled stores, each timed beside the other ways."""
    values = {}
    pairs = held.ring_pairs_gains()
    if pairs is not None:
        wide, narrow = pairs["64x128"], pairs["64x64"]
        _holds(min(wide["over_scalar"], wide["over_padded"]) > 0.05,
               "pairs beat both other ways in 64 x 128 rings")
        _holds(pairs["128x128"]["over_scalar"] < 0, "the square ring ran slower in pairs")
        values.update(pairs_wide_shapes=str(wide["shapes"]),
                      pairs_wide_faster=str(wide["faster_than_scalar"]))
        for name, tile in (("wide", wide), ("narrow", narrow)):
            for way in ("scalar", "padded"):
                values[f"pairs_{name}_over_{way}"] = f"{tile[f'over_{way}']:.0%}"
    shifted = held.shifted_rings()  # B read shifted, C's peeled stores: both off
    if shifted is not None:
        way, peeled = shifted["shifted"], shifted["peeled"]
        _holds(way["slower"] == way["shapes"], "the shifted rings lost at every shape")
        values.update(shifted_shapes=str(way["shapes"]),
                      shifted_over_median=f"{way['over_best'][1]:.0%}",
                      shifted_over_most=f"{way['over_best'][2]:.0%}",
                      peeled_faster=f"{peeled['faster']} of {peeled['shapes']}")
        for name, change in zip(("least", "median", "most"), peeled["change"]):
            values[f"peeled_{name}"] = f"{change:+.1%}"
    values.update(copy_way_values())
    return values


def copy_way_values() -> dict:
    """*Why every large miss has a ragged N*, its last part: what a padded
    ring's copy costs, the wide copies, the stepped 4-byte copies and the
    product kernel started during the copy, and set 13 in turns."""
    values = {}
    ways = ring_ways.copy_ways()
    if ways is not None:
        once, wide, overlap, stepped = (ways[name] for name in
                                        ("copy_once", "wide", "overlap", "stepped"))
        _holds(once["faster"] == once["shapes"], "the call without its copy is faster everywhere")
        _holds(wide["faster"] == wide["shapes"], "the wide copy made every call faster")
        _holds(stepped["faster"] > stepped["shapes"] / 2, "stepped copies won at most shapes")
        _holds(overlap["faster"] <= overlap["shapes"] / 2, "the overlap won at half or fewer")
        values.update(ways_shapes=str(once["shapes"]),
                      ways_once_median=f"{-once['change'][1]:.1%}",
                      ways_once_least=f"{-once['change'][0]:.1%}")
        for name, way in (("wide", wide), ("overlap", overlap), ("stepped", stepped)):
            values.update({f"ways_{name}_faster": str(way["faster"]),
                           f"ways_{name}_median": f"{abs(way['change'][1]):.1%}"})
        _holds(overlap["change"][1] > 0 and overlap["change"][2] > 0,
               "the overlap was slower at the median")
    rates = ring_ways.copy_rates()
    if rates is not None:
        _holds(min(rates["pad_copy_wide"]) > max(rates["pad_copy"]),
               "the wide copy's slowest large copy beat pad_copy's fastest")
        for kernel, name in (("pad_copy", "narrow"), ("pad_copy_wide", "wide")):
            values.update({f"copy_{name}_low": f"{min(rates[kernel]) / 1e3:.1f}",
                           f"copy_{name}_high": f"{max(rates[kernel]) / 1e3:.1f}"})
    rounds = ring_ways.set_13_rounds()
    if rounds is not None:
        new, before, peeled = (rounds[way] for way in ("wide and stepped", "before", "peeled"))
        _holds(min(new)[0] > max(before)[0] > max(peeled)[0],
               "set 13 met more with the wide and stepped copies, fewer with peeled stores")
        for name, found in (("new", new), ("before", before), ("peeled", peeled)):
            values[f"set13_{name}_met"] = (_listed([met for met, _ in found])
                                           + f" of {found[0][1]}")
            values[f"set13_{name}_rounds"] = held.count_text(len(found))
    values.update(stepped_trial_values())
    return values


# What the chapter says of the stepped trial, by whether the committed model
# holds it yet (sgemm_ring_ways.set_14_verdict's "adopted").
STEPPED_STATE = {
    True: "By the rule a held-out set judges a change by (above), it won, and its two "
          "prices are now the model's: the grid and every held-out set ran again under it.",
    False: "By the rule a held-out set judges a change by (above), it won. It becomes the "
           "model once the grid and every held-out set have run under it, since each "
           "set's committed run must time the model's own plans.",
}


def stepped_trial_values(verdict: dict | None = None) -> dict:
    """Held-out set 14's verdict on the trial that priced the wide copy and
    the stepped 4-byte copies as they run (``sgemm_ring_ways.set_14_verdict``,
    or `verdict`): the large shapes at the target round by round under each
    model, the plans it moved, how their calls ran, and whether the model
    holds it yet. {} while the runs are not committed."""
    verdict = ring_ways.set_14_verdict() if verdict is None else verdict
    if verdict is None:
        return {}
    _holds(verdict["adopt"] and verdict["judged"] == "moved" and verdict["change"] < 0,
           "set 14 judged the stepped trial a win, its moved calls faster at the median")
    _holds(verdict["adopted"] is not None,
           "the model holds the stepped trial's prices, or those before them")
    return {"set14_committed_met": _listed(verdict["met"]["before"]) + f" of {verdict['shapes']}",
            "set14_trial_met": _listed(verdict["met"]["after"]) + f" of {verdict['shapes']}",
            "set14_moved": str(len(verdict["moved"])), "set14_faster": str(verdict["faster"]),
            "set14_change": f"{-verdict['change']:.1%}",
            "set14_state": STEPPED_STATE[verdict["adopted"]]}


def small_call_values() -> dict:
    """*When no plan is fast enough*: the host's share of a small call, the
    rings outside the menu, cuBLAS's tiles, and the explore's summary."""
    values = {}
    host = held.host_costs()
    if host is not None:
        small = host[SMALL_CALL]
        _holds(small["matmul_auto"] > small["torch_mm"], "matmul's small call is the slower")
        values.update(host_small_shape=held.shape_text(*SMALL_CALL),
                      host_small_mm=f"{small['torch_mm']:.1f}",
                      host_small_auto=f"{small['matmul_auto']:.1f}",
                      host_launch=f"{min(h['zero_launch'] for h in host.values()):.1f}",
                      host_empty=f"{min(h['torch_empty'] for h in host.values()):.1f}")
    rings = held.ring_variants()  # rings outside the menu, at set 2's misses
    if rings is not None:
        _holds(rings["best"] < 0.85 and rings["menu"] < 0.85, "no ring reaches the target there")
        values.update(ringvar_shape=rings["shape"], ringvar_menu=f"{rings['menu']:.0%}",
                      ringvar_best=f"{rings['best']:.0%}")
    tiles = held.cublas_tiles()
    if tiles:
        values["cublas_tiles"] = ", ".join(tiles)
    explore = ladder.load_explore_results()
    if explore is not None:  # the newest explore run
        rates_run = (results.load_results("sgemm_rates")
                     if results.find_results("sgemm_rates") else None)
        values.update({f"explore_{name}": text
                       for name, text in ladder.explore_summary(explore, rates_run).items()})
    return values


SECTIONS = (model_values, grid_values, held_out_values, call_time_values, price_values,
            trial_values, ragged_values, small_call_values)


def chapter_values() -> dict:
    """Every section's values, by glue name (no name is given twice)."""
    values = {}
    for section in SECTIONS:
        found = section()
        twice = set(found) & set(values)
        if twice:
            raise ValueError(f"{section.__name__} glues names another section glues: "
                             f"{sorted(twice)}")
        values.update(found)
    return values
