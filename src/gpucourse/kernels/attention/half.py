"""FlashAttention-2 in fp16 and bf16 on mma.sync.m16n8k16: the forward pass at production speed.

The forward kernels of ``forward`` and ``tensor_cores`` compute in float32
(half-precision inputs are converted as they are loaded), the second in
3xTF32 on the tensor cores. Models are trained in fp16 and bf16, and there
FlashAttention-2 runs both of its products on the fp16/bf16 tensor cores.
This kernel does too, with the HGEMM ladder's machinery (``tensor_cores.moves``):

* **Q stays in registers.** A block of ``warps`` warps owns 16 query rows per
  warp. It copies its Q tile into shared memory once (``cp.async``), and each
  warp reads its rows' A fragments with ``ldmatrix`` and keeps them for the
  whole walk over the keys.
* **K and V stream through shared memory**, a tile of ``block_cols`` keys at a
  time, by ``cp.async`` into two stages: the copy of the next tile is in
  flight while the warps work on this one. The tiles are swizzled like the
  HGEMM's, so the ``ldmatrix`` reads have no bank conflicts.
* **S = Q K^T on the tensor cores, scores and statistics in float32.** K's
  rows (keys) read without ``.trans`` are exactly the "col" B fragment.
* **P is rounded to halves in registers for P V**, as FlashAttention-2 does:
  the lane's scores of keys 2t, 2t + 1 (rows g and g + 8) of two 8-key tiles
  are, packed two to a register, its A fragment for 16 keys. V's tile is read
  with ``ldmatrix.trans``.
* **The online softmax** in base 2 (the scale carries log2 e), row maxima
  and sums over the four lanes of a row group by warp shuffles (a shared
  buffer on the simulator, which has none), the output divided once at the
  end, and the log-sum-exp written for the backward pass.

Inputs are (batch, heads, seq, head_dim) arrays of halves seen as uint16 bits
(one kernel for fp16 and bf16, the ``kind`` choosing the instruction), head
dims that are multiples of 16, any sequence lengths; causal masks put the
diagonal at the top left, like PyTorch's ``is_causal``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba import float32, int32, uint16, uint32, uint64  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.attention.limits import block_place
from gpucourse.kernels.launch import compiled_launchable
from gpucourse.kernels.tensor_cores.fragments import WARP
from gpucourse.kernels.tensor_cores.hgemm_ladder import CHUNK, _swizzle
from gpucourse.kernels.tensor_cores.moves import (cp_async_16, cp_async_commit, cp_async_wait,
                                                 global_address_flat, ldmatrix_x4,
                                                 ldmatrix_x4_trans, mma_packed, mma_packed_bf16,
                                                 pack_bf16x2, pack_f16x2, shared_address)

NEG_INF = float32(-np.inf)


class WarpTiles:
    """What the tiles of a tensor-core attention kernel derive from its `warps`
    warps of 16 rows each: the block's rows, its threads and its grid (the
    configs of attention.half, half_backward and tf32_backward)."""

    @property
    def block_rows(self) -> int:
        return 16 * self.warps

    @property
    def threads(self) -> int:
        return WARP * self.warps

    def grid(self, batch: int, heads: int, rows: int) -> tuple:
        """One block per tile of the `rows` it owns (queries, or keys) along x,
        per head along y, per batch along z."""
        return ((rows + self.block_rows - 1) // self.block_rows, heads, batch)


@dataclass(frozen=True)
class HalfConfig(WarpTiles):
    """The tile shape of the half-precision kernel: `warps` warps of 16 query
    rows each, key tiles of block_cols keys, for one head_dim."""
    head_dim: int
    warps: int = 4
    block_cols: int = 64

    @property
    def shared_bytes(self) -> int:
        """Q's tile and two stages of K's and V's, in halves of 2 bytes."""
        return 2 * self.head_dim * (self.block_rows + 4 * self.block_cols)


SIMULATOR_CONFIG = {16: HalfConfig(16, warps=2, block_cols=32),
                    32: HalfConfig(32, warps=2, block_cols=32)}


