"""Levels 5 and 6: 128-bit loads, A's tile stored transposed, B read without
bank conflicts, the next tile prefetched into registers while the current
one is multiplied.

What level 5 adds over level 4b is listed, (1) to (8), in
``building_blocks``, whose factories do most of it; this module holds what is
level 5's own: the layout of a block's threads over its tile of C (each
thread TN/4 groups of four columns, so that a quarter warp reads 32 distinct
banks), its multiply step, and its stores of C. Level 6 is the same kernel
with the tile sizes ``autotune`` measured best on the GPU at hand.

Measured on the H100 at 4096^3: in the first full run
(benchmarks/results/sgemm-h100-2026-11-22.json, two steps of the dot loop
per pass) level 5 39.59 TFLOP/s (76.5% of cuBLAS) and level 6 41.25 (79.7%),
against level 4b's 23.91 (46.2%); with the whole tile written out, the
register cap and the kernel without edge checks, level 6 (128 x 256 x 16
tiles, 16 x 8 per thread) ran at 47.46 TFLOP/s, 91.9% of cuBLAS
(benchmarks/results/sgemm_level7-h100-2026-11-26.json).
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.building_blocks import (_make_k_loop, _make_kernel,
                                                     _make_multiply_block, _make_multiply_tile,
                                                     _make_store_four, _make_tile_loaders,
                                                     _register_cap, _steps_per_pass)
from gpucourse.kernels.sgemm.config import (ONE, STATIC_SHARED_LIMIT_BYTES, ZERO, _INLINE,
                                            TileConfig, _u)
from gpucourse.kernels._vector_load import load_float4_flat
from gpucourse.kernels._vector_store import store_float4_flat
from gpucourse.kernels.sgemm import pipelined
from gpucourse.kernels.sgemm.padding import LOADS_ONLY, PAIRS, SHIFTED
from numba import uint64  # noqa: E402 (after gpucourse.device)


# Two copies of the shared tiles for levels 5 and 6 (see (6) in building_blocks), where two
# copies fit in the 48 KiB a block may declare statically; False keeps one.
DOUBLE_BUFFER = True
# Copies of a thread's fragments (its TM values of A and TN of B at one step of
# the dot loop): 1, each step reads its own and then multiplies; 2, each step
# first reads the next step's into the other copy, then multiplies its own,
# read a step earlier, so that the shared-memory reads of one step overlap the
# FMAs of the one before. For one block of 8 warps an SM, where Nsight Compute
# found warps waiting on shared memory (short scoreboard, 28% of the samples
# at 1000^3 on the H200, benchmarks/NOTES.md). Needs the whole tile written
# out (DOT_UNROLL "tile"). Not yet timed: benchmarks/sgemm_fragments.py.
FRAGMENT_COPIES = 1
# The register cap of the cp.async kernels (TileConfig.stages; pipelined's
# note) where a caller asks for "auto": none. At 128 x 128 x 16 tiles of 8 x 8
# (256 threads) two blocks' cap of 128 spilled 80-172 bytes offline (ptxas
# 13.5, two stages; 166-173 registers uncapped), and uncapped a first build
# ran 1537 x 1023 x 771 in 89.9 us where auto's plan took 95.3
# (results/sgemm_pipelined-h200-2026-11-29.json). "auto" gives them the
# others' cap (benchmarks/sgemm_pipelined.py's comparison).
PIPELINE_REGISTERS = None
# Whether a ring whose C cannot take 16-byte stores while its B is padded
# (n not a multiple of 4; "loads") stores C through shared memory, so that a
# warp writes 32 neighbouring floats of a row at a time. Stored straight from
# registers, a warp's store puts 4 bytes in each of 16 sectors of 32 bytes
# (its threads' columns 16 bytes apart), four stores to fill them, where a
# 16-byte store fills each sector at once: four times the L2 writes, at the
# end of every tile. Staged, each of a thread's TM rows goes into B's free
# shared tile (one row a thread-row, 16 bytes a store), a barrier, then the
# block writes those rows out 4 bytes a thread, and a barrier. Offline (ptxas
# 13, sm_90, the 64 x 128 ring) that costs 1,130 instructions after the walk
# against 452 (each store in its own branch, its address worked out anew),
# about half a step of K's 1,224: worth it only if the L2's writes, not the
# issue slots, hold the tile's end. With B read as given it took 185
# registers against 168, so it is not offered there. Off: on the H200, with B
# padded by the driver, it made the call slower than storing from registers
# at 17 of 29 shapes, by 0.1% at the median and up to 39%
# (benchmarks/results/sgemm_ring_pairs-h200-2026-11-30.json): the issue
# slots, not the L2's writes, hold a tile's end.
STAGED_STORES = False
# Whether a ring whose C rows do not start on 16 bytes (B padded, "loads", or
# read shifted) stores each of a thread's fours as its address allows
# (building_blocks._make_store_four's "peeled": one 16-byte store where it
# starts on 16 bytes, two 8-byte ones on 8, else a float, 8 bytes and a
# float), instead of four floats: 2.25 stores a four on average where n is
# odd, against 4. Off: on the H200, with B padded, the call was faster at 19
# of 29 shapes, by 0.8% at the median, from 9.4% faster (shallow K, where
# storing C is much of a call) to 3.2% slower
# (benchmarks/results/reruns/sgemm_ring_pairs-h200-2026-11-30-shifted.json):
# within a run's noise at most shapes. Held-out set 13, run in turns, then
# decided against it: 19 of its 24 large shapes met the target with peeled
# stores in both rounds, 21 without in all three (results/reruns/
# sgemm_held_out_13-h200-2026-12-01-peeled-*.json, -before-wide-copy-*).
PEELED_STORES = False
# Whether a ring that reads a padded copy of B (LOADS_ONLY) with K whole is
# launched so that it may start while the copy kernel before it finishes
# (programmatic dependent launch: entry_point's launch, launch.launch_config
# dependent=True), waiting for the copy before its first read
# (pipelined.make_k_loop's after_grid). It takes the gap between the two
# kernels (1-3 us at the held-out misses, sgemm_kernel_times.py) off a call
# where the GPU, not the host, sets the pace. Off: on the H200 it made the
# call faster than "padded" at only 13 of 29 shapes, 0.9% slower at the
# median, from 7.3% faster to 6.0% slower (benchmarks/results/reruns/
# sgemm_ring_pairs-h200-2026-12-01-copy-ways.json, "padded_overlap").
RING_COPY_OVERLAP = False
# The order of a step's TM x TN FMAs: "rows" (row i of the patch, columns 0 to
# TN - 1, then row i + 1), or "serpentine" (odd rows right to left, so that
# each FMA shares an operand with the one before it). FMA_ORDER is the
# kernels' through registers (their rates were measured with "rows"),
# RING_FMA_ORDER the cp.async rings'. Timed on the H200 with the rings' copies
# finding their addresses each step (results/sgemm_pipelined-h200-2026-11-30.json,
# 64 x 128 x 16 tiles of 8 x 8, share of cuBLAS, rows against serpentine):
# 3001 x 2999 x 1009 93% against 101%, 1537 x 1023 x 771 under stream-K
# 91% serpentine, 1000^3 89% against 86%. Which order ptxas schedules better
# is not something the PTX shows; the timings decide.
FMA_ORDER = "rows"
RING_FMA_ORDER = "serpentine"


def copy_overlap_here() -> bool:
    """Whether a ring's launch overlaps the copy of B before it here:
    RING_COPY_OVERLAP on, and kernels compiled for compute capability 9.0 or
    later, which griddepcontrol needs (Numba's current device, as it compiles
    them; or the simulator, where it does nothing)."""
    if not RING_COPY_OVERLAP:
        return False
    from gpucourse.device import on_gpu

    if not on_gpu():
        return True
    from numba.cuda import dispatcher

    return tuple(dispatcher.get_current_device().compute_capability) >= (9, 0)


def overlaps_the_copy(config, vectorized) -> bool:
    """Whether the kernel for `config` reading B as `vectorized` says waits
    for the copy of B its launch may overlap (``copy_overlap_here``)."""
    return bool(vectorized == LOADS_ONLY and getattr(config, "stages", 0)
                and copy_overlap_here())


def _make_vectorized_kernel(config: TileConfig, vectorized: bool, unroll: int = None,
                            double_buffer: bool = None, split: bool | str = False,
                            max_registers="auto", interior: bool = False,
                            fragment_copies: int = None):
    """Level 5 and 6's kernel for `config`: kernel(a, b, c) stores C = A @ B; with
    `split`, kernel(a, b, c, chunk) for single-launch split-K instead (see
    "Split-K" in split_k): block z of the grid multiplies columns z*chunk ...
    (z+1)*chunk of A by those rows of B and adds its outputs into C; with
    `split` "stream", the stream-K kernel (see "Stream-K" in split_k).
    `vectorized`: True, 128-bit loads and stores; False, one float at a time;
    "loads", 128-bit loads and single stores, for a C whose rows are not a
    multiple of 4 long, with A and B padded (entry_point's padded plans);
    "pairs" (rings only, ``padding.PAIRS``), 8-byte copies of B and 64-bit
    stores into C, for rows an even number of floats long; "shifted" (rings
    only, ``padding.SHIFTED``), B copied in 16-byte chunks wherever its rows
    start and moved into place in shared memory, C stored a float at a time.
    `fragment_copies`: 1 or 2 copies of a thread's fragments (default
    FRAGMENT_COPIES, which says what two do). With `config.stages`, the
    tiles go from global to shared memory by cp.async, into a ring of that
    many copies (``pipelined``), instead of through registers."""
    unroll = _steps_per_pass(unroll, config.bk)
    copies = FRAGMENT_COPIES if fragment_copies is None else fragment_copies
    if copies not in (1, 2) or isinstance(copies, bool):
        raise ValueError(f"fragment_copies must be 1 or 2, got {copies!r}")
    if copies == 2 and unroll != config.bk:
        raise ValueError(f"fragment_copies=2 needs the whole tile written out (unroll 'tile', "
                         f"{config.bk} steps), got {unroll} steps per pass")
    AHEAD = copies == 2
    stages = config.stages
    for name, order in (("FMA_ORDER", FMA_ORDER), ("RING_FMA_ORDER", RING_FMA_ORDER)):
        if order not in ("rows", "serpentine"):
            raise ValueError(f"{name} must be 'rows' or 'serpentine', got {order!r}")
    SERPENTINE = (RING_FMA_ORDER if stages else FMA_ORDER) == "serpentine"
    if stages and max_registers == "auto":
        max_registers = PIPELINE_REGISTERS
    cap = _register_cap(max_registers, config.threads, config.tm * config.tn,
                        copies * (config.tm + config.tn), split)
    threads = config.threads
    a_elements, b_elements = config.bm * config.bk, config.bk * config.bn
    double_buffer = DOUBLE_BUFFER if double_buffer is None else bool(double_buffer)
    double = double_buffer and 2 * config.shared_bytes <= STATIC_SHARED_LIMIT_BYTES
    a_shared, b_shared = (2 if double else 1) * a_elements, (2 if double else 1) * b_elements
    a_row = config.bm  # floats from one k-row of A's shared tile to the next
    shifted = bool(stages) and vectorized == SHIFTED
    if stages:  # a ring of `stages` copies, A's rows padded (check_config checked it fits)
        a_row = pipelined.a_stride(config.bm)
        a_elements = a_row * config.bk
        a_shared, b_shared = stages * a_elements, stages * b_elements
    aligned_at = 0
    if shifted:  # raw copies of B's rows, wherever they start, then the aligned tile
        aligned_at = stages * config.bk * pipelined.shifted_row(config.bn)
        b_elements, b_shared = aligned_at // stages, aligned_at + config.bk * config.bn
        if not pipelined.shifted_fits(config):
            raise ValueError(f"a shifted ring's tiles need 4*(a + raw b + b) = "
                             f"{4 * pipelined.shifted_shared_floats(config)} bytes of shared "
                             f"memory, at most {STATIC_SHARED_LIMIT_BYTES}, and its copies' "
                             f"layout (pipelined._shifted_layout): {config}")
    tm, tn, patch = config.tm, config.tn, config.tm * config.tn
    A_ROW, BN, BK, TM, TN = _u(a_row, config.bn, config.bk, config.tm, config.tn)
    THREADS_PER_ROW = _u(config.bn // config.tn)
    GROUPS, GROUP_STRIDE = _u(config.tn // 4, 4 * (config.bn // config.tn))
    TWO, THREE, FOUR = _u(2, 3, 4)
    fetch_tiles, store_tiles, a_staged, b_staged = _make_tile_loaders(
        config.bm, config.bn, config.bk, threads,
        bool(vectorized) and vectorized not in (PAIRS, SHIFTED), interior)

    @cuda.jit(device=True, **_INLINE)
    def load_fragments(a_tile, b_tile, a_frag, b_frag, dot, copy, thread_row, thread_col,
                       a_base, b_base):
        # The TM values of A and the TN values of B (TN/4 groups of four) this
        # thread needs at step `dot`, from the copy of the tiles at a_base and
        # b_base, four at a time, into fragment copy `copy` (0 or 1).
        for i in range(ZERO, TM, FOUR):
            x0, x1, x2, x3 = load_float4_flat(a_tile, a_base + dot * A_ROW + thread_row * TM + i)
            a_frag[copy * TM + i] = x0
            a_frag[copy * TM + i + ONE] = x1
            a_frag[copy * TM + i + TWO] = x2
            a_frag[copy * TM + i + THREE] = x3
        for g in range(GROUPS):
            x0, x1, x2, x3 = load_float4_flat(b_tile, b_base + dot * BN + g * GROUP_STRIDE
                                              + thread_col * FOUR)
            b_frag[copy * TN + g * FOUR] = x0
            b_frag[copy * TN + g * FOUR + ONE] = x1
            b_frag[copy * TN + g * FOUR + TWO] = x2
            b_frag[copy * TN + g * FOUR + THREE] = x3

    @cuda.jit(device=True, **_INLINE)
    def multiply_fragments(acc, a_frag, b_frag, copy):
        # The TM x TN FMAs on fragment copy `copy`, in FMA_ORDER (a ring's:
        # RING_FMA_ORDER); i and j are constants once the loops are written
        # out, so the order is fixed when the kernel is compiled.
        for i in range(TM):
            for jj in range(TN):
                j = TN - ONE - jj if SERPENTINE and i % TWO else jj
                acc[i * TN + j] += a_frag[copy * TM + i] * b_frag[copy * TN + j]

    @cuda.jit(device=True, **_INLINE)
    def multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, thread_row, thread_col,
                      a_base, b_base):
        # One step of the dot loop. With one copy of the fragments: read this
        # step's, then multiply. With two (AHEAD): read the next step's into
        # the other copy first, then multiply this step's, read a step
        # earlier (the whole tile is written out, so `dot` and the copies
        # are constants the compiler folds into register names).
        if AHEAD:
            if dot + ONE < BK:
                load_fragments(a_tile, b_tile, a_frag, b_frag, dot + ONE, (dot + ONE) % TWO,
                               thread_row, thread_col, a_base, b_base)
            multiply_fragments(acc, a_frag, b_frag, dot % TWO)
        else:
            load_fragments(a_tile, b_tile, a_frag, b_frag, dot, ZERO, thread_row, thread_col,
                           a_base, b_base)
            multiply_fragments(acc, a_frag, b_frag, ZERO)

    all_steps = _make_multiply_tile(multiply_step, config.bk, unroll)

    @cuda.jit(device=True, **_INLINE)
    def multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, a_base, b_base):
        # With two copies of the fragments, step 0's are read before the steps.
        if AHEAD:
            load_fragments(a_tile, b_tile, a_frag, b_frag, ZERO, ZERO, p, q, a_base, b_base)
        all_steps(a_tile, b_tile, acc, a_frag, b_frag, p, q, a_base, b_base)

    if stages:
        # "loads" (a padded B) copies 16 bytes as True does; only C's stores
        # differ. "pairs" copies 8 bytes of B and stores C two floats at a time.
        copy_tiles = pipelined.make_tile_copies(
            config.bm, config.bn, config.bk, threads,
            vectorized if vectorized in (PAIRS, SHIFTED) else bool(vectorized), interior)
        realign = pipelined.make_realign(config.bn, config.bk, threads, b_elements,
                                         aligned_at) if shifted else None
        walk_k = pipelined.make_k_loop(copy_tiles, multiply_tile, config.bk, a_elements,
                                       b_elements, stages, realign, aligned_at,
                                       overlaps_the_copy(config, vectorized))
        a_staged = b_staged = 1  # no tiles in flight through registers
    else:
        walk_k = _make_k_loop(fetch_tiles, store_tiles, multiply_tile, config.bk, a_elements,
                              b_elements, double)

    @cuda.jit(device=True, **_INLINE)
    def place_thread(tid):
        # Rows thread_row*TM + 0..TM-1 of the tile, columns
        # g*GROUP_STRIDE + thread_col*4 + 0..3 (group g < GROUPS).
        return tid // THREADS_PER_ROW, tid % THREADS_PER_ROW

    peeled = bool(PEELED_STORES and stages and vectorized in (LOADS_ONLY, SHIFTED))
    store_four = _make_store_four(PAIRS if vectorized == PAIRS else "peeled" if peeled
                                  else vectorized is True)
    STAGED = bool(STAGED_STORES and stages and vectorized == LOADS_ONLY)
    staged_floats = config.bm // config.tm * config.bn  # a row of C for each thread-row
    if STAGED and (staged_floats % threads or staged_floats > b_shared):
        raise ValueError(f"staged stores need the {staged_floats} floats of a row of C for "
                         f"each thread-row to fit B's {b_shared}-float tile and split evenly "
                         f"over {threads} threads, got {config}")
    STAGE_PASSES, THREADS_U = _u(staged_floats // threads, threads)
    # A pass of the block's threads over the staged rows covers whole rows
    # (threads a multiple of bn), or a row takes several passes.
    WIDE = threads >= config.bn
    ROWS_PER_PASS, PASSES_PER_ROW = _u(max(1, threads // config.bn), max(1, config.bn // threads))

    @cuda.jit(device=True, **_INLINE)
    def write_staged(c, acc, row0, col0, thread_row, thread_col, m, n, stage):
        # Row i of every thread-row's TM rows goes through `stage` (B's tile,
        # free after the walk): in with 16-byte stores, out 4 bytes a thread,
        # neighbouring threads writing neighbouring columns of one row of C.
        tid = uint64(cuda.threadIdx.x)
        for i in range(TM):
            for g in range(GROUPS):
                base = i * TN + g * FOUR
                store_float4_flat(stage, thread_row * BN + g * GROUP_STRIDE + thread_col * FOUR,
                                  acc[base], acc[base + ONE], acc[base + TWO],
                                  acc[base + THREE])
            cuda.syncthreads()
            for s in range(STAGE_PASSES):
                if WIDE:
                    r, cc = s * ROWS_PER_PASS + tid // BN, tid % BN
                else:
                    r, cc = s // PASSES_PER_ROW, (s % PASSES_PER_ROW) * THREADS_U + tid
                row, col = row0 + r * TM + i, col0 + cc
                value = stage[r * BN + cc]  # read unconditionally: only the store is tested
                if (row < m) & (col < n):
                    c[row, col] = value
            cuda.syncthreads()

    @cuda.jit(device=True, **_INLINE)
    def write_patch(c, acc, row0, col0, thread_row, thread_col, m, n, add, b_tile):
        # The thread's TM x TN outputs into C, the parts inside it, four
        # neighbouring columns of a group at a time (or, STAGED, through
        # shared memory; never where several blocks add into C).
        if STAGED and not add:
            write_staged(c, acc, row0, col0, thread_row, thread_col, m, n, b_tile)
            return
        for i in range(TM):
            row = row0 + thread_row * TM + i
            if row < m:
                for g in range(GROUPS):
                    col = col0 + g * GROUP_STRIDE + thread_col * FOUR
                    store_four(c, acc, i * TN + g * FOUR, row, col, n, add)

    multiply_block = _make_multiply_block(place_thread, walk_k, write_patch, config.bm, config.bn,
                                          patch, copies * tm, copies * tn, a_staged, b_staged)

    return _make_kernel(multiply_block, a_shared, b_shared, cap,
                        "sgemm_pipelined" if stages else "sgemm_vectorized", split)
