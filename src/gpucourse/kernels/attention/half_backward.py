"""The backward pass of FlashAttention-2 in fp16 and bf16 on mma.sync.m16n8k16: a pre-pass, then one kernel or two.

With P_ij = exp(s q_i . k_j - L_i) recomputed from the forward's log-sum-exp
L (``backward`` lists the identities), the gradients are five products of
tiles, each a tensor-core product here, in half-precision operands with
float32 sums, the way ``half`` computes the forward:

* a pre-pass, ``D_i = sum_c dO_ic O_ic`` in float32 (one thread per row);
* ``dK and dV``: a block owns 16 keys per warp, keeps their tiles of K and
  V in shared memory, and walks the query tiles (cp.async, two stages of Q
  and dO). It computes the transposed scores S^T = K Q^T, so that the rows
  of its registers are its keys: P^T = exp2(S^T - L) is then, packed to
  halves, its A fragment for dV += P^T dO; dP^T = V dO^T; dS^T = P^T (dP^T -
  D); dK += dS^T Q. The keys' sums stay in registers until the end;
* ``dQ``: a block owns 16 queries per warp, keeps their Q and dO in shared
  memory, and walks the key tiles: S = Q K^T, P, dP = dO
  V^T, dS = P (dP - D), dQ += dS K.

In two kernels, dQ has one of its own rather than FlashAttention-2's atomic
additions from the dK and dV kernel: it recomputes S and dP (seven products
per pair of tiles instead of five) but writes each dQ once, deterministically.
``half_backward_atomic`` is the other way (``atomic_dq=True``), in one kernel:
flash_attention_backward's default at head dim 128 and, under a causal mask, 64
(backward.ATOMIC_DQ_HEAD_DIMS), unless PyTorch's deterministic mode is on. Every
operand's fragments come from ``ldmatrix`` with or without ``.trans``, as
the layout in shared memory asks (the notes in the kernels say which).

Inputs, outputs and tiles as in ``half``: (batch, heads, seq, head_dim) halves
as uint16 bits, lse float32 in natural log, causal masks at the top left.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba import float32, int32, uint16, uint32, uint64  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.attention.half import HalfConfig, check_half_config, make_row_store
from gpucourse.kernels.attention.half_backward_atomic import atomic_dq_shared_halves, make_atomic_dq
from gpucourse.kernels.attention.limits import block_place
from gpucourse.kernels.tensor_cores.fragments import WARP
from gpucourse.kernels.tensor_cores.hgemm_ladder import CHUNK, _swizzle
from gpucourse.kernels.tensor_cores.moves import (as_float32, bf16_to_float, cp_async_16,
                                                 cp_async_commit, cp_async_wait, f16_to_float,
                                                 global_address_flat, ldmatrix_x4,
                                                 ldmatrix_x4_trans, mma_packed, mma_packed_bf16,
                                                 pack_bf16x2, pack_f16x2, shared_address,
                                                 shared_word)

LOG2E = float32(math.log2(math.e))


@lru_cache(maxsize=None)
def make_row_dot_kernel(kind: str):
    """The pre-pass: delta[r] = sum_c dout[r, c] out[r, c] in float32, one
    thread per row of (rows, head_dim) halves given as flat uint16 arrays."""
    widen = f16_to_float if kind == "f16" else bf16_to_float

    @cuda.jit
    def row_dot(out, dout, delta, head_dim):
        r = cuda.grid(1)
        if r < delta.shape[0]:
            total = float32(0.0)
            for c in range(head_dim):
                total += widen(dout[r * head_dim + c]) * widen(out[r * head_dim + c])
            delta[r] = total

    return row_dot


def _tile_pieces(config: HalfConfig, rows: int):
    """(chunks per row, shift, modulus, copies per thread) for a tile of
    `rows` rows of head_dim halves copied 16 bytes at a time by a block."""
    chunks = config.head_dim // CHUNK
    shift, modulus = _swizzle(chunks)
    if (rows * chunks) % config.threads:
        raise ValueError(f"a tile of {rows} rows of head dim {config.head_dim} does not divide "
                         f"among {config.threads} threads")
    return chunks, shift, modulus, rows * chunks // config.threads


def make_pair_copies(config: HalfConfig, rows: int, place):
    """Device functions that move tiles of `rows` rows of two (batch, heads,
    seq, head_dim) arrays together (K and V, or Q and dO) into shared memory
    by cp.async, laid out by `place` (the second tile right after the
    first): ``copy_once`` for the block's own tiles, copied once; ``plan``
    and ``copy_tile`` for the tiles a kernel walks, their addresses worked
    out once and advanced a tile at a time. Both backward kernels use them,
    each for the pair the other walks."""
    chunks = config.head_dim // CHUNK
    loads = _tile_pieces(config, rows)[3]
    D, threads, second = config.head_dim, config.threads, rows * config.head_dim

    @cuda.jit(device=True, inline=True)
    def copy_once(smem, base, first_array, second_array, row_base, row0, count, thread):
        """Rows row0 .. row0 + rows of both arrays (whose rows start at
        row_base) into smem from `base` (halves), zeros from row `count` on."""
        for i in range(loads):
            index = i * threads + thread
            row, col = index // chunks, (index % chunks) * CHUNK
            at = (row_base + min(row0 + row, count - 1)) * D + col
            inside = row0 + row < count
            cp_async_16(shared_address(smem, base + place(row, col)),
                        global_address_flat(first_array, at), inside)
            cp_async_16(shared_address(smem, base + second + place(row, col)),
                        global_address_flat(second_array, at), inside)

    @cuda.jit(device=True, inline=True)
    def plan(smem, base, first_array, second_array, row_base, row0, count, thread, to,
             first_from, second_from, row_of):
        """Each copy's place in the stage at `base` (to), its sources for the
        tile starting at row row0 (first_from, second_from) and its row in a
        tile (row_of)."""
        for i in range(loads):
            index = i * threads + thread
            row, col = index // chunks, (index % chunks) * CHUNK
            to[i] = shared_address(smem, base + place(row, col))
            row_of[i] = uint32(row)
            at = (row_base + min(row0 + row, count - 1)) * D + col
            first_from[i] = global_address_flat(first_array, at)
            second_from[i] = global_address_flat(second_array, at)

    @cuda.jit(device=True, inline=True)
    def copy_tile(to, first_from, second_from, row_of, stage, advance, row0, count):
        """Start the copies of the tile whose first row is row0, into the
        stage `stage` bytes on, the sources `advance` bytes on from plan's;
        zeros from row `count` on."""
        for i in range(loads):
            inside = row0 + row_of[i] < count
            cp_async_16(to[i] + stage, first_from[i] + advance, inside)
            cp_async_16(to[i] + stage + uint32(2 * second), second_from[i] + advance, inside)

    return loads, copy_once, plan, copy_tile


@cuda.jit(device=True, inline=True)
def query_stat(lse, delta, row_base, query, seq, of_lse):
    """What dK and dV's kernel keeps of a query: its L times log2 e (of_lse)
    or its D; zero past the last query."""
    if query >= seq:
        return float32(0.0)
    if of_lse:
        return lse[row_base + query] * LOG2E
    return delta[row_base + query]


@lru_cache(maxsize=None)
def make_dkdv_kernel(config: HalfConfig, causal: bool, kind: str, atomic_dq: bool = False,
                     max_registers: int | None = None):
    """kernel(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq, key_seq, heads,
    scale2, scale): dK and dV for the block's keys (16 per warp; config.block_rows
    of them), walking query tiles of config.block_cols; with atomic_dq, each
    tile's share of dQ added to dq_accum (float32) as well
    (``half_backward_atomic``), else dq_accum is not touched. max_registers:
    a cap on its registers a thread (None: ptxas's choice; on a GPU only)."""
    check_half_config(config)
    D, BK, BQ = config.head_dim, config.block_rows, config.block_cols
    shift, modulus = _tile_pieces(config, BK)[1:3]
    d_steps, q_steps = D // 16, BQ // 16
    s_tiles, o_tiles = BQ // 8, D // 8
    s_size, o_size, p_size, pairs_d = s_tiles * 4, o_tiles * 4, q_steps * 4, o_tiles // 2
    tile_q = BQ * D  # halves of a Q (or dO) tile
    stage_bytes = 2 * 2 * tile_q  # a stage: Q and dO
    step_bytes = 16 * D * 2
    kv_halves = 2 * BK * D  # K and V, before the stages
    # After the two stages of Q and dO, two stages of the query tile's L
    # (times log2 e) and D, in floats: 2 BQ a stage.
    stats_base = (kv_halves + 4 * tile_q) // 2
    stats_stage = 2 * BQ
    # Up to head dim 64, and at 128 in one kernel walking 16-query tiles (255
    # registers, no spill: ptxas at sm_90). At 128 with two kernels, whose
    # sums leave no registers to spare, the staging's register would spill,
    # and L and D are read from global memory where they are used (16 loads
    # a walked tile, each waited on).
    stage_stats = D <= 64 or (atomic_dq and BQ <= 16)
    mma = mma_packed if kind == "f16" else mma_packed_bf16
    pack = pack_f16x2 if kind == "f16" else pack_bf16x2
    store_row = make_row_store(pack, o_tiles)
    wait_all = cp_async_wait(0)

    @cuda.jit(device=True, inline=True)
    def place(row, col):
        return row * D + (((col // CHUNK) ^ ((row // shift) % modulus)) * CHUNK) + col % CHUNK

    store_ds, add_dq, dq_size = make_atomic_dq(config, mma, place, atomic_dq)
    ds_base = kv_halves + 4 * tile_q + 4 * stats_stage  # dS^T after the stats' two stages
    _, copy_keys, _, _ = make_pair_copies(config, BK, place)
    q_loads, _, plan_queries, copy_queries = make_pair_copies(config, BQ, place)

    @cuda.jit(**({"max_registers": max_registers} if max_registers and on_gpu() else {}))
    def kernel(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq, key_seq, heads, scale2,
               scale):
        smem = cuda.shared.array(0, uint16)
        smemf = cuda.shared.array(0, float32)  # the same bytes, as float32
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        # Under a mask the heaviest tiles first; each streams Q and dO (half) and
        # adds into dq_accum (float32).
        bh, tile = block_place(causal, False, BK * D * 8)
        k_start = tile * BK
        kv_base, row_base = bh * key_seq * D, bh * seq
        # K and V of the block's keys, once; then the copies of Q and dO,
        # planned once and advanced a tile at a time.
        copy_keys(smem, 0, k, v, bh * key_seq, k_start, key_seq, thread)
        q_to = cuda.local.array(q_loads, uint32)
        q_from = cuda.local.array(q_loads, uint64)
        do_from = cuda.local.array(q_loads, uint64)
        q_row = cuda.local.array(q_loads, uint32)
        first_tile = k_start // BQ if causal else 0
        plan_queries(smem, kv_halves, q, dout, row_base, first_tile * BQ, seq, thread, q_to,
                     q_from, do_from, q_row)
        q_tiles = (seq + BQ - 1) // BQ
        # The ldmatrix addresses, in stage 0 (a stage is Q's tile, then dO's):
        # K and V as A operands (rows are keys; lane l gives row l % 16,
        # column 8 (l // 16)); Q and dO as the "col" B operand of S^T and
        # dP^T (rows are queries, no .trans: lanes give 8 queries, two
        # 8-column halves, then the next 8 queries) and as the row-major B
        # operand of dV and dK (.trans: the A operand's lane pattern).
        r, c = lane % 16, (lane // 16) * 8
        query_in_pair = (lane % 8) + 8 * (lane // 16)
        col_in_pair = 8 * ((lane // 8) % 2)
        k_reads = cuda.local.array(d_steps, uint32)  # K's A fragments, per 16 of D
        v_reads = cuda.local.array(d_steps, uint32)
        for ks in range(d_steps):
            k_reads[ks] = shared_address(smem, place(warp * 16 + r, ks * 16 + c))
            v_reads[ks] = shared_address(smem, BK * D + place(warp * 16 + r, ks * 16 + c))
        cols = cuda.local.array(d_steps, uint32)  # Q's (or dO's) "col" reads, per 16 of D
        rows = cuda.local.array(pairs_d, uint32)  # their .trans reads, per pair of D's 8s
        for ks in range(d_steps):
            cols[ks] = shared_address(smem, kv_halves + place(query_in_pair,
                                                              ks * 16 + col_in_pair))
        for tp in range(pairs_d):
            rows[tp] = shared_address(smem, kv_halves + place(r, tp * 16 + c))
        s = cuda.local.array(s_size, float32)
        dp = cuda.local.array(s_size, float32)
        p = cuda.local.array(p_size, uint32)
        ds = cuda.local.array(p_size, uint32)
        dk_acc = cuda.local.array(o_size, float32)
        dv_acc = cuda.local.array(o_size, float32)
        dq_part = cuda.local.array(dq_size, float32)
        for i in range(o_size):
            dk_acc[i] = float32(0.0)
            dv_acc[i] = float32(0.0)
        # The first query tile into stage 0. The queries' L and D go through
        # shared memory too, each read once by one of the first 2 BQ threads:
        # read from global memory for the next tile in the middle of a step
        # and stored at its end, so that the read's latency hides behind the
        # step's last products (read where they are used, every element's own,
        # they stalled the warps for a third of the kernel's time: Nsight
        # Compute, results/half_precision_ncu-h200-2026-11-28.json).
        copy_queries(q_to, q_from, do_from, q_row, uint32(0), uint64(0), first_tile * BQ, seq)
        cp_async_commit()
        stat_query = thread % BQ  # the query (in a tile) whose L or D this thread moves
        # The address of the L of query 2t of a tile, in the first stats stage:
        # an element's L and D are at constant offsets from it (P^T below).
        stats_read = shared_address(smem, 2 * (stats_base + 2 * t))
        moves_stat = stage_stats and thread < 2 * BQ
        if moves_stat:
            smemf[stats_base + thread] = query_stat(lse, delta, row_base, first_tile * BQ
                                                    + stat_query, seq, thread < BQ)
        stage = uint32(0)
        stat = 0
        for qi in range(first_tile, q_tiles):
            wait_all()
            cuda.syncthreads()
            if qi + 1 < q_tiles:
                copy_queries(q_to, q_from, do_from, q_row, uint32(stage_bytes) - stage,
                             uint64((qi + 1 - first_tile) * BQ * D * 2), (qi + 1) * BQ, seq)
            cp_async_commit()
            q_start = qi * BQ
            stats_here = stats_read + uint32(4 * stat)  # this lane's first L in the stage
            # S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x BQ queries.
            for i in range(s_size):
                s[i] = float32(0.0)
                dp[i] = float32(0.0)
            for ks in range(d_steps):
                a = ldmatrix_x4(k_reads[ks])
                b = ldmatrix_x4(v_reads[ks])
                for pair in range(BQ // 16):
                    x = ldmatrix_x4(cols[ks] + stage + uint32(pair * step_bytes))
                    y = ldmatrix_x4(cols[ks] + stage + uint32(2 * tile_q + pair * step_bytes))
                    for half in range(2):
                        n = (2 * pair + half) * 4
                        e = mma(a[0], a[1], a[2], a[3], x[2 * half], x[2 * half + 1], s[n],
                                s[n + 1], s[n + 2], s[n + 3])
                        f = mma(b[0], b[1], b[2], b[3], y[2 * half], y[2 * half + 1], dp[n],
                                dp[n + 1], dp[n + 2], dp[n + 3])
                        for z in range(4):
                            s[n + z] = e[z]
                            dp[n + z] = f[z]
            # P^T and dS^T: element e of n-tile nt is key warp*16 + g + 8(e // 2),
            # query q_start + nt*8 + 2t + e % 2.
            for nt in range(s_tiles):
                for e in range(4):
                    query = q_start + nt * 8 + 2 * t + e % 2
                    key = k_start + warp * 16 + g + 8 * (e // 2)
                    kept = query < seq and not (causal and query < key)
                    i = nt * 4 + e
                    if stage_stats and BQ <= 32:
                        # L and D at constant offsets from stats_here (D's 4 BQ bytes
                        # after L's; zeros past the last query). Every element
                        # computes, without a branch: a masked one's exponent is
                        # -1e30, so that its P and dS are 0.
                        at = 4 * (nt * 8 + e % 2)
                        power = s[i] * scale2 - as_float32(shared_word(stats_here, at))
                        value = math.exp2(power if kept else float32(-1e30))
                        dp[i] = value * (dp[i] - as_float32(shared_word(stats_here, at + 4 * BQ)))
                        s[i] = value
                        continue
                    value = float32(0.0)
                    if kept:
                        if stage_stats:  # 64-wide walks (stats_here's registers spill)
                            at = stats_base + stat + query - q_start
                            scaled_lse, d_value = smemf[at], smemf[at + BQ]
                        else:  # 128, two kernels (unsigned indices: fewer instructions, spills)
                            scaled_lse = lse[row_base + query] * LOG2E
                            d_value = delta[row_base + query]
                        value = math.exp2(s[i] * scale2 - scaled_lse)
                        dp[i] = value * (dp[i] - d_value)
                    else:
                        dp[i] = float32(0.0)
                    s[i] = value
            for kk in range(q_steps):
                p[kk * 4] = pack(s[8 * kk], s[8 * kk + 1])
                p[kk * 4 + 1] = pack(s[8 * kk + 2], s[8 * kk + 3])
                p[kk * 4 + 2] = pack(s[8 * kk + 4], s[8 * kk + 5])
                p[kk * 4 + 3] = pack(s[8 * kk + 6], s[8 * kk + 7])
                ds[kk * 4] = pack(dp[8 * kk], dp[8 * kk + 1])
                ds[kk * 4 + 1] = pack(dp[8 * kk + 2], dp[8 * kk + 3])
                ds[kk * 4 + 2] = pack(dp[8 * kk + 4], dp[8 * kk + 5])
                ds[kk * 4 + 3] = pack(dp[8 * kk + 6], dp[8 * kk + 7])
            if atomic_dq:
                store_ds(smem, ds_base, ds, warp, lane)
            # The next tile's L or D, read now that the scores' registers are
            # free, stored below once the products have hidden the read.
            following = float32(0.0)
            if moves_stat and qi + 1 < q_tiles:
                following = query_stat(lse, delta, row_base, (qi + 1) * BQ + stat_query, seq,
                                       thread < BQ)
            # dV += P^T dO and dK += dS^T Q (dO and Q row-major: .trans).
            for kk in range(q_steps):
                for tp in range(pairs_d):
                    x = ldmatrix_x4_trans(rows[tp] + stage + uint32(2 * tile_q
                                                                     + kk * step_bytes))
                    y = ldmatrix_x4_trans(rows[tp] + stage + uint32(kk * step_bytes))
                    for half in range(2):
                        n = (2 * tp + half) * 4
                        e = mma(p[kk * 4], p[kk * 4 + 1], p[kk * 4 + 2], p[kk * 4 + 3],
                                x[2 * half], x[2 * half + 1], dv_acc[n], dv_acc[n + 1],
                                dv_acc[n + 2], dv_acc[n + 3])
                        f = mma(ds[kk * 4], ds[kk * 4 + 1], ds[kk * 4 + 2], ds[kk * 4 + 3],
                                y[2 * half], y[2 * half + 1], dk_acc[n], dk_acc[n + 1],
                                dk_acc[n + 2], dk_acc[n + 3])
                        for z in range(4):
                            dv_acc[n + z] = e[z]
                            dk_acc[n + z] = f[z]
            if atomic_dq:  # every warp's dS^T stored: this tile's dQ over the block's keys
                cuda.syncthreads()
                add_dq(smem, ds_base, dq_part, dq_accum, row_base, q_start, seq, warp, lane,
                       scale)
            # The next tile's L and D into the other stage (read by no warp
            # since the barrier above; read in the next step, after its own).
            if moves_stat and qi + 1 < q_tiles:
                smemf[stats_base + stats_stage - stat + thread] = following
            stage = uint32(stage_bytes) - stage
            stat = stats_stage - stat
        # The keys' gradients, rounded to halves two at a time.
        for h in range(2):
            key = k_start + warp * 16 + g + 8 * h
            if key < key_seq:
                store_row(dk, kv_base + key * D + 2 * t, dk_acc, h, scale)
                store_row(dv, kv_base + key * D + 2 * t, dv_acc, h, float32(1.0))

    return kernel


@lru_cache(maxsize=None)
def make_dq_kernel(config: HalfConfig, causal: bool, kind: str):
    """kernel(q, k, v, dout, lse, delta, dq, seq, key_seq, heads, scale2,
    scale): dQ for the block's queries (16 per warp), walking key tiles of
    config.block_cols."""
    check_half_config(config)
    # The mirror image of make_dkdv_kernel's set-up, queries and keys swapped:
    # written out in each (a deliberate variant) so that its names say what
    # the kernel owns and what it walks.
    D, BR, BC = config.head_dim, config.block_rows, config.block_cols
    shift, modulus = _tile_pieces(config, BR)[1:3]
    d_steps, key_steps = D // 16, BC // 16
    s_tiles, o_tiles = BC // 8, D // 8
    s_size, o_size, p_size, pairs_d = s_tiles * 4, o_tiles * 4, key_steps * 4, o_tiles // 2
    tile_kv = BC * D
    stage_bytes = 2 * 2 * tile_kv  # a stage: K and V
    step_bytes = 16 * D * 2
    qd_halves = 2 * BR * D  # Q and dO, before the stages
    mma = mma_packed if kind == "f16" else mma_packed_bf16
    pack = pack_f16x2 if kind == "f16" else pack_bf16x2
    store_row = make_row_store(pack, o_tiles)
    wait_all = cp_async_wait(0)

    @cuda.jit(device=True, inline=True)
    def place(row, col):
        return row * D + (((col // CHUNK) ^ ((row // shift) % modulus)) * CHUNK) + col % CHUNK

    _, copy_queries, _, _ = make_pair_copies(config, BR, place)
    kv_loads, _, plan_keys, copy_keys = make_pair_copies(config, BC, place)

    @cuda.jit
    def kernel(q, k, v, dout, lse, delta, dq, seq, key_seq, heads, scale2, scale):
        smem = cuda.shared.array(0, uint16)
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        # Under a mask the heaviest (last) tiles first; each streams K and V (half).
        bh, tile = block_place(causal, True, BR * D * 4)
        q_start = tile * BR
        q_base, row_base = bh * seq * D, bh * seq
        # Q and dO of the block's queries, once; then the copies of K and V,
        # planned once and advanced a tile at a time.
        copy_queries(smem, 0, q, dout, row_base, q_start, seq, thread)
        kv_to = cuda.local.array(kv_loads, uint32)
        k_from = cuda.local.array(kv_loads, uint64)
        v_from = cuda.local.array(kv_loads, uint64)
        kv_row = cuda.local.array(kv_loads, uint32)
        plan_keys(smem, qd_halves, k, v, bh * key_seq, 0, key_seq, thread, kv_to, k_from,
                  v_from, kv_row)
        key_tiles = (key_seq + BC - 1) // BC
        if causal:
            key_tiles = min(key_tiles, (q_start + BR + BC - 1) // BC)
        copy_keys(kv_to, k_from, v_from, kv_row, uint32(0), uint64(0), 0, key_seq)
        cp_async_commit()
        wait_all()
        cuda.syncthreads()
        # This warp's rows of Q and dO stay in shared memory, their A
        # fragments read again for each tile: kept in registers, with dQ's
        # sums, they would not fit at head dim 128.
        r, c = lane % 16, (lane // 16) * 8
        q_reads = cuda.local.array(d_steps, uint32)
        do_reads = cuda.local.array(d_steps, uint32)
        for ks in range(d_steps):
            q_reads[ks] = shared_address(smem, place(warp * 16 + r, ks * 16 + c))
            do_reads[ks] = shared_address(smem, BR * D + place(warp * 16 + r, ks * 16 + c))
        # K and V as the "col" B operand of S and dP (no .trans), K as the
        # row-major B operand of dQ (.trans).
        key_in_pair = (lane % 8) + 8 * (lane // 16)
        cols = cuda.local.array(d_steps, uint32)
        rows = cuda.local.array(pairs_d, uint32)
        for ks in range(d_steps):
            cols[ks] = shared_address(smem, qd_halves + place(key_in_pair,
                                                              ks * 16 + 8 * ((lane // 8) % 2)))
        for tp in range(pairs_d):
            rows[tp] = shared_address(smem, qd_halves + place(r, tp * 16 + c))
        lse2 = cuda.local.array(2, float32)
        dd = cuda.local.array(2, float32)
        for h in range(2):
            row = min(q_start + warp * 16 + g + 8 * h, seq - 1)
            lse2[h] = lse[row_base + row] * LOG2E
            dd[h] = delta[row_base + row]
        s = cuda.local.array(s_size, float32)
        dp = cuda.local.array(s_size, float32)
        ds = cuda.local.array(p_size, uint32)
        dq_acc = cuda.local.array(o_size, float32)
        for i in range(o_size):
            dq_acc[i] = float32(0.0)
        stage = uint32(0)
        for j in range(key_tiles):
            if j > 0:
                wait_all()
                cuda.syncthreads()
            if j + 1 < key_tiles:
                copy_keys(kv_to, k_from, v_from, kv_row, uint32(stage_bytes) - stage,
                          uint64((j + 1) * BC * D * 2), (j + 1) * BC, key_seq)
            cp_async_commit()
            # S = Q K^T and dP = dO V^T.
            for i in range(s_size):
                s[i] = float32(0.0)
                dp[i] = float32(0.0)
            for ks in range(d_steps):
                qf = ldmatrix_x4(q_reads[ks])
                dof = ldmatrix_x4(do_reads[ks])
                for pair in range(BC // 16):
                    x = ldmatrix_x4(cols[ks] + stage + uint32(pair * step_bytes))
                    y = ldmatrix_x4(cols[ks] + stage + uint32(2 * tile_kv
                                                              + pair * step_bytes))
                    for half in range(2):
                        n = (2 * pair + half) * 4
                        e = mma(qf[0], qf[1], qf[2], qf[3], x[2 * half], x[2 * half + 1], s[n],
                                s[n + 1], s[n + 2], s[n + 3])
                        f = mma(dof[0], dof[1], dof[2], dof[3], y[2 * half], y[2 * half + 1],
                                dp[n], dp[n + 1], dp[n + 2], dp[n + 3])
                        for z in range(4):
                            s[n + z] = e[z]
                            dp[n + z] = f[z]
            # dS = P (dP - D): element e of n-tile nt is query row g + 8(e // 2)
            # of the warp's 16, key k_start + nt*8 + 2t + e % 2.
            k_start = j * BC
            for nt in range(s_tiles):
                for e in range(4):
                    h = e // 2
                    key = k_start + nt * 8 + 2 * t + e % 2
                    row = q_start + warp * 16 + g + 8 * h
                    value = float32(0.0)
                    if key < key_seq and not (causal and key > row):
                        value = math.exp2(s[nt * 4 + e] * scale2 - lse2[h]) \
                            * (dp[nt * 4 + e] - dd[h])
                    dp[nt * 4 + e] = value
            for kk in range(key_steps):
                ds[kk * 4] = pack(dp[8 * kk], dp[8 * kk + 1])
                ds[kk * 4 + 1] = pack(dp[8 * kk + 2], dp[8 * kk + 3])
                ds[kk * 4 + 2] = pack(dp[8 * kk + 4], dp[8 * kk + 5])
                ds[kk * 4 + 3] = pack(dp[8 * kk + 6], dp[8 * kk + 7])
            # dQ += dS K (K row-major: .trans).
            for kk in range(key_steps):
                for tp in range(pairs_d):
                    x = ldmatrix_x4_trans(rows[tp] + stage + uint32(kk * step_bytes))
                    for half in range(2):
                        n = (2 * tp + half) * 4
                        e = mma(ds[kk * 4], ds[kk * 4 + 1], ds[kk * 4 + 2], ds[kk * 4 + 3],
                                x[2 * half], x[2 * half + 1], dq_acc[n], dq_acc[n + 1],
                                dq_acc[n + 2], dq_acc[n + 3])
                        for z in range(4):
                            dq_acc[n + z] = e[z]
            stage = uint32(stage_bytes) - stage
        for h in range(2):
            row = q_start + warp * 16 + g + 8 * h
            if row < seq:
                store_row(dq, q_base + row * D + 2 * t, dq_acc, h, scale)

    return kernel


# ---------------------------------------------------------------------------
# Launching


def backward_configs(head_dim: int, causal: bool = False,
                     atomic_dq: bool = False) -> tuple[HalfConfig, HalfConfig]:
    """(dK and dV's tiles, dQ's tiles) for a head dim and mask: 4 warps a
    block, each kernel at the tiles that ran fastest in the H200's sweep of
    the spill-free ones (results/attention_half_sweep-h200-2026-11-28.json,
    benchmarks/attention_half_sweep.py: B4 H16 N4096, one kernel's tiles
    changed at a time); small ones on the simulator.

    * atomic_dq (one kernel, dQ added atomically): dK and dV's kernel walks
      16-wide query tiles at either head dim and mask (160 registers at head
      dim 64, three blocks an SM; 255 at 128, no spill). At head dim 64 the
      sweep timed it 1.81x SDPA flash's backward causal, where the 32- and
      64-wide walks took 1.90-2.07x, and 2.03x without a mask (2.13-2.28x).

    * Head dim 64: dQ's kernel walks 32-wide key tiles, not 64 (126 registers,
      three blocks an SM instead of two: 2.33x SDPA flash's backward instead
      of 2.39x without a mask, 2.12x instead of 2.38x causal). dK and dV's
      kernel walks 32-wide query tiles without a mask (2.11x instead of
      2.39x) but 64-wide under the causal mask, where the 32-wide walk was
      slower (2.51x against 2.38x; why has not been profiled).
    * Head dim 128: dQ's kernel holds dQ's sums (64 registers) besides a
      tile's scores, dP and fragments, so 16-key tiles keep it from
      spilling; dK and dV's walks 32. Nothing in the sweep beat them."""
    if not on_gpu():
        small = HalfConfig(head_dim, warps=2, block_cols=32)
        return small, small
    if atomic_dq:  # dQ's config is not used
        return (HalfConfig(head_dim, warps=4, block_cols=16),) * 2
    if head_dim <= 64:
        dkdv_cols = 64 if causal else 32
        return (HalfConfig(head_dim, warps=4, block_cols=dkdv_cols),
                HalfConfig(head_dim, warps=4, block_cols=32))
    return HalfConfig(head_dim, warps=4, block_cols=32), HalfConfig(head_dim, warps=4,
                                                                    block_cols=16)


def atomic_dq_runs_here() -> bool:
    """Whether atomic_dq's kernel runs on this GPU (compute capability 9.0 on),
    or the simulator."""
    from gpucourse.kernels.launch import compute_capability, current_gpu

    return not on_gpu() or compute_capability(current_gpu()) >= (9, 0)


def _checked(configs, head_dim: int) -> tuple[HalfConfig, HalfConfig]:
    """A pair (dK and dV's tiles, dQ's tiles) of HalfConfig for head_dim,
    each accepted by check_half_config; ValueError naming what is accepted."""
    if not (isinstance(configs, tuple) and len(configs) == 2
            and all(isinstance(c, HalfConfig) for c in configs)):
        raise ValueError(f"configs must be a pair of HalfConfig (dK and dV's, dQ's), got "
                         f"{configs!r}")
    for config in configs:
        if config.head_dim != head_dim:
            raise ValueError(f"configs must be for the inputs' head_dim {head_dim}, got "
                             f"{config.head_dim}")
        check_half_config(config)
    return configs


def _shared_bytes(config: HalfConfig, stats: bool = False, atomic_dq: bool = False) -> int:
    """The dynamic shared memory of either kernel: its own two tiles (16 rows
    a warp) and two stages of the two tiles it walks; with `stats` (dK and
    dV's kernel), two stages of the walked queries' L and D as well; with
    atomic_dq, then the block's dS^T."""
    extra = 2 * 2 * 4 * config.block_cols if stats else 0
    extra += 2 * atomic_dq_shared_halves(config) if atomic_dq else 0
    return 2 * config.head_dim * (2 * config.block_rows + 4 * config.block_cols) + extra


ROW_THREADS = 128
# What the kernels are compiled for: the pre-pass (out, dout, delta, head_dim);
# dK and dV's (q, k, v, dout, lse, delta, dk, dv, the sizes and scales); dQ's
# (the same with dq alone).
_HALVES, _FLOATS = uint16[::1], float32[::1]
_SCALARS = (int32, int32, int32, float32, float32)
_ROW_DOT_SIGNATURE = (_HALVES, _HALVES, _FLOATS, int32)
_DKDV_SIGNATURE = (_HALVES,) * 4 + (_FLOATS, _FLOATS, _HALVES, _HALVES, _FLOATS) + _SCALARS
_DQ_SIGNATURE = (_HALVES,) * 4 + (_FLOATS, _FLOATS, _HALVES) + _SCALARS


def half_attention_backward(q, k, v, out, lse, dout, causal: bool = False,
                            scale: float | None = None, configs=None, atomic_dq: bool = False,
                            max_registers: int | None = None):
    """(dq, dk, dv) of softmax(scale q k^T) v for fp16 or bf16 torch tensors
    (CUDA ones on a GPU; CPU ones on the simulator), given the forward's out
    and lse (float32, natural log) and dout, all C-contiguous, q (batch,
    heads, seq, head_dim), k, v (batch, heads, key_seq, head_dim); unchecked
    (flash_attention_backward checks). Gradients in q's dtype. configs: a
    pair of HalfConfig, (dK and dV's tiles, dQ's tiles), instead of
    backward_configs(head_dim, causal) (benchmarks/attention_half_sweep.py times
    others); checked, ValueError naming what is accepted. atomic_dq: dQ
    added atomically by dK and dV's kernel (``half_backward_atomic``; its
    dQ config is not used), not computed by a kernel of its own.
    max_registers: a cap on dK and dV's kernel's registers a thread, 32 to 255
    (benchmarks/attention_half_sweep.py; None: ptxas's choice)."""
    if not isinstance(atomic_dq, bool):
        raise ValueError(f"atomic_dq must be True or False, got {atomic_dq!r}")
    if atomic_dq and q.is_cuda and not atomic_dq_runs_here():
        raise ValueError("atomic_dq adds dQ by red.global.add.v2.f32, which needs a GPU of "
                         "compute capability 9.0 or later")
    if max_registers is not None and (isinstance(max_registers, bool)
                                      or not isinstance(max_registers, int)
                                      or not 32 <= max_registers <= 255):
        raise ValueError(f"max_registers must be None or a whole number from 32 to 255, got "
                         f"{max_registers!r}")
    import torch

    kind = {torch.float16: "f16", torch.bfloat16: "bf16"}[q.dtype]
    batch, heads, seq, d = q.shape
    key_seq = k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    scale2 = scale * math.log2(math.e)
    dkdv_config, dq_config = (backward_configs(d, causal, atomic_dq) if configs is None
                              else _checked(configs, d))
    delta = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    row_dot = make_row_dot_kernel(kind)
    dkdv = make_dkdv_kernel(dkdv_config, causal, kind, atomic_dq, max_registers)
    dq_kernel = None if atomic_dq else make_dq_kernel(dq_config, causal, kind)
    # dQ's float32 sums, when dK and dV's kernel adds them (else a stand-in it
    # does not touch).
    dq_accum = (torch.zeros((batch, heads, seq, d), dtype=torch.float32, device=q.device)
                if atomic_dq else delta)
    key_grid = ((key_seq + dkdv_config.block_rows - 1) // dkdv_config.block_rows, heads, batch)
    rows = batch * heads * seq
    if q.is_cuda:
        _launch_on_gpu(kind, causal, (dkdv_config, dq_config), (row_dot, dkdv, dq_kernel),
                       (q, k, v, out, lse, dout, delta, dq, dk, dv, dq_accum),
                       (seq, key_seq, heads, scale2, scale, key_grid, rows))
        return (dq_accum.to(q.dtype) if atomic_dq else dq), dk, dv
    from gpucourse.kernels.tensor_cores.moves import forget_earlier_moves

    def bits(x):
        return x.view(torch.int16).numpy().reshape(-1).view(np.uint16)

    flat = [bits(x) for x in (q, k, v, out, dout, dq, dk, dv)]
    lse_flat, delta_flat = lse.numpy().reshape(-1), delta.numpy().reshape(-1)
    row_dot[(rows + ROW_THREADS - 1) // ROW_THREADS, ROW_THREADS](flat[3], flat[4], delta_flat,
                                                                   np.int32(d))
    scalars = (np.int32(seq), np.int32(key_seq), np.int32(heads), np.float32(scale2),
               np.float32(scale))
    forget_earlier_moves()
    accum_flat = dq_accum.numpy().reshape(-1)
    dkdv[key_grid, dkdv_config.threads, 0, _shared_bytes(dkdv_config, True, atomic_dq)](
        flat[0], flat[1], flat[2], flat[4], lse_flat, delta_flat, flat[6], flat[7], accum_flat,
        *scalars)
    if atomic_dq:
        return dq_accum.to(q.dtype), dk, dv
    forget_earlier_moves()
    dq_kernel[dq_config.grid(batch, heads, seq), dq_config.threads, 0,
              _shared_bytes(dq_config)](flat[0], flat[1], flat[2], flat[4], lse_flat, delta_flat,
                                        flat[5], *scalars)
    return dq, dk, dv


def _launch_on_gpu(kind, causal, configs, kernels, tensors, sizes):
    """The three launches, straight to cuda.core with raw pointers."""
    import ctypes

    from gpucourse.kernels.launch import (compiled_launchable, core_launch, current_gpu,
                                          flat_argument, launch_config)

    dkdv_config, dq_config = configs
    row_dot, dkdv, dq_kernel = kernels
    q, k, v, out, lse, dout, delta, dq, dk, dv, dq_accum = tensors
    seq, key_seq, heads, scale2, scale, key_grid, rows = sizes
    device = current_gpu()

    def arg(x):
        return flat_argument(x.data_ptr(), x.numel(), x.element_size())

    launch = core_launch()
    function, stream = compiled_launchable(row_dot, _ROW_DOT_SIGNATURE, 0, device)
    launch(stream, launch_config((rows + ROW_THREADS - 1) // ROW_THREADS, ROW_THREADS), function,
           *arg(out), *arg(dout), *arg(delta), ctypes.c_int32(q.shape[3]))
    scalars = (ctypes.c_int32(seq), ctypes.c_int32(key_seq), ctypes.c_int32(heads),
               ctypes.c_float(scale2), ctypes.c_float(scale))
    shared = _shared_bytes(dkdv_config, True, dq_kernel is None)
    function, stream = compiled_launchable(dkdv, _DKDV_SIGNATURE, shared, device)
    launch(stream, launch_config(key_grid, dkdv_config.threads, shared),
           function, *arg(q), *arg(k), *arg(v), *arg(dout), *arg(lse), *arg(delta), *arg(dk),
           *arg(dv), *arg(dq_accum), *scalars)
    if dq_kernel is None:  # dQ was added by dK and dV's kernel
        return
    function, stream = compiled_launchable(dq_kernel, _DQ_SIGNATURE, _shared_bytes(dq_config),
                                           device)
    batch = q.shape[0]
    launch(stream, launch_config(dq_config.grid(batch, heads, seq), dq_config.threads,
                                 _shared_bytes(dq_config)),
           function, *arg(q), *arg(k), *arg(v), *arg(dout), *arg(lse), *arg(delta), *arg(dq),
           *scalars)