def check_half_config(config: HalfConfig) -> None:
    """ValueError naming what is accepted, for tiles the kernel cannot take."""
    d = config.head_dim
    if d % 16 or not 16 <= d <= 256:
        raise ValueError(f"head_dim must be a multiple of 16 from 16 to 256 for the "
                         f"half-precision kernel, got {d}")
    if config.block_cols % 16 or config.warps < 1:
        raise ValueError(f"block_cols must be a multiple of 16 and warps positive, got "
                         f"{config.block_cols} and {config.warps}")
    chunks = d // CHUNK
    if (config.block_rows * chunks) % config.threads or (config.block_cols * chunks) \
            % config.threads:
        raise ValueError(f"the tiles' 16-byte pieces must divide among the {config.threads} "
                         f"threads: block rows {config.block_rows}, block cols "
                         f"{config.block_cols}, head dim {d}")


def make_row_store(pack, o_tiles: int):
    """The device function store_row(out, at, acc, h, scale): a lane's part of
    row g (h = 0) or g + 8 (h = 1) of a warp's 16 x head_dim sums (acc, in
    C-fragment places, o_tiles tiles of 8 columns), times scale, rounded to
    halves two at a time by `pack` into the flat array out from element `at`
    (the row's start plus the lane's column 2t). The forward's output and the
    backward's three gradients are all written this way."""

    @cuda.jit(device=True, inline=True)
    def store_row(out, at, acc, h, scale):
        for ot in range(o_tiles):
            both = pack(acc[ot * 4 + 2 * h] * scale, acc[ot * 4 + 2 * h + 1] * scale)
            out[at + ot * 8] = uint16(both & uint32(0xFFFF))
            out[at + ot * 8 + 1] = uint16(both >> uint32(16))

    return store_row


