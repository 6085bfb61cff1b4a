"""dQ by atomic additions from dK and dV's kernel, FlashAttention-2's way: version 5 in one kernel.

Version 5's dQ kernel recomputes, for each pair of tiles, the scores S and
dP that dK and dV's kernel has just computed: seven tile products for each
pair where five would do. FlashAttention-2 computes dQ where dS already is:
the block that owns keys j0 .. j1 adds its share of every query's gradient,

    dQ_i += scale * sum_{j0 <= j < j1} dS_ij K_j,

to a float32 copy of dQ in global memory, by atomic additions, because the
blocks of other keys add to the same rows at the same time. A pass at the
end rounds that copy to halves.

In dK and dV's kernel each warp holds dS^T for its 16 keys, in registers, as
the A fragments of dK += dS^T Q. Its share of dQ would use only its 16 keys:
one atomic addition per 16 keys for every element of dQ. So the warps first
put dS^T in shared memory (``store_ds``), and after a barrier each warp
computes a part of the tile's dQ over all the block's keys (``add_dq``):
queries in groups of 16, as the A operand, read from dS^T by ``ldmatrix
.trans`` (a transposed read turns key rows into query rows); the block's K,
already in shared memory, as the B operand (``.trans`` again: it is
row-major along the keys). One atomic addition per element of dQ for each
block of keys (64 keys at 4 warps), two neighbours a time (``add_two``:
``red.global.add.v2.f32``, sm_90 and later).

The rows of dS^T are padded by 8 halves (16 bytes): with rows of BQ + 8
halves, the eight rows an ldmatrix reads start 4 banks apart modulo 32 and
never share a bank.

The result is not deterministic to the last bit: float32 additions in the
order the blocks arrive. It is the default where the H200 timed it faster
than two kernels (backward.ATOMIC_DQ_HEAD_DIMS[5]: head dim 128, and 64
under a causal mask, walking 16-query tiles), unless PyTorch's deterministic
mode is on.
"""

from __future__ import annotations

from gpucourse.device import cuda, on_gpu
from numba import float32  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.attention.half import HalfConfig
from gpucourse.kernels.tensor_cores.moves import (ldmatrix_x4_trans, shared_address,
                                                 shared_store_word)

# Two or four neighbouring float32 added in one reduction (sm_90 and later:
# PTX ISA, "red", vector types): a half or a quarter of the atomic
# instructions of scalar ones, and a warp's lanes that each add four
# neighbours cover whole 32-byte sectors of L2 instead of 4 bytes of each.
_RED_VECTOR = {2: "red.global.add.v2.f32 [$0], {$1, $2};",
               4: "red.global.add.v4.f32 [$0], {$1, $2, $3, $4};"}

if on_gpu():
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import NumbaTypeError
    from numba.cuda.extending import intrinsic

    def _vector_add(array, index, values):
        """The signature and code of adding len(values) neighbours at once."""
        count = len(values)
        if not (isinstance(array, types.Array) and array.ndim == 1
                and array.dtype == types.float32 and isinstance(index, types.Integer)):
            raise NumbaTypeError(f"adding {count} neighbours atomically takes a 1D float32 "
                                 f"array and an index, got {array}, {index}")

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0])
            offset = context.cast(builder, args[1], sig.args[1], types.intp)
            pointer = cgutils.get_item_pointer(context, builder, sig.args[0], data, [offset],
                                               wraparound=False)
            f32 = ir.FloatType()
            converted = [context.cast(builder, v, t, types.float32)
                         for v, t in zip(args[2:], sig.args[2:])]
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)] + [f32] * count),
                               _RED_VECTOR[count], "l" + ",f" * count + ",~{memory}",
                               side_effect=True)
            builder.call(asm, [builder.ptrtoint(pointer, ir.IntType(64)), *converted])
            return context.get_dummy_value()

        return types.void(array, index, *values), codegen

    @intrinsic
    def add_two(typingctx, array, index, first, second):
        """array[index] += first and array[index + 1] += second, atomically, in
        one instruction; array a 1D float32 array in global memory, index even
        (the pair's 8 bytes aligned)."""
        return _vector_add(array, index, (first, second))

    @intrinsic
    def add_four(typingctx, array, index, first, second, third, fourth):
        """The same for four neighbours, index a multiple of 4 (16 bytes
        aligned)."""
        return _vector_add(array, index, (first, second, third, fourth))
else:
    @cuda.jit(device=True)
    def add_two(array, index, first, second):
        """The simulator's stand-in: two atomic additions."""
        cuda.atomic.add(array, index, first)
        cuda.atomic.add(array, index + 1, second)

    @cuda.jit(device=True)
    def add_four(array, index, first, second, third, fourth):
        """The simulator's stand-in: four atomic additions."""
        cuda.atomic.add(array, index, first)
        cuda.atomic.add(array, index + 1, second)
        cuda.atomic.add(array, index + 2, third)
        cuda.atomic.add(array, index + 3, fourth)


