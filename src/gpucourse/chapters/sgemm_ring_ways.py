"""Chapter 8: how a ring's two ways of handling a ragged B were made cheaper,
read from the runs that judged them (twenty-ninth session, H200).

A ring on a ragged n either pads B first (a copy kernel and a second
launch) or reads it as given, 4 bytes a copy. ``benchmarks/sgemm_ring_pairs.py``
timed, at the same 29 shapes, four more ways beside those two:

* "padded_copy_once": B padded on the first call and not again, a diagnosis
  (what the call costs without its copy and the copy's launch);
* "padded_wide": the copy four floats a thread (``entry_point.RING_COPY_WIDE``);
* "padded_overlap": the product kernel started while the copy finishes
  (``vectorized.RING_COPY_OVERLAP``);
* "scalar_stepped": 4-byte copies stepping down B's rows
  (``pipelined.STEP_SCALAR_COPIES``).

``benchmarks/sgemm_ring_copy.py --wide`` timed the two copy kernels alone,
and held-out set 13, drawn before any of it ran, judged the two that won
(both on since) against the kernels before them, in turns, and the peeled
stores of C once more. ``plot_ways`` draws every way timed since the first
such run, each against the way it would replace. Held-out set 14 then
judged a trial that priced both ways as they now run (``set_14_verdict``).
Each function returns None while its runs are not committed.
"""

from __future__ import annotations

from gpucourse import results
from gpucourse.chapters import sgemm_held_out as held

# The six ways side by side (sgemm_ring_pairs.py --ways padded,
# padded_copy_once,padded_overlap,padded_wide,scalar,scalar_stepped).
COPY_WAYS = "reruns/sgemm_ring_pairs-h200-2026-12-01-copy-ways.json"
# pad_copy and pad_copy_wide alone at every size (sgemm_ring_copy.py --wide).
COPY_KERNELS = "reruns/sgemm_ring_copy-h200-2026-12-01-wide.json"
# Set 13's rounds, by the kernels each ran: the wide copies with stepped
# 4-byte copies (its first round, committed as the set's run of 2026-12-01
# and kept in reruns/ too, then its second round), the kernels before them,
# and those with C's peeled stores (vectorized.PEELED_STORES).
SET_13_ROUNDS = {
    "wide and stepped": ("reruns/sgemm_held_out_13-h200-2026-12-01-wide-copy-first.json",
                         "reruns/sgemm_held_out_13-h200-2026-12-01-wide-copy-second.json"),
    "before": tuple(f"reruns/sgemm_held_out_13-h200-2026-12-01-before-wide-copy-{r}.json"
                    for r in ("first", "second", "third")),
    "peeled": tuple(f"reruns/sgemm_held_out_13-h200-2026-12-01-peeled-{r}.json"
                    for r in ("first", "second")),
}
# Set 14's rounds in turns (thirtieth session): the committed model, and the
# trial that priced both ways as they now run (STEPPED_TRIAL: the copy at
# pad_copy_wide's line, ring_scalar_b fitted again to kernel-times runs of
# the stepped 4-byte copies).
SET_14_ROUNDS = {
    who: tuple(f"reruns/sgemm_held_out_14-h200-2026-12-01-{name}-{r}.json"
               for r in ("first", "second"))
    for who, name in (("committed", "before-stepped"), ("trial", "trial-stepped"))}
