"""The device-function factories levels 5, 6 and 7 share: moving tiles through
registers into shared memory, the dot-product steps written out, the walk
along K, and the register cap.

Each level's kernel is a short function that lays its threads over a tile of
C, asks these factories for the pieces, and writes its outputs. The long
numbered note below, (1) to (8), explains what the pieces do and what each
was measured to be worth; the factories refer to it by number:

* ``_make_tile_loaders``: fetch the next tiles of A and B into registers with
  128-bit loads, then store them to shared memory, A transposed ((1), (2),
  (4), (8));
* ``_make_unrolled_steps`` and ``_make_multiply_tile``: a tile's dot product
  written out ``DOT_UNROLL`` steps per pass ((5));
* ``_make_k_loop``: the walk along K, with one or two copies of the tiles
  ((4), (6)), over the whole of K or one split-K slice or stream-K piece;
* ``_register_cap``: the cap that lets two blocks share an SM ((7)), and
  the same for stream-K (``STREAM_REGISTERS``);
* ``_make_store_four`` and ``_make_multiply_block``: a thread's outputs
  into C, and the whole work of a block between its kernel's first line and
  its last, the same for levels 5-7 and for their split-K and stream-K
  kernels;
* ``_make_kernel``: the kernel around that block, over the whole of K, one
  split-K slice or one stream-K run (split_k's notes), under the name its
  level gives it.

``DOT_UNROLL`` is the knob benchmarks turn (set it here, on this module: the
factories read it when a kernel is built).
"""

from __future__ import annotations

from gpucourse.device import cuda, on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.config import ONE, ZERO, _INLINE, _u
from gpucourse.kernels._async_copy import matrix_address
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4
from gpucourse.kernels._vector_store import store_float2, store_float4, store_float4_flat
from numba import float32, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)


# Steps of the dot-product loop of levels 5-7 written out per pass: 1, 2, 4, ...
# or "tile", all bk of them, with no loop left (see (5) below).
# benchmarks/sgemm.py times several and uses the fastest for its run (recorded
# as dot_unroll in its results), together with DOUBLE_BUFFER (in vectorized). On the
# H100 (benchmarks/results/sgemm_unroll-h100-2026-11-25.json) the whole tile
# written out, with registers capped so that two blocks fit (see (7)), took
# level 6's tuned kernel from 79.3% to 84.7% of cuBLAS at 4096^3.
DOT_UNROLL = "tile"
UNROLLS = (1, 2, 4, 8, 16, 32)  # steps per pass a kernel may be built with ("tile": bk of them)
# A multiprocessor's registers, and the room a thread needs beyond its
# accumulators and fragments (addresses, indices, the next tile in flight)
# before a register cap would make the compiler spill (see (7) below).
REGISTERS_PER_SM = 65536
REGISTER_ROOM = 32
# The stream-K kernel's cap where a level asks for "auto": the others' (two
# blocks an SM where the accumulators fit). Under it the loop over a run's
# pieces around the walk spills (240 bytes at 128 x 128 tiles of 8 x 8,
# ptxas 13.5, sm_90), where the whole-K and split-K kernels spill nothing;
# uncapped it takes 164 registers, one block an SM. Timed both ways on the
# H200 (benchmarks/results/sgemm_stream-h200-2026-11-29.json), the capped
# kernel was the faster at six of eight shapes (3001 x 2999 x 1009: 503.6
# against 541.1 us; 1024^2 x 16384: 767.1 against 851.4), uncapped at
# 1537 x 1023 x 771 and 1000^3 (3% and 2%). Auto's stream-K plans (the
# shape model) run this one. None would leave it uncapped.
STREAM_REGISTERS = "auto"


