"""The backward pass of FlashAttention, in its plainest form (FlashAttention-2's order).

The forward pass kept only O and the log-sum-exp L of each row of scaled scores.
Given dO, the gradient of the loss with respect to O, the backward pass needs
dQ, dK and dV without ever storing the N x N matrix of probabilities. It
recomputes each probability from the saved L, P_ij = exp(s q_i . k_j - L_i)
(s the scale), and uses the identities of the softmax's gradient (Dao 2023,
Algorithm 2):

    D_i   = sum_c dO_ic O_ic                   (one pre-pass, a number per row)
    dV_j  = sum_i P_ij dO_i
    dP_ij = dO_i . v_j
    dS_ij = P_ij (dP_ij - D_i)
    dK_j  = s sum_i dS_ij q_i
    dQ_i  = s sum_j dS_ij k_j

Three kernels, no atomics, so the result does not depend on the order blocks
run in:

1. ``_row_dot_kernel``: D, one thread per row.
2. the dK-dV kernel: a block per tile of BLOCK keys of a head, one thread per
   key row, holding k_j, v_j and its dK_j and dV_j accumulators in registers;
   it streams the queries' rows (q, dO, L and D) through shared memory a tile
   at a time. Under a causal mask it starts at the first query tile that can
   see its keys.
3. the dQ kernel: a block per tile of BLOCK queries, one thread per query row,
   holding q_i, dO_i and its dQ_i accumulator; it streams K and V through
   shared memory and, under a causal mask, stops at the diagonal.

Each thread does its row's work alone (one row per thread, no register
tiling): the forward kernel's tuned tiling is the next step, this version is
the reference its speed is measured against. fp32 throughout.
"""

from __future__ import annotations

import ctypes
import math
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels import attention as A
from gpucourse.kernels.launch import (core_launch, flat_argument, launch_config, launchable,
                                       matrix_argument)

# Rows per block (one thread each) in both kernels.
BLOCK = 32


@cuda.jit
def _row_dot_kernel(out, dout, delta):
    """delta[r] = sum_c dout[r, c] * out[r, c], one thread per row of (rows, head_dim),
    in float32 whatever the element type of out and dout."""
    r = cuda.grid(1)
    if r < delta.shape[0]:
        total = np.float32(0.0)
        for c in range(out.shape[1]):
            total += np.float32(dout[r, c]) * np.float32(out[r, c])
        delta[r] = total


