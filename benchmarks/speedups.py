"""Record the week-1 scaling job's speed-ups on a machine with many cores.

The chapter and the exercises of week 1 fit Amdahl's and Gustafson's laws to
speed-ups measured on real processes (`gpucourse.hpc.measure_speedups`). A
student's laptop has a few cores; this script measures the same job on every
core of a bigger machine, strong scaling (a fixed job) and weak scaling (the
parallel part grows with the workers), and writes
`src/gpucourse/data/speedups_recorded.json`, which `gpucourse.hpc.recorded_speedups`
reads. It uses no GPU.

Command: `PYTHONPATH=src python3 benchmarks/speedups.py [--out FILE]`
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from gpucourse import hpc

OUT = Path(__file__).resolve().parents[1] / "src" / "gpucourse" / "data" / hpc.SPEEDUP_RECORD


def worker_counts(cores: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... up to the cores there are."""
    counts = [n for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if n <= cores]
    return counts if cores in counts else counts + [cores]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    counts = worker_counts(cores)
    strong = hpc.measure_speedups(counts, "strong", serial_steps=500_000,
                                  parallel_steps=5_000_000, repeats=args.repeats)
    weak = hpc.measure_speedups(counts, "weak", serial_steps=500_000,
                                parallel_steps=2_000_000, repeats=args.repeats)
    for m in (strong, weak):
        print(m.scaling, m.machine)
        for n, t, s in zip(m.workers, m.times_s, m.speedups):
            print(f"  {n:3d} workers  {t:8.3f} s  speed-up {s:6.2f}")
    args.out.write_text(json.dumps(hpc.speedup_record([strong, weak]), indent=1) + "\n")
    print("written", args.out)


if __name__ == "__main__":
    main()
