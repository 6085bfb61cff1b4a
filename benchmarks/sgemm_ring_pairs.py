"""Where n is not a multiple of 4: a ring's ways with B and C, timed beside cuBLAS.

    PYTHONPATH=src python3 benchmarks/sgemm_ring_pairs.py [--shapes MxNxK,...]
                                                          [--ways W,... | --all-ways] [--out DIR]

Issue 33. Every large miss of held-out sets 1-10 (26 shapes under 85% of
cuBLAS, M and N of 512 or more) has a ragged n, not one of the 51 large
shapes with n a multiple of 4. A cp.async ring on a ragged n either copies B
into rows of n rounded up to 4 first (a second launch), or reads it as given
4 bytes a copy; either way it stores C a float at a time. Offline (ptxas 13,
sm_90), the 64 x 128 ring's main loop issues 1,384 instructions per 1,024
FMAs reading B 4 bytes a copy against 1,224 with 16-byte copies, and 64
stores a thread against 16.

At each shape of SHAPES (the 26 misses, then eight shapes of n % 4 == 2 just
above the target), auto's plan (its tile and its splits) runs each way in
turns, ROUNDS rounds, beside cuBLAS (torch.mm), each checked against
torch.mm first:

* "padded": B copied first by ``padding.pad_copy`` (which ran at 1-2.5 TB/s);
* "scalar": B read as given, 4 bytes a copy;
* "pairs": 8 bytes a copy and C stored 8 bytes at a time where n is even
  (``entry_point.RING_PAIRS``; where n is odd this is "scalar" again);
* "shifted": B's rows copied 16 bytes at a time wherever they start, then
  moved into place in shared memory (``entry_point.RING_SHIFTED``,
  ``padding.SHIFTED``; offline its loop issues about 1,290 instructions per
  1,024 FMAs at 64 x 128);

then, in a phase of their own (the flag is read when a kernel is built),
"padded_peeled" and "shifted_peeled": the same with C stored as each four's
address allows (``vectorized.PEELED_STORES``: one 16-byte store, two 8-byte
ones, or a float, 8 bytes and a float), with cuBLAS again beside them; and
with --all-ways also, as the first run (H200, 2026-11-30) timed them:

* "padded_driver": B padded by the driver's pitched copy
  (``entry_point.RING_COPY_BY_DRIVER``);
* "padded_driver_staged": the driver's copy, and C stored through shared
  memory (``vectorized.STAGED_STORES``), timed after the others (the flag is
  read when a kernel is built) with cuBLAS again beside it.

Both were slower than "padded" at most shapes and stay off. So were
"shifted" and, within the noise, "padded_peeled" (2026-11-30, the second
run). Two more ways, only where --ways names them, ask where a padded
ring's time goes and whether 4-byte copies can cost less:

* "padded_copy_once": B padded as "padded" does on the first call after
  each turn's fresh plan, and not again: the call less its copy and the
  copy's launch, for a B that does not change (a diagnosis, not a way
  matmul may take);
* "scalar_stepped": "scalar" with ``pipelined.STEP_SCALAR_COPIES`` on (the
  4-byte copies step from one address down B's rows), in a phase of its own.
* "padded_overlap": "padded" with ``vectorized.RING_COPY_OVERLAP`` on (the
  product kernel launched so that it may start while the copy finishes,
  waiting for it before its first read), in a phase of its own.
* "padded_wide": "padded" with ``entry_point.RING_COPY_WIDE`` on (B copied by
  ``padding.pad_copy_wide``, four floats a thread), in a phase of its own.

Their run (H200, 2026-12-01, results/reruns/sgemm_ring_pairs-h200-2026-12-01-
copy-ways.json) turned "padded_wide"'s and "scalar_stepped"'s switches on
and left "padded_overlap"'s off. Each phase sets every switch the ways name,
so "padded" and "scalar" still time the copies as they were before.

A plan through registers (no ring) runs once, as auto runs it. ms: wall
clock per call of a loop ending in a synchronize, the median of the rounds;
kernel_ms: CUDA events around back-to-back calls; vs_cublas against the
cuBLAS timed in the same phase. Writes
DIR/sgemm_ring_pairs-<gpu-slug>-<date>.json. About four minutes (six with
--all-ways).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path

from _common import benchmark_parser, need_a_gpu, record_start, start, versions, write_record
from sgemm_grid import parse_shapes, relative_error, time_in_turns

# The 26 large misses of held-out sets 1-10 in their newest runs (n % 4 == 2
# first), then eight shapes of n % 4 == 2 just above the target.
SHAPES = [(883, 1934, 381), (560, 1646, 2545), (3587, 1570, 70), (941, 2454, 92),
          (632, 1938, 1262), (1071, 1842, 743), (2396, 814, 446), (756, 2334, 690),
          (3357, 754, 103), (738, 2561, 782), (1070, 581, 2242), (1219, 1073, 2459),
          (3832, 1189, 148), (736, 1519, 1258), (912, 1893, 553), (1310, 1087, 197),
          (4723, 893, 105), (1377, 5587, 221), (2820, 547, 568), (738, 5087, 1177),
          (686, 3001, 72), (1132, 2039, 836), (1000, 1337, 276), (876, 1061, 436),
          (2922, 591, 222), (5895, 667, 897),
          (733, 1486, 589), (807, 2034, 3400), (580, 3002, 13104), (640, 906, 16631),
          (2046, 706, 451), (4443, 518, 805), (2680, 1170, 128), (610, 4826, 146)]
ROUNDS = 3
# (entry_point.RING_RAGGED_B, RING_PAIRS, RING_COPY_BY_DRIVER, RING_SHIFTED)
# of each way; FLAGS, the names of those switches.
FLAGS = ("RING_RAGGED_B", "RING_PAIRS", "RING_COPY_BY_DRIVER", "RING_SHIFTED")
PADDED, SCALAR, PAIRS, SHIFTED, DRIVER = (
    ("padded", False, False, False), ("scalar", False, False, False),
    ("scalar", True, False, False), ("scalar", False, False, True),
    ("padded", False, True, False))
# Every way: {name: (its phase, its FLAGS)}. A phase sets the switches read
# when a kernel is built (``set_phase``): "registers" none, "peeled"
# vectorized.PEELED_STORES, "staged" vectorized.STAGED_STORES, "stepped"
# pipelined.STEP_SCALAR_COPIES, "overlap" vectorized.RING_COPY_OVERLAP, "wide"
# entry_point.RING_COPY_WIDE; each phase runs after the one before, with
# cuBLAS beside it again.
WAYS = {"padded": ("registers", PADDED), "scalar": ("registers", SCALAR),
        "pairs": ("registers", PAIRS), "shifted": ("registers", SHIFTED),
        "padded_driver": ("registers", DRIVER), "padded_copy_once": ("registers", PADDED),
        "padded_peeled": ("peeled", PADDED), "shifted_peeled": ("peeled", SHIFTED),
        "padded_driver_staged": ("staged", DRIVER), "scalar_stepped": ("stepped", SCALAR),
        "padded_overlap": ("overlap", PADDED), "padded_wide": ("wide", PADDED)}
PHASES = ("registers", "peeled", "staged", "stepped", "overlap", "wide")
# What a run times without --ways; --all-ways adds the driver's copy and the
# staged stores, as the first run did.
DEFAULT_WAYS = ("padded", "scalar", "pairs", "shifted", "padded_peeled", "shifted_peeled")
ALL_WAYS = DEFAULT_WAYS + ("padded_driver", "padded_driver_staged")


def parse_ways(text: str) -> tuple[str, ...]:
    """The ways named in `text` (comma-separated names of WAYS), in the order
    given; a ValueError naming an unknown one and those known."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in WAYS]
    if unknown or not names:
        raise ValueError(f"--ways takes names of ways, comma-separated, from {sorted(WAYS)}; "
                         f"got {text!r}")
    return names