STEPPED_TRIAL = "sgemm_shape_model-stepped.json"  # in benchmarks/trials/
# The committed model before it (benchmarks/sgemm_model_json.py's
# MODEL_BEFORE_STEPPED), in benchmarks/trials/ too.
BEFORE_STEPPED = "sgemm_shape_model-before-stepped.json"
# The blocks of the model that trial changed.
STEPPED_BLOCKS = ("ring_copy", "ring_scalar_b")
# Bytes read and written from which the copies' rates are compared: below
# that (B of 512 x 2047 and less in the run) a copy of either width takes
# about its launch's 5.5 us, and its rate says nothing of its width.
LARGE_COPY_BYTES = 2e7
# Every way of handling a ragged B timed beside another, as plot_ways draws
# it: (label, the sgemm_ring_pairs record, the way, the way it would
# replace, whether matmul takes it: True, False, or None for a diagnosis).
WAYS_PLOTTED = (
    ("copies in pairs (n even), against 4-byte", held.RING_PAIRS, "pairs", "scalar", True),
    ("B read shifted, against B padded", held.RING_SHIFTED, "shifted", "padded", False),
    ("peeled stores of C, against B padded", held.RING_SHIFTED, "padded_peeled", "padded",
     False),
    ("B padded once only (a diagnosis)", COPY_WAYS, "padded_copy_once", "padded", None),
    ("B copied four floats a thread", COPY_WAYS, "padded_wide", "padded", True),
    ("product started during the copy", COPY_WAYS, "padded_overlap", "padded", False),
    ("4-byte copies stepped, against unstepped", COPY_WAYS, "scalar_stepped", "scalar", True),
)


def copy_ways(path=None) -> dict | None:
    """Each way of the COPY_WAYS run (or the sgemm_ring_pairs record at
    `path`) against the one it would replace, call time against call time:
    {"copy_once", "wide", "overlap": against "padded"; "stepped": against
    "scalar"}, each as ``held.ways_against`` gives it ("shapes", "faster",
    "change": (least, median, most) of its time over the other's, less 1).
    None while no such run is committed; ValueError where a way's result was
    wrong or the run did not time all six ways."""
    record = held.ring_pairs_record(COPY_WAYS if path is None else path)
    if record is None:
        return None
    padded = held.ways_against(record["results"], "padded")
    scalar = held.ways_against(record["results"], "scalar")
    wanted = {"copy_once": (padded, "padded_copy_once"), "wide": (padded, "padded_wide"),
              "overlap": (padded, "padded_overlap"), "stepped": (scalar, "scalar_stepped")}
    missing = [way for against, way in wanted.values() if way not in against]
    if missing:
        raise ValueError(f"the ring_pairs record did not time {', '.join(missing)} beside "
                         "padded and scalar")
    return {name: against[way] for name, (against, way) in wanted.items()}


def copy_rates(path=None) -> dict | None:
    """The copy kernels' rates in the COPY_KERNELS run (or the sgemm_ring_copy
    record at `path`): {"pad_copy" and "pad_copy_wide": (least, most) GB/s
    over the copies of LARGE_COPY_BYTES or more}. None while none is committed;
    ValueError where a copy was not exact or a kernel is missing."""
    path = results.results_dir() / (COPY_KERNELS if path is None else path)
    if not path.exists():
        return None
    rows = results.load_results("sgemm_ring_copy", path)["results"]
    wrong = [row for row in rows if not row["exact"]]
    if wrong:
        raise ValueError(f"the ring_copy record's {wrong[0]['kernel']} copied B of "
                         f"{wrong[0]['k']} x {wrong[0]['n']} wrong")
    rates = {}
    for kernel in ("pad_copy", "pad_copy_wide"):
        gbps = [row["bytes"] / row["us"] / 1e3 for row in rows
                if row["kernel"] == kernel and row["bytes"] >= LARGE_COPY_BYTES]
        if not gbps:
            raise ValueError(f"the ring_copy record has no copy by {kernel} of "
                             f"{LARGE_COPY_BYTES:.0e} bytes or more")
        rates[kernel] = (min(gbps), max(gbps))
    return rates


def set_13_rounds(rounds: dict = SET_13_ROUNDS) -> dict | None:
    """How many of set 13's large shapes met their target in each round, by
    the kernels it ran: {way: [(met, shapes), ...] in the order run}. None
    while any of the runs is not committed."""
    paths = {way: [results.results_dir() / name for name in names]
             for way, names in rounds.items()}
    if not all(path.exists() for found in paths.values() for path in found):
        return None
    return {way: [held.class_met({13: held.load_held_out_results(13, path)})
                  for path in found] for way, found in paths.items()}


