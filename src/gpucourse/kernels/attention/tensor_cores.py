"""The tiled attention forward on tensor cores: both tile products in 3xTF32.

The kernel of ``forward`` runs FlashAttention-2's loop order on the CUDA
cores: every multiply-add of S = Q K^T and of O += P V is one fp32 FMA. At
head dim 128 that reached 36 TFLOP/s on an H100, while PyTorch's
memory-efficient attention reached 42-47 TFLOP/s in fp32 from seq 1024 on
(results/attention-h100-2026-11-26.json, flash_cuda_cores and
sdpa_efficient), because its tile products run on the tensor cores in
"3xTF32" (CUTLASS's OpMultiplyAddFastF32): each fp32 value is split
into a big and a small TF32 part and each product is three TF32 products,
a_big b_big + a_big b_small + a_small b_big, which is close to fp32's
accuracy (see ``gpucourse.kernels.tensor_cores``, which holds the instruction
and the split).

This module is the same algorithm with its two products on the tensor cores,
one ``mma.sync.aligned.m16n8k8`` TF32 instruction for each 16 x 8 x 8 step and
pass. A block of ``warps`` warps owns 16 query rows per warp; the warps share
the K and V tiles in shared memory. Each warp keeps everything of its rows in
registers, in the instruction's C-fragment places: its 16 x block_cols scores,
and its 16 x head_dim output. Two choices make the fragments cheap to load:

* **The inner dimension may be taken in any order**, as long as both
  operands take the same order. For S, lane (g, t) (g = lane // 4, t =
  lane % 4) must hold columns t and t + 4 of an 8-wide step of Q and rows t
  and t + 4 of K^T. Giving those places to the head-dim values 16c + 4t,
  16c + 4t + 1 (one step) and 16c + 4t + 2, 16c + 4t + 3 (the next) lets one
  128-bit load of Q's row and one of K's row feed two steps.
* **The probabilities never leave registers.** After S's step, lane (g, t)
  holds the scores of keys 2t and 2t + 1 of each 8-key tile, in rows g and
  g + 8; P V needs, as its A operand, columns t and t + 4. Reading the
  8 keys of the tile in the order 0, 2, 4, 6, 1, 3, 5, 7 makes the lane's
  own probabilities its A fragment, provided V's rows are read in that same
  order (key 2t for b0, 2t + 1 for b1).

The output's columns are likewise permuted within each group of 32: the
8 x 8 output tile i of the group holds head-dim columns 4n + i (n = 0..7), so
that lane (g, t) reads the B fragments of four tiles with one 128-bit load
of V (columns 4g .. 4g + 3) and ends holding 8 neighbouring output columns,
8t .. 8t + 7.

Each value is split once: K and V as the block stores them to shared memory
(``split_kv``), Q and P as a warp reads them. Under a causal mask the grid
puts every head's heaviest query tile first (``TensorCoreConfig.grid``).

On the H100 (batch 4, 16 heads, no mask) this kernel took 0.402 ms at seq 1024
and 5.69 ms at seq 4096 with head_dim 64 (42.7 and 48.3 TFLOP/s), and 0.806
and 10.97 ms with head_dim 128 (42.6 and 50.1 TFLOP/s), against 0.563, 7.98,
0.816 and 11.78 ms for PyTorch's memory-efficient attention
(benchmarks/results/attention-h100-2026-11-26.json, rows flash and
sdpa_efficient). ``flash_attention`` runs it wherever the GPU has TF32 tensor
cores; its tile shapes, ``TensorCoreConfig``, are defined here and tuned in
``config``.

The same kernel runs on Numba's simulator, where the instruction is the
stand-in of ``gpucourse.kernels.tensor_cores`` (every thread of a block must
then call it the same number of times: no warp skips a tile there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4_flat
from gpucourse.kernels.attention.limits import (DYNAMIC_SHARED_LIMIT_BYTES, FLOAT32_BYTES,
                                               WARP_SIZE, _INLINE, unsigned, unsigned64)
from gpucourse.kernels.attention.shared_tiles import PaddedTiles
from gpucourse.kernels.tensor_cores import cvt_rna_tf32, mma_m16n8k8_tf32
from numba import float32  # noqa: E402 (after gpucourse.device)

ROWS_PER_WARP = 16  # the instruction's M


@dataclass(frozen=True)
class TensorCoreConfig(PaddedTiles):
    """The tile shape of the tensor-core kernel: ``warps`` warps of 16 query
    rows each (block_rows = 16 warps), ``block_cols`` keys per step.
    ``prefetch``: read the next K and V tiles into registers while the
    current ones are used (more registers, fewer stalls). ``split_kv`` and
    ``split_q``: keep the K and V tiles (the Q tile) in shared memory already
    split into big and small parts, each element split once per block rather
    than once per warp that reads it (twice the shared memory and the loads).
    ``max_registers``: cap the registers per thread (0: ptxas's own count), so
    that more blocks fit on a multiprocessor."""

    head_dim: int
    warps: int
    block_cols: int
    prefetch: bool = True
    split_kv: bool = False
    split_q: bool = False
    max_registers: int = 0  # a cap for ptxas (more blocks per SM); 0: its own choice

    @property
    def block_rows(self) -> int:
        return ROWS_PER_WARP * self.warps

    @property
    def threads(self) -> int:
        return WARP_SIZE * self.warps

    # Row lengths of the shared tiles. A warp's 128-bit fragment loads of Q
    # and K read 8 lanes at a time: two rows, 64 bytes of each; rows 16
    # floats past a multiple of 32 (64 bytes past 128) put the two halves in
    # different banks (q_row and k_row come from PaddedTiles). Its loads of V
    # read four rows two apart, 32 bytes each: rows 4 floats past a multiple
    # of 16 put those in different banks.
    ROW_PADDING = 16  # a class attribute, not a field

    @property
    def v_row(self) -> int:
        return self.head_dim + 4

    @cached_property  # read on every call; a frozen dataclass keeps it in __dict__
    def shared_bytes(self) -> int:
        q = self.block_rows * self.q_row * (2 if self.split_q else 1)
        kv = self.block_cols * (self.k_row + self.v_row) * (2 if self.split_kv else 1)
        return FLOAT32_BYTES * (q + kv)

    def grid(self, batch: int, heads: int, seq: int) -> tuple:
        """Blocks of a launch: one per (batch, head) along x, per query tile along y."""
        return (batch * heads, (seq + self.block_rows - 1) // self.block_rows, 1)

    @property
    def label(self) -> str:
        """A short name, for tables and plots: tile, warps and options."""
        options = [name for name, on in (("prefetch", self.prefetch), ("split K, V", self.split_kv),
                                         ("split Q", self.split_q)) if on]
        if self.max_registers:
            options.append(f"≤{self.max_registers} registers")
        return (f"{self.block_rows} x {self.block_cols}, {self.warps} warps"
                + (f" ({', '.join(options)})" if options else ""))


def check_tc_config(config: TensorCoreConfig) -> TensorCoreConfig:
    """Refuse a tile shape the kernel cannot run (ValueError naming the field)."""
    if config.head_dim % 32 or config.head_dim <= 0:
        raise ValueError(f"the tensor-core kernel needs head_dim a positive multiple of 32 "
                         f"(its output tiles come in groups of 32 columns), got "
                         f"{config.head_dim}")
    if config.block_cols % 8 or config.block_cols <= 0:
        raise ValueError(f"block_cols must be a positive multiple of 8 (the instruction's "
                         f"N), got {config.block_cols}")
    if not 1 <= config.warps <= 32:
        raise ValueError(f"warps must be 1 to 32, got {config.warps}")
    if config.threads % config.head_dim and config.head_dim % config.threads:
        raise ValueError(f"threads per block ({config.threads}) and head_dim "
                         f"({config.head_dim}) must divide one another")
    if (config.block_cols * config.head_dim) % config.threads:
        raise ValueError(f"the threads per block ({config.threads}) must divide block_cols * "
                         f"head_dim ({config.block_cols * config.head_dim})")
    if config.max_registers and not 32 <= config.max_registers <= 255:
        raise ValueError(f"max_registers must be 0 (no cap) or 32 to 255, got "
                         f"{config.max_registers}")
    if config.shared_bytes > DYNAMIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"the tiles need {config.shared_bytes} bytes of shared memory; a "
                         f"block may have at most {DYNAMIC_SHARED_LIMIT_BYTES}")
    return config


def reset_simulator() -> None:
    """Forget the simulator stand-in's record of earlier calls (before a launch)."""
    if not on_gpu():
        from gpucourse.kernels import tensor_cores

        for state in (tensor_cores._SCRATCH_TF32, tensor_cores._TF32_CALLS,
                      tensor_cores._TF32_RESULTS):
            state.clear()


@lru_cache(maxsize=None)
def flash_forward_tc(config: TensorCoreConfig, causal: bool, use_shuffles: bool, to_io):
    """The kernel's Python function for one tile shape (attention compiles it,
    for raw pointers on a GPU): the same parameters as attention's tiled
    kernel, q, k, v, out, lse, seq, key_seq, heads and the scale (which
    carries log2 e). to_io rounds a float32 to the output's element type."""
    check_tc_config(config)
    D, W, BC = config.head_dim, config.warps, config.block_cols
    BR, THREADS = config.block_rows, config.threads
    NT = BC // 8  # the 8-key tiles of S a warp computes per step
    GROUPS = D // 32  # groups of four 8-column output tiles
    NO = D // 8  # output tiles
    Q_ROW, K_ROW, V_ROW = unsigned(config.q_row), unsigned(config.k_row), unsigned(config.v_row)
    SPLIT_Q, SPLIT_KV = config.split_q, config.split_kv
    Q_SIZE = BR * config.q_row  # one part of a tile: with a split, the small parts follow
    K_SIZE = BC * config.k_row
    V_SIZE = BC * config.v_row
    Q_ALL = Q_SIZE * (2 if SPLIT_Q else 1)
    K_ALL = K_SIZE * (2 if SPLIT_KV else 1)
    V_ALL = V_SIZE * (2 if SPLIT_KV else 1)
    K_BASE, V_BASE, END = Q_ALL, Q_ALL + K_ALL, Q_ALL + K_ALL + V_ALL
    Q_SMALL, K_SMALL, V_SMALL = unsigned(Q_SIZE), unsigned(K_SIZE), unsigned(V_SIZE)
    DYNAMIC = config.dynamic_shared
    PREFETCH = config.prefetch
    Q_LOADS = BR * D // THREADS
    KV_LOADS = BC * D // THREADS
    # A warp whose rows all come before a causal tile's first key skips the
    # tile; on the simulator every thread must reach every instruction.
    SKIP_MASKED_WARPS = causal and use_shuffles
    NEG_INF = np.float32(-np.inf)
    LN2 = np.float32(math.log(2.0))
    ZERO = np.float32(0.0)
    ALIGN = SHARED_ALIGNMENT
    RED_SIZE = BR * 4  # the simulator's row maxima and sums: (row, lane of the row)

    @cuda.jit(device=True, **_INLINE)
    def split(x):
        # x = big + small, both TF32: the big part rounded, the small part the
        # rest (exact in fp32), rounded in turn.
        big = cvt_rna_tf32(x)
        return big, cvt_rna_tf32(x - big)

    @cuda.jit(device=True, **_INLINE)
    def mma3(a_big, a_small, b_big, b_small, c0, c1, c2, c3):
        # D = A B + C in 3xTF32, from operands split once by their caller (a
        # value feeds several instructions: split each only once): the two
        # small products first, then the big one.
        d = mma_m16n8k8_tf32(a_small[0], a_small[1], a_small[2], a_small[3], b_big[0], b_big[1],
                             c0, c1, c2, c3)
        d = mma_m16n8k8_tf32(a_big[0], a_big[1], a_big[2], a_big[3], b_small[0], b_small[1],
                             d[0], d[1], d[2], d[3])
        return mma_m16n8k8_tf32(a_big[0], a_big[1], a_big[2], a_big[3], b_big[0], b_big[1],
                                d[0], d[1], d[2], d[3])

    @cuda.jit(device=True, **_INLINE)
    def mma_small(a_big, a_small, b_big, b_small, c0, c1, c2, c3):
        # C plus the two small products of 3xTF32 (mma3 without the big one).
        d = mma_m16n8k8_tf32(a_small[0], a_small[1], a_small[2], a_small[3], b_big[0], b_big[1],
                             c0, c1, c2, c3)
        return mma_m16n8k8_tf32(a_big[0], a_big[1], a_big[2], a_big[3], b_small[0], b_small[1],
                                d[0], d[1], d[2], d[3])

    @cuda.jit(device=True, **_INLINE)
    def mma_big(a_big, b_big, c0, c1, c2, c3):
        # C plus the big product.
        return mma_m16n8k8_tf32(a_big[0], a_big[1], a_big[2], a_big[3], b_big[0], b_big[1],
                                c0, c1, c2, c3)

    @cuda.jit(device=True, **_INLINE)
    def split_a(a0, a1, a2, a3):
        # An A fragment as (big parts, small parts).
        h0, l0 = split(a0)
        h1, l1 = split(a1)
        h2, l2 = split(a2)
        h3, l3 = split(a3)
        return (h0, h1, h2, h3), (l0, l1, l2, l3)

    @cuda.jit(device=True, **_INLINE)
    def split_b(b0, b1):
        # A B fragment as (big parts, small parts).
        h0, l0 = split(b0)
        h1, l1 = split(b1)
        return (h0, h1), (l0, l1)

    @cuda.jit(device=True, **_INLINE)
    def fetch_kv(k, v, k_next, v_next, base, valid, t):
        # This thread's share of the next K and V tiles, coalesced; elements
        # past the end of the keys read as zero.
        for it in range(KV_LOADS):
            idx = t + it * THREADS
            k_next[it] = ZERO
            v_next[it] = ZERO
            if idx < valid:
                k_next[it] = float32(k[unsigned64(base + idx)])
                v_next[it] = float32(v[unsigned64(base + idx)])

    def kernel(q, k, v, out, lse, seq, key_seq, heads, scale):
        t = cuda.threadIdx.x
        warp, lane = t // WARP_SIZE, t % WARP_SIZE
        g, tq = lane // 4, lane % 4  # the fragment's row group and column pair
        # Blocks start roughly in the order of their index, x fastest: x is
        # the (batch, head), y the query tile. Under a causal mask the last
        # query tiles do the most work, so y counts them from the last: every
        # head's heaviest tile starts first, and the light ones fill the gaps
        # at the end (with the tile fastest, one head's heavy tiles would
        # start only after the other heads' light ones, and run on alone).
        if causal:
            q_start = (cuda.gridDim.y - 1 - cuda.blockIdx.y) * BR
        else:
            q_start = cuda.blockIdx.y * BR
        warp_row = warp * ROWS_PER_WARP  # the warp's first row in the tile
        bh = cuda.blockIdx.x
        head_base = bh * seq * D
        kv_base = bh * key_seq * D
        t_row = unsigned(t // D)
        t_col = unsigned(t % D)

        if DYNAMIC:
            tiles = cuda.shared.array(0, float32, alignment=ALIGN)
            q_tile = tiles[:K_BASE]
            k_tile = tiles[K_BASE:V_BASE]
            v_tile = tiles[V_BASE:END]
        else:
            q_tile = cuda.shared.array(Q_ALL, float32, alignment=ALIGN)
            k_tile = cuda.shared.array(K_ALL, float32, alignment=ALIGN)
            v_tile = cuda.shared.array(V_ALL, float32, alignment=ALIGN)
        reduce_buf = cuda.shared.array(RED_SIZE, float32)  # the simulator's shuffles

        # The query tile, scaled, once; rows past the end are zeros.
        q_base = head_base + q_start * D
        q_valid = (seq - q_start) * D
        for it in range(Q_LOADS):
            idx = t + it * THREADS
            value = ZERO
            if idx < q_valid:
                value = float32(q[unsigned64(q_base + idx)]) * scale
            r = t_row + unsigned((it * THREADS) // D)
            at = r * Q_ROW + t_col + unsigned((it * THREADS) % D)
            if SPLIT_Q:
                big, small = split(value)
                q_tile[at] = big
                q_tile[Q_SMALL + at] = small
            else:
                q_tile[at] = value

        s = cuda.local.array((NT, 4), float32)  # scores, then probabilities
        s_small = cuda.local.array((NT, 4), float32)  # the scores' small products
        o = cuda.local.array((NO, 4), float32)  # the output, in fragment places
        row_max = cuda.local.array(2, float32)  # rows g and g + 8 of the warp's 16
        row_sum = cuda.local.array(2, float32)  # this lane's share of the sums
        tile_max = cuda.local.array(2, float32)
        shift = cuda.local.array(2, float32)
        alpha = cuda.local.array(2, float32)
        k_next = cuda.local.array(KV_LOADS, float32)
        v_next = cuda.local.array(KV_LOADS, float32)
        for h in range(2):
            row_max[h] = NEG_INF
            row_sum[h] = ZERO
        for n in range(NO):
            for i in range(4):
                o[n, i] = ZERO

        n_tiles = (key_seq + BC - 1) // BC
        if causal:
            last_row = min(q_start + BR, seq) - 1
            n_tiles = min(n_tiles, last_row // BC + 1)
        if PREFETCH:
            fetch_kv(k, v, k_next, v_next, kv_base, key_seq * D, t)

        # Where this lane's fragments start in each tile (see the module's notes).
        q_at = (unsigned(warp_row) + unsigned(g)) * Q_ROW + unsigned(4) * unsigned(tq)
        k_at = unsigned(g) * K_ROW + unsigned(4) * unsigned(tq)
        v_at = unsigned(2) * unsigned(tq) * V_ROW + unsigned(4) * unsigned(g)
        warp_last_row = q_start + warp_row + ROWS_PER_WARP - 1

        for kt in range(n_tiles):
            k_start = kt * BC
            cuda.syncthreads()  # everyone is done with the previous tiles
            if not PREFETCH:
                fetch_kv(k, v, k_next, v_next, kv_base + k_start * D, (key_seq - k_start) * D, t)
            for it in range(KV_LOADS):
                j = t_row + unsigned((it * THREADS) // D)
                c = t_col + unsigned((it * THREADS) % D)
                if SPLIT_KV:
                    big, small = split(k_next[it])
                    k_tile[j * K_ROW + c] = big
                    k_tile[K_SMALL + j * K_ROW + c] = small
                    big, small = split(v_next[it])
                    v_tile[j * V_ROW + c] = big
                    v_tile[V_SMALL + j * V_ROW + c] = small
                else:
                    k_tile[j * K_ROW + c] = k_next[it]
                    v_tile[j * V_ROW + c] = v_next[it]
            cuda.syncthreads()
            if PREFETCH and kt + 1 < n_tiles:
                fetch_kv(k, v, k_next, v_next, kv_base + (k_start + BC) * D,
                         (key_seq - k_start - BC) * D, t)
            if SKIP_MASKED_WARPS and k_start > warp_last_row:
                continue  # every key of this tile comes after every row of this warp

            # S = Q K^T, two 8-wide steps of the head dim per pair of loads.
            for j in range(NT):
                for i in range(4):
                    s[j, i] = ZERO
                    s_small[j, i] = ZERO
            for c in range(D // 16):
                at = q_at + unsigned(16 * c)
                qa0, qa1, qa2, qa3 = load_float4_flat(q_tile, at)  # row g
                qb0, qb1, qb2, qb3 = load_float4_flat(q_tile, at + unsigned(8) * Q_ROW)  # g + 8
                if SPLIT_Q:
                    sa0, sa1, sa2, sa3 = load_float4_flat(q_tile, Q_SMALL + at)
                    sb0, sb1, sb2, sb3 = load_float4_flat(q_tile, Q_SMALL + at + unsigned(8) * Q_ROW)
                    qa_big, qa_small = (qa0, qb0, qa1, qb1), (sa0, sb0, sa1, sb1)
                    qb_big, qb_small = (qa2, qb2, qa3, qb3), (sa2, sb2, sa3, sb3)
                else:
                    qa_big, qa_small = split_a(qa0, qb0, qa1, qb1)  # one step of 8 ...
                    qb_big, qb_small = split_a(qa2, qb2, qa3, qb3)  # ... and the next
                for j in range(NT):
                    if SKIP_MASKED_WARPS and k_start + 8 * j > warp_last_row:
                        continue  # keys all after the warp's rows: masked below
                    at = k_at + unsigned(8 * j) * K_ROW + unsigned(16 * c)
                    k0, k1, k2, k3 = load_float4_flat(k_tile, at)
                    if SPLIT_KV:
                        l0, l1, l2, l3 = load_float4_flat(k_tile, K_SMALL + at)
                        ka_big, ka_small = (k0, k1), (l0, l1)
                        kb_big, kb_small = (k2, k3), (l2, l3)
                    else:
                        ka_big, ka_small = split_b(k0, k1)
                        kb_big, kb_small = split_b(k2, k3)
                    # Two sums per tile, the big products' and the small ones':
                    # two chains of dependent instructions, not one twice as long.
                    d = mma_big(qa_big, ka_big, s[j, 0], s[j, 1], s[j, 2], s[j, 3])
                    e = mma_small(qa_big, qa_small, ka_big, ka_small, s_small[j, 0],
                                  s_small[j, 1], s_small[j, 2], s_small[j, 3])
                    d = mma_big(qb_big, kb_big, d[0], d[1], d[2], d[3])
                    e = mma_small(qb_big, qb_small, kb_big, kb_small, e[0], e[1], e[2], e[3])
                    for i in range(4):
                        s[j, i] = d[i]
                        s_small[j, i] = e[i]
            for j in range(NT):
                for i in range(4):
                    s[j, i] += s_small[j, i]

            # Mask keys past the end and, when causal, after the row.
            if k_start + BC > key_seq or (causal and k_start + BC - 1 > q_start + warp_row):
                for j in range(NT):
                    for i in range(4):
                        key = k_start + 8 * j + 2 * tq + i % 2
                        row = q_start + warp_row + g + 8 * (i // 2)
                        if key >= key_seq or (causal and key > row):
                            s[j, i] = NEG_INF
            # The online softmax of rows g (h = 0) and g + 8 (h = 1): each
            # row's scores are spread over the four lanes of its group.
            for h in range(2):
                tile_max[h] = NEG_INF
                for j in range(NT):
                    tile_max[h] = max(tile_max[h], max(s[j, 2 * h], s[j, 2 * h + 1]))
            if use_shuffles:
                for h in range(2):
                    tile_max[h] = max(tile_max[h], cuda.shfl_xor_sync(0xFFFFFFFF, tile_max[h], 1))
                    tile_max[h] = max(tile_max[h], cuda.shfl_xor_sync(0xFFFFFFFF, tile_max[h], 2))
            else:
                for h in range(2):
                    reduce_buf[(warp_row + g + 8 * h) * 4 + tq] = tile_max[h]
                cuda.syncthreads()
                for h in range(2):
                    for other in range(4):
                        tile_max[h] = max(tile_max[h],
                                          reduce_buf[(warp_row + g + 8 * h) * 4 + other])
                cuda.syncthreads()
            for h in range(2):
                new_max = max(row_max[h], tile_max[h])
                shift[h] = new_max if new_max != NEG_INF else ZERO
                alpha[h] = math.exp2(row_max[h] - shift[h])
                row_max[h] = new_max
            for h in range(2):
                tile_sum = ZERO
                for j in range(NT):
                    for x in range(2):
                        p = math.exp2(s[j, 2 * h + x] - shift[h])
                        s[j, 2 * h + x] = p
                        tile_sum += p
                row_sum[h] = row_sum[h] * alpha[h] + tile_sum
            for n in range(NO):
                for i in range(4):
                    o[n, i] *= alpha[i // 2]

            # O += P V: the lane's probabilities of keys 2t and 2t + 1 are its
            # A fragment; V's rows 2t and 2t + 1 its B fragments, four output
            # tiles per pair of 128-bit loads.
            for j in range(NT):
                if SKIP_MASKED_WARPS and k_start + 8 * j > warp_last_row:
                    continue  # its probabilities are all zero
                p_big, p_small = split_a(s[j, 0], s[j, 2], s[j, 1], s[j, 3])
                for grp in range(GROUPS):
                    at = v_at + unsigned(8 * j) * V_ROW + unsigned(32 * grp)
                    x0, x1, x2, x3 = load_float4_flat(v_tile, at)
                    y0, y1, y2, y3 = load_float4_flat(v_tile, at + V_ROW)
                    if SPLIT_KV:
                        u0, u1, u2, u3 = load_float4_flat(v_tile, V_SMALL + at)
                        w0, w1, w2, w3 = load_float4_flat(v_tile, V_SMALL + at + V_ROW)
                    for i in range(4):  # output tile 4 grp + i: b0 = x[i], b1 = y[i]
                        xi = x0 if i == 0 else (x1 if i == 1 else (x2 if i == 2 else x3))
                        yi = y0 if i == 0 else (y1 if i == 1 else (y2 if i == 2 else y3))
                        if SPLIT_KV:
                            ui = u0 if i == 0 else (u1 if i == 1 else (u2 if i == 2 else u3))
                            wi = w0 if i == 0 else (w1 if i == 1 else (w2 if i == 2 else w3))
                            v_big, v_small = (xi, yi), (ui, wi)
                        else:
                            v_big, v_small = split_b(xi, yi)
                        n = 4 * grp + i
                        d = mma3(p_big, p_small, v_big, v_small, o[n, 0], o[n, 1], o[n, 2],
                                 o[n, 3])
                        for e in range(4):
                            o[n, e] = d[e]

        # The sums over the four lanes of each row, one division, the output.
        if use_shuffles:
            for h in range(2):
                row_sum[h] += cuda.shfl_xor_sync(0xFFFFFFFF, row_sum[h], 1)
                row_sum[h] += cuda.shfl_xor_sync(0xFFFFFFFF, row_sum[h], 2)
        else:
            cuda.syncthreads()
            for h in range(2):
                reduce_buf[(warp_row + g + 8 * h) * 4 + tq] = row_sum[h]
            cuda.syncthreads()
            for h in range(2):
                row_sum[h] = ZERO
                for other in range(4):
                    row_sum[h] += reduce_buf[(warp_row + g + 8 * h) * 4 + other]
        for h in range(2):
            row = q_start + warp_row + g + 8 * h
            if row < seq:
                inverse = float32(1.0) / row_sum[h]
                base = head_base + row * D + 8 * tq
                for grp in range(GROUPS):
                    for i in range(4):  # tile 4 grp + i holds columns 4n + i of the group
                        out[unsigned64(base + 32 * grp + i)] = to_io(o[4 * grp + i, 2 * h]
                                                                     * inverse)
                        out[unsigned64(base + 32 * grp + 4 + i)] = to_io(
                            o[4 * grp + i, 2 * h + 1] * inverse)
                if tq == 0:
                    lse[unsigned64(bh * seq + row)] = (row_max[h] + math.log2(row_sum[h])) * LN2

    return kernel
