"""Chapter 8's last tenth: what the chapter shows of level 7, of counting
instructions, of the edge-free kernels and of every shape, read from the
benchmark runs that measured them.

Nothing here runs a kernel. These functions read level 7's own run
(``benchmarks/results/sgemm_level7-*.json``), the Nsight Compute summary
(``sgemm_ncu-*.json``, and ``sgemm_ragged_ncu-*.json`` at the shapes no
plan fixes), the dot-loop variants (``sgemm_unroll-*.json``), the
kernels without edge checks (``sgemm_interior-*.json``) and matmul as a user
calls it (``sgemm_shapes-*.json``), and draw level 7's warp tiles and the
runs' plots. They sit apart from ``sgemm`` (the ladder of levels 1 to 6)
because each reads a run of its own, made after the ladder to close the gap
to cuBLAS. Tile shapes' arithmetic is borrowed from
``gpucourse.kernels.sgemm``, imported inside the functions that need it.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpucourse import results
from gpucourse.chapters.sgemm import occupancy

# The target set for level 7 (issue 16): this share of cuBLAS fp32 at 4096^3
# and at 8192^3.
LEVEL7_TARGET_SHARE = 0.90


# -----------------------------------------------------------------------------
# Level 7 (warp tiling): its own benchmark run, benchmarks/sgemm_level7.py


def load_level7_results(path=None) -> dict:
    """The newest full (not --quick) sgemm_level7 results file in `path` (a
    folder or a file; default benchmarks/results): level 7's candidates, level
    6 and cuBLAS timed in turns, the validation with each candidate's
    resources, and the dot-loop unroll probe."""
    return results.load_results("sgemm_level7", path)


def _results_record(record, benchmark: str, reader: str) -> dict:
    """`record` if it is a results record of `benchmark` with a list of rows (as
    the function `reader` reads one), else ValueError naming both."""
    if not (isinstance(record, dict) and record.get("benchmark") == benchmark
            and isinstance(record.get("results"), list)):
        raise ValueError(f"record must be an {benchmark} results record ({reader} reads one)")
    return record


def _level7_record(record) -> dict:
    return _results_record(record, "sgemm_level7", "load_level7_results")


def _wm_iter(config: dict) -> int:
    # sgemm.WarpTileConfig.wm_iter, without importing the kernels.
    return (config["wm"] * config["wn"]) // (32 * config["wn_iter"] * config["tm"] * config["tn"])


def warp_config_label(config: dict) -> str:
    """A level-7 configuration (a results file's dict of WarpTileConfig's fields)
    in one short line, as benchmarks/sgemm_level7.py prints it: block tile,
    warp tile, passes down x across, patch, threads."""
    fields = ("bm", "bn", "bk", "wm", "wn", "wn_iter", "tm", "tn", "threads")
    if not isinstance(config, dict) or any(f not in config for f in fields):
        raise ValueError(f"config must be a dict with the fields {', '.join(fields)}, got {config!r}")
    return (f"{config['bm']}x{config['bn']}x{config['bk']} w{config['wm']}x{config['wn']} "
            f"it{_wm_iter(config)}x{config['wn_iter']} t{config['tm']}x{config['tn']} "
            f"{config['threads']}th")


def _timed(row) -> bool:
    return "failed" not in row and row.get("ms") and row.get("vs_cublas") is not None


def _resources(record, config) -> dict:
    for entry in record.get("validation", []):
        if entry.get("config") == config and entry.get("resources"):
            return entry["resources"]
    raise ValueError(f"record has no validation resources for {warp_config_label(config)}")


def level7_sweep(record: dict, m=4096, n=None, k=None) -> list[dict]:
    """Every level-7 candidate timed at one shape (default 4096^3), fastest
    first: label, config, ms, tflops, vs_cublas, and from the validation's
    compile report registers_per_thread and shared_bytes_per_block, with the
    warps per SM that `occupancy` gives them. Failed candidates are left out."""
    record = _level7_record(record)
    n = m if n is None else n
    k = m if k is None else k
    rows = [r for r in record["results"] if (r["m"], r["n"], r["k"]) == (m, n, k)]
    if not any(r["variant"] == "level7" and _timed(r) for r in rows):
        measured = sorted({(r["m"], r["n"], r["k"]) for r in record["results"]
                           if r["variant"] == "level7"})
        raise ValueError(f"m, n, k must be a shape where level 7 was timed, one of {measured}; "
                         f"got {(m, n, k)}")
    out = []
    for r in rows:
        if r["variant"] != "level7" or not _timed(r):
            continue
        resources = _resources(record, r["config"])
        occ = occupancy(resources["registers_per_thread"], resources["shared_bytes_per_block"],
                        r["config"]["threads"])
        out.append({"label": warp_config_label(r["config"]), "config": r["config"],
                    "ms": r["ms"], "tflops": r["tflops"], "vs_cublas": r["vs_cublas"],
                    "registers_per_thread": resources["registers_per_thread"],
                    "shared_bytes_per_block": resources["shared_bytes_per_block"],
                    "threads": r["config"]["threads"], "warps_per_sm": occ["warps_per_sm"]})
    return sorted(out, key=lambda r: -r["vs_cublas"])


def level7_against_level6(record: dict) -> list[dict]:
    """For each shape where level 7 was timed, in the record's order: m, n, k,
    cublas_tflops, level6 (level 6's share of cuBLAS at that shape, timed in
    the same turns), level7 (the best level-7 share there), best_label,
    candidates (how many level-7 rows were timed there) and gap (level7 -
    level6, a fraction: -0.02 is two percentage points behind)."""
    record = _level7_record(record)
    out = []
    seen = []
    for r in record["results"]:
        shape = (r["m"], r["n"], r["k"])
        if r["variant"] == "level7" and shape not in seen:
            seen.append(shape)
    for shape in seen:
        rows = [r for r in record["results"] if (r["m"], r["n"], r["k"]) == shape]
        by_variant = {r["variant"]: r for r in rows if r["variant"] in ("cublas", "level6")}
        if not all(v in by_variant and _timed(by_variant[v]) for v in ("cublas", "level6")):
            raise ValueError(f"record must time cuBLAS and level 6 at every shape where level 7 "
                             f"was timed; {shape} lacks one")
        sweep = level7_sweep(record, *shape)
        best = sweep[0]
        level6 = by_variant["level6"]["vs_cublas"]
        out.append({"m": shape[0], "n": shape[1], "k": shape[2],
                    "cublas_tflops": by_variant["cublas"]["tflops"], "level6": level6,
                    "level7": best["vs_cublas"], "best_label": best["label"],
                    "best_config": best["config"], "candidates": len(sweep),
                    "gap": best["vs_cublas"] - level6})
    return out


def level7_unroll_probe(record: dict) -> list[dict]:
    """The fastest candidate's kernel with its dot loop written out 1, 2 or 4
    steps per pass, by unroll: unroll, label, tflops, vs_cublas,
    registers_per_thread and warps_per_sm (the candidate's shared memory, from
    the validation). Failed variants are left out; ValueError if the record
    has no probe (a --quick run)."""
    record = _level7_record(record)
    rows = [r for r in record.get("unroll_probe") or [] if _timed(r)]
    if not rows:
        raise ValueError("record must have an unroll_probe (a full run of "
                         "benchmarks/sgemm_level7.py records one)")
    out = []
    for r in sorted(rows, key=lambda r: r["unroll"]):
        shared = _resources(record, r["config"])["shared_bytes_per_block"]
        registers = r.get("registers_per_thread")
        warps = (occupancy(registers, shared, r["config"]["threads"])["warps_per_sm"]
                 if registers is not None else None)
        out.append({"unroll": r["unroll"], "label": warp_config_label(r["config"]),
                    "tflops": r["tflops"], "vs_cublas": r["vs_cublas"],
                    "registers_per_thread": registers, "warps_per_sm": warps})
    return out


# -----------------------------------------------------------------------------
# Counting instructions: an Nsight Compute summary of level 6 and cuBLAS
# (benchmarks/ncu_summary.py), and the dot-loop variants it led to
# (benchmarks/sgemm_unroll.py)

# At the fp32 peak every issue slot of every warp scheduler issues an FFMA:
# one multiply-add on each of a warp's 32 lanes, 2 FLOP each.
FLOP_PER_FFMA_INSTRUCTION = 2 * 32


def load_ncu_results(path=None) -> dict:
    """The newest Nsight Compute summary of SGEMM kernels in `path` (a folder
    or a file; default benchmarks/results): ``sgemm_ncu-<gpu>-<date>.json``
    (see results.load_ncu_summary)."""
    return results.load_ncu_summary("sgemm_ncu", path)


def _ncu_record(record) -> dict:
    if not (isinstance(record, dict) and record.get("benchmark") == "ncu_summary"
            and isinstance(record.get("profiles"), dict) and record["profiles"]):
        raise ValueError("record must be an Nsight Compute summary (load_ncu_results reads one)")
    return record


def ncu_profiles(record: dict, peak_flops_per_s=None) -> list[dict]:
    """One row per profiled kernel, in the file's order: label, kernel,
    duration_s, warp_instructions (executed), ffma_instructions,
    other_instructions, ffma_share, other_per_ffma (instructions that are not
    FFMA, per FFMA), issue_busy (the share of issue slots that issued an
    instruction), eligible (the share of cycles with a warp ready to issue),
    registers_per_thread, block_size, warps_per_sm (achieved), ffma_flop_per_s
    (2 FLOP on 32 lanes per FFMA over the duration) and modelled_flop_per_s:
    the peak (default hpc.GPUS["H100"]'s fp32 rate) times the share of issue
    slots that held an FFMA, ffma_share * issue_busy."""
    record = _ncu_record(record)
    if peak_flops_per_s is None:
        from gpucourse import hpc

        peak_flops_per_s = hpc.GPUS["H100"].fp32_flops_per_s
    if isinstance(peak_flops_per_s, bool) or not isinstance(peak_flops_per_s, (int, float)) \
            or not peak_flops_per_s > 0:
        raise ValueError(f"peak_flops_per_s must be a positive number, got {peak_flops_per_s!r}")
    out = []
    for label, p in record["profiles"].items():
        total = p["executed_warp_instructions"]
        share = p["instruction_mix"].get("FFMA", 0.0)
        ffma = round(total * share)
        if not ffma:
            raise ValueError(f"profile {label!r} executed no FFMA: not an SGEMM kernel")
        issue_busy = p["issue_slots_busy_percent"] / 100
        duration_s = p["duration_ms"] / 1e3
        out.append({"label": label, "kernel": p["kernel"], "duration_s": duration_s,
                    "warp_instructions": total, "ffma_instructions": ffma,
                    "other_instructions": total - ffma, "ffma_share": share,
                    "other_per_ffma": (total - ffma) / ffma, "issue_busy": issue_busy,
                    "eligible": p["one_or_more_eligible_percent"] / 100,
                    "registers_per_thread": p["registers_per_thread"],
                    "block_size": p["block_size"], "warps_per_sm": p["warps_per_sm"],
                    "ffma_flop_per_s": FLOP_PER_FFMA_INSTRUCTION * ffma / duration_s,
                    "modelled_flop_per_s": peak_flops_per_s * share * issue_busy})
    return out


def ncu_gap(record: dict, ours: str, reference: str = "cublas") -> dict:
    """How the duration of profile `ours` over that of `reference` splits into
    two factors: instruction_ratio (our executed warp instructions over
    theirs) and issue_ratio (their share of busy issue slots over ours);
    time_ratio is the measured ratio of durations and modelled_ratio the
    product of the two factors, which equals it when both kernels run at
    the same clock."""
    rows = {r["label"]: r for r in ncu_profiles(record)}
    for name, value in (("ours", ours), ("reference", reference)):
        if value not in rows:
            raise ValueError(f"{name} must be one of the profiles {sorted(rows)}, got {value!r}")
    a, b = rows[ours], rows[reference]
    instruction_ratio = a["warp_instructions"] / b["warp_instructions"]
    issue_ratio = b["issue_busy"] / a["issue_busy"]
    return {"time_ratio": a["duration_s"] / b["duration_s"],
            "instruction_ratio": instruction_ratio, "issue_ratio": issue_ratio,
            "modelled_ratio": instruction_ratio * issue_ratio}


def load_ragged_ncu_results(path=None) -> dict:
    """The newest Nsight Compute summary of matmul at the shapes no plan brings
    to its target (``sgemm_ragged_ncu-<gpu>-<date>.json``, the
    ``sgemm_ncu`` part of benchmarks/half_precision_gpu.sh): profiles
    "ragged" (auto at 1537 x 1023 x 771), "aligned" (auto's plan for it at
    1536 x 1024 x 768) and "k1000" (auto at 1000^3)."""
    return results.load_ncu_summary("sgemm_ragged_ncu", path)


def ragged_profile(record: dict, sms: int) -> dict:
    """What the ragged shapes' profile says, as numbers for the chapter, from
    ``load_ragged_ncu_results`` on a GPU of `sms` multiprocessors: blocks
    (the ragged launch's), idle_sms (SMs left without a block in its one
    wave, 0 past one wave), warps_per_sm (achieved, whole), long_wait (the
    share of warp samples waiting on global memory, long scoreboard),
    issue_busy, extra_instructions (the
    ragged launch's executed instructions per block over the aligned one's,
    minus 1), extra_time (its duration over the aligned one's, minus 1),
    shared_wait_1000 (at 1000^3, the share of samples waiting on shared
    memory, short scoreboard), first_wait_1000 (the stall reason with the
    most samples there, issuing and ready-but-not-picked left out: those are
    not waits), lds_1000, lds_aligned (LDS's share of the executed
    instructions at 1000^3 and in the aligned launch) and sms."""
    record = _ncu_record(record)
    missing = [p for p in ("ragged", "aligned", "k1000") if p not in record["profiles"]]
    if missing:
        raise ValueError(f"record must profile ragged, aligned and k1000 "
                         f"(load_ragged_ncu_results reads one); it lacks {missing}")
    if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
        raise ValueError(f"sms must be a positive whole number, got {sms!r}")
    ragged, aligned, k1000 = (record["profiles"][p] for p in ("ragged", "aligned", "k1000"))

    def per_block(p):
        return p["executed_warp_instructions"] / p["grid_size"]

    blocks = ragged["grid_size"]
    waits_1000 = {reason: share for reason, share in k1000["stall_reasons"].items()
                  if reason not in ("selected", "not_selected")}
    return {"blocks": blocks, "sms": sms, "idle_sms": max(0, sms - blocks),
            "warps_per_sm": round(ragged["warps_per_sm"]),
            "long_wait": ragged["stall_reasons"].get("long_sb", 0.0),
            "issue_busy": ragged["issue_slots_busy_percent"] / 100,
            "extra_instructions": per_block(ragged) / per_block(aligned) - 1,
            "extra_time": ragged["duration_ms"] / aligned["duration_ms"] - 1,
            "shared_wait_1000": k1000["stall_reasons"].get("short_sb", 0.0),
            "first_wait_1000": max(waits_1000, key=waits_1000.get),
            "lds_1000": k1000["instruction_mix"].get("LDS", 0.0),
            "lds_aligned": aligned["instruction_mix"].get("LDS", 0.0)}


def load_ring_ncu_results(path=None, warm: bool = False) -> dict:
    """The newest Nsight Compute summary of the cp.async ring against cuBLAS at
    1000^3 (``sgemm_ring_ncu-<gpu>-<date>.json``, caches flushed before the
    kernel; with `warm`, ``sgemm_ring_warm_ncu``, caches left warm as in a
    benchmark's back-to-back launches): profiles "ring1000" and
    "cublas1000"."""
    return results.load_ncu_summary("sgemm_ring_warm_ncu" if warm else "sgemm_ring_ncu", path)


def ring_profile(cold: dict, warm: dict) -> dict:
    """What the two ring profiles say, for the chapter: durations in us of
    ours and cuBLAS's, cold and warm ("ring_cold", "cublas_cold", "ring_warm",
    "cublas_warm"); warm, each one's issue_busy (a share), its long-wait share
    (global memory, long scoreboard) and its three other largest waits of the
    ring's ("wait", "dispatch", "short_sb" as keys ring_<reason> and
    cublas_<reason>), and the executed warp instructions in millions."""
    out = {}
    for label, record in (("cold", cold), ("warm", warm)):
        record = _ncu_record(record)
        missing = [p for p in ("ring1000", "cublas1000") if p not in record["profiles"]]
        if missing:
            raise ValueError(f"record must profile ring1000 and cublas1000 "
                             f"(load_ring_ncu_results reads one); it lacks {missing}")
        for who in ("ring", "cublas"):
            profile = record["profiles"][f"{who}1000"]
            out[f"{who}_{label}"] = profile["duration_ms"] * 1e3
            if label == "warm":
                stalls = profile["stall_reasons"]
                out[f"{who}_issue"] = profile["issue_slots_busy_percent"] / 100
                out[f"{who}_instructions"] = profile["executed_warp_instructions"] / 1e6
                for reason in ("long_sb", "wait", "dispatch", "short_sb"):
                    out[f"{who}_{reason}"] = stalls.get(reason, 0.0)
    return out


def load_pipelined_results(path=None) -> dict:
    """The newest sgemm_pipelined run (benchmarks/sgemm_pipelined.py): the
    cp.async rings with each way of finding the copies' addresses and each
    order of the FMAs, beside cuBLAS."""
    return results.load_results("sgemm_pipelined", path)


def ring_knob_times(record: dict, tiles: str = "pipe_64x128") -> dict:
    """What the ring's two build knobs did in an sgemm_pipelined run, for the
    chapter: {"<m>_<knobs>": microseconds} of the `tiles` ring, K whole, at
    1000^3 and 3001 x 2999 x 1009, knobs "once" (addresses worked out before
    the walk, FMAs row by row), "each" (each copy's address every step) and
    "each_serpentine" (and odd rows of FMAs right to left)."""
    if not (isinstance(record, dict) and isinstance(record.get("results"), list)):
        raise ValueError(f"record must be an sgemm_pipelined record (a dict with a list of "
                         f"results; load_pipelined_results reads one), got {type(record).__name__}")
    rows = {(r["m"], r["n"], r["k"], r["variant"]): r for r in record["results"] if "ms" in r}
    out = {}
    for m, n, k in ((1000, 1000, 1000), (3001, 2999, 1009)):
        for knobs, suffix in (("once", ""), ("each", "_each"),
                              ("each_serpentine", "_each_serpentine")):
            row = rows.get((m, n, k, tiles + suffix))
            if row is None:
                raise ValueError(f"record lacks {tiles + suffix} at {m} x {n} x {k}")
            out[f"{m}_{knobs}"] = row["ms"] * 1e3
    return out


def grid_plan_changes(new: dict, old: dict) -> dict:
    """What changed between two sgemm_grid runs' auto rows where the newer
    picked a cp.async ring (config "stages") or stream-K (splits "stream"):
    {"ring": [...], "stream": [...]}, each row {"shape": "m x n x k",
    "before", "after" (shares of cuBLAS)}, in the newer run's order; shapes
    the older run lacks are left out."""
    for name, record in (("new", new), ("old", old)):
        if not (isinstance(record, dict) and isinstance(record.get("results"), list)):
            raise ValueError(f"{name} must be an sgemm_grid record (a dict with a list of "
                             f"results; load_grid_results reads one), got {type(record).__name__}")
    before = {(r["m"], r["n"], r["k"]): r["vs_cublas"] for r in old["results"]
              if r["variant"] == "auto" and "vs_cublas" in r}
    found = {"ring": [], "stream": []}
    for row in new["results"]:
        shape = (row["m"], row["n"], row["k"])
        if row["variant"] != "auto" or shape not in before or "vs_cublas" not in row:
            continue
        kind = "stream" if row["config"].get("splits") == "stream" else \
            "ring" if row["config"].get("stages") else None
        if kind:
            found[kind].append({"shape": " x ".join(map(str, shape)), "before": before[shape],
                                "after": row["vs_cublas"]})
    return found


def load_unroll_results(path=None) -> dict:
    """The newest sgemm_unroll results file in `path` (a folder or a file;
    default benchmarks/results), written by benchmarks/sgemm_unroll.py:
    levels 6 and 7 with their dot loop written out some steps per pass or
    whole, with or without a register cap, timed in turns with cuBLAS."""
    return results.load_results("sgemm_unroll", path)


def load_interior_results(path=None) -> dict:
    """The newest sgemm_interior results file in `path` (a folder or a file;
    default benchmarks/results), written by benchmarks/sgemm_unroll.py
    --interior: the fastest tiles of levels 6 and 7 built with and without
    edge checks on their loads, timed in turns with cuBLAS."""
    return results.load_results("sgemm_interior", path)


def interior_gain(record: dict) -> list[dict]:
    """Per tile configuration and shape of an sgemm_interior run, in the file's
    order: level, tiles (a short label), m, n, k, checked and interior (each
    a share of cuBLAS in the same turns) and gain (interior - checked)."""
    if not (isinstance(record, dict) and record.get("benchmark") == "sgemm_interior"
            and isinstance(record.get("results"), list)):
        raise ValueError("record must be an sgemm_interior results record "
                         "(load_interior_results reads one)")
    found = {}
    for r in record["results"]:
        if r["variant"] == "cublas":
            continue
        key = (r["level"], json.dumps(r["config"], sort_keys=True), r["m"], r["n"], r["k"])
        row = found.setdefault(key, {"level": r["level"],
                                     "tiles": _tiles_label(r["level"], r["config"]),
                                     "m": r["m"], "n": r["n"], "k": r["k"]})
        row["interior" if r["interior"] else "checked"] = r["vs_cublas"]
    rows = [r for r in found.values() if "checked" in r and "interior" in r]
    if not rows:
        raise ValueError("record must hold each configuration timed with and without edge "
                         "checks; found no such pair")
    for r in rows:
        r["gain"] = r["interior"] - r["checked"]
    return rows


def _tiles_label(level: str, config: dict) -> str:
    if level == "7":
        return warp_config_label(config)
    return f"{config['bm']}x{config['bn']}x{config['bk']} t{config['tm']}x{config['tn']}"


def _kernel_shared_bytes(level: str, config: dict) -> int:
    """Shared memory a block of the level-6 or level-7 kernel declares: two
    copies of the tiles where they fit in the static limit (sgemm's rule)."""
    from gpucourse.kernels import sgemm

    if level == "7":
        return sgemm.WarpTileConfig(**config).shared_bytes
    one = sgemm.TileConfig(**config).shared_bytes
    double = sgemm.DOUBLE_BUFFER and 2 * one <= sgemm.STATIC_SHARED_LIMIT_BYTES
    return 2 * one if double else one


def _threads(level: str, config: dict) -> int:
    if level == "7":
        return config["threads"]
    return (config["bm"] // config["tm"]) * (config["bn"] // config["tn"])


def unroll_variants(record: dict, m=4096, n=None, k=None) -> list[dict]:
    """The variants an sgemm_unroll run timed at one shape (default 4096^3),
    in the file's order: variant, level, config, tiles (a short label),
    outputs (per thread), unroll (steps of the dot loop per pass), whole_tile
    (unroll == bk: no loop left), max_registers (the cap, None for none),
    registers_per_thread, local_bytes_per_thread (spills, from the
    validation), threads, warps_per_sm (`occupancy`), ms, tflops and
    vs_cublas. Untimed or failed rows are left out."""
    if not (isinstance(record, dict) and record.get("benchmark") == "sgemm_unroll"
            and isinstance(record.get("results"), list)):
        raise ValueError("record must be an sgemm_unroll results record "
                         "(load_unroll_results reads one)")
    n = m if n is None else n
    k = m if k is None else k
    spills = {v["variant"]: v.get("local_bytes_per_thread") for v in record.get("validation", [])}
    out = []
    for r in record["results"]:
        if r["variant"] == "cublas" or (r["m"], r["n"], r["k"]) != (m, n, k) or not _timed(r):
            continue
        level, config = r["level"], r["config"]
        threads = _threads(level, config)
        outputs = config["tm"] * config["tn"] * (
            _wm_iter(config) * config["wn_iter"] if level == "7" else 1)
        warps = occupancy(r["registers_per_thread"], _kernel_shared_bytes(level, config),
                          threads)["warps_per_sm"]
        out.append({"variant": r["variant"], "level": level, "config": config,
                    "tiles": _tiles_label(level, config), "outputs": outputs,
                    "unroll": r["unroll"], "whole_tile": r["unroll"] == config["bk"],
                    "max_registers": r["max_registers"],
                    "registers_per_thread": r["registers_per_thread"],
                    "local_bytes_per_thread": spills.get(r["variant"]), "threads": threads,
                    "warps_per_sm": warps, "ms": r["ms"], "tflops": r["tflops"],
                    "vs_cublas": r["vs_cublas"]})
    if not out:
        measured = sorted({(r["m"], r["n"], r["k"]) for r in record["results"]})
        raise ValueError(f"m, n, k must be a shape the run timed, one of {measured}; "
                         f"got {(m, n, k)}")
    return out


def unroll_variant(rows: list[dict], config, unroll, max_registers=None, level="6") -> dict:
    """The one row of `unroll_variants` with these tiles (a dict of the
    configuration's fields, or a TileConfig/WarpTileConfig), steps per pass
    (a number, or "tile" for all bk of them) and register cap (None: none).
    ValueError if there is not exactly one."""
    if not isinstance(config, dict):
        # A ring's stages are a field only where there is one: rows of runs before
        # TileConfig had them hold the five tile sizes.
        config = {f: getattr(config, f) for f in getattr(config, "__dataclass_fields__", {})
                  if f != "stages" or getattr(config, f)}
    if not config or "bk" not in config:
        raise ValueError(f"config must be a tile configuration or a dict of its fields, "
                         f"got {config!r}")
    steps = config["bk"] if unroll == "tile" else unroll
    found = [r for r in rows if r["level"] == str(level) and r["config"] == config
             and r["unroll"] == steps and r["max_registers"] == max_registers]
    if len(found) != 1:
        raise ValueError(f"rows must hold exactly one level-{level} variant {config} with "
                         f"unroll {unroll!r} and max_registers {max_registers!r}; "
                         f"found {len(found)}")
    return found[0]


# -----------------------------------------------------------------------------
# Every shape: matmul as a user calls it (benchmarks/sgemm_shapes.py)


def load_shapes_results(path=None, gpu: str = "h100") -> dict:
    """The newest sgemm_shapes results file of one GPU (its slug in the file
    name, as results.gpu_slug gives it: "h100") in `path` (a folder or a
    file; default benchmarks/results): matmul called from CUDA torch tensors
    (host work included) at level 6 and "auto" beside cuBLAS, from a
    1 x 1 x 1 product up, and the tile search behind "auto"."""
    if not isinstance(gpu, str) or not gpu.isalnum():
        raise ValueError(f"gpu must be a GPU's slug such as 'h100', got {gpu!r}")
    path = results.results_dir() if path is None else Path(path)
    if path.is_dir():
        files = [p for p in results.find_results("sgemm_shapes", path)
                 if p.stem.split("-")[1] == gpu.lower()]
        if not files:
            raise ValueError(f"path must be a folder holding sgemm_shapes-{gpu.lower()}-<date>.json "
                             f"or such a file, found none in {path}")
        path = files[-1]
    return results.load_results("sgemm_shapes", path)


def _shapes_record(record) -> dict:
    return _results_record(record, "sgemm_shapes", "load_shapes_results")


def shapes_table(record: dict) -> list[dict]:
    """One row per shape the run timed, in its order: m, n, k, and for each of
    cublas, level6 and auto the wall-clock time per call (`<variant>_s`);
    the shares of cuBLAS of level 6 and auto (`level6`, `auto`: cuBLAS's
    time over theirs), level 6's and auto's tiles (`level6_config`,
    `auto_config`) and auto's slices of K (`splits`); where the run also
    called auto on Numba device arrays, `auto_numba_s` and `auto_numba` (None
    where it did not). ValueError if a shape lacks one of the three."""
    record = _shapes_record(record)
    seen = []
    for r in record["results"]:
        if (r["m"], r["n"], r["k"]) not in seen:
            seen.append((r["m"], r["n"], r["k"]))
    out = []
    for shape in seen:
        rows = {r["variant"]: r for r in record["results"]
                if (r["m"], r["n"], r["k"]) == shape and not r.get("failed") and r.get("ms")
                and r.get("vs_cublas") is not None}
        if not all(v in rows for v in ("cublas", "level6", "auto")):
            raise ValueError(f"record must time cublas, level6 and auto at every shape; "
                             f"{shape} lacks one")
        auto = dict(rows["auto"]["config"])
        splits = auto.pop("splits", 1)
        out.append({"m": shape[0], "n": shape[1], "k": shape[2],
                    **{f"{v}_s": rows[v]["ms"] / 1e3 for v in ("cublas", "level6", "auto")},
                    "level6": rows["level6"]["vs_cublas"], "auto": rows["auto"]["vs_cublas"],
                    "level6_config": rows["level6"]["config"], "auto_config": auto,
                    "splits": splits,
                    "auto_numba_s": rows["auto_numba"]["ms"] / 1e3 if "auto_numba" in rows else None,
                    "auto_numba": rows["auto_numba"]["vs_cublas"] if "auto_numba" in rows else None})
    return out


def call_cost_s(record: dict) -> dict:
    """Seconds per call of the smallest product a shapes run timed, 1 x 1 x 1,
    where the arithmetic is nothing and the call is all: {"cublas": ...,
    "level6": ..., "auto": ...}, and "auto_numba" (auto on Numba device
    arrays) where the run timed it. ValueError if the run has no such row."""
    table = shapes_table(record)
    row = next((r for r in table if (r["m"], r["n"], r["k"]) == (1, 1, 1)), None)
    if row is None:
        raise ValueError("record must time a 1 x 1 x 1 product (the cost of one call)")
    return {v: row[f"{v}_s"] for v in ("cublas", "level6", "auto", "auto_numba")
            if row[f"{v}_s"] is not None}


def warp_tile_patches(config=None, warp: int = 0, lane: int = 0) -> list[tuple[int, int]]:
    """The top-left corners (row, column) in the block's tile of C of the tm x tn
    patches that one lane of one warp computes at level 7, in the order the
    kernel walks them (wm_iter passes down, wn_iter across): the mapping of
    `sgemm`'s warp-tiled kernel, written out."""
    from gpucourse.kernels import sgemm

    config = sgemm.check_warp_config(config or sgemm.WARP_TILE_DEFAULT)
    if not 0 <= warp < config.warps or not 0 <= lane < sgemm.WARP_SIZE:
        raise ValueError(f"warp must be in [0, {config.warps}) and lane in "
                         f"[0, {sgemm.WARP_SIZE}), got warp {warp!r}, lane {lane!r}")
    sub_m, sub_n = config.wm // config.wm_iter, config.wn // config.wn_iter
    across = sub_n // config.tn  # lanes across one pass of the warp
    warp_row, warp_col = divmod(warp, config.bn // config.wn)
    lane_row, lane_col = divmod(lane, across)
    return [(warp_row * config.wm + m * sub_m + lane_row * config.tm,
             warp_col * config.wn + n * sub_n + lane_col * config.tn)
            for m in range(config.wm_iter) for n in range(config.wn_iter)]


def plot_warp_tiling(config=None, ax=None):
    """Level 7's block tile of C: its warps' tiles (outlined), warp 0's passes
    (the pieces its 32 lanes cover at once, shaded in turn) and lane 0's
    patches, one in each pass (dark)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from gpucourse.kernels import sgemm

    config = sgemm.check_warp_config(config or sgemm.WARP_TILE_DEFAULT)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5.5 * config.bm / config.bn))
    ax.set_xlim(0, config.bn)
    ax.set_ylim(config.bm, 0)
    ax.set_aspect("equal")
    ax.set_xticks([0, config.wn, config.bn])
    ax.set_yticks([0, config.wm, config.bm])
    for row in range(0, config.bm, config.wm):
        for col in range(0, config.bn, config.wn):
            ax.add_patch(Rectangle((col, row), config.wn, config.wm, fill=False,
                                   ec="tab:blue", lw=2))
    sub_m, sub_n = config.wm // config.wm_iter, config.wn // config.wn_iter
    for i in range(config.wm_iter):
        for j in range(config.wn_iter):
            ax.add_patch(Rectangle((j * sub_n, i * sub_m), sub_n, sub_m, color="tab:orange",
                                   alpha=0.12 + 0.12 * ((i + j) % 2)))
    for row, col in warp_tile_patches(config):
        ax.add_patch(Rectangle((col, row), config.tn, config.tm, color="tab:red", alpha=0.9))
    ax.set_title(f"level 7: a {config.bm} x {config.bn} block tile, {config.warps} warps of "
                 f"{config.wm} x {config.wn};\nwarp 0 in {config.wm_iter * config.wn_iter} "
                 f"passes, lane 0's {config.tm} x {config.tn} patch in each", fontsize=9)
    return ax


def plot_level7(record: dict, ax=None):
    """Level 7's run in two panels, each share written on its bar: left, every
    candidate's share of cuBLAS at 4096^3, fastest first, against level 6 in
    the same turns (dashed); right, level 6 and the best level-7 candidate at
    each shape the run measured. The dotted line is `LEVEL7_TARGET_SHARE`."""
    import matplotlib.pyplot as plt
    import numpy as np

    sweep = level7_sweep(record, 4096)
    shapes_ = level7_against_level6(record)
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    left, right = ax
    level6 = next(r for r in shapes_ if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096))["level6"]
    target = dict(color="black", ls=":", lw=1, label=f"target, {LEVEL7_TARGET_SHARE:.0%}")
    y = np.arange(len(sweep))
    bars = left.barh(y, [r["vs_cublas"] * 100 for r in sweep], color="tab:purple")
    for bar, r in zip(bars, sweep):
        left.text(bar.get_width() - 1, bar.get_y() + bar.get_height() / 2, f"{r['vs_cublas']:.1%}",
                  ha="right", va="center", fontsize=7, color="white")
    left.set_yticks(y, [r["label"] for r in sweep], fontsize=7)
    left.invert_yaxis()
    left.axvline(level6 * 100, color="tab:blue", ls="--", label=f"level 6, {level6:.1%}")
    left.axvline(LEVEL7_TARGET_SHARE * 100, **target)
    left.set_xlim(0, 100)
    left.set_xlabel("share of cuBLAS (%)")
    left.set_title("level 7's candidates at 4096x4096x4096", fontsize=10)
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)
    x = np.arange(len(shapes_))
    for offset, key, name, color in ((-0.2, "level6", "level 6", "tab:blue"),
                                     (0.2, "level7", "level 7, best", "tab:purple")):
        bars = right.bar(x + offset, [r[key] * 100 for r in shapes_], 0.4, label=name, color=color)
        for bar, r in zip(bars, shapes_):
            right.text(bar.get_x() + bar.get_width() / 2, bar.get_height() - 2, f"{r[key]:.1%}",
                       ha="center", va="top", fontsize=7, rotation=90, color="white")
    right.axhline(LEVEL7_TARGET_SHARE * 100, **target)
    right.set_xticks(x, [f"{r['m']}x{r['n']}\nx{r['k']}" for r in shapes_], fontsize=8)
    right.set_ylim(0, 100)
    right.set_ylabel("share of cuBLAS (%)")
    right.set_title("level 6 and level 7 in the same turns", fontsize=10)
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=8)
    left.figure.suptitle(f"Level 7 (warp tiling) on {record['gpu']}, {record['date']}", fontsize=10)
    return ax


def plot_unroll(record: dict, m=4096, ax=None):
    """Every variant of an sgemm_unroll run at m^3 as a share of cuBLAS,
    fastest first: bars in one colour where the whole tile is written out,
    another where the loop runs some steps per pass; each bar says its
    registers per thread, warps per SM and any spill."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted(unroll_variants(record, m), key=lambda r: -r["vs_cublas"])
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.38 * len(rows) + 1.8))
    y = np.arange(len(rows))
    colors = ["tab:green" if r["whole_tile"] else "tab:gray" for r in rows]
    bars = ax.barh(y, [r["vs_cublas"] * 100 for r in rows], color=colors)
    for bar, r in zip(bars, rows):
        note = f"{r['vs_cublas']:.1%}  {r['registers_per_thread']} regs, {r['warps_per_sm']} warps/SM"
        if r["local_bytes_per_thread"]:
            note += f", spills {r['local_bytes_per_thread']} B"
        ax.text(bar.get_width() + 0.5, bar.get_y() + bar.get_height() / 2, note,
                va="center", fontsize=7)
    labels = []
    for r in rows:
        steps = "whole tile" if r["whole_tile"] else f"{r['unroll']} steps/pass"
        cap = f", cap {r['max_registers']}" if r["max_registers"] else ""
        labels.append(f"L{r['level']} {r['tiles']}, {steps}{cap}")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 130)
    ax.set_xticks(range(0, 101, 20))
    ax.set_xlabel("share of cuBLAS (%)")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="tab:green", label="whole tile written out"),
                       Patch(color="tab:gray", label="a loop of steps per pass")],
              loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=7)
    ax.set_title(f"The dot loop and the register cap, {m}x{m}x{m}, "
                 f"{record['gpu']}, {record['date']}", fontsize=9)
    return ax


