"""3xTF32 on the fragments of ``mma.sync.m16n8k8``: the pieces version 6's
kernels (``tf32_backward``, ``tf32_backward_atomic``) are built from.

A float32 operand is split into a big TF32 part and a small rest, and each
product is three tensor-core instructions (``make_3xtf32``); four output
tiles of one 8-deep step at a time (``make_four_products``); a warp's tile of
scores, the split of C fragments into A fragments and a walked tile's share
of a sum (``make_tile_functions``); the lane's offsets in a swizzled tile
(``lane_reads``).
``tf32_backward``'s module notes say why the fragments are laid out so.
"""

from __future__ import annotations

from functools import lru_cache

from gpucourse.device import cuda, on_gpu
from numba import float32  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels._vector_load import load_float4_flat
from gpucourse.kernels.attention.limits import unsigned
from gpucourse.kernels.tensor_cores.intrinsics import (cvt_rna_tf32, mma_m16n8k8_tf32,
                                                      tf32_big_part)

# The kernels' helpers: inlined device functions on a GPU; plain Python
# functions on the simulator, which otherwise swaps the module's globals and
# takes three locks on every call of a device function (a sixth of a test's
# run here, most of it in the calls of the innermost helpers).
device = cuda.jit(device=True, inline=True) if on_gpu() else (lambda function: function)


@lru_cache(maxsize=None)
def make_3xtf32(round_small: bool):
    """(split4, mma3) for fragments: ``split4`` four values as (big parts,
    small parts); ``mma3(a_big, a_small, b0_big, b1_big, b0_small, b1_small,
    c)``, c + A B in 3xTF32 from split parts, the small products first and
    the big one last. Every big part is rounded to TF32 on its bits
    (``tf32_big_part``: an add and a mask, where cvt.rna.tf32.f32 takes four
    instructions on sm_90; the same for finite values and infinities, and a
    NaN's small part is NaN). The small part x - big is exact in fp32; with
    round_small it is rounded too, else the tensor cores read its top 19
    bits: its error is then at most 2^-21 of x instead of 2^-22, for one
    rounding a split instead of two (CUTLASS's fast fp32 mode, which rounds
    its small parts toward zero, leaves them to the tensor cores in the same
    way; the ISA calls what they do with the low 13 bits
    implementation-defined: the simulator's stand-in reads the top 19 bits,
    what the hardware is taken to do)."""

    @device
    def split(x):
        big = tf32_big_part(x)
        small = x - big
        return big, (cvt_rna_tf32(small) if round_small else small)

    @device
    def split4(a0, a1, a2, a3):
        h0, l0 = split(a0)
        h1, l1 = split(a1)
        h2, l2 = split(a2)
        h3, l3 = split(a3)
        return (h0, h1, h2, h3), (l0, l1, l2, l3)

    @device
    def mma3(a_big, a_small, b0_big, b1_big, b0_small, b1_small, c):
        d = mma_m16n8k8_tf32(a_small[0], a_small[1], a_small[2], a_small[3], b0_big, b1_big,
                             c[0], c[1], c[2], c[3])
        d = mma_m16n8k8_tf32(a_big[0], a_big[1], a_big[2], a_big[3], b0_small, b1_small,
                             d[0], d[1], d[2], d[3])
        return mma_m16n8k8_tf32(a_big[0], a_big[1], a_big[2], a_big[3], b0_big, b1_big,
                                d[0], d[1], d[2], d[3])

    return split4, mma3


@lru_cache(maxsize=None)
def make_four_products(round_small: bool):
    """four_products(a_big, a_small, x, xs, y, ys, part): part[4i:4i + 4] +=
    A B_i for i = 0..3, A one split A fragment, B_i the B fragment of rows x[i]
    (fragment row t) and y[i] (t + 4), big parts x, y and small xs, ys: four
    output tiles of one 8-deep step, in 3xTF32."""
    _, mma3 = make_3xtf32(round_small)

    @device
    def four_products(a_big, a_small, x, xs, y, ys, part):
        for i in range(4):  # each selected by constants, not indexed (no local memory)
            xi = x[0] if i == 0 else (x[1] if i == 1 else (x[2] if i == 2 else x[3]))
            yi = y[0] if i == 0 else (y[1] if i == 1 else (y[2] if i == 2 else y[3]))
            xl = xs[0] if i == 0 else (xs[1] if i == 1 else (xs[2] if i == 2 else xs[3]))
            yl = ys[0] if i == 0 else (ys[1] if i == 1 else (ys[2] if i == 2 else ys[3]))
            d = mma3(a_big, a_small, xi, yi, xl, yl,
                     (part[4 * i], part[4 * i + 1], part[4 * i + 2], part[4 * i + 3]))
            for e in range(4):
                part[4 * i + e] = d[e]

    return four_products


