"""The fp32 attention backward on the tensor cores in 3xTF32: ``flash_attention_backward``'s version 6.

Version 4 computes the backward's five tile products on the CUDA cores and
took 1.01-1.46 times the time of PyTorch's memory-efficient backward on an
H100, whose products run on the tensor cores in 3xTF32. This version took
0.63-0.95 times it on the H200 (results/attention_backward-h200-2026-11-29.json).
This module is ``half_backward``'s structure (FlashAttention-2's backward: a pre-pass, then
one kernel or two) with float32 operands split into a big TF32 part and a
small rest, each product three ``mma.sync.m16n8k8`` TF32 instructions, a_small
b_big + a_big b_small + a_big b_big, as the forward (``attention.tensor_cores``)
computes its two (``tf32_fragments.make_3xtf32`` says how the parts are made):

* a pre-pass, ``D_i = sum_c dO_ic O_ic`` in float32 (``backward``'s
  ``_row_dot_kernel``, one thread per row);
* ``dK and dV``: a block owns 16 keys per warp, keeps their K and V in
  shared memory and walks the query tiles (Q and dO by cp.async, two stages;
  the queries' L and D staged a tile ahead). S^T = K Q^T puts the keys in the
  rows of the C fragments, so that P^T and dS^T are A fragments where they lie;
  dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q;
* ``dQ``: a block owns 16 queries per warp, keeps their Q and dO, walks the
  key tiles: S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K.

Three choices make the fragments cheap, the first two the forward's:

* **The inner dimension may be taken in any order** as long as both operands
  take it the same way. Along the head dim, lane (g, t) (g = lane // 4, t =
  lane % 4) takes dims 16c + 4t and 16c + 4t + 1 for one 8-wide step and
  16c + 4t + 2, 16c + 4t + 3 for the next, so one 128-bit load of a row feeds
  two steps. Along the queries (or keys) of P^T dO, dS^T Q and dS K, the lane's
  C-fragment scores of columns 2t and 2t + 1 are its A fragment if the B
  operand's rows are read as 2t for the fragment's row t and 2t + 1 for t + 4.
* **Output columns permuted within groups of 32**: the 8-column output tile i
  of a group holds head-dim columns 4n + i (n = 0..7), so that one 128-bit load
  of a row of dO, Q or K (columns 4g .. 4g + 3) gives the B fragments of four
  tiles, and the lane ends holding columns 8t .. 8t + 7 of each of its rows.
* **One swizzle for both reads.** Every tile is read two ways: rows g (a
  quarter-warp: two rows, four 16-byte chunks of each) and rows 2t, 2t + 1
  (four rows, two chunks of each). Chunk c of row r is stored at chunk
  c ^ h(r), h(r) = 2 ((r // 2) % 4) ^ 4 (r % 2), which sends both patterns'
  eight chunks to eight different groups of four banks (``bank_groups``
  lists them; tests/test_attention_backward_tf32.py checks it).

**dK and dV apart** (``split_sums``, the default at head dim 128:
``SPLIT_SUMS_HEAD_DIMS``). The one kernel holds both sums, 64 floats a lane
each at head dim 128, and fits 8-row query tiles alone: about 11 SASS instructions a HMMA in
its walk, most of them splitting the block's own K or V again for each
narrow tile. With split_sums ``make_dkdv_kernel`` is built twice: a dV kernel
(S^T, P^T, dV += P^T dO) and a dK kernel (S^T, dP^T, dS^T, dK += dS^T Q, and
dQ's share with atomic dQ), one sum each, so that 8 warps walk 32-row tiles
(about 6.5 instructions a HMMA) for S^T computed twice: five products a pair
of tiles instead of four, and with dQ added by the dK kernel six for the
whole backward instead of seven. The dV kernel reads no V: it keeps K alone
in shared memory, and walks 64-row tiles in the room that leaves
(``dv_block_cols``).

**Long sums.** The tensor cores truncate the sums they make, so one chain of
mma sums along a whole walk drifts (``tf32_fast`` measured 25x cuBLAS fp32's
error for a chain of 1,536 at 4096^3). So each tile's share of dK, dV and dQ
is summed from zero, four output tiles at a time (16 registers), and added to
the sums with float32 adds, which round: chains of 3 x block_cols / 8
instructions. The scores' chains, 3 x head_dim / 8 long, are the forward's.

Inputs: float32, C-contiguous, (batch, heads, seq, head_dim) and (batch,
heads, key_seq, head_dim), head_dim in TF32_BACKWARD_HEAD_DIMS (multiples of
32: the output groups); torch CUDA tensors on a GPU with tensor cores, numpy
arrays or CPU torch tensors on Numba's simulator (where the instructions are
``tensor_cores``' stand-ins and every thread of a block must reach every
instruction: no warp skips a tile). Timed on an H200: benchmarks/NOTES.md.
``tf32_backward_atomic``: the one kernel (``atomic_dq=True``, default at 64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from numba import float32, int32, int64, uint16  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT
from gpucourse.kernels.attention.backward import _row_dot_kernel
from gpucourse.kernels.attention.half import WarpTiles
from gpucourse.kernels.attention.half_backward import query_stat
from gpucourse.kernels.attention.limits import DYNAMIC_SHARED_LIMIT_BYTES, block_place, unsigned
from gpucourse.kernels.attention.tf32_backward_atomic import atomic_dq_floats, make_atomic_dq
from gpucourse.kernels.attention.tf32_fragments import (device, lane_reads, make_3xtf32,
                                                        make_four_products, make_tile_functions)
from gpucourse.kernels.tensor_cores.fragments import WARP
from gpucourse.kernels.tensor_cores.intrinsics import cvt_rna_tf32, tf32_big_part
from gpucourse.kernels.tensor_cores.moves import (cp_async_16, cp_async_commit, cp_async_wait,
                                                 global_address_flat, shared_address)

TF32_BACKWARD_HEAD_DIMS = (32, 64, 128)
# Head dims at which dK and dV's tiles have split_sums by default: 128, where
# on the H200 the two kernels with dQ added atomically took 0.83-1.06x SDPA
# memory-efficient's backward against the one kernel's 1.10-1.66x and
# version 4's 0.97-1.44x (N 1024 and 4096, both masks;
# results/reruns/attention_backward-h200-2026-11-29-third.json); with the
# dV kernel's wider walks below and unsigned indices in dQ's atomic adds,
# 0.81-0.95x, the one kernel 1.14-1.63x (results/attention_backward-h200-2026-11-29.json).
SPLIT_SUMS_HEAD_DIMS = (128,)
# The dV kernel of the split sums keeps K alone in shared memory, which
# leaves room for 64-query walks (255 registers, no spill, for sm_90), where
# the dK kernel's K and V allow 32: the H200 timed the backward at head dim
# 128 in 0.88-1.01x SDPA memory-efficient's time with 64, 0.94-1.06x with
# 32 (results/reruns/attention_backward_partial-h200-2026-11-29-d128-dv-walks.json;
# after the unsigned indices, 0.87-0.95x and 0.86-0.98x: -d128-dv-walks-32.json).
DV_BLOCK_COLS = 64
SPLIT_SUMS_BLOCK_COLS = 32  # the dK kernel's walks (and the dV kernel's where dv_block_cols is 0)
FLOAT_BYTES = 4


@dataclass(frozen=True)
class Tf32BackwardConfig(WarpTiles):
    """The tiles of one of version 6's kernels: `warps` warps of 16 rows each
    (the block's own keys, or queries), walking tiles of `block_cols` rows of
    the other side; `round_small`: round the small parts of 3xTF32 to TF32
    too (make_3xtf32 says what it costs and gains); `split_walked`: split the
    walked tiles into big and small parts once, when they arrive in shared
    memory, for all the warps (``make_tile_functions`` says why), instead of
    in each warp as it reads them; `split_sums` (dK and dV's tiles alone):
    dK and dV in two kernels, each holding one sum (make_dkdv_kernel's sums),
    so that wider query tiles fit the registers, for S^T computed twice;
    `dv_block_cols` (with split_sums): the dV kernel's walked tiles, if not
    0 (``dv_tiles``): that kernel keeps no V, which leaves room for wider
    ones."""

    head_dim: int
    warps: int = 4
    block_cols: int = 32
    round_small: bool = False
    split_walked: bool = False
    split_sums: bool = False
    dv_block_cols: int = 0

    def shared_bytes(self, stats: bool = False, own: int = 2) -> int:
        """The block's `own` own tiles (two: K and V, or Q and dO; one in
        split_sums' dV kernel, K), two stages of the two walked ones and,
        with `stats` (dK and dV's kernel), two stages of the walked queries'
        L and D; with split_walked, then the small parts of one stage."""
        return FLOAT_BYTES * (self.small_base(stats, own)
                              + (2 * self.block_cols * self.head_dim if self.split_walked else 0))

    def small_base(self, stats: bool = False, own: int = 2) -> int:
        """Where (in floats) the small parts of the walked tiles start, after
        everything else in the block's shared memory."""
        floats = self.head_dim * (own * self.block_rows + 4 * self.block_cols)
        return floats + (4 * self.block_cols if stats else 0)


def dv_tiles(config: Tf32BackwardConfig) -> Tf32BackwardConfig:
    """The tiles of split_sums' dV kernel: config's, walking dv_block_cols
    queries at a time where that is not 0. (Its shared memory holds one own
    tile, K: shared_bytes(stats=True, own=1).)"""
    return replace(config, block_cols=config.dv_block_cols or config.block_cols, dv_block_cols=0)


def check_tf32_backward_config(config: Tf32BackwardConfig) -> Tf32BackwardConfig:
    """Refuse tiles the kernels cannot run (ValueError naming what is accepted)."""
    for name in ("round_small", "split_walked", "split_sums"):
        if not isinstance(getattr(config, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(config, name)!r}")
    if config.dv_block_cols:
        if not config.split_sums:
            raise ValueError(f"dv_block_cols is the walk of the dV kernel, which only "
                             f"split_sums=True builds: set split_sums too, or leave it 0, got "
                             f"{config.dv_block_cols}")
        _check_tiles(dv_tiles(config), own=1, name="dv_block_cols")
    return _check_tiles(config, own=2, name="block_cols")


def _check_tiles(config: Tf32BackwardConfig, own: int, name: str) -> Tf32BackwardConfig:
    """check_tf32_backward_config's checks of one kernel's tiles (walked tiles
    of config.block_cols, named `name` in the messages; `own` own tiles)."""
    d = config.head_dim
    if d not in TF32_BACKWARD_HEAD_DIMS:
        raise ValueError(f"version 6 takes head_dim in {TF32_BACKWARD_HEAD_DIMS} (its output "
                         f"tiles come in groups of 32 columns), got {d}")
    if not isinstance(config.block_cols, int) or config.block_cols % 8 \
            or config.block_cols <= 0 or config.warps < 1:
        raise ValueError(f"{name} must be a positive multiple of 8 and warps positive, got "
                         f"{config.block_cols!r} and {config.warps}")
    if 2 * config.block_cols > config.threads:
        raise ValueError(f"{name} may be at most half the threads ({config.threads}): one "
                         f"thread moves each walked query's L and each one's D, got "
                         f"{config.block_cols}")
    chunks = d // 4  # 16-byte chunks of a row
    if config.threads % chunks or (config.block_cols * chunks) % config.threads \
            or (config.block_rows * chunks) % config.threads:
        raise ValueError(f"the tiles' {chunks}-chunk rows ({config.block_rows} and "
                         f"{config.block_cols} of them) must divide among {config.threads} "
                         f"threads, whole rows at a time")
    if config.shared_bytes(stats=True, own=own) > DYNAMIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"the tiles ({name} {config.block_cols}) need "
                         f"{config.shared_bytes(stats=True, own=own)} bytes of shared memory; "
                         f"a block may have at most {DYNAMIC_SHARED_LIMIT_BYTES}")
    return config


def backward_configs(head_dim: int, split_sums: bool | None = None, atomic_dq: bool = False
                     ) -> tuple[Tf32BackwardConfig, Tf32BackwardConfig]:
    """(dK and dV's tiles, dQ's tiles). On a GPU, 4 warps, and walked tiles as
    wide as the registers allow without spilling (ptxas for sm_90): dK and dV's
    kernel holds both sums (head_dim registers) besides a tile's scores, so
    32-row tiles at head dim 64 (235 registers: two blocks a multiprocessor)
    and 8-row ones at 128 (255; 16-row ones spilled); dQ's, one sum, 32 at 64
    (133) and 16 at 128 (171; 32 would need 128 KiB of shared memory, one
    block a multiprocessor). On the simulator, small tiles: one warp walking
    8 rows, or 16 for dK and dV with `atomic_dq` (its pieces are 16 queries).

    With split_sums (dK and dV in two kernels, one sum each), dK and dV's
    tiles at head dim 128 are 8 warps walking 32-row tiles: the dK kernel at
    174 registers, 242 under the causal mask, and the dV kernel, walking
    DV_BLOCK_COLS queries, at 255, none with local memory (as the H200
    compiled them, 2026-11-29); 4 warps with 32-row tiles would need
    129 KiB of shared memory in dK's kernel (its K and V, two stages of Q and
    dO), one block of 4 warps a multiprocessor, where 8 warps share one
    block's 192 KiB (209 with atomic dQ's dS); the dV kernel, K alone in
    its shared memory, walks DV_BLOCK_COLS (64) queries at a time in 193 KiB.
    split_sums None (the default): at SPLIT_SUMS_HEAD_DIMS, where the H200
    timed them faster than the one kernel."""
    if split_sums is None:
        split_sums = head_dim in SPLIT_SUMS_HEAD_DIMS
    if not on_gpu():
        small = Tf32BackwardConfig(head_dim, warps=1, block_cols=8)
        return replace(small, split_sums=split_sums, block_cols=16 if atomic_dq else 8), small
    dq = Tf32BackwardConfig(head_dim, warps=4, block_cols=32 if head_dim <= 64 else 16)
    if head_dim <= 64:
        return replace(dq, split_sums=split_sums), dq
    if split_sums:
        return Tf32BackwardConfig(head_dim, warps=8, block_cols=SPLIT_SUMS_BLOCK_COLS,
                                  split_sums=True, dv_block_cols=DV_BLOCK_COLS), dq
    return Tf32BackwardConfig(head_dim, warps=4, block_cols=8), dq


def bank_groups(head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The groups of four banks (0..7) that each quarter-warp's 128-bit reads
    hit, for the two ways the kernels read a tile: (by rows, by pairs of rows),
    each of shape (reads, 8). Conflict-free when every row holds 8 distinct
    groups."""
    def group(row, col):
        return (tile_place(row, col, head_dim) // 4) % 8

    by_rows, by_pairs = [], []
    for quarter in range(4):
        lanes = range(8 * quarter, 8 * quarter + 8)
        for c in range(head_dim // 16):  # rows g, chunk 4c + t
            by_rows.append([group(lane // 4, 16 * c + 4 * (lane % 4)) for lane in lanes])
        for odd in range(2):  # rows 2t (+1), chunk 8 group + g
            for grp in range(head_dim // 32):
                by_pairs.append([group(2 * (lane % 4) + odd, 32 * grp + 4 * (lane // 4))
                                 for lane in lanes])
    return np.array(by_rows), np.array(by_pairs)


def tile_place(row, col, head_dim):
    """Where element (row, col) of a tile of head_dim-float rows lies, in
    floats: 16-byte chunk c of row r at chunk c ^ h(r) (see the module's notes)."""
    swizzle = (2 * ((row // 2) % 4)) ^ (4 * (row % 2))
    return row * head_dim + (((col // 4) ^ swizzle) * 4) + col % 4


place_in_tile = device(tile_place)  # the same, for the kernels


def make_copies(config: Tf32BackwardConfig, rows: int, pair: bool = True):
    """copy(smem, to, first, second, row_base, row0, count, thread): rows row0
    .. row0 + rows of two flat arrays of head_dim-float rows (rows counted from
    row_base; both given as the uint16 views of their bits) into shared memory
    at float `to`, the second tile right after the first, swizzled, by
    cp.async 16 bytes at a time; zeros from row `count` on (pair False: the
    first array's alone, the second not read). Each address is
    worked out where it is used, from the thread's number: a plan kept in
    registers across the walk (half_backward's) cost dK and dV's kernel 24
    registers, and spills at head dim 128."""
    D, threads = config.head_dim, config.threads
    chunks = D // 4  # 16-byte chunks of a row
    rows_at_once = threads // chunks
    passes, second = rows // rows_at_once, rows * D

    @device
    def copy(smem, to, first, second_array, row_base, row0, count, thread):
        col = 4 * (thread % chunks)
        for i in range(passes):
            row = i * rows_at_once + thread // chunks
            inside = row0 + row < count
            at = 2 * ((row_base + min(row0 + row, count - 1)) * D + col)  # in halves
            place = to + place_in_tile(row, col, D)
            cp_async_16(shared_address(smem, 2 * place), global_address_flat(first, at), inside)
            if pair:
                cp_async_16(shared_address(smem, 2 * (place + second)),
                            global_address_flat(second_array, at), inside)

    return copy


@device
def store_rows(out, base, sums, scale, head_dim):
    """Rows g (h = 0) and g + 8 (h = 1) of a warp's output, from sums in the
    permuted C-fragment places: out[base[h] + c] for the lane's columns (8t ..
    8t + 7 of each group of 32); base[h] < 0: a row past the end."""
    t = cuda.threadIdx.x % 4
    for h in range(2):
        if base[h] >= 0:
            for grp in range(head_dim // 32):
                for i in range(4):
                    at = base[h] + 32 * grp + 8 * t + i
                    out[at] = sums[16 * grp + 4 * i + 2 * h] * scale
                    out[at + 4] = sums[16 * grp + 4 * i + 2 * h + 1] * scale


# ---------------------------------------------------------------------------
# The kernels


@lru_cache(maxsize=None)
def make_stage_split(config: Tf32BackwardConfig, stats: bool, own: int = 2):
    """split_stage(smemf, at, thread) -> the walked values' shift to their small
    parts (walked4's small_shift). With split_walked, the block's threads
    split the two walked tiles of a stage (2 block_cols x head_dim floats from
    float `at`) into big parts, left where the values were, and small parts,
    at the same offsets from config.small_base(stats, own) (the swizzle is the
    tiles'), then wait for each other: between a stage's arrival and its
    first read. Without it, nothing is split and the shift is 0."""
    stage_floats, threads = 2 * config.block_cols * config.head_dim, config.threads
    round_small, split_walked = config.round_small, config.split_walked
    small_at = unsigned(config.small_base(stats, own))

    @device
    def split_stage(smemf, at, thread):
        if not split_walked:
            return unsigned(0)
        for i in range(thread, stage_floats, threads):
            x = smemf[at + unsigned(i)]
            big = tf32_big_part(x)
            smemf[at + unsigned(i)] = big
            rest = x - big
            smemf[small_at + unsigned(i)] = cvt_rna_tf32(rest) if round_small else rest
        cuda.syncthreads()
        return small_at - at

    return split_stage


@lru_cache(maxsize=None)
def make_dkdv_kernel(config: Tf32BackwardConfig, causal: bool, atomic_dq: bool = False,
                     sums: str = "dkdv"):
    """``_build_dkdv_kernel`` on checked tiles, once per kernel: the dV kernel
    of split_sums is built on ``dv_tiles``, the others on tiles without
    dv_block_cols (the same dK kernel whatever the dV kernel's walk)."""
    check_tf32_backward_config(config)
    tiles = dv_tiles(config) if sums == "dv" else replace(config, dv_block_cols=0)
    return _build_dkdv_kernel(tiles, causal, atomic_dq, sums)


@lru_cache(maxsize=None)
def _build_dkdv_kernel(config: Tf32BackwardConfig, causal: bool, atomic_dq: bool = False,
                       sums: str = "dkdv"):
    """kernel(q, k, v, dout, lse, delta, dk, dv, dq, seq, key_seq, heads, scale2,
    scale): dK and dV of the block's keys (16 per warp), walking query tiles
    of config.block_cols; with atomic_dq, each tile's share of dQ added to dq
    too (zeroed first; ``tf32_backward_atomic``), else dq is not touched; q,
    k, v, dout as uint16 views of their float32 bits (the copies move bits),
    the rest float32, all flat. sums: "dkdv" both sums; "dk" or "dv" one of
    them (config.split_sums: two kernels), the other gradient not touched.
    The dV kernel computes S^T and P^T, then dV += P^T dO, with K alone in
    shared memory (it reads no V); the dK kernel all but dV's product (and
    dQ's share, with atomic_dq)."""
    if sums not in ("dkdv", "dk", "dv") or atomic_dq and sums == "dv":
        raise ValueError(f"sums must be 'dkdv', 'dk' or 'dv' (atomic dQ needs dS: not 'dv'), "
                         f"got {sums!r} with atomic_dq={atomic_dq}")
    own = 1 if sums == "dv" else 2  # the own tiles in shared memory: K (and V)
    with_dk, with_dv = sums != "dv", sums != "dk"
    D, BK, BQ = config.head_dim, config.block_rows, config.block_cols
    tiles, sums_size = BQ // 8, D // 2
    fragments = 4 * tiles  # a lane's values of a 16 x BQ tile
    tile_floats = BQ * D  # a Q (or dO) tile
    stage_floats = 2 * tile_floats  # a stage: Q, then dO
    kv_floats = own * BK * D  # K and V (or K alone), before the stages
    stats_base = kv_floats + 2 * stage_floats  # then two stages of L (times log2 e) and D
    stats_stage = 2 * BQ
    branch_free = D <= 64 and not causal  # P and dS without a branch (else: spills)
    scores, split_c, add_product = make_tile_functions(config)
    copy_keys, copy_queries = make_copies(config, BK, pair=own == 2), make_copies(config, BQ)
    wait_all = cp_async_wait(0)
    split_stage = make_stage_split(config, stats=True, own=own)
    store_ds, add_dq = make_atomic_dq(config, device, make_3xtf32(config.round_small)[0],
                                      make_four_products(config.round_small), atomic_dq)
    ds_base = config.shared_bytes(stats=True) // FLOAT_BYTES  # the block's dS, after the rest

    @cuda.jit
    def kernel(q, k, v, dout, lse, delta, dk, dv, dq, seq, key_seq, heads, scale2, scale):
        smem = cuda.shared.array(0, uint16)
        smemf = cuda.shared.array(0, float32, alignment=SHARED_ALIGNMENT)  # as float32
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        bh, tile = block_place(causal, False, BK * D * 12)  # heaviest first; Q, dO, dq
        k_start = tile * BK
        row_base = bh * seq
        # K and V of the block's keys, once; the first tile of Q and dO.
        copy_keys(smem, 0, k, v, bh * key_seq, k_start, key_seq, thread)
        first_tile = k_start // BQ if causal else 0
        copy_queries(smem, kv_floats, q, dout, row_base, first_tile * BQ, seq, thread)
        cp_async_commit()
        q_tiles = (seq + BQ - 1) // BQ
        even, odd, pair_even, pair_odd = lane_reads(g, t, D)
        own = unsigned(warp * 16 * D)
        s = cuda.local.array(fragments, float32)  # S^T, then P^T
        dp = cuda.local.array(fragments, float32)  # dP^T, then dS^T
        big = cuda.local.array(fragments, float32)
        small = cuda.local.array(fragments, float32)
        part = cuda.local.array(16, float32)
        dk_sums = cuda.local.array(sums_size, float32)
        dv_sums = cuda.local.array(sums_size, float32)
        for i in range(sums_size):
            dk_sums[i] = float32(0.0)
            dv_sums[i] = float32(0.0)
        # The queries' L and D go through shared memory, each read from global
        # memory once by one of the first 2 BQ threads, a tile ahead (as in
        # half_backward, where reading them per element stalled the warps).
        stat_query = thread % BQ
        moves_stat = thread < 2 * BQ
        if moves_stat:
            smemf[stats_base + thread] = query_stat(lse, delta, row_base,
                                                    first_tile * BQ + stat_query, seq,
                                                    thread < BQ)
        stage, stat = unsigned(0), 0
        for qi in range(first_tile, q_tiles):
            wait_all()
            cuda.syncthreads()
            if qi + 1 < q_tiles:  # the next tile into the other stage
                copy_queries(smem, kv_floats + stage_floats - stage, q, dout, row_base,
                             (qi + 1) * BQ, seq, thread)
            cp_async_commit()
            q_start = qi * BQ
            q_at = unsigned(kv_floats) + stage  # this stage's Q; its dO follows
            shift = split_stage(smemf, q_at, thread)  # from a walked value to its small part
            # S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys x BQ queries.
            scores(smemf, own, q_at, even, odd, s, shift)
            if with_dk:
                scores(smemf, own + unsigned(BK * D), q_at + unsigned(tile_floats), even, odd,
                       dp, shift)
            # P^T and dS^T: element e of tile n is key warp*16 + g + 8 (e // 2),
            # query q_start + 8n + 2t + e % 2.
            for n in range(tiles):
                for e in range(4):
                    query = q_start + 8 * n + 2 * t + e % 2
                    key = k_start + warp * 16 + g + 8 * (e // 2)
                    kept = query < seq and not (causal and query < key)
                    p = float32(0.0)
                    ds = float32(0.0)
                    if branch_free or kept:  # branch-free: a masked exponent is -1e30
                        # (L, D: 0 past seq; unsigned: no fix-up of negative indices)
                        at = unsigned(stats_base + stat + 8 * n + 2 * t + e % 2)
                        power = s[4 * n + e] * scale2 - smemf[at]
                        p = math.exp2(power if kept or not branch_free else float32(-1e30))
                        if with_dk:
                            ds = p * (dp[4 * n + e] - smemf[at + unsigned(BQ)])
                    s[4 * n + e] = p
                    dp[4 * n + e] = ds
            if atomic_dq:
                store_ds(smemf, ds_base, dp, warp, g, t)
            # The next tile's L or D, read now, stored after the products.
            following = float32(0.0)
            if moves_stat and qi + 1 < q_tiles:
                following = query_stat(lse, delta, row_base, (qi + 1) * BQ + stat_query, seq,
                                       thread < BQ)
            # dV += P^T dO and dK += dS^T Q.
            if with_dv:
                split_c(s, big, small)
                add_product(smemf, big, small, q_at + unsigned(tile_floats), pair_even,
                            pair_odd, dv_sums, part, shift)
            if with_dk:
                split_c(dp, big, small)
                add_product(smemf, big, small, q_at, pair_even, pair_odd, dk_sums, part, shift)
            if atomic_dq:  # every warp's dS stored: the tile's dQ over the block's keys
                cuda.syncthreads()
                add_dq(smemf, ds_base, part, dq, row_base, q_start, seq, warp, g, t, pair_even,
                       pair_odd, scale)
            if moves_stat and qi + 1 < q_tiles:  # the other stage, read by no warp now
                smemf[stats_base + stats_stage - stat + thread] = following
            stage = unsigned(stage_floats) - stage
            stat = stats_stage - stat
        base = cuda.local.array(2, int64)
        for h in range(2):
            key = k_start + warp * 16 + g + 8 * h
            base[h] = (bh * key_seq + key) * D if key < key_seq else -1
        if with_dk:
            store_rows(dk, base, dk_sums, scale, D)
        if with_dv:
            store_rows(dv, base, dv_sums, float32(1.0), D)

    return kernel


@lru_cache(maxsize=None)
def make_dq_kernel(config: Tf32BackwardConfig, causal: bool):
    """kernel(q, k, v, dout, lse, delta, dq, seq, key_seq, heads, scale2,
    scale): dQ of the block's queries (16 per warp), walking key tiles of
    config.block_cols; arguments as make_dkdv_kernel's."""
    check_tf32_backward_config(config)
    # The mirror image of make_dkdv_kernel's set-up, queries and keys swapped,
    # written out (a deliberate variant) so that its names say what it owns.
    D, BR, BC = config.head_dim, config.block_rows, config.block_cols
    tiles, sums_size = BC // 8, D // 2
    fragments = 4 * tiles  # a lane's values of a 16 x BC tile
    tile_floats = BC * D  # a K (or V) tile
    stage_floats = 2 * tile_floats
    qd_floats = 2 * BR * D  # Q and dO, before the stages
    scores, split_c, add_product = make_tile_functions(config)
    copy_queries, copy_keys = make_copies(config, BR), make_copies(config, BC)
    wait_all = cp_async_wait(0)
    split_stage = make_stage_split(config, stats=False)

    @cuda.jit
    def kernel(q, k, v, dout, lse, delta, dq, seq, key_seq, heads, scale2, scale):
        smem = cuda.shared.array(0, uint16)
        smemf = cuda.shared.array(0, float32, alignment=SHARED_ALIGNMENT)
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        g, t = lane // 4, lane % 4
        # Under a causal mask the last query tiles walk the most keys: every
        # head's start first, and the light ones fill the gaps at the end.
        bh, tile = block_place(causal, True, BR * D * 8)  # K and V, float32
        q_start = tile * BR
        row_base = bh * seq
        copy_queries(smem, 0, q, dout, row_base, q_start, seq, thread)
        key_tiles = (key_seq + BC - 1) // BC
        if causal:
            key_tiles = min(key_tiles, (q_start + BR + BC - 1) // BC)
        copy_keys(smem, qd_floats, k, v, bh * key_seq, 0, key_seq, thread)
        cp_async_commit()
        even, odd, pair_even, pair_odd = lane_reads(g, t, D)
        own = unsigned(warp * 16 * D)
        lse2 = cuda.local.array(2, float32)  # rows g and g + 8: L times log2 e, and D
        dd = cuda.local.array(2, float32)
        for h in range(2):
            row = q_start + warp * 16 + g + 8 * h
            lse2[h] = query_stat(lse, delta, row_base, row, seq, True)
            dd[h] = query_stat(lse, delta, row_base, row, seq, False)
        s = cuda.local.array(fragments, float32)
        dp = cuda.local.array(fragments, float32)
        big = cuda.local.array(fragments, float32)
        small = cuda.local.array(fragments, float32)
        part = cuda.local.array(16, float32)
        dq_sums = cuda.local.array(sums_size, float32)
        for i in range(sums_size):
            dq_sums[i] = float32(0.0)
        stage = unsigned(0)
        for j in range(key_tiles):
            wait_all()
            cuda.syncthreads()
            if j + 1 < key_tiles:
                copy_keys(smem, qd_floats + stage_floats - stage, k, v, bh * key_seq,
                          (j + 1) * BC, key_seq, thread)
            cp_async_commit()
            k_at = unsigned(qd_floats) + stage  # this stage's K; its V follows
            shift = split_stage(smemf, k_at, thread)
            # S = Q K^T and dP = dO V^T: the warp's 16 queries x BC keys.
            scores(smemf, own, k_at, even, odd, s, shift)
            scores(smemf, own + unsigned(BR * D), k_at + unsigned(tile_floats), even, odd, dp,
                   shift)
            # dS = P (dP - D): element e of tile n is query row g + 8 (e // 2)
            # of the warp's 16, key j BC + 8n + 2t + e % 2.
            for n in range(tiles):
                for e in range(4):
                    h = e // 2
                    key = j * BC + 8 * n + 2 * t + e % 2
                    row = q_start + warp * 16 + g + 8 * h
                    ds = float32(0.0)
                    if key < key_seq and not (causal and key > row):
                        ds = math.exp2(s[4 * n + e] * scale2 - lse2[h]) * (dp[4 * n + e]
                                                                           - dd[h])
                    dp[4 * n + e] = ds
            # dQ += dS K.
            split_c(dp, big, small)
            add_product(smemf, big, small, k_at, pair_even, pair_odd, dq_sums, part, shift)
            stage = unsigned(stage_floats) - stage
        base = cuda.local.array(2, int64)
        for h in range(2):
            row = q_start + warp * 16 + g + 8 * h
            base[h] = (row_base + row) * D if row < seq else -1
        store_rows(dq, base, dq_sums, scale, D)

    return kernel


# ---------------------------------------------------------------------------
# Launching

# What the kernels are compiled for: q, k, v, dout as the bits of their floats;
# lse, delta and the gradients as float32; the sizes and scales.
_BITS, _FLOATS = uint16[::1], float32[::1]
_SCALARS = (int32, int32, int32, float32, float32)
_DKDV_SIGNATURE = (_BITS,) * 4 + (_FLOATS,) * 5 + _SCALARS
_DQ_SIGNATURE = (_BITS,) * 4 + (_FLOATS,) * 3 + _SCALARS
ROW_THREADS = 128


def tf32_attention_backward(q, k, v, out, lse, dout, causal: bool = False,
                            scale: float | None = None, configs=None, atomic_dq: bool = False):
    """(dq, dk, dv) of softmax(scale q k^T) v in 3xTF32, for float32 inputs,
    C-contiguous: q, out, dout (batch, heads, seq, head_dim), k, v (batch,
    heads, key_seq, head_dim), lse (batch, heads, seq) in natural log; torch
    CUDA tensors on a GPU, numpy arrays or CPU torch tensors on the simulator;
    unchecked (flash_attention_backward checks). configs: (dK and dV's tiles,
    dQ's tiles), default backward_configs(head_dim, atomic_dq=atomic_dq).
    atomic_dq: dQ added by dK and dV's kernel (``tf32_backward_atomic``; dQ's
    tiles unused), or by the dK kernel where dK and dV's tiles have
    split_sums. Gradients in the inputs' kind."""
    batch, heads, seq, d = q.shape
    key_seq = k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    configs = configs if configs is not None else backward_configs(d, atomic_dq=atomic_dq)
    kernels = backward_kernels(*configs, causal, atomic_dq)
    sizes = (seq, key_seq, heads, scale * math.log2(math.e), scale)
    launch = _launch_on_gpu if hasattr(q, "is_cuda") and q.is_cuda else _launch_on_simulator
    return launch(kernels, atomic_dq, (q, k, v, out, lse, dout), sizes)


def backward_kernels(dkdv_config: Tf32BackwardConfig, dq_config: Tf32BackwardConfig,
                     causal: bool, atomic_dq: bool) -> list:
    """The kernels one backward pass launches, in order, as (kernel, its
    tiles, whether its blocks own keys, its shared memory in bytes): dK and
    dV's (or, with split_sums, the dV kernel and then the dK kernel), and
    dQ's unless atomic_dq."""
    if dkdv_config.split_sums:
        dv_config = dv_tiles(dkdv_config)
        kernels = [(make_dkdv_kernel(dkdv_config, causal, False, "dv"), dv_config, True,
                    dv_config.shared_bytes(stats=True, own=1)),
                   (make_dkdv_kernel(dkdv_config, causal, atomic_dq, "dk"), dkdv_config, True,
                    _shared_bytes(dkdv_config, True, atomic_dq))]
    else:
        kernels = [(make_dkdv_kernel(dkdv_config, causal, atomic_dq), dkdv_config, True,
                    _shared_bytes(dkdv_config, True, atomic_dq))]
    if not atomic_dq:
        kernels.append((make_dq_kernel(dq_config, causal), dq_config, False,
                        _shared_bytes(dq_config, False, False)))
    return kernels


def _launch_on_simulator(kernels, atomic_dq, tensors, sizes):
    """The launches on numpy arrays (CPU torch tensors are viewed as numpy and
    their gradients returned as torch tensors)."""
    from gpucourse.kernels.tensor_cores.intrinsics import forget_earlier_calls
    from gpucourse.kernels.tensor_cores.moves import forget_earlier_moves

    torch_in = not isinstance(tensors[0], np.ndarray)
    q, k, v, out, lse, dout = (np.ascontiguousarray(x.numpy() if torch_in else x,
                                                    dtype=np.float32) for x in tensors)
    batch, heads, seq, d = q.shape
    key_seq = k.shape[2]
    rows = batch * heads * seq
    delta = np.zeros(rows, np.float32)
    _row_dot_kernel[(rows + ROW_THREADS - 1) // ROW_THREADS, ROW_THREADS](
        out.reshape(rows, d), dout.reshape(rows, d), delta)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)  # dq zeroed: atomics
    bits = [x.reshape(-1).view(np.uint16) for x in (q, k, v, dout)]
    scalars = (np.int32(sizes[0]), np.int32(sizes[1]), np.int32(sizes[2]),
               np.float32(sizes[3]), np.float32(sizes[4]))
    for kernel, config, keys, shared in kernels:
        forget_earlier_moves()
        forget_earlier_calls()
        grads = (dk, dv, dq if atomic_dq else delta) if keys else (dq,)
        kernel[config.grid(batch, heads, key_seq if keys else seq), config.threads, 0, shared](
            *bits, lse.reshape(-1), delta, *(x.reshape(-1) for x in grads), *scalars)
    if torch_in:
        import torch

        return tuple(torch.from_numpy(x) for x in (dq, dk, dv))
    return dq, dk, dv


def _launch_on_gpu(kernels, atomic_dq, tensors, sizes):
    """The launches on CUDA torch tensors, straight to cuda.core."""
    import ctypes

    import torch

    from gpucourse.kernels.launch import (compiled_launchable, core_launch, current_gpu,
                                          flat_argument, launch_config)

    q, k, v, out, lse, dout = tensors
    batch, heads, seq, d = q.shape
    key_seq, rows = k.shape[2], batch * heads * seq
    device = current_gpu()
    launch = core_launch()
    delta = torch.empty(rows, dtype=torch.float32, device=q.device)
    dq = torch.zeros_like(q) if atomic_dq else torch.empty_like(q)  # zeroed: atomics
    dk, dv = torch.empty_like(k), torch.empty_like(v)

    def floats(x):
        return flat_argument(x.data_ptr(), x.numel(), 4)

    def bits(x):  # a float32 tensor as the uint16 array of its bits
        return flat_argument(x.data_ptr(), 2 * x.numel(), 2)

    row_dot, stream = _row_dot_launchable(device)
    launch(stream, launch_config((rows + ROW_THREADS - 1) // ROW_THREADS, ROW_THREADS), row_dot,
           *_matrix(out, rows, d), *_matrix(dout, rows, d), *floats(delta))
    scalars = (ctypes.c_int32(sizes[0]), ctypes.c_int32(sizes[1]), ctypes.c_int32(sizes[2]),
               ctypes.c_float(sizes[3]), ctypes.c_float(sizes[4]))
    inputs = (*bits(q), *bits(k), *bits(v), *bits(dout), *floats(lse), *floats(delta))
    for kernel, config, keys, shared in kernels:
        grads = (dk, dv, dq if atomic_dq else delta) if keys else (dq,)
        function, stream = compiled_launchable(kernel, _DKDV_SIGNATURE if keys else _DQ_SIGNATURE,
                                               shared, device)
        launch(stream, launch_config(config.grid(batch, heads, key_seq if keys else seq),
                                     config.threads, shared),
               function, *inputs, *(x for grad in grads for x in floats(grad)), *scalars)
    return dq, dk, dv


def _shared_bytes(config, stats, adds_dq):
    """A kernel's shared memory: its tiles, and with atomic dQ the block's dS."""
    return config.shared_bytes(stats) + (FLOAT_BYTES * atomic_dq_floats(config)
                                         if adds_dq else 0)


def _matrix(x, rows, cols):
    """A C-contiguous float32 tensor as the (rows, cols) matrix a kernel takes."""
    from gpucourse.kernels.launch import matrix_argument

    return matrix_argument(x.data_ptr(), rows, cols, 4)


@lru_cache(maxsize=None)
def _row_dot_launchable(device_id: int):
    """backward's pre-pass compiled for float32 matrices, once per GPU."""
    from numba import types

    from gpucourse.kernels.launch import launchable

    matrix = types.Array(types.float32, 2, "C")
    return launchable(_row_dot_kernel, (matrix, matrix, types.Array(types.float32, 1, "C")))
