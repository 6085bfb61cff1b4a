"""How a change to `auto` is judged: on a held-out set drawn before it, run in
turns with what it would replace (issue 33).

A change to the model moves some picks; a change to a kernel moves none but
runs some plans faster or slower. Either is timed on a set of shapes nobody
chose, drawn and committed before the change was timed, in rounds that
alternate the two, so that the GPU's drift falls on both alike. The rule
every session has applied by hand, written once:

* the change meets the target at more large shapes (M and N of 512 or
  more) in every round than the other does in any round, and
* the calls it changed ran faster at the median: the shapes whose plan
  moved (its tile, its slices of K, or how a ring reads a ragged B), for a
  change that moves plans; every shape, for one that moves
  none, each shape's time the median over its rounds.

``benchmarks/sgemm_judge.py`` prints the verdict of committed runs.
"""

from __future__ import annotations

import statistics

from gpucourse.chapters import sgemm_held_out as held


def _auto_rows(record: dict) -> dict:
    return {(r["m"], r["n"], r["k"]): r for r in record["results"] if r["variant"] == "auto"}


def _median_ms(rounds: list[dict]) -> dict:
    """{shape: the median over `rounds` of auto's wall-clock ms}."""
    rows = [_auto_rows(record) for record in rounds]
    return {shape: statistics.median(found[shape]["ms"] for found in rows) for shape in rows[0]}


def judge_in_turns(before: list[dict], after: list[dict], name: str = "large") -> dict:
    """The verdict on a change, from runs of one held-out set: `before`, the
    rounds without it, and `after`, the rounds with it (records of
    sgemm_off_grid.py over the same shapes). {"met": {"before": [...],
    "after": [...]} shapes of class `name` at target, round by round;
    "shapes": how many of the class; "moved": shapes whose plan differs
    (after's first round against before's): its tile, its slices, or how
    its ring reads a ragged B; "judged": "moved" or "every"
    (the shapes whose times judge the change); "faster": at how many of
    them the median time fell; "change": the median over them of the time
    after over before, less 1; "adopt": both of the module's rules hold;
    "why": a sentence saying which failed}. ValueError where a side has no
    round or the rounds are not of the same shapes."""
    if not before or not after:
        raise ValueError("before and after must each hold one round or more")
    shapes = set(_auto_rows(before[0]))
    if any(set(_auto_rows(record)) != shapes for record in before + after):
        raise ValueError("every round must time the same shapes (one held-out set)")
    met = {side: [held.class_met({0: record}, name)[0] for record in rounds]
           for side, rounds in (("before", before), ("after", after))}
    moved = sorted((row["m"], row["n"], row["k"])
                   for _, _, row in held.moved_rows({0: before[0]}, {0: after[0]}, reads=True))
    judged = moved or sorted(shapes)
    old, new = _median_ms(before), _median_ms(after)
    ratios = [new[s] / old[s] for s in judged]
    change = statistics.median(ratios) - 1
    more = min(met["after"]) > max(met["before"])
    faster = change < 0
    why = ("it met the target at more large shapes in every round, and the calls it changed "
           "ran faster at the median" if more and faster else
           "; ".join(text for ok, text in (
               (more, f"it met the target at {min(met['after'])} in its worst round, not more "
                      f"than the {max(met['before'])} of the other's best"),
               (faster, f"the calls it changed ran {change:+.1%} at the median")) if not ok))
    return {"met": met, "shapes": held.class_met({0: before[0]}, name)[1], "moved": moved,
            "judged": "moved" if moved else "every", "faster": sum(r < 1 for r in ratios),
            "change": change, "adopt": more and faster, "why": why}


def plans_off_the_model(record: dict, entry: dict | None = None) -> list[tuple]:
    """The shapes of a grid or held-out run (a record of sgemm_grid.py or
    sgemm_off_grid.py) at which auto ran another plan than the model picks
    today (``shape_model.choose_plan`` on the GPU's entry, or `entry`): its
    tile, its slices of K, or how its ring reads a ragged B. A committed run
    must have none; a change of the model is adopted only with every set
    and the grid run again under it. A record from before rings read B as
    given (no "ring_scalar_b" in its rows) is taken to have copied B."""
    from gpucourse.kernels.sgemm import shape_model

    entry = shape_model.gpu_entry(record["gpu"]) if entry is None else entry
    return [(row["m"], row["n"], row["k"]) for row in record["results"]
            if row["variant"] == "auto"
            and _plan_ran(row) != _plan_of((row["m"], row["n"], row["k"]), entry)]


def _plan_of(shape, entry: dict) -> tuple:
    """(tile key, slices of K, whether a ring reads a ragged B as given) of
    the plan the model of GPU entry `entry` picks at `shape`."""
    from gpucourse.kernels.sgemm import shape_model

    plan = shape_model.choose_plan(shape, entry=entry)
    return shape_model.tile_key(plan["config"]), plan["splits"], plan["ring_scalar_b"]


def _plan_ran(row: dict) -> tuple:
    """The same of the plan auto's `row` ran (a grid-format row; rows from
    before rings had stages record none)."""
    from gpucourse.kernels.sgemm import TileConfig, shape_model

    config = TileConfig(**{key: value for key, value in row["config"].items() if key != "splits"})
    return shape_model.tile_key(config), row["config"]["splits"], held.reads_b_as_given(row)


def plans_moved_by(trial: dict, base: dict, shapes: dict) -> dict:
    """What a trial model would change before any GPU runs it: {label: [(shape,
    plan under `base`, plan under `trial`)]} for each label's shapes of
    `shapes` ({label: [(m, n, k), ...]}, e.g. the grid and each held-out set)
    whose plan differs, a plan being (tile key, slices of K, whether a ring
    reads a ragged B as given); `trial` and `base` are GPU entries of the
    shape model. The sets it moves are the ones to time again if it is
    adopted; a trial that moves nothing needs no judging."""
    moved = {}
    for label, found in shapes.items():
        moved[label] = [(shape, before, after) for shape in found
                        if (before := _plan_of(shape, base)) != (after := _plan_of(shape, trial))]
    return moved