def atomic_dq_layout(config: HalfConfig) -> tuple[int, int, int]:
    """(query groups of 16 a warp sums, columns of D a warp sums, halves a row
    of dS^T takes in shared memory) for dK and dV's tiles: the BQ x D tile of
    dQ split among the warps, by groups of 16 queries first, then by columns
    (in 16s); ValueError naming what is accepted where they do not split."""
    groups, warps, d = config.block_cols // 16, config.warps, config.head_dim
    if groups >= warps:
        if groups % warps:
            raise ValueError(f"atomic dQ splits the {groups} groups of 16 queries of a walked tile "
                             f"among {warps} warps: block_cols / 16 must be a multiple of warps")
        return groups // warps, d, config.block_cols + 8
    if warps % groups or (d * groups // warps) % 16:
        raise ValueError(f"atomic dQ splits head dim {d} among {warps // max(groups, 1)} warps per "
                         f"group of 16 queries in 16s of columns: it does not divide")
    return 1, d * groups // warps, config.block_cols + 8


def atomic_dq_shared_halves(config: HalfConfig) -> int:
    """The halves of shared memory dS^T takes (block_rows rows, padded)."""
    return config.block_rows * atomic_dq_layout(config)[2]


def make_atomic_dq(config: HalfConfig, mma, place, atomic_dq: bool = True):
    """(store_ds, add_dq, acc_size): device functions for dK and dV's kernel.

    store_ds(smem, base, ds, warp, lane): a warp's packed dS^T (the A
    fragments of dK's product, q_steps x 4 registers: row key g + 8 (i % 2),
    columns queries 16 kk + 8 (i // 2) + 2t, 2t + 1) into rows warp*16 ..
    of the block's dS^T at half `base`.

    add_dq(smem, base, acc, dq_accum, at, q_start, seq, warp, lane, scale): after
    a barrier, the warp's part of the tile's dQ = dS K over the block's keys
    (K at half 0 of smem, laid out by `place`), times scale, added atomically
    to dq_accum (float32, flat; a query's row starts at (at + query) * D).

    Without atomic_dq, both do nothing (and the tiles need not split)."""
    if not atomic_dq:
        @cuda.jit(device=True, inline=True)
        def nothing(*args):
            return

        return nothing, nothing, 1
    groups_per_warp, d_cols, stride = atomic_dq_layout(config)
    D, W, BQ = config.head_dim, config.warps, config.block_cols
    q_steps, d_pairs = BQ // 16, d_cols // 16
    splits_of_d = D // d_cols  # warps that share a group of queries
    acc_size = 8

    @cuda.jit(device=True, inline=True)
    def store_ds(smem, base, ds, warp, lane):
        g, t = lane // 4, lane % 4
        # Each register (two halves) in one 32-bit store, at a constant offset
        # from the lane's first: rows g (+ 8), columns 2t (+ 8, + 16 kk).
        first = shared_address(smem, base + (warp * 16 + g) * stride + 2 * t)
        for kk in range(q_steps):
            for i in range(4):
                offset = 2 * (8 * (i % 2) * stride + 16 * kk + 8 * (i // 2))
                shared_store_word(first, offset, ds[kk * 4 + i])

    @cuda.jit(device=True, inline=True)
    def add_dq(smem, base, acc, dq_accum, at, q_start, seq, warp, lane, scale):
        g, t = lane // 4, lane % 4
        # ldmatrix .trans lanes: A (dS, from dS^T's key rows) and B (K's rows).
        a_key, a_query = (lane % 8) + 8 * (lane // 16), 8 * ((lane // 8) % 2)
        b_key, b_col = lane % 16, 8 * (lane // 16)
        d0 = (warp % splits_of_d) * d_cols
        # 16 queries x 16 columns at a time, summed over the block's keys and
        # added at once: 8 sums live, not the warp's whole part of the tile.
        for gi in range(groups_per_warp):
            group = (warp // splits_of_d) * groups_per_warp + gi
            for tp in range(d_pairs):
                for i in range(8):
                    acc[i] = float32(0.0)
                for ks in range(W):  # the block's keys, 16 at a time
                    a = ldmatrix_x4_trans(shared_address(
                        smem, base + (16 * ks + a_key) * stride + 16 * group + a_query))
                    x = ldmatrix_x4_trans(shared_address(
                        smem, place(16 * ks + b_key, d0 + 16 * tp + b_col)))
                    for half in range(2):
                        n = half * 4
                        e = mma(a[0], a[1], a[2], a[3], x[2 * half], x[2 * half + 1], acc[n],
                                acc[n + 1], acc[n + 2], acc[n + 3])
                        for z in range(4):
                            acc[n + z] = e[z]
                for h in range(2):
                    query = q_start + 16 * group + g + 8 * h
                    if query < seq:
                        row = (at + query) * D + d0 + 16 * tp + 2 * t
                        for half in range(2):
                            n = half * 4 + 2 * h
                            add_two(dq_accum, row + 8 * half, acc[n] * scale,
                                    acc[n + 1] * scale)

    return store_ds, add_dq, acc_size

