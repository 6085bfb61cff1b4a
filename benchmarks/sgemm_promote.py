"""Make reruns the newest committed runs of the grid and the held-out sets,
once they time the committed model's plans (no GPU).

    PYTHONPATH=src python3 benchmarks/sgemm_promote.py RERUN.json [RERUN.json ...] [--replace]

Issue 33. A change of the model is tried as a trial, judged on a held-out
set, and written into the committed model (sgemm_model_json.py --adopt);
then the grid and every set run again under it, and those runs become the
newest committed ones, which the chapter reads and
tests/test_sgemm_held_out.py checks against the model's picks. This copies
each rerun (a path, or a name under benchmarks/results/) to
benchmarks/results/<benchmark>-<gpu-slug>-<date>.json, byte for byte, after
checking that it is a run of sgemm_grid.py or of one held-out set and that
auto ran, at every shape, the plan the committed model picks
(``sgemm_judging.plans_off_the_model``). A run made under a trial's name
(benchmark "sgemm_held_out_N_trial") is promoted as set N's, its note
saying which trial it ran. Refuses to overwrite a committed run of the
same day unless --replace, which keeps the run it replaces as
reruns/<its name>-superseded.json. Exit status 0 when every rerun was promoted, 1
when one was refused (nothing is written for it), 2 for a wrong argument.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from _common import RESULTS, results_path

KINDS = re.compile(r"(sgemm_grid|sgemm_held_out_\d+)(_trial)?")


def promote(path: Path, replace: bool = False, results_dir: Path = RESULTS,
            entry: dict | None = None) -> Path:
    """Copy the rerun at `path` to its committed name in `results_dir`;
    returns that path. ValueError saying why, where it is not a grid or
    held-out run, ran a plan the committed model (or the GPU entry `entry`)
    does not pick, or would overwrite a committed run (without `replace`)."""
    from gpucourse.chapters.sgemm_judging import plans_off_the_model

    record = json.loads(path.read_text())
    found = KINDS.fullmatch(str(record.get("benchmark", "")))
    if not found or "results" not in record:
        raise ValueError(f"{path} is not a run of sgemm_grid.py or sgemm_off_grid.py "
                         f"--held-out N (benchmark {record.get('benchmark')!r})")
    off = plans_off_the_model(record, entry)
    if off:
        shapes = ", ".join("x".join(map(str, shape)) for shape in off[:6])
        raise ValueError(f"{path} ran plans the committed model does not pick at {len(off)} "
                         f"shapes ({shapes}{', ...' if len(off) > 6 else ''}): adopt the model "
                         "it ran first, or run it again")
    benchmark = found.group(1)
    target = results_path(results_dir, {**record, "benchmark": benchmark})
    if target.exists() and not replace:
        raise ValueError(f"{target.name} is committed already: --replace to put {path.name} "
                         "in its place")
    if target.exists():  # the run replaced stays, in reruns/
        kept = results_dir / "reruns" / target.name.replace(".json", "-superseded.json")
        if kept.exists():
            raise ValueError(f"{target.name} would be kept as {kept.name}, which exists: "
                             "move one of them first")
        kept.parent.mkdir(exist_ok=True)
        target.replace(kept)
    if found.group(2):  # a trial's run, promoted as the set's own
        record = {"benchmark": benchmark, **{k: v for k, v in record.items()
                                             if k != "benchmark"}}
        target.write_text(json.dumps(record, indent=1) + "\n")
    else:
        target.write_bytes(path.read_bytes())
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reruns", nargs="+", help="the reruns, by path or by name under "
                        "benchmarks/results/")
    parser.add_argument("--replace", action="store_true",
                        help="replace a committed run of the same benchmark and day")
    args = parser.parse_args(argv)
    refused = 0
    for name in args.reruns:
        path = Path(name) if Path(name).is_file() else RESULTS / name
        if not path.is_file():
            print(f"refused {name}: no such file (a path, or a name under "
                  f"benchmarks/results/)")
            refused += 1
            continue
        try:
            print(f"promoted {path.name} -> {promote(path, args.replace).name}")
        except ValueError as error:
            print(f"refused {error}")
            refused += 1
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
