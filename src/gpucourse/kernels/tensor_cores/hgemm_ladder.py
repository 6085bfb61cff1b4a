"""The fast half-precision GEMMs, levels 3 to 7: one kernel factory, each level a set of its switches.

``hgemm`` levels 1 and 2 show the instruction; they reach 2% of cuBLAS. These
levels take the same ``mma.sync.m16n8k16`` to production speed, in fp16 and
bf16, one idea at a time. Each idea is a switch of ``make_hgemm_kernel``, and
each level turns one more on (``LEVELS`` below); what a switch does is told
where its code is. Measured on an H100 at 4096^3 in fp16, each level called
as ``half_matmul(a, b, level=L)`` in turns with ``torch.mm`` (cuBLAS, which
uses Hopper's wgmma; benchmarks/results/hgemm-h100-2026-11-28.json):

* level 3, **large block tiles** (22 TFLOP/s, 3% of cuBLAS): a block of 8
  warps computes a 128 x 128 tile of C, each warp 64 x 32 of it, a grid of
  4 x 4 instruction tiles; it stages 128 x 32 of A and 32 x 128 of B in
  shared memory per step along K, copied through registers 16 bytes at a
  time; each lane reads its fragments from shared memory two halves (one
  32-bit register) at a time. The rows of the tiles are 64 and 256 bytes
  long, so the rows a warp reads at once fall on the same banks: a lane's
  row g of A starts at bank 0 or 16, so four of the eight rows share a bank,
  and B's rows 2t all start at bank 0 (4-way conflicts on both);
* level 4, **ldmatrix and a swizzled layout** (45 TFLOP/s, 7%): a warp reads
  its fragments with ``ldmatrix`` (four 8 x 8 matrices in one instruction,
  each lane receiving exactly its fragment); the tiles are laid out with an
  XOR swizzle, so that the eight 16-byte rows an ``ldmatrix`` reads at once
  lie in different banks (no conflicts, no padding). What is left to wait
  on is the copies through registers, with two barriers per step and nothing
  in flight while the tensor cores work (by elimination: the next level
  removes them, and runs 7 times as fast);
* level 5, **a cp.async pipeline** (308 TFLOP/s, 46%): tiles go from global to
  shared memory by ``cp.async``, with no round trip through registers and no
  waiting, three steps ahead (``stages`` copies of the tiles): the tensor
  cores work on one while the next ones are in flight. Every address is
  worked out once, before the walk along K (``plan_copies``,
  ``plan_reads``): in the loop each copy and each read is one addition away
  from its address, so that the instructions around the mma are few (with
  addresses recomputed in the loop, the same kernel reached 38% of cuBLAS:
  about 400 PTX instructions per 64 mma, against 100 now);
* level 6, **register double buffering** (315 TFLOP/s, 47%): a warp reads its
  fragments for the next 16 of K before it multiplies the ones it has, so the
  reads of ``ldmatrix`` overlap the mma. With the whole step written out, the
  compiler already schedules the reads early, so this gains little here;
* level 7, **tiles, stages and block order for the GPU** (353 TFLOP/s, 53%):
  4 warps of 64 x 64 (the fragments of A and B each feed twice the mma), 4
  stages, and blocks walking C in groups of ``group_m`` rows of tiles so that
  the tiles of A and B that neighbouring blocks read are still in L2; and,
  chosen per shape by ``half_matmul.choose_config``, smaller tiles and a split
  of K (``make_sum_slices``) where a product has too few tiles to fill the
  GPU.

Two more switches serve training, where operands come transposed:
``b_transposed`` takes B as N x K (nn.Linear's weight, C = A B^T) and
``a_transposed`` takes A as K x M (a weight's gradient, C = A^T B). Each tile
is then stored as its matrix is and read with the other form of ``ldmatrix``
(a row of an N x K B is exactly the "col" fragment; a K x M A needs
``.trans``), with no copy of the operand (levels 5 to 7).

Halves travel as ``uint16``: the kernels only move them and hand them to the
tensor cores (``moves``), so one kernel serves fp16 and bf16, the ``kind``
choosing the instruction. C is written in halves (rounded once, at the end)
or in float32. K and N must be multiples of 8 (a 16-byte copy is 8 halves);
``half_matmul`` pads other shapes. Every level runs on Numba's simulator, where
the instructions have stand-ins (``moves``), at small tiles
(``SIMULATOR_TILES``).
"""