def make_tile_functions(config):
    """The device functions both kernels are built from, for one head dim
    (config: a ``tf32_backward.Tf32BackwardConfig``):
    ``scores``, a warp's 16 x block_cols tile of A B^T (both row-major in shared
    memory, A the warp's own rows); ``split_c``, a C-fragment tile split into
    A fragments; ``add_product``, sums += (a tile of A fragments) B with B
    row-major (the walked rows, by pairs), a tile's share summed from zero and
    added in float32."""
    D = config.head_dim
    pairs, groups, tiles = D // 16, D // 32, config.block_cols // 8
    split4, mma3 = make_3xtf32(config.round_small)
    four_products = make_four_products(config.round_small)
    split_walked = config.split_walked

    @device
    def walked4(smemf, at, small_shift):
        """Four values of a walked tile at float `at`, as (big parts, small
        parts): split here, or, with split_walked, read, the big parts where
        the values were and the small ones `small_shift` floats on (every
        warp reads every walked value: split once for the block, each is
        split once instead of once a warp)."""
        x0, x1, x2, x3 = load_float4_flat(smemf, at)
        if split_walked:
            y0, y1, y2, y3 = load_float4_flat(smemf, at + small_shift)
            return (x0, x1, x2, x3), (y0, y1, y2, y3)
        return split4(x0, x1, x2, x3)

    @device
    def scores(smemf, own, walked, even, odd, s, small_shift):
        """s = the warp's rows times the walked tile's rows (C fragments, tile n
        in s[4n:4n + 4]); own and walked: where the warp's 16 rows and the
        walked tile start, in floats; even and odd: the lane's reads of its row
        g for even and odd c (the swizzle's chunk bit); small_shift: see
        walked4."""
        for i in range(tiles * 4):
            s[i] = float32(0.0)
        for c in range(pairs):
            lane = (even if c % 2 == 0 else odd) + unsigned(16 * c)
            at = own + lane
            x0, x1, x2, x3 = load_float4_flat(smemf, at)  # row g
            y0, y1, y2, y3 = load_float4_flat(smemf, at + unsigned(8 * D))  # row g + 8
            first_big, first_small = split4(x0, y0, x1, y1)  # dims 16c + 4t, + 1
            second_big, second_small = split4(x2, y2, x3, y3)  # 16c + 4t + 2, + 3
            for n in range(tiles):
                b, bs = walked4(smemf, walked + lane + unsigned(8 * n * D), small_shift)
                d = mma3(first_big, first_small, b[0], b[1], bs[0], bs[1],
                         (s[4 * n], s[4 * n + 1], s[4 * n + 2], s[4 * n + 3]))
                d = mma3(second_big, second_small, b[2], b[3], bs[2], bs[3], d)
                for e in range(4):
                    s[4 * n + e] = d[e]

    @device
    def split_c(s, big, small):
        """C-fragment tiles (columns 2t, 2t + 1 of rows g, g + 8) as the A
        fragments of the product along those columns: the lane's column 2t is
        the fragment's column t, 2t + 1 its t + 4."""
        for n in range(tiles):
            b, l = split4(s[4 * n], s[4 * n + 2], s[4 * n + 1], s[4 * n + 3])
            for e in range(4):
                big[4 * n + e] = b[e]
                small[4 * n + e] = l[e]

    @device
    def add_group(smemf, big, small, walked, pair_even, pair_odd, sums, part, small_shift, grp):
        """add_product's output group grp (four output tiles): summed from
        zero over the walked tile in `part`, then added to sums."""
        for i in range(16):
            part[i] = float32(0.0)
        for n in range(tiles):
            at = walked + unsigned(8 * n * D + 32 * grp)
            x, xs = walked4(smemf, at + pair_even, small_shift)  # row 2t
            y, ys = walked4(smemf, at + pair_odd, small_shift)  # row 2t + 1
            a_big = (big[4 * n], big[4 * n + 1], big[4 * n + 2], big[4 * n + 3])
            a_small = (small[4 * n], small[4 * n + 1], small[4 * n + 2], small[4 * n + 3])
            four_products(a_big, a_small, x, xs, y, ys, part)
        for i in range(16):  # the tile's share, added with rounding float32 adds
            sums[16 * grp + i] += part[i]

    @device
    def add_product(smemf, big, small, walked, pair_even, pair_odd, sums, part, small_shift):
        """sums += A B, A the split tiles (big, small), B the walked tile's
        rows (row 2t for the fragment's row t, 2t + 1 for t + 4), the tile at
        float `walked`. Output tile 4 grp + i holds columns 32 grp + 4n + i;
        pair_*: the lane's reads of rows 2t and 2t + 1, columns 4g on. A
        group's four output tiles are summed from zero over the walked tile in
        `part`, then added to sums. small_shift: see walked4. The groups (1, 2
        or 4) are written out, not looped over: each sum's place is then a
        constant, where a loop the compiler left rolled (head dim 128 with
        32-row walked tiles) put the sums in local memory."""
        add_group(smemf, big, small, walked, pair_even, pair_odd, sums, part, small_shift, 0)
        if groups > 1:
            add_group(smemf, big, small, walked, pair_even, pair_odd, sums, part, small_shift, 1)
        if groups > 2:
            add_group(smemf, big, small, walked, pair_even, pair_odd, sums, part, small_shift, 2)
            add_group(smemf, big, small, walked, pair_even, pair_odd, sums, part, small_shift, 3)

    return scores, split_c, add_product


@device
def lane_reads(g, t, head_dim):
    """(rows-g reads for even c, for odd c, pairs reads of row 2t, of 2t + 1):
    the lane's offsets in floats in a tile (module notes: chunk 4c + t of row
    g is stored at 4 (c ^ (h >> 2)) + (t ^ (h & 3)), h = h(g); chunk 8 grp + g of
    row 2t at 8 grp + (g ^ h(2t)))."""
    h = (2 * ((g // 2) % 4)) ^ (4 * (g % 2))
    lane = g * head_dim + 4 * (t ^ (h % 4))
    shift = 16 * (h // 4)  # c ^ 1 moves the chunk by +-4, 16 floats
    even, odd = lane + shift, lane - shift
    pair_even = 2 * t * head_dim + 4 * (g ^ (2 * t))
    pair_odd = (2 * t + 1) * head_dim + 4 * (g ^ (2 * t) ^ 4)
    return unsigned(even), unsigned(odd), unsigned(pair_even), unsigned(pair_odd)