def phases_of(names) -> list[tuple[str, dict]]:
    """[(phase, {way: its FLAGS})] for the ways `names`, phase by phase in
    PHASES' order, each phase's ways in the order named."""
    return [(phase, {name: WAYS[name][1] for name in names if WAYS[name][0] == phase})
            for phase in PHASES if any(WAYS[name][0] == phase for name in names)]


def set_phase(phase: str) -> None:
    """The switches read when a kernel is built, as `phase` (of PHASES) sets
    them; the kernels built before forgotten."""
    from gpucourse.kernels.sgemm import entry_point, kernel_choice, pipelined, vectorized

    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    vectorized.STAGED_STORES, vectorized.PEELED_STORES = phase == "staged", phase == "peeled"
    pipelined.STEP_SCALAR_COPIES = phase == "stepped"
    vectorized.RING_COPY_OVERLAP = phase == "overlap"
    entry_point.RING_COPY_WIDE = phase == "wide"
    kernel_choice._compiled.cache_clear()
    kernel_choice._tiled_kernel.cache_clear()


def copy_once(entry_point, copied: set):
    """A stand-in for entry_point._ring_copy_b that copies B into the padded
    buffer the first time a plan uses it and not after, while B's pointer is
    in `copied` (cleared for each shape): "padded_copy_once"."""
    real = entry_point._ring_copy_b

    def ring_copy_b(k, n, n4, device_id):
        copy = real(k, n, n4, device_id)

        def go(source_ptr, padded_ptr):
            if source_ptr not in copied:
                copy(source_ptr, padded_ptr)
                copied.add(source_ptr)
        return go
    return ring_copy_b


