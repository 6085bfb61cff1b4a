"""Week 8: single-precision matrix multiplication (SGEMM) in Numba-CUDA, level by level.

C = A @ B for float32 A (M x K) and B (K x N), following the path of Simon
Boehm's worklog "How to optimize a CUDA matmul kernel for cuBLAS-like
performance" (2022), rebuilt in Python:

    level 1   naive: one thread per output, consecutive threads walk down a column of C
    level 2   coalesced: consecutive threads walk along a row of C
    level 3   shared-memory tiles: a block stages 32 x 32 tiles of A and B on chip
    level 4a  1D register blocking: each thread computes a column of TM outputs
    level 4b  2D register blocking: each thread computes a TM x TN patch of outputs
    level 5   vectorized: 128-bit loads and stores, A's tile stored transposed, B read
              without bank conflicts, the next tile prefetched into registers
    level 6   autotuned: level 5's kernel with the tile sizes `autotune` found best
    level 7   warp tiling: each warp owns a sub-tile of the block's tile, and each thread
              several small patches spread over it (a WarpTileConfig); level 5's loads,
              double-buffered tiles
    auto      level 6's kernel with the tile sizes measured best near the product's shape
              (small products want small tiles, so that every SM has work)

Every kernel is correct for any shape: tiles that hang over the edge of a
matrix are filled with zeros when loaded and skipped when stored.

Levels 5, 6, 7 and auto can also cut K into slices (split-K, ``splits=``), for
products with few tiles of C and a deep K: by default in one launch whose
blocks take their slice from blockIdx.z and add into a zeroed C with atomic
adds (so C's last bits may differ from call to call), or one launch per slice
and a kernel adding the partial products (see "Split-K" below). splits=1, the
default for most shapes, stores each output once and is deterministic.

The public entry point is ``matmul(a, b, level="auto")``. It takes numpy arrays
(and returns numpy) or anything with ``__cuda_array_interface__``: a Numba
device array (returns a Numba device array) or a CUDA torch tensor (returns a
CUDA torch tensor). ``autotune`` times tile configurations on a GPU and keeps
the best per GPU model in ``sgemm_tuned.json`` beside this file;
``resource_usage`` reports a kernel's registers, shared and local memory from
Numba's own compile reports; ``traffic_model`` counts the bytes each level
moves, for the chapter's roofline.

Kernels get ``cuda`` from ``gpucourse.device`` (GPU or simulator, decided
once), never from ``numba.cuda`` directly. Tile sizes are captured as
constants by small kernel factories, because shared and local array shapes
must be compile-time constants.
"""

from __future__ import annotations

import datetime as _datetime
import json
import math
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from gpucourse.device import cuda, on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.launch import core_launch, launch_config, launchable, matrix_argument
from gpucourse.kernels.launch import current_gpu as _current_gpu, gpu_name as _gpu_name
from gpucourse.kernels.launch import is_torch_tensor as _is_torch_tensor
from gpucourse.kernels.launch import numba_empty as _numba_empty, torch_float32 as _torch_float32
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4, load_float4_flat
from gpucourse.kernels._vector_store import store_float4, store_float4_flat
from numba import float32, types, uint64  # noqa: E402 (after gpucourse.device, which configures Numba)

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
STATIC_SHARED_LIMIT_BYTES = 48 * 1024  # static shared memory a block may declare
MAX_THREADS_PER_BLOCK = 1024
MAX_REGISTERS_PER_THREAD = 255
WARP_SIZE = 32
# Registers a thread needs besides its accumulators and fragments (indices,
# pointers, loop counters): a rough allowance used only to rule out configs.
REGISTER_OVERHEAD = 32


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes of a register-blocked kernel.

    A block computes a bm x bn tile of C, stepping through K bk columns at a
    time; each thread computes a tm x tn patch of that tile.
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        """Threads per block: one per tm x tn patch of the bm x bn tile."""
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        """Shared memory per block: a bm x bk tile of A and a bk x bn tile of B."""
        return 4 * (self.bm * self.bk + self.bk * self.bn)

    @property
    def register_estimate(self) -> int:
        """Registers per thread: accumulators, the two fragments, and overhead."""
        return self.tm * self.tn + self.tm + self.tn + REGISTER_OVERHEAD


# Level 4a and 4b use the worklog's own sizes; level 5 too. Level 6 falls back
# to DEFAULT_TUNED when no tuned entry exists for the GPU it runs on.
CONFIG_4A = TileConfig(bm=64, bn=64, bk=8, tm=8, tn=1)
CONFIG_4B = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8)
CONFIG_5 = TileConfig(bm=128, bn=128, bk=8, tm=8, tn=8)
DEFAULT_TUNED = TileConfig(bm=128, bn=128, bk=16, tm=8, tn=8)

TUNED_PATH = Path(__file__).with_name("sgemm_tuned.json")

# The search space of `autotune`: every combination that passes check_config.
SEARCH_SPACE = {
    "bm": (64, 128, 256),
    "bn": (64, 128, 256),
    "bk": (8, 16, 32),
    "tm": (4, 8, 16),
    "tn": (4, 8, 16),
}


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
    * shared memory: 4*(bm*bk + bk*bn) bytes fit the 48 KiB a block may declare statically;
    * registers: tm*tn accumulators + tm + tn fragment values + ~32 for indices stay
      under the 255 registers a thread may have (more would spill to local memory);
    * loading: the block's threads cover the A and B tiles in whole rows, an equal
      number of loads each;
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
    if config.shared_bytes > STATIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"config breaks the shared-memory limit: 4*(bm*bk + bk*bn) must be at "
                         f"most {STATIC_SHARED_LIMIT_BYTES} bytes, got {config.shared_bytes}")
    if config.register_estimate > MAX_REGISTERS_PER_THREAD:
        raise ValueError(f"config breaks the register limit: tm*tn + tm + tn + "
                         f"{REGISTER_OVERHEAD} must be at most {MAX_REGISTERS_PER_THREAD}, "
                         f"got {config.register_estimate}")
    width = 4 if vectorized else 1
    if vectorized and (bk % 4 or bn % 4 or tm % 4 or tn % 4):
        raise ValueError(f"config breaks vector alignment: bk, bn, tm and tn must be multiples "
                         f"of 4 for 128-bit loads, got bk={bk}, bn={bn}, tm={tm}, tn={tn}")
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
# warps of 64 x 64, each thread 4 patches of 8 x 4 across (128 outputs).
WARP_TILE_DEFAULT = WarpTileConfig(bm=128, bn=128, bk=16, wm=64, wn=64, wn_iter=4, tm=8, tn=4,
                                   threads=128)
