"""Writing the SGEMM shape model's JSON (src/gpucourse/kernels/sgemm/
sgemm_shape_model.json) from benchmark records: what benchmarks/sgemm_grid.py
measured (its rates, split shares, fitted constants and padding block) and
what it fits without a GPU from committed results:

    python3 benchmarks/sgemm_grid.py --fit-committed     # the constants
    python3 benchmarks/sgemm_grid.py --fit-scalar-loads  # the scalar-load shares
    python3 benchmarks/sgemm_kernel_times.py --save RECORD[,RECORD]   # ring_scalar_b
    python3 benchmarks/sgemm_model_json.py --fit-stream-tile-shares   # stream-K by tile

Each writer changes one GPU's entry in place and records where its numbers
came from, so that every number in the JSON names its source.

One fit writes a trial model beside it instead, never into it:

    python3 benchmarks/sgemm_model_json.py --trial-plan-factors OUT.json
    python3 benchmarks/sgemm_off_grid.py --held-out N --model OUT.json   # on a GPU

the committed JSON with the H200's plans priced by a factor per tile and way
of walking K, fitted to the explores (PLAN_FACTOR_EXPLORES); tried on
2026-11-30 and not adopted (benchmarks/NOTES.md has why, and the trial to run).

    python3 benchmarks/sgemm_model_json.py --trial-split-residency OUT.json

the committed JSON with the zeroing kernel's measured cost and the K-whole
rings' registers (sgemm_held_out's KERNEL_TIMES and REGISTERS), stream-K's
tile shares fitted again under both; tried on held-out set 9 on 2026-11-30
(benchmarks/NOTES.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from _common import RESULTS

# The records each fit reads: the explores (--fit-scalar-loads) and each GPU's
# sgemm_shapes run (--fit-committed).
SCALAR_EXPLORES = ("sgemm_explore-h200-2026-11-29.json",
                   "sgemm_explore_off_grid-h200-2026-11-29.json")
COMMITTED = {"NVIDIA H100 80GB HBM3": "sgemm_shapes-h100-2026-11-26.json",
             "NVIDIA H200": "sgemm_shapes-h200-2026-11-25.json"}
# The explores --trial-plan-factors fits: every one of 2026-11-30, the model
# and menu of today (rings, short depths), in results/reruns/.
PLAN_FACTOR_EXPLORES = tuple(f"reruns/sgemm_explore-h200-2026-11-30-{name}.json" for name in (
    "rings", "held-out", "held-out-menu", "off-grid-misses", "held-out-2", "held-out-3",
    "held-out-4"))
# The stream-K run whose kernel under two blocks' register cap (the one auto
# runs, building_blocks.STREAM_REGISTERS) gives the H200's stream share
# (--fit-stream-share), and its rows of that kernel.
STREAM_RECORD, STREAM_VARIANT = "sgemm_stream-h200-2026-11-29.json", "stream_two_blocks"
# The explores whose stream-K plans give each tile its own stream share
# (--fit-stream-tile-shares), and whether they ran rings reading a ragged B
# as given (from the twenty-third session; before, rings copied it first).
STREAM_TILE_EXPLORES = {**{name: False for name in PLAN_FACTOR_EXPLORES},
                        "reruns/sgemm_explore-h200-2026-11-30-held-out-5.json": False,
                        "reruns/sgemm_explore-h200-2026-11-30-misses-scalar-b.json": True}



# The committed model as it stood before the stepped trial was adopted
# (2026-12-01): the model every earlier trial file was written on. Tests
# write those trials again from it, to check each file is its writer's output
# whatever the committed model has become since.
MODEL_BEFORE_STEPPED = Path(__file__).parent / "trials" / "sgemm_shape_model-before-stepped.json"

def save_split_shares(sgemm, record: dict, source: str, merge: bool = False) -> None:
    """Write an sgemm_rates_variants record's split shares
    (shape_model_fit.split_shares_from_record, priced by the entry's rates) into
    the model's JSON for its GPU, as "split_kernel", with their source; with
    `merge`, beside the shares of the tiles the record did not time."""
    def update(entry):
        shares = sgemm.shape_model_fit.split_shares_from_record(
            record, {"name": record["gpu"], **entry})
        new = {key: round(value, 4) for key, value in shares.items()}
        old = entry.get("split_kernel") if merge else None
        entry["split_kernel"] = ({"source": f"{old['source']}; {source} ({', '.join(new)})",
                                  "share": {**old["share"], **new}} if old
                                 else {"source": source, "share": new})

    update_entry(sgemm, record["gpu"], update)


def save_rates(sgemm, record: dict, source: str, merge: bool = False) -> None:
    """Write an sgemm_rates record's measured rates (shape_model.rates_from_record)
    into the model's JSON for its GPU, with their source; with `merge`, beside
    the rates of the tiles the record did not time (each kind of rate the
    entry holds must come with the record's too)."""
    def update(entry):
        rates = sgemm.shape_model.rates_from_record(record, {"name": record["gpu"], **entry})
        new = {name: {key: [round(v, 7) for v in values] for key, values in by_tile.items()}
               for name, by_tile in rates.items()}
        old = entry.get("rates") if merge else None
        if old:
            # (A tile without short depths' timings is priced by its line alone.)
            missing = [name for name in old if name not in ("source", "us_short")
                       and name not in new]
            if missing:
                raise ValueError(f"the record's rates lack {missing}, which the entry's other "
                                 f"tiles have: time the tiles at three depths of K or more")
            tiles = sorted(new["us_per_column"])
            new = {name: {**old.get(name, {}), **by_tile} for name, by_tile in new.items()}
            entry["rates"] = {"source": f"{old['source']}; {source} ({', '.join(tiles)})", **new}
        else:
            entry["rates"] = {"source": source, **new}

    update_entry(sgemm, record["gpu"], update)


# The timings save_short_rates leaves out: back-to-back launches of a known
# plan come no faster than the host issues them, 5.7 us apart at 64^3
# (results/sgemm_host_costs-h200-2026-11-30.json, matmul_whole), so a timing
# under twice that is the host's time as much as the SM's. Kept, at 64 x 64
# rings in two slices of 256 at 512^3, the host-bound timings at one block
# an SM (8.3 and 9.2 us) priced 21.7 us a plan that ran 24.7
# (reruns/sgemm_grid-h200-2026-11-30-short-unfloored.json).
HOST_BOUND_US = 12.0


def save_short_rates(sgemm, record: dict, source: str) -> None:
    """Write an sgemm_rates_short record (benchmarks/sgemm_rates_short.py) into
    the rates of the model's JSON for its GPU, as "us_short": {tile: {depth:
    [the busiest SM's us at q = 1, 2, ... blocks, the entry's gpu_launch_us
    taken out; None where the timing was under HOST_BOUND_US]}}, which
    shape_model.measured_sm_us reads below its LINE_FROM_K, and its source
    beside the rates'. Raises ValueError unless
    every tile of the record has every q from 1 up at each of its depths, and
    the entry already has rates for it."""
    def update(entry):
        launch, found = entry["constants"]["gpu_launch_us"], {}
        for row in record.get("results", []):
            key = sgemm.shape_model.tile_key(sgemm.shape_model.tile_config_of(row["config"]))
            us = row["ms"] * 1e3
            found.setdefault(key, {}).setdefault(str(row["k"]), {})[row["blocks_per_sm"]] = (
                us - launch if us >= HOST_BOUND_US else None)
        rates = entry.get("rates") or {}
        for key, by_k in found.items():
            if key not in rates.get("us_per_column", {}):
                raise ValueError(f"{key}: the entry has no rates for this tile to extend")
            for k, by_q in by_k.items():
                if sorted(by_q) != list(range(1, len(by_q) + 1)):
                    raise ValueError(f"{key} at K = {k}: need q = 1, 2, ...; got {sorted(by_q)}")
        if not found:
            raise ValueError("the record holds no short-depth rates (sgemm_rates_short.py)")
        rates["us_short"] = {key: {k: [None if by_q[q] is None else round(by_q[q], 4)
                                       for q in sorted(by_q)]
                                   for k, by_q in sorted(by_k.items(), key=lambda kv: int(kv[0]))}
                             for key, by_k in found.items()}
        rates["source"] = f"{rates['source']}; {source} (us_short)"

    update_entry(sgemm, record["gpu"], update)


def save_ring_scalar_b(sgemm, record: dict, source: str) -> dict:
    """Write a sgemm_kernel_times record's fit of the rings read both ways
    (shape_model_fit.fit_ring_scalar_b: each ring tile's share for reading a
    ragged B as given, overall and by how full the busiest SM is, the copy's
    host time) into the model's JSON for its GPU as "ring_scalar_b", with its
    source; returns the fit."""
    from gpucourse.kernels.sgemm.shape_model_fit import fit_ring_scalar_b

    fit = fit_ring_scalar_b(record, entry=sgemm.gpu_entry(record["gpu"]))
    update_entry(sgemm, record["gpu"], lambda entry: entry.update(
        ring_scalar_b={"source": f"{source} (fit_ring_scalar_b)", **fit}))
    return fit


def save_constants(sgemm, gpu: str, fit: dict, source: str) -> None:
    """Write fitted constants for `gpu` into the model's JSON, with their source."""
    def update(entry):
        entry["constants"] = {name: round(value, 6) for name, value in fit["constants"].items()}
        entry["calibrated"] = (f"{source}: {fit['rows']} timings, {fit.get('bounds', 0)} lower "
                               f"bounds, rms log error {fit['rms_log_error']:.4f}")

    update_entry(sgemm, gpu, update)


def update_entry(sgemm, gpu: str, update) -> None:
    """Change `gpu`'s entry of the model's JSON in place by update(entry) (a new
    entry starts as a copy of the default GPU's), write the file, and forget
    what the model read and planned from the old one."""
    data = json.loads(sgemm.MODEL_PATH.read_text())
    update(data["gpus"].setdefault(gpu, dict(data["gpus"][data["default"]])))
    sgemm.MODEL_PATH.write_text(json.dumps(data, indent=1) + "\n")
    sgemm.shape_model._read_model.cache_clear()
    sgemm.shape_model.auto_choice.cache_clear()
    sgemm.shape_model.ring_reads_b_scalar.cache_clear()


def fit_committed() -> int:
    """--fit-committed: the constants of each GPU of COMMITTED, from its committed
    sgemm_shapes results (call_us: its 1 x 1 x 1 cuBLAS call; GPUs without
    split-K timings keep the H100's split constants)."""
    from gpucourse.kernels import sgemm

    split_constants = ("split_call_us", "zero_us", "atomics_per_us")
    fitted = {}
    for gpu, name in COMMITTED.items():
        record = json.loads((RESULTS / name).read_text())
        rows = [r for r in sgemm.shape_model_fit.measured_rows(record) if r[0] != (1, 1, 1)]
        call = next(r for r in record["results"] if r["variant"] == "cublas" and r["m"] == 1)
        entry = sgemm.gpu_entry(gpu)
        start_from = dict(fitted.get("NVIDIA H100 80GB HBM3", entry["constants"]))
        has_splits = any(splits > 1 for _, _, splits, _ in rows)
        entry = {**entry, "constants": {**start_from, "call_us": call["ms"] * 1e3}}
        bounds = sgemm.shape_model_fit.search_bounds(record, entry)
        fixed = ("call_us",) + (() if has_splits else split_constants)
        fit = sgemm.calibrate(rows, entry, bounds, rounds=80, fixed=fixed)
        fitted[gpu] = fit["constants"]
        save_constants(sgemm, gpu, fit, f"benchmarks/results/{name} (--fit-committed)")
        print(f"{gpu}: rms log error {fit['rms_log_error']:.4f} over {fit['rows']} timings and "
              f"{fit['bounds']} lower bounds")
    return 0


def explore_rows(sgemm, names) -> list:
    """The rows (shape_model_fit.explore_rows) of the committed explores `names`
    (paths under benchmarks/results/), one after another."""
    return [row for name in names for row in sgemm.shape_model_fit.explore_rows(
        json.loads((RESULTS / name).read_text()))]


def fit_scalar_loads() -> int:
    """--fit-scalar-loads: the H200's scalar-load shares (shape_model.
    fit_scalar_load_shares) from the committed explores, into the model's JSON."""
    from gpucourse.kernels import sgemm

    rows = explore_rows(sgemm, SCALAR_EXPLORES)
    fit = sgemm.shape_model_fit.fit_scalar_load_shares(rows, sgemm.gpu_entry("NVIDIA H200"))
    update_entry(sgemm, "NVIDIA H200", lambda entry: entry.update(scalar_loads={
        "source": " and ".join(f"benchmarks/results/{name}" for name in SCALAR_EXPLORES)
        + " (--fit-scalar-loads)", "share": round(fit["share"], 4),
        "tile_share": {key: round(value, 4) for key, value in fit["tile_share"].items()}}))
    print(f"scalar-load share {fit['share']:.3f}; by tile " + ", ".join(
        f"{key} {value:.3f}" for key, value in fit["tile_share"].items()))
    return 0


def stream_shares(record: dict, entry: dict, variant: str = STREAM_VARIANT) -> dict:
    """{(m, n, k): share} from an sgemm_stream record: at each shape where the
    model puts both on the GPU for STREAM_MIN_US or more, the share of
    stream-K's busiest SM that makes plan_cost (entry without a stream share)
    give the measured time of `variant`, the rates' drift between runs
    cancelled by the same record's auto_plan row (shape_model_fit.measured_share,
    as split_shares_from_record does)."""
    from gpucourse.kernels.sgemm import shape_model, shape_model_fit, tile_config_of

    bare = {key: value for key, value in entry.items() if key != "stream_kernel"}
    rows = {(r["m"], r["n"], r["k"], r["variant"]): r for r in record["results"] if "ms" in r}
    shares = {}
    for (m, n, k, name), row in rows.items():
        auto = rows.get((m, n, k, "auto_plan"))
        if name != variant or auto is None:
            continue
        plans = [shape_model.plan_cost((m, n, k), tile_config_of(r["config"]), splits, bare)
                 for r, splits in ((auto, auto["splits"]), (row, shape_model.STREAM))]
        if min(p["gpu_us"] for p in plans) < shape_model.STREAM_MIN_US:
            continue
        shares[(m, n, k)] = shape_model_fit.measured_share(auto["ms"] * 1e3, plans[0],
                                                       row["ms"] * 1e3, plans[1])
    return shares


def fit_stream_share() -> int:
    """--fit-stream-share: the H200's stream share, the median of stream_shares
    over STREAM_RECORD, into the model's JSON (then auto prices stream-K)."""
    import statistics

    from gpucourse.kernels import sgemm

    shares = stream_shares(json.loads((RESULTS / STREAM_RECORD).read_text()),
                           sgemm.gpu_entry("NVIDIA H200"))
    share = statistics.median(shares.values())
    update_entry(sgemm, "NVIDIA H200", lambda entry: entry.update(stream_kernel={
        "source": f"benchmarks/results/{STREAM_RECORD} ({STREAM_VARIANT}; --fit-stream-share)",
        "share": round(share, 4)}))
    print(f"stream share {share:.3f}, from " + ", ".join(
        f"{m}x{n}x{k} {x:+.3f}" for (m, n, k), x in shares.items()))
    return 0


def stream_tile_shares(sgemm, entry: dict) -> dict:
    """The stream-K share tile by tile (shape_model_fit.fit_stream_tile_shares)
    from STREAM_TILE_EXPLORES, each priced by `entry` the way it read B."""
    copied = {key: value for key, value in entry.items() if key != "ring_scalar_b"}
    samples: dict = {}
    for name, as_given in STREAM_TILE_EXPLORES.items():
        for key, found in sgemm.shape_model_fit.stream_share_samples(
                explore_rows(sgemm, (name,)), entry if as_given else copied).items():
            samples.setdefault(key, {}).update(found)
    return sgemm.shape_model_fit.fit_stream_tile_shares(samples)


def fit_stream_tile_shares() -> dict:
    """--fit-stream-tile-shares: the H200's stream-K share tile by tile
    (``stream_tile_shares``) into the model's JSON beside the one share for
    every other tile. Returns the shares."""
    from gpucourse.kernels import sgemm

    shares = stream_tile_shares(sgemm, sgemm.gpu_entry("NVIDIA H200"))

    def update(entry):
        entry["stream_kernel"]["tile_share"] = shares
        entry["stream_kernel"]["source"] = entry["stream_kernel"]["source"].split("; tile_share")[0] + (
            "; tile_share: " + " and ".join(f"benchmarks/results/{name}" for name in STREAM_TILE_EXPLORES)
            + " (--fit-stream-tile-shares)")

    update_entry(sgemm, "NVIDIA H200", update)
    return shares


def trial_plan_factors(out, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`) with the H200's entry given a "plan_factor" block fitted to
    PLAN_FACTOR_EXPLORES (shape_model_fit.fit_plan_factors, the entry priced
    without factors). Returns the factors. The committed JSON is left as it
    is."""
    from gpucourse.kernels import sgemm

    entry = sgemm.shape_model.gpu_entry("NVIDIA H200", base) if base else \
        sgemm.gpu_entry("NVIDIA H200")
    rows = explore_rows(sgemm, PLAN_FACTOR_EXPLORES)
    factors = sgemm.shape_model_fit.fit_plan_factors(rows, entry)
    data = json.loads(Path(base or sgemm.MODEL_PATH).read_text())
    data["gpus"]["NVIDIA H200"]["plan_factor"] = {
        "source": " and ".join(f"benchmarks/results/{name}" for name in PLAN_FACTOR_EXPLORES)
        + " (sgemm_model_json.py --trial-plan-factors)", "factor": factors}
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return factors


def split_residency_blocks(sgemm, entry: dict) -> dict:
    """Give `entry` (the H200's, changed in place) the zeroing kernel's measured
    cost ("zero_matrix", shape_model_fit.fit_zero_matrix over KERNEL_TIMES),
    the K-whole rings' registers ("split_kernel"["whole_registers"], from
    REGISTERS: where the busiest SM has more blocks than that kernel fits, a
    ring's measured split share counts even below 0,
    shape_model.split_kernel_share), and stream-K's tile shares fitted again
    under both (``stream_tile_shares``). Returns the three new blocks."""
    from gpucourse.chapters.sgemm_held_out import (KERNEL_TIMES, REGISTERS, ring_registers,
                                                   zero_matrix_line)

    zero = zero_matrix_line()
    entry["zero_matrix"] = {"source": " and ".join(f"benchmarks/results/{name}" for name in
                                                   KERNEL_TIMES) + " (fit_zero_matrix)", **zero}
    entry["split_kernel"]["whole_registers"] = {
        tile: kernels["whole"][0] for tile, kernels in ring_registers().items()}
    entry["split_kernel"]["source"] = entry["split_kernel"]["source"].split("; whole_registers")[
        0] + f"; whole_registers: benchmarks/results/{REGISTERS}"
    shares = stream_tile_shares(sgemm, entry)
    entry["stream_kernel"]["tile_share"] = shares
    again = " (again under zero_matrix)"  # written once, however often this runs
    entry["stream_kernel"]["source"] = entry["stream_kernel"]["source"].replace(again, "") + again
    return {"zero_matrix": zero, "whole_registers": entry["split_kernel"]["whole_registers"],
            "tile_share": shares}


def trial_split_residency(out, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`) with the H200's entry given ``split_residency_blocks``. Returns
    those blocks. The committed JSON is left as it is."""
    from gpucourse.kernels import sgemm

    data = json.loads(Path(base or sgemm.MODEL_PATH).read_text())
    found = split_residency_blocks(sgemm, data["gpus"]["NVIDIA H200"])
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return found


def fit_split_residency() -> dict:
    """--fit-split-residency: ``split_residency_blocks`` into the committed
    model's H200 entry (what --trial-split-residency writes beside it, once
    the grid and the held-out sets have run it). Returns the blocks."""
    from gpucourse.kernels import sgemm

    found = {}
    update_entry(sgemm, "NVIDIA H200",
                 lambda entry: found.update(split_residency_blocks(sgemm, entry)))
    return found


def record_paths(text: str) -> list[str]:
    """The record paths of a comma-separated option (--records, --save)."""
    return [path for path in text.split(",") if path]


def record_source(paths) -> str:
    """Records named as a model block's "source" names them:
    benchmarks/results/[reruns/]NAME, joined by "and"."""
    def named(path):
        folder = "reruns/" if Path(path).parent.name == "reruns" else ""
        return f"benchmarks/results/{folder}{Path(path).name}"

    return " and ".join(named(path) for path in paths)


def joined_records(paths) -> tuple[list[dict], dict]:
    """(the records at `paths`, one record of the first's fields holding all
    their rows)."""
    records = [json.loads(Path(path).read_text()) for path in paths]
    joined = {**records[0], "results": [row for r in records for row in r["results"]]} \
        if records else {}
    return records, joined


def zero_memset_block(paths) -> dict:
    """The H200's "zero_matrix" block from sgemm_kernel_times.py records timed
    with C zeroed by the driver's memset (entry_point.ZERO_BY_MEMSET):
    shape_model_fit.fit_zero_matrix over those records alone, its source
    naming them. Stream-K's tile shares are left as fitted: the explores they
    came from ran the zeroing kernel, and the price and the time of a plan
    both lose what the memset saves."""
    from gpucourse.kernels import sgemm

    records, _ = joined_records(paths)
    if not records or any(r.get("zeroing") != "memset" for r in records):
        raise SystemExit("--records must name sgemm_kernel_times records whose \"zeroing\" "
                         "is \"memset\" (timed with the driver's memset)")
    fit = sgemm.shape_model_fit.fit_zero_matrix(records)
    return {"source": record_source(paths) + " (fit_zero_matrix; the driver's memset)", **fit}


def trial_zero_memset(out, paths, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`) with the H200's "zero_matrix" block from
    ``zero_memset_block(paths)``. Returns the block. The committed JSON is
    left as it is."""
    from gpucourse.kernels import sgemm

    data = json.loads(Path(base or sgemm.MODEL_PATH).read_text())
    block = zero_memset_block(paths)
    data["gpus"]["NVIDIA H200"]["zero_matrix"] = block
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return block


def fit_zero_memset(paths) -> dict:
    """--fit-zero-memset: ``zero_memset_block(paths)`` into the committed
    model's H200 entry (what --trial-zero-memset writes beside it, once the
    grid and the held-out sets have run it). Returns the block."""
    from gpucourse.kernels import sgemm

    block = zero_memset_block(paths)
    update_entry(sgemm, "NVIDIA H200", lambda entry: entry.update(zero_matrix=block))
    return block


def _kernel_times_and_model(paths, base=None) -> tuple[dict, dict]:
    """(the sgemm_kernel_times records at `paths` joined into one, the model
    JSON a trial starts from: the committed one, or the one at `base`).
    SystemExit where `paths` names none or a record of another benchmark."""
    from gpucourse.kernels import sgemm

    records, joined = joined_records(paths)
    if not records or any(r.get("benchmark") != "sgemm_kernel_times" for r in records):
        raise SystemExit("--records must name sgemm_kernel_times records")
    return joined, json.loads(Path(base or sgemm.MODEL_PATH).read_text())


def _trial_ring_block(out, paths, base, block_name: str, way: str, keys=None) -> dict:
    """Write to `out` the model JSON a trial starts from (the committed one,
    or `base`) with the H200's `block_name` fitted to the sgemm_kernel_times
    records at `paths` (shape_model_fit.fit_ring_scalar_b with `way`; only
    the fit's `keys` where given). Returns the block."""
    from gpucourse.kernels import sgemm

    joined, data = _kernel_times_and_model(paths, base)
    entry = {"name": "NVIDIA H200", **data["gpus"]["NVIDIA H200"]}
    fit = sgemm.shape_model_fit.fit_ring_scalar_b(joined, entry=entry, way=way)
    way_text = "" if way == "scalar" else f", way {way}"
    block = {"source": record_source(paths) + f" (fit_ring_scalar_b{way_text})",
             **{key: value for key, value in fit.items() if keys is None or key in keys}}
    data["gpus"]["NVIDIA H200"][block_name] = block
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return block


def trial_ring_pairs(out, paths, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`, a trial itself) with the H200's "ring_pairs_b" block, each ring
    tile's share for reading an even ragged B 8 bytes a copy, fitted to the
    sgemm_kernel_times records at `paths` (variants X_pairs_b beside X:
    shape_model_fit.fit_ring_scalar_b with way "pairs"). Returns the block.
    The committed JSON is left as it is."""
    return _trial_ring_block(out, paths, base, "ring_pairs_b", "pairs",
                             ("share", "share_by_blocks"))


def trial_ring_scalar(out, paths, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`, a trial itself) with the H200's "ring_scalar_b" block fitted
    again to the sgemm_kernel_times records at `paths` (variants X_scalar_b
    beside X: shape_model_fit.fit_ring_scalar_b), for 4-byte copies timed
    as the kernels now make them (pipelined.STEP_SCALAR_COPIES on since
    2026-12-01). Returns the block. The committed JSON is left as it is."""
    return _trial_ring_block(out, paths, base, "ring_scalar_b", "scalar")


def adopt_blocks(trial, blocks, gpu: str = "NVIDIA H200") -> dict:
    """Write the blocks named in `blocks` of `gpu`'s entry in the trial model
    at `trial` into the committed model, once a held-out set has judged the
    trial and it won: {block: what was written}. Every other block stays as
    committed. SystemExit naming what is wrong where the trial is not a model
    JSON, or lacks a block, or its block is already the committed one."""
    from gpucourse.kernels import sgemm

    try:
        found = json.loads(Path(trial).read_text())["gpus"][gpu]
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"--adopt must name a trial model JSON with an entry for {gpu}, "
                         f"got {trial} ({error!r})") from None
    committed = json.loads(sgemm.MODEL_PATH.read_text())["gpus"].get(gpu, {})
    missing = [block for block in blocks if block not in found]
    same = [block for block in blocks if block in found and found[block] == committed.get(block)]
    if not blocks or missing or same:
        raise SystemExit(f"--blocks must name blocks of the trial that differ from the committed "
                         f"model's (got {list(blocks)}; not in the trial: {missing}; the same as "
                         f"committed: {same})")
    adopted = {block: found[block] for block in blocks}
    update_entry(sgemm, gpu, lambda entry: entry.update(adopted))
    return adopted


def trial_ring_depth(out, paths, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`) with the H200's "share_by_depth" in "ring_scalar_b" and, where
    the records hold 8-byte copies, in "ring_pairs_b": each ring tile's
    share for reading a ragged B as given by how full the busiest SM is and
    how deep K runs, fitted to the sgemm_kernel_times records at `paths`
    (``--depth-grid odd`` and ``even``: shape_model_fit.fit_ring_b_by_depth).
    Returns {block: its share_by_depth}. The committed JSON is left as it is."""
    from gpucourse.kernels import sgemm

    joined, data = _kernel_times_and_model(paths, base)
    gpu = data["gpus"]["NVIDIA H200"]
    entry = {"name": "NVIDIA H200", **gpu}
    found = {}
    for block, way in (("ring_scalar_b", "scalar"), ("ring_pairs_b", "pairs")):
        try:
            found[block] = sgemm.shape_model_fit.fit_ring_b_by_depth(joined, entry, way)
        except ValueError:  # no ring timed this way (an odd grid has no pairs)
            continue
        gpu[block] = {**(gpu.get(block) or {}), "share_by_depth": found[block],
                      "source_by_depth": record_source(paths) + " (fit_ring_b_by_depth)"}
    if not found:
        raise SystemExit("--records hold no ring timed with B padded and read as given")
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return found


def ring_copy_block(record: dict, source: str, wide: bool) -> dict:
    """The model's "ring_copy" block from an sgemm_ring_copy record: the line
    of pad_copy_wide ("fit_wide", four floats a thread: the copy matmul makes
    while entry_point.RING_COPY_WIDE is on) or of pad_copy ("fit"), its
    source naming which."""
    if wide:
        return {"source": f"{source} (fit_wide: padding.pad_copy_wide)", **record["fit_wide"]}
    return {"source": source, **record["fit"]}


def trial_wide_copy(out, path, base=None) -> dict:
    """Write to `out` a trial model: the committed JSON (or the model at
    `base`) with the H200's "ring_copy" priced at the copy matmul makes since
    entry_point.RING_COPY_WIDE went on: the "fit_wide" line of the
    sgemm_ring_copy record at `path` (sgemm_ring_copy.py --wide). Returns the
    block. SystemExit where the record is not such a run."""
    from gpucourse import results
    from gpucourse.kernels import sgemm

    try:
        record = results.load_results("sgemm_ring_copy", Path(path))
    except ValueError as error:
        raise SystemExit(f"--trial-wide-copy's --records must name an sgemm_ring_copy "
                         f"record: {error}") from None
    if "fit_wide" not in record:
        raise SystemExit(f"{path} has no fit_wide: run sgemm_ring_copy.py with --wide")
    data = json.loads(Path(base or sgemm.MODEL_PATH).read_text())
    block = ring_copy_block(record, record_source([path]), wide=True)
    data["gpus"]["NVIDIA H200"]["ring_copy"] = block
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return block


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="Fit stream-K's shares by tile into the shape model, or write a trial "
                    "model (never the committed one).")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--trial-plan-factors", metavar="OUT",
                       help="the committed model with price factors fitted to the explores")
    which.add_argument("--trial-split-residency", metavar="OUT",
                       help="the committed model with the zeroing's measured cost and the "
                            "K-whole rings' registers, stream-K's shares fitted again")
    which.add_argument("--trial-zero-memset", metavar="OUT",
                       help="the committed model with zeroing priced by the driver's memset "
                            "(--records: sgemm_kernel_times records timed with it)")
    which.add_argument("--trial-ring-pairs", metavar="OUT",
                       help="the committed model (or --base) with each ring tile's share for "
                            "reading an even ragged B 8 bytes a copy (--records: "
                            "sgemm_kernel_times records with X_pairs_b variants)")
    which.add_argument("--trial-ring-depth", metavar="OUT",
                       help="the committed model (or --base) with each ring tile's share for "
                            "reading a ragged B as given by regime and depth of K (--records: "
                            "sgemm_kernel_times.py --depth-grid records)")
    which.add_argument("--trial-wide-copy", metavar="OUT",
                       help="write a trial model pricing B's copy at pad_copy_wide's line "
                            "(--records: one sgemm_ring_copy record run with --wide)")
    which.add_argument("--trial-ring-scalar", metavar="OUT",
                       help="write a trial model with ring_scalar_b fitted again to --records "
                            "(sgemm_kernel_times runs of the stepped 4-byte copies)")
    which.add_argument("--adopt", metavar="TRIAL",
                       help="write the --blocks of a trial model that won on a held-out set "
                            "into the committed model")
    which.add_argument("--fit-zero-memset", action="store_true",
                       help="the zero-memset trial's block into the committed model "
                            "(--records as for --trial-zero-memset)")
    which.add_argument("--fit-split-residency", action="store_true",
                       help="the same blocks into the committed model")
    which.add_argument("--fit-stream-tile-shares", action="store_true",
                       help="stream-K's share tile by tile from STREAM_TILE_EXPLORES, into the "
                            "committed model")
    parser.add_argument("--records", default="",
                        help="for --trial-zero-memset, --fit-zero-memset, --trial-ring-pairs, "
                             "--trial-ring-scalar and --trial-ring-depth: sgemm_kernel_times "
                             "records, by commas; for --trial-wide-copy one sgemm_ring_copy "
                             "record")
    parser.add_argument("--blocks", default="",
                        help="for --adopt: the H200 entry's blocks to write, by commas "
                             "(e.g. ring_copy,ring_scalar_b)")
    parser.add_argument("--base", default=None,
                        help="for --trial-wide-copy, --trial-ring-scalar, --trial-ring-pairs "
                             "and --trial-ring-depth: the model JSON to start from")
    args = parser.parse_args()
    paths = record_paths(args.records)
    if args.adopt:
        print(json.dumps(adopt_blocks(args.adopt, record_paths(args.blocks)), indent=1))
    elif args.trial_wide_copy:
        if len(paths) != 1:
            raise SystemExit("--trial-wide-copy takes one sgemm_ring_copy record in --records")
        print(json.dumps(trial_wide_copy(args.trial_wide_copy, paths[0], args.base), indent=1))
    elif args.trial_ring_scalar:
        print(json.dumps(trial_ring_scalar(args.trial_ring_scalar, paths, args.base), indent=1))
    elif args.trial_ring_depth:
        print(json.dumps(trial_ring_depth(args.trial_ring_depth, paths, args.base), indent=1))
    elif args.trial_ring_pairs:
        print(json.dumps(trial_ring_pairs(args.trial_ring_pairs, paths, args.base), indent=1))
    elif args.fit_zero_memset:
        print(json.dumps(fit_zero_memset(paths), indent=1))
    elif args.trial_zero_memset:
        print(json.dumps(trial_zero_memset(args.trial_zero_memset, paths), indent=1))
    elif args.fit_stream_tile_shares:
        found = fit_stream_tile_shares()
        print("stream-K shares by tile: " + ", ".join(f"{k} {v:+.3f}" for k, v in found.items()))
    elif args.fit_split_residency:
        print(json.dumps(fit_split_residency(), indent=1))
    elif args.trial_split_residency:
        print(json.dumps(trial_split_residency(args.trial_split_residency), indent=1))
    else:
        found = trial_plan_factors(args.trial_plan_factors)
        print(f"{len(found)} factors: " + ", ".join(f"{k} {v}" for k, v in found.items()))