def time_ways(torch, np, time_ms, sgemm, entry_point, a, b, reference, ways: dict,
              phase: str, current: list) -> tuple[list[dict], float]:
    """Each way of `ways` ({name: its FLAGS}) and cuBLAS in turns, ROUNDS
    rounds, in `phase` (``set_phase``; `current` holds the phase set last, a
    list of one): rows of {way, ms, kernel_ms, vs_cublas, max_rel_err,
    phase}, and the worst error."""
    if current[0] != phase:
        set_phase(phase)
        current[0] = phase
    real_copy, copied = entry_point._ring_copy_b, set()
    once = copy_once(entry_point, copied)
    calls, errors = {"cublas": lambda: torch.mm(a, b)}, {"cublas": 0.0}
    for name, flags in ways.items():
        def call(flags=flags, name=name):
            for flag, value in zip(FLAGS, flags):
                setattr(entry_point, flag, value)
            return sgemm.matmul(a, b)
        entry_point._quick_plan.cache_clear()  # each way builds its own plan
        entry_point._ring_copy_b = once if name == "padded_copy_once" else real_copy
        errors[name] = relative_error(call(), reference)
        calls[name] = call

    def fresh_plan(name):
        # Each way's plan is built on its first call of a turn, with its copy.
        entry_point._ring_copy_b = once if name == "padded_copy_once" else real_copy
        if name != "cublas":
            entry_point._quick_plan.cache_clear()

    try:
        walls, kernels = time_in_turns(calls, ROUNDS, time_ms, fresh_plan)
    finally:
        entry_point._ring_copy_b = real_copy
    cublas_ms = float(np.median(walls["cublas"]))
    rows = []
    for name in calls:
        ms = float(np.median(walls[name]))
        rows.append({"way": name, "ms": ms, "kernel_ms": float(np.median(kernels[name])),
                     "vs_cublas": cublas_ms / ms, "max_rel_err": errors[name],
                     "staged_stores": phase == "staged", "stores": {
                         "peeled": "peeled", "staged": "staged"}.get(phase, "registers"),
                     "phase": phase})
    return rows, max(errors.values())


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--shapes", default="", help="these shapes instead of SHAPES, MxNxK "
                                                     "comma-separated")
    parser.add_argument("--ways", default="",
                        help="these ways (comma-separated names of WAYS) instead of "
                             + ", ".join(DEFAULT_WAYS))
    parser.add_argument("--all-ways", action="store_true",
                        help="also the driver's copy, and C stored through shared memory")
    args, started = start(parser, argv, check_gpu=lambda: need_a_gpu(
        "sgemm_ring_pairs.py", "tests/test_sgemm_pipelined.py checks the ways on the simulator"))
    if args.ways and args.all_ways:
        parser.error("--ways and --all-ways: give one")
    shapes = parse_shapes(args.shapes) or SHAPES
    names = parse_ways(args.ways) if args.ways else ALL_WAYS if args.all_ways else DEFAULT_WAYS
    import numpy as np
    import torch
    from sgemm import time_ms  # benchmarks/sgemm.py: the same timing

    from gpucourse.kernels import sgemm
    from gpucourse.kernels.sgemm import entry_point

    gpu = sgemm.gpu_model()
    record = record_start(
        "sgemm_ring_pairs", gpu, versions(),
        f"auto's plan at each shape, its ring run each way of {', '.join(names)} (a way's "
        f"entry_point.{', '.join(FLAGS)} and its phase's switches: sgemm_ring_pairs.WAYS), "
        f"phase by phase, cuBLAS (torch.mm) beside each phase, in turns, {ROUNDS} rounds, "
        "median; ms: wall clock per call of a loop ending in torch.cuda.synchronize; "
        "kernel_ms: CUDA events around back-to-back calls; TF32 off; N(0,1) inputs")
    saved = tuple(getattr(entry_point, flag) for flag in FLAGS)
    current = ["registers"]
    set_phase("registers")
    rows, worst = [], 0.0
    try:
        # Phase by phase (its switches are read when a kernel is built: one
        # switch, so each kernel is compiled once a phase), shape by shape.
        for phase, ways in phases_of(names):
            for m, n, k in shapes:
                plan = sgemm.choose_plan((m, n, k), gpu)
                if not plan["config"].stages:  # through registers: once, as auto runs it
                    if phase != "registers":
                        continue
                    ways_here = {"auto": (None, False, False, False)}
                else:
                    ways_here = ways
                generator = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
                a = torch.randn((m, k), device="cuda", generator=generator)
                b = torch.randn((k, n), device="cuda", generator=generator)
                reference = torch.mm(a.double(), b.double())
                found, error = time_ways(torch, np, time_ms, sgemm, entry_point, a, b,
                                         reference, ways_here, phase, current)
                worst = max(worst, error)
                for row in found:
                    rows.append({"m": m, "n": n, "k": k, **row,
                                 "config": {**asdict(plan["config"]), "splits": plan["splits"]}})
                print(f"{m}x{n}x{k} {sgemm.shape_model.tile_key(plan['config'])} splits "
                      f"{plan['splits']}: " + ", ".join(
                          f"{r['way']} {r['ms'] * 1e3:.1f} us ({r['vs_cublas']:.0%})"
                          for r in found), flush=True)
    finally:
        for flag, value in zip(FLAGS, saved):
            setattr(entry_point, flag, value)
        set_phase("registers")
        entry_point._quick_plan.cache_clear()
    record["results"] = rows
    record["seconds"] = time.perf_counter() - started
    from gpucourse.chapters.sgemm_held_out import ways_against

    for baseline in ("padded", "scalar"):
        for way, seen in ways_against(rows, baseline).items():
            least, median, most = seen["change"]
            print(f"{way} against {baseline}: faster at {seen['faster']} of {seen['shapes']}, "
                  f"time {median:+.1%} at the median ({least:+.1%} to {most:+.1%})")
    print(f"wrote {write_record(record, Path(args.out))}; worst error {worst:.1e}")
    return 1 if worst > 1e-4 else 0


if __name__ == "__main__":
    sys.exit(main())
