"""The levels, their names, the tile shapes they run with, and the checks that
say whether a tile shape can run at all.

A register-blocked kernel (levels 4a to 6) takes its tile sizes from a
``TileConfig``; level 7's warp-tiled kernel from a ``WarpTileConfig``.
``check_config`` and ``check_warp_config`` turn every limit of the hardware
(threads per block, 48 KiB of static shared memory, 255 registers a thread,
128-bit alignment) into an error message naming the broken constraint, and
``candidate_configs`` lists the shapes ``autotune`` may try. The kernels, the
tuned tables, the entry point and the traffic model all read these, so they
sit here, below all of them, where a student can read what a tile shape
means without reading a kernel.

Also here, because every kernel of levels 1 to 7 uses them: ``_u``, ``ZERO``
and ``ONE``, the unsigned 64-bit index constants (why unsigned: the note
above ``_u``), and ``_INLINE``, the option that inlines small device
functions on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucourse.device import on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.checks import whole
from gpucourse.kernels import launch


# -----------------------------------------------------------------------------
# Levels and tile configurations

LEVELS = ("1", "2", "3", "4a", "4b", "5", "6", "7")
LEVEL_NAMES = {
    "1": "naive",
    "2": "coalesced",
    "3": "shared-memory tiles",
    "4a": "1D block tiling",
    "4b": "2D block tiling",
    "5": "vectorized loads",
    "6": "autotuned",
    "7": "warp tiling",
}

NAIVE_BLOCK = 32  # levels 1 and 2: 32 x 32 threads, one per output
SHARED_TILE = 32  # level 3: 32 x 32 tiles of A and B in shared memory
STATIC_SHARED_LIMIT_BYTES = launch.STATIC_SHARED_LIMIT_BYTES  # a block may declare statically
MAX_THREADS_PER_BLOCK = 1024
MAX_REGISTERS_PER_THREAD = 255
WARP_SIZE = 32
# Registers a thread needs besides its accumulators and fragments (indices,
# pointers, loop counters): a rough allowance used only to rule out configs.
REGISTER_OVERHEAD = 32
# Copies of the tiles a cp.async ring may have (TileConfig.stages, ``pipelined``),
# and the floats after each k-row of A's tile there (16 bytes: rows stay aligned).
PIPELINE_STAGES = (2, 3, 4, 5)
A_PAD = 4
# matmul's splits for stream-K (split_k's "Stream-K"), and the shape model's
# name for such a plan.
STREAM = "stream"


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes of a register-blocked kernel.

    A block computes a bm x bn tile of C, stepping through K bk columns at a
    time; each thread computes a tm x tn patch of that tile. `stages` (levels
    5-6): 0, each next tile fetched into registers and stored to shared
    memory a step later (building_blocks, (4)); 2 to 5, a ring of that many
    copies of the tiles filled by cp.async (``pipelined``).
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    stages: int = 0

    @property
    def threads(self) -> int:
        """Threads per block: one per tm x tn patch of the bm x bn tile."""
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        """Shared memory per block: a bm x bk tile of A and a bk x bn tile of B;
        with stages, that many copies, A's rows padded by A_PAD floats."""
        if self.stages:
            return 4 * self.stages * ((self.bm + A_PAD) * self.bk + self.bk * self.bn)
        return 4 * (self.bm * self.bk + self.bk * self.bn)

    @property
    def register_estimate(self) -> int:
        """Registers per thread: accumulators, the two fragments, and overhead."""
        return self.tm * self.tn + self.tm + self.tn + REGISTER_OVERHEAD


def tile_config_of(fields: dict) -> TileConfig:
    """The TileConfig a results row or the model's JSON writes as a dict (its
    other keys, such as "splits", ignored; "stages" 0 where absent)."""
    return TileConfig(*(fields[f] for f in ("bm", "bn", "bk", "tm", "tn")),
                      stages=fields.get("stages", 0))


# Level 4a and 4b use the worklog's own sizes; level 5 too. Level 6 falls back
# to DEFAULT_TUNED when no tuned entry exists for the GPU it runs on.
CONFIG_4A = TileConfig(bm=64, bn=64, bk=8, tm=8, tn=1)
CONFIG_4B = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8)
CONFIG_5 = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8)
DEFAULT_TUNED = TileConfig(bm=128, bn=128, bk=16, tm=8, tn=8)


