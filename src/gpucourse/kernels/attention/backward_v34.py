"""The backward pass, versions 3 and 4: large tiles in dynamic shared memory, four floats a load.

Version 3 keeps version 2's structure (a dK-dV kernel and a dQ kernel) but
takes its tiles from dynamic shared memory, so that tiles of 64 keys and 64
queries fit, and reads them 128 bits at a time. Version 4 does all the work
in one kernel: the dK-dV kernel also adds each tile's share of dQ into a
float32 array with atomic adds, saving two of version 3's seven tile
products. Both are built from one set of device functions
(``_tiled_functions``), so version 4 is version 3 plus its extra work, not a
copy of it. Their tile configurations, and the sweep that chose them, are
here too.

On an H100 (batch 4, 16 heads, head_dim 64, no mask) version 3 took 3.00 ms
at seq 1024 and 35.8 ms at seq 4096, version 4 (the default, through its
quick torch path) 2.03 and 29.8 ms, against 1.63 and 20.4 ms for the backward
of PyTorch's memory-efficient attention
(benchmarks/results/attention_backward-h100-2026-11-26.json, rows
flash_bwd_v3, flash_bwd and sdpa_efficient_bwd).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4_flat
from gpucourse.kernels.attention.forward import _IO_CONVERSIONS
from gpucourse.kernels.attention.limits import (DYNAMIC_SHARED_LIMIT_BYTES, WARP_SIZE, _INLINE,
                                                block_place, unsigned)
from gpucourse.kernels.attention.shared_tiles import float4_run_loader
from numba import float32  # noqa: E402 (after gpucourse.device, which configures Numba)
from numba.types import float16  # noqa: E402


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
    if nt % WARP_SIZE or nt > 1024:
        raise ValueError(f"threads must be a multiple of {WARP_SIZE} up to 1024; got {config}")
    if (b // sq) * (b // sk) != nt or (b // vk) * (head_dim // vc) != nt:
        raise ValueError(f"the score patches ({b // sq} x {b // sk}) and the output patches "
                         f"({b // vk} x {head_dim // vc}) must each take all {nt} threads; "
                         f"got {config}")
    if (b * head_dim) % (4 * nt):
        raise ValueError(f"a tile of {b} x {head_dim} floats must load in groups of four, "
                         f"evenly over {nt} threads; got {config}")
    shared = shared_bytes_v3(head_dim, b, version)
    if shared > DYNAMIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"config {config} needs {shared} bytes of shared memory, over the "
                         f"{DYNAMIC_SHARED_LIMIT_BYTES} a block may have on an H100")
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
    element = types.Array(float16 if io == "float16" else float32, 1, "C")
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
    to_io = _IO_CONVERSIONS[io]()
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
    ALIGN = SHARED_ALIGNMENT
    load4 = load_float4_flat
    u = unsigned  # unsigned indices on a GPU (see attention.unsigned)

    @cuda.jit(device=True, **_INLINE)
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

    @cuda.jit(device=True, **_INLINE)
    def four_tiles(smem):
        """The four padded (B, D) tiles X, Y, U and W of the dynamic array: a
        block keeps its own rows in X and Y and streams the others through U
        and W."""
        return smem[X_BASE:Y_BASE], smem[Y_BASE:U_BASE], smem[U_BASE:W_BASE], smem[W_BASE:P_BASE]

    @cuda.jit(device=True, **_INLINE)
    def patch_corners(t):
        """Where thread t's patches sit: (sy, sx) among the score patches (rows
        sy + NY x, keys sx + TX y), (oy, ox) among the output patches (rows
        oy VK .., columns from ox * 4)."""
        sy = t // TX
        sx = t - sy * TX
        oy = t // GX
        ox = t - oy * GX
        return sy, sx, oy, ox

    @cuda.jit(device=True, **_INLINE)
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

    @cuda.jit(device=True, **_INLINE)
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

    # load_run(dst, smem, at): dst[0 .. VK] = VK neighbouring floats of shared
    # memory from `at`, four per load (the forward's value_step reads its
    # probabilities with the same device function).
    load_run = float4_run_loader(VK)

    @cuda.jit(device=True, **_INLINE)
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

    @cuda.jit(device=True, **_INLINE)
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

    @cuda.jit(device=True, **_INLINE)
    def dkdv_rows(smem, dv_acc, dk_acc, p4, ds4, p_at, d_at):
        """ROWS_PER_PASS rows of dkdv_row, written out."""
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at, d_at)
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at + u(PR), d_at + u(DR))
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at + u(2 * PR), d_at + u(2 * DR))
        dkdv_row(smem, dv_acc, dk_acc, p4, ds4, p_at + u(3 * PR), d_at + u(3 * DR))

    @cuda.jit(device=True, **_INLINE)
    def dq_row(smem, dq_acc, ds4, ds_at, k_at):
        """One key's share of dQ += dS K: ds_at is the key's row of dS
        transposed (this thread's VK queries), k_at its row of K (this
        thread's columns)."""
        load_run(ds4, smem, ds_at)
        for g in range(GROUPS):
            k0, k1, k2, k3 = load4(smem, k_at + u(g * GX * 4))
            add_outer(dq_acc, ds4, g, k0, k1, k2, k3)

    @cuda.jit(device=True, **_INLINE)
    def dq_rows(smem, dq_acc, ds4, ds_at, k_at):
        """ROWS_PER_PASS keys of dq_row, written out."""
        dq_row(smem, dq_acc, ds4, ds_at, k_at)
        dq_row(smem, dq_acc, ds4, ds_at + u(PR), k_at + u(DR))
        dq_row(smem, dq_acc, ds4, ds_at + u(2 * PR), k_at + u(2 * DR))
        dq_row(smem, dq_acc, ds4, ds_at + u(3 * PR), k_at + u(3 * DR))

    @cuda.jit(device=True, **_INLINE)
    def add_ds_k(smem, dq_acc, ds4, ds_base, k_base, oy, ox):
        """dq_acc += dS K over a tile's B keys, on this thread's VK queries x VC
        columns: dS transposed ([key, query]) from ds_base, K from k_base."""
        ds_at = u(ds_base) + u(oy * VK)
        k_at = u(k_base) + u(ox * 4)
        for _ in range(B // ROWS_PER_PASS):
            dq_rows(smem, dq_acc, ds4, ds_at, k_at)
            ds_at += u(PR4)
            k_at += u(DR4)

    @cuda.jit(device=True, **_INLINE)
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
        @cuda.jit(device=True, **_INLINE)
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

        @cuda.jit(device=True, **_INLINE)
        def run(q, k, v, dout, lse, delta, dq, dk, dv, seq, key_seq, scale):
            # The block's keys and values stay in shared memory (tiles X and Y);
            # query tiles stream through U (Q) and W (dO).
            # Under a mask the heaviest tiles first; each streams Q and dO (and adds
            # into dq, version 4), float32.
            bh, key_tile = block_place(causal, False, B * D * (12 if with_dq else 8))
            key0 = key_tile * B
            t = cuda.threadIdx.x
            smem = cuda.shared.array(0, float32, alignment=ALIGN)
            k_s, v_s, q_s, do_s = four_tiles(smem)
            s_acc = cuda.local.array((SQ, SK), np.float32)
            p_acc = cuda.local.array((SQ, SK), np.float32)
            dk_acc = cuda.local.array((VK, VC), np.float32)
            dv_acc = cuda.local.array((VK, VC), np.float32)
            dq_acc = cuda.local.array((VK, VC), np.float32)
            p4 = cuda.local.array(VK, np.float32)
            ds4 = cuda.local.array(VK, np.float32)
            sy, sx, oy, ox = patch_corners(t)
            kv_base = (bh * key_seq + key0) * D
            load_tile(k, kv_base, key_seq - key0, k_s, t)
            load_tile(v, kv_base, key_seq - key0, v_s, t)
            for x in range(VK):
                for y in range(VC):
                    dk_acc[x, y] = np.float32(0.0)
                    dv_acc[x, y] = np.float32(0.0)
            # Under the mask, query tiles before this key tile see none of its keys.
            first = key_tile if causal else 0
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
        # The mirror image of key_tile_pass's run, a deliberate variant (and
        # version 2's dQ kernel with version 3's tiles): the block's queries
        # stay in shared memory (Q in X, dO in Y); key tiles stream through U
        # (K) and W (V).
        bh = cuda.blockIdx.y
        tile = cuda.blockIdx.x
        row0 = tile * B
        t = cuda.threadIdx.x
        smem = cuda.shared.array(0, float32, alignment=ALIGN)
        q_s, do_s, k_s, v_s = four_tiles(smem)
        # The patches live in registers: like run's (which adds dK's and dV's),
        # they are declared here, in the kernel that uses them.
        s_acc = cuda.local.array((SQ, SK), np.float32)
        p_acc = cuda.local.array((SQ, SK), np.float32)
        dq_acc = cuda.local.array((VK, VC), np.float32)
        ds4 = cuda.local.array(VK, np.float32)
        sy, sx, oy, ox = patch_corners(t)
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
