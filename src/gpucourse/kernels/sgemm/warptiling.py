"""Level 7: warp tiling, a level of the hierarchy between the block and the
thread.

What it adds over level 6: the block's tile is cut into one tile per warp,
and each thread computes several small patches spread over its warp's tile,
so that the values it loads from shared memory serve all the patches of
their row or column, and a warp's shared loads stay within its own tile.
Everything else (128-bit loads through registers, A transposed, two copies
of the tiles, the dot loop written out) comes from ``building_blocks``, as
level 6's does. Measured on the H100 at 4096^3
(benchmarks/results/sgemm_level7-h100-2026-11-26.json, cuBLAS 51.6 TFLOP/s):
the worklog's kernel 10 (WARP_TILE_WORKLOG) 45.70 TFLOP/s (88.5% of
cuBLAS); 128 x 256 tiles in eight warps of 64 x 64, 48.23 TFLOP/s (93.4%),
against level 6's 47.46 (91.9%) in the same run. That one won across the
sweep's shapes, and is level 7's default (WARP_TILE_DEFAULT; config.py says
how it was chosen).
"""

from __future__ import annotations

from gpucourse.device import cuda  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm.building_blocks import (_make_k_loop, _make_kernel,
                                                     _make_multiply_block, _make_multiply_tile,
                                                     _make_store_four, _make_tile_loaders,
                                                     _register_cap, _steps_per_pass)
from gpucourse.kernels.sgemm.config import ONE, WARP_SIZE, ZERO, _INLINE, WarpTileConfig, _u
from gpucourse.kernels._vector_load import load_float4_flat


# -----------------------------------------------------------------------------
# Level 7: warp tiling.
# At level 6 a block's threads are laid out over its tile of C without regard
# to warps. Level 7 adds a level to the hierarchy, as the worklog's kernel 10
# does: the block's bm x bn tile is cut into one wm x wn tile per warp, and the
# warp's 32 threads cover a (wm / wm_iter) x (wn / wn_iter) piece of it with
# one tm x tn patch each, then repeat that wm_iter times down and wn_iter
# times across. So a thread computes wm_iter x wn_iter small patches, spread
# over its warp's tile:
#
#     rows    warp_row*WM + wm*WSUB_M + thread_row*TM + 0..TM-1   (wm < WM_ITER)
#     columns warp_col*WN + wn*WSUB_N + thread_col*TN + 0..TN-1   (wn < WN_ITER)
#
# Three things follow. (1) At each step of K a thread loads WM_ITER*TM values
# of A and WN_ITER*TN of B from shared memory and does WM_ITER*WN_ITER*TM*TN
# FMAs with them: each value serves all the patches of its row (or column) of
# patches. (2) A warp's reads of shared memory stay inside its own wm x wn
# tile: at one step its 32 lanes read a few neighbouring 16-byte vectors of
# A's row and of B's row, many lanes the same one (a broadcast), so a warp's
# 128-bit load takes one pass of shared memory, or two where the vectors
# span more than 128 bytes (A with tm = 8: eight lanes' rows, 32 bytes apart).
# (3) The layout, not the hardware's thread order, decides which outputs
# share loads, so tile sizes can be tuned for the warp (the unit that
# actually executes) and for the block separately.
#
# Everything else is level 5's: 128-bit global loads of the next tile into
# registers while the current one is multiplied (`_make_tile_loaders`, with
# the same contract on aligned rows and the same scalar fallback), A's tile
# stored transposed, two copies of the tiles and one barrier per step of K
# (`_make_k_loop`, always double-buffered here), the dot loop written out
# DOT_UNROLL steps per pass (`_make_multiply_tile`) and 128-bit stores of C.