@lru_cache(maxsize=None)
def _kernels(head_dim: int, causal: bool):
    """The dK-dV and dQ kernels for one head dimension (their register arrays are
    head_dim long) and mask. Arrays are (heads, seq, head_dim) and (heads, seq)."""
    D = head_dim
    T = BLOCK

    @cuda.jit
    def dkdv_kernel(q, k, v, dout, lse, delta, dk, dv, scale):
        head = cuda.blockIdx.y
        key_tile = cuda.blockIdx.x
        t = cuda.threadIdx.x
        seq = q.shape[1]  # queries
        key_seq = k.shape[1]  # keys (and values)
        j = key_tile * T + t
        q_s = cuda.shared.array((T, D), np.float32)
        do_s = cuda.shared.array((T, D), np.float32)
        lse_s = cuda.shared.array(T, np.float32)
        delta_s = cuda.shared.array(T, np.float32)
        k_j = cuda.local.array(D, np.float32)
        v_j = cuda.local.array(D, np.float32)
        dk_j = cuda.local.array(D, np.float32)
        dv_j = cuda.local.array(D, np.float32)
        for c in range(D):
            k_j[c] = k[head, j, c] if j < key_seq else np.float32(0.0)
            v_j[c] = v[head, j, c] if j < key_seq else np.float32(0.0)
            dk_j[c] = np.float32(0.0)
            dv_j[c] = np.float32(0.0)
        # Under the mask, query i sees key j only when i >= j: the query tiles
        # before this key tile see none of its keys.
        first = key_tile if causal else 0
        for query_tile in range(first, (seq + T - 1) // T):
            i = query_tile * T + t
            for c in range(D):  # each thread loads one query row of the tile
                q_s[t, c] = q[head, i, c] if i < seq else np.float32(0.0)
                do_s[t, c] = dout[head, i, c] if i < seq else np.float32(0.0)
            lse_s[t] = lse[head, i] if i < seq else np.float32(0.0)
            delta_s[t] = delta[head, i] if i < seq else np.float32(0.0)
            cuda.syncthreads()
            if j < key_seq:
                for r in range(T):
                    row = query_tile * T + r
                    if row < seq and not (causal and row < j):
                        score = np.float32(0.0)
                        dp = np.float32(0.0)
                        for c in range(D):
                            score += q_s[r, c] * k_j[c]
                            dp += do_s[r, c] * v_j[c]
                        p = math.exp(score * scale - lse_s[r])
                        ds = p * (dp - delta_s[r])
                        for c in range(D):
                            dv_j[c] += p * do_s[r, c]
                            dk_j[c] += ds * q_s[r, c]
            cuda.syncthreads()
        if j < key_seq:
            for c in range(D):
                dk[head, j, c] = dk_j[c] * scale
                dv[head, j, c] = dv_j[c]

    @cuda.jit
    def dq_kernel(q, k, v, dout, lse, delta, dq, scale):
        head = cuda.blockIdx.y
        query_tile = cuda.blockIdx.x
        t = cuda.threadIdx.x
        seq = q.shape[1]  # queries
        key_seq = k.shape[1]  # keys (and values)
        i = query_tile * T + t
        k_s = cuda.shared.array((T, D), np.float32)
        v_s = cuda.shared.array((T, D), np.float32)
        q_i = cuda.local.array(D, np.float32)
        do_i = cuda.local.array(D, np.float32)
        dq_i = cuda.local.array(D, np.float32)
        for c in range(D):
            q_i[c] = q[head, i, c] if i < seq else np.float32(0.0)
            do_i[c] = dout[head, i, c] if i < seq else np.float32(0.0)
            dq_i[c] = np.float32(0.0)
        lse_i = lse[head, i] if i < seq else np.float32(0.0)
        delta_i = delta[head, i] if i < seq else np.float32(0.0)
        # Under the mask the key tiles after this query tile are all masked.
        last = (key_seq + T - 1) // T
        if causal:
            last = min(last, query_tile + 1)
        for key_tile in range(last):
            j = key_tile * T + t
            for c in range(D):  # each thread loads one key row and one value row
                k_s[t, c] = k[head, j, c] if j < key_seq else np.float32(0.0)
                v_s[t, c] = v[head, j, c] if j < key_seq else np.float32(0.0)
            cuda.syncthreads()
            if i < seq:
                for r in range(T):
                    key = key_tile * T + r
                    if key < key_seq and not (causal and key > i):
                        score = np.float32(0.0)
                        dp = np.float32(0.0)
                        for c in range(D):
                            score += q_i[c] * k_s[r, c]
                            dp += do_i[c] * v_s[r, c]
                        ds = math.exp(score * scale - lse_i) * (dp - delta_i)
                        for c in range(D):
                            dq_i[c] += ds * k_s[r, c]
            cuda.syncthreads()
        if i < seq:
            for c in range(D):
                dq[head, i, c] = dq_i[c] * scale

    return dkdv_kernel, dq_kernel


# -----------------------------------------------------------------------------
# Version 2: tiles of queries and keys, a patch of each product per thread
#
# Version 1 gives each thread a whole row and walks the other operand through
# shared memory one element per multiply-add: one shared load per FMA, and
# 4 x head_dim registers of row state (it spills at head_dim 128). Version 2 is
# FlashAttention-2's block structure with SGEMM's register tiling (chapter 8):
# a block holds a tile of BK keys (and values) and streams tiles of BQ queries;
# for each pair of tiles the block computes the scores S and dP = dO V^T as
# small matrix products, each thread an SQ x SK patch of both, writes the
# probabilities P and dS = P (dP - D) to shared memory, then adds P^T dO to dV
# and dS^T Q to dK, each thread a VK x VC patch of both. The dQ kernel is the
# mirror image: a block holds a query tile and streams key tiles. Shared rows
# are padded by one float, so that threads reading different rows of one
# column hit different banks.
#
# Per head dim: (BQ = BK, threads, SQ, SK, VK, VC), chosen so that the static
# shared memory stays under 48 KiB: six tiles of BQ x (head_dim + 1) and
# BQ x (BK + 1) floats.
# d64 and d128 are the fastest of 7 and 5 candidates timed on an H100
# (benchmarks/NOTES.md); d16 and d32 follow d64's shape.
TILED_CONFIGS = {16: (32, 128, 4, 2, 2, 2), 32: (32, 128, 4, 2, 2, 4),
                 64: (32, 128, 4, 2, 4, 4), 128: (16, 128, 2, 1, 2, 8)}


def check_tiled_config(head_dim: int, config: tuple) -> tuple:
    """(BQ = BK, threads, SQ, SK, VK, VC) if the patches tile the block's work
    exactly and the static shared memory fits in 48 KiB; else ValueError."""
    if len(config) != 6 or not all(isinstance(n, int) and n >= 1 for n in config):
        raise ValueError(f"config must be six whole numbers (tile, threads, SQ, SK, VK, VC), "
                         f"got {config!r}")
    b, nt, sq, sk, vk, vc = config
    if b % sq or b % sk or b % vk or head_dim % vc:
        raise ValueError(f"SQ, SK and VK must divide the tile {b}, VC the head dim {head_dim}; "
                         f"got {config}")
    if (b // sq) * (b // sk) != nt or (b // vk) * (head_dim // vc) != nt:
        raise ValueError(f"the score patches ({b // sq} x {b // sk}) and the output patches "
                         f"({b // vk} x {head_dim // vc}) must each take all {nt} threads; "
                         f"got {config}")
    shared = 4 * (4 * b * (head_dim + 1) + 2 * b * (b + 1) + 2 * b)
    if shared > A.STATIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"config {config} needs {shared} bytes of shared memory, over the "
                         f"{A.STATIC_SHARED_LIMIT_BYTES} a block may have statically")
    return tuple(config)


@lru_cache(maxsize=None)
def _tiled_kernels(head_dim: int, causal: bool, config: tuple | None = None):
    """Version 2's dK-dV and dQ kernels for one head dimension and mask (and tile
    configuration, default TILED_CONFIGS[head_dim]), with their block size
    (threads) and tile (rows per block)."""
    config = check_tiled_config(head_dim, config or TILED_CONFIGS[head_dim])
    B, NT, SQ, SK, VK, VC = config
    D = head_dim
    DP = D + 1  # padded row of a (rows, head_dim) tile
    BP = B + 1  # padded row of a (queries, keys) tile
    TX = B // SK  # threads across the keys of a score patch
    GX = D // VC  # threads across the columns of an output patch
    TILE = B * D

    @cuda.jit(device=True, inline=True)
    def scores(a_s, b_s, c_s, d_s, sy, sx, s_acc, p_acc):
        """s_acc = a b^T and p_acc = c d^T on this thread's SQ x SK patch."""
        for x in range(SQ):
            for y in range(SK):
                s_acc[x, y] = np.float32(0.0)
                p_acc[x, y] = np.float32(0.0)
        for c in range(D):
            for x in range(SQ):
                a = a_s[sy * SQ + x, c]
                cc = c_s[sy * SQ + x, c]
                for y in range(SK):
                    s_acc[x, y] += a * b_s[sx * SK + y, c]
                    p_acc[x, y] += cc * d_s[sx * SK + y, c]

    @cuda.jit(device=True, inline=True)
    def load_rows(x, y, head, row0, seq, x_s, y_s, t):
        """Rows row0 .. row0 + B of x and y into shared tiles (zeros past seq),
        the block's threads in turn along each row (coalesced reads)."""
        for idx in range(t, TILE, NT):
            r = idx // D
            c = idx - r * D
            row = row0 + r
            x_s[r, c] = x[head, row, c] if row < seq else np.float32(0.0)
            y_s[r, c] = y[head, row, c] if row < seq else np.float32(0.0)

    @cuda.jit(device=True, inline=True)
    def load_row_numbers(lse, delta, head, row0, seq, l_s, d_s, t):
        """The log-sum-exp and D of rows row0 .. row0 + B into shared memory."""
        for r in range(t, B, NT):
            row = row0 + r
            l_s[r] = lse[head, row] if row < seq else np.float32(0.0)
            d_s[r] = delta[head, row] if row < seq else np.float32(0.0)

    def probabilities(keep_p):
        @cuda.jit(device=True, inline=True)
        def write(s_acc, p_acc, l_s, d_s, scale, sy, sx, row0, key0, seq, key_seq, p_s, ds_s):
            """P (if keep_p) and dS = P (dP - D) of this thread's patch into shared
            memory: zero where the mask hides the pair, or past the queries (seq)
            or the keys (key_seq)."""
            for x in range(SQ):
                r = sy * SQ + x
                row = row0 + r
                for y in range(SK):
                    j = sx * SK + y
                    key = key0 + j
                    p = np.float32(0.0)
                    ds = np.float32(0.0)
                    if row < seq and key < key_seq and not (causal and row < key):
                        p = math.exp(s_acc[x, y] * scale - l_s[r])
                        ds = p * (p_acc[x, y] - d_s[r])
                    if keep_p:
                        p_s[r, j] = p
                    ds_s[r, j] = ds
        return write

    p_and_ds = probabilities(True)
    ds_only = probabilities(False)

    @cuda.jit
    def dkdv_kernel(q, k, v, dout, lse, delta, dk, dv, scale):
        head = cuda.blockIdx.y
        key0 = cuda.blockIdx.x * B
        t = cuda.threadIdx.x
        seq = q.shape[1]  # queries
        key_seq = k.shape[1]  # keys (and values)
        k_s = cuda.shared.array((B, DP), np.float32)
        v_s = cuda.shared.array((B, DP), np.float32)
        q_s = cuda.shared.array((B, DP), np.float32)
        do_s = cuda.shared.array((B, DP), np.float32)
        p_s = cuda.shared.array((B, BP), np.float32)
        ds_s = cuda.shared.array((B, BP), np.float32)
        l_s = cuda.shared.array(B, np.float32)
        d_s = cuda.shared.array(B, np.float32)
        s_acc = cuda.local.array((SQ, SK), np.float32)
        p_acc = cuda.local.array((SQ, SK), np.float32)
        dk_acc = cuda.local.array((VK, VC), np.float32)
        dv_acc = cuda.local.array((VK, VC), np.float32)
        sy = t // TX
        sx = t - sy * TX
        oy = t // GX
        ox = t - oy * GX
        load_rows(k, v, head, key0, key_seq, k_s, v_s, t)
        for x in range(VK):
            for y in range(VC):
                dk_acc[x, y] = np.float32(0.0)
                dv_acc[x, y] = np.float32(0.0)
        # Under the mask, query tiles before this key tile see none of its keys.
        first = cuda.blockIdx.x if causal else 0
        for tile in range(first, (seq + B - 1) // B):
            row0 = tile * B
            cuda.syncthreads()  # the last tile's readers are done with q_s .. ds_s
            load_rows(q, dout, head, row0, seq, q_s, do_s, t)
            load_row_numbers(lse, delta, head, row0, seq, l_s, d_s, t)
            cuda.syncthreads()
            scores(q_s, k_s, do_s, v_s, sy, sx, s_acc, p_acc)
            p_and_ds(s_acc, p_acc, l_s, d_s, scale, sy, sx, row0, key0, seq, key_seq, p_s,
                     ds_s)
            cuda.syncthreads()
            for r in range(B):  # dV += P^T dO and dK += dS^T Q on this thread's patch
                for x in range(VK):
                    p = p_s[r, oy * VK + x]
                    ds = ds_s[r, oy * VK + x]
                    for y in range(VC):
                        dv_acc[x, y] += p * do_s[r, ox * VC + y]
                        dk_acc[x, y] += ds * q_s[r, ox * VC + y]
        for x in range(VK):
            key = key0 + oy * VK + x
            if key < key_seq:
                for y in range(VC):
                    dk[head, key, ox * VC + y] = dk_acc[x, y] * scale
                    dv[head, key, ox * VC + y] = dv_acc[x, y]

    @cuda.jit
    def dq_kernel(q, k, v, dout, lse, delta, dq, scale):
        head = cuda.blockIdx.y
        tile = cuda.blockIdx.x
        row0 = tile * B
        t = cuda.threadIdx.x
        seq = q.shape[1]  # queries
        key_seq = k.shape[1]  # keys (and values)
        q_s = cuda.shared.array((B, DP), np.float32)
        do_s = cuda.shared.array((B, DP), np.float32)
        k_s = cuda.shared.array((B, DP), np.float32)
        v_s = cuda.shared.array((B, DP), np.float32)
        ds_s = cuda.shared.array((B, BP), np.float32)
        l_s = cuda.shared.array(B, np.float32)
        d_s = cuda.shared.array(B, np.float32)
        s_acc = cuda.local.array((SQ, SK), np.float32)
        p_acc = cuda.local.array((SQ, SK), np.float32)
        dq_acc = cuda.local.array((VK, VC), np.float32)
        sy = t // TX
        sx = t - sy * TX
        oy = t // GX
        ox = t - oy * GX
        load_rows(q, dout, head, row0, seq, q_s, do_s, t)
        load_row_numbers(lse, delta, head, row0, seq, l_s, d_s, t)
        for x in range(VK):
            for y in range(VC):
                dq_acc[x, y] = np.float32(0.0)
        # Under the mask, the key tiles after this query tile are all hidden.
        last = (key_seq + B - 1) // B
        if causal:
            last = min(last, tile + 1)
        for key_tile in range(last):
            key0 = key_tile * B
            cuda.syncthreads()  # the last tile's readers are done with k_s, v_s, ds_s
            load_rows(k, v, head, key0, key_seq, k_s, v_s, t)
            cuda.syncthreads()
            scores(q_s, k_s, do_s, v_s, sy, sx, s_acc, p_acc)
            ds_only(s_acc, p_acc, l_s, d_s, scale, sy, sx, row0, key0, seq, key_seq, ds_s,
                    ds_s)
            cuda.syncthreads()
            for j in range(B):  # dQ += dS K on this thread's patch of rows and columns
                for x in range(VK):
                    ds = ds_s[oy * VK + x, j]
                    for y in range(VC):
                        dq_acc[x, y] += ds * k_s[j, ox * VC + y]
        for x in range(VK):
            row = row0 + oy * VK + x
            if row < seq:
                for y in range(VC):
                    dq[head, row, ox * VC + y] = dq_acc[x, y] * scale

    return dkdv_kernel, dq_kernel, NT, B



# -----------------------------------------------------------------------------
# Version 3: bigger tiles in dynamic shared memory, four floats per shared load
#
# Version 2 is held back by its shared memory: 48 KiB of static shared memory
# caps its tiles at 32 rows (16 at head dim 128), and its patches read shared
# memory one float at a time, about one load per multiply-add. Version 3 takes
# its tiles from dynamic shared memory (a block may opt in to far more than 48
# KiB on recent GPUs, as the forward kernel does), so tiles of 64 keys and 64
# queries fit, and it reads the tiles four floats at a time (ld.shared.v4.f32),
# the way chapter 8's level 5 reads its tiles:
#
# - S = Q K^T and dP = dO V^T: a thread's SQ x SK patch, its rows sy + NY x and
#   its keys sx + TX y (neighbouring threads on neighbouring rows), reading four
#   head-dim values of each row and key per load. Rows are padded by four
#   floats: the rows one quarter-warp reads then start four banks apart.
# - P and dS go to shared memory; dV += P^T dO and dK += dS^T Q take a VK x VC
#   patch per thread, VK neighbouring keys (one load of P gives four of them)
#   and VC columns in groups of four, GX * 4 apart (a warp's loads of a row of
#   dO or Q are then contiguous).
# - The dQ kernel stores dS transposed, so that dQ += dS K reads four
#   neighbouring queries of dS per load.
#
# The arrays are passed flat (an element's index is (row of all heads) * D +
# column), which is how the loads of four neighbours are written.
#
# Per head dim: (tile, threads, SQ, SK, VK, VC). Shared memory: four tiles of
# tile x (head_dim + 4) floats, two of tile x (tile + 4), and 2 x tile.
# Head dims 64 and 128: the winners of the H100 sweep of V3_SWEEP
# (results/attention_backward_sweep-h100-2026-11-25.json; d64's fastest at
# three of the four timed shapes and within 1.5% at the fourth, d128's at all
# four). 16 and 32 are not measured; their tiles of 32 keep the simulator quick
# (64-row tiles at d32 took four times as long there).
TILED_CONFIGS_V3 = {16: (32, 32, 8, 4, 4, 4), 32: (32, 64, 4, 4, 4, 4),
                    64: (64, 128, 8, 4, 4, 8), 128: (64, 256, 4, 4, 4, 8)}


# Candidates for a sweep of version 3 on a GPU (benchmarks/attention_backward.py
# --sweep-v3), per head dim. ptxas (sm_90, no GPU needed) puts every one at
# 104-254 registers without spills, so most run 8 warps per multiprocessor;
# the seventh number caps the registers at 128 (100-200 bytes of spills a
# thread) to fit two blocks, 16 warps, where shared memory allows it.
V3_SWEEP = {
    64: [(64, 256, 4, 4, 4, 4), (64, 256, 4, 4, 4, 4, 128), (32, 128, 4, 2, 4, 4),
         (32, 64, 4, 4, 4, 8), (64, 128, 8, 4, 4, 8)],
    128: [(64, 256, 4, 4, 4, 8), (64, 256, 4, 4, 4, 8, 128), (32, 128, 4, 2, 4, 8),
          (32, 128, 2, 4, 4, 8), (32, 256, 2, 2, 4, 4)],
}


def shared_bytes_v3(head_dim: int, tile: int, version: int = 3) -> int:
    """The dynamic shared memory of version 3's kernels (the dK-dV kernel's,
    the larger of the two), or of version 4's single kernel (one more tile x
    tile array: dS transposed), for one head dim and tile."""
    if isinstance(version, bool) or version not in (3, 4):
        raise ValueError(f"version must be 3 or 4, got {version!r}")
    score_tiles = 3 if version == 4 else 2
    return 4 * (4 * tile * (head_dim + 4) + score_tiles * tile * (tile + 4) + 2 * tile)


def check_tiled_config_v3(head_dim: int, config: tuple, version: int = 3) -> tuple:
    """(tile, threads, SQ, SK, VK, VC), with an optional seventh number, the
    most registers a thread may use (the compiler spills the rest; a knob for
    fitting more blocks on a multiprocessor), if the patches tile the block's
    work exactly, the four-float loads line up (VK and VC multiples of 4) and
    the shared memory (of version 3's kernels or of version 4's) fits in what
    a block may opt in to on an H100 (227 KiB); else ValueError."""
    if len(config) not in (6, 7) or not all(isinstance(n, int) and not isinstance(n, bool)
                                            and n >= 1 for n in config):
        raise ValueError(f"config must be six whole numbers (tile, threads, SQ, SK, VK, VC), "
                         f"and optionally a seventh (registers per thread), got {config!r}")
    if len(config) == 7 and not 32 <= config[6] <= 255:
        raise ValueError(f"the registers per thread must be in [32, 255], got {config[6]}")
    b, nt, sq, sk, vk, vc = config[:6]
    if vk % 4 or vc % 4:
        raise ValueError(f"VK and VC must be multiples of 4 (four floats per load); got {config}")
    if b % sq or b % sk or b % vk or head_dim % vc or b % 4:
        raise ValueError(f"SQ, SK and VK must divide the tile {b} (a multiple of 4), VC the "
                         f"head dim {head_dim}; got {config}")
    if nt % A.WARP_SIZE or nt > 1024:
        raise ValueError(f"threads must be a multiple of {A.WARP_SIZE} up to 1024; got {config}")
    if (b // sq) * (b // sk) != nt or (b // vk) * (head_dim // vc) != nt:
        raise ValueError(f"the score patches ({b // sq} x {b // sk}) and the output patches "
                         f"({b // vk} x {head_dim // vc}) must each take all {nt} threads; "
                         f"got {config}")
    if (b * head_dim) % (4 * nt):
        raise ValueError(f"a tile of {b} x {head_dim} floats must load in groups of four, "
                         f"evenly over {nt} threads; got {config}")
    shared = shared_bytes_v3(head_dim, b, version)
    if shared > A.DYNAMIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"config {config} needs {shared} bytes of shared memory, over the "
                         f"{A.DYNAMIC_SHARED_LIMIT_BYTES} a block may have on an H100")
    return tuple(config)


# Version 4: version 3's dK-dV kernel also computes dQ (FlashAttention-2's
# Algorithm 2, one kernel): each tile of keys adds its part of dQ = s dS K for
# each tile of queries into a zeroed float32 array with atomic adds, instead
# of a second kernel that computes S and dP again. Two of version 3's seven
# tile products are saved; the atomic adds make dQ's sums run in an order
# that changes from launch to launch, so dQ can differ in its last bits
# between two calls (dK and dV do not). Tiles as version 3's, plus one tile x
# (tile + 4) array for dS transposed. Head dims 64 and 128: the winners of the
# H100 sweep (results/attention_backward_sweep_v4-h100-2026-11-25.json; each
# fastest at three of the four timed shapes); 16 and 32 as version 3's.
TILED_CONFIGS_V4 = {**TILED_CONFIGS_V3, 64: (64, 256, 4, 4, 4, 4), 128: (64, 256, 4, 4, 4, 8)}


V3_SIGNATURES = {"dkdv": 8, "dq": 7, "fused": 9}  # flat arrays each kernel takes, then
# seq, key_seq and the scale


def v3_signature(kernel: str, io: str = "float32"):
    """The Numba signature of version 3's kernel ("dkdv" or "dq") or version
    4's ("fused") for inputs and gradients of element type io: flat arrays of
    io, except the log-sum-exp and D (float32) and version 4's dQ (float32:
    it accumulates there), then seq, key_seq and the scale."""
    from numba import float32, int32, types

    flat = types.Array(float32, 1, "C")
    element = types.Array(A.float16 if io == "float16" else float32, 1, "C")
    arrays = [element] * 4 + [flat, flat] + [element] * (V3_SIGNATURES[kernel] - 6)
    if kernel == "fused":
        arrays[6] = flat
    return types.void(*arrays, int32, int32, float32)


@lru_cache(maxsize=None)
def _tiled_kernel_v4(head_dim: int, causal: bool, config: tuple | None = None,
                     io: str = "float32"):
    """Version 4's single kernel for one head dimension and mask (and tile
    configuration, default TILED_CONFIGS_V4[head_dim], and element type), with
    its block size, tile and dynamic shared memory in bytes."""
    fused, threads, tile, shared = _v4_functions(head_dim, causal, config, io)
    config = config or TILED_CONFIGS_V4[head_dim]
    if on_gpu():
        cap = {"max_registers": config[6]} if len(config) == 7 else {}
        return cuda.jit(v3_signature("fused", io), **cap)(fused), threads, tile, shared
    return cuda.jit(fused), threads, tile, shared


@lru_cache(maxsize=None)
def _tiled_kernels_v3(head_dim: int, causal: bool, config: tuple | None = None,
                      io: str = "float32"):
    """Version 3's dK-dV and dQ kernels for one head dimension and mask (and tile
    configuration, default TILED_CONFIGS_V3[head_dim], and element type of the
    inputs and gradients), with their block size (threads), tile and dynamic
    shared memory in bytes."""
    config = check_tiled_config_v3(head_dim, config or TILED_CONFIGS_V3[head_dim])
    dkdv, dq, threads, tile, shared = _v3_functions(head_dim, causal, config, io)
    if on_gpu():
        cap = {"max_registers": config[6]} if len(config) == 7 else {}
        return (cuda.jit(v3_signature("dkdv", io), **cap)(dkdv),
                cuda.jit(v3_signature("dq", io), **cap)(dq), threads, tile, shared)
    return cuda.jit(dkdv), cuda.jit(dq), threads, tile, shared


def _v3_functions(head_dim: int, causal: bool, config: tuple | None = None,
                  io: str = "float32"):
    """Version 3's two kernels as Python functions (what `_tiled_kernels_v3`
    compiles; the tests compile them for a GPU target, without a GPU). io:
    the element type of q, k, v, dO and the gradients ("float32" or
    "float16"); the kernels convert to float32 as they load and round each
    gradient once as they store it. Returns (dkdv, dq, threads, tile, shared
    bytes)."""
    config = check_tiled_config_v3(head_dim, config or TILED_CONFIGS_V3[head_dim])
    dkdv, dq, _, threads, tile, shared, _ = _tiled_functions(head_dim, causal, config, io)
    return dkdv, dq, threads, tile, shared


def _v4_functions(head_dim: int, causal: bool, config: tuple | None = None,
                  io: str = "float32"):
    """Version 4's kernel as a Python function, with (threads, tile, shared
    bytes)."""
    config = check_tiled_config_v3(head_dim, config or TILED_CONFIGS_V4[head_dim], version=4)
    _, _, fused, threads, tile, _, shared = _tiled_functions(head_dim, causal, config, io)
    return fused, threads, tile, shared


def _tiled_functions(head_dim: int, causal: bool, config: tuple, io: str):
    """The kernels of versions 3 and 4 for a checked configuration, built from
    the same device functions: (dkdv_v3, dq_v3, fused_v4, threads, tile,
    version 3's shared bytes, version 4's shared bytes)."""
    to_io = A._IO_CONVERSIONS[io]()
    B, NT, SQ, SK, VK, VC = config[:6]
    D = head_dim
    DR = D + 4  # padded row of a (rows, head_dim) tile
    PR = B + 4  # padded row of a (rows, tile) tile
    NY = B // SQ  # row groups of the score patches: a thread's rows are sy + NY x
    TX = B // SK  # key groups: a thread's keys are sx + TX y
    GX = D // VC  # threads across the columns of an output patch
    GROUPS = VC // 4  # ... each with VC / 4 groups of four columns, GX * 4 apart
    LOADS = B * D // (4 * NT)  # groups of four floats each thread loads per tile
    TILE_SIZE = B * DR
    P_SIZE = B * PR
    # Where each tile starts in the one dynamic array (all multiples of four floats).
    X_BASE, Y_BASE, U_BASE, W_BASE = 0, TILE_SIZE, 2 * TILE_SIZE, 3 * TILE_SIZE
    P_BASE = 4 * TILE_SIZE
    DS_BASE = P_BASE + P_SIZE
    L_BASE = DS_BASE + P_SIZE
    DL_BASE = L_BASE + B
    END = DL_BASE + B
    DST_BASE = END  # version 4 only: dS transposed, [key, query]
    END_V4 = DST_BASE + P_SIZE
    ALIGN = A.SHARED_ALIGNMENT
    load4 = A.load_float4_flat
    u = A.unsigned  # unsigned indices on a GPU (see attention.unsigned)

    @cuda.jit(device=True, **A._INLINE)
    def load_tile(x, base, valid_rows, tile, t):
        """Rows 0 .. B of a (rows, D) block of flat x starting at element base
        into a padded shared tile; rows from valid_rows on read as zeros.
        Consecutive threads read consecutive groups of four (coalesced)."""
        for it in range(LOADS):
            idx = t + it * NT
            r = idx // (D // 4)
            c = (idx - r * (D // 4)) * 4
            inside = r < valid_rows
            for e in range(4):
                value = np.float32(0.0)
                if inside:
                    value = np.float32(x[base + r * D + c + e])
                tile[u(r * DR + c + e)] = value

    @cuda.jit(device=True, **A._INLINE)
    def load_numbers(lse, delta, base, valid_rows, smem, t):
        """The log-sum-exp and D of rows 0 .. B (from element base) into shared memory."""
        for r in range(t, B, NT):
            l_value = np.float32(0.0)
            d_value = np.float32(0.0)
            if r < valid_rows:
                l_value = lse[base + r]
                d_value = delta[base + r]
            smem[u(L_BASE + r)] = l_value
            smem[u(DL_BASE + r)] = d_value

    @cuda.jit(device=True, **A._INLINE)
    def scores(smem, a_base, b_base, c_base, d_base, sy, sx, s_acc, p_acc):
        """s_acc = a b^T and p_acc = c d^T on this thread's SQ x SK patch (rows
        sy + NY x of a and c, rows sx + TX y of b and d), four columns a load."""
        b4 = cuda.local.array((SK, 4), np.float32)
        d4 = cuda.local.array((SK, 4), np.float32)
        for x in range(SQ):
            for y in range(SK):
                s_acc[x, y] = np.float32(0.0)
                p_acc[x, y] = np.float32(0.0)
        c = u(0)
        while c < u(D):
            for y in range(SK):
                row = u((sx + TX * y) * DR) + c
                b4[y, 0], b4[y, 1], b4[y, 2], b4[y, 3] = load4(smem, u(b_base) + row)
                d4[y, 0], d4[y, 1], d4[y, 2], d4[y, 3] = load4(smem, u(d_base) + row)
            for x in range(SQ):
                row = u((sy + NY * x) * DR) + c
                a0, a1, a2, a3 = load4(smem, u(a_base) + row)
                c0, c1, c2, c3 = load4(smem, u(c_base) + row)
                for y in range(SK):
                    s_acc[x, y] += a0 * b4[y, 0]
                    s_acc[x, y] += a1 * b4[y, 1]
                    s_acc[x, y] += a2 * b4[y, 2]
                    s_acc[x, y] += a3 * b4[y, 3]
                    p_acc[x, y] += c0 * d4[y, 0]
                    p_acc[x, y] += c1 * d4[y, 1]
                    p_acc[x, y] += c2 * d4[y, 2]
                    p_acc[x, y] += c3 * d4[y, 3]
            c += u(4)

    @cuda.jit(device=True, **A._INLINE)
    def load_run(dst, smem, at):
        """dst[0 .. VK] = VK neighbouring floats of shared memory from `at`,
        four per load."""
        for a in range(VK // 4):
            x0, x1, x2, x3 = load4(smem, at + u(4 * a))
            dst[4 * a] = x0
            dst[4 * a + 1] = x1
            dst[4 * a + 2] = x2
            dst[4 * a + 3] = x3

    @cuda.jit(device=True, **A._INLINE)
    def add_outer(acc, weights, g, v0, v1, v2, v3):
        """acc[x, group g's four columns] += weights[x] * (v0, v1, v2, v3), for
        this thread's VK rows: one step of a patch of P^T dO, dS^T Q or dS K."""
        for x in range(VK):
            acc[x, 4 * g] += weights[x] * v0
            acc[x, 4 * g + 1] += weights[x] * v1
            acc[x, 4 * g + 2] += weights[x] * v2
            acc[x, 4 * g + 3] += weights[x] * v3

    # The two outer-product loops (dV += P^T dO with dK += dS^T Q, and dQ +=
    # dS K) walk the B rows of a tile. Written as `for r in range(B)` each row
    # recomputed its shared-memory addresses from r (multiplies, selects):
    # Nsight Compute counted FFMA at 57% of the executed instructions of the
    # fused kernel at d64 (results/attention_backward_ncu-h100-2026-11-25.json).
    # Here ROWS_PER_PASS rows are written out per pass, at constant offsets
    # from offsets that advance once a pass, as SGEMM's dot loop is.
    ROWS_PER_PASS = 4
    PR4, DR4 = ROWS_PER_PASS * PR, ROWS_PER_PASS * DR

    @cuda.jit(device=True, **A._INLINE)
    def dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at, d_at):
        """One query row's share of dV += P^T dO and dK += dS^T Q: p_at is the
        row's offset in the P and dS tiles (this thread's VK keys), d_at in
        the Q and dO tiles (this thread's columns)."""
        load_run(p4, smem, u(P_BASE) + p_at)
        load_run(ds4, smem, u(DS_BASE) + p_at)
        for g in range(GROUPS):
            at = d_at + u(g * GX * 4)
            o0, o1, o2, o3 = load4(smem, u(W_BASE) + at)
            q0, q1, q2, q3 = load4(smem, u(U_BASE) + at)
            add_outer(dv_acc, p4, g, o0, o1, o2, o3)
            add_outer(dk_acc, ds4, g, q0, q1, q2, q3)

    @cuda.jit(device=True, **A._INLINE)
    def dkdv_rows(smem, dv_acc, dk_acc, p4, ds4, p_at, d_at):
        """ROWS_PER_PASS rows of dkdv_row, written out."""
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at, d_at)
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at + u(PR), d_at + u(DR))
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at + u(2 * PR), d_at + u(2 * DR))
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at + u(3 * PR), d_at + u(3 * DR))

    @cuda.jit(device=True, **A._INLINE)
    def dq_row(smem, dq_acc, ds4, ds_at, k_at):
        """One key's share of dQ += dS K: ds_at is the key's row of dS
        transposed (this thread's VK queries), k_at its row of K (this
        thread's columns)."""
        load_run(ds4, smem, ds_at)
        for g in range(GROUPS):
            k0, k1, k2, k3 = load4(smem, k_at + u(g * GX * 4))
            add_outer(dq_acc, ds4, g, k0, k1, k2, k3)

    @cuda.jit(device=True, **A._INLINE)
    def dq_rows(smem, dq_acc, ds4, ds_at, k_at):
        """ROWS_PER_PASS keys of dq_row, written out."""
        dq_row(smem, dq_acc, ds4, ds_at, k_at)
        dq_row(smem, dq_acc, ds4, ds_at + u(PR), k_at + u(DR))
        dq_row(smem, dq_acc, ds4, ds_at + u(2 * PR), k_at + u(2 * DR))
        dq_row(smem, dq_acc, ds4, ds_at + u(3 * PR), k_at + u(3 * DR))

    @cuda.jit(device=True, **A._INLINE)
    def add_ds_k(smem, dq_acc, ds4, ds_base, k_base, oy, ox):
        """dq_acc += dS K over a tile's B keys, on this thread's VK queries x VC
        columns: dS transposed ([key, query]) from ds_base, K from k_base."""
        ds_at = u(ds_base) + u(oy * VK)
        k_at = u(k_base) + u(ox * 4)
        for _ in range(B // ROWS_PER_PASS):
            dq_rows(smem, dq_acc, ds4, ds_at, k_at)
            ds_at += u(PR4)
            k_at += u(DR4)

    @cuda.jit(device=True, **A._INLINE)
    def store_patch(dst, acc, factor, first, limit, head_rows, oy, ox):
        """This thread's VK rows (first + oy VK + x, those below limit) and VC
        columns of a gradient, acc * factor rounded to the element type, into
        flat dst whose head starts at row head_rows."""
        for x in range(VK):
            row = first + oy * VK + x
            if row < limit:
                out = (head_rows + row) * D + ox * 4
                for g in range(GROUPS):
                    for e in range(4):
                        dst[out + g * GX * 4 + e] = to_io(acc[x, 4 * g + e] * factor)

    def probabilities(keep_p, transposed, also_transposed=False):
        @cuda.jit(device=True, **A._INLINE)
        def write(smem, s_acc, p_acc, scale, sy, sx, row0, key0, seq, key_seq):
            """P (if keep_p) and dS = P (dP - D) of this thread's patch into shared
            memory, as [query, key] or (transposed) [key, query], and (if
            also_transposed) dS as [key, query] too: zero where the mask hides
            the pair, or past the queries or the keys."""
            for x in range(SQ):
                r = sy + NY * x
                row = row0 + r
                lse_r = smem[u(L_BASE + r)]
                delta_r = smem[u(DL_BASE + r)]
                for y in range(SK):
                    j = sx + TX * y
                    key = key0 + j
                    p = np.float32(0.0)
                    ds = np.float32(0.0)
                    if row < seq and key < key_seq and not (causal and row < key):
                        p = math.exp(s_acc[x, y] * scale - lse_r)
                        ds = p * (p_acc[x, y] - delta_r)
                    at = u(j * PR + r) if transposed else u(r * PR + j)
                    if keep_p:
                        smem[u(P_BASE) + at] = p
                    smem[u(DS_BASE) + at] = ds
                    if also_transposed:
                        smem[u(DST_BASE + j * PR + r)] = ds
        return write

    p_and_ds = probabilities(True, False)
    ds_transposed = probabilities(False, True)
    p_and_ds_both_ways = probabilities(True, False, True)

    def key_tile_pass(with_dq):
        """The work of one block of the dK-dV kernel (version 3), or, with_dq, of
        version 4's single kernel, which also adds each query tile's share of
        dQ = s dS K into dq (float32, zeroed before the launch) with atomic
        adds. with_dq is fixed when the kernel is built, so version 3's code
        holds none of version 4's extra work."""
        write_scores = p_and_ds_both_ways if with_dq else p_and_ds

        @cuda.jit(device=True, **A._INLINE)
        def run(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, scale):
            # The block's keys and values stay in shared memory (tiles X and Y);
            # query tiles stream through U (Q) and W (dO).
            bh = cuda.blockIdx.y
            key0 = cuda.blockIdx.x * B
            t = cuda.threadIdx.x
            smem = cuda.shared.array(0, A.float32, alignment=ALIGN)
            k_s = smem[X_BASE:Y_BASE]
            v_s = smem[Y_BASE:U_BASE]
            q_s = smem[U_BASE:W_BASE]
            do_s = smem[W_BASE:P_BASE]
            s_acc = cuda.local.array((SQ, SK), np.float32)
            p_acc = cuda.local.array((SQ, SK), np.float32)
            dk_acc = cuda.local.array((VK, VC), np.float32)
            dv_acc = cuda.local.array((VK, VC), np.float32)
            dq_acc = cuda.local.array((VK, VC), np.float32)
            p4 = cuda.local.array(VK, np.float32)
            ds4 = cuda.local.array(VK, np.float32)
            sy = t // TX
            sx = t - sy * TX
            oy = t // GX
            ox = t - oy * GX
            kv_base = (bh * key_seq + key0) * D
            load_tile(k, kv_base, key_seq - key0, k_s, t)
            load_tile(v, kv_base, key_seq - key0, v_s, t)
            for x in range(VK):
                for y in range(VC):
                    dk_acc[x, y] = np.float32(0.0)
                    dv_acc[x, y] = np.float32(0.0)
            # Under the mask, query tiles before this key tile see none of its keys.
            first = cuda.blockIdx.x if causal else 0
            for tile in range(first, (seq + B - 1) // B):
                row0 = tile * B
                cuda.syncthreads()  # the last tile's readers are done with Q, dO, P, dS
                q_base = (bh * seq + row0) * D
                load_tile(q, q_base, seq - row0, q_s, t)
                load_tile(dout, q_base, seq - row0, do_s, t)
                load_numbers(lse, delta, bh * seq + row0, seq - row0, smem, t)
                cuda.syncthreads()
                scores(smem, U_BASE, X_BASE, W_BASE, Y_BASE, sy, sx, s_acc, p_acc)
                write_scores(smem, s_acc, p_acc, scale, sy, sx, row0, key0, seq, key_seq)
                cuda.syncthreads()
                # dV += P^T dO and dK += dS^T Q on this thread's VK keys x VC columns.
                p_at = u(oy * VK)
                d_at = u(ox * 4)
                for _ in range(B // ROWS_PER_PASS):
                    dkdv_rows(smem, dv_acc, dk_acc, p4, ds4, p_at, d_at)
                    p_at += u(PR4)
                    d_at += u(DR4)
                if with_dq:
                    # This key tile's part of dQ for the tile's queries: a VK x VC
                    # patch of dS K per thread (VK queries, VC columns), added to dq.
                    for x in range(VK):
                        for y in range(VC):
                            dq_acc[x, y] = np.float32(0.0)
                    add_ds_k(smem, dq_acc, ds4, DST_BASE, X_BASE, oy, ox)
                    for x in range(VK):
                        row = row0 + oy * VK + x
                        if row < seq:
                            out = (bh * seq + row) * D + ox * 4
                            for g in range(GROUPS):
                                for e in range(4):
                                    cuda.atomic.add(dq, out + g * GX * 4 + e,
                                                    dq_acc[x, 4 * g + e] * scale)
            store_patch(dk, dk_acc, scale, key0, key_seq, bh * key_seq, oy, ox)
            store_patch(dv, dv_acc, np.float32(1.0), key0, key_seq, bh * key_seq, oy, ox)
        return run

    dkdv_pass = key_tile_pass(False)
    fused_pass = key_tile_pass(True)

    def dkdv_v3(q, k, v, dout, lse, delta, dk, dv, seq, key_seq, scale):
        # delta stands in for dq, which this pass never touches.
        dkdv_pass(q, k, v, dout, lse, delta, delta, dk, dv, seq, key_seq, scale)

    def dq_v3(q, k, v, dout, lse, delta, dq, seq, key_seq, scale):
        # The block's queries stay in shared memory (Q in X, dO in Y); key
        # tiles stream through U (K) and W (V).
        bh = cuda.blockIdx.y
        tile = cuda.blockIdx.x
        row0 = tile * B
        t = cuda.threadIdx.x
        smem = cuda.shared.array(0, A.float32, alignment=ALIGN)
        q_s = smem[X_BASE:Y_BASE]
        do_s = smem[Y_BASE:U_BASE]
        k_s = smem[U_BASE:W_BASE]
        v_s = smem[W_BASE:P_BASE]
        s_acc = cuda.local.array((SQ, SK), np.float32)
        p_acc = cuda.local.array((SQ, SK), np.float32)
        dq_acc = cuda.local.array((VK, VC), np.float32)
        ds4 = cuda.local.array(VK, np.float32)
        sy = t // TX
        sx = t - sy * TX
        oy = t // GX
        ox = t - oy * GX
        q_base = (bh * seq + row0) * D
        load_tile(q, q_base, seq - row0, q_s, t)
        load_tile(dout, q_base, seq - row0, do_s, t)
        load_numbers(lse, delta, bh * seq + row0, seq - row0, smem, t)
        for x in range(VK):
            for y in range(VC):
                dq_acc[x, y] = np.float32(0.0)
        # Under the mask, the key tiles after this query tile are all hidden.
        last = (key_seq + B - 1) // B
        if causal:
            last = min(last, tile + 1)
        for key_tile in range(last):
            key0 = key_tile * B
            cuda.syncthreads()  # the last tile's readers are done with K, V and dS
            kv_base = (bh * key_seq + key0) * D
            load_tile(k, kv_base, key_seq - key0, k_s, t)
            load_tile(v, kv_base, key_seq - key0, v_s, t)
            cuda.syncthreads()
            scores(smem, X_BASE, U_BASE, Y_BASE, W_BASE, sy, sx, s_acc, p_acc)
            ds_transposed(smem, s_acc, p_acc, scale, sy, sx, row0, key0, seq, key_seq)
            cuda.syncthreads()
            # dQ += dS K on this thread's VK queries x VC columns.
            add_ds_k(smem, dq_acc, ds4, DS_BASE, U_BASE, oy, ox)
        store_patch(dq, dq_acc, scale, row0, seq, bh * seq, oy, ox)

    def fused_v4(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, scale):
        fused_pass(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, scale)

    return dkdv_v3, dq_v3, fused_v4, NT, B, 4 * END, 4 * END_V4


VERSIONS = (1, 2, 3, 4)
# The fastest on an H100 at every timed shape
# (results/attention_backward-h100-2026-11-25.json): version 4.
DEFAULT_VERSION = 4
# Version 4 on CUDA torch tensors through `_quick_v4_torch`: allocations by
# torch, launches straight to cuda.core with the arguments packed by hand, as
# sgemm.matmul and flash_attention do, instead of Numba's launch path (which
# wraps each of nine tensors in a device array and checks every argument on
# each of three launches). The benchmark times a single call from an idle GPU,
# so that Python is in the measurement: on the H100 the quick path took
# 0.6-0.8 ms less a call at seq 1024 (results/attention_backward-h100-
# 2026-11-26.json, rows flash_bwd and flash_bwd_long; launch_path_times reads
# them), and matched the long way's gradients there and in
# tests/test_attention_backward.py on the GPU. False sends every call the
# long way.
QUICK_TORCH_PATH = True


@cuda.jit
def _zero_kernel(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = np.float32(0.0)


@lru_cache(maxsize=None)
def _rounding_kernel(io: str):
    """A kernel that copies flat float32 src into flat dst of element type io."""
    to_io = A._IO_CONVERSIONS[io]()

    @cuda.jit
    def rounding(src, dst):
        i = cuda.grid(1)
        if i < src.size:
            dst[i] = to_io(src[i])
    return rounding


def flash_attention_backward(q, k, v, out, lse, dout, *, causal=False, scale=None,
                             version=DEFAULT_VERSION, config=None):
    """dQ, dK and dV of attention, from the forward pass's output and log-sum-exp.

    q, out, dout: shape (batch, heads, seq, head_dim); k, v: shape (batch,
    heads, key_seq, head_dim) (key_seq may differ from seq: cross-attention),
    head_dim in attention.SUPPORTED_HEAD_DIMS; all float32, or all float16
    (versions 3 and 4 only: they convert each element to float32 as they load
    it and round each gradient once); lse: float32, shape (batch, heads, seq), as
    ``flash_attention(..., return_lse=True)`` returns it. All numpy arrays,
    all Numba device arrays or all CUDA torch tensors.
    causal and scale: as given to the forward pass. version: 4 (default,
    DEFAULT_VERSION: version 3 in one kernel, dQ summed with atomic adds, so
    its last bits can change from call to call), 1 (one row per thread, the
    plainest form; kept as the reference the speed-ups are measured against),
    2 (tiles of queries and keys with register tiling) or 3 (bigger tiles in
    dynamic shared memory, read four floats at a time; the fastest whose
    result does not depend on the order blocks run in).
    config: version 2's, 3's or 4's tiles, (tile, threads, SQ, SK, VK, VC)
    (versions 3 and 4: optionally a seventh number, registers per thread);
    default TILED_CONFIGS, TILED_CONFIGS_V3 or TILED_CONFIGS_V4[head_dim].

    Returns (dq, dk, dv) in the kind and dtype of the inputs, of the shapes of
    q, k and v. Memory beyond the gradients: one float per query row (D); the
    seq x key_seq matrix is never stored.
    """
    kind, (batch, heads, seq, head_dim), key_seq = A._check_qkv(q, k, v,
                                                                 dtypes=("float32", "float16"))
    io = A._dtype_name(q, kind)
    for name, x in (("out", out), ("dout", dout)):
        if A._kind(x) != kind or tuple(x.shape) != tuple(q.shape):
            raise ValueError(f"{name} must be of q's kind and shape {tuple(q.shape)}, "
                             f"got {type(x).__name__} of shape {tuple(x.shape)}")
    if A._kind(lse) != kind or tuple(lse.shape) != (batch, heads, seq):
        raise ValueError(f"lse must be of q's kind and shape {(batch, heads, seq)}, "
                         f"got {type(lse).__name__} of shape {tuple(lse.shape)}")
    for name, x, dtype in (("out", out, io), ("dout", dout, io), ("lse", lse, "float32")):
        if str(x.dtype).split(".")[-1] != dtype:
            raise ValueError(f"{name} must be {dtype}" + (" (q's dtype)" if name != "lse" else "")
                             + f", got {x.dtype}")
    causal = A._check_flag("causal", causal)
    s = A._check_scale(scale, head_dim)
    if isinstance(version, bool) or version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    if io != "float32" and version not in (3, 4):
        raise ValueError(f"{io} inputs run on versions 3 and 4 alone (they convert as they "
                         f"load); pass version=3 or 4, got version={version}")

    if QUICK_TORCH_PATH and kind == "torch" and version == 4 and io in ("float32", "float16") \
            and on_gpu():
        grads = _quick_v4_torch(q, k, v, out, lse, dout, causal, np.float32(s), config, io)
        if grads is not None:
            return grads
    rows = batch * heads
    qd, od, dod = (A._to_kernel(x, kind).reshape((rows, seq, head_dim)) for x in (q, out, dout))
    kd, vd = (A._to_kernel(x, kind).reshape((rows, key_seq, head_dim)) for x in (k, v))
    lsed = A._to_kernel(lse, kind).reshape((rows, seq))
    delta = cuda.device_array((rows, seq), dtype=np.float32)
    _row_dot_kernel[(rows * seq + 127) // 128, 128](
        od.reshape((rows * seq, head_dim)), dod.reshape((rows * seq, head_dim)),
        delta.reshape(rows * seq))
    grads = [A._empty_like(kind, q, (batch, heads, n, head_dim), io)
             for n in (seq, key_seq, key_seq)]
    dq, dk, dv = (kernel_side.reshape((rows, n, head_dim))
                  for (_, kernel_side), n in zip(grads, (seq, key_seq, key_seq)))
    if version in (3, 4):
        launch = _launch_v4 if version == 4 else _launch_v3
        launch(qd, kd, vd, dod, lsed, delta, dq, dk, dv, seq, key_seq, head_dim, causal,
               np.float32(s), config, io)
        return tuple(A._from_kernel(caller_side, kind) for caller_side, _ in grads)
    if version == 1:
        dkdv_kernel, dq_kernel = _kernels(head_dim, causal)
        threads, tile = BLOCK, BLOCK
    else:
        dkdv_kernel, dq_kernel, threads, tile = _tiled_kernels(
            head_dim, causal, None if config is None else tuple(config))
    key_grid = ((key_seq + tile - 1) // tile, rows)  # a block per tile of keys ...
    query_grid = ((seq + tile - 1) // tile, rows)  # ... and per tile of queries
    dkdv_kernel[key_grid, threads](qd, kd, vd, dod, lsed, delta, dk, dv, np.float32(s))
    dq_kernel[query_grid, threads](qd, kd, vd, dod, lsed, delta, dq, np.float32(s))
    return tuple(A._from_kernel(caller_side, kind) for caller_side, _ in grads)


def _opt_in(kernels, shared, version):
    """On a GPU: refuse tiles whose dynamic shared memory this GPU cannot give a
    block, else opt each kernel in to it (once per kernel, where it passes 48
    KiB)."""
    if not on_gpu():
        return
    device_id = A._current_gpu()
    if shared > A._max_shared_bytes_per_block(device_id):
        raise ValueError(f"version {version} needs {shared} bytes of shared memory per block, "
                         f"more than this GPU gives; use version=2 or smaller tiles")
    for kernel in kernels:
        A._compiled_flash(kernel, shared, device_id)  # the opt-in, once


def _launch_v3(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, head_dim, causal, scale,
               config, io="float32"):
    """Version 3's two kernels on the (rows, seq, head_dim) device arrays, passed
    flat, with the dynamic shared memory their tiles take (opted in to, once
    per kernel, where it passes 48 KiB)."""
    dkdv, dq_kernel, threads, tile, shared = _tiled_kernels_v3(
        head_dim, causal, None if config is None else tuple(config), io)
    _opt_in((dkdv, dq_kernel), shared, 3)
    rows = q.shape[0]
    flat = [x.reshape(x.size) for x in (q, k, v, dout, lse, delta, dq, dk, dv)]
    qf, kf, vf, dof, lsef, deltaf, dqf, dkf, dvf = flat
    sizes = (np.int32(seq), np.int32(key_seq), scale)
    dkdv[((key_seq + tile - 1) // tile, rows), threads, 0, shared](
        qf, kf, vf, dof, lsef, deltaf, dkf, dvf, *sizes)
    dq_kernel[((seq + tile - 1) // tile, rows), threads, 0, shared](
        qf, kf, vf, dof, lsef, deltaf, dqf, *sizes)


def _launch_v4(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, head_dim, causal, scale,
               config, io="float32"):
    """Version 4's kernel on the (rows, seq, head_dim) device arrays, passed flat:
    dQ accumulates in float32 (dq itself when it is float32, else a scratch
    array rounded into dq afterwards), zeroed first."""
    fused, threads, tile, shared = _tiled_kernel_v4(
        head_dim, causal, None if config is None else tuple(config), io)
    _opt_in((fused,), shared, 4)
    rows = q.shape[0]
    qf, kf, vf, dof, lsef, deltaf, dqf, dkf, dvf = (
        x.reshape(x.size) for x in (q, k, v, dout, lse, delta, dq, dk, dv))
    sums = dqf if io == "float32" else cuda.device_array(dqf.size, dtype=np.float32)
    _zero_kernel[(sums.size + 255) // 256, 256](sums)
    fused[((key_seq + tile - 1) // tile, rows), threads, 0, shared](
        qf, kf, vf, dof, lsef, deltaf, sums, dkf, dvf, np.int32(seq), np.int32(key_seq), scale)
    if io != "float32":
        _rounding_kernel(io)[(sums.size + 255) // 256, 256](sums, dqf)


def _quick_v4_torch(q, k, v, out, lse, dout, causal, scale, config, io):
    """Version 4 on checked CUDA torch tensors (see QUICK_TORCH_PATH): (dq, dk, dv),
    or None where a tensor is not C-contiguous on the current GPU (the long way
    then handles it)."""
    import torch

    device_id = A._current_gpu()
    tensors = (q, k, v, out, lse, dout)
    if not all(x.is_cuda and x.is_contiguous() and x.get_device() == device_id for x in tensors):
        return None
    batch, heads, seq, head_dim = q.shape
    key_seq, rows = k.shape[2], batch * heads
    plan = _quick_v4_plan(head_dim, causal, None if config is None else tuple(config), io,
                          device_id)
    launch, (row_dot, zero, fused, rounding), stream, (threads, tile, shared) = plan
    element = q.element_size()
    delta = torch.empty(rows * seq, dtype=torch.float32, device=q.device)
    dq, dk, dv = (torch.empty((batch, heads, n, head_dim), dtype=q.dtype, device=q.device)
                  for n in (seq, key_seq, key_seq))
    sums = dq if io == "float32" else torch.empty(dq.numel(), dtype=torch.float32,
                                                  device=q.device)
    queries, keys = rows * seq * head_dim, rows * key_seq * head_dim

    def flat(x, size, itemsize):
        return flat_argument(x.data_ptr(), size, itemsize)

    launch(stream, launch_config((rows * seq + 127) // 128, 128, 0), row_dot,
           *matrix_argument(out.data_ptr(), rows * seq, head_dim, element),
           *matrix_argument(dout.data_ptr(), rows * seq, head_dim, element),
           *flat(delta, rows * seq, 4))
    launch(stream, launch_config((queries + 255) // 256, 256, 0), zero, *flat(sums, queries, 4))
    launch(stream, launch_config(((key_seq + tile - 1) // tile, rows), threads, shared), fused,
           *flat(q, queries, element), *flat(k, keys, element), *flat(v, keys, element),
           *flat(dout, queries, element), *flat(lse, rows * seq, 4), *flat(delta, rows * seq, 4),
           *flat(sums, queries, 4), *flat(dk, keys, element), *flat(dv, keys, element),
           ctypes.c_int32(seq), ctypes.c_int32(key_seq), ctypes.c_float(scale))
    if io != "float32":
        launch(stream, launch_config((queries + 255) // 256, 256, 0), rounding,
               *flat(sums, queries, 4), *flat(dq, queries, element))
    return dq, dk, dv


@lru_cache(maxsize=None)
def _quick_v4_plan(head_dim: int, causal: bool, config, io: str, device_id: int):
    """What _quick_v4_torch launches, found once per head dim, mask, tiles,
    element type and GPU: cuda.core's launch, the four compiled functions
    (D's pre-pass, the zeroing of dQ's sums, the fused kernel, the rounding
    of dQ for float16), the stream, and (threads, tile, shared bytes)."""
    from numba import float32, types

    fused, threads, tile, shared = _tiled_kernel_v4(head_dim, causal, config, io)
    _opt_in((fused,), shared, 4)
    function, stream = A._compiled_flash(fused, shared, device_id)
    element = A.float16 if io == "float16" else float32
    matrix, flat32 = types.Array(element, 2, "C"), types.Array(float32, 1, "C")
    row_dot, _ = launchable(_row_dot_kernel, (matrix, matrix, flat32))
    zero, _ = launchable(_zero_kernel, (flat32,))
    rounding = None
    if io != "float32":
        rounding, _ = launchable(_rounding_kernel(io), (flat32, types.Array(element, 1, "C")))
    return core_launch(), (row_dot, zero, function, rounding), stream, (threads, tile, shared)


def reference_attention_backward(q, k, v, dout, *, causal=False, scale=None):
    """dQ, dK and dV of softmax(scale q k^T) v in float64 numpy, from the full
    matrix of probabilities (the naive backward pass). Arrays of shape
    (..., seq, head_dim) for q and dout, (..., key_seq, head_dim) for k and v;
    the causal mask as ``attention.reference_attention``'s."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    A._check_cross_shapes(q.shape, k.shape, v.shape)
    if dout.shape != q.shape:
        raise ValueError(f"dout must have q's shape {q.shape}, got {dout.shape}")
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = s * q @ np.swapaxes(k, -1, -2)
    if causal:
        scores = np.where(np.tri(q.shape[-2], k.shape[-2], dtype=bool), scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ dout
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    dq = s * ds @ k
    dk = s * np.swapaxes(ds, -1, -2) @ q
    return dq, dk, dv


# -----------------------------------------------------------------------------
# For PyTorch models: the forward and backward kernels as one autograd operation


def _torch_function():
    import torch

    class FlashAttention(torch.autograd.Function):
        """softmax(scale q k^T) v whose forward and backward are the course's kernels.

        CUDA tensors run on the GPU; CPU tensors go through numpy (on Numba's
        simulator where there is no GPU: small sizes only), so that a model's
        tests run anywhere."""

        @staticmethod
        def forward(ctx, q, k, v, causal, scale):
            args = [_kernel_side(x) for x in (q, k, v)]
            out, lse = A.flash_attention(*args, causal=causal, scale=scale, return_lse=True)
            out, lse = _torch_side(out, q), _torch_side(lse, q)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal, ctx.scale = causal, scale
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            args = [_kernel_side(x) for x in (q, k, v, out, lse, dout.contiguous())]
            # The default version, which also takes float16 (converting as it loads).
            grads = flash_attention_backward(*args, causal=ctx.causal, scale=ctx.scale)
            return (*(_torch_side(g, q) for g in grads), None, None)

    return FlashAttention


_FUNCTION = None


def _kernel_side(x):
    """A tensor as the kernels take it: itself on a GPU, a numpy array on the CPU."""
    x = x.detach()
    return x if x.is_cuda else x.contiguous().numpy()


def _torch_side(x, like):
    import torch

    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x).to(like.device)


def flash_attention_autograd(q, k, v, *, causal=False, scale=None):
    """Attention that PyTorch can differentiate, on the course's kernels: the
    forward kernel saves its log-sum-exp, the backward kernels use it.

    q, k, v: float32 or float16 torch tensors (all of one dtype) of shape
    (batch, heads, seq, head_dim) (k and v: key_seq rows), on a CUDA device
    (the GPU kernels) or on the CPU (through numpy; on Numba's simulator where
    there is no GPU). Returns the output; ``.backward()`` fills q.grad, k.grad
    and v.grad, in the inputs' dtype.
    """
    global _FUNCTION
    import torch

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {type(x).__name__}")
        if x.dtype not in (torch.float32, torch.float16):
            raise ValueError(f"{name} must be float32 or float16 (the backward kernels take "
                             f"no bfloat16), got {x.dtype}")
    if _FUNCTION is None:
        _FUNCTION = _torch_function()
    return _FUNCTION.apply(q, k, v, A._check_flag("causal", causal), scale)


# -----------------------------------------------------------------------------
# The committed GPU run (benchmarks/attention_backward.py), as chapter 9 shows it


def backward_times(record) -> dict:
    """Per timed shape (seq, head_dim, causal) of a results file of
    benchmarks/attention_backward.py: {version: ms} for each version it timed
    and "sdpa" for SDPA memory-efficient's backward. The row "flash_bwd" is the
    default version of the day of the run (the file's default_version; files
    written before it was recorded timed version 2 as the default)."""
    default = record.get("default_version", 2)
    timed = {}
    for r in record["results"]:
        ms = timed.setdefault((r["seq"], r["head_dim"], r["causal"]), {})
        variant = r["variant"]
        if variant == "sdpa_efficient_bwd":
            ms["sdpa"] = r["ms"]
        elif variant == "flash_bwd":
            ms.setdefault(default, r["ms"])
        elif variant.startswith("flash_bwd_v"):
            ms[int(variant.removeprefix("flash_bwd_v"))] = r["ms"]
    return {shape: ms for shape, ms in timed.items() if "sdpa" in ms}  # not the long run


def launch_path_times(record) -> dict:
    """{(seq, head_dim, causal): (quick, long)}: the default version's time a
    call through its quick torch path ("flash_bwd") and through Numba's own
    launches ("flash_bwd_long", QUICK_TORCH_PATH off), in ms, from a results
    file of benchmarks/attention_backward.py that timed both (from
    2026-11-26 on); {} for older files."""
    timed = {}
    for r in record["results"]:
        if r["variant"] in ("flash_bwd", "flash_bwd_long") and r.get("ms") is not None:
            timed.setdefault((r["seq"], r["head_dim"], r["causal"]), {})[r["variant"]] = r["ms"]
    return {shape: (ms["flash_bwd"], ms["flash_bwd_long"]) for shape, ms in sorted(timed.items())
            if len(ms) == 2}


def backward_markdown(record) -> str:
    """A results file of benchmarks/attention_backward.py (``results.load_results(
    "attention_backward")``) as a markdown table: per shape, each version's and
    SDPA memory-efficient's backward in ms, and the fastest of ours over SDPA."""
    timed = backward_times(record)
    versions = sorted({v for ms in timed.values() for v in ms if v != "sdpa"})
    lines = []
    for (seq, d, causal), ms in sorted(timed.items()):
        cells = [f"{seq:,}", str(d), "yes" if causal else "no"]
        cells += [f"{ms[v]:.1f}" if v in ms else "–" for v in versions]
        best = min(ms[v] for v in versions if v in ms)
        cells += [f"{ms['sdpa']:.1f}", f"{best / ms['sdpa']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    header = (["N", "head dim", "causal"] + [f"version {v} (ms)" for v in versions]
              + ["SDPA memory-efficient (ms)", "fastest of ours / SDPA"])
    return ("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
            + "\n".join(lines))
