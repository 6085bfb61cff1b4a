"""How level "auto" chooses its tiles and split-K: a cost model of blocks in
waves on the GPU's multiprocessors, with a few constants a sweep calibrates.

Why a model and not a table of measured shapes: tiles measured best at
1024^3 say nothing about 1000 x 1000 x 1000 or 384 x 512 x 32768, and a
product's shape decides most of what matters by arithmetic a student can
follow. For an (m, n, k) product, a tile configuration (level 6's kernel,
a ``TileConfig``) and `splits` slices of K, ``plan_cost`` works out:

* **tiles and blocks.** C is cut into ceil(m/bm) x ceil(n/bn) tiles; each of
  the slices of K gets its own blocks, so blocks = tiles x slices.
* **padding waste.** Edge tiles hang over C and do a whole tile's arithmetic
  anyway: the useful share is m*n / (tiles * bm*bn) (and K rounded up to bk).
* **blocks per SM.** How many of these blocks one multiprocessor holds at
  once: the fewest its registers, shared memory, thread slots and block slots
  allow (``resident_blocks``; level 6's register cap lets two blocks of 256
  threads share an SM where their accumulators fit).
* **waves and the tail.** With S SMs each holding r blocks, a wave is S*r
  blocks; waves = blocks / (S*r). The busiest SM gets ceil(blocks / S)
  blocks, and the product ends when it does: tail efficiency = blocks / (S *
  ceil(blocks / S)) is the share of the SMs' time that does work. 128 tiles on
  132 SMs is one wave at 97%; 140 tiles is two rounds on 8 SMs while 124 wait.
* **the rate of a block.** Measured where the GPU's entry has rates
  (``sgemm_grid.py --rates``: each tile of the menu on products of exactly q
  blocks an SM, q = 1 to 8, at several depths of K): the busiest SM's q
  blocks take their fixed time plus the measured time per column of K at q,
  times the columns (beyond 8, in groups of 8). The fixed time is measured
  too where the run timed three depths or more (the intercept of a line
  through the timings), else q block_us. The measurement sees what a formula
  guesses: how many blocks really fit an SM (a tile that holds two where
  the register estimate says three runs q = 3 as two rounds), and how well
  a few warps hide latency. Below K = 512, where the lines begin, a plan of
  one round is priced from timings at short depths instead
  (``sgemm_rates_short.py``, ``measured_sm_us``). Elsewhere, a formula: an
  SM's arithmetic rate with w resident warps is peak * efficiency * (1 -
  exp(-w / warps_to_hide)): few warps leave its pipelines waiting for memory.
  The efficiency of a tile grows with the work a thread does per value it
  loads from shared memory (tm*tn outputs for tm + tn loads) and a block per
  value it loads from global memory: eff = eff_max / (1 + thread_loads *
  (1/tm + 1/tn) + block_loads * (1/bm + 1/bn)).
* **fixed costs.** Every block pays block_us to start and store (with the
  formula, every round of resident blocks); tiles that
  hang over an edge test every load (edge_share more time); rows whose
  length is not a multiple of 4 (n or k) cannot use 128-bit loads, and
  matmul then moves each tile four times as many loads of one float:
  scalar_share more time (``scalar_load_share``; the rates time only the
  128-bit kernel, so without it every ragged product is priced as aligned
  one); a call costs
  call_us of Python and launch; split-K adds a launch that zeroes C and
  m*n*slices atomic additions (atomics_per_us), and runs another kernel
  (split_k.py's, edge-checked, its slice from blockIdx.z) than the one the
  rates time: where the entry measured it (``split_kernel_share``,
  ``sgemm_grid.py --rates-variants``), each tile's split-K plans take
  1 + its share of the busiest SM's time (a share below 0 only past one
  round of the K-whole kernel, where the entry names its registers). The
  zeroing costs the entry's measured line where it has one (``zeroing_us``).
  Stream-K (splits "stream", ``split_k``) runs one wave of workers, each an
  equal run of all the tiles' steps of K: the busiest SM's resident workers
  at the measured rate, times
  1 + the entry's "stream_kernel" share (the tile's own where the entry has
  one, ``stream_kernel_share``), plus zeroing C and the atomic adds of every
  piece; priced only on a GPU whose entry has that share.

The product takes max(what the host needs to issue the call, what the GPU
needs to run it). ``choose_plan`` prices every configuration of the GPU's menu
(the tiles that won somewhere in the committed sweeps, in the model's JSON)
with every number of slices in SPLITS, and those that fill one or two waves
exactly (``wave_filling_splits``), and returns the cheapest with its
reasoning numbers, which chapter 8 prints. ``shape_model_fit`` fits the
constants, shares and rates to measured times (benchmarks/sgemm_grid.py
--calibrate and its other fits, on a GPU); they live in
``sgemm_shape_model.json`` beside this module, each GPU's with where they
came from.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

from gpucourse.kernels.sgemm.building_blocks import REGISTER_ROOM, REGISTERS_PER_SM
from gpucourse.kernels.sgemm.padding import (PAD_CALL_US, PAD_COPY_GBPS,  # noqa: F401 (re-exported)
                                             padding_bytes, padding_us, ring_copy_us)
from gpucourse.kernels.sgemm.config import (STATIC_SHARED_LIMIT_BYTES, STREAM, TileConfig,
                                            _shape, _whole, check_config, tile_config_of)

MODEL_PATH = Path(__file__).with_name("sgemm_shape_model.json")
# Slices of K the model may choose (split-K); each slice is a multiple of 16 long.
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
# A slice shorter than this is never worth its atomic additions.
MIN_SLICE = 256
# Split-K's atomic additions make C's last bits vary from call to call. A plan
# with slices was once chosen only when predicted 5% faster than the best with
# K whole; measured (results/sgemm_calibration-h200-2026-11-28.json off the
# grid, sgemm_explore-h200-2026-11-29.json on it), at each of the 5 shapes
# where that margin changed the pick, the plan with slices it turned down was
# the faster, by 3-27% (200 x 3000 x 1000, 2500 x 1999 x 3001, 8192 x 768 x
# 3072, 512^3, 511^3). So the cheapest plan is chosen; among plans priced
# equal, the fewest slices.
SPLIT_MARGIN = 0.0
# Stream-K is priced only where the GPU works this long or longer: its share
# was fitted there (benchmarks/sgemm_model_json.py's stream_shares); at 300 x
# 200 x 400 (19 us predicted) it ran in 23.1 us where K whole ran in 16.3.
STREAM_MIN_US = 50.0
# And only where each worker runs this many steps of K or more. With fewer,
# its pieces' ends (a tile's atomic adds) and starts weigh more than the
# fitted share says, either way: at 13 to 25 steps a worker, plans ran
# between 25% faster and 17% slower than priced (1200 x 900 x 700 on 64 x
# 256 rings: 73.4 us, priced 62.5); at 50 or more, within 6% of the price for
# every tile but 128 x 256 (12%) (results/sgemm_grid-, sgemm_off_grid-h200-2026-11-30.json,
# reruns/sgemm_explore-h200-2026-11-30-rings.json, sgemm_stream-h200-2026-11-29.json).
STREAM_MIN_STEPS = 32
# The shallowest depth of the rates' lines (sgemm_grid.py's RATE_KS): below it a
# line is an extrapolation, and the rates' timings at short depths take over
# where the entry has them (sgemm_rates_short.py; ``measured_sm_us``).
LINE_FROM_K = 512
# The cost model's constants (see the module's docstring), each > 0.
CONSTANTS = ("eff_max", "thread_loads", "block_loads", "warps_to_hide", "block_us", "edge_share",
             "call_us", "split_call_us", "gpu_launch_us", "zero_us", "atomics_per_us")
# What a GPU's entry must say about one multiprocessor (and how many there are).
SM_FIELDS = ("sms", "registers", "threads", "blocks", "shared_bytes",
             "shared_reserved_per_block_bytes", "register_unit", "peak_tflops")


# -----------------------------------------------------------------------------
# Reading the model's data


@lru_cache(maxsize=8)
def _read_model(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def gpu_entry(gpu_name: str, path=None) -> dict:
    """The model's entry for `gpu_name` (its SMs, constants and menu of tiles):
    the GPU's own where the JSON has one, else the default entry (an H100's
    limits and constants, marked "calibrated": None)."""
    if not isinstance(gpu_name, str):
        raise ValueError(f"gpu_name must be a string such as 'NVIDIA H100 80GB HBM3', got {gpu_name!r}")
    data = _read_model(str(MODEL_PATH if path is None else path))
    entry = data["gpus"].get(gpu_name)
    if entry is None:
        entry = {**data["gpus"][data["default"]], "calibrated": None}
    return {"name": gpu_name, **entry}


def menu(entry: dict) -> list[TileConfig]:
    """The tile configurations the model chooses among on a GPU, each checked."""
    return [check_config(TileConfig(*row)) for row in entry["menu"]]


# -----------------------------------------------------------------------------
# What one multiprocessor holds


def resident_blocks(registers_per_thread: int, shared_bytes_per_block: int,
                    threads_per_block: int, sm: dict) -> tuple[int, str]:
    """(blocks of this kind one SM holds at once, the limit that decides it).

    The fewest of four limits: registers (allocated per warp in units of
    sm["register_unit"]), shared memory (plus the system's reservation per
    block), thread slots and block slots.
    """
    for name, value in (("registers_per_thread", registers_per_thread),
                        ("shared_bytes_per_block", shared_bytes_per_block),
                        ("threads_per_block", threads_per_block)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    if not 1 <= threads_per_block <= 1024:
        raise ValueError(f"threads_per_block must be in [1, 1024], got {threads_per_block}")
    warps = math.ceil(threads_per_block / 32)
    unit = sm["register_unit"]
    registers_per_warp = math.ceil(registers_per_thread * 32 / unit) * unit
    limits = {
        "threads": sm["threads"] // (warps * 32),
        "blocks": sm["blocks"],
        "registers": (sm["registers"] // (registers_per_warp * warps) if registers_per_thread
                      else sm["blocks"]),
        "shared memory": (sm["shared_bytes"] // (shared_bytes_per_block
                                                 + sm["shared_reserved_per_block_bytes"])
                          if shared_bytes_per_block else sm["blocks"]),
    }
    limiter = min(limits, key=lambda name: limits[name])
    return limits[limiter], limiter


def kernel_resources(config: TileConfig) -> tuple[int, int]:
    """(registers per thread, shared bytes per block) of level 6's kernel for
    `config`, as the model counts them: the register estimate rounded up to 8,
    held to the cap that lets two blocks share an SM where the accumulators fit
    (building_blocks' `_register_cap`), and two copies of the tiles where they
    fit in 48 KiB (vectorized's DOUBLE_BUFFER). A cp.async ring (stages) is
    uncapped (vectorized's PIPELINE_REGISTERS) and its shared memory is the
    ring's."""
    two_blocks = min(255, REGISTERS_PER_SM // (2 * config.threads)) // 8 * 8
    needed = config.tm * config.tn + config.tm + config.tn
    registers = min(255, -(-config.register_estimate // 8) * 8)
    if config.stages:
        return registers, config.shared_bytes
    if needed + REGISTER_ROOM <= two_blocks:
        registers = min(registers, two_blocks)
    double = 2 * config.shared_bytes <= STATIC_SHARED_LIMIT_BYTES
    return registers, config.shared_bytes * (2 if double else 1)


# -----------------------------------------------------------------------------
# The cost of one plan


def _slices(k: int, splits: int) -> tuple[int, int]:
    """(slices, columns of the longest slice) when K is cut into `splits`, as
    split_k.split_ranges cuts it (multiples of 16, fewer slices for a short K)."""
    chunk = max(16, -(-k // splits // 16) * 16)
    return max(1, -(-k // chunk)), min(k, chunk)


def tail_efficiency(blocks: int, sms: int) -> float:
    """The share of the SMs' time that works when `blocks` equal blocks run on
    `sms` SMs: the busiest SM runs ceil(blocks / sms) of them, the others
    fewer. Raises ValueError unless both are positive whole numbers."""
    blocks, sms = _whole("blocks", blocks), _whole("sms", sms)
    return blocks / (sms * -(-blocks // sms))


def tile_key(config: TileConfig) -> str:
    """How the model's JSON names a tile configuration in its measured rates
    (" s2" and so on after it for a cp.async ring of stages)."""
    ring = f" s{config.stages}" if config.stages else ""
    return f"{config.bm}x{config.bn}x{config.bk} {config.tm}x{config.tn}{ring}"


def measured_sm_us(entry: dict, config: TileConfig, busiest: int, padded_k: int):
    """The busiest SM's microseconds for `busiest` blocks of `config`, each
    padded_k columns of K deep, from the entry's measured rates; None where
    the entry has none for this tile. Beyond the measured counts of blocks,
    in groups of the largest (a group of 8 is whole rounds for tiles that fit
    1, 2, 4 or 8 an SM). The fixed time of q blocks is the measured one where
    the rates hold it ("us_fixed", from timings at three depths or more),
    else q block_us.

    Below LINE_FROM_K columns, where the busiest SM runs one round (as many
    blocks as the rates timed, 8) and the rates hold timings at short depths
    ("us_short", benchmarks/sgemm_model_json.py's save_short_rates: the
    busiest SM's us at q blocks, the launch's taken out, by depth): straight
    lines between those and the line's time at LINE_FROM_K (below the
    shortest depth, the line, at most that depth's time). A count of blocks
    whose short timings were the host's (None) keeps the line, and so do
    rounds after rounds: one round's timing less the launch's fitted time
    misses what each further round costs (benchmarks/NOTES.md, 2026-11-30)."""
    rates = entry.get("rates") or {}
    per_column = rates.get("us_per_column", {}).get(tile_key(config))
    if not per_column:
        return None
    block_us = entry["constants"]["block_us"]
    fixed = rates.get("us_fixed", {}).get(tile_key(config)) or [
        q * block_us for q in range(1, len(per_column) + 1)]
    # The short depths' timings are of one round, launch included: they price
    # a plan of that many blocks an SM, not rounds after rounds.
    short = {int(k): us for k, us in (rates.get("us_short", {}).get(tile_key(config)) or {}).items()
             if busiest <= len(per_column)}

    def q_blocks(q):  # q blocks: on the line, or between the short depths' timings below it
        on_line = fixed[q - 1] + per_column[q - 1] * padded_k
        points = [(k, us[q - 1]) for k, us in sorted(short.items()) if us[q - 1] is not None]
        if not points or padded_k >= LINE_FROM_K:
            return on_line
        if padded_k <= points[0][0]:  # shorter still: the line, never above the shortest
            return min(on_line, points[0][1])
        points.append((LINE_FROM_K, fixed[q - 1] + per_column[q - 1] * LINE_FROM_K))
        i = max(j for j in range(len(points) - 1) if points[j][0] <= padded_k)
        (k0, us0), (k1, us1) = points[i], points[i + 1]
        return us0 + (us1 - us0) * (padded_k - k0) / (k1 - k0)

    most = len(per_column)
    full, rest = divmod(busiest, most)
    return full * q_blocks(most) + (q_blocks(rest) if rest else 0.0)


def rates_from_record(record: dict, entry: dict) -> dict:
    """The measured rates of an sgemm_rates results file (benchmarks/sgemm_grid.py
    --rates) as the model's JSON keeps them: {"us_per_column": {tile: [us a
    column of K with q blocks an SM, q = 1, 2, ...]}}, and, where every count
    was timed at three depths of K or more, "us_fixed": {tile: [the busiest
    SM's fixed us at q blocks]}. With three depths or more, each (tile, q) is
    a straight line through its timings, fitted on relative errors (each
    timing weighs 1/us^2), whose intercept less gpu_launch_us is the fixed
    time (at least 0). With two, the fixed time is the model's (gpu_launch_us
    + q block_us) and the rate the least-squares slope: two depths alone leave
    the fixed time to noise (intercepts from -166 to +525 us on the H200's
    run of 2026-11-28, at K = 4096 and 12288). Raises ValueError unless every
    tile has every q from 1 up, each at two depths or more."""
    c = entry["constants"]
    timings: dict = {}
    for row in record.get("results", []):
        config = tile_config_of(row["config"])
        q, k, us = row["blocks_per_sm"], row["k"], row["ms"] * 1e3
        timings.setdefault(tile_key(config), {}).setdefault(q, []).append((k, us))
    if not timings:
        raise ValueError("the record holds no rates (results of sgemm_grid.py --rates)")
    for key, by_q in timings.items():
        if sorted(by_q) != list(range(1, len(by_q) + 1)) or any(
                len({k for k, _ in rows}) < 2 for rows in by_q.values()):
            raise ValueError(f"{key}: the rates need q = 1, 2, ... blocks an SM, each at two "
                             f"depths of K or more; got {sorted(by_q)}")
    lines = all(len({k for k, _ in rows}) >= 3 for by_q in timings.values()
                for rows in by_q.values())
    rates, fixed = {}, {}
    for key, by_q in timings.items():
        if lines:
            fits = [_weighted_line(by_q[q]) for q in sorted(by_q)]
            rates[key] = [slope for slope, _ in fits]
            fixed[key] = [max(0.0, intercept - c["gpu_launch_us"]) for _, intercept in fits]
        else:
            rates[key] = [
                sum((us - c["gpu_launch_us"] - q * c["block_us"]) * k for k, us in by_q[q])
                / sum(k * k for k, _ in by_q[q]) for q in sorted(by_q)]
    return {"us_per_column": rates, **({"us_fixed": fixed} if lines else {})}


def _weighted_line(points) -> tuple[float, float]:
    """(slope, intercept) of us = intercept + slope k through (k, us) points,
    least squares on relative errors (weights 1/us^2)."""
    w = [1.0 / us ** 2 for _, us in points]
    sw = sum(w)
    mk = sum(wi * k for wi, (k, _) in zip(w, points)) / sw
    mu = sum(wi * us for wi, (_, us) in zip(w, points)) / sw
    slope = (sum(wi * (k - mk) * (us - mu) for wi, (k, us) in zip(w, points))
             / sum(wi * (k - mk) ** 2 for wi, (k, _) in zip(w, points)))
    return slope, mu - slope * mk


def plan_cost(shape, config: TileConfig, splits: int = 1, entry: dict | None = None,
              padding: bool = False) -> dict:
    """The model's reasoning and predicted time for level 6's kernel with
    `config` and `splits` slices of K on an (m, n, k) product, on the GPU of
    `entry` (``gpu_entry``; default the model's default GPU).

    Returns a dict: tiles, slices, blocks, blocks_per_sm (and its limiter),
    waves, busiest_sm_blocks, block_steps (a block's steps of K, which
    ``depth_band`` reads), tail_efficiency, padding_efficiency,
    tile_efficiency, rate ("measured" where the entry's rates hold the tile,
    else "formula"), scalar_loads, split_share (the split kernel's measured
    share charged, ``split_kernel_share``; 0 with K whole), warps_per_sm,
    sm_us (the busiest SM's time), host_us,
    gpu_us and predicted_us = max(host_us, gpu_us), and the useful TFLOP/s
    that predicts. With `padding` (what auto prices where the GPU's entry
    holds a "padding" block, ``padding_on``), a ragged product may instead
    be priced with its operands copied into padded buffers first
    (``padding_us``), where that is cheaper: then "padded" is True. A ring
    on a ragged n reads B 4 bytes a copy ("ring_scalar_b" True) where that
    is cheaper than copying B first (ring_copy_us, the copy's time), its
    busiest SM longer by the share for as many blocks as it holds
    (``ring_scalar_b_share``); where n is even and the entry holds a
    "ring_pairs_b" share for the tile, by that share instead, B then read 8
    bytes a copy ("ring_pairs_b" True too).
    """
    m, n, k = _shape(shape)
    check_config(config)
    stream = splits == STREAM
    splits = 1 if stream else _whole("splits", splits)
    entry = gpu_entry("default") if entry is None else entry
    c = entry["constants"]
    tiles = -(-max(m, 1) // config.bm) * -(-max(n, 1) // config.bn)
    slices, slice_k = _slices(max(k, 1), splits)
    blocks = tiles * slices
    registers, shared = kernel_resources(config)
    resident, limiter = resident_blocks(registers, shared, config.threads, entry)
    sms = entry["sms"]
    busiest = -(-blocks // sms)
    padded_k = -(-slice_k // config.bk) * config.bk
    if stream:  # split_k.stream_arguments: steps of max(16, bk) columns, one wave of workers
        step = max(16, config.bk)
        stream_k = -(-max(k, 1) // step) * step  # a tile's columns, in whole steps
        total = tiles * stream_k // step
        blocks = min(sms * resident, total)
        worker_steps = -(-total // blocks)
        busiest, padded_k = -(-blocks // sms), worker_steps * step
        slices = (tiles + blocks - 1) / tiles  # pieces a tile, on average
    block_flops = 2.0 * config.bm * config.bn * padded_k
    warps = config.threads // 32
    tile_eff = c["eff_max"] / (1 + c["thread_loads"] * (1 / config.tm + 1 / config.tn)
                               + c["block_loads"] * (1 / config.bm + 1 / config.bn))
    peak_per_us = entry["peak_tflops"] * 1e6 / sms  # FLOP per microsecond per SM
    edges = bool(m % config.bm or n % config.bn or k % config.bk or slices > 1)
    sm_us = measured_sm_us(entry, config, busiest, padded_k)
    measured = sm_us is not None
    if measured:  # the tile's share of peak that its measured rate says
        tile_eff = busiest * block_flops / (sm_us * peak_per_us)
    else:
        sm_us, left = 0.0, busiest
        while left > 0:  # the busiest SM's blocks, `resident` at a time
            together = min(left, resident)
            occupancy = 1 - math.exp(-together * warps / c["warps_to_hide"])
            sm_us += together * block_flops / (peak_per_us * tile_eff * occupancy) + c["block_us"]
            left -= together
    # matmul's test: no 128-bit loads along a row. A ring copies A a float at
    # a time and, where n is ragged, first copies B into rows of n4 (entry_point's
    # _ring_plan): it never loads a float at a time, it pays the copy instead.
    ring = bool(config.stages)
    scalar = bool(k % 4 or n % 4) and not ring
    split = slices > 1 or stream
    split_share = stream_kernel_share(entry, config) if stream \
        else split_kernel_share(entry, config, busiest) if split else 0.0
    # Scalar loads, or the operands copied first into buffers whose rows are a
    # multiple of 4 long (``padding_us``), whichever the model finds cheaper.
    aligned_us = sm_us * (1 + c["edge_share"] * edges) * (1 + split_share)
    scalar_us = sm_us * (1 + c["edge_share"] * edges + scalar_load_share(entry, config)) \
        * (1 + split_share)
    copies, copy_us = padding_us((m, n, k), entry) if scalar and padding else (0, 0.0)
    padded = bool(scalar and padding and copy_us < scalar_us - aligned_us)
    sm_us = scalar_us if scalar and not padded else aligned_us
    sm_us *= plan_factor(entry, config, _kind(stream, split))
    gpu_us = c["gpu_launch_us"] + sm_us + split * (zeroing_us(entry, m, n)
                                                   + m * n * slices / c["atomics_per_us"])
    host_us = c["call_us"] + split * c["split_call_us"]
    if padded:
        gpu_us += copy_us
        host_us += copies * PAD_CALL_US
    # A ring on a ragged n: B copied into rows of n4 first (a second launch,
    # on the GPU and the host), or B read 4 bytes a copy in one launch, its
    # busiest SM the tile's measured share longer (``ring_scalar_b_share``;
    # only where the entry has one; where n is even and the entry has one,
    # the share of 8-byte copies, "ring_pairs_b"), whichever the model finds
    # cheaper.
    ring_copy = ring_copy_us((m, n, k), entry) if ring else 0.0
    ring_scalar_b, pairs = False, None
    if ring_copy:
        copy_host = (entry.get("ring_scalar_b") or {}).get("copy_call_us", PAD_CALL_US)
        steps = padded_k // config.bk
        share = ring_scalar_b_share(entry, config, busiest, resident, steps=steps)
        pairs = ring_scalar_b_share(entry, config, busiest, resident, "ring_pairs_b",
                                    steps) if n % 2 == 0 else None
        share = share if pairs is None else pairs
        ring_scalar_b = share is not None and max(host_us, gpu_us + sm_us * share) < max(
            host_us + copy_host, gpu_us + ring_copy)
        if ring_scalar_b:
            gpu_us, ring_copy = gpu_us + sm_us * share, 0.0
        else:
            gpu_us, host_us = gpu_us + ring_copy, host_us + copy_host
    predicted = max(host_us, gpu_us)
    return {
        "config": config, "splits": STREAM if stream else splits, "tiles": tiles,
        "slices": slices, "slice_k": slice_k,
        "blocks": blocks, "blocks_per_sm": resident, "limiter": limiter,
        "warps_per_sm": min(busiest, resident) * warps,
        "waves": blocks / (sms * resident), "busiest_sm_blocks": busiest,
        "tail_efficiency": tail_efficiency(blocks, sms),
        "padding_efficiency": m * n * k / (tiles * config.bm * config.bn * (
            stream_k if stream else padded_k * slices))
        if m and n and k else 0.0,
        "tile_efficiency": tile_eff, "rate": "measured" if measured else "formula",
        "worker_steps": worker_steps if stream else None, "block_steps": padded_k // config.bk,
        "scalar_loads": scalar and not padded, "padded": padded, "ring_copy_us": ring_copy,
        "ring_scalar_b": ring_scalar_b, "ring_pairs_b": ring_scalar_b and pairs is not None,
        "split_share": split_share,
        "sm_us": sm_us, "host_us": host_us, "gpu_us": gpu_us,
        "predicted_us": predicted, "tflops": 2 * m * n * k / predicted / 1e6,
    }


def scalar_load_share(entry: dict, config: TileConfig | None = None) -> float:
    """How much longer the busiest SM works where matmul falls back to scalar
    loads (n or k not a multiple of 4) than the measured 128-bit kernel: the
    entry's "scalar_loads"["tile_share"][tile_key(config)] where it has one
    for `config`'s tile, else its "share" for every tile
    (``fit_scalar_load_shares``), 0 where the entry has neither."""
    block = entry.get("scalar_loads") or {}
    if config is not None and tile_key(config) in (block.get("tile_share") or {}):
        return float(block["tile_share"][tile_key(config)])
    return float(block.get("share", 0.0))


def blocks_regime(busiest: int, resident: int) -> str:
    """How full the busiest SM is: "one" block, "part" of what it holds at
    once (2 to resident - 1 blocks), or "full" (resident blocks or more,
    rounds after rounds). Raises ValueError unless busiest is a whole number
    >= 0 and resident one >= 1."""
    if isinstance(busiest, bool) or not isinstance(busiest, int) or busiest < 0:
        raise ValueError(f"busiest must be a whole number of blocks >= 0, got {busiest!r}")
    if isinstance(resident, bool) or not isinstance(resident, int) or resident < 1:
        raise ValueError(f"resident must be a whole number of blocks >= 1, got {resident!r}")
    return "one" if busiest <= 1 else "full" if busiest >= resident else "part"


# How deep a block's walk along K runs, in its steps of K: "shallow" under
# 16 steps, "middle" under 64, "deep" from 64 (``depth_band``).
DEPTH_BANDS = ((16, "shallow"), (64, "middle"), (math.inf, "deep"))


def depth_band(steps: int) -> str:
    """The band of DEPTH_BANDS a block of `steps` steps of K falls in. Raises
    ValueError unless steps is a whole number >= 0."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a whole number of steps of K >= 0, got {steps!r}")
    return next(name for below, name in DEPTH_BANDS if steps < below)


def ring_scalar_b_share(entry: dict, config: TileConfig, busiest: int | None = None,
                        resident: int | None = None, block: str = "ring_scalar_b",
                        steps: int | None = None) -> float | None:
    """How much longer the busiest SM of `config`'s ring works where it reads
    a ragged B 4 bytes a copy instead of 16 (entry_point.RING_RAGGED_B),
    with `busiest` blocks on it of the `resident` it holds at once: the
    entry's "ring_scalar_b"["share_by_blocks"][tile_key(config)][regime]
    (``blocks_regime``) where it has one, else its "share" for the tile
    (``shape_model_fit.fit_ring_scalar_b``); None where it has neither (the
    ring then always copies B first). With `block` "ring_pairs_b", the same
    for a B read 8 bytes a copy (an even n, entry_point.RING_PAIRS).

    Measured pairs say the share depends on how full the SM is: a 64 x 128
    ring read as given took 27-29% longer alone on its SM, 7-11% with two
    blocks of the four it holds, 10-18% with rounds of them
    (benchmarks/results/sgemm_kernel_times-h200-2026-11-30.json and
    reruns/...-rounds.json): alone, nothing hides the four times as many
    loads; full, they take issue slots from the arithmetic. Where the entry
    also holds "share_by_depth" {tile key: {regime: {band: share}}}
    (``shape_model_fit.fit_ring_b_by_depth``) and `steps` (a block's steps
    of K) falls in a band it holds, that share: at 1717 x 1730 a full SM's
    64 x 128 ring paid 8-14% in pairs and 15-18% 4 bytes a copy from K of
    300 to 5000, where shallow shapes had paid nothing (benchmarks/NOTES.md).
    No committed entry holds one yet."""
    block = entry.get(block) or {}
    key = tile_key(config)
    if busiest is not None and resident is not None:
        regime = blocks_regime(busiest, resident)
        if steps is not None:  # by regime and depth where the entry has it (a trial's)
            by_depth = (((block.get("share_by_depth") or {}).get(key) or {}).get(regime)
                        or {})
            band = depth_band(steps)
            if band in by_depth:
                return float(by_depth[band])
        by_blocks = (block.get("share_by_blocks") or {}).get(key) or {}
        if regime in by_blocks:
            return float(by_blocks[regime])
    share = (block.get("share") or {}).get(key)
    return None if share is None else float(share)


def stream_kernel_share(entry: dict, config: TileConfig) -> float:
    """How much longer than its rates the busiest SM works where `config`'s
    plan is stream-K: the entry's "stream_kernel"["tile_share"][tile_key(config)]
    where it has one (``shape_model_fit.fit_stream_tile_shares``), else its
    "share" for every tile, 0 where it has neither."""
    block = entry.get("stream_kernel") or {}
    tile_share = (block.get("tile_share") or {}).get(tile_key(config))
    return float(block.get("share", 0.0) if tile_share is None else tile_share)


def _kind(stream: bool, split: bool) -> str:
    return "stream" if stream else "split" if split else "whole"


def plan_kind(plan: dict) -> str:
    """How a plan (``plan_cost``'s) walks K: "whole", "split" or "stream"."""
    return _kind(plan["splits"] == STREAM, plan["slices"] > 1)


def plan_factor(entry: dict, config: TileConfig, kind: str) -> float:
    """The busiest SM's time of `config`'s plans that walk K `kind` (``plan_kind``)
    is multiplied by the entry's "plan_factor"["factor"]["<tile key> <kind>"]
    where it has one (``shape_model_fit.fit_plan_factors``), else by 1. No
    committed entry has one: the factors were tried and not adopted
    (benchmarks/NOTES.md); a trial model JSON may hold them. Raises ValueError
    for a kind other than those three."""
    if kind not in ("whole", "split", "stream"):
        raise ValueError(f"kind must be 'whole', 'split' or 'stream', got {kind!r}")
    factors = (entry.get("plan_factor") or {}).get("factor") or {}
    return float(factors.get(f"{tile_key(config)} {kind}", 1.0))


def split_kernel_share(entry: dict, config: TileConfig, busiest: int | None = None) -> float:
    """How much longer than its rates the busiest SM works where `config`'s
    plan cuts K into slices (split_k.py's kernel, not the rates' interior
    one), beyond what plan_cost charges every split plan anyway (edge_share,
    the zeroing launch, the atomics): the entry's
    "split_kernel"["share"][tile_key(config)] (``split_shares_from_record``),
    0 where the entry has none for this tile.

    A share below 0 (the split kernel faster a step than K whole) is charged
    only where the busiest SM has more blocks (`busiest`) than the K-whole
    kernel fits at once, from its registers as ptxas counts them (the entry's
    "split_kernel"["whole_registers"], benchmarks/sgemm_registers.py): there
    the rates time rounds of that kernel, and the split kernel, which needs
    fewer registers, runs more of its blocks together or in shorter rounds
    (128 x 128 rings: 165 registers, one block an SM, against 128 and two).
    Elsewhere, and where the entry names no registers, 0: up to one round of
    the K-whole kernel a split plan runs at its price (auto once picked rings
    split in two at a share of -5% and ran 7% slower than priced:
    reruns/sgemm_explore-h200-2026-11-30-rings.json at 1024 x 1024 x 16384)."""
    block = entry.get("split_kernel") or {}
    share = float((block.get("share") or {}).get(tile_key(config), 0.0))
    registers = (block.get("whole_registers") or {}).get(tile_key(config))
    if share >= 0:
        return share
    if registers is None or busiest is None:
        return 0.0
    whole, _ = resident_blocks(int(registers), kernel_resources(config)[1], config.threads, entry)
    return share if busiest > whole else 0.0


def zeroing_us(entry: dict, m: int, n: int) -> float:
    """What zeroing C adds to the GPU's time of a split-K or stream-K plan on
    an m x n product: the entry's "zero_matrix" line where it has one (the
    zeroing kernel's duration under the profiler, fixed_us plus us_per_million
    a million floats of C, and the gap a second kernel adds;
    ``shape_model_fit.fit_zero_matrix``), else the constant zero_us."""
    line = entry.get("zero_matrix")
    if not line:
        return entry["constants"]["zero_us"]
    return line["fixed_us"] + line["us_per_million"] * m * n / 1e6


def _splits_worth_pricing(k: int) -> list[int]:
    """1, and each number of SPLITS whose slices keep at least MIN_SLICE columns."""
    return [s for s in SPLITS if s == 1 or _slices(k, s)[1] >= MIN_SLICE and _slices(k, s)[0] == s]


def wave_filling_splits(shape, config: TileConfig, entry: dict) -> list[int]:
    """The numbers of slices of K that give `config`'s tiles as many blocks as
    fit in one wave, or in two, without going over: floor(w x SMs x blocks per
    SM / tiles) for w = 1, 2. SPLITS has no 7, and 18 tiles of 128 x 256 on
    132 SMs want 7 slices (126 blocks, one wave) rather than 8 (144 blocks: a
    second round on 12 SMs while 120 wait). Each kept at most max(SPLITS),
    at least 2, and only where its slices keep MIN_SLICE columns."""
    m, n, k = _shape(shape)
    tiles = -(-max(m, 1) // config.bm) * -(-max(n, 1) // config.bn)
    resident = resident_blocks(*kernel_resources(config), config.threads, entry)[0]
    found = []
    for waves in (1, 2):
        s = waves * entry["sms"] * resident // tiles
        if 2 <= s <= max(SPLITS) and s not in found:
            slices, slice_k = _slices(max(k, 1), s)
            if slices == s and slice_k >= MIN_SLICE:
                found.append(s)
    return found


def choose_plan(shape, gpu_name: str = "default", path=None, entry: dict | None = None) -> dict:
    """The plan auto runs for an (m, n, k) product on `gpu_name`: the cheapest
    (configuration, slices of K) of the GPU's menu by ``plan_cost`` (a plan
    with slices only where it beats K whole by SPLIT_MARGIN), with its
    reasoning numbers, plus "candidates": every plan priced, cheapest first,
    and "gpu" and "calibrated" (where the GPU's constants came from, None for
    a GPU the model has no entry for)."""
    m, n, k = _shape(shape)
    entry = gpu_entry(gpu_name, path) if entry is None else entry
    splits_of_k = _splits_worth_pricing(max(k, 1))
    padding = padding_on(entry)
    stream = [STREAM] if "stream_kernel" in entry else []
    priced = [plan_cost((m, n, k), config, splits, entry, padding)
              for config in menu(entry)
              for splits in dict.fromkeys(splits_of_k + wave_filling_splits((m, n, k), config,
                                                                          entry) + stream)]
    # Stream-K only where its share prices it well: 50 us or more on the GPU,
    # STREAM_MIN_STEPS or more a worker.
    priced = [p for p in priced if p["splits"] != STREAM or (
        p["gpu_us"] >= STREAM_MIN_US and p["worker_steps"] >= STREAM_MIN_STEPS)]
    # Cheapest first; among equals (a call the host's cost decides), fewer
    # slices, then fewer blocks: the plan with the least work on the GPU.
    priced.sort(key=lambda p: (round(p["predicted_us"], 3), p["slices"], p["gpu_us"]))
    whole = next(p for p in priced if p["splits"] == 1)
    chosen = priced[0] if priced[0]["predicted_us"] * (1 + SPLIT_MARGIN) < whole["predicted_us"] \
        else whole
    return {**chosen, "gpu": entry["name"], "calibrated": entry.get("calibrated"),
            "candidates": priced}


def padding_on(entry: dict) -> bool:
    """Whether auto may pad ragged operands on this GPU: its entry holds a
    "padding" block (the copy's measured gain; without one, never)."""
    return bool(entry.get("padding"))


@lru_cache(maxsize=4096)
def auto_choice(gpu_name: str, m: int, n: int, k: int) -> tuple[TileConfig, int, bool]:
    """(configuration, splits, padded) of ``choose_plan`` from the package's
    model, found once per GPU and shape: a loop calling matmul pays for it
    once."""
    plan = choose_plan((m, n, k), gpu_name)
    return plan["config"], plan["splits"], bool(plan["padded"])


def planned(gpu_name: str, m: int, n: int, k: int) -> tuple[TileConfig, int]:
    """(configuration, splits) of auto's plan (``auto_choice``)."""
    return auto_choice(gpu_name, m, n, k)[:2]


def padded_plan(gpu_name: str, m: int, n: int, k: int) -> bool:
    """Whether auto's plan for this shape copies A and B into padded buffers
    first (``auto_choice``)."""
    return auto_choice(gpu_name, m, n, k)[2]


@lru_cache(maxsize=4096)
def ring_reads_b_scalar(gpu_name: str, m: int, n: int, k: int, config: TileConfig,
                        splits) -> bool:
    """Whether a ring plan (`config` with stages, `splits`) on this shape reads
    a ragged B 4 bytes a copy rather than copying it first (``plan_cost``'s
    "ring_scalar_b"), found once per GPU, shape and plan."""
    return bool(plan_cost((m, n, k), config, splits, gpu_entry(gpu_name))["ring_scalar_b"])


def plan_summary(plan: dict) -> dict:
    """A plan's reasoning numbers as plain values (the configuration as a dict),
    without its list of candidates: what a results file or a table keeps."""
    return {key: (asdict(value) if isinstance(value, TileConfig) else value)
            for key, value in plan.items() if key != "candidates"}