# -----------------------------------------------------------------------------
# Levels 5 and 6: vectorized loads, A's tile transposed, conflict-free shared
# reads, the next tile prefetched into registers.
# Five changes to level 4b:
# (1) Global memory is read 128 bits at a time: one `ld.global.v4.f32` fetches
#     four neighbouring floats of a row, a quarter of the load instructions.
#     Numba cannot express this by itself; `load_float4` (in _vector_load.py)
#     is a small intrinsic that can. B's tile and C are written 128 bits at a
#     time too (`store_float4`, in _vector_store.py).
# (2) A's tile is stored transposed in shared memory (k-major), so the TM
#     values a thread needs at one step of K are neighbours, like B's TN values:
#     both are read four at a time (`ld.shared.v4.f32`), 4 loads per 64 FMAs
#     instead of 16.
# (3) No bank conflicts on B. Shared memory has 32 banks of 4 bytes, and a
#     warp's 128-bit load takes its fewest passes (four: 512 bytes over 128
#     bytes a pass) only when each quarter of the warp touches 32 distinct
#     banks. If a thread owned TN = 8 neighbouring columns, neighbouring threads
#     would read 32 bytes apart: a quarter warp would span 256 bytes, two
#     threads per bank, twice the passes. So a thread owns TN/4 groups of 4
#     columns, BN/(TN/4) apart (columns g*GROUP_STRIDE + thread_col*4 + 0..3 of
#     group g): within a group, neighbouring threads read neighbouring 16-byte
#     vectors. Its outputs in C are the same columns, four contiguous floats
#     per group, stored as 128-bit writes.
# (4) Register prefetching. Each step first issues the global loads of the
#     NEXT tile into registers, then does the multiply-adds on the tile already
#     in shared memory, and only then writes the registers to shared memory.
#     The loads' latency (hundreds of cycles) hides behind arithmetic instead
#     of stalling the block at the barrier; the price is 4*(A_LOADS + B_LOADS)
#     more registers per thread.
# (5) The dot-product loop over the tile's BK columns is written out DOT_UNROLL
#     steps per pass (`multiply_step`, inlined), by default all of them.
#     Numba's compiler does not unroll a loop whose body holds 64 FMAs, and
#     each pass costs a counter, a compare, a branch and some address
#     arithmetic beside the FMAs. Nsight Compute on the 64 x 256 x 16 kernel at
#     4096^3, two steps per pass, counted 2.69 G warp instructions to cuBLAS's
#     2.43 G for the same product: 80% of ours FFMA, 88% of cuBLAS's
#     (benchmarks/NOTES.md). With all 16 steps written out, the SASS of the
#     loop over K has 1,145 instructions per tile of which 1,024 are FFMA
#     (89%), and the shared-memory addresses are constants added to one base
#     register. The price is registers: the compiler starts later steps'
#     shared loads early, into registers of their own (163 for this kernel,
#     where 128 let two blocks of 256 threads share an SM); see (7).
# (6) Double buffering (DOUBLE_BUFFER). With one copy of the tiles, each step
#     needs two barriers: one before the stores (nobody may overwrite the tile
#     others still read) and one after (nobody may read it half written). With
#     two copies, step s multiplies the tile in copy (s - 1) % 2 while it stores
#     the next into copy s % 2, and one barrier per step is enough: the copy a
#     step writes was last read in the step before, before that step's barrier.
#     The price is twice the shared memory. Each copy is named by a constant
#     in its own branch of the loop, so that the compiler folds the copy's
#     offset into the shared-memory addresses.
# (7) A register cap (`_register_cap`). Where a thread's accumulators and
#     fragments leave room in the registers of two blocks per SM (128 a thread
#     for 256 threads), the kernel is compiled with that cap (cuda.jit's
#     max_registers): the compiler then hoists fewer shared loads, and the SM
#     holds two blocks, 16 warps, to hide each other's latency. Measured on
#     the H100 at 4096^3, 64 x 256 x 16: all steps written out, uncapped (163
#     registers, one block per SM) 80.0% of cuBLAS; capped at 128 84.7%; two
#     steps per pass 79.3%. A tile of 16 x 8 outputs per thread (128
#     accumulators) has no such room: it runs one block of 8 warps per SM, as
#     cuBLAS's own kernel does (254 registers, 8 x 16 outputs per thread).
# (8) Products the tiles cover exactly (m, n and k multiples of bm, bn and bk,
#     rows aligned for 128-bit loads: 4096^3 in 128 x 256 x 16 tiles) get the
#     same kernel built without edge checks on the loads (`interior`): one
#     test per tile instead of one per load, and addresses that advance by a
#     constant. In the SASS of the 128 x 256 x 16 kernel the loop over K loses
#     1% of its instructions.
# Level 6 is this same kernel with the tile sizes `autotune` measured best on
# the GPU at hand.
#
# `vectorized=False` compiles the same kernel with scalar global loads and
# stores instead: matmul uses it when a row length is not a multiple of 4 or
# the data is not 16-byte aligned, where a 128-bit access would be illegal.