@lru_cache(maxsize=None)
def make_flash_half_kernel(config: HalfConfig, causal: bool, kind: str, use_shuffles: bool):
    """The kernel for one tile shape, mask and kind ("f16" or "bf16"):
    kernel(q, k, v, out, lse, seq, key_seq, heads, scale2), q, k, v and out
    flat uint16 arrays of (batch, heads, seq or key_seq, head_dim) halves, lse
    flat float32 (batch, heads, seq), scale2 the scale times log2 e."""
    check_half_config(config)
    D, BR, BC, threads = config.head_dim, config.block_rows, config.block_cols, config.threads
    chunks = D // CHUNK  # 16-byte chunks per row of a tile
    shift, modulus = _swizzle(chunks)
    q_loads, kv_loads = BR * chunks // threads, BC * chunks // threads
    d_steps, key_steps = D // 16, BC // 16  # 16-wide steps of S's and of P V's inner dims
    s_tiles, o_tiles = BC // 8, D // 8  # 8-wide n-tiles of S and of O
    s_size, o_size = s_tiles * 4, o_tiles * 4
    q_registers, p_registers, v_pairs = d_steps * 4, key_steps * 4, o_tiles // 2
    tile_bytes = BC * D * 2
    step_bytes = 16 * D * 2  # 16 rows of a tile
    mma = mma_packed if kind == "f16" else mma_packed_bf16
    pack = pack_f16x2 if kind == "f16" else pack_bf16x2
    wait_all = cp_async_wait(0)
    LN2 = float32(math.log(2.0))
    reduce_size = BR * 4
    store_row = make_row_store(pack, o_tiles)

    @cuda.jit(device=True, inline=True)
    def place(row, col):
        """Where a tile keeps element (row, col): 16-byte chunks swizzled."""
        return row * D + (((col // CHUNK) ^ ((row // shift) % modulus)) * CHUNK) + col % CHUNK

    @cuda.jit(device=True, inline=True)
    def quad_max(x, reduce_buf, slot, lane_in_quad):
        """The maximum of x over the 4 lanes of a row group."""
        if use_shuffles:
            x = max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, 1))
            return max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, 2))
        reduce_buf[slot * 4 + lane_in_quad] = x
        cuda.syncthreads()
        for other in range(4):
            x = max(x, reduce_buf[slot * 4 + other])
        cuda.syncthreads()
        return x

    @cuda.jit(device=True, inline=True)
    def quad_sum(x, reduce_buf, slot, lane_in_quad):
        """The sum of x over the 4 lanes of a row group."""
        if use_shuffles:
            x += cuda.shfl_xor_sync(0xFFFFFFFF, x, 1)
            return x + cuda.shfl_xor_sync(0xFFFFFFFF, x, 2)
        reduce_buf[slot * 4 + lane_in_quad] = x
        cuda.syncthreads()
        total = float32(0.0)
        for other in range(4):
            total += reduce_buf[slot * 4 + other]
        cuda.syncthreads()
        return total

    @cuda.jit(**({"fastmath": True} if on_gpu() else {}))
    def kernel(q, k, v, out, lse, seq, key_seq, heads, scale2):
        smem = cuda.shared.array(0, uint16)
        reduce_buf = cuda.shared.array(reduce_size, float32)
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        # Under a mask the heaviest (last) tiles first; each streams K and V (half).
        bh, tile = block_place(causal, True, BR * D * 4)
        q_start = tile * BR
        q_base = bh * seq * D
        kv_base = bh * key_seq * D
        # The copies, planned once: where each of this thread's 16-byte pieces
        # of the Q, K and V tiles goes in shared memory and comes from.
        q_to = cuda.local.array(q_loads, uint32)
        kv_to = cuda.local.array(kv_loads, uint32)
        k_from = cuda.local.array(kv_loads, uint64)
        v_from = cuda.local.array(kv_loads, uint64)
        kv_limit = cuda.local.array(kv_loads, uint32)
        for i in range(q_loads):
            index = i * threads + thread
            row, col = index // chunks, (index % chunks) * CHUNK
            q_to[i] = shared_address(smem, place(row, col))
            inside = q_start + row < seq
            cp_async_16(q_to[i], global_address_flat(
                q, q_base + min(q_start + row, seq - 1) * D + col), inside)
        for i in range(kv_loads):
            index = i * threads + thread
            row, col = index // chunks, (index % chunks) * CHUNK
            kv_to[i] = shared_address(smem, BR * D + place(row, col))
            at = kv_base + min(row, key_seq - 1) * D + col
            k_from[i] = global_address_flat(k, at)
            v_from[i] = global_address_flat(v, at)
            kv_limit[i] = uint32(key_seq - row) if row < key_seq else uint32(0)
        key_tiles = (key_seq + BC - 1) // BC
        if causal:
            key_tiles = min(key_tiles, (q_start + BR + BC - 1) // BC)
        # Tile 0 of K and V into stage 0 (K) and stage 1's place (V): the
        # stages are laid out K0, V0, K1, V1 after Q.
        for i in range(kv_loads):
            inside = uint32(0) < kv_limit[i]
            cp_async_16(kv_to[i], k_from[i], inside)
            cp_async_16(kv_to[i] + uint32(tile_bytes), v_from[i], inside)
        cp_async_commit()
        wait_all()
        cuda.syncthreads()
        # This warp's rows of Q, as A fragments for each 16 of the head dim.
        qf = cuda.local.array(q_registers, uint32)
        r, c = lane % 16, (lane // 16) * 8
        for ks in range(d_steps):
            x = ldmatrix_x4(shared_address(smem, place(warp * 16 + r, ks * 16 + c)))
            for j in range(4):
                qf[ks * 4 + j] = x[j]
        # The ldmatrix addresses of K (rows = keys, no .trans) and V (.trans),
        # for the first 16 keys of stage 0; others are constant bytes away.
        k_reads = cuda.local.array(d_steps, uint32)
        v_reads = cuda.local.array(v_pairs, uint32)
        key_in_pair = (lane % 8) + 8 * (lane // 16)
        for ks in range(d_steps):
            k_reads[ks] = shared_address(smem, BR * D + place(key_in_pair,
                                                              ks * 16 + 8 * ((lane // 8) % 2)))
        for tp in range(v_pairs):
            v_reads[tp] = shared_address(smem, BR * D + BC * D + place(r, tp * 16 + c))
        s = cuda.local.array(s_size, float32)
        o = cuda.local.array(o_size, float32)
        p = cuda.local.array(p_registers, uint32)
        row_max = cuda.local.array(2, float32)
        row_sum = cuda.local.array(2, float32)
        for i in range(o_size):
            o[i] = float32(0.0)
        for h in range(2):
            row_max[h] = NEG_INF
            row_sum[h] = float32(0.0)
        stage = uint32(0)
        for j in range(key_tiles):
            if j > 0:
                wait_all()  # tile j, copied during tile j - 1's work
                cuda.syncthreads()  # ... and visible to all; tile j - 1's stage is free
            if j + 1 < key_tiles:  # the next tile into the other stage
                other = uint32(2 * tile_bytes) - stage
                advance = uint64((j + 1) * BC * D * 2)
                first = uint32((j + 1) * BC)
                for i in range(kv_loads):
                    inside = first < kv_limit[i]
                    cp_async_16(kv_to[i] + other, k_from[i] + advance, inside)
                    cp_async_16(kv_to[i] + other + uint32(tile_bytes), v_from[i] + advance,
                                inside)
            cp_async_commit()
            # S = Q K^T for this warp's 16 rows and the tile's BC keys.
            for i in range(s_size):
                s[i] = float32(0.0)
            for pair in range(BC // 16):
                for ks in range(d_steps):
                    x = ldmatrix_x4(k_reads[ks] + stage + uint32(pair * step_bytes))
                    for half in range(2):
                        n = (2 * pair + half) * 4
                        d = mma(qf[ks * 4], qf[ks * 4 + 1], qf[ks * 4 + 2], qf[ks * 4 + 3],
                                x[2 * half], x[2 * half + 1], s[n], s[n + 1], s[n + 2],
                                s[n + 3])
                        for e in range(4):
                            s[n + e] = d[e]
            # Scale to base 2, and mask keys past the end or after the query.
            k_start = j * BC
            masked = k_start + BC > key_seq or (causal and k_start + BC - 1 > q_start)
            for nt in range(s_tiles):
                for e in range(4):
                    s[nt * 4 + e] *= scale2
                    if masked:
                        key = k_start + nt * 8 + 2 * t + e % 2
                        row = q_start + warp * 16 + g + 8 * (e // 2)
                        if key >= key_seq or (causal and key > row):
                            s[nt * 4 + e] = NEG_INF
            # The online softmax of rows g (h = 0) and g + 8 (h = 1).
            for h in range(2):
                tile_max = NEG_INF
                for nt in range(s_tiles):
                    tile_max = max(tile_max, max(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]))
                tile_max = quad_max(tile_max, reduce_buf, warp * 16 + g + 8 * h, t)
                new_max = max(row_max[h], tile_max)
                base = new_max if new_max != NEG_INF else float32(0.0)  # a row all masked
                alpha = math.exp2(row_max[h] - base)
                row_max[h] = new_max
                total = float32(0.0)
                for nt in range(s_tiles):
                    for e in range(2):
                        value = math.exp2(s[nt * 4 + 2 * h + e] - base)
                        s[nt * 4 + 2 * h + e] = value
                        total += value
                row_sum[h] = row_sum[h] * alpha + total
                for ot in range(o_tiles):
                    o[ot * 4 + 2 * h] *= alpha
                    o[ot * 4 + 2 * h + 1] *= alpha
            # P in halves, as A fragments of 16 keys: two 8-key tiles' rows g, g + 8.
            for kk in range(key_steps):
                p[kk * 4] = pack(s[8 * kk], s[8 * kk + 1])
                p[kk * 4 + 1] = pack(s[8 * kk + 2], s[8 * kk + 3])
                p[kk * 4 + 2] = pack(s[8 * kk + 4], s[8 * kk + 5])
                p[kk * 4 + 3] = pack(s[8 * kk + 6], s[8 * kk + 7])
            # O += P V.
            for kk in range(key_steps):
                for tp in range(v_pairs):
                    x = ldmatrix_x4_trans(v_reads[tp] + stage + uint32(kk * step_bytes))
                    for half in range(2):
                        n = (2 * tp + half) * 4
                        d = mma(p[kk * 4], p[kk * 4 + 1], p[kk * 4 + 2], p[kk * 4 + 3],
                                x[2 * half], x[2 * half + 1], o[n], o[n + 1], o[n + 2],
                                o[n + 3])
                        for e in range(4):
                            o[n + e] = d[e]
            stage = uint32(2 * tile_bytes) - stage
        # The row sums over the row group's lanes, one division, the output
        # rounded to halves two at a time, and the log-sum-exp (natural log).
        for h in range(2):
            total = quad_sum(row_sum[h], reduce_buf, warp * 16 + g + 8 * h, t)
            row = q_start + warp * 16 + g + 8 * h
            if row < seq:
                store_row(out, q_base + row * D + 2 * t, o, h, float32(1.0) / total)
                if t == 0:
                    lse[bh * seq + row] = (row_max[h] + math.log2(total)) * LN2

    return kernel


# ---------------------------------------------------------------------------
# Launching

# The head dims flash_attention sends here on a GPU, and their tiles. Measured
# on an H100 (B4 H16, N 1024 and 4096, fp16 and bf16, causal or not), against
# SDPA's flash backend in the same run: 4 warps of 16 rows with 64-key tiles
# at head dim 64 took 0.78-1.03x its time (8 warps: 0.87-1.34x); at head dim
# 128, 32-key tiles took 1.06-1.26x (8 warps: 1.31-1.47x), while 64-key
# tiles put the scores in local memory (7-9x). Notes in benchmarks/NOTES.md.
HALF_HEAD_DIMS = (16, 32, 64, 128)


def half_config(head_dim: int) -> HalfConfig:
    """The tile shape for a head dim: on the simulator, small ones."""
    if not on_gpu():
        return SIMULATOR_CONFIG.get(head_dim, HalfConfig(head_dim, warps=2, block_cols=32))
    return HalfConfig(head_dim, warps=4, block_cols=64 if head_dim <= 64 else 32)


# What the kernel is compiled for: q, k, v, out (halves), lse, seq, key_seq,
# heads and the scale.
_SIGNATURE = (uint16[::1],) * 4 + (float32[::1], int32, int32, int32, float32)


def _launchable(config, causal, kind, device_id):
    """(function, stream) of the compiled kernel, found once per GPU."""
    return compiled_launchable(make_flash_half_kernel(config, causal, kind, True), _SIGNATURE,
                               config.shared_bytes, device_id)


KINDS = {"float16": "f16", "bfloat16": "bf16"}


def launch_half(config, causal, kind, q, k, v, out, lse, scale2):
    """One launch on CUDA torch tensors q (batch, heads, seq, d), k and v
    (batch, heads, key_seq, d), out like q, lse (batch, heads, seq) float32,
    all C-contiguous; unchecked."""
    import ctypes

    from gpucourse.kernels.launch import (core_launch, current_gpu, flat_argument,
                                          launch_config)

    batch, heads, seq, d = q.shape
    key_seq = k.shape[2]
    function, stream = _launchable(config, causal, kind, current_gpu())
    args = [flat_argument(x.data_ptr(), x.numel(), x.element_size()) for x in (q, k, v, out, lse)]
    core_launch()(stream, launch_config(config.grid(batch, heads, seq), config.threads,
                                        config.shared_bytes),
                  function, *(value for arg in args for value in arg), ctypes.c_int32(seq),
                  ctypes.c_int32(key_seq), ctypes.c_int32(heads), ctypes.c_float(scale2))


def half_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """(out, lse): softmax(scale q k^T) v for fp16 or bf16 torch tensors (CUDA
    ones on a GPU; CPU ones on the simulator), by the kernel above. q: (batch,
    heads, seq, head_dim), k and v: (batch, heads, key_seq, head_dim). out in
    q's dtype, lse float32 (natural log)."""
    import torch

    kinds = {torch.float16: "f16", torch.bfloat16: "bf16"}
    if any(x.dtype != q.dtype for x in (k, v)) or q.dtype not in kinds or q.ndim != 4:
        raise ValueError(f"q, k and v must be 4-D tensors of one dtype, float16 or bfloat16 "
                         f"(flash_attention takes the rest); got {q.dtype}, {k.dtype} and "
                         f"{v.dtype}, q of shape {tuple(q.shape)}")
    kind = kinds[q.dtype]
    batch, heads, seq, d = q.shape
    config = half_config(d)
    scale = d ** -0.5 if scale is None else scale
    scale2 = scale * math.log2(math.e)
    q, k, v = (x.contiguous() for x in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seq), dtype=torch.float32, device=q.device)
    if q.is_cuda:
        launch_half(config, causal, kind, q, k, v, out, lse, scale2)
        return out, lse
    from gpucourse.kernels.tensor_cores.moves import forget_earlier_moves

    def bits(x):
        return x.view(torch.int16).numpy().reshape(-1).view(np.uint16)

    kernel = make_flash_half_kernel(config, causal, kind, False)
    forget_earlier_moves()
    kernel[config.grid(batch, heads, seq), config.threads, 0, config.shared_bytes](
        bits(q), bits(k), bits(v), bits(out), lse.numpy().reshape(-1), np.int32(seq),
        np.int32(k.shape[2]), np.int32(heads), np.float32(scale2))
    return out, lse
