"""The backward pass, versions 1 and 2: a row per thread, then tiles with register tiling.

Version 1 is the plainest form of FlashAttention-2's backward pass, two
kernels with no atomics, so that the result does not depend on the order
blocks run in:

1. the dK-dV kernel: a block per tile of BLOCK keys of a head, one thread per
   key row, holding k_j, v_j and its dK_j and dV_j accumulators in registers;
   it streams the queries' rows (q, dO, L and D) through shared memory a tile
   at a time. Under a causal mask it starts at the first query tile that can
   see its keys.
2. the dQ kernel: a block per tile of BLOCK queries, one thread per query row,
   holding q_i, dO_i and its dQ_i accumulator; it streams K and V through
   shared memory and, under a causal mask, stops at the diagonal.

Each thread does its row's work alone (one row per thread, no register
tiling); it is kept as the reference the later versions' speed is measured
against. Version 2 (described above its code) adds the forward kernel's
tiling: tiles of queries and keys, and a patch of each product per thread.
Each version's dQ kernel is the mirror image of its dK-dV kernel (queries
and keys change roles), a deliberate variant rather than a copy.

On an H100 (batch 4, 16 heads, head_dim 64, no mask) version 1 took 8.48 ms
at seq 1024 and 119 ms at seq 4096, version 2 5.66 and 72.4 ms
(benchmarks/results/attention_backward-h100-2026-11-26.json, rows
flash_bwd_v1 and flash_bwd_v2). fp32 throughout.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda
from gpucourse.kernels.attention.limits import STATIC_SHARED_LIMIT_BYTES


# Rows per block (one thread each) in both kernels.
BLOCK = 32


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

    # The dQ kernel is the mirror image of the dK-dV kernel, a deliberate
    # variant: a block holds queries and streams keys, and sums over keys.
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
    if shared > STATIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"config {config} needs {shared} bytes of shared memory, over the "
                         f"{STATIC_SHARED_LIMIT_BYTES} a block may have statically")
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

    # Again the mirror image of the dK-dV kernel (a deliberate variant, as in
    # version 1); version 3's dq_v3 (backward_v34) is this kernel's next step.
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