# The search space of `autotune`: every combination that passes check_config.
SEARCH_SPACE = dict(bm=(64, 128, 256), bn=(64, 128, 256), bk=(8, 16, 32),
                    tm=(4, 8, 16), tn=(4, 8, 16))


def _whole(name, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_config(config: TileConfig, vectorized: bool = True) -> TileConfig:
    """Return config if a register-blocked kernel can use it, else raise ValueError.

    The constraints, each named in its error message:

    * divisibility: tm divides bm and tn divides bn (each thread owns a whole patch);
    * threads: bm*bn/(tm*tn) is a multiple of the warp size (32) and at most 1024;
    * shared memory: 4*(bm*bk + bk*bn) bytes (with stages, that many copies, A's
      rows padded by A_PAD floats) fit the 48 KiB a block may declare statically;
    * stages: 0, or one of PIPELINE_STAGES;
    * registers: tm*tn accumulators + tm + tn fragment values + ~32 for indices stay
      under the 255 registers a thread may have (more would spill to local memory);
    * loading: the block's threads cover the A and B tiles in whole rows, an equal
      number of loads each (with stages: an equal number of cp.async copies each,
      a float of A or, vectorized, four floats of B a copy);
    * vector alignment (vectorized kernels): bk, bn, tm and tn are multiples of 4,
      so that every 128-bit load, from global or shared memory, reads four floats
      of one row starting on a 16-byte boundary.
    """
    if not isinstance(config, TileConfig):
        raise ValueError(f"config must be a TileConfig(bm, bn, bk, tm, tn), got {config!r}")
    bm, bn, bk, tm, tn = (_whole(f, getattr(config, f)) for f in ("bm", "bn", "bk", "tm", "tn"))
    if bm % tm or bn % tn:
        raise ValueError(f"config breaks divisibility: tm must divide bm and tn must divide bn, "
                         f"got bm={bm}, tm={tm}, bn={bn}, tn={tn}")
    threads = config.threads
    if threads % WARP_SIZE or threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"config breaks the thread limit: bm*bn/(tm*tn) must be a multiple of "
                         f"{WARP_SIZE} and at most {MAX_THREADS_PER_BLOCK}, got {threads}")
    if isinstance(config.stages, int) and config.shared_bytes > STATIC_SHARED_LIMIT_BYTES:
        tiles = ("stages*(4*((bm + 4)*bk + bk*bn))" if config.stages else "4*(bm*bk + bk*bn)")
        raise ValueError(f"config breaks the shared-memory limit: {tiles} must be at most "
                         f"{STATIC_SHARED_LIMIT_BYTES} bytes, got {config.shared_bytes}")
    stages = config.stages
    if isinstance(stages, bool) or stages not in (0, *PIPELINE_STAGES):
        raise ValueError(f"config's stages must be 0 (tiles through registers) or one of "
                         f"{PIPELINE_STAGES} (a cp.async ring), got {stages!r}")
    if config.register_estimate > MAX_REGISTERS_PER_THREAD:
        raise ValueError(f"config breaks the register limit: tm*tn + tm + tn + "
                         f"{REGISTER_OVERHEAD} must be at most {MAX_REGISTERS_PER_THREAD}, "
                         f"got {config.register_estimate}")
    width = 4 if vectorized else 1
    if vectorized and (bk % 4 or bn % 4 or tm % 4 or tn % 4):
        raise ValueError(f"config breaks vector alignment: bk, bn, tm and tn must be multiples "
                         f"of 4 for 128-bit loads, got bk={bk}, bn={bn}, tm={tm}, tn={tn}")
    if stages:  # cp.async: a float of A a copy, one or four of B; equal shares, whole rows
        for floats in sorted({1, width}):  # a ragged product's B copies one float at a time
            per_row = bn // floats
            if ((bm * bk) % threads or (bk * bn // floats) % threads or threads % bk
                    or not (threads % per_row == 0 or per_row % threads == 0)):
                raise ValueError(f"config breaks tile copying: the {threads} threads must share "
                                 f"the {bm} x {bk} tile of A (a float a copy) and the {bk} x "
                                 f"{bn} tile of B ({floats} a copy) equally, in whole rows or "
                                 f"whole passes over a row")
        return config
    # A's tile is bm rows of bk // width loads; B's is bk rows of bn // width loads.
    for tile, rows, per_row in (("A", bm, bk // width), ("B", bk, bn // width)):
        if threads % per_row or rows % (threads // per_row):
            raise ValueError(f"config breaks tile loading: the {threads} threads must load the "
                             f"{rows} x {per_row * width} tile of {tile} in whole rows, an equal "
                             f"share each (threads divisible by {per_row}, and {rows} rows "
                             f"divisible by threads/{per_row})")
    return config


def candidate_configs(space: dict | None = None, vectorized: bool = True) -> list[TileConfig]:
    """Every TileConfig in `space` (default SEARCH_SPACE) that passes check_config."""
    space = SEARCH_SPACE if space is None else space
    if not isinstance(space, dict) or set(space) != {"bm", "bn", "bk", "tm", "tn"}:
        raise ValueError("space must be a dict with exactly the keys bm, bn, bk, tm, tn, "
                         f"got {space!r}")
    found = []
    for bm in space["bm"]:
        for bn in space["bn"]:
            for bk in space["bk"]:
                for tm in space["tm"]:
                    for tn in space["tn"]:
                        config = TileConfig(bm, bn, bk, tm, tn)
                        try:
                            found.append(check_config(config, vectorized))
                        except ValueError:
                            pass
    return found


@dataclass(frozen=True)
class WarpTileConfig:
    """Tile sizes of level 7's warp-tiled kernel.

    A block of `threads` threads computes a bm x bn tile of C, stepping
    through K bk columns at a time. Each of its threads/32 warps owns a
    wm x wn sub-tile of the block's tile. The warp's 32 threads cover a
    (wm / wm_iter) x (wn / wn_iter) piece of it with tm x tn patches, one
    each, and then repeat that wm_iter times down and wn_iter times across:
    a thread computes wm_iter x wn_iter patches of tm x tn, and the values of
    A and B it loads from shared memory serve all the patches of their row or
    column.
    """

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    wn_iter: int
    tm: int
    tn: int
    threads: int

    @property
    def warps(self) -> int:
        """Warps per block: one per wm x wn tile."""
        return self.threads // WARP_SIZE

    @property
    def wm_iter(self) -> int:
        """Patches a thread computes down its warp's tile: the warp's tile over
        what 32 threads cover in one pass (wn_iter passes across, tm x tn each)."""
        return (self.wm * self.wn) // (WARP_SIZE * self.wn_iter * self.tm * self.tn)

    @property
    def shared_bytes(self) -> int:
        """Shared memory per block: two copies (double buffering) of a bm x bk
        tile of A and a bk x bn tile of B."""
        return 2 * 4 * (self.bm * self.bk + self.bk * self.bn)

    @property
    def register_estimate(self) -> int:
        """Registers per thread: accumulators, the fragments of A and B, the
        next tiles staged in registers (register prefetching), and overhead."""
        accumulators = self.wm_iter * self.wn_iter * self.tm * self.tn
        fragments = self.wm_iter * self.tm + self.wn_iter * self.tn
        staged = (self.bm * self.bk + self.bk * self.bn) // max(1, self.threads)
        return accumulators + fragments + staged + REGISTER_OVERHEAD


def check_warp_config(config: WarpTileConfig) -> WarpTileConfig:
    """Return config if level 7's kernel can use it, else raise ValueError naming
    the constraint it breaks:

    * threads: a multiple of the warp size (32) and at most 1024;
    * warp tiling: wm divides bm, wn divides bn and the (bm/wm) x (bn/wn) warp
      tiles are one per warp;
    * warp patches: the warp's 32 threads tile wm x wn with tm x tn patches,
      wn_iter across and wm_iter down (wn_iter * tn divides wn, the threads
      across one piece, wn / wn_iter / tn, divide 32, and the rows they leave
      times tm divide wm);
    * vector alignment: bk, bn, tm and tn are multiples of 4 (128-bit loads from
      global and shared memory);
    * tile loading: the block's threads load the bm x bk tile of A and the
      bk x bn tile of B in whole rows of float4, an equal number each;
    * shared memory: two copies of both tiles, 8*(bm*bk + bk*bn) bytes, fit
      the 48 KiB a block may declare statically;
    * registers: wm_iter*wn_iter*tm*tn accumulators, the fragments, the staged
      next tiles and ~32 for indices stay at most 255.
    """
    if not isinstance(config, WarpTileConfig):
        raise ValueError("config for level 7 must be a WarpTileConfig(bm, bn, bk, wm, wn, wn_iter, "
                         f"tm, tn, threads), got {config!r}")
    fields = ("bm", "bn", "bk", "wm", "wn", "wn_iter", "tm", "tn", "threads")
    bm, bn, bk, wm, wn, wn_iter, tm, tn, threads = (_whole(f, getattr(config, f)) for f in fields)
    if threads % WARP_SIZE or threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"config breaks the thread limit: threads must be a multiple of "
                         f"{WARP_SIZE} and at most {MAX_THREADS_PER_BLOCK}, got {threads}")
    warps = threads // WARP_SIZE
    if bm % wm or bn % wn or (bm // wm) * (bn // wn) != warps:
        raise ValueError(f"config breaks warp tiling: wm must divide bm, wn divide bn, and the "
                         f"(bm/wm) x (bn/wn) warp tiles must be one per warp ({warps} warps); got "
                         f"bm={bm}, wm={wm}, bn={bn}, wn={wn}")
    across = wn // (wn_iter * tn) if wn % (wn_iter * tn) == 0 else 0  # threads across a piece
    if not across or WARP_SIZE % across or wm % ((WARP_SIZE // across) * tm):
        raise ValueError(f"config breaks warp patches: the warp's 32 threads must tile its "
                         f"{wm} x {wn} tile with {tm} x {tn} patches, {wn_iter} across (wn_iter*tn "
                         f"must divide wn, wn/(wn_iter*tn) threads across must divide 32, and the "
                         f"32/that rows of tm must divide wm)")
    if bk % 4 or bn % 4 or tm % 4 or tn % 4:
        raise ValueError(f"config breaks vector alignment: bk, bn, tm and tn must be multiples "
                         f"of 4 for 128-bit loads, got bk={bk}, bn={bn}, tm={tm}, tn={tn}")
    for tile, rows, per_row in (("A", bm, bk // 4), ("B", bk, bn // 4)):
        if threads % per_row or rows % (threads // per_row):
            raise ValueError(f"config breaks tile loading: the {threads} threads must load the "
                             f"{rows} x {per_row * 4} tile of {tile} in whole rows of float4, an "
                             f"equal share each (threads divisible by {per_row}, and {rows} rows "
                             f"divisible by threads/{per_row})")
    if config.shared_bytes > STATIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"config breaks the shared-memory limit: two copies of the tiles, "
                         f"8*(bm*bk + bk*bn) bytes, must be at most {STATIC_SHARED_LIMIT_BYTES}, "
                         f"got {config.shared_bytes}")
    if config.register_estimate > MAX_REGISTERS_PER_THREAD:
        raise ValueError(f"config breaks the register limit: wm_iter*wn_iter*tm*tn accumulators "
                         f"+ fragments + staged tiles + {REGISTER_OVERHEAD} must be at most "
                         f"{MAX_REGISTERS_PER_THREAD}, got {config.register_estimate}")
    return config


# The worklog's kernel-10 settings for large GPUs: 128 x 128 block tiles in four
# warps of 64 x 64, each thread 4 patches of 8 x 4 across (128 outputs). The
# chapter draws it; it is no longer what level 7 runs by default.
WARP_TILE_WORKLOG = WarpTileConfig(bm=128, bn=128, bk=16, wm=64, wn=64, wn_iter=4, tm=8, tn=4,
                                   threads=128)
# Level 7's default: the candidate that won across the shapes of the committed
# sweeps (benchmarks/results/sgemm_level7-h100-2026-11-25.json and -11-26.json),
# not the best of a sweep at each shape. Of the three finalists timed at all
# four shapes (4096^3, 8192^3, 2048^3, 1024 x 8192 x 1024), this one has the
# highest geometric mean share of cuBLAS in each run (0.928 on 2026-11-26
# against 0.916 and 0.913; 0.893 against 0.890 and 0.884 on 2026-11-25) and was
# fastest at 4096^3 in both; the worklog's
# sizes reached 88.5% there on 2026-11-26 where it reached 93.4%. Twice the
# block tile of the worklog's, in 8 warps of the same 64 x 64 tiles and the
# same patches: a block of 8 warps per SM (tests/test_sgemm_level7_results.py
# recomputes the choice from the files).
WARP_TILE_DEFAULT = WarpTileConfig(bm=128, bn=256, bk=16, wm=64, wn=64, wn_iter=4, tm=8, tn=4,
                                   threads=256)
# What benchmarks/sgemm_level7.py times on a GPU: the worklog's sizes, their neighbours
# in block size (64 x 128 to 256 x 128, and level 6's 64 x 256), depth (bk 8
# or 16), warps per block (4 or 8) and patch shape (8 x 4, 4 x 8, 8 x 8; one
# or two passes down); 64 or 128 accumulators per thread.
WARP_TILE_CANDIDATES = (
    WARP_TILE_WORKLOG,
    WarpTileConfig(128, 128, 8, 64, 64, 4, 8, 4, 128),
    WarpTileConfig(128, 128, 16, 64, 64, 2, 8, 4, 128),  # wm_iter = 2
    WarpTileConfig(128, 128, 16, 64, 64, 2, 8, 8, 128),
    WarpTileConfig(128, 128, 16, 64, 32, 2, 8, 4, 256),
    WarpTileConfig(128, 128, 16, 32, 64, 2, 4, 8, 256),
    WARP_TILE_DEFAULT,
    WarpTileConfig(256, 128, 16, 64, 64, 4, 8, 4, 256),
    WarpTileConfig(128, 64, 16, 64, 32, 2, 8, 4, 128),
    WarpTileConfig(64, 128, 16, 32, 64, 4, 4, 4, 128),
    WarpTileConfig(64, 256, 16, 32, 64, 2, 8, 4, 256),  # level 6's tuned block tile on the H100
    # 128 outputs a thread in 2 x 2 patches of 8 x 4, or 1 x 2 of 8 x 8, as
    # level 6's 16 x 8 (and cuBLAS's 8 x 16): one block of 8 warps per SM.
    WarpTileConfig(128, 256, 16, 64, 64, 2, 8, 4, 256),
    WarpTileConfig(128, 256, 16, 64, 64, 2, 8, 8, 256),
)


def _level(level, auto_ok: bool = False) -> str:
    """Normalize a level (1, "1", "4a", ..., and "auto" where auto_ok) to its key."""
    accepted = LEVELS + (("auto",) if auto_ok else ())
    if isinstance(level, (bool, np.bool_)):
        raise ValueError(f"level must be one of {', '.join(accepted)}, got {level!r}")
    key = str(level).strip().lower() if isinstance(level, (int, np.integer, str)) else None
    if key not in accepted:
        extra = " (level 4 has two kernels: '4a' and '4b')" if key == "4" else ""
        raise ValueError(f"level must be one of {', '.join(accepted)}, got {level!r}{extra}")
    return key


def _blocks(size: int, tile: int) -> int:
    return (size + tile - 1) // tile


def _whole_or_zero(name, value) -> int:
    return whole(name, value, 0)


def _shape(shape) -> tuple[int, int, int]:
    """(m, n, k) of a product's shape, each checked a whole number >= 0."""
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    return tuple(_whole_or_zero(name, v) for name, v in zip("mnk", shape))


# -----------------------------------------------------------------------------
# Indices. Numba types cuda.threadIdx.x as int32 and does integer arithmetic in
# int64, and a *signed* index makes it add Python's negative-index wrap-around
# to every array access: a compare and a select per index, which also stops the
# compiler from folding constant offsets into the load instructions. So every
# kernel converts thread and block indices, sizes and tile constants to uint64
# first: an unsigned index cannot be negative, Numba emits no wrap-around, and
# with one 64-bit type throughout the compiler can turn `tile[ty * T + i]` in an
# unrolled loop into one base address plus constant offsets. (A bare literal
# undoes this: `4 * i` is int64 again, and int64 mixed with uint64 is float64;
# so the constants below are named uint64 values.)


def _u(*values):
    """Python ints as uint64 constants for the kernels (one, or a tuple)."""
    out = tuple(np.uint64(v) for v in values)
    return out[0] if len(out) == 1 else out


ZERO, ONE = _u(0, 1)
# Small device functions are inlined into the kernel (the simulator has no such option).
_INLINE = {"forceinline": True} if on_gpu() else {}