def plot_shapes(record: dict, ax=None):
    """Level 6 (its one tuned tile) and "auto" (tiles and split-K chosen per
    shape) as shares of cuBLAS at every shape of a shapes run but the
    1 x 1 x 1 call, each share written on its bar and auto's slices of K
    under its bar where it splits."""
    import matplotlib.pyplot as plt
    import numpy as np

    table = [r for r in shapes_table(record) if (r["m"], r["n"], r["k"]) != (1, 1, 1)]
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.6))
    x = np.arange(len(table))
    for offset, key, name, color in ((-0.2, "level6", "level 6 (one tile)", "tab:blue"),
                                     (0.2, "auto", "auto (per shape)", "tab:orange")):
        bars = ax.bar(x + offset, [r[key] * 100 for r in table], 0.4, label=name, color=color)
        for bar, r in zip(bars, table):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() + 1, f"{r[key]:.0%}",
                    ha="center", va="bottom", fontsize=7)
    ax.axhline(100, color="tab:red", ls="--", lw=1, label="cuBLAS")
    ax.set_xticks(x, [f"{r['m']}x{r['n']}\nx{r['k']}" + (f"\nsplit-K {r['splits']}"
                                                         if r["splits"] != 1 else "")
                      for r in table], fontsize=7)
    ax.set_ylim(0, 115)
    ax.set_ylabel("share of cuBLAS (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=8)
    ax.set_title(f"matmul from torch, host work included: {record['gpu']}, {record['date']}",
                 fontsize=9)
    return ax