from __future__ import annotations

from gpucourse.device import cuda
from numba import float32, int64, uint16, uint32, uint64  # noqa: E402 (after gpucourse.device)
from gpucourse.kernels.tensor_cores.block_tiles import make_block_order
from gpucourse.kernels.tensor_cores.fragments import WARP
from gpucourse.kernels.tensor_cores.moves import (cp_async_16, cp_async_commit, cp_async_wait,
                                                 global_address, ldmatrix_x4, ldmatrix_x4_trans,
                                                 mma_packed, mma_packed_bf16, pack_bf16x2,
                                                 pack_f16x2, shared_address)

CHUNK = 8  # halves in 16 bytes: one cp.async, one row of an ldmatrix matrix
KINDS = ("f16", "bf16")
OUTS = ("half", "float32")

# What each level switches on, over the one before (see the module's docstring).
_LEVEL_3 = dict(bm=128, bn=128, bk=32, warps_m=2, warps_n=4, ldmatrix=False, swizzle=False,
                async_copy=False, stages=1, double_fragments=False, group_m=1)
LEVELS = {
    3: _LEVEL_3,
    4: dict(_LEVEL_3, ldmatrix=True, swizzle=True),
    5: dict(_LEVEL_3, ldmatrix=True, swizzle=True, async_copy=True, stages=3),
    6: dict(_LEVEL_3, ldmatrix=True, swizzle=True, async_copy=True, stages=3,
            double_fragments=True),
}
# Level 7 is level 6 with the tile shape, stages and group_m tuned per shape
# (half_matmul reads them from the tuned table); these are its defaults.
LEVELS[7] = dict(LEVELS[6], warps_n=2, stages=4, group_m=8)
# Small tiles that every level accepts, for Numba's simulator (whose threads
# are OS threads and whose barriers are slow): 2 warps of 32 x 16.
SIMULATOR_TILES = dict(bm=32, bn=32, bk=16, warps_m=1, warps_n=2)