def _holds_blocks(gpu: dict, blocks: dict) -> bool:
    """Whether a model's GPU entry holds each of `blocks` ({name: block}) as
    given: every key of each with the same value (a later addition, such as
    a share by depth, leaves it held)."""
    return all(all((gpu.get(name) or {}).get(key) == value for key, value in block.items())
               for name, block in blocks.items())


def set_14_verdict(rounds: dict = SET_14_ROUNDS, trial=None, model=None) -> dict | None:
    """Set 14's verdict on the stepped trial, by ``sgemm_judging``'s rule:
    ``judge_in_turns`` of its committed-model rounds against its trial
    rounds, with "adopted": True where the committed model (or the JSON at
    `model`) holds the trial's (the JSON at `trial`, default STEPPED_TRIAL)
    STEPPED_BLOCKS, False where it still holds those of the model before it
    (BEFORE_STEPPED), None where it holds neither (the model has moved on,
    and what the chapter says of the trial must be written again). None
    while any of the runs or the trial is not committed."""
    import json
    from pathlib import Path

    from gpucourse.chapters.sgemm_judging import judge_in_turns
    from gpucourse.kernels.sgemm import shape_model

    folder = results.results_dir()
    trial = Path(trial) if trial else folder.parent / "trials" / STEPPED_TRIAL
    paths = {who: [folder / name for name in names] for who, names in rounds.items()}
    if not trial.exists() or not all(p.exists() for found in paths.values() for p in found):
        return None
    runs = {who: [held.load_held_out_results(14, path) for path in found]
            for who, found in paths.items()}
    verdict = judge_in_turns(runs["committed"], runs["trial"])
    trial_gpu, before_gpu, committed_gpu = (
        json.loads(Path(path).read_text())["gpus"]["NVIDIA H200"]
        for path in (trial, trial.with_name(BEFORE_STEPPED), model or shape_model.MODEL_PATH))
    verdict["adopted"] = next(
        (state for state, gpu in ((True, trial_gpu), (False, before_gpu))
         if _holds_blocks(committed_gpu, {name: gpu[name] for name in STEPPED_BLOCKS})), None)
    return verdict


def plot_ways(ways=WAYS_PLOTTED, ax=None):
    """Each way of WAYS_PLOTTED, one row: the change in its call time against
    the way it would replace, at every shape that timed both (a dot each, in
    percent), the median as a bar; green where matmul takes it, grey where it
    does not, blue for a diagnosis. None while any record is not committed."""
    found = []
    for label, name, way, baseline, taken in ways:
        record = held.ring_pairs_record(name)
        if record is None:
            return None
        rows = [row for row in record["results"] if not row.get("staged_stores")]
        ratios = held.way_ratios(rows, baseline).get(way)
        if not ratios:
            raise ValueError(f"{name} did not time {way} beside {baseline}")
        found.append((label, ratios, taken))
    import statistics

    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(8, 0.45 * len(found) + 1.6))[1]
    colours = {True: "tab:green", False: "tab:gray", None: "tab:blue"}
    for row, (label, ratios, taken) in enumerate(reversed(found)):
        changes = [100 * (ratio - 1) for ratio in ratios]
        ax.scatter(changes, [row] * len(changes), s=14, alpha=0.6, color=colours[taken])
        median = statistics.median(changes)
        ax.plot([median, median], [row - 0.32, row + 0.32], color=colours[taken], lw=2.5)
    ax.axvline(0.0, color="black", lw=0.8)
    ax.set_yticks(range(len(found)), [label for label, _, _ in reversed(found)])
    ax.set_xlabel("change in call time against the way replaced (%; below 0: faster)")
    ax.set_title("Ways of handling a ragged B: each shape a dot, the median a bar\n"
                 "green: in matmul; grey: not; blue: a diagnosis", fontsize=9)
    return ax
