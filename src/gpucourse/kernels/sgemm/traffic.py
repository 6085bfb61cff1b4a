"""Counting flops and bytes: how many operations a product takes, the fewest
bytes any SGEMM must move, and a model of the bytes each level moves, which
the chapter's roofline places each level's measured rate against.

No GPU is needed: the model is arithmetic on the tile sizes (``config``),
which is why it sits apart from the kernels whose traffic it counts.
"""

from __future__ import annotations

from gpucourse.kernels.sgemm.config import (CONFIG_4A, CONFIG_4B, CONFIG_5, DEFAULT_TUNED,
                                            SHARED_TILE, WARP_SIZE, WARP_TILE_DEFAULT, TileConfig,
                                            WarpTileConfig, _level, _whole, check_warp_config)


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
