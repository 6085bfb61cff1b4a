"""The tiled forward kernel on the CUDA cores: FlashAttention-2's loop order in Numba.

A block of threads owns a tile of query rows; it streams key and value tiles
through shared memory, keeps a running maximum and a running sum for each
row (the online softmax of ``reference``), rescales its output accumulator
when the maximum grows, and divides by the sum once, at the end. The score
matrix never leaves the chip, which is what it adds over the naive pipeline.

Inside a block, each thread owns ``tm`` query rows (one in every
``block_rows / tm``) and a slice of the columns: one key in every
``thread_cols`` of the score tile while scores are computed, and groups of
four neighbouring columns of the output while P V is accumulated. Shared
tiles are read four floats at a time (128-bit loads). The row statistics need the
maximum over all the threads that share a row; on a GPU those threads sit in
one warp and exchange values with warp shuffles, and on Numba's simulator
(which has no shuffles) they go through shared memory. Scores are kept in
base 2 (the scale carries a factor log2 e) so that each exponential is one
``exp2``; shared-memory indices in the inner loops are unsigned and those
loops are ``while`` loops, which keeps Numba's index arithmetic out of them
(see ``limits.unsigned``). On a GPU the kernel takes raw pointers, which
keeps the Python work of a launch small (see ``flash._launch_flash``).

On an H100 (batch 4, 16 heads, head_dim 64, no mask) it took 0.524 ms at seq
1024 and 7.43 ms at seq 4096 (32.8 and 37.0 TFLOP/s), against 20.2 and 338 ms
for the naive pipeline and 0.563 and 7.98 ms for PyTorch's memory-efficient
attention (benchmarks/results/attention-h100-2026-11-26.json, rows
flash_cuda_cores, naive_numba and sdpa_efficient). Where the GPU has TF32
tensor cores, ``flash_attention`` runs the kernel of ``tensor_cores``
instead; ``_flash_kernel`` compiles either, so that one function builds
whatever the launch path asks for. The element types the kernels read and
write (float32, float16, bfloat16) and their signatures are here too.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from gpucourse.device import cuda, on_gpu
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4_flat
from gpucourse.kernels.attention.config import FlashConfig, check_config
from gpucourse.kernels.attention.limits import _INLINE, unsigned, unsigned64
from gpucourse.kernels.attention.shared_tiles import float4_run_loader
from gpucourse.kernels.attention.tensor_cores import TensorCoreConfig, flash_forward_tc
from numba import float32, int32, types  # noqa: E402 (after gpucourse.device, which configures Numba)
from numba.types import float16  # noqa: E402


@lru_cache(maxsize=None)
def _flash_kernel(config: FlashConfig, causal: bool, use_shuffles: bool,
                  fastmath: bool = False, io: str = "float32"):
    """Compile the tiled forward kernel for one tile shape.

    io: the element type of q, k, v and the output ("float32", or "float16"
    and "bfloat16" on a GPU, "float16" on the simulator). Whatever it is,
    the kernel converts each element to float32 as it loads it and does all
    its arithmetic in float32; only the output is rounded back to io.

    Every size the kernel's arrays need is a constant captured here: Numba
    (and its simulator) want shared and local array shapes known when the
    kernel is compiled. On a GPU the kernel is compiled at once, for raw
    float32 pointers (see `_launch_flash`); the simulator runs the same body
    on flat numpy arrays, which index the same way.
    """
    to_io = _IO_CONVERSIONS[io]()  # float32 -> the output's element type
    if isinstance(config, TensorCoreConfig):  # the tile products on tensor cores
        function = flash_forward_tc(config, causal, use_shuffles, to_io)
        if on_gpu():
            cap = {"max_registers": config.max_registers} if config.max_registers else {}
            return cuda.jit(_flash_signature(io), fastmath=fastmath, **cap)(function)
        return cuda.jit(function)
    check_config(config)
    D = config.head_dim
    BR, BC = config.block_rows, config.block_cols
    TM, TX = config.thread_rows, config.thread_cols
    NY = BR // TM  # row groups: a thread's rows are ty + NY * i
    CS = config.score_cols_per_thread  # score columns a thread owns
    CO = config.out_cols_per_thread  # output columns a thread owns
    GROUPS = CO // 4  # ... in groups of four neighbours
    THREADS = config.threads
    # Row lengths of the shared tiles, and the sizes of the flat arrays.
    Q_ROW, K_ROW, P_ROW = unsigned(config.q_row), unsigned(config.k_row), unsigned(config.p_row)
    D_U = unsigned(D)
    Q_SIZE = BR * config.q_row
    K_SIZE = BC * config.k_row
    V_SIZE = BC * D
    P_SIZE = BC * config.p_row
    # Where each tile starts when all four share one dynamic array.
    DYNAMIC = config.dynamic_shared
    K_BASE, V_BASE = Q_SIZE, Q_SIZE + K_SIZE
    P_BASE = V_BASE + V_SIZE
    P_END = P_BASE + P_SIZE
    # Shared reductions on the simulator: one slot per (row, thread of that row).
    RED_SIZE = BR * TX
    NEG_INF = np.float32(-np.inf)
    LN2 = np.float32(math.log(2.0))
    Q_LOADS = BR * D // THREADS  # elements of the Q tile each thread loads
    KV_LOADS = BC * D // THREADS  # ... and of each K and V tile
    ALIGN = SHARED_ALIGNMENT  # 16 bytes on a GPU, so that four floats load as one

    @cuda.jit(device=True, **_INLINE)
    def fetch_kv(k, v, k_next, v_next, base, valid, t):
        # This thread's share of a K and a V tile, from element `base` of the
        # flat arrays, into registers: consecutive threads read consecutive
        # elements (coalesced); elements from `valid` on (past the end of the
        # sequence) read as zero.
        for it in range(KV_LOADS):
            idx = t + it * THREADS
            k_next[it] = float32(0.0)
            v_next[it] = float32(0.0)
            if idx < valid:
                k_next[it] = float32(k[unsigned64(base + idx)])
                v_next[it] = float32(v[unsigned64(base + idx)])

    # The two products of each tile, S = Q K^T and O += P V, are loops over
    # the head dimension (four values a step) and over the tile's keys. Each
    # step's shared-memory addresses are a base plus constants; STEPS_PER_PASS
    # steps are written out per pass, so that only the base advances, once a
    # pass (a counter, a compare and a branch per pass instead of per step;
    # the same change took the backward kernels' outer-product loops from 63%
    # FFMA to 83%, see backward_v34.py).
    STEPS_PER_PASS = config.steps_per_pass
    HEAD_STEP, P_STEP, V_STEP = unsigned(4), P_ROW, D_U  # one step along each tile

    @cuda.jit(device=True, **_INLINE)
    def score_step(q_tile, k_tile, s, k4, k_at, q_at):
        # Four head-dim values of this thread's CS keys (from k_at, one key
        # K_ROW apart) and of its TM query rows (from q_at, NY rows apart):
        # s[i, jj] += q[i] . k[jj] over those four.
        for jj in range(CS):
            x0, x1, x2, x3 = load_float4_flat(k_tile, k_at + unsigned(TX * jj) * K_ROW)
            k4[jj, 0] = x0
            k4[jj, 1] = x1
            k4[jj, 2] = x2
            k4[jj, 3] = x3
        for i in range(TM):
            a0, a1, a2, a3 = load_float4_flat(q_tile, q_at + unsigned(NY * i) * Q_ROW)
            for jj in range(CS):
                s[i, jj] += a0 * k4[jj, 0]
                s[i, jj] += a1 * k4[jj, 1]
                s[i, jj] += a2 * k4[jj, 2]
                s[i, jj] += a3 * k4[jj, 3]

    load_p_rows = float4_run_loader(TM)  # a key's TM probabilities, four a load

    @cuda.jit(device=True, **_INLINE)
    def value_step(p_tile, v_tile, acc, p_rows, p_at, v_at):
        # One key's share of O += P V: its probabilities for this thread's TM
        # rows (neighbours in P^T, from p_at) times this thread's columns of
        # its row of V (groups of four, TX * 4 apart, from v_at).
        load_p_rows(p_rows, p_tile, p_at)
        for g in range(GROUPS):
            v0, v1, v2, v3 = load_float4_flat(v_tile, v_at + unsigned(g * TX * 4))
            for i in range(TM):
                acc[i, 4 * g] += p_rows[i] * v0
                acc[i, 4 * g + 1] += p_rows[i] * v1
                acc[i, 4 * g + 2] += p_rows[i] * v2
                acc[i, 4 * g + 3] += p_rows[i] * v3

    def written_out(step, a_step, b_step):
        # One pass of a product's loop: STEPS_PER_PASS calls of `step`
        # (score_step or value_step), each one step further along both tiles
        # (a_step along the first offset, b_step along the second).
        @cuda.jit(device=True, **_INLINE)
        def steps(a_tile, b_tile, acc, scratch, a_at, b_at):
            step(a_tile, b_tile, acc, scratch, a_at, b_at)
            if STEPS_PER_PASS >= 2:
                step(a_tile, b_tile, acc, scratch, a_at + a_step, b_at + b_step)
            if STEPS_PER_PASS == 4:
                step(a_tile, b_tile, acc, scratch, a_at + unsigned(2) * a_step,
                     b_at + unsigned(2) * b_step)
                step(a_tile, b_tile, acc, scratch, a_at + unsigned(3) * a_step,
                     b_at + unsigned(3) * b_step)
        return steps

    score_steps = written_out(score_step, HEAD_STEP, HEAD_STEP)  # (k_at, q_at)
    value_steps = written_out(value_step, P_STEP, V_STEP)  # (p_at, v_at)

    def flash_forward(q, k, v, out, lse, seq, key_seq, heads, scale):
        # q and out are the (batch, heads, seq, head_dim) arrays, k and v the
        # (batch, heads, key_seq, head_dim) ones, as flat float32 memory (the
        # caller checked that they are contiguous), so that an element's
        # address is one addition away: query rows r .. r + n of one head are
        # the contiguous elements (bh * seq + r) * D onwards, key rows
        # (bh * key_seq + r) * D onwards.
        t = cuda.threadIdx.x
        tx = t % TX  # which slice of columns
        ty = t // TX  # which group of TM rows
        # This thread's query rows are ty, ty + NY, ty + 2 NY, ... (NY row
        # groups): the row groups of one warp then read neighbouring rows of
        # Q, which start in different banks (a thread's rows next to each
        # other would start TM * Q_ROW floats apart: the same bank, since
        # both are multiples of four, a bank conflict on every load). Its
        # probabilities go to TM neighbouring slots row0 .. row0 + TM of P^T.
        row0 = ty * TM
        # Under a causal mask the last query tiles do the most work (they see the
        # most keys). Blocks start roughly in the order of blockIdx.x, so the
        # causal kernel takes the tiles last to first: the heavy ones start
        # early and the light ones fill the gaps at the end, instead of a few
        # heavy blocks running on alone after the rest are done.
        if causal:
            q_start = (cuda.gridDim.x - 1 - cuda.blockIdx.x) * BR
        else:
            q_start = cuda.blockIdx.x * BR
        bh = cuda.blockIdx.z * heads + cuda.blockIdx.y  # which (batch, head)
        head_base = bh * seq * D  # this head's queries and outputs
        kv_base = bh * key_seq * D  # ... and its keys and values
        # Element t + it * THREADS of a (rows x D) tile is (row, col) =
        # (t // D + it * THREADS // D, t % D + it * THREADS % D): the parts
        # that depend on `it` are constants once the loops are unrolled.
        t_row = unsigned(t // D)
        t_col = unsigned(t % D)
        # Unsigned copies of the indices the inner loops use (see `unsigned`).
        tx_u = unsigned(tx)
        row0_u = unsigned(row0)
        ty_u = unsigned(ty)

        # The tiles, flat and 16-byte aligned, so that four neighbours in a row
        # are one 128-bit load (load_float4_flat: ld.shared.v4.f32). Each
        # shared array on its own line (the simulator aliases two on one).
        if DYNAMIC:
            # Past 48 KiB: one dynamic array, sized by the launch, carved into
            # the four tiles (every offset is a multiple of four floats).
            tiles = cuda.shared.array(0, float32, alignment=ALIGN)
            q_tile = tiles[:K_BASE]
            k_tile = tiles[K_BASE:V_BASE]
            v_tile = tiles[V_BASE:P_BASE]
            p_tile = tiles[P_BASE:P_END]
        else:
            q_tile = cuda.shared.array(Q_SIZE, float32, alignment=ALIGN)  # Q * scale * log2(e)
            k_tile = cuda.shared.array(K_SIZE, float32, alignment=ALIGN)
            v_tile = cuda.shared.array(V_SIZE, float32, alignment=ALIGN)
            p_tile = cuda.shared.array(P_SIZE, float32, alignment=ALIGN)  # P^T: [j, r] = P[r, j]
        reduce_buf = cuda.shared.array(RED_SIZE, float32)

        # The query tile, loaded once: consecutive threads read consecutive
        # elements (coalesced), and rows past the end read as zero. Loops with
        # a constant trip count are unrolled, so all the loads are in flight
        # before the first is needed.
        q_base = head_base + q_start * D
        q_valid = (seq - q_start) * D  # elements of this tile that exist
        for it in range(Q_LOADS):
            idx = t + it * THREADS
            value = float32(0.0)
            if idx < q_valid:
                value = float32(q[unsigned64(q_base + idx)]) * scale
            r = t_row + unsigned((it * THREADS) // D)
            q_tile[r * Q_ROW + t_col + unsigned((it * THREADS) % D)] = value

        # Running statistics and the output accumulator live in registers.
        row_max = cuda.local.array(TM, float32)
        row_sum = cuda.local.array(TM, float32)  # this thread's share of the sum
        acc = cuda.local.array((TM, CO), float32)
        s = cuda.local.array((TM, CS), float32)
        k4 = cuda.local.array((CS, 4), float32)  # four head-dim values of each owned key
        p_rows = cuda.local.array(TM, float32)  # P[this thread's rows, j]
        tile_max = cuda.local.array(TM, float32)
        shift = cuda.local.array(TM, float32)
        alpha = cuda.local.array(TM, float32)
        k_next = cuda.local.array(KV_LOADS, float32)  # the next K and V tile, in flight
        v_next = cuda.local.array(KV_LOADS, float32)
        for i in range(TM):
            row_max[i] = NEG_INF
            row_sum[i] = 0.0
            for c in range(CO):
                acc[i, c] = 0.0

        n_tiles = (key_seq + BC - 1) // BC
        if causal:
            # Key tiles that start after this block's last query row are fully
            # masked: skip them. About half the tiles, for long sequences.
            last_row = min(q_start + BR, seq) - 1
            n_tiles = min(n_tiles, last_row // BC + 1)

        # The first K and V tile goes to registers; the loop below stores each
        # tile to shared memory and then starts reading the next one, which
        # arrives while the current one is being used.
        fetch_kv(k, v, k_next, v_next, kv_base, key_seq * D, t)

        for kt in range(n_tiles):
            k_start = kt * BC
            cuda.syncthreads()  # everyone is done with the previous tiles
            for it in range(KV_LOADS):
                j = t_row + unsigned((it * THREADS) // D)
                c = t_col + unsigned((it * THREADS) % D)
                k_tile[j * K_ROW + c] = k_next[it]
                v_tile[j * D_U + c] = v_next[it]
            cuda.syncthreads()
            if kt + 1 < n_tiles:
                fetch_kv(k, v, k_next, v_next, kv_base + (k_start + BC) * D,
                         (key_seq - k_start - BC) * D, t)

            # S = (scale Q) K^T for this thread's TM rows x CS columns, four
            # head-dim values at a time: one 128-bit load brings four values of
            # a key (or of a query row), and the FMAs run in the same order as
            # one value at a time would. A quarter-warp's key loads fall in
            # different banks (K_ROW is 4 more than a multiple of 32, so
            # neighbouring keys start 4 banks apart); all the threads of a row
            # group read the same query values (a broadcast), and the row
            # groups of one warp read neighbouring rows (see row0 above).
            for i in range(TM):
                for jj in range(CS):
                    s[i, jj] = 0.0
            # STEPS_PER_PASS steps of four head-dim values a pass (see score_step).
            k_at = tx_u * K_ROW
            q_at = ty_u * Q_ROW
            for _ in range(D // (4 * STEPS_PER_PASS)):
                score_steps(q_tile, k_tile, s, k4, k_at, q_at)
                k_at += unsigned(4 * STEPS_PER_PASS)
                q_at += unsigned(4 * STEPS_PER_PASS)

            # The online softmax, in short loops over this thread's rows and
            # columns (short loops with constant bounds are unrolled by the
            # compiler, which keeps the small arrays in registers).
            # 1. Mask keys past the end and, when causal, keys after the query.
            #    Only the last tile and (causal) the tiles that cross the
            #    diagonal hold such keys; the others skip this step.
            if k_start + BC > key_seq or (causal and k_start + BC - 1 > q_start):
                for i in range(TM):
                    row = q_start + ty + NY * i
                    for jj in range(CS):
                        key = k_start + tx + TX * jj
                        if key >= key_seq or (causal and key > row):
                            s[i, jj] = NEG_INF
            # 2. This tile's maximum of each row, first over this thread's columns...
            for i in range(TM):
                tile_max[i] = s[i, 0]
                for jj in range(1, CS):
                    tile_max[i] = max(tile_max[i], s[i, jj])
            # ...then over the TX threads that share the row.
            if use_shuffles:
                offset = 1
                while offset < TX:
                    for i in range(TM):
                        tile_max[i] = max(tile_max[i],
                                          cuda.shfl_xor_sync(0xFFFFFFFF, tile_max[i], offset))
                    offset *= 2
            else:
                for i in range(TM):
                    reduce_buf[(row0 + i) * TX + tx] = tile_max[i]
                cuda.syncthreads()
                for i in range(TM):
                    for other in range(TX):
                        tile_max[i] = max(tile_max[i], reduce_buf[(row0 + i) * TX + other])
                cuda.syncthreads()
            # 3. The new running maximum, and the factor alpha = exp(old - new)
            #    that rescales what was summed so far. A row with nothing visible
            #    yet keeps max -inf; subtracting 0 then avoids exp(-inf + inf) = NaN.
            for i in range(TM):
                new_max = max(row_max[i], tile_max[i])
                shift[i] = new_max if new_max != NEG_INF else float32(0.0)
                alpha[i] = math.exp2(row_max[i] - shift[i])
                row_max[i] = new_max
            # 4. P = exp(S - max) into shared memory; rescale the sum and the output.
            for i in range(TM):
                tile_sum = float32(0.0)
                for jj in range(CS):
                    p = math.exp2(s[i, jj] - shift[i])
                    tile_sum += p
                    p_tile[(tx_u + unsigned(TX * jj)) * P_ROW + row0_u + unsigned(i)] = p
                row_sum[i] = row_sum[i] * alpha[i] + tile_sum
            for i in range(TM):
                for c in range(CO):
                    acc[i, c] *= alpha[i]
            cuda.syncthreads()  # P is complete

            # O += P V for this thread's TM rows x CO columns. The thread's
            # columns come in groups of four neighbours, TX * 4 apart, so
            # that a warp's 128-bit loads of a row of V are contiguous (no
            # bank conflicts), and its TM probabilities of key j are
            # neighbours in P^T (TM / 4 broadcast loads).
            p_at = row0_u
            v_at = tx_u * unsigned(4)
            for _ in range(BC // STEPS_PER_PASS):
                value_steps(p_tile, v_tile, acc, p_rows, p_at, v_at)
                p_at += unsigned(STEPS_PER_PASS) * P_ROW
                v_at += unsigned(STEPS_PER_PASS) * D_U

        # The one division at the end, by the sum over all the row's threads.
        if use_shuffles:
            offset = 1
            while offset < TX:
                for i in range(TM):
                    row_sum[i] += cuda.shfl_xor_sync(0xFFFFFFFF, row_sum[i], offset)
                offset *= 2
        else:
            cuda.syncthreads()
            for i in range(TM):
                reduce_buf[(row0 + i) * TX + tx] = row_sum[i]
            cuda.syncthreads()
            for i in range(TM):
                row_sum[i] = float32(0.0)
                for other in range(TX):
                    row_sum[i] += reduce_buf[(row0 + i) * TX + other]
        for i in range(TM):
            row = q_start + ty + NY * i
            if row < seq:
                inverse = float32(1.0) / row_sum[i]
                out_base = head_base + row * D + tx * 4
                for g in range(GROUPS):
                    for x in range(4):
                        out[unsigned64(out_base + g * TX * 4 + x)] = to_io(
                            acc[i, 4 * g + x] * inverse)
                if tx == 0:  # back from base 2 to natural logarithms
                    lse[unsigned64(bh * seq + row)] = (row_max[i] + math.log2(row_sum[i])) * LN2

    if on_gpu():
        return cuda.jit(_flash_signature(io), fastmath=fastmath)(flash_forward)
    return cuda.jit(flash_forward)


# The tiled kernel's parameters on a GPU: q, k, v, out and lse as raw float32
# pointers, then seq, key_seq, heads and the scale. A launch then costs little Python:
# Numba passes a pointer as one integer, where an array argument is first
# wrapped in a device array (tens of microseconds for each torch tensor,
# which showed in the timings at short sequences).
_FLOAT_POINTER = types.CPointer(float32)
FLASH_SIGNATURE = types.void(*(_FLOAT_POINTER,) * 5, int32, int32, int32, float32)

# Element types of q, k, v and the output besides float32: the kernel reads
# them, converts to float32 and rounds its output back (the log-sum-exp stays
# float32). bfloat16 has no numpy dtype, so it comes only as CUDA torch tensors.
HALF_DTYPES = ("float16", "bfloat16")
FLASH_DTYPES = ("float32",) + HALF_DTYPES


def _bfloat16():
    from numba.cuda.bf16 import bfloat16, float2bfloat16

    return bfloat16, float2bfloat16


# The conversion from float32 to each element type, found when a kernel is built
# (numba-cuda's bfloat16 module is imported only for a bfloat16 kernel).
_IO_CONVERSIONS = {"float32": lambda: float32, "float16": lambda: float16,
                   "bfloat16": lambda: _bfloat16()[1]}


def _flash_signature(io: str):
    """FLASH_SIGNATURE with q, k, v and out of element type io."""
    element = {"float32": float32, "float16": float16}.get(io) or _bfloat16()[0]
    pointer = types.CPointer(element)
    return types.void(pointer, pointer, pointer, pointer, _FLOAT_POINTER, int32, int32, int32,
                      float32)