def check_config(config: dict) -> dict:
    """The configuration with every switch, checked: ValueError naming what is
    accepted when the tiles do not divide among warps, lanes and copies."""
    full = dict(LEVELS[7], kind="f16", out="half", a_transposed=False, b_transposed=False)
    unknown = set(config) - set(full)
    if unknown:
        raise ValueError(f"unknown switches {sorted(unknown)}; accepted: {sorted(full)}")
    full.update(config)
    bm, bn, bk = full["bm"], full["bn"], full["bk"]
    threads = full["warps_m"] * full["warps_n"] * WARP
    problems = []
    if full["kind"] not in KINDS or full["out"] not in OUTS:
        problems.append(f"kind must be one of {KINDS} and out one of {OUTS}")
    if bm % (16 * full["warps_m"]) or bn % (16 * full["warps_n"]):
        problems.append("each warp's part must be a multiple of 16 x 16 (bm / warps_m, "
                        "bn / warps_n)")
    if bk % 16 or (bm * bk // CHUNK) % threads or (bk * bn // CHUNK) % threads:
        problems.append("bk must be a multiple of 16 and each tile's 16-byte pieces must "
                        "divide among the threads")
    if full["stages"] < 1 or (not full["async_copy"] and full["stages"] != 1) \
            or full["stages"] > 8:
        problems.append("stages must be 1 without async_copy, and 2 to 8 with it")
    if full["async_copy"] and full["stages"] < 2:
        problems.append("async_copy needs 2 or more stages")
    if full["group_m"] < 1:
        problems.append("group_m must be 1 or more")
    if (full["a_transposed"] or full["b_transposed"]) and not (full["ldmatrix"]
                                                                and full["async_copy"]):
        problems.append("a_transposed and b_transposed need ldmatrix and async_copy "
                        "(levels 5 to 7)")
    if problems:
        raise ValueError(f"invalid hgemm configuration {config}: " + "; ".join(problems))
    return full


def _swizzle(chunks_per_row: int):
    """(shift, modulus) of the XOR swizzle for a tile whose rows hold
    `chunks_per_row` 16-byte chunks: chunk c of row r is stored at chunk
    c ^ ((r // shift) % modulus). Shared memory serves 128 bytes (8 chunks,
    32 banks) at once; rows of fewer than 8 chunks share such a line, so the
    XOR changes every `shift` rows. Any 8 consecutive rows then put a given
    chunk in 8 different places of their lines: the 8 addresses of an
    ldmatrix matrix, one per row, hit different banks."""
    return max(1, 8 // chunks_per_row), min(chunks_per_row, 8)


def make_hgemm_kernel(**config):
    """The kernel for a configuration (check_config's switches): a function of
    (a, b, c), A (M x K) and B (K x N) as uint16 bits of fp16 or bf16
    (`kind`), C (M x N) as uint16 bits (`out` "half") or float32; K and N
    multiples of 8. Its attributes say how to launch it: ``threads``,
    ``shared_bytes`` (dynamic shared memory), ``tile`` (bm, bn) and
    ``blocks(m, n)``."""
    cfg = check_config(config)
    bm, bn, bk, warps_n = cfg["bm"], cfg["bn"], cfg["bk"], cfg["warps_n"]
    threads = cfg["warps_m"] * warps_n * WARP
    wm, wn = bm // cfg["warps_m"], bn // warps_n  # a warp's part of the block's tile
    tiles_m, tiles_n = wm // 16, wn // 8  # the warp's 16 x 8 instruction tiles
    pairs_n = tiles_n // 2  # one ldmatrix.x4.trans reads B for two n-tiles
    acc_size = tiles_m * tiles_n * 4
    buffers = 2 if cfg["double_fragments"] else 1
    a_registers, b_registers = tiles_m * 4, pairs_n * 4
    a_held, b_held = buffers * a_registers, buffers * b_registers
    # B's tile is stored as B is: k rows of bn halves, or (b_transposed, B
    # given as N x K like nn.Linear's weight) n rows of bk halves.
    b_transposed = cfg["b_transposed"]
    b_row_halves = bk if b_transposed else bn
    # A's likewise: m rows of bk halves, or (a_transposed, A given as K x M,
    # like the activations' gradient in a weight's gradient) k rows of bm.
    a_transposed = cfg["a_transposed"]
    a_row_halves = bm if a_transposed else bk
    chunks_a, chunks_b = a_row_halves // CHUNK, b_row_halves // CHUNK  # 16-byte chunks a row
    loads_a, loads_b = bm * bk // CHUNK // threads, bk * bn // CHUNK // threads
    held = (loads_a + loads_b) * CHUNK // 2  # registers a thread carries them in (levels 3-4)
    shift_a, mod_a = _swizzle(chunks_a) if cfg["swizzle"] else (1, 1)
    shift_b, mod_b = _swizzle(chunks_b) if cfg["swizzle"] else (1, 1)
    stage_a = bm * bk  # halves of one stage's tiles
    stage = stage_a + bk * bn
    stages, steps, group_m = cfg["stages"], bk // 16, cfg["group_m"]
    b_read_count = steps if cfg["b_transposed"] else pairs_n  # ldmatrix addresses of B
    a_read_count = steps * tiles_m if cfg["a_transposed"] else steps  # and of A
    A_TILE_BYTES, B_STEP_BYTES = 16 * bk * 2, 16 * bn * 2  # an m-tile of A; 16 rows of B
    B_PAIR_BYTES = 16 * bk * 2  # 16 rows of a transposed B's tile: a pair of n-tiles
    use_ldmatrix, async_copy = cfg["ldmatrix"], cfg["async_copy"]
    wait = cp_async_wait(max(stages - 2, 0))
    mma = mma_packed if cfg["kind"] == "f16" else mma_packed_bf16
    pack = pack_f16x2 if cfg["kind"] == "f16" else pack_bf16x2
    half_out = cfg["out"] == "half"

    @cuda.jit(device=True, inline=True)
    def a_place(base, row, col):  # (k, m) when a_transposed
        """Where A's tile keeps element (row, col): its chunk swizzled."""
        return base + row * a_row_halves \
            + (((col // CHUNK) ^ ((row // shift_a) % mod_a)) * CHUNK) \
            + col % CHUNK

    @cuda.jit(device=True, inline=True)
    def b_place(base, row, col):
        """Where B's tile (k rows and n columns; n rows and k columns when
        b_transposed) keeps element (row, col)."""
        return base + stage_a + row * b_row_halves \
            + (((col // CHUNK) ^ ((row // shift_b) % mod_b)) * CHUNK) + col % CHUNK

    # Copies, global to shared. Thread `thread` copies chunks thread,
    # thread + threads, ... of each tile, row by row, so neighbouring threads
    # read neighbouring 16 bytes of a row. Beyond the matrices' edges the tile
    # holds zeros.
    #
    # Levels 5-7 work out every address once, before the walk along K: the
    # shared address each of its copies writes in stage 0, and the global
    # address it reads for the first tile; per tile they add the stage's
    # offset and K's advance (bk columns of A, bk rows of B). What changes
    # along K is one addition per copy, and a comparison of K's edge.
    @cuda.jit(device=True, inline=True)
    def plan_copies(smem, a, b, row0, col0, k_begin, k_end, thread, a_to, a_from, a_limit, b_to,
                    b_from, b_limit):
        """Each copy's shared address in stage 0 (a_to, b_to), its global
        address for the first tile, at K = k_begin (a_from, b_from), and the
        limit of K's offset from there below which it is inside the matrices
        and before k_end (a_limit, b_limit: 0 for a copy beyond M's or N's
        edge, which is always zeros)."""
        m = a.shape[1] if a_transposed else a.shape[0]
        n = b.shape[0] if b_transposed else b.shape[1]
        k = k_end - k_begin
        for i in range(loads_a):
            index = i * threads + thread
            row, col = index // chunks_a, (index % chunks_a) * CHUNK
            a_to[i] = shared_address(smem, a_place(0, row, col))
            if a_transposed:  # a row of A's tile is a row of K x M A: as B's
                a_from[i] = global_address(a, k_begin + row, min(row0 + col, m - CHUNK))
                a_limit[i] = k - row if row0 + col < m else 0
            else:
                a_from[i] = global_address(a, min(row0 + row, m - 1), k_begin + col)
                a_limit[i] = k - col if row0 + row < m else 0
        for i in range(loads_b):
            index = i * threads + thread
            row, col = index // chunks_b, (index % chunks_b) * CHUNK
            b_to[i] = shared_address(smem, b_place(0, row, col))
            if b_transposed:  # a row of B's tile is a row of N x K B: as A's
                b_from[i] = global_address(b, min(col0 + row, n - 1), k_begin + col)
                b_limit[i] = k - col if col0 + row < n else 0
            else:
                b_from[i] = global_address(b, k_begin + row, min(col0 + col, n - CHUNK))
                b_limit[i] = k - row if col0 + col < n else 0

    @cuda.jit(device=True, inline=True)
    def copy_tiles_async(stage_offset, k0, a_step, b_step, a_to, a_from, a_limit, b_to, b_from,
                         b_limit):
        """Start the copies of the tile at K offset k0 into the stage
        `stage_offset` bytes on; a_step and b_step: the bytes the sources
        have advanced by (k0 columns of A, k0 rows of B)."""
        for i in range(loads_a):
            cp_async_16(a_to[i] + stage_offset, a_from[i] + a_step, k0 < a_limit[i])
        for i in range(loads_b):
            cp_async_16(b_to[i] + stage_offset, b_from[i] + b_step, k0 < b_limit[i])

    @cuda.jit(device=True, inline=True)
    def fetch_pair(x, row, col, inside):
        """x[row, col] and x[row, col + 1] in one 32-bit register (zeros outside x)."""
        if inside:
            return uint32(x[row, col]) | (uint32(x[row, col + 1]) << uint32(16))
        return uint32(0)

    @cuda.jit(device=True, inline=True)
    def fetch_tiles(carried, a, b, row0, col0, k0, k, thread):
        """Levels 3-4: the same chunks, into this thread's registers, two
        halves to a register (zeros from K = k on)."""
        m = a.shape[0]
        n = b.shape[1]
        for i in range(loads_a):
            index = i * threads + thread
            row, col = row0 + index // chunks_a, k0 + (index % chunks_a) * CHUNK
            for j in range(CHUNK // 2):
                carried[i * 4 + j] = fetch_pair(a, row, col + 2 * j, row < m and col < k)
        for i in range(loads_b):
            index = i * threads + thread
            row, col = k0 + index // chunks_b, col0 + (index % chunks_b) * CHUNK
            for j in range(CHUNK // 2):
                carried[(loads_a + i) * 4 + j] = fetch_pair(b, row, col + 2 * j,
                                                            row < k and col < n)

    @cuda.jit(device=True, inline=True)
    def store_pairs(smem, place, carried, first):
        """carried[first:first + 4], 8 halves, into smem[place:place + 8]."""
        for j in range(CHUNK // 2):
            both = carried[first + j]
            smem[place + 2 * j] = uint16(both & uint32(0xFFFF))
            smem[place + 2 * j + 1] = uint16(both >> uint32(16))

    @cuda.jit(device=True, inline=True)
    def store_tiles(carried, smem, thread):
        """Levels 3-4: the fetched chunks, from registers into shared memory."""
        for i in range(loads_a):
            index = i * threads + thread
            store_pairs(smem, a_place(0, index // chunks_a, (index % chunks_a) * CHUNK),
                        carried, i * 4)
        for i in range(loads_b):
            index = i * threads + thread
            store_pairs(smem, b_place(0, index // chunks_b, (index % chunks_b) * CHUNK),
                        carried, (loads_a + i) * 4)

    @cuda.jit(device=True, inline=True)
    def two_halves(smem, first, second):
        """One 32-bit register holding smem[first] (low bits) and smem[second]."""
        return uint32(smem[first]) | (uint32(smem[second]) << uint32(16))

    @cuda.jit(device=True, inline=True)
    def plan_reads(smem, lane, warp_row, warp_col, a_reads, b_reads):
        """The shared addresses of the warp's ldmatrix reads in stage 0: A's
        first m-tile for each ks (a_reads), B's first 16 of K for each pair
        of n-tiles (b_reads). Lane l gives the address of row l % 16 of a
        16-row tile, at column 8 (l // 16): matrices 0-3 are then the four
        8 x 8 quarters in fragment order. For B (k rows, n columns) the same
        lanes give rows of k, and .trans hands each lane its columns. The
        swizzle repeats every 8 rows, so m-tiles 16 rows apart (and B's
        16-row steps of K) are a constant number of bytes apart."""
        r, c = lane % 16, (lane // 16) * 8
        if a_transposed:
            # k rows read with .trans: lanes give 8 rows of k at 8 columns of
            # m, the same rows 8 columns on, then the next 8 rows (the
            # fragment's order); each m-tile is 16 columns on, which the
            # swizzle does not keep a constant distance: one address each.
            k_row = (lane % 8) + 8 * (lane // 16)
            for ks in range(steps):
                for tm in range(tiles_m):
                    a_reads[ks * tiles_m + tm] = shared_address(smem, a_place(
                        0, ks * 16 + k_row, warp_row + tm * 16 + 8 * ((lane // 8) % 2)))
        else:
            for ks in range(steps):
                a_reads[ks] = shared_address(smem, a_place(0, warp_row + r, ks * 16 + c))
        if b_transposed:
            # n rows read without .trans (the attention kernel's K): lanes give
            # 8 rows of n, both 8-wide halves of the 16 of K, then 8 more rows;
            # per 16 of K, the pairs of n-tiles are 16 rows apart.
            n_row = (lane % 8) + 8 * (lane // 16)
            for ks in range(steps):
                b_reads[ks] = shared_address(smem, b_place(0, warp_col + n_row,
                                                           ks * 16 + 8 * ((lane // 8) % 2)))
        else:
            for tp in range(pairs_n):
                b_reads[tp] = shared_address(smem, b_place(0, r, warp_col + tp * 16 + c))

    @cuda.jit(device=True, inline=True)
    def read_fragments(smem, base, a_reads, b_reads, af, bf, slot, ks, lane, warp_row,
                       warp_col):
        """The warp's fragments of A and B for the 16 of K at ks * 16, into
        af and bf at buffer `slot`: A's 4 registers per m-tile (the order of
        A_FRAGMENT: row g, row g + 8, then both 8 columns on); B's 4 per pair
        of n-tiles (b0b1 and b2b3 of the first, then of the second)."""
        a0, b0 = slot * a_registers, slot * b_registers
        if use_ldmatrix:
            # Addresses from plan_reads: A's for this ks (tile tm is 16 rows
            # further on), B's for each pair of n-tiles (this ks is 16 rows on).
            stage_offset = uint32(2 * base)
            for tm in range(tiles_m):
                if a_transposed:
                    x = ldmatrix_x4_trans(a_reads[ks * tiles_m + tm] + stage_offset)
                else:
                    x = ldmatrix_x4(a_reads[ks] + stage_offset + uint32(tm * A_TILE_BYTES))
                for j in range(4):
                    af[a0 + tm * 4 + j] = x[j]
            for tp in range(pairs_n):
                if b_transposed:
                    x = ldmatrix_x4(b_reads[ks] + stage_offset + uint32(tp * B_PAIR_BYTES))
                else:
                    x = ldmatrix_x4_trans(b_reads[tp] + stage_offset
                                          + uint32(ks * B_STEP_BYTES))
                for j in range(4):
                    bf[b0 + tp * 4 + j] = x[j]
        else:
            # Each lane reads its own fragment's halves, two per register
            # (fragments.A_FRAGMENT and B_FRAGMENT with g = lane // 4, t = lane % 4).
            g, t = lane // 4, lane % 4
            for tm in range(tiles_m):
                for j in range(4):
                    row = warp_row + tm * 16 + g + 8 * (j % 2)
                    col = ks * 16 + 2 * t + 8 * (j // 2)
                    af[a0 + tm * 4 + j] = two_halves(smem, a_place(base, row, col),
                                                     a_place(base, row, col + 1))
            for tp in range(pairs_n):
                for j in range(4):
                    row = ks * 16 + 2 * t + 8 * (j % 2)
                    col = warp_col + tp * 16 + 8 * (j // 2) + g
                    bf[b0 + tp * 4 + j] = two_halves(smem, b_place(base, row, col),
                                                     b_place(base, row + 1, col))

    @cuda.jit(device=True, inline=True)
    def multiply(acc, af, bf, slot):
        """acc += the warp's A fragments times its B fragments (buffer `slot`):
        tiles_m x tiles_n instructions."""
        a0, b0 = slot * a_registers, slot * b_registers
        for tm in range(tiles_m):
            for tn in range(tiles_n):
                j = (tm * tiles_n + tn) * 4
                bj = b0 + (tn // 2) * 4 + (tn % 2) * 2  # tn is the (tn % 2)-th of its pair
                aj = a0 + tm * 4
                d = mma(af[aj], af[aj + 1], af[aj + 2], af[aj + 3], bf[bj], bf[bj + 1],
                        acc[j], acc[j + 1], acc[j + 2], acc[j + 3])
                acc[j] = d[0]
                acc[j + 1] = d[1]
                acc[j + 2] = d[2]
                acc[j + 3] = d[3]

    @cuda.jit(device=True, inline=True)
    def multiply_tile(smem, base, a_reads, b_reads, acc, af, bf, lane, warp_row, warp_col):
        """acc += the warp's part of the stage at `base` (halves), 16 of K at
        a time. With double_fragments the fragments of step ks + 1 are read
        before step ks's instructions, into the other buffer."""
        if buffers == 2:
            read_fragments(smem, base, a_reads, b_reads, af, bf, 0, 0, lane, warp_row, warp_col)
            for ks in range(steps):
                if ks + 1 < steps:
                    read_fragments(smem, base, a_reads, b_reads, af, bf, (ks + 1) % 2, ks + 1,
                                   lane, warp_row, warp_col)
                multiply(acc, af, bf, ks % 2)
        else:
            for ks in range(steps):
                read_fragments(smem, base, a_reads, b_reads, af, bf, 0, ks, lane, warp_row,
                               warp_col)
                multiply(acc, af, bf, 0)

    block_tile = make_block_order(bm, bn, group_m)

    @cuda.jit(device=True, inline=True)
    def store_c(c, acc, m, first, row0, col0, lane):
        """The lane's sums into C (C_FRAGMENT's places), rounded to halves two
        at a time, or as float32; within C's edges (m rows; they start at
        row `first` of c, which holds several slices of K's partial sums when
        K is split)."""
        n = c.shape[1]
        g, t = lane // 4, lane % 4
        for tm in range(tiles_m):
            for tn in range(tiles_n):
                j = (tm * tiles_n + tn) * 4
                col = col0 + tn * 8 + 2 * t
                for h in range(2):
                    row = row0 + tm * 16 + g + 8 * h
                    if row < m and col < n:
                        if half_out:
                            both = pack(acc[j + 2 * h], acc[j + 2 * h + 1])
                            c[first + row, col] = uint16(both & uint32(0xFFFF))
                            c[first + row, col + 1] = uint16(both >> uint32(16))
                        else:
                            c[first + row, col] = acc[j + 2 * h]
                            c[first + row, col + 1] = acc[j + 2 * h + 1]

    @cuda.jit
    def kernel(a, b, c):
        # Split K: the grid's y blocks each sum one slice of K (whole tiles),
        # into their own m rows of c, float32 partial sums that half_matmul
        # adds up (sum_slices). One slice (gridDim.y == 1) is the whole of K.
        slices, slice_ = cuda.gridDim.y, cuda.blockIdx.y
        m = c.shape[0] // slices
        depth = a.shape[0] if a_transposed else a.shape[1]  # K
        per_slice = ((depth + bk - 1) // bk + slices - 1) // slices * bk
        k_begin = slice_ * per_slice
        k_end = min(depth, k_begin + per_slice)
        k = k_end - k_begin
        smem = cuda.shared.array(0, uint16)
        thread = cuda.threadIdx.x
        warp, lane = thread // WARP, thread % WARP
        row0, col0 = block_tile(m, c.shape[1])
        warp_row, warp_col = (warp // warps_n) * wm, (warp % warps_n) * wn
        acc = cuda.local.array(acc_size, float32)
        af = cuda.local.array(a_held, uint32)
        bf = cuda.local.array(b_held, uint32)
        for i in range(acc_size):
            acc[i] = float32(0.0)
        a_reads = cuda.local.array(a_read_count, uint32)
        b_reads = cuda.local.array(b_read_count, uint32)
        if use_ldmatrix:
            plan_reads(smem, lane, warp_row, warp_col, a_reads, b_reads)
        k_tiles = (k + bk - 1) // bk
        if async_copy:
            a_to = cuda.local.array(loads_a, uint32)
            a_from = cuda.local.array(loads_a, uint64)
            a_limit = cuda.local.array(loads_a, int64)
            b_to = cuda.local.array(loads_b, uint32)
            b_from = cuda.local.array(loads_b, uint64)
            b_limit = cuda.local.array(loads_b, int64)
            plan_copies(smem, a, b, row0, col0, k_begin, k_end, thread, a_to, a_from, a_limit,
                        b_to, b_from, b_limit)
            a_advance = uint64(2 * bk) * uint64(a.shape[1]) if a_transposed else uint64(2 * bk)
            b_advance = uint64(2 * bk) if b_transposed else uint64(2 * bk) * uint64(b.shape[1])
            # The pipeline: stages - 1 tiles in flight before the first step;
            # each step waits for its own tile (at most stages - 2 groups still
            # in flight), lets every warp see it (the barrier, which also says
            # that all warps are done with the stage about to be refilled),
            # starts the copy of the tile stages - 1 ahead, and multiplies.
            # Which stage a step reads and which it fills go round in turn.
            a_step, b_step = uint64(0), uint64(0)
            for s in range(stages - 1):
                if s < k_tiles:
                    copy_tiles_async(uint32(2 * s * stage), s * bk, a_step, b_step, a_to,
                                     a_from, a_limit, b_to, b_from, b_limit)
                cp_async_commit()
                a_step += a_advance
                b_step += b_advance
            read, fill = 0, (stages - 1) * stage
            for kt in range(k_tiles):
                wait()
                cuda.syncthreads()
                ahead = kt + stages - 1
                if ahead < k_tiles:
                    copy_tiles_async(uint32(2 * fill), ahead * bk, a_step, b_step, a_to,
                                     a_from, a_limit, b_to, b_from, b_limit)
                cp_async_commit()
                a_step += a_advance
                b_step += b_advance
                multiply_tile(smem, read, a_reads, b_reads, acc, af, bf, lane, warp_row,
                              warp_col)
                read = read + stage if read + stage < stages * stage else 0
                fill = fill + stage if fill + stage < stages * stage else 0
        else:
            carried = cuda.local.array(held, uint32)
            for kt in range(k_tiles):
                fetch_tiles(carried, a, b, row0, col0, k_begin + kt * bk, k_end, thread)
                cuda.syncthreads()  # every warp is done with the last tile
                store_tiles(carried, smem, thread)
                cuda.syncthreads()  # the tile is whole
                multiply_tile(smem, 0, a_reads, b_reads, acc, af, bf, lane, warp_row, warp_col)
        store_c(c, acc, m, slice_ * m, row0 + warp_row, col0 + warp_col, lane)

    def blocks(m: int, n: int) -> int:
        """The blocks that cover an m x n C (a one-dimensional grid)."""
        return ((m + bm - 1) // bm) * ((n + bn - 1) // bn)

    kernel.threads = threads
    kernel.shared_bytes = stages * stage * 2
    kernel.tile = (bm, bn)
    kernel.config = cfg
    kernel.blocks = blocks
    return kernel


def make_sum_slices(kind: str, out: str):
    """The kernel that finishes a split-K product: c = the sum of the slices'
    float32 partial sums (parts holds `slices` blocks of m rows, c's m), in
    float32 or rounded once to halves of `kind` (c as uint16 bits). One
    thread per pair of neighbouring elements of a row (N is even)."""
    pack = pack_f16x2 if kind == "f16" else pack_bf16x2
    half_out = out == "half"

    @cuda.jit
    def sum_slices(parts, c):
        m, n = c.shape
        slices = parts.shape[0] // m
        pair = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        row, col = pair // (n // 2), (pair % (n // 2)) * 2
        if row >= m:
            return
        first, second = float32(0.0), float32(0.0)
        for s in range(slices):
            first += parts[s * m + row, col]
            second += parts[s * m + row, col + 1]
        if half_out:
            both = pack(first, second)
            c[row, col] = uint16(both & uint32(0xFFFF))
            c[row, col + 1] = uint16(both >> uint32(16))
        else:
            c[row, col] = first
            c[row, col + 1] = second

    return sum_slices