def _make_tile_loaders(bm: int, bn: int, bk: int, threads: int, vectorized: bool,
                       interior: bool = False):
    """The two halves of moving a bm x bk tile of A and a bk x bn tile of B into
    shared memory, shared by levels 5-7 (see (4) above): `fetch_tiles` reads
    them from global memory into registers, `store_tiles` later writes the
    registers to shared memory, A transposed (a_tile[kk * bm + r]), B as is
    (b_tile[kk * bn + col]). Each of the block's `threads` threads moves
    a_loads float4 of A and b_loads of B, rows `threads / (bk / 4)` and
    `threads / (bn / 4)` apart (the caller's check guarantees whole rows and
    equal shares). With `interior` (128-bit loads only), the caller promises
    that the blocks' tiles cover the matrices exactly (m, n and k multiples of
    bm, bn and bk: see (8) above): no load is checked against the edges, and
    only the step past the last tile, whose loads are all outside, is skipped,
    by one test for the whole tile. Returns (fetch_tiles, store_tiles,
    a_staged, b_staged): the device functions and the sizes of the register
    arrays they fill."""
    INTERIOR = bool(interior and vectorized)
    a_loads, b_loads = bm * bk // 4 // threads, bk * bn // 4 // threads
    BM, BN = _u(bm, bn)
    A_LOADS, B_LOADS = _u(a_loads, b_loads)
    A_VECTORS_PER_ROW, B_VECTORS_PER_ROW = _u(bk // 4, bn // 4)
    A_ROW_STRIDE, B_ROW_STRIDE = _u(threads // (bk // 4), threads // (bn // 4))
    TWO, THREE, FOUR = _u(2, 3, 4)

    @cuda.jit(device=True, **_INLINE)
    def fetch_tiles(a, b, a_next, b_next, tid, row0, col0, k_next, m, n, k):
        """Read the tiles starting at column k_next of A (rows row0...) and row
        k_next of B (columns col0...) into the registers a_next and b_next;
        zeros past the edges of the matrices, K ending at k (the whole of K,
        or a split-K slice's end). With `vectorized`, each four neighbours of
        a row come in one 128-bit load (the caller promises rows a multiple of
        4 long and slices starting on a multiple of 4, so the four are all
        inside or all outside)."""
        a_row, a_col = tid // A_VECTORS_PER_ROW, (tid % A_VECTORS_PER_ROW) * FOUR
        b_row, b_col = tid // B_VECTORS_PER_ROW, (tid % B_VECTORS_PER_ROW) * FOUR
        for s in range(A_LOADS):
            row, kk = row0 + a_row + s * A_ROW_STRIDE, k_next + a_col
            x0 = x1 = x2 = x3 = float32(0.0)
            if INTERIOR:
                if k_next < k:
                    x0, x1, x2, x3 = load_float4(a, row, kk)
            elif vectorized:
                if row < m and kk < k:  # k % 4 == 0: the four are all in or all out
                    x0, x1, x2, x3 = load_float4(a, row, kk)
            elif row < m and kk + THREE < k:  # one float at a time, the four all inside
                x0, x1, x2, x3 = a[row, kk], a[row, kk + ONE], a[row, kk + TWO], a[row, kk + THREE]
            elif row < m:  # the four cross K's edge: each checked
                x0 = a[row, kk] if kk < k else float32(0.0)
                x1 = a[row, kk + ONE] if kk + ONE < k else float32(0.0)
                x2 = a[row, kk + TWO] if kk + TWO < k else float32(0.0)
                x3 = a[row, kk + THREE] if kk + THREE < k else float32(0.0)
            a_next[s * FOUR] = x0
            a_next[s * FOUR + ONE] = x1
            a_next[s * FOUR + TWO] = x2
            a_next[s * FOUR + THREE] = x3
        for s in range(B_LOADS):
            kk, col = k_next + b_row + s * B_ROW_STRIDE, col0 + b_col
            x0 = x1 = x2 = x3 = float32(0.0)
            if INTERIOR:
                if k_next < k:
                    x0, x1, x2, x3 = load_float4(b, kk, col)
            elif vectorized:
                if kk < k and col < n:  # n % 4 == 0
                    x0, x1, x2, x3 = load_float4(b, kk, col)
            elif kk < k and col + THREE < n:
                x0, x1, x2, x3 = b[kk, col], b[kk, col + ONE], b[kk, col + TWO], b[kk, col + THREE]
            elif kk < k:
                x0 = b[kk, col] if col < n else float32(0.0)
                x1 = b[kk, col + ONE] if col + ONE < n else float32(0.0)
                x2 = b[kk, col + TWO] if col + TWO < n else float32(0.0)
                x3 = b[kk, col + THREE] if col + THREE < n else float32(0.0)
            b_next[s * FOUR] = x0
            b_next[s * FOUR + ONE] = x1
            b_next[s * FOUR + TWO] = x2
            b_next[s * FOUR + THREE] = x3

    @cuda.jit(device=True, **_INLINE)
    def store_tiles(a_tile, b_tile, a_next, b_next, tid, a_base, b_base):
        """Write the fetched tile from registers to shared memory, into the copy
        that starts at a_base and b_base: A transposed, B as is, four floats in
        one 128-bit store."""
        a_row, a_col = tid // A_VECTORS_PER_ROW, (tid % A_VECTORS_PER_ROW) * FOUR
        b_row, b_col = tid // B_VECTORS_PER_ROW, (tid % B_VECTORS_PER_ROW) * FOUR
        for s in range(A_LOADS):
            r = a_base + a_row + s * A_ROW_STRIDE
            a_tile[a_col * BM + r] = a_next[s * FOUR]
            a_tile[(a_col + ONE) * BM + r] = a_next[s * FOUR + ONE]
            a_tile[(a_col + TWO) * BM + r] = a_next[s * FOUR + TWO]
            a_tile[(a_col + THREE) * BM + r] = a_next[s * FOUR + THREE]
        for s in range(B_LOADS):
            r = b_row + s * B_ROW_STRIDE
            store_float4_flat(b_tile, b_base + r * BN + b_col, b_next[s * FOUR],
                              b_next[s * FOUR + ONE], b_next[s * FOUR + TWO],
                              b_next[s * FOUR + THREE])

    return fetch_tiles, store_tiles, 4 * a_loads, 4 * b_loads


def _make_unrolled_steps(multiply_step, count: int):
    """A device function doing `count` consecutive steps of the dot product
    (dot, dot + 1, ...; `count` in UNROLLS), written out: each doubling calls
    the one before twice, inlined, down to one step. (Each has its own name
    for its offset: the course's source checks want one value per name. So
    the five doublings are written out, deliberately alike, rather than made
    by one factory in a loop, whose copies would share their names.)"""
    TWO, FOUR, EIGHT, SIXTEEN = _u(2, 4, 8, 16)

    @cuda.jit(device=True, **_INLINE)
    def steps2(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot + ONE, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps4(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps2(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps2(a_tile, b_tile, acc, a_frag, b_frag, dot + TWO, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps8(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps4(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps4(a_tile, b_tile, acc, a_frag, b_frag, dot + FOUR, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps16(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps8(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps8(a_tile, b_tile, acc, a_frag, b_frag, dot + EIGHT, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps32(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps16(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps16(a_tile, b_tile, acc, a_frag, b_frag, dot + SIXTEEN, p, q, a_base, b_base)

    return {1: multiply_step, 2: steps2, 4: steps4, 8: steps8, 16: steps16,
            32: steps32}[count]


def _make_multiply_tile(multiply_step, bk: int, unroll: int):
    """A device function doing all bk steps of a tile's dot product, one
    `multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)`
    per step, written out `unroll` steps per pass (see (5) above; unroll == bk
    writes the whole tile out, with no loop left); p and q say where the
    calling thread works (each level has its own meaning for them)."""
    BK, STEP = _u(bk, unroll)
    WHOLE = unroll == bk
    steps = _make_unrolled_steps(multiply_step, unroll)

    @cuda.jit(device=True, **_INLINE)
    def multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, a_base, b_base):
        """All BK steps of the dot product on the copy of the tiles at a_base, b_base."""
        if WHOLE:
            steps(a_tile, b_tile, acc, a_frag, b_frag, ZERO, p, q, a_base, b_base)
        else:
            dot = ZERO
            while dot < BK:
                steps(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
                dot += STEP

    return multiply_tile


def _check_unroll(unroll, bk: int) -> None:
    if unroll not in UNROLLS or bk % unroll:
        raise ValueError(f"unroll must be one of {', '.join(map(str, UNROLLS))} and divide bk "
                         f"({bk}), got {unroll!r}")


def _steps_per_pass(unroll, bk: int) -> int:
    """Steps of the dot loop a kernel writes out per pass: `unroll` (None: the
    module's DOT_UNROLL; "tile": all bk of them), checked."""
    unroll = DOT_UNROLL if unroll is None else unroll
    if unroll == "tile":
        unroll = bk
    elif unroll == DOT_UNROLL and isinstance(unroll, int) and bk % unroll:
        unroll = 1  # the module's choice, where it does not divide the tile's depth
    _check_unroll(unroll, bk)
    return unroll


def _register_cap(max_registers, threads: int, outputs: int, fragments: int,
                  split=False) -> dict:
    """cuda.jit's keyword capping registers per thread: `max_registers` if it is
    a number, none if None, and with "auto" (see (7) above) the registers that
    let two blocks of `threads` share an SM (65,536 of them), where a thread's
    `outputs` accumulators and `fragments` values of A and B leave room in
    that budget; otherwise none. For the stream-K kernel (`split` "stream"),
    "auto" is STREAM_REGISTERS. The simulator has no registers to cap."""
    if split == "stream" and max_registers == "auto":
        max_registers = STREAM_REGISTERS
    if max_registers == "auto":
        two_blocks = min(255, REGISTERS_PER_SM // (2 * threads)) // 8 * 8
        max_registers = two_blocks if outputs + fragments + REGISTER_ROOM <= two_blocks else None
    elif max_registers is not None and (isinstance(max_registers, bool) or
                                        not isinstance(max_registers, int) or
                                        not 32 <= max_registers <= 255):
        raise ValueError(f"max_registers must be None, 'auto' or a whole number from 32 to 255, "
                         f"got {max_registers!r}")
    return {"max_registers": max_registers} if max_registers and on_gpu() else {}


def _make_k_loop(fetch_tiles, store_tiles, multiply_tile, bk: int, a_elements: int,
                 b_elements: int, double: bool):
    """The walk along K shared by levels 5-7: a device function that fetches each
    tile into registers, multiplies the one fetched a step earlier, and stores
    the new one to shared memory; with `double`, into two copies of the tiles
    (A's copies a_elements apart, B's b_elements), one barrier per step (see
    (4) and (6) above). It walks columns k_start <= kk < k_end of A (rows of
    B): the whole of K (0 to k), or one slice of it for split-K."""
    BK, A_ELEMENTS, B_ELEMENTS = _u(bk, a_elements, b_elements)
    DOUBLE = double

    @cuda.jit(device=True, **_INLINE)
    def walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, p, q):
        write = ZERO  # which copy of the tiles this step stores into (always 0 without DOUBLE)
        # One step more than there are tiles: step s fetches tile s (zeros past
        # k_end) and multiplies tile s - 1, already in shared memory.
        for k_next in range(k_start, k_end + BK, BK):
            fetch_tiles(a, b, a_next, b_next, tid, row0, col0, k_next, m, n, k_end)
            # Multiply the tile fetched one step earlier (in the copy the last
            # step stored), then store this one. With two copies each branch
            # names its copy by a constant, which the compiler folds into the
            # shared-memory addresses.
            if k_next > k_start:
                if DOUBLE and write == ZERO:
                    multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, A_ELEMENTS,
                                  B_ELEMENTS)
                else:
                    multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, ZERO, ZERO)
            if not DOUBLE:
                cuda.syncthreads()  # nobody overwrites a tile while others still read it
            if DOUBLE and write == ONE:
                store_tiles(a_tile, b_tile, a_next, b_next, tid, A_ELEMENTS, B_ELEMENTS)
            else:
                store_tiles(a_tile, b_tile, a_next, b_next, tid, ZERO, ZERO)
            cuda.syncthreads()
            if DOUBLE:
                write = ONE - write

    return walk_k


def _make_store_four(vectorized: bool | str):
    """A device function putting four neighbouring outputs of a thread into C,
    shared by levels 5-7: `store_four(c, acc, base, row, col, n, add)` writes
    acc[base] ... acc[base + 3] to columns col ... col + 3 of row `row`, those
    inside C (n columns). Stored four floats in one 128-bit store where rows
    allow (`vectorized` True), two 64-bit stores where they allow that
    (`vectorized` "pairs": n even, col even), as the four's address allows
    (`vectorized` "peeled", col a multiple of 4: one 128-bit store where it
    starts on 16 bytes, two 64-bit ones on 8, else a float, a 64-bit store
    and a float; four floats at C's right edge), one at a time otherwise; or,
    with `add` (split-K,
    and stream-K's pieces of a tile), added with float32 atomic adds into a C
    zeroed before the launch, since several blocks add to the same outputs.
    The kernels pass `add` as a constant where they can (whole K: False,
    split-K: True), and the compiler keeps only that branch."""
    TWO, THREE, FOUR, EIGHT, SIXTEEN = _u(2, 3, 4, 8, 16)
    PAIRED, PEELED = vectorized == "pairs", vectorized == "peeled"
    vectorized = vectorized is True

    @cuda.jit(device=True, **_INLINE)
    def store_four(c, acc, base, row, col, n, add):
        if add:
            for q in range(FOUR):
                if col + q < n:
                    cuda.atomic.add(c, (row, col + q), acc[base + q])
        elif PAIRED:  # n even: each pair is all in or all out
            if col < n:
                store_float2(c, row, col, acc[base], acc[base + ONE])
            if col + TWO < n:
                store_float2(c, row, col + TWO, acc[base + TWO], acc[base + THREE])
        elif vectorized:
            if col < n:  # n % 4 == 0: the four are all in or all out
                store_float4(c, row, col, acc[base], acc[base + ONE],
                             acc[base + TWO], acc[base + THREE])
        elif PEELED and col + THREE < n:
            at = matrix_address(c, row, col) % SIXTEEN  # the same for the row's fours
            if at == ZERO:
                store_float4(c, row, col, acc[base], acc[base + ONE],
                             acc[base + TWO], acc[base + THREE])
            elif at == EIGHT:
                store_float2(c, row, col, acc[base], acc[base + ONE])
                store_float2(c, row, col + TWO, acc[base + TWO], acc[base + THREE])
            else:  # 4 or 12 bytes in: the middle two start on 8
                c[row, col] = acc[base]
                store_float2(c, row, col + ONE, acc[base + ONE], acc[base + TWO])
                c[row, col + THREE] = acc[base + THREE]
        else:
            for q in range(FOUR):
                if col + q < n:
                    c[row, col + q] = acc[base + q]

    return store_four


def _make_multiply_block(place_thread, walk_k, write_outputs, bm: int, bn: int,
                         accumulators: int, a_fragment: int, b_fragment: int, a_staged: int,
                         b_staged: int):
    """The whole work of one block of levels 5-7, given its shared tiles: a
    device function `multiply_block(a, b, c, a_tile, b_tile, tile_row,
    tile_col, k_start, k_end, add)` that computes the bm x bn tile of C in
    that row and column of tiles over columns k_start <= kk < k_end of A (the
    whole of K, one split-K slice, or one stream-K piece) and writes it, or
    with `add` adds it into C (`_make_store_four`). Each level
    brings its own pieces: `place_thread(tid)` says where a thread works in the
    tile, as the two numbers (p, q) its `walk_k` (from `_make_k_loop`) and
    `write_outputs(c, acc, row0, col0, p, q, m, n, add, b_tile)` take (b_tile:
    B's shared tile, free once the walk is done); each thread keeps
    `accumulators` outputs, fragments of `a_fragment` values of A and
    `b_fragment` of B, and the next tiles in `a_staged` and `b_staged`
    registers. The kernels themselves, one per level and kind (whole K,
    split-K or stream-K), only declare the shared tiles and say which part of K is theirs."""
    BM, BN = _u(bm, bn)

    @cuda.jit(device=True, **_INLINE)
    def multiply_block(a, b, c, a_tile, b_tile, tile_row, tile_col, k_start, k_end, add):
        # C's columns bound the work: B may be wider, padded to a multiple of 4
        # for 128-bit loads (entry_point's padded plans; see shape_model).
        m, n = uint64(a.shape[0]), uint64(c.shape[1])
        tid = uint64(cuda.threadIdx.x)
        row0 = tile_row * BM  # first row of C this block computes
        col0 = tile_col * BN
        p, q = place_thread(tid)
        acc = cuda.local.array(accumulators, float32)
        a_frag = cuda.local.array(a_fragment, float32)
        b_frag = cuda.local.array(b_fragment, float32)
        a_next = cuda.local.array(a_staged, float32)
        b_next = cuda.local.array(b_staged, float32)
        for i in range(accumulators):
            acc[i] = 0.0
        walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, p, q)
        write_outputs(c, acc, row0, col0, p, q, m, n, add, b_tile)

    return multiply_block


def _make_kernel(multiply_block, a_shared: int, b_shared: int, cap: dict, name: str,
                 split):
    """The kernel of levels 5-7 around `multiply_block` (from
    `_make_multiply_block`): it declares the shared tiles (`a_shared` and
    `b_shared` floats, 16-byte aligned) and gives the block its tiles and its
    part of K. kernel(a, b, c) walks the whole of K; with `split` True,
    kernel(a, b, c, chunk) walks one slice of it (see "Split-K" in split_k);
    with `split` "stream", kernel(a, b, c, tiles_across, steps, step, total,
    workers) walks a stream-K share (see "Stream-K" in split_k). `cap` is
    cuda.jit's register cap (`_register_cap`). The kernel is called `name`
    (`name` + "_split" or "_stream"): each level names its own kernels, and
    these are the names profiles and PTX show."""

    def whole_k(a, b, c):
        # A's tile transposed (a_tile[kk * BM + r]), B's as is (b_tile[kk * BN + col]);
        # 16-byte aligned so that four neighbours can be read in one 128-bit load.
        # With double buffering, two copies of each, one after the other.
        a_tile = cuda.shared.array(a_shared, float32, alignment=SHARED_ALIGNMENT)
        b_tile = cuda.shared.array(b_shared, float32, alignment=SHARED_ALIGNMENT)
        multiply_block(a, b, c, a_tile, b_tile, uint64(cuda.blockIdx.y),
                       uint64(cuda.blockIdx.x), ZERO, uint64(a.shape[1]), False)

    def one_slice_of_k(a, b, c, chunk):
        # The same block, over one slice of K: columns z*chunk ... of A for
        # blockIdx.z = z (chunk a multiple of 16, the last slice ragged); its
        # outputs are added into C (zeroed first) with atomic adds.
        a_tile = cuda.shared.array(a_shared, float32, alignment=SHARED_ALIGNMENT)
        b_tile = cuda.shared.array(b_shared, float32, alignment=SHARED_ALIGNMENT)
        k_start = uint64(cuda.blockIdx.z) * uint64(chunk)
        k_end = min(uint64(a.shape[1]), k_start + uint64(chunk))
        multiply_block(a, b, c, a_tile, b_tile, uint64(cuda.blockIdx.y),
                       uint64(cuda.blockIdx.x), k_start, k_end, True)

    def stream_share(a, b, c, tiles_across, steps, step, total, workers):
        # Worker w (one block) takes steps w*total/workers up to
        # (w+1)*total/workers of all the tiles' steps of K, laid end to end
        # (tile t's are t*steps ... (t+1)*steps - 1, each `step` columns of
        # K): the end of one tile, whole tiles, the start of another. Each
        # piece of a tile is one walk along its part of K, added into C
        # (zeroed first) with atomic adds, as split-K's slices are; a whole
        # tile is stored.
        a_tile = cuda.shared.array(a_shared, float32, alignment=SHARED_ALIGNMENT)
        b_tile = cuda.shared.array(b_shared, float32, alignment=SHARED_ALIGNMENT)
        worker = uint64(cuda.blockIdx.x)
        begin = worker * total // workers  # the run's first step
        end = (worker + ONE) * total // workers  # and the step after its last
        tile = begin // steps
        while tile * steps < end:
            first = tile * steps  # the tile's first step
            start = max(first, begin)  # its piece's
            stop = min(first + steps, end)
            # A piece that is the whole tile is stored; others are added.
            multiply_block(a, b, c, a_tile, b_tile, tile // tiles_across, tile % tiles_across,
                           (start - first) * step, min(uint64(a.shape[1]), (stop - first) * step),
                           start > first or stop < first + steps)
            tile += ONE

    kernel, suffix = {False: (whole_k, ""), True: (one_slice_of_k, "_split"),
                      "stream": (stream_share, "_stream")}[split]
    # Named before it is compiled: Numba takes the kernel's name in the PTX
    # (and in profiles) from the Python function's.
    kernel.__name__ = kernel.__qualname__ = name + suffix
    return cuda.jit(**cap)(kernel)