# What benchmarks/sgemm_level7.py times on a GPU: the default, its neighbours
# in block size (64 x 128 to 256 x 128, and level 6's 64 x 256), depth (bk 8
# or 16), warps per block (4 or 8) and patch shape (8 x 4, 4 x 8, 8 x 8; one
# or two passes down); 64 or 128 accumulators per thread.
WARP_TILE_CANDIDATES = (
    WARP_TILE_DEFAULT,
    WarpTileConfig(128, 128, 8, 64, 64, 4, 8, 4, 128),
    WarpTileConfig(128, 128, 16, 64, 64, 2, 8, 4, 128),  # wm_iter = 2
    WarpTileConfig(128, 128, 16, 64, 64, 2, 8, 8, 128),
    WarpTileConfig(128, 128, 16, 64, 32, 2, 8, 4, 256),
    WarpTileConfig(128, 128, 16, 32, 64, 2, 4, 8, 256),
    WarpTileConfig(128, 256, 16, 64, 64, 4, 8, 4, 256),
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

# Steps of the dot-product loop of levels 5-7 written out per pass: 1, 2, 4, ...
# or "tile", all bk of them, with no loop left (see (5) below).
# benchmarks/sgemm.py times several and uses the fastest for its run (recorded
# as dot_unroll in its results), together with DOUBLE_BUFFER below. On the
# H100 (benchmarks/results/sgemm_unroll-h100-2026-11-25.json) the whole tile
# written out, with registers capped so that two blocks fit (see (7)), took
# level 6's tuned kernel from 79.3% to 84.7% of cuBLAS at 4096^3.
DOT_UNROLL = "tile"
UNROLLS = (1, 2, 4, 8, 16, 32)  # steps per pass a kernel may be built with ("tile": bk of them)
# A multiprocessor's registers, and the room a thread needs beyond its
# accumulators and fragments (addresses, indices, the next tile in flight)
# before a register cap would make the compiler spill (see (7) below).
REGISTERS_PER_SM = 65536
REGISTER_ROOM = 32
# Two copies of the shared tiles for levels 5 and 6 (see (6) below), where two
# copies fit in the 48 KiB a block may declare statically; False keeps one.
DOUBLE_BUFFER = True


# -----------------------------------------------------------------------------
# Level 1: naive.
# One thread per element of C, each computing a full dot product of a row of A
# and a column of B. The thread index x picks the ROW: the 32 threads of a warp
# have consecutive x, so at every step they read 32 different rows of A (32
# separate memory transactions, K*4 bytes apart) and write down a column of C.
# The hardware coalesces a warp's loads only when they fall in the same
# 32-byte sectors, so this mapping wastes most of each transaction.


@cuda.jit
def sgemm_naive(a, b, c):
    m, n, k = uint64(c.shape[0]), uint64(c.shape[1]), uint64(a.shape[1])
    row = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    col = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < m and col < n:
        acc = float32(0.0)
        for i in range(k):
            acc += a[row, i] * b[i, col]
        c[row, col] = acc


# -----------------------------------------------------------------------------
# Level 2: coalesced.
# The same arithmetic with x and y swapped: consecutive threads of a warp now
# take consecutive COLUMNS. At each step the warp reads one value of A (a
# broadcast) and 32 neighbouring values of B (one 128-byte line), and writes
# 32 neighbouring values of C. Nothing else changed.


@cuda.jit
def sgemm_coalesced(a, b, c):
    m, n, k = uint64(c.shape[0]), uint64(c.shape[1]), uint64(a.shape[1])
    col = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < m and col < n:
        acc = float32(0.0)
        for i in range(k):
            acc += a[row, i] * b[i, col]
        c[row, col] = acc


# -----------------------------------------------------------------------------
# Level 3: shared-memory tiles.
# Levels 1-2 read every element of A N times and of B M times from global
# memory. Here a 32 x 32 block first copies a 32 x 32 tile of A and one of B
# into shared memory (one element per thread), waits at a barrier, and then
# every thread reads the 32 values it needs from the on-chip copy. Each value
# fetched from global memory is used 32 times: global traffic falls 32-fold.


def _make_shared_kernel(tile: int):
    tile_elements = tile * tile  # a literal size for cuda.shared.array
    T = _u(tile)

    @cuda.jit
    def sgemm_shared(a, b, c):
        a_tile = cuda.shared.array(tile_elements, float32)
        b_tile = cuda.shared.array(tile_elements, float32)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tx = uint64(cuda.threadIdx.x)  # column within the tile
        ty = uint64(cuda.threadIdx.y)  # row within the tile
        row = uint64(cuda.blockIdx.y) * T + ty
        col = uint64(cuda.blockIdx.x) * T + tx
        acc = float32(0.0)
        for k0 in range(ZERO, k, T):
            # Each thread loads one element of each tile; zeros past the edges.
            a_tile[ty * T + tx] = a[row, k0 + tx] if row < m and k0 + tx < k else float32(0.0)
            b_tile[ty * T + tx] = b[k0 + ty, col] if k0 + ty < k and col < n else float32(0.0)
            cuda.syncthreads()
            for i in range(T):
                acc += a_tile[ty * T + i] * b_tile[i * T + tx]
            cuda.syncthreads()  # nobody overwrites a tile while others still read it
        if row < m and col < n:
            c[row, col] = acc

    return sgemm_shared


# -----------------------------------------------------------------------------
# Level 4a: 1D register blocking.
# At level 3 every multiply-add needs two shared-memory loads, and shared
# memory, not arithmetic, is the limit. Now each thread computes TM outputs
# stacked in a column: it loads one value of B's tile into a register and
# reuses it TM times. The block's tile grows to BM x BN (64 x 64) and K is
# walked BK (8) at a time; the TM partial sums live in registers.
# Each thread loads a fixed number of elements of each tile (check_config
# guarantees the tiles divide evenly), so those loops have constant trip
# counts and unroll, with no division at run time.


def _make_1d_kernel(config: TileConfig):
    threads = config.threads
    a_elements, b_elements, tm = config.bm * config.bk, config.bk * config.bn, config.tm
    BM, BN, BK, TM = _u(config.bm, config.bn, config.bk, config.tm)
    A_LOADS, B_LOADS = _u(a_elements // threads, b_elements // threads)
    A_ROW_STRIDE, B_ROW_STRIDE = _u(threads // config.bk, threads // config.bn)

    @cuda.jit
    def sgemm_1d_tiling(a, b, c):
        a_tile = cuda.shared.array(a_elements, float32)
        b_tile = cuda.shared.array(b_elements, float32)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM  # first row of C this block computes
        col0 = uint64(cuda.blockIdx.x) * BN
        thread_col = tid % BN
        thread_row = tid // BN  # this thread owns rows thread_row*TM ... + TM - 1
        a_row, a_col = tid // BK, tid % BK  # where this thread loads in A's tile
        b_row, b_col = tid // BN, tid % BN
        acc = cuda.local.array(tm, float32)
        for i in range(TM):
            acc[i] = 0.0
        for k0 in range(ZERO, k, BK):
            for s in range(A_LOADS):
                r = a_row + s * A_ROW_STRIDE
                inside = row0 + r < m and k0 + a_col < k
                a_tile[r * BK + a_col] = a[row0 + r, k0 + a_col] if inside else float32(0.0)
            for s in range(B_LOADS):
                r = b_row + s * B_ROW_STRIDE
                inside = k0 + r < k and col0 + b_col < n
                b_tile[r * BN + b_col] = b[k0 + r, col0 + b_col] if inside else float32(0.0)
            cuda.syncthreads()
            for dot in range(BK):
                b_value = b_tile[dot * BN + thread_col]  # one load, reused TM times
                for i in range(TM):
                    acc[i] += a_tile[(thread_row * TM + i) * BK + dot] * b_value
            cuda.syncthreads()
        col = col0 + thread_col
        for i in range(TM):
            row = row0 + thread_row * TM + i
            if row < m and col < n:
                c[row, col] = acc[i]

    return sgemm_1d_tiling


# -----------------------------------------------------------------------------
# Level 4b: 2D register blocking.
# Each thread now computes a TM x TN (8 x 8) patch. Per step of K it loads TM
# values of A and TN values of B from shared memory into registers and does
# TM*TN multiply-adds with them: 16 loads for 64 FMAs instead of 9 for 8
# (level 4a) or 2 for 1 (level 3). The block's tile grows to 128 x 128, so
# each value read from global memory is reused 128 times.


def _make_2d_kernel(config: TileConfig):
    threads = config.threads
    a_elements, b_elements = config.bm * config.bk, config.bk * config.bn
    tm, tn, patch = config.tm, config.tn, config.tm * config.tn
    BM, BN, BK, TM, TN = _u(config.bm, config.bn, config.bk, config.tm, config.tn)
    A_LOADS, B_LOADS = _u(a_elements // threads, b_elements // threads)
    A_ROW_STRIDE, B_ROW_STRIDE = _u(threads // config.bk, threads // config.bn)
    THREADS_PER_ROW = _u(config.bn // config.tn)

    @cuda.jit
    def sgemm_2d_tiling(a, b, c):
        a_tile = cuda.shared.array(a_elements, float32)
        b_tile = cuda.shared.array(b_elements, float32)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        thread_row = tid // THREADS_PER_ROW  # this thread owns a TM x TN patch of C
        thread_col = tid % THREADS_PER_ROW
        a_row, a_col = tid // BK, tid % BK
        b_row, b_col = tid // BN, tid % BN
        acc = cuda.local.array(patch, float32)
        a_frag = cuda.local.array(tm, float32)
        b_frag = cuda.local.array(tn, float32)
        for i in range(patch):
            acc[i] = 0.0
        for k0 in range(ZERO, k, BK):
            for s in range(A_LOADS):
                r = a_row + s * A_ROW_STRIDE
                inside = row0 + r < m and k0 + a_col < k
                a_tile[r * BK + a_col] = a[row0 + r, k0 + a_col] if inside else float32(0.0)
            for s in range(B_LOADS):
                r = b_row + s * B_ROW_STRIDE
                inside = k0 + r < k and col0 + b_col < n
                b_tile[r * BN + b_col] = b[k0 + r, col0 + b_col] if inside else float32(0.0)
            cuda.syncthreads()
            for dot in range(BK):
                for i in range(TM):
                    a_frag[i] = a_tile[(thread_row * TM + i) * BK + dot]
                for j in range(TN):
                    b_frag[j] = b_tile[dot * BN + thread_col * TN + j]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += a_frag[i] * b_frag[j]
            cuda.syncthreads()
        for i in range(TM):
            row = row0 + thread_row * TM + i
            if row < m:
                for j in range(TN):
                    col = col0 + thread_col * TN + j
                    if col < n:
                        c[row, col] = acc[i * TN + j]

    return sgemm_2d_tiling


# -----------------------------------------------------------------------------
# Levels 5 and 6: vectorized loads, A's tile transposed, conflict-free shared
# reads, the next tile prefetched into registers.
# Five changes to level 4b:
# (1) Global memory is read 128 bits at a time: one `ld.global.v4.f32` fetches
#     four neighbouring floats of a row, a quarter of the load instructions.
#     Numba cannot express this by itself; `load_float4` (in _vector_load.py)
#     is a small intrinsic that can. B's tile and C are written 128 bits at a
#     time too (`store_float4`, in _vector_store.py).
# (2) A's tile is stored transposed in shared memory (k-major), so the TM
#     values a thread needs at one step of K are neighbours, like B's TN values:
#     both are read four at a time (`ld.shared.v4.f32`), 4 loads per 64 FMAs
#     instead of 16.
# (3) No bank conflicts on B. Shared memory has 32 banks of 4 bytes, and a
#     warp's 128-bit load takes its fewest passes (four: 512 bytes over 128
#     bytes a pass) only when each quarter of the warp touches 32 distinct
#     banks. If a thread owned TN = 8 neighbouring columns, neighbouring threads
#     would read 32 bytes apart: a quarter warp would span 256 bytes, two
#     threads per bank, twice the passes. So a thread owns TN/4 groups of 4
#     columns, BN/(TN/4) apart (columns g*GROUP_STRIDE + thread_col*4 + 0..3 of
#     group g): within a group, neighbouring threads read neighbouring 16-byte
#     vectors. Its outputs in C are the same columns, four contiguous floats
#     per group, stored as 128-bit writes.
# (4) Register prefetching. Each step first issues the global loads of the
#     NEXT tile into registers, then does the multiply-adds on the tile already
#     in shared memory, and only then writes the registers to shared memory.
#     The loads' latency (hundreds of cycles) hides behind arithmetic instead
#     of stalling the block at the barrier; the price is 4*(A_LOADS + B_LOADS)
#     more registers per thread.
# (5) The dot-product loop over the tile's BK columns is written out DOT_UNROLL
#     steps per pass (`multiply_step`, inlined), by default all of them.
#     Numba's compiler does not unroll a loop whose body holds 64 FMAs, and
#     each pass costs a counter, a compare, a branch and some address
#     arithmetic beside the FMAs. Nsight Compute on the 64 x 256 x 16 kernel at
#     4096^3, two steps per pass, counted 2.69 G warp instructions to cuBLAS's
#     2.43 G for the same product: 80% of ours FFMA, 88% of cuBLAS's
#     (benchmarks/NOTES.md). With all 16 steps written out, the SASS of the
#     loop over K has 1,145 instructions per tile of which 1,024 are FFMA
#     (89%), and the shared-memory addresses are constants added to one base
#     register. The price is registers: the compiler starts later steps'
#     shared loads early, into registers of their own (163 for this kernel,
#     where 128 let two blocks of 256 threads share an SM); see (7).
# (6) Double buffering (DOUBLE_BUFFER). With one copy of the tiles, each step
#     needs two barriers: one before the stores (nobody may overwrite the tile
#     others still read) and one after (nobody may read it half written). With
#     two copies, step s multiplies the tile in copy (s - 1) % 2 while it stores
#     the next into copy s % 2, and one barrier per step is enough: the copy a
#     step writes was last read in the step before, before that step's barrier.
#     The price is twice the shared memory. Each copy is named by a constant
#     in its own branch of the loop, so that the compiler folds the copy's
#     offset into the shared-memory addresses.
# (7) A register cap (`_register_cap`). Where a thread's accumulators and
#     fragments leave room in the registers of two blocks per SM (128 a thread
#     for 256 threads), the kernel is compiled with that cap (cuda.jit's
#     max_registers): the compiler then hoists fewer shared loads, and the SM
#     holds two blocks, 16 warps, to hide each other's latency. Measured on
#     the H100 at 4096^3, 64 x 256 x 16: all steps written out, uncapped (163
#     registers, one block per SM) 80.0% of cuBLAS; capped at 128 84.7%; two
#     steps per pass 79.3%. A tile of 16 x 8 outputs per thread (128
#     accumulators) has no such room: it runs one block of 8 warps per SM, as
#     cuBLAS's own kernel does (254 registers, 8 x 16 outputs per thread).
# (8) Products the tiles cover exactly (m, n and k multiples of bm, bn and bk,
#     rows aligned for 128-bit loads: 4096^3 in 128 x 256 x 16 tiles) get the
#     same kernel built without edge checks on the loads (`interior`): one
#     test per tile instead of one per load, and addresses that advance by a
#     constant. In the SASS of the 128 x 256 x 16 kernel the loop over K loses
#     1% of its instructions.
# Level 6 is this same kernel with the tile sizes `autotune` measured best on
# the GPU at hand.
#
# `vectorized=False` compiles the same kernel with scalar global loads and
# stores instead: matmul uses it when a row length is not a multiple of 4 or
# the data is not 16-byte aligned, where a 128-bit access would be illegal.


def _make_tile_loaders(bm: int, bn: int, bk: int, threads: int, vectorized: bool,
                       interior: bool = False):
    """The two halves of moving a bm x bk tile of A and a bk x bn tile of B into
    shared memory, shared by levels 5-7 (see (4) above): `fetch_tiles` reads
    them from global memory into registers, `store_tiles` later writes the
    registers to shared memory, A transposed (a_tile[kk * bm + r]), B as is
    (b_tile[kk * bn + col]). Each of the block's `threads` threads moves
    a_loads float4 of A and b_loads of B, rows `threads / (bk / 4)` and
    `threads / (bn / 4)` apart (the caller's check guarantees whole rows and
    equal shares). With `interior` (128-bit loads only), the caller promises
    that the blocks' tiles cover the matrices exactly (m, n and k multiples of
    bm, bn and bk: see (8) above): no load is checked against the edges, and
    only the step past the last tile, whose loads are all outside, is skipped,
    by one test for the whole tile. Returns (fetch_tiles, store_tiles,
    a_staged, b_staged): the device functions and the sizes of the register
    arrays they fill."""
    INTERIOR = bool(interior and vectorized)
    a_loads, b_loads = bm * bk // 4 // threads, bk * bn // 4 // threads
    BM, BN = _u(bm, bn)
    A_LOADS, B_LOADS = _u(a_loads, b_loads)
    A_VECTORS_PER_ROW, B_VECTORS_PER_ROW = _u(bk // 4, bn // 4)
    A_ROW_STRIDE, B_ROW_STRIDE = _u(threads // (bk // 4), threads // (bn // 4))
    TWO, THREE, FOUR = _u(2, 3, 4)

    @cuda.jit(device=True, **_INLINE)
    def fetch_tiles(a, b, a_next, b_next, tid, row0, col0, k_next, m, n, k):
        """Read the tiles starting at column k_next of A (rows row0...) and row
        k_next of B (columns col0...) into the registers a_next and b_next;
        zeros past the edges of the matrices, K ending at k (the whole of K,
        or a split-K slice's end). With `vectorized`, each four neighbours of
        a row come in one 128-bit load (the caller promises rows a multiple of
        4 long and slices starting on a multiple of 4, so the four are all
        inside or all outside)."""
        a_row, a_col = tid // A_VECTORS_PER_ROW, (tid % A_VECTORS_PER_ROW) * FOUR
        b_row, b_col = tid // B_VECTORS_PER_ROW, (tid % B_VECTORS_PER_ROW) * FOUR
        for s in range(A_LOADS):
            row, kk = row0 + a_row + s * A_ROW_STRIDE, k_next + a_col
            x0 = x1 = x2 = x3 = float32(0.0)
            if INTERIOR:
                if k_next < k:
                    x0, x1, x2, x3 = load_float4(a, row, kk)
            elif vectorized:
                if row < m and kk < k:  # k % 4 == 0: the four are all in or all out
                    x0, x1, x2, x3 = load_float4(a, row, kk)
            elif row < m:
                x0 = a[row, kk] if kk < k else float32(0.0)
                x1 = a[row, kk + ONE] if kk + ONE < k else float32(0.0)
                x2 = a[row, kk + TWO] if kk + TWO < k else float32(0.0)
                x3 = a[row, kk + THREE] if kk + THREE < k else float32(0.0)
            a_next[s * FOUR] = x0
            a_next[s * FOUR + ONE] = x1
            a_next[s * FOUR + TWO] = x2
            a_next[s * FOUR + THREE] = x3
        for s in range(B_LOADS):
            kk, col = k_next + b_row + s * B_ROW_STRIDE, col0 + b_col
            x0 = x1 = x2 = x3 = float32(0.0)
            if INTERIOR:
                if k_next < k:
                    x0, x1, x2, x3 = load_float4(b, kk, col)
            elif vectorized:
                if kk < k and col < n:  # n % 4 == 0
                    x0, x1, x2, x3 = load_float4(b, kk, col)
            elif kk < k:
                x0 = b[kk, col] if col < n else float32(0.0)
                x1 = b[kk, col + ONE] if col + ONE < n else float32(0.0)
                x2 = b[kk, col + TWO] if col + TWO < n else float32(0.0)
                x3 = b[kk, col + THREE] if col + THREE < n else float32(0.0)
            b_next[s * FOUR] = x0
            b_next[s * FOUR + ONE] = x1
            b_next[s * FOUR + TWO] = x2
            b_next[s * FOUR + THREE] = x3

    @cuda.jit(device=True, **_INLINE)
    def store_tiles(a_tile, b_tile, a_next, b_next, tid, a_base, b_base):
        """Write the fetched tile from registers to shared memory, into the copy
        that starts at a_base and b_base: A transposed, B as is, four floats in
        one 128-bit store."""
        a_row, a_col = tid // A_VECTORS_PER_ROW, (tid % A_VECTORS_PER_ROW) * FOUR
        b_row, b_col = tid // B_VECTORS_PER_ROW, (tid % B_VECTORS_PER_ROW) * FOUR
        for s in range(A_LOADS):
            r = a_base + a_row + s * A_ROW_STRIDE
            a_tile[a_col * BM + r] = a_next[s * FOUR]
            a_tile[(a_col + ONE) * BM + r] = a_next[s * FOUR + ONE]
            a_tile[(a_col + TWO) * BM + r] = a_next[s * FOUR + TWO]
            a_tile[(a_col + THREE) * BM + r] = a_next[s * FOUR + THREE]
        for s in range(B_LOADS):
            r = b_row + s * B_ROW_STRIDE
            store_float4_flat(b_tile, b_base + r * BN + b_col, b_next[s * FOUR],
                              b_next[s * FOUR + ONE], b_next[s * FOUR + TWO],
                              b_next[s * FOUR + THREE])

    return fetch_tiles, store_tiles, 4 * a_loads, 4 * b_loads


def _make_unrolled_steps(multiply_step, count: int):
    """A device function doing `count` consecutive steps of the dot product
    (dot, dot + 1, ...; `count` in UNROLLS), written out: each doubling calls
    the one before twice, inlined, down to one step. (Each has its own name
    for its offset: the course's source checks want one value per name.)"""
    TWO, FOUR, EIGHT, SIXTEEN = _u(2, 4, 8, 16)

    @cuda.jit(device=True, **_INLINE)
    def steps2(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot + ONE, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps4(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps2(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps2(a_tile, b_tile, acc, a_frag, b_frag, dot + TWO, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps8(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps4(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps4(a_tile, b_tile, acc, a_frag, b_frag, dot + FOUR, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps16(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps8(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps8(a_tile, b_tile, acc, a_frag, b_frag, dot + EIGHT, p, q, a_base, b_base)

    @cuda.jit(device=True, **_INLINE)
    def steps32(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base):
        steps16(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
        steps16(a_tile, b_tile, acc, a_frag, b_frag, dot + SIXTEEN, p, q, a_base, b_base)

    return {1: multiply_step, 2: steps2, 4: steps4, 8: steps8, 16: steps16,
            32: steps32}[count]


def _make_multiply_tile(multiply_step, bk: int, unroll: int):
    """A device function doing all bk steps of a tile's dot product, one
    `multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)`
    per step, written out `unroll` steps per pass (see (5) above; unroll == bk
    writes the whole tile out, with no loop left); p and q say where the
    calling thread works (each level has its own meaning for them)."""
    BK, STEP = _u(bk, unroll)
    WHOLE = unroll == bk
    steps = _make_unrolled_steps(multiply_step, unroll)

    @cuda.jit(device=True, **_INLINE)
    def multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, a_base, b_base):
        """All BK steps of the dot product on the copy of the tiles at a_base, b_base."""
        if WHOLE:
            steps(a_tile, b_tile, acc, a_frag, b_frag, ZERO, p, q, a_base, b_base)
        else:
            dot = ZERO
            while dot < BK:
                steps(a_tile, b_tile, acc, a_frag, b_frag, dot, p, q, a_base, b_base)
                dot += STEP

    return multiply_tile


def _check_unroll(unroll, bk: int) -> None:
    if unroll not in UNROLLS or bk % unroll:
        raise ValueError(f"unroll must be one of {', '.join(map(str, UNROLLS))} and divide bk "
                         f"({bk}), got {unroll!r}")


def _steps_per_pass(unroll, bk: int) -> int:
    """Steps of the dot loop a kernel writes out per pass: `unroll` (None: the
    module's DOT_UNROLL; "tile": all bk of them), checked."""
    unroll = DOT_UNROLL if unroll is None else unroll
    if unroll == "tile":
        unroll = bk
    elif unroll == DOT_UNROLL and isinstance(unroll, int) and bk % unroll:
        unroll = 1  # the module's choice, where it does not divide the tile's depth
    _check_unroll(unroll, bk)
    return unroll


def _register_cap(max_registers, threads: int, outputs: int, fragments: int) -> dict:
    """cuda.jit's keyword capping registers per thread: `max_registers` if it is
    a number, none if None, and with "auto" (see (7) above) the registers that
    let two blocks of `threads` share an SM (65,536 of them), where a thread's
    `outputs` accumulators and `fragments` values of A and B leave room in
    that budget; otherwise none. The simulator has no registers to cap."""
    if max_registers == "auto":
        two_blocks = min(255, REGISTERS_PER_SM // (2 * threads)) // 8 * 8
        max_registers = two_blocks if outputs + fragments + REGISTER_ROOM <= two_blocks else None
    elif max_registers is not None and (isinstance(max_registers, bool) or
                                        not isinstance(max_registers, int) or
                                        not 32 <= max_registers <= 255):
        raise ValueError(f"max_registers must be None, 'auto' or a whole number from 32 to 255, "
                         f"got {max_registers!r}")
    return {"max_registers": max_registers} if max_registers and on_gpu() else {}


def _make_k_loop(fetch_tiles, store_tiles, multiply_tile, bk: int, a_elements: int,
                 b_elements: int, double: bool):
    """The walk along K shared by levels 5-7: a device function that fetches each
    tile into registers, multiplies the one fetched a step earlier, and stores
    the new one to shared memory; with `double`, into two copies of the tiles
    (A's copies a_elements apart, B's b_elements), one barrier per step (see
    (4) and (6) above). It walks columns k_start <= kk < k_end of A (rows of
    B): the whole of K (0 to k), or one slice of it for split-K."""
    BK, A_ELEMENTS, B_ELEMENTS = _u(bk, a_elements, b_elements)
    DOUBLE = double

    @cuda.jit(device=True, **_INLINE)
    def walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, p, q):
        write = ZERO  # which copy of the tiles this step stores into (always 0 without DOUBLE)
        # One step more than there are tiles: step s fetches tile s (zeros past
        # k_end) and multiplies tile s - 1, already in shared memory.
        for k_next in range(k_start, k_end + BK, BK):
            fetch_tiles(a, b, a_next, b_next, tid, row0, col0, k_next, m, n, k_end)
            # Multiply the tile fetched one step earlier (in the copy the last
            # step stored), then store this one. With two copies each branch
            # names its copy by a constant, which the compiler folds into the
            # shared-memory addresses.
            if k_next > k_start:
                if DOUBLE and write == ZERO:
                    multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, A_ELEMENTS,
                                  B_ELEMENTS)
                else:
                    multiply_tile(a_tile, b_tile, acc, a_frag, b_frag, p, q, ZERO, ZERO)
            if not DOUBLE:
                cuda.syncthreads()  # nobody overwrites a tile while others still read it
            if DOUBLE and write == ONE:
                store_tiles(a_tile, b_tile, a_next, b_next, tid, A_ELEMENTS, B_ELEMENTS)
            else:
                store_tiles(a_tile, b_tile, a_next, b_next, tid, ZERO, ZERO)
            cuda.syncthreads()
            if DOUBLE:
                write = ONE - write

    return walk_k


def _make_vectorized_kernel(config: TileConfig, vectorized: bool, unroll: int = None,
                            double_buffer: bool = None, split: bool = False,
                            max_registers="auto", interior: bool = False):
    """Level 5 and 6's kernel for `config`: kernel(a, b, c) stores C = A @ B; with
    `split`, kernel(a, b, c, chunk) for single-launch split-K instead (see
    "Split-K" below): block z of the grid multiplies columns z*chunk ...
    (z+1)*chunk of A by those rows of B and adds its outputs into C."""
    unroll = _steps_per_pass(unroll, config.bk)
    cap = _register_cap(max_registers, config.threads, config.tm * config.tn,
                        config.tm + config.tn)
    threads = config.threads
    a_elements, b_elements = config.bm * config.bk, config.bk * config.bn
    double_buffer = DOUBLE_BUFFER if double_buffer is None else bool(double_buffer)
    double = double_buffer and 2 * config.shared_bytes <= STATIC_SHARED_LIMIT_BYTES
    a_shared, b_shared = (2 if double else 1) * a_elements, (2 if double else 1) * b_elements
    tm, tn, patch = config.tm, config.tn, config.tm * config.tn
    BM, BN, TM, TN = _u(config.bm, config.bn, config.tm, config.tn)
    THREADS_PER_ROW = _u(config.bn // config.tn)
    GROUPS, GROUP_STRIDE = _u(config.tn // 4, 4 * (config.bn // config.tn))
    TWO, THREE, FOUR = _u(2, 3, 4)
    ATOMIC = bool(split)
    shared_alignment = SHARED_ALIGNMENT
    fetch_tiles, store_tiles, a_staged, b_staged = _make_tile_loaders(
        config.bm, config.bn, config.bk, threads, vectorized, interior)

    @cuda.jit(device=True, **_INLINE)
    def multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, thread_row, thread_col,
                      a_base, b_base):
        # The TM values of A and the TN values of B (TN/4 groups of four) this
        # thread needs at step `dot`, from the copy of the tiles at a_base and
        # b_base: four at a time; then the TM x TN FMAs.
        for i in range(ZERO, TM, FOUR):
            x0, x1, x2, x3 = load_float4_flat(a_tile, a_base + dot * BM + thread_row * TM + i)
            a_frag[i] = x0
            a_frag[i + ONE] = x1
            a_frag[i + TWO] = x2
            a_frag[i + THREE] = x3
        for g in range(GROUPS):
            x0, x1, x2, x3 = load_float4_flat(b_tile, b_base + dot * BN + g * GROUP_STRIDE
                                              + thread_col * FOUR)
            b_frag[g * FOUR] = x0
            b_frag[g * FOUR + ONE] = x1
            b_frag[g * FOUR + TWO] = x2
            b_frag[g * FOUR + THREE] = x3
        for i in range(TM):
            for j in range(TN):
                acc[i * TN + j] += a_frag[i] * b_frag[j]

    walk_k = _make_k_loop(fetch_tiles, store_tiles,
                          _make_multiply_tile(multiply_step, config.bk, unroll),
                          config.bk, a_elements, b_elements, double)

    @cuda.jit(device=True, **_INLINE)
    def write_patch(c, acc, row0, col0, thread_row, thread_col, m, n):
        # The thread's TM x TN outputs into C, the parts inside it: stored
        # (four floats per 128-bit store where rows allow), or, for split-K
        # (ATOMIC), added with float32 atomic adds into a C zeroed before the
        # launch, since every slice's block adds to the same outputs.
        for i in range(TM):
            row = row0 + thread_row * TM + i
            if row < m:
                for g in range(GROUPS):
                    col = col0 + g * GROUP_STRIDE + thread_col * FOUR
                    base = i * TN + g * FOUR
                    if ATOMIC:
                        for q in range(FOUR):
                            if col + q < n:
                                cuda.atomic.add(c, (row, col + q), acc[base + q])
                    elif vectorized:
                        if col < n:  # n % 4 == 0: the four are all in or all out
                            store_float4(c, row, col, acc[base], acc[base + ONE],
                                         acc[base + TWO], acc[base + THREE])
                    else:
                        for q in range(FOUR):
                            if col + q < n:
                                c[row, col + q] = acc[base + q]

    @cuda.jit(**cap)
    def sgemm_vectorized(a, b, c):
        # A's tile transposed (a_tile[kk * BM + r]), B's as is (b_tile[kk * BN + col]);
        # 16-byte aligned so that four neighbours can be read in one 128-bit load.
        # With double buffering, two copies of each, one after the other.
        a_tile = cuda.shared.array(a_shared, float32, alignment=shared_alignment)
        b_tile = cuda.shared.array(b_shared, float32, alignment=shared_alignment)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        thread_row = tid // THREADS_PER_ROW  # rows thread_row*TM + 0..TM-1 of the tile
        thread_col = tid % THREADS_PER_ROW  # columns g*GROUP_STRIDE + thread_col*4 + 0..3
        acc = cuda.local.array(patch, float32)
        a_frag = cuda.local.array(tm, float32)
        b_frag = cuda.local.array(tn, float32)
        a_next = cuda.local.array(a_staged, float32)
        b_next = cuda.local.array(b_staged, float32)
        for i in range(patch):
            acc[i] = 0.0
        walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, ZERO, k, thread_row, thread_col)
        write_patch(c, acc, row0, col0, thread_row, thread_col, m, n)

    @cuda.jit(**cap)
    def sgemm_vectorized_split(a, b, c, chunk):
        # The same block, over one slice of K: columns z*chunk ... of A for
        # blockIdx.z = z (chunk a multiple of 16, the last slice ragged); its
        # outputs are added into C (zeroed first) with atomic adds.
        a_tile = cuda.shared.array(a_shared, float32, alignment=shared_alignment)
        b_tile = cuda.shared.array(b_shared, float32, alignment=shared_alignment)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        k_start = uint64(cuda.blockIdx.z) * uint64(chunk)
        k_end = min(k, k_start + uint64(chunk))
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        thread_row = tid // THREADS_PER_ROW
        thread_col = tid % THREADS_PER_ROW
        acc = cuda.local.array(patch, float32)
        a_frag = cuda.local.array(tm, float32)
        b_frag = cuda.local.array(tn, float32)
        a_next = cuda.local.array(a_staged, float32)
        b_next = cuda.local.array(b_staged, float32)
        for i in range(patch):
            acc[i] = 0.0
        walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, thread_row, thread_col)
        write_patch(c, acc, row0, col0, thread_row, thread_col, m, n)

    if split:
        return sgemm_vectorized_split
    return sgemm_vectorized


# -----------------------------------------------------------------------------
# Level 7: warp tiling.
# At level 6 a block's threads are laid out over its tile of C without regard
# to warps. Level 7 adds a level to the hierarchy, as the worklog's kernel 10
# does: the block's bm x bn tile is cut into one wm x wn tile per warp, and the
# warp's 32 threads cover a (wm / wm_iter) x (wn / wn_iter) piece of it with
# one tm x tn patch each, then repeat that wm_iter times down and wn_iter
# times across. So a thread computes wm_iter x wn_iter small patches, spread
# over its warp's tile:
#
#     rows    warp_row*WM + wm*WSUB_M + thread_row*TM + 0..TM-1   (wm < WM_ITER)
#     columns warp_col*WN + wn*WSUB_N + thread_col*TN + 0..TN-1   (wn < WN_ITER)
#
# Three things follow. (1) At each step of K a thread loads WM_ITER*TM values
# of A and WN_ITER*TN of B from shared memory and does WM_ITER*WN_ITER*TM*TN
# FMAs with them: each value serves all the patches of its row (or column) of
# patches. (2) A warp's reads of shared memory stay inside its own wm x wn
# tile: at one step its 32 lanes read a few neighbouring 16-byte vectors of
# A's row and of B's row, many lanes the same one (a broadcast), so a warp's
# 128-bit load takes one pass of shared memory, or two where the vectors
# span more than 128 bytes (A with tm = 8: eight lanes' rows, 32 bytes apart).
# (3) The layout, not the hardware's thread order, decides which outputs
# share loads, so tile sizes can be tuned for the warp (the unit that
# actually executes) and for the block separately.
#
# Everything else is level 5's: 128-bit global loads of the next tile into
# registers while the current one is multiplied (`_make_tile_loaders`, with
# the same contract on aligned rows and the same scalar fallback), A's tile
# stored transposed, two copies of the tiles and one barrier per step of K
# (`_make_k_loop`, always double-buffered here), the dot loop written out
# DOT_UNROLL steps per pass (`_make_multiply_tile`) and 128-bit stores of C.


def _make_warp_tiled_kernel(config: WarpTileConfig, vectorized: bool, unroll: int = None,
                            split: bool = False, max_registers="auto",
                            interior: bool = False):
    """Level 7's kernel for `config`: kernel(a, b, c), or with `split`,
    kernel(a, b, c, chunk) for single-launch split-K (as level 6's)."""
    unroll = _steps_per_pass(unroll, config.bk)
    bm, bn, bk, threads = config.bm, config.bn, config.bk, config.threads
    wm_iter, wn_iter, tm, tn = config.wm_iter, config.wn_iter, config.tm, config.tn
    cap = _register_cap(max_registers, threads, wm_iter * wn_iter * tm * tn,
                        wm_iter * tm + wn_iter * tn)
    a_elements, b_elements = bm * bk, bk * bn
    a_shared, b_shared = 2 * a_elements, 2 * b_elements  # two copies (double buffering)
    accumulators = wm_iter * wn_iter * tm * tn
    a_fragment, b_fragment = wm_iter * tm, wn_iter * tn
    BM, BN, WM, WN, TM, TN = _u(bm, bn, config.wm, config.wn, tm, tn)
    WM_ITER, WN_ITER = _u(wm_iter, wn_iter)
    WSUB_M, WSUB_N = _u(config.wm // wm_iter, config.wn // wn_iter)  # one pass of the warp
    THREADS_ACROSS = _u(config.wn // wn_iter // tn)  # lanes across one pass
    WARPS_ACROSS = _u(bn // config.wn)
    ROW_OUTPUTS = _u(wn_iter * tn)  # a thread's accumulators per row of its outputs
    LANES = _u(WARP_SIZE)
    TWO, THREE, FOUR = _u(2, 3, 4)
    ATOMIC = bool(split)
    shared_alignment = SHARED_ALIGNMENT
    fetch_tiles, store_tiles, a_staged, b_staged = _make_tile_loaders(bm, bn, bk, threads,
                                                                      vectorized, interior)

    @cuda.jit(device=True, **_INLINE)
    def multiply_step(a_tile, b_tile, acc, a_frag, b_frag, dot, a_offset, b_offset, a_base,
                      b_base):
        # The thread's WM_ITER*TM values of A (TM at a time, one run per pass
        # down) and WN_ITER*TN values of B at step `dot`, four per 128-bit load,
        # from the copy of the tiles at a_base and b_base; a_offset and b_offset
        # are where its first patch starts in the block's tile. Then every patch.
        for wm in range(WM_ITER):
            for i in range(ZERO, TM, FOUR):
                x0, x1, x2, x3 = load_float4_flat(
                    a_tile, a_base + dot * BM + a_offset + wm * WSUB_M + i)
                a_frag[wm * TM + i] = x0
                a_frag[wm * TM + i + ONE] = x1
                a_frag[wm * TM + i + TWO] = x2
                a_frag[wm * TM + i + THREE] = x3
        for wn in range(WN_ITER):
            for j in range(ZERO, TN, FOUR):
                x0, x1, x2, x3 = load_float4_flat(
                    b_tile, b_base + dot * BN + b_offset + wn * WSUB_N + j)
                b_frag[wn * TN + j] = x0
                b_frag[wn * TN + j + ONE] = x1
                b_frag[wn * TN + j + TWO] = x2
                b_frag[wn * TN + j + THREE] = x3
        # acc holds the thread's outputs row by row: output row wm*TM + i,
        # column wn*TN + j (in the thread's own numbering) at index
        # (wm*TM + i) * ROW_OUTPUTS + wn*TN + j.
        for r in range(WM_ITER * TM):
            for s in range(WN_ITER * TN):
                acc[r * ROW_OUTPUTS + s] += a_frag[r] * b_frag[s]

    walk_k = _make_k_loop(fetch_tiles, store_tiles, _make_multiply_tile(multiply_step, bk, unroll),
                          bk, a_elements, b_elements, True)

    @cuda.jit(device=True, **_INLINE)
    def write_patches(c, acc, row0, col0, a_offset, b_offset, m, n):
        # Each patch's rows of C, four columns per 128-bit store; a patch that
        # hangs over the edge writes only what is inside. For split-K
        # (ATOMIC), added into C (zeroed before the launch) with atomic adds.
        for wm in range(WM_ITER):
            for i in range(TM):
                row = row0 + a_offset + wm * WSUB_M + i
                if row < m:
                    for wn in range(WN_ITER):
                        for j in range(ZERO, TN, FOUR):
                            col = col0 + b_offset + wn * WSUB_N + j
                            base = (wm * TM + i) * ROW_OUTPUTS + wn * TN + j
                            if ATOMIC:
                                for q in range(FOUR):
                                    if col + q < n:
                                        cuda.atomic.add(c, (row, col + q), acc[base + q])
                            elif vectorized:
                                if col < n:  # n % 4 == 0: the four are all in or all out
                                    store_float4(c, row, col, acc[base], acc[base + ONE],
                                                 acc[base + TWO], acc[base + THREE])
                            else:
                                for q in range(FOUR):
                                    if col + q < n:
                                        c[row, col + q] = acc[base + q]

    @cuda.jit(**cap)
    def sgemm_warp_tiled(a, b, c):
        # Level 5's tiles: A's transposed (a_tile[kk * BM + r]), B's as is
        # (b_tile[kk * BN + col]), 16-byte aligned, two copies of each.
        a_tile = cuda.shared.array(a_shared, float32, alignment=shared_alignment)
        b_tile = cuda.shared.array(b_shared, float32, alignment=shared_alignment)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        # Which warp tile, and where in one pass of it this lane's patch lies.
        warp, lane = tid // LANES, tid % LANES
        warp_row, warp_col = warp // WARPS_ACROSS, warp % WARPS_ACROSS
        thread_row, thread_col = lane // THREADS_ACROSS, lane % THREADS_ACROSS
        a_offset = warp_row * WM + thread_row * TM  # the first patch's rows in the block tile
        b_offset = warp_col * WN + thread_col * TN  # ... and its columns
        acc = cuda.local.array(accumulators, float32)
        a_frag = cuda.local.array(a_fragment, float32)
        b_frag = cuda.local.array(b_fragment, float32)
        a_next = cuda.local.array(a_staged, float32)
        b_next = cuda.local.array(b_staged, float32)
        for i in range(accumulators):
            acc[i] = 0.0
        walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, ZERO, k, a_offset, b_offset)
        write_patches(c, acc, row0, col0, a_offset, b_offset, m, n)

    @cuda.jit(**cap)
    def sgemm_warp_tiled_split(a, b, c, chunk):
        # The same block over one slice of K, columns z*chunk ... of A for
        # blockIdx.z = z, its outputs added into C (zeroed first).
        a_tile = cuda.shared.array(a_shared, float32, alignment=shared_alignment)
        b_tile = cuda.shared.array(b_shared, float32, alignment=shared_alignment)
        m, k, n = uint64(a.shape[0]), uint64(a.shape[1]), uint64(b.shape[1])
        k_start = uint64(cuda.blockIdx.z) * uint64(chunk)
        k_end = min(k, k_start + uint64(chunk))
        tid = uint64(cuda.threadIdx.x)
        row0 = uint64(cuda.blockIdx.y) * BM
        col0 = uint64(cuda.blockIdx.x) * BN
        warp, lane = tid // LANES, tid % LANES
        warp_row, warp_col = warp // WARPS_ACROSS, warp % WARPS_ACROSS
        thread_row, thread_col = lane // THREADS_ACROSS, lane % THREADS_ACROSS
        a_offset = warp_row * WM + thread_row * TM
        b_offset = warp_col * WN + thread_col * TN
        acc = cuda.local.array(accumulators, float32)
        a_frag = cuda.local.array(a_fragment, float32)
        b_frag = cuda.local.array(b_fragment, float32)
        a_next = cuda.local.array(a_staged, float32)
        b_next = cuda.local.array(b_staged, float32)
        for i in range(accumulators):
            acc[i] = 0.0
        walk_k(a, b, a_tile, b_tile, acc, a_frag, b_frag, a_next, b_next, tid, row0, col0,
               m, n, k_start, k_end, a_offset, b_offset)
        write_patches(c, acc, row0, col0, a_offset, b_offset, m, n)

    if split:
        return sgemm_warp_tiled_split
    return sgemm_warp_tiled


# -----------------------------------------------------------------------------
# Choosing and launching a kernel


@lru_cache(maxsize=None)
def _compiled(kind: str, config: TileConfig | WarpTileConfig | None = None,
              vectorized: bool = False, split: bool = False, interior: bool = False):
    """One kernel object per (kind, config): Numba caches its compiled code on it.
    `split`: the single-launch split-K variant of levels 5-7."""
    if kind == "shared":
        return _make_shared_kernel(SHARED_TILE)
    if kind == "1d":
        return _make_1d_kernel(config)
    if kind == "2d":
        return _make_2d_kernel(config)
    if kind == "warp":
        return _make_warp_tiled_kernel(config, vectorized, split=split, interior=interior)
    return _make_vectorized_kernel(config, vectorized, split=split, interior=interior)


def tuned_config(gpu_name: str | None = None, path: str | os.PathLike | None = None) -> TileConfig:
    """The tile configuration level 6 uses on `gpu_name` (default: this GPU).

    Read from the JSON file `path` (default sgemm_tuned.json beside this module),
    which `autotune` writes; DEFAULT_TUNED when the file has no entry for it.
    """
    if gpu_name is None:
        gpu_name = gpu_model()
    if not isinstance(gpu_name, str):
        raise ValueError(f"gpu_name must be a string such as 'NVIDIA H100 80GB HBM3', got {gpu_name!r}")
    entry = _read_tuned(path).get(gpu_name)
    if entry is None:
        return DEFAULT_TUNED
    return check_config(TileConfig(**{f: entry[f] for f in ("bm", "bn", "bk", "tm", "tn")}))


def gpu_model() -> str:
    """The GPU's name as the driver gives it, or "simulator" under Numba's simulator."""
    if not on_gpu():
        return "simulator"
    return _gpu_name(_current_gpu())


def _read_tuned(path=None) -> dict:
    """The tuned table at `path`, read again only when the file changes (matmul asks
    for it on every call, and a file read would cost more than the launch)."""
    path = Path(TUNED_PATH if path is None else path)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        return {}
    return _read_tuned_file(str(path), stamp)


@lru_cache(maxsize=8)
def _read_tuned_file(path: str, stamp: int) -> dict:
    with open(path) as f:
        return json.load(f)


def kernel_for(level, shape, vectorized=True,
               config: TileConfig | WarpTileConfig | None = None):
    """The kernel, grid and block matmul launches for `level` at shape (m, n, k).

    Level "auto" is level 6's kernel with the tile configuration `auto_config`
    picks for the shape.

    `config` overrides the tile sizes of levels 4a-6 (a TileConfig that passes
    check_config) or of level 7 (a WarpTileConfig that passes check_warp_config,
    default WARP_TILE_DEFAULT). Returns (kernel, grid, block). For split-K in
    one launch, see split_kernel_for.
    """
    key = _level(level, auto_ok=True)
    m, n, k = shape
    if key == "auto":
        key, config = "6", config or auto_config((m, n, k))
    return _kernel_for(key, m, n, vectorized, config, k=k)


def _kernel_for(key: str, m: int, n: int, vectorized, config, split: bool = False,
                k: int | None = None):
    """kernel_for on a level's key other than auto (with `split`, levels 5-7's
    split-K kernel, whose grid kernel_split_for adds slices to). Given k, a
    product whose tiles cover it exactly gets the kernel without edge checks
    (levels 5-7, 128-bit loads; see (8) above)."""
    if key in ("1", "2"):
        block = (NAIVE_BLOCK, NAIVE_BLOCK)
        if key == "1":  # x walks rows of C
            return sgemm_naive, (_blocks(m, NAIVE_BLOCK), _blocks(n, NAIVE_BLOCK)), block
        return sgemm_coalesced, (_blocks(n, NAIVE_BLOCK), _blocks(m, NAIVE_BLOCK)), block
    if key == "3":
        return (_compiled("shared"), (_blocks(n, SHARED_TILE), _blocks(m, SHARED_TILE)),
                (SHARED_TILE, SHARED_TILE))
    if config is None:
        config = {"4a": CONFIG_4A, "4b": CONFIG_4B, "5": CONFIG_5, "7": WARP_TILE_DEFAULT}.get(key) \
            or _tuned_here(gpu_model())
    interior = bool(vectorized and not split and k and key in ("5", "6", "7") and
                    not (m % config.bm or n % config.bn or k % config.bk))
    return _tiled_kernel(key, config, bool(vectorized), split, interior), \
        (_blocks(n, config.bn), _blocks(m, config.bm)), (config.threads,)


@lru_cache(maxsize=None)
def _tiled_kernel(key: str, config: TileConfig | WarpTileConfig, vectorized: bool,
                  split: bool = False, interior: bool = False):
    """The kernel of level 4a, 4b, 5, 6 or 7 for `config`, checked once (matmul asks on
    every call; a configuration that breaks a constraint raises every time).
    `split`: levels 5-7's single-launch split-K kernel, kernel(a, b, c, chunk);
    `interior`: levels 5-7 without edge checks, for tiles that cover C exactly."""
    if split and key not in ("5", "6", "7"):
        raise ValueError(f"split-K applies to levels 5, 6, 7 and auto only, got level {key!r}")
    if key == "7":
        check_warp_config(config)
        return _compiled("warp", config, vectorized, split, interior)
    if key == "4a":
        if config.tn != 1:
            raise ValueError(f"config for level 4a must have tn=1 (a column per thread), got {config}")
        check_config(config, vectorized=False)
        return _compiled("1d", config)
    if key == "4b":
        check_config(config, vectorized=False)
        return _compiled("2d", config)
    check_config(config, vectorized=True)
    return _compiled("vectorized", config, vectorized, split, interior)


def auto_config(shape, gpu_name: str | None = None, path=None) -> TileConfig:
    """The tile configuration level "auto" uses for an (m, n, k) product on `gpu_name`.

    A product too small for level 6's large tiles leaves most of the GPU idle
    (1024^3 in 128 x 256 tiles is 32 blocks for 132 SMs), so the tuned table
    keeps, per GPU, the configuration measured fastest at several shapes
    ("by_shape", written by benchmarks/sgemm_shapes.py). "auto" takes the one
    measured at the nearest shape, nearness counted in factors of two along
    m, n and k; with no such entry it is level 6's tuned configuration.
    """
    return auto_plan(shape, gpu_name, path)[0]


def auto_plan(shape, gpu_name: str | None = None, path=None) -> tuple:
    """(TileConfig, splits of K) that level "auto" uses for an (m, n, k) product:
    those measured at the nearest shape (see `auto_config`)."""
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    m, n, k = (max(1, _whole_or_zero(name, v)) for name, v in zip("mnk", shape))
    if gpu_name is None:
        gpu_name = gpu_model()
    if path is None:  # the package's own table: the answer is kept per shape
        return _plan_here(gpu_name, m, n, k)
    return _nearest_plan(_by_shape(_read_tuned(path).get(gpu_name, {})),
                         lambda: tuned_config(gpu_name, path), m, n, k)


def _nearest_plan(measured, fallback, m: int, n: int, k: int) -> tuple:
    if not measured:
        return fallback(), 1

    def distance(entry):
        em, en, ek = entry[0]
        return abs(math.log2(m / em)) + abs(math.log2(n / en)) + abs(math.log2(k / ek))

    _, config, splits = min(measured, key=distance)
    return config, splits


@lru_cache(maxsize=4096)
def _plan_here(gpu_name: str, m: int, n: int, k: int) -> tuple:
    """auto_plan from the package's table, found once per shape: a loop calling
    matmul on one shape pays for the search only once."""
    return _nearest_plan(_by_shape_here(gpu_name), lambda: _tuned_here(gpu_name), m, n, k)


def _whole_or_zero(name, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < 0:
        raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    return int(value)


def _by_shape(entry: dict) -> list:
    """[((m, n, k), TileConfig, splits)] of a GPU's entry in the tuned table, each
    checked: the by-shape measurements, and level 6's own configuration at the
    shape autotune measured it."""
    found = []
    for row in entry.get("by_shape", []) + ([entry] if "m" in entry else []):
        config = check_config(TileConfig(**{f: row[f] for f in ("bm", "bn", "bk", "tm", "tn")}))
        found.append(((row["m"], row["n"], row["k"]), config, _whole("splits", row.get("splits", 1))))
    return found


@lru_cache(maxsize=None)
def _by_shape_here(gpu_name: str) -> tuple:
    return tuple(_by_shape(_read_tuned().get(gpu_name, {})))


@lru_cache(maxsize=None)
def _tuned_here(gpu_name: str) -> TileConfig:
    """tuned_config(gpu_name) from the default table, read once per process
    (autotune, which rewrites the table, forgets it)."""
    return tuned_config(gpu_name)


def _device_array_or_none(x):
    """x as a Numba device array if it is one or has __cuda_array_interface__, else None."""
    if not on_gpu():
        # The simulator's device arrays (FakeCUDAArray) have no __cuda_array_interface__.
        return x if type(x).__name__ == "FakeCUDAArray" else None
    if not hasattr(x, "__cuda_array_interface__"):
        return None
    try:
        return cuda.as_cuda_array(x)
    except Exception as error:  # e.g. a torch tensor that requires grad
        raise ValueError(f"a CUDA array could not be read through __cuda_array_interface__: "
                         f"{error}") from None


def _device_view(name, x):
    """A Numba device array viewing x (numpy arrays are copied to the device)."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise ValueError(f"{name} must have dtype float32, got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{name} must be a 2D matrix, got {x.ndim} dimensions (shape {x.shape})")
        return cuda.to_device(np.ascontiguousarray(x))
    view = _device_array_or_none(x)
    if view is not None:
        if view.dtype != np.float32:
            raise ValueError(f"{name} must have dtype float32, got {view.dtype}")
        if view.ndim != 2:
            raise ValueError(f"{name} must be a 2D matrix, got {view.ndim} dimensions (shape {view.shape})")
        return view
    raise ValueError(f"{name} must be a numpy array, a Numba device array or a CUDA torch tensor "
                     f"(anything with __cuda_array_interface__), got {type(x).__name__}"
                     + (" on the CPU: use .numpy() or .cuda()" if _is_torch_tensor(x) else ""))


def _aligned_rows(x) -> bool:
    """True if 128-bit loads along x's rows are legal: C-contiguous, 16-byte aligned
    data and rows a multiple of 4 floats long."""
    if x.shape[1] % 4 or not x.is_c_contiguous():
        return False
    if not on_gpu():
        return True  # the simulator's fallback loads have no alignment to respect
    try:
        pointer = x.__cuda_array_interface__["data"][0]
    except (AttributeError, KeyError, TypeError):
        return False
    return pointer is not None and pointer % 16 == 0


# -----------------------------------------------------------------------------
# Launching on a GPU at the cost of a launch.
# `kernel[grid, block](a, b, c)` costs 30-45 us of Python on the H100, and
# wrapping each torch tensor in a Numba device array (`cuda.as_cuda_array`)
# another 18 us each; with a fresh output array a call of level 5 on a 1 x 1 x 1
# product took 270 us, where cuBLAS takes 21 (benchmarks/results). A matrix
# argument of a compiled kernel is nine numbers (meminfo, parent, element count,
# item size, data pointer, two extents, two strides in bytes), which is what
# Numba's own launch hands to `cuda.core.launch` at the end. For C-contiguous
# float32 matrices already on the GPU, matmul builds those numbers itself from
# the data pointers and launches directly; anything else takes Numba's path.

C_MATRIX = types.Array(float32, 2, "C")


@lru_cache(maxsize=None)
def _launchable(kernel, device_id: int, signature=None):
    """The kernel compiled for `signature` (default: three C-contiguous float32
    matrices) on one GPU, and the default stream, in the forms
    `cuda.core.launch` takes."""
    return launchable(kernel, signature or (C_MATRIX, C_MATRIX, C_MATRIX))


def _matrix_argument(pointer: int, rows: int, cols: int, row_stride: int | None = None) -> tuple:
    """A float32 matrix as a compiled kernel takes it (see launch.matrix_argument)."""
    return matrix_argument(pointer, rows, cols, 4, row_stride)


def _on_gpu_matrix(x, device_id: int):
    """(data pointer, rows, cols) of a C-contiguous float32 matrix on GPU `device_id`, or
    None when x is anything else (it then takes Numba's own path)."""
    if _is_torch_tensor(x):
        if str(x.dtype) == "torch.float32" and x.is_cuda and x.dim() == 2 \
                and x.is_contiguous() and x.get_device() == device_id:
            return x.data_ptr(), int(x.shape[0]), int(x.shape[1])
        return None
    interface = getattr(x, "__cuda_array_interface__", None)
    if interface is None or interface.get("typestr") != "<f4" or len(interface["shape"]) != 2:
        return None
    rows, cols = interface["shape"]
    strides = interface.get("strides")
    if strides is not None and tuple(strides) != (cols * 4, 4) and rows > 1:
        return None
    # A Numba device array lives on Numba's GPU; other producers must say theirs.
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    if not isinstance(x, DeviceNDArray):
        return None
    return interface["data"][0], int(rows), int(cols)


# -----------------------------------------------------------------------------
# Split-K. A product with few output tiles and a deep K (1024 x 1024 x 8192 is
# 128 tiles of 64 x 128 for the H100's 132 SMs) keeps most SMs idle however
# fast each block is. Cutting K into `splits` slices gives each slice's
# product its own blocks. Slices are whole multiples of 16 columns (the last
# one ragged), so the 128-bit loads of levels 5-7 stay aligned. Two ways to
# add the slices up (matmul's `split_sum`):
#
# * "atomic" (the default): ONE launch. The grid gets a third dimension, one
#   slice per blockIdx.z; each block walks its slice of K (columns z*chunk up
#   to (z+1)*chunk of A) and adds its tile of C into C with float32 atomic
#   adds (`cuda.atomic.add`), C having been zeroed by a small kernel
#   (`zero_matrix`) just before, on the same stream. No buffer of partial
#   products, and one extra launch (the zeroing) whatever the number of
#   slices. The price: each output's slices arrive in whatever order their
#   blocks finish, which can change from call to call, so the last bits of C
#   can differ between two calls on the same inputs.
# * "partials": one launch per slice, each writing a partial C into a
#   (slices, m, n) buffer, then `sum_splits` adding them in order:
#   deterministic, but it writes and reads slices x m x n more floats and
#   pays a launch per slice. On the H200 (benchmarks/NOTES.md) two or four
#   slices this way never beat one.
#
# With splits=1 (what auto has measured best at every shape so far) neither
# runs: one launch, each output summed by one thread and stored once, the
# same bits on every call.

SPLIT_ALIGN = 16
SPLIT_SUMS = ("atomic", "partials")


def _split_chunk(k: int, splits: int) -> int:
    """The length of each slice of K but the last: K / splits rounded up to a
    multiple of 16, and at least 16."""
    return max(SPLIT_ALIGN, -(-k // splits // SPLIT_ALIGN) * SPLIT_ALIGN)


def split_ranges(k: int, splits: int) -> list[tuple[int, int]]:
    """The K ranges [k0, k1) of at most `splits` slices, each a multiple of 16 long
    (but the last); fewer when K is too short to give each slice 16 columns."""
    chunk = _split_chunk(k, splits)
    return [(k0, min(k, k0 + chunk)) for k0 in range(0, k, chunk)]


@cuda.jit
def zero_matrix(c):
    """c[row, col] = 0 everywhere: C before the split-K kernel adds into it."""
    col = uint64(cuda.blockIdx.x) * uint64(cuda.blockDim.x) + uint64(cuda.threadIdx.x)
    row = uint64(cuda.blockIdx.y) * uint64(cuda.blockDim.y) + uint64(cuda.threadIdx.y)
    if row < uint64(c.shape[0]) and col < uint64(c.shape[1]):
        c[row, col] = float32(0.0)


@cuda.jit
def sum_splits(partial, c):
    """c[row, col] = the sum over s of partial[s, row, col]."""
    col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0.0)
        for s in range(partial.shape[0]):
            acc += partial[s, row, col]
        c[row, col] = acc


SUM_BLOCK = (32, 8)


def _sum_grid(m: int, n: int) -> tuple:
    return (_blocks(n, SUM_BLOCK[0]), _blocks(m, SUM_BLOCK[1]))


def _check_splits(splits, key) -> int:
    if splits is None:
        return None
    if key not in ("5", "6", "7", "auto"):
        raise ValueError(f"splits applies to levels 5, 6, 7 and auto only, got level {key!r}")
    if isinstance(splits, (bool, np.bool_)) or not isinstance(splits, (int, np.integer)) \
            or not 1 <= splits <= 64:
        raise ValueError(f"splits must be a whole number from 1 to 64, got {splits!r}")
    return int(splits)


def _check_split_sum(split_sum) -> str:
    if not isinstance(split_sum, str) or split_sum not in SPLIT_SUMS:
        raise ValueError(f"split_sum must be one of {', '.join(map(repr, SPLIT_SUMS))}, "
                         f"got {split_sum!r}")
    return split_sum


def split_kernel_for(level, shape, splits, vectorized=True,
                     config: TileConfig | WarpTileConfig | None = None):
    """The single-launch split-K kernel matmul launches for `level` (5, 6, 7 or
    "auto") at shape (m, n, k) with K cut into `splits` slices.

    Returns (kernel, grid, block, chunk). The grid's third dimension is the
    number of slices, len(split_ranges(k, splits)); block z multiplies
    columns z*chunk ... (z+1)*chunk of A (chunk a multiple of 16; the last
    slice ends at k) and ADDS its outputs into C with atomic adds, so C must
    be zeroed first: zero_matrix[...](c), then
    kernel[grid, block](a, b, c, numpy.uint64(chunk)).
    """
    key = _level(level, auto_ok=True)
    splits = _check_splits(splits, key)
    if splits is None:
        raise ValueError("splits must be a whole number from 1 to 64, got None")
    if not (isinstance(shape, tuple) and len(shape) == 3):
        raise ValueError(f"shape must be a tuple (m, n, k), got {shape!r}")
    m, n, k = (_whole_or_zero(name, v) for name, v in zip("mnk", shape))
    if key == "auto":
        key, config = "6", config or auto_config((m, n, k))
    return _split_kernel(key, m, n, k, splits, vectorized, config)


def _split_kernel(key, m, n, k, splits, vectorized, config) -> tuple:
    kernel, grid, block = _kernel_for(key, m, n, vectorized, config, split=True)
    chunk = _split_chunk(k, splits)
    return kernel, grid + (max(1, _blocks(k, chunk)),), block, chunk


A_MATRIX = types.Array(float32, 2, "A")
C_BLOCK = types.Array(float32, 3, "C")
# The split-K kernel's arguments: A, B, C and the slice length.
SPLIT_SIGNATURE = (C_MATRIX, C_MATRIX, C_MATRIX, types.uint64)


def _fast_matmul(a, b, key, config, splits, out=None, split_sum="atomic"):
    """matmul on GPU matrices without Numba's argument handling; None if not possible."""
    device_id = _current_gpu()
    a_matrix, b_matrix = _on_gpu_matrix(a, device_id), _on_gpu_matrix(b, device_id)
    if a_matrix is None or b_matrix is None:
        return None
    (a_ptr, m, k), (b_ptr, k_b, n) = a_matrix, b_matrix
    if k != k_b:
        return None  # matmul's own checks explain the mismatch
    torch_out = _is_torch_tensor(a) and _is_torch_tensor(b)
    if torch_out:
        import torch

        if out is None:
            out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        c_ptr = out.data_ptr()
    else:
        if out is None:
            out = cuda.device_array((m, n), dtype=np.float32)
        c_ptr = out.__cuda_array_interface__["data"][0]
    if not (m and n):
        return out
    vectorized = (k % 4 == 0 and n % 4 == 0 and a_ptr % 16 == 0 and b_ptr % 16 == 0)
    key, config, splits = _resolved(key, m, n, k, config, splits, device_id)
    ranges = split_ranges(k, splits) if k else [(0, 0)]
    if len(ranges) == 1 or split_sum == "atomic":
        _quick_plan(key, m, n, k, vectorized, device_id, config, splits)(a_ptr, b_ptr, c_ptr)
        return out
    launch = core_launch()
    if torch_out:
        partial = torch.empty((len(ranges), m, n), dtype=torch.float32, device=a.device)
        p_ptr = partial.data_ptr()
    else:
        partial = cuda.device_array((len(ranges), m, n), dtype=np.float32)
        p_ptr = partial.__cuda_array_interface__["data"][0]
    for s, (k0, k1) in enumerate(ranges):
        kernel, grid, block = kernel_for(key, (m, n, k1 - k0), vectorized, config)
        function, stream = _launchable(kernel, device_id, (A_MATRIX, C_MATRIX, C_MATRIX))
        launch(stream, launch_config(grid, block), function,
               *_matrix_argument(a_ptr + 4 * k0, m, k1 - k0, row_stride=k),
               *_matrix_argument(b_ptr + 4 * k0 * n, k1 - k0, n),
               *_matrix_argument(p_ptr + 4 * s * m * n, m, n))
    function, stream = _launchable(sum_splits, device_id, (C_BLOCK, C_MATRIX))
    launch(stream, launch_config(_sum_grid(m, n), SUM_BLOCK), function,
           0, 0, len(ranges) * m * n, 4, p_ptr, len(ranges), m, n, m * n * 4, n * 4, 4,
           *_matrix_argument(c_ptr, m, n))
    return out


# The common call, matmul(a, b) or matmul(a, b, level, out=c) on two CUDA torch
# tensors or two Numba device arrays, in as little Python as it can be: a
# product of 1 x 1 x 1 costs what its Python costs (issue 16 asked for under
# 30 microseconds a call). Everything that depends only on the level, the
# shape, the GPU and the alignment (the kernel, its grid, its tiles, auto's
# plan, the compiled function) is worked out once per such key
# (`_quick_plan`); each call checks its arguments' types, dtype, layout and
# device, and launches. Any call it is unsure of (other dtypes, strides,
# devices, config= or splits=, bad arguments) goes the long way, through the
# checks that explain what is wrong.
_ON_GPU = on_gpu()  # decided when gpucourse.device loaded Numba, fixed from then on
_QUICK_LEVELS = {"auto": "auto", 6: "6", "6": "6", 5: "5", "5": "5", 7: "7", "7": "7"}
_QUICK_LEVEL_TYPES = (str, int)
_KIND_OF_TYPE: dict = {}  # type -> "torch", "numba" or None, found once per type


def _kind_of(x):
    kind = _KIND_OF_TYPE.get(type(x), False)
    if kind is False:
        kind = "torch" if _is_torch_tensor(x) else None
        if kind is None and _ON_GPU:
            from numba.cuda.cudadrv.devicearray import DeviceNDArray

            kind = "numba" if isinstance(x, DeviceNDArray) else None
        _KIND_OF_TYPE[type(x)] = kind
    return kind


def _quick_torch_matrix(x, float32_type, device_id):
    """(pointer, rows, cols) of a 2D C-contiguous float32 CUDA tensor on GPU device_id, or None."""
    if x.dtype is not float32_type or x.dim() != 2 or not x.is_cuda or not x.is_contiguous() \
            or x.get_device() != device_id:
        return None
    rows, cols = x.shape
    return x.data_ptr(), rows, cols


def _quick_numba_matrix(x):
    """(pointer, rows, cols) of a 2D C-contiguous float32 Numba device array, or None."""
    if x.dtype != np.float32 or x.ndim != 2 or not x.is_c_contiguous():
        return None
    rows, cols = x.shape
    return x.device_ctypes_pointer.value or 0, rows, cols


def _quick_matmul(a, b, level, out):
    """matmul's common case (see above), or None to take the long way."""
    kind = _kind_of(a)
    if kind is None or _kind_of(b) != kind or level.__class__ not in _QUICK_LEVEL_TYPES:
        return None  # bools, floats (6.0 == 6) and the rest: the long way says what it takes
    key = _QUICK_LEVELS.get(level)
    if key is None:
        return None
    device_id = _current_gpu()
    if kind == "torch":
        f32 = _torch_float32()
        a_matrix = _quick_torch_matrix(a, f32, device_id)
        b_matrix = _quick_torch_matrix(b, f32, device_id)
    else:  # Numba's arrays live on Numba's GPU, the current one
        a_matrix, b_matrix = _quick_numba_matrix(a), _quick_numba_matrix(b)
    if a_matrix is None or b_matrix is None:
        return None
    (a_ptr, m, k), (b_ptr, k_b, n) = a_matrix, b_matrix
    if k != k_b:
        return None  # the long way explains the mismatch
    if out is None:
        out = _torch_empty(a, m, n) if kind == "torch" else _numba_empty(m, n, device_id)
    elif _kind_of(out) != kind:
        return None
    c_matrix = (_quick_torch_matrix(out, f32, device_id) if kind == "torch"
                else _quick_numba_matrix(out))
    if c_matrix is None or c_matrix[1] != m or c_matrix[2] != n:
        return None
    if m and n:
        aligned = not (k % 4 or n % 4 or a_ptr % 16 or b_ptr % 16)
        _quick_plan(key, m, n, k, aligned, device_id)(a_ptr, b_ptr, c_matrix[0])
    return out


def _torch_empty(like, m: int, n: int):
    """An uninitialised m x n float32 tensor on `like`'s device."""
    import torch

    return torch.empty((m, n), dtype=torch.float32, device=like.device)


def _resolved(key: str, m: int, n: int, k: int, config, splits, device_id: int) -> tuple:
    """(key, config, splits) that matmul runs for `key` at this shape: auto is
    level 6 with the tiles and slices measured nearest the shape (each where
    not given), level 6 takes this GPU's tuned tiles where none are given,
    and splits default to 1."""
    if key == "auto":
        planned, planned_splits = auto_plan((m, n, k), _gpu_name(device_id))
        return "6", config or planned, splits or planned_splits
    if config is None and key == "6":
        config = _tuned_here(_gpu_name(device_id))
    return key, config, splits or 1


@lru_cache(maxsize=1024)
def _quick_plan(key: str, m: int, n: int, k: int, vectorized: bool, device_id: int,
                config=None, splits=None):
    """go(a_ptr, b_ptr, c_ptr): the launches matmul makes for `key` (with `config`
    and `splits` of K where given; see _resolved) at this shape on this GPU,
    one kernel or split-K in one launch, everything but the three pointers
    worked out once."""
    launch = core_launch()
    key, config, splits = _resolved(key, m, n, k, config, splits, device_id)
    a_head, a_tail = (0, 0, m * k, 4), (m, k, k * 4, 4)
    b_head, b_tail = (0, 0, k * n, 4), (k, n, n * 4, 4)
    c_head, c_tail = (0, 0, m * n, 4), (m, n, n * 4, 4)
    if k == 0 or len(split_ranges(k, splits)) == 1:
        kernel, grid, block = kernel_for(key, (m, n, k), vectorized, config)
        function, stream = _launchable(kernel, device_id)
        shape = launch_config(grid, block)

        def go(a_ptr, b_ptr, c_ptr):
            launch(stream, shape, function, *a_head, a_ptr, *a_tail, *b_head, b_ptr, *b_tail,
                   *c_head, c_ptr, *c_tail)
        return go
    # Split-K in one launch: C zeroed, then one launch whose blocks add their
    # slices into it; both on Numba's default stream, in that order. (Not
    # torch's zero_: it would run on torch's current stream, which need not be
    # this one.)
    kernel, grid, block, chunk = _split_kernel(key, m, n, k, splits, vectorized, config)
    zero, stream = _launchable(zero_matrix, device_id, (C_MATRIX,))
    function, _ = _launchable(kernel, device_id, SPLIT_SIGNATURE)
    zero_shape, shape = launch_config(_sum_grid(m, n), SUM_BLOCK), launch_config(grid, block)

    def go_split(a_ptr, b_ptr, c_ptr):
        launch(stream, zero_shape, zero, *c_head, c_ptr, *c_tail)
        launch(stream, shape, function, *a_head, a_ptr, *a_tail, *b_head, b_ptr, *b_tail,
               *c_head, c_ptr, *c_tail, chunk)
    return go_split


def matmul(a, b, level="auto", *, config: TileConfig | WarpTileConfig | None = None,
           splits: int | None = None, split_sum: str = "atomic", out=None):
    """C = A @ B in float32 with the SGEMM kernel of `level` (1, 2, 3, "4a", "4b", 5, 6, 7 or
    "auto": level 6's kernel with the tiles measured best near this shape, `auto_config`).

    a: M x K, b: K x N, both float32 and both of one kind: numpy arrays (the
    result is a numpy array), or device arrays with __cuda_array_interface__
    (a Numba device array gives a Numba device array, a CUDA torch tensor a
    CUDA torch tensor on the same device). Any M, N, K >= 0.
    config: tile sizes for levels 4a-6, a TileConfig (default: each level's
    own; level 6 reads sgemm_tuned.json), or for level 7, a WarpTileConfig
    (default WARP_TILE_DEFAULT).
    splits: cut K into this many slices, each multiplied by its own blocks,
    and add their products (split-K: more blocks for a product with few tiles
    of C and a deep K; levels 5, 6, 7 and auto; default 1, or what auto
    measured best near this shape). Slices are multiples of 16 columns, so
    a short K gets fewer.
    split_sum: how the slices are added when there are several. "atomic"
    (default): one launch whose blocks take their slice from blockIdx.z and
    add their outputs into C, zeroed first, with float32 atomic adds. The
    additions then run in an order that can change from call to call, so
    the last bits of C may differ between two calls on the same inputs.
    "partials": one launch per slice writing a buffer of partial products,
    then a kernel adding them in order (deterministic; more memory traffic
    and launches). With splits=1, the default for most shapes, neither
    runs: each output is summed by one thread and stored once, exact to
    float32 rounding and the same on every call.
    out: where to write C (returned): an M x N C-contiguous float32 array of
    the inputs' kind. A call that allocates C each time pays for the
    allocation; a loop can pass the same `out` instead.

    Raises ValueError naming what is accepted for a non-float32 dtype, a
    non-2D array, mismatched inner dimensions, an unknown level, a tile
    configuration that breaks a constraint, or an unfit `out`.
    """
    if config is None and splits is None and split_sum == "atomic" and _ON_GPU:
        result = _quick_matmul(a, b, level, out)
        if result is not None:
            return result
    key = _level(level, auto_ok=True)
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray) and not hasattr(x, "shape"):
            raise ValueError(f"{name} must be a numpy array, a Numba device array or a CUDA torch "
                             f"tensor (anything with __cuda_array_interface__), got "
                             f"{type(x).__name__}")
    a_is_numpy, b_is_numpy = isinstance(a, np.ndarray), isinstance(b, np.ndarray)
    if a_is_numpy != b_is_numpy:
        raise ValueError("a and b must be of one kind: both numpy arrays or both device arrays, "
                         f"got {type(a).__name__} and {type(b).__name__}")
    for name, x in (("a", a), ("b", b)):  # shape checks before any copy to the device
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) != 2:
            raise ValueError(f"{name} must be a 2D matrix, got {len(shape)} dimensions (shape {tuple(shape)})")
    if getattr(a, "shape", None) is not None and getattr(b, "shape", None) is not None:
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"inner dimensions must match: a is {a.shape[0]} x {a.shape[1]} so b "
                             f"must have {a.shape[1]} rows, got b of shape {tuple(b.shape)}")
    if config is not None:
        if key not in ("4a", "4b", "5", "6", "7", "auto"):
            raise ValueError(f"config applies to levels 4a, 4b, 5 and 6 (and auto; a TileConfig) "
                             f"and 7 (a WarpTileConfig) only, got level {level!r}")
        if key == "7":
            check_warp_config(config)
        else:
            check_config(config, vectorized=key in ("5", "6", "auto"))
    splits = _check_splits(splits, key)
    split_sum = _check_split_sum(split_sum)
    if out is not None:
        _check_out(out, a, (int(a.shape[0]), int(b.shape[1])))
    if on_gpu() and not a_is_numpy:
        result = _fast_matmul(a, b, key, config, splits, out, split_sum)
        if result is not None:
            return result
    a_dev, b_dev = _device_view("a", a), _device_view("b", b)
    m, k = a_dev.shape
    n = b_dev.shape[1]

    torch_out = _is_torch_tensor(a) and _is_torch_tensor(b)
    if torch_out:
        import torch

        if out is None:
            out = torch.empty((m, n), dtype=torch.float32, device=a.device)
        c_dev = cuda.as_cuda_array(out)
    elif out is not None and not a_is_numpy:
        c_dev = out
    else:
        c_dev = cuda.device_array((m, n), dtype=np.float32)

    if m and n:  # with k == 0 every kernel writes zeros, the empty sum, as numpy does
        vectorized = _aligned_rows(a_dev) and _aligned_rows(b_dev)
        if key == "auto":
            planned, planned_splits = auto_plan((m, n, k))
            key, config, splits = "6", config or planned, splits or planned_splits
        ranges = split_ranges(k, splits or 1) if k else [(0, 0)]
        if len(ranges) == 1:
            kernel, grid, block = kernel_for(key, (m, n, k), vectorized, config)
            kernel[grid, block](a_dev, b_dev, c_dev)
        elif split_sum == "atomic":
            kernel, grid, block, chunk = _split_kernel(key, m, n, k, splits, vectorized, config)
            zero_matrix[_sum_grid(m, n), SUM_BLOCK](c_dev)
            kernel[grid, block](a_dev, b_dev, c_dev, np.uint64(chunk))
        else:
            partial = cuda.device_array((len(ranges), m, n), dtype=np.float32)
            for s, (k0, k1) in enumerate(ranges):
                kernel, grid, block = kernel_for(key, (m, n, k1 - k0), vectorized, config)
                kernel[grid, block](a_dev[:, k0:k1], b_dev[k0:k1, :], partial[s])
            sum_splits[_sum_grid(m, n), SUM_BLOCK](partial, c_dev)
    if torch_out:
        return out
    if a_is_numpy:
        return c_dev.copy_to_host() if out is None else c_dev.copy_to_host(out)
    return c_dev


def _check_out(out, a, shape) -> None:
    """`out` must be an M x N C-contiguous float32 array of a's kind."""
    if isinstance(a, np.ndarray):
        kind, fits = "a numpy array", isinstance(out, np.ndarray) and out.dtype == np.float32 \
            and out.flags.c_contiguous
    elif _is_torch_tensor(a):
        kind = "a CUDA torch tensor on the inputs' GPU"
        fits = _is_torch_tensor(out) and str(out.dtype) == "torch.float32" and \
            out.device == a.device and out.is_contiguous()
    else:
        kind = "a Numba device array"
        fits = type(out) is type(a) and out.dtype == np.float32 and out.is_c_contiguous()
    if not fits or tuple(out.shape) != shape:
        raise ValueError(f"out must be {kind} of shape {shape}, C-contiguous float32, like the "
                         f"inputs; got {type(out).__name__} of shape "
                         f"{tuple(getattr(out, 'shape', ()))}")


# -----------------------------------------------------------------------------
# Resource reports and autotuning (a real GPU only)


def resource_usage(level, config: TileConfig | WarpTileConfig | None = None) -> dict:
    """Registers per thread, shared memory per block and local memory per thread
    of `level`'s kernel, from Numba's own compile report (compiling it first).

    Returns a dict with level, name, threads_per_block, registers_per_thread,
    shared_bytes_per_block and local_bytes_per_thread. Under the simulator
    there is no compiler, and this raises RuntimeError saying so.
    """
    key = _level(level)
    if not on_gpu():
        raise RuntimeError("resource_usage needs a real GPU: Numba's CUDA simulator runs "
                           "kernels as Python and has no compiler to report registers or "
                           "shared memory (run with GPUCOURSE_DEVICE=gpu on an NVIDIA GPU)")
    size = 256
    a = cuda.to_device(np.ones((size, size), np.float32))
    b = cuda.to_device(np.ones((size, size), np.float32))
    c = cuda.device_array((size, size), np.float32)
    kernel, grid, block = kernel_for(key, (size, size, size), True, config)
    kernel[grid, block](a, b, c)  # compiles for this signature
    cuda.synchronize()

    def first(value):  # one number when the kernel has one compiled signature
        return max(value.values()) if isinstance(value, dict) else value

    return {
        "level": key,
        "name": LEVEL_NAMES[key],
        "threads_per_block": int(np.prod(block)),
        "registers_per_thread": int(first(kernel.get_regs_per_thread())),
        "shared_bytes_per_block": int(first(kernel.get_shared_mem_per_block())),
        "local_bytes_per_thread": int(first(kernel.get_local_mem_per_thread())),
    }


def _time_ms(function, warmup: int, repeats: int) -> float:
    """Median milliseconds of function() over `repeats` runs, with CUDA events."""
    from gpucourse.kernels.timing import median_time_s

    return median_time_s(function, warmup, repeats) * 1e3


def autotune(m, n, k, *, configs=None, path=None, repeats=5, progress=True) -> dict:
    """Time level 6's kernel with every candidate tile configuration at m x n x k
    and save the fastest, for this GPU model, in the JSON file `path` (default
    sgemm_tuned.json beside this module), which level 6 reads.

    configs: the TileConfigs to try (default candidate_configs(), every config
    in SEARCH_SPACE that passes check_config); each is checked first. Each
    result is compared with level 4b's before it counts. Returns a dict with
    the GPU name, the best config and every (config, ms, tflops) tried.
    Needs a real GPU (timings on the simulator would mean nothing).
    """
    m, n, k = _whole("m", m), _whole("n", n), _whole("k", k)
    repeats = _whole("repeats", repeats)
    configs = candidate_configs() if configs is None else list(configs)
    if not configs:
        raise ValueError("configs must hold at least one TileConfig")
    for config in configs:
        check_config(config, vectorized=True)
    if not on_gpu():
        raise RuntimeError("autotune needs a real GPU: on Numba's CUDA simulator timings mean "
                           "nothing (run with GPUCOURSE_DEVICE=gpu on an NVIDIA GPU)")
    from tqdm.auto import tqdm

    rng = np.random.default_rng(0)
    a = cuda.to_device(rng.standard_normal((m, k), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((k, n), dtype=np.float32))
    reference = matmul(a, b, level="4b").copy_to_host()
    scale = float(np.abs(reference).max()) or 1.0
    tried = []
    c = cuda.device_array((m, n), dtype=np.float32)
    vectorized = _aligned_rows(a) and _aligned_rows(b)
    for config in tqdm(configs, desc=f"autotune {m}x{n}x{k}", disable=not progress):
        # Time the kernel launch alone, as the benchmark does: matmul's own
        # checks and its allocation of C would count against small tiles.
        kernel, grid, block = kernel_for(6, (m, n, k), vectorized, config)
        kernel[grid, block](a, b, c)
        error = float(np.abs(c.copy_to_host() - reference).max()) / scale
        if not np.isfinite(error) or error > 1e-4:
            tried.append({**asdict(config), "ms": None, "tflops": None, "error": error})
            continue
        ms = _time_ms(lambda: kernel[grid, block](a, b, c), warmup=1, repeats=repeats)
        tried.append({**asdict(config), "ms": ms, "tflops": 2 * m * n * k / (ms * 1e-3) / 1e12,
                      "error": error})
    timed = [t for t in tried if t["ms"] is not None]
    if not timed:
        raise RuntimeError("autotune: no configuration gave a correct result")
    best = min(timed, key=lambda t: t["ms"])
    gpu = gpu_model()
    table = _read_tuned(path)
    table[gpu] = {**table.get(gpu, {}), **{f: best[f] for f in ("bm", "bn", "bk", "tm", "tn")},
                  "m": m, "n": n, "k": k, "ms": best["ms"], "tflops": best["tflops"],
                  "date": _datetime.date.today().isoformat()}
    with open(Path(TUNED_PATH if path is None else path), "w") as f:
        json.dump(table, f, indent=2, sort_keys=True)
        f.write("\n")
    _tuned_here.cache_clear()
    _by_shape_here.cache_clear()
    _plan_here.cache_clear()
    _quick_plan.cache_clear()
    best_config = TileConfig(**{f: best[f] for f in ("bm", "bn", "bk", "tm", "tn")})
    return {"gpu": gpu, "best": best_config, "tried": tried}


# -----------------------------------------------------------------------------
# Counting bytes: why each level is faster


def matmul_flops(m, n, k) -> int:
    """Floating-point operations of an m x k by k x n product: 2*m*n*k."""
    return 2 * _whole("m", m) * _whole("n", n) * _whole("k", k)


def traffic_model(level, m, n, k, config: TileConfig | WarpTileConfig | None = None) -> dict:
    """What `level` moves for an m x k by k x n product, in a simple model.

    Returns a dict with:

    * global_bytes: bytes the kernel's loads request from global memory, counted
      in the 32-byte sectors a warp touches (levels 1-2: every output re-reads
      a row of A and a column of B; levels 3+: each tile is loaded once per block);
    * intensity_flop_per_byte: 2*m*n*k over global_bytes;
    * shared_loads_per_fma: shared-memory loads per multiply-add (0 for 1-2).

    Caches are ignored, so for levels 1-2 this is the traffic into L1/L2, not
    from DRAM. Integer sizes; no GPU needed.
    """
    key = _level(level)
    m, n, k = _whole("m", m), _whole("n", n), _whole("k", k)
    flops = 2 * m * n * k
    sector = 32
    warps = m * n / WARP_SIZE  # one warp per 32 outputs
    if key == "1":
        # Per step of K a warp reads 32 rows of A (32 sectors) and one value of B (1 sector).
        global_bytes = warps * k * (32 + 1) * sector
        shared_per_fma = 0.0
    elif key == "2":
        # One value of A (1 sector) and 32 neighbouring values of B (128 bytes: 4 sectors).
        global_bytes = warps * k * (1 + 4) * sector
        shared_per_fma = 0.0
    elif key == "3":
        t = SHARED_TILE
        global_bytes = 4 * (m * n * k / t) * 2  # each block reads t x k of A and k x t of B
        shared_per_fma = 2.0
    elif key == "7":
        config = WARP_TILE_DEFAULT if config is None else check_warp_config(config)
        global_bytes = 4 * m * n * k * (1 / config.bn + 1 / config.bm)
        # Per step of K: wm_iter*tm values of A and wn_iter*tn of B for all the patches.
        rows, cols = config.wm_iter * config.tm, config.wn_iter * config.tn
        shared_per_fma = (rows + cols) / (rows * cols)
    else:
        if config is None:
            config = {"4a": CONFIG_4A, "4b": CONFIG_4B, "5": CONFIG_5}.get(key) or DEFAULT_TUNED
        global_bytes = 4 * m * n * k * (1 / config.bn + 1 / config.bm)
        tm, tn = config.tm, config.tn
        shared_per_fma = (tm + tn) / (tm * tn) if key != "4a" else (1 + tm) / tm
    return {"level": key, "global_bytes": float(global_bytes),
            "intensity_flop_per_byte": flops / global_bytes,
            "shared_loads_per_fma": float(shared_per_fma)}


def minimum_bytes(m, n, k) -> int:
    """The fewest bytes any SGEMM must move: read A and B once, write C once."""
    m, n, k = _whole("m", m), _whole("n", n), _whole("k", k)
    return 4 * (m * k + k * n + m * n)
