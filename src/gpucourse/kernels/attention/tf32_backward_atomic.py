"""dQ by atomic additions from version 6's dK and dV kernel: the fp32 backward in one kernel.

``half_backward_atomic`` does this for version 5; this is the same idea in
3xTF32, on ``tf32_backward``'s fragments. Version 6's dQ kernel computes S
and dP again for every pair of tiles, and in 3xTF32 each of those products is
three tensor-core instructions: 21 a pair of tiles where FlashAttention-2's
order needs 15. Here dK and dV's kernel, which already holds dS^T for its
keys, adds each walked tile's share of dQ,

    dQ_i += scale * sum_j dS_ij K_j   (the block's keys j),

to dQ itself (float32, zeroed first) by atomic additions.

* Each warp holds dS^T for its 16 keys in C fragments (keys in rows). The
  warps store them, transposed, into a block-wide dS in shared memory (rows
  of queries, BK + 8 floats long: the reads below, two floats a lane from rows
  g and g + 8, then hit 32 different banks).
* After a barrier, the tile's dQ (BQ queries x D) is cut into pieces of 16
  queries x 32 columns (one of ``tf32_backward``'s output groups), shared out
  among the warps. A piece sums over the block's keys, 8 at a time: its A
  fragments are dS's rows read two neighbouring keys at a time (keys 2t and
  2t + 1 are the fragment's columns t and t + 4, the order ``tf32_backward``'s
  products take the inner dimension in), and its B fragments are rows 2t
  and 2t + 1 of the block's K, already in shared memory, split into big and
  small parts as they are read.
* A piece's sums start from zero at each walked tile (the tensor cores
  truncate long chains of sums) and go to dQ by atomic additions, one per
  element of dQ for each block of keys, four neighbours at a time
  (``half_backward_atomic.add_four``: one reduction of 16 bytes, where
  scalar ones left the quad's lanes 32 bytes apart, each using 4 bytes of
  its L2 sector: Nsight Compute, results/backward_fp32_ncu-h200-2026-11-29).

The result's last bits depend on the order the blocks arrive in.
"""

from __future__ import annotations

import gpucourse.device  # noqa: F401 (chooses Numba's target before numba is imported)
from numba import float32  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels._vector_load import load_float4_flat
from gpucourse.kernels.attention.half_backward_atomic import add_four
from gpucourse.kernels.attention.limits import unsigned64


def atomic_dq_pieces(config) -> int:
    """The pieces of 16 queries x 32 columns of a walked tile's dQ that each
    warp computes; ValueError naming what is accepted where the tiles do not
    divide among the warps (every warp must do the same: on the simulator
    every thread reaches every tensor-core instruction)."""
    queries, d, warps = config.block_cols, config.head_dim, config.warps
    pieces = (queries // 16) * (d // 32)
    if queries % 16 or pieces % warps:
        raise ValueError(f"atomic dQ cuts a walked tile of {queries} queries x {d} columns into "
                         f"pieces of 16 x 32 for {warps} warps: block_cols must be a multiple of "
                         f"16 and the pieces a multiple of warps")
    return pieces // warps


def atomic_dq_floats(config) -> int:
    """The floats of shared memory the block's dS takes (block_cols rows)."""
    return config.block_cols * (config.block_rows + 8)


def make_atomic_dq(config, device, split4, four_products, atomic_dq: bool):
    """(store_ds, add_dq) for version 6's dK and dV kernel (both do nothing
    without atomic_dq).

    store_ds(smemf, base, ds, warp, g, t): the warp's dS^T C fragments (tile n,
    element e: key warp*16 + g + 8 (e // 2), query 8n + 2t + e % 2) into the
    block's dS at float `base`, row = query.

    add_dq(smemf, base, part, dq, row_base, q_start, seq, warp, g, t, pair_even,
    pair_odd, scale): after a barrier, the warp's pieces of the walked tile's
    dQ (dS times the block's K, at float 0 of shared memory in
    ``tile_place``'s layout), times scale, added atomically to dq (flat
    float32; query i's row starts at (row_base + i) * D); pair_*:
    ``lane_reads``' reads of rows 2t and 2t + 1."""
    if not atomic_dq:
        @device
        def nothing(*args):
            return

        return nothing, nothing
    D, BQ, BK = config.head_dim, config.block_cols, config.block_rows
    per_warp, groups, stride = atomic_dq_pieces(config), D // 32, BK + 8
    tiles = BQ // 8

    @device
    def load_pair(smemf, at):
        """Four floats of K's tile, as (big parts, small parts)."""
        x0, x1, x2, x3 = load_float4_flat(smemf, at)
        return split4(x0, x1, x2, x3)

    # Shared-memory indices unsigned: a signed one costs Numba's fix-up of
    # negative indices, which the profile of the dK kernel at head dim 128
    # (2026-11-29) found in add_dq's inner loop, 64-bit compares and selects
    # on every read of dS. 64-bit (limits.unsigned64), not 32: a 32-bit index
    # plus 1 may wrap, so each neighbour needs an address of its own, where
    # a 64-bit one's neighbours are offsets of one address. With 32-bit ones
    # the one kernel at head dim 64, causal, took 254 registers and 8 bytes
    # of local memory from the H200's toolchain (ptxas 13.0; 13.5 fitted it
    # in 255); with 64-bit ones, 255 and none.
    @device
    def store_ds(smemf, base, ds, warp, g, t):
        for n in range(tiles):
            for e in range(4):
                query = 8 * n + 2 * t + e % 2
                at = unsigned64(base + query * stride + warp * 16 + g + 8 * (e // 2))
                smemf[at] = ds[4 * n + e]

    @device
    def add_dq(smemf, base, part, dq, row_base, q_start, seq, warp, g, t, pair_even, pair_odd,
               scale):
        for piece in range(per_warp):
            which = warp * per_warp + piece
            rows, grp = 16 * (which // groups), which % groups
            for i in range(16):
                part[i] = float32(0.0)
            for n in range(BK // 8):  # the block's keys, 8 at a time
                at = unsigned64(base + (rows + g) * stride + 8 * n + 2 * t)
                a0, a2 = smemf[at], smemf[at + unsigned64(1)]  # row g: keys 2t, 2t + 1
                below = at + unsigned64(8 * stride)  # row g + 8
                a1, a3 = smemf[below], smemf[below + unsigned64(1)]
                big, small = split4(a0, a1, a2, a3)
                k_at = unsigned64(8 * n * D + 32 * grp)
                x, xs = load_pair(smemf, k_at + pair_even)  # K's row 2t
                y, ys = load_pair(smemf, k_at + pair_odd)  # row 2t + 1
                four_products(big, small, x, xs, y, ys, part)
            # Output tile i holds columns 32 grp + 4m + i: the lane's are 8t + i
            # (sums 4i, 4i + 2 for rows g, g + 8) and 8t + i + 4 (4i + 1, 4i + 3).
            # Each four of the lane's columns are neighbours in dQ's row, so
            # they go in one vector reduction (16 bytes aligned: D and 8t are
            # multiples of 4): 16 bytes of a sector changed, not 4.
            for h in range(2):
                query = q_start + rows + g + 8 * h
                if query < seq:
                    out = (row_base + query) * D + 32 * grp + 8 * t
                    add_four(dq, out, part[2 * h] * scale, part[4 + 2 * h] * scale,
                             part[8 + 2 * h] * scale, part[12 + 2 * h] * scale)
                    add_four(dq, out + 4, part[1 + 2 * h] * scale, part[5 + 2 * h] * scale,
                             part[9 + 2 * h] * scale, part[13 + 2 * h] * scale)

    return store_ds, add_dq
