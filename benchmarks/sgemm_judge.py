"""Judge a change to auto from runs of one held-out set in turns (no GPU).

    PYTHONPATH=src python3 benchmarks/sgemm_judge.py --before A.json[,A2.json,...] --after B.json[,B2.json,...]
    PYTHONPATH=src python3 benchmarks/sgemm_judge.py --offline TRIAL.json [--base MODEL.json]

Issue 33. Each file is a record of ``sgemm_off_grid.py --held-out N`` (a
path, or a name under benchmarks/results/): --before the rounds without the
change, --after the rounds with it, all of one set. Prints each round's
large shapes at the target, the picks that moved, how the calls that judge
the change ran, and the verdict by the rule of
``gpucourse.chapters.sgemm_judging`` (more large shapes at the target in
every round, and the changed calls faster at the median). Exit status 0
where the change should be adopted, 1 where not, 2 for a wrong argument.

--offline, before any GPU runs a trial model: the plans it would change at
the grid's shapes and each held-out set's, against the committed model (or
--base), set by set (``sgemm_judging.plans_moved_by``): the sets to judge
it on, and to time again if it is adopted. Exit status 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import RESULTS
from sgemm_grid import GRID
from sgemm_off_grid import HELD_OUT


def _records(text: str, option: str) -> list[dict]:
    """The held-out records `text` names (paths or names under results/,
    comma-separated), each checked to be a results file of a held-out set."""
    import json
    import re

    from gpucourse import results

    records = []
    for name in (part for part in text.split(",") if part):
        path = Path(name) if Path(name).exists() else RESULTS / name
        if not path.is_file():
            raise SystemExit(f"{option} must name sgemm_off_grid.py records by path or by "
                             f"their name under benchmarks/results/, comma-separated; no file "
                             f"{name}")
        benchmark = json.loads(path.read_text()).get("benchmark", "")
        if not re.fullmatch(r"sgemm_held_out_\d+\w*", benchmark):
            raise SystemExit(f"{option}: {path} is not a held-out run (sgemm_off_grid.py "
                             f"--held-out N), its benchmark is {benchmark!r}")
        records.append(results.load_results(benchmark, path))
    sets = {re.match(r"sgemm_held_out_(\d+)", r["benchmark"]).group(1) for r in records}
    if len(sets) > 1:
        raise SystemExit(f"{option} must name runs of one held-out set, got sets {sorted(sets)}")
    return records


def offline(trial: str, base: str | None = None) -> int:
    """--offline: print the plans `trial` (a model JSON) moves, set by set."""
    from gpucourse.chapters.sgemm_judging import plans_moved_by
    from gpucourse.kernels.sgemm import shape_model

    gpu = "NVIDIA H200"
    try:
        entries = [shape_model.gpu_entry(gpu, path) if path else shape_model.gpu_entry(gpu)
                   for path in (trial, base)]
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"--offline and --base must name model JSONs with an entry for {gpu}: "
                         f"{error}") from None
    shapes = {"grid": [s for found in GRID.values() for s in found],
              **{f"set {n}": HELD_OUT[n] for n in sorted(HELD_OUT)}}
    moved = plans_moved_by(entries[0], entries[1], shapes)
    for label, found in moved.items():
        print(f"{label}: {len(found)} of {len(shapes[label])} plans move"
              + "".join(f"\n  {'x'.join(map(str, s))}: {b[0]} {b[1]}{' as given' * b[2]}"
                        f" -> {a[0]} {a[1]}{' as given' * a[2]}" for s, b, a in found))
    total = sum(len(found) for found in moved.values())
    print(f"in all: {total} of {sum(len(found) for found in shapes.values())}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the rounds without the change")
    parser.add_argument("--after", help="the rounds with the change")
    parser.add_argument("--offline", metavar="TRIAL.json",
                        help="instead: the plans this trial model moves, set by set")
    parser.add_argument("--base", default=None,
                        help="with --offline: the model to compare with (default the committed)")
    args = parser.parse_args(argv)
    if args.offline:
        return offline(args.offline, args.base)
    if not (args.before and args.after):
        parser.error("give --before and --after (the rounds), or --offline TRIAL.json")
    from gpucourse.chapters.sgemm_judging import judge_in_turns

    try:
        verdict = judge_in_turns(_records(args.before, "--before"),
                                 _records(args.after, "--after"))
    except ValueError as error:
        print(f"sgemm_judge.py: {error}", file=sys.stderr)
        return 2
    for side in ("before", "after"):
        print(f"{side}: large shapes at target, round by round: "
              + ", ".join(f"{met} of {verdict['shapes']}" for met in verdict["met"][side]))
    moved = verdict["moved"]
    print(f"picks moved: {len(moved)}"
          + (" (" + ", ".join("x".join(map(str, s)) for s in moved) + ")" if moved else ""))
    judged = "moved calls" if verdict["judged"] == "moved" else "every call (no pick moved)"
    print(f"{judged}: faster at {verdict['faster']}, time {verdict['change']:+.1%} at the median")
    print(("ADOPT: " if verdict["adopt"] else "DO NOT ADOPT: ") + verdict["why"])
    return 0 if verdict["adopt"] else 1


if __name__ == "__main__":
    sys.exit(main())