def _make_warp_tiled_kernel(config: WarpTileConfig, vectorized: bool, unroll: int = None,
                            split: bool | str = False, max_registers="auto",
                            interior: bool = False):
    """Level 7's kernel for `config`: kernel(a, b, c), or with `split`,
    kernel(a, b, c, chunk) for single-launch split-K, or with `split`
    "stream" the stream-K kernel (as level 6's)."""
    unroll = _steps_per_pass(unroll, config.bk)
    bm, bn, bk, threads = config.bm, config.bn, config.bk, config.threads
    wm_iter, wn_iter, tm, tn = config.wm_iter, config.wn_iter, config.tm, config.tn
    cap = _register_cap(max_registers, threads, wm_iter * wn_iter * tm * tn,
                        wm_iter * tm + wn_iter * tn, split)
    a_elements, b_elements = bm * bk, bk * bn
    a_shared, b_shared = 2 * a_elements, 2 * b_elements  # two copies (double buffering)
    accumulators = wm_iter * wn_iter * tm * tn
    a_fragment, b_fragment = wm_iter * tm, wn_iter * tn
    BM, BN, WM, WN, TM, TN = _u(bm, bn, config.wm, config.wn, tm, tn)
    WM_ITER, WN_ITER = _u(wm_iter, wn_iter)
    WSUB_M, WSUB_N = _u(config.wm // wm_iter, config.wn // wn_iter)  # one pass of the warp
    THREADS_ACROSS = _u(config.wn // wn_iter // tn)  # lanes across one pass
    WARPS_ACROSS = _u(bn // config.wn)
    ROW_OUTPUTS = _u(wn_iter * tn)  # a thread's accumulators per row of its outputs
    LANES = _u(WARP_SIZE)
    TWO, THREE, FOUR = _u(2, 3, 4)
    fetch_tiles, store_tiles, a_staged, b_staged = _make_tile_loaders(bm, bn, bk, threads,
                                                                      bool(vectorized), interior)

    @cuda.jit(device=True, **_INLINE)
    def multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, a_offset, b_offset, a_base,
                      b_base):
        # The thread's WM_ITER*TM values of A (TM at a time, one run per pass
        # down) and WN_ITER*TN values of B at step `dot`, four per 128-bit load,
        # from the copy of the tiles at a_base and b_base; a_offset and b_offset
        # are where its first patch starts in the block's tile. Then every patch.
        # (A's loop and B's are alike by design, a deliberate variant: the same
        # four-wide loads, down A's fragment and across B's.)
        for wm in range(WM_ITER):
            for i in range(ZERO, TM, FOUR):
                x0, x1, x2, x3 = load_float4_flat(
                    a_tile, a_base + dot * BM + a_offset + wm * WSUB_M + i)
                a_frag[wm * TM + i] = x0
                a_frag[wm * TM + i + ONE] = x1
                a_frag[wm * TM + i + TWO] = x2
                a_frag[wm * TM + i + THREE] = x3
        for wn in range(WN_ITER):
            for j in range(ZERO, TN, FOUR):
                x0, x1, x2, x3 = load_float4_flat(
                    b_tile, b_base + dot * BN + b_offset + wn * WSUB_N + j)
                b_frag[wn * TN + j] = x0
                b_frag[wn * TN + j + ONE] = x1
                b_frag[wn * TN + j + TWO] = x2
                b_frag[wn * TN + j + THREE] = x3
        # acc holds the thread's outputs row by row: output row wm*TM + i,
        # column wn*TN + j (in the thread's own numbering) at index
        # (wm*TM + i) * ROW_OUTPUTS + wn*TN + j.
        for r in range(WM_ITER * TM):
            for s in range(WN_ITER * TN):
                acc[r * ROW_OUTPUTS + s] += a_frag[r] * b_frag[s]

    walk_k = _make_k_loop(fetch_tiles, store_tiles, _make_multiply_tile(multiply_step, bk, unroll),
                          bk, a_elements, b_elements, True)

    @cuda.jit(device=True, **_INLINE)
    def place_thread(tid):
        # Which warp tile, and where in one pass of it this lane's patch lies.
        warp, lane = tid // LANES, tid % LANES
        warp_row, warp_col = warp // WARPS_ACROSS, warp % WARPS_ACROSS
        thread_row, thread_col = lane // THREADS_ACROSS, lane % THREADS_ACROSS
        a_offset = warp_row * WM + thread_row * TM  # the first patch's rows in the block tile
        b_offset = warp_col * WN + thread_col * TN  # ... and its columns
        return a_offset, b_offset

    store_four = _make_store_four(vectorized is True)

    @cuda.jit(device=True, **_INLINE)
    def write_patches(c, acc, row0, col0, a_offset, b_offset, m, n, add, b_tile):
        # Each patch's rows of C, four columns at a time; a patch that hangs
        # over the edge writes only what is inside.
        for wm in range(WM_ITER):
            for i in range(TM):
                row = row0 + a_offset + wm * WSUB_M + i
                if row < m:
                    for wn in range(WN_ITER):
                        for j in range(ZERO, TN, FOUR):
                            col = col0 + b_offset + wn * WSUB_N + j
                            store_four(c, acc, (wm * TM + i) * ROW_OUTPUTS + wn * TN + j, row,
                                       col, n, add)

    multiply_block = _make_multiply_block(place_thread, walk_k, write_patches, bm, bn,
                                          accumulators, a_fragment, b_fragment, a_staged,
                                          b_staged)

    return _make_kernel(multiply_block, a_shared, b_shared, cap, "sgemm_warp_tiled", split)
