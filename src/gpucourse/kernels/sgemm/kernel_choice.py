"""Which kernel, grid and block a level runs at a shape (``kernel_for``), each
kernel built once per tile configuration and checked before it is built.

This is the one place that knows every level's factory: the entry point,
split-K, ``autotune``, ``resource_usage`` and ``timing.time_sgemm`` all ask it
for a kernel, so none of them needs to know how a level is built. Kernels are
kept (``_compiled``, ``_tiled_kernel``) because Numba keeps its compiled code
on the kernel object: building one anew would compile it anew.
"""

from __future__ import annotations

from functools import lru_cache

from gpucourse.kernels.sgemm.blocktiling import _make_1d_kernel, _make_2d_kernel
from gpucourse.kernels.sgemm.config import (CONFIG_4A, CONFIG_4B, CONFIG_5, NAIVE_BLOCK,
                                            SHARED_TILE, WARP_TILE_DEFAULT, TileConfig,
                                            WarpTileConfig, _blocks, _level, check_config,
                                            check_warp_config)
from gpucourse.kernels.sgemm.naive import sgemm_coalesced, sgemm_naive
from gpucourse.kernels.sgemm.padding import LOADS_ONLY, PAIRS, SHIFTED
from gpucourse.kernels.sgemm.shared import _make_shared_kernel
from gpucourse.kernels.sgemm.tuned_table import _tuned_here, auto_config, gpu_model
from gpucourse.kernels.sgemm.vectorized import _make_vectorized_kernel
from gpucourse.kernels.sgemm.warptiling import _make_warp_tiled_kernel


@lru_cache(maxsize=None)
def _compiled(kind: str, config: TileConfig | WarpTileConfig | None = None,
              vectorized: bool = False, split: bool | str = False, interior: bool = False):
    """One kernel object per (kind, config): Numba caches its compiled code on it.
    `split`: the single-launch split-K variant of levels 5-7 (True), or their
    stream-K variant ("stream")."""
    if kind == "shared":
        return _make_shared_kernel(SHARED_TILE)
    if kind == "1d":
        return _make_1d_kernel(config)
    if kind == "2d":
        return _make_2d_kernel(config)
    if kind == "warp":
        return _make_warp_tiled_kernel(config, vectorized, split=split, interior=interior)
    return _make_vectorized_kernel(config, vectorized, split=split, interior=interior)


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
    (levels 5-7, 128-bit loads; see (8) in building_blocks)."""
    if key in ("1", "2"):
        block = (NAIVE_BLOCK, NAIVE_BLOCK)
        if key == "1":  # x walks rows of C
            return sgemm_naive, (_blocks(m, NAIVE_BLOCK), _blocks(n, NAIVE_BLOCK)), block
        return sgemm_coalesced, (_blocks(n, NAIVE_BLOCK), _blocks(m, NAIVE_BLOCK)), block
    if key == "3":
        return (_compiled("shared"), (_blocks(n, SHARED_TILE), _blocks(m, SHARED_TILE)),
                (SHARED_TILE, SHARED_TILE))
    if config is None:
        config = _default_config(key)
    interior = bool(vectorized is True and split is False and k and key in ("5", "6", "7") and
                    not (m % config.bm or n % config.bn or k % config.bk))
    # "loads": 128-bit loads from padded A and B, single stores into C;
    # "pairs": a ring's 8-byte copies of B and stores into C; "shifted": a
    # ring's 16-byte copies of B wherever its rows start, moved into place
    # (other kernels have neither mode, and take one float at a time).
    if vectorized in (PAIRS, SHIFTED) and not (key in ("5", "6")
                                              and getattr(config, "stages", 0)):
        vectorized = False
    vectorized = vectorized if vectorized in (LOADS_ONLY, PAIRS, SHIFTED) else bool(vectorized)
    return _tiled_kernel(key, config, vectorized, split, interior), \
        (_blocks(n, config.bn), _blocks(m, config.bm)), (config.threads,)


def _default_config(key: str):
    """The tiles level `key` (4a-7) runs with when none are given: level 6
    this GPU's tuned ones."""
    return {"4a": CONFIG_4A, "4b": CONFIG_4B, "5": CONFIG_5, "7": WARP_TILE_DEFAULT}.get(key) \
        or _tuned_here(gpu_model())


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
