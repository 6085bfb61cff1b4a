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
stores of C once more. Each function returns None while its runs are not
committed.
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
# 4-byte copies (the committed run, then its second round), the kernels
# before them, and those with C's peeled stores (vectorized.PEELED_STORES).
SET_13_ROUNDS = {
    "wide and stepped": ("sgemm_held_out_13-h200-2026-12-01.json",
                         "reruns/sgemm_held_out_13-h200-2026-12-01-wide-copy-second.json"),
    "before": tuple(f"reruns/sgemm_held_out_13-h200-2026-12-01-before-wide-copy-{r}.json"
                    for r in ("first", "second", "third")),
    "peeled": tuple(f"reruns/sgemm_held_out_13-h200-2026-12-01-peeled-{r}.json"
                    for r in ("first", "second")),
}
# Bytes read and written from which the copies' rates are compared: below
# that (B of 512 x 2047 and less in the run) a copy of either width takes
# about its launch's 5.5 us, and its rate says nothing of its width.
LARGE_COPY_BYTES = 2e7


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
