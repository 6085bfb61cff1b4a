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
    auto      level 6's kernel with the tiles and slices of K the shape model prices
              cheapest for the product's shape on this GPU (``shape_model``: waves of
              blocks on the SMs, the tail of the last wave, padding, split-K)

Every kernel is correct for any shape: tiles that hang over the edge of a
matrix are filled with zeros when loaded and skipped when stored.

Levels 5, 6, 7 and auto can also cut K into slices (split-K, ``splits=``), for
products with few tiles of C and a deep K: by default in one launch whose
blocks take their slice from blockIdx.z and add into a zeroed C with atomic
adds (so C's last bits may differ from call to call), or one launch per slice
and a kernel adding the partial products (see ``split_k``). splits=1, the
default for most shapes, stores each output once and is deterministic.

The public entry point is ``matmul(a, b, level="auto")``. It takes numpy arrays
(and returns numpy) or anything with ``__cuda_array_interface__``: a Numba
device array (returns a Numba device array) or a CUDA torch tensor (returns a
CUDA torch tensor). ``autotune`` times tile configurations on a GPU and keeps
the best per GPU model in ``sgemm_tuned.json`` in this package;
``resource_usage`` reports a kernel's registers, shared and local memory from
Numba's own compile reports; ``traffic_model`` counts the bytes each level
moves, for the chapter's roofline.

Kernels get ``cuda`` from ``gpucourse.device`` (GPU or simulator, decided
once), never from ``numba.cuda`` directly. Tile sizes are captured as
constants by small kernel factories, because shared and local array shapes
must be compile-time constants.

How the package is laid out, from the bottom up (each module imports only
those above it in this list):

    config           levels, tile configurations and their checks, index constants
    naive            levels 1 and 2
    shared           level 3
    blocktiling      levels 4a and 4b
    building_blocks  the device-function factories levels 5-7 share, and why
    vectorized       levels 5 and 6
    warptiling       level 7
    padding          ragged operands copied into padded buffers for 128-bit loads
    shape_model      auto's cost model: waves, tails, padding, split-K
    shape_model_fit  fitting that model to timings: constants, shares, factors
    tuned_table      reading level 6's tuned tiles per GPU, and auto's plan per shape
    kernel_choice    kernel_for: which kernel, grid and block a level runs
    split_k          cutting K into slices (split-K, stream-K), and adding them up
    traffic          flops and bytes: the models the chapter's roofline uses
    entry_point      matmul and its quick paths on a GPU
    autotuning       autotune and resource_usage (a real GPU only)

Every name below is importable from ``gpucourse.kernels.sgemm`` itself, as
before the package was split; the chapter's tables and plots live in
``gpucourse.chapters.sgemm``.
"""

# Every name callers used before the split, re-exported from the module that
# now holds it (imported here to be used from here, not in this file).
from gpucourse.device import cuda, on_gpu  # first: it decides GPU or simulator before Numba loads
from gpucourse.kernels.sgemm import building_blocks, vectorized
from gpucourse.kernels.sgemm.autotuning import autotune, resource_usage
from gpucourse.kernels.sgemm.blocktiling import _make_1d_kernel, _make_2d_kernel
from gpucourse.kernels.sgemm.building_blocks import (REGISTER_ROOM, REGISTERS_PER_SM, UNROLLS,
                                                     _make_k_loop, _make_multiply_tile,
                                                     _make_tile_loaders, _make_unrolled_steps,
                                                     _register_cap, _steps_per_pass)
from gpucourse.kernels.sgemm.config import (CONFIG_4A, CONFIG_4B, CONFIG_5, DEFAULT_TUNED,
                                            MAX_REGISTERS_PER_THREAD, MAX_THREADS_PER_BLOCK,
                                            NAIVE_BLOCK, ONE, REGISTER_OVERHEAD, SEARCH_SPACE,
                                            SHARED_TILE, STATIC_SHARED_LIMIT_BYTES, WARP_SIZE,
                                            WARP_TILE_CANDIDATES, WARP_TILE_DEFAULT,
                                            WARP_TILE_WORKLOG, ZERO, LEVEL_NAMES, LEVELS, TileConfig, WarpTileConfig,
                                            tile_config_of,
                                            _blocks, _level, _u, _whole, _whole_or_zero,
                                            candidate_configs, check_config, check_warp_config)
from gpucourse.kernels.sgemm.entry_point import (_aligned_rows, _device_view, _fast_matmul,
                                                 _launchable, _on_gpu_matrix, _quick_matmul,
                                                 _quick_plan, _resolved, matmul)
from gpucourse.kernels.sgemm.kernel_choice import _compiled, _kernel_for, _tiled_kernel, kernel_for
from gpucourse.kernels.sgemm.naive import sgemm_coalesced, sgemm_naive
from gpucourse.kernels.sgemm.shared import _make_shared_kernel
from gpucourse.kernels.sgemm.split_k import (A_MATRIX, C_BLOCK, C_MATRIX, SPLIT_ALIGN,
                                             SPLIT_SIGNATURE, SPLIT_SUMS, STREAM,
                                             STREAM_SIGNATURE, SUM_BLOCK, split_kernel_for,
                                             split_ranges, stream_kernel_for, stream_workers,
                                             sum_splits, zero_matrix)
from gpucourse.kernels.sgemm.shape_model import (MODEL_PATH, SPLITS, choose_plan,
                                                 gpu_entry, plan_cost, plan_summary, planned,
                                                 resident_blocks, tail_efficiency)
from gpucourse.kernels.sgemm.shape_model_fit import calibrate
from gpucourse.kernels.sgemm.traffic import matmul_flops, minimum_bytes, traffic_model
from gpucourse.kernels.sgemm.tuned_table import (TUNED_PATH, _read_tuned, _tuned_here, auto_config,
                                                 auto_plan, gpu_model, tuned_config)
from gpucourse.kernels.sgemm.vectorized import _make_vectorized_kernel
from gpucourse.kernels.sgemm.warptiling import _make_warp_tiled_kernel

# The two knobs a benchmark turns are read from the module that builds the
# kernels, each time one is built: DOT_UNROLL by building_blocks, DOUBLE_BUFFER
# by vectorized. So they are not copied here, where setting one would change
# nothing: reading sgemm.DOT_UNROLL asks that module, and a benchmark sets
# building_blocks.DOT_UNROLL (or vectorized.DOUBLE_BUFFER) itself.
_KNOBS = {"DOT_UNROLL": building_blocks, "DOUBLE_BUFFER": vectorized}


def ring_switches() -> dict:
    """The switches that decide how matmul zeroes C and how a ring handles a
    ragged row, as they stand now: what a benchmark's record saves, so that
    each run says which kernels it timed (the defaults, or a run's flips)."""
    from gpucourse.kernels.sgemm import entry_point, pipelined

    return {"zeroing": "memset" if entry_point.ZERO_BY_MEMSET else "kernel",
            "ring_pairs": entry_point.RING_PAIRS, "ring_shifted": entry_point.RING_SHIFTED,
            "peeled_stores": vectorized.PEELED_STORES,
            "ring_copy_wide": entry_point.RING_COPY_WIDE,
            "step_scalar_copies": pipelined.STEP_SCALAR_COPIES,
            "ring_copy_overlap": vectorized.RING_COPY_OVERLAP}


def __getattr__(name):
    if name in _KNOBS:
        return getattr(_KNOBS[name], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
