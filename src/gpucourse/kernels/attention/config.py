"""The tile shapes of the forward kernels, and the ones tuned on an H100.

A ``FlashConfig`` says how the CUDA-core kernel (``forward``) cuts the work:
Br query rows per block, Bc keys per step, and the rows and columns each
thread owns. The tables pick one shape per head dimension:
``PORTABLE_FLASH_CONFIGS`` fit the 48 KiB that every GPU gives a block,
``FLASH_CONFIGS`` are the shapes tuned on an H100, ``CAUSAL_FLASH_CONFIGS``
the smaller tiles a causal mask wants at short sequences, and
``TENSOR_CORE_CONFIGS`` the tensor-core kernel's (its ``TensorCoreConfig``
lives beside that kernel, in ``tensor_cores``). ``check_config`` refuses a
shape that a kernel cannot run.

The shapes are kept apart from the kernels so that they can be read and
tuned on their own: the benchmark, the launch path and the tests all read
them from here, and each table's comment says which measurement chose it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gpucourse.kernels.attention.limits import (DYNAMIC_SHARED_LIMIT_BYTES, FLOAT32_BYTES,
                                                STATIC_SHARED_LIMIT_BYTES, WARP_SIZE)
from gpucourse.kernels.attention.shared_tiles import PaddedTiles
from gpucourse.kernels.attention.tensor_cores import TensorCoreConfig, check_tc_config

# Head dimensions the tiled kernel is compiled for. Each gets its own tile
# shape; the defaults fit the four shared-memory tiles in the 48 KiB a block
# may declare statically (larger shapes go to dynamic shared memory).
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)


@dataclass(frozen=True)
class FlashConfig(PaddedTiles):
    """The tile shape of the tiled kernel for one head dimension.

    block_rows (Br) query rows per block, block_cols (Bc) keys per inner
    step; each thread owns ``thread_rows`` query rows and one in every
    ``thread_cols`` columns of the score tile and of the output.
    ``steps_per_pass``: steps of the two tile products' loops (four head-dim
    values of S = Q K^T, one key of O += P V) written out per pass, at
    constant offsets from addresses that advance once a pass: 1, 2 or 4.
    More steps, fewer instructions, but more registers: the package's own
    shapes take the most that ptxas compiles for sm_90 without spilling.
    """

    head_dim: int
    block_rows: int
    block_cols: int
    thread_rows: int
    thread_cols: int
    steps_per_pass: int = 1

    @property
    def threads(self) -> int:
        return (self.block_rows // self.thread_rows) * self.thread_cols

    @property
    def score_cols_per_thread(self) -> int:
        return self.block_cols // self.thread_cols

    @property
    def out_cols_per_thread(self) -> int:
        return self.head_dim // self.thread_cols

    # Row lengths of the shared tiles. Q and K are stored as they are (a row
    # per query or key), padded by four floats: rows stay 16-byte aligned for
    # 128-bit loads, and neighbouring keys start four banks apart, so that a
    # quarter-warp's loads of eight keys hit eight different groups of banks.
    # (q_row and k_row are PaddedTiles's; TensorCoreConfig pads its rows by 16
    # floats instead, for its fragment loads.) P is stored transposed (a row
    # per key), padded the same way.
    ROW_PADDING = 4  # a class attribute, not a field

    @property
    def p_row(self) -> int:
        return self.block_rows + self.ROW_PADDING

    @cached_property  # read on every call; a frozen dataclass keeps it in __dict__
    def shared_bytes(self) -> int:
        q = self.block_rows * self.q_row  # Q tile, pre-scaled
        k = self.block_cols * self.k_row  # K tile
        v = self.block_cols * self.head_dim  # V tile
        p = self.block_cols * self.p_row  # P^T tile (probabilities)
        return FLOAT32_BYTES * (q + k + v + p)

    def grid(self, batch: int, heads: int, seq: int) -> tuple:
        """Blocks of a launch: one per query tile along x, per head along y, per
        batch along z."""
        return ((seq + self.block_rows - 1) // self.block_rows, heads, batch)


# Tile shapes that fit the 48 KiB of shared memory every CUDA GPU gives a
# block: they run anywhere, and on the simulator. Small ones keep the
# simulator fast (it runs one OS thread per CUDA thread).
PORTABLE_FLASH_CONFIGS = {
    16: FlashConfig(16, block_rows=32, block_cols=32, thread_rows=4, thread_cols=4,
                    steps_per_pass=4),
    32: FlashConfig(32, block_rows=32, block_cols=32, thread_rows=4, thread_cols=8,
                    steps_per_pass=4),
    64: FlashConfig(64, block_rows=64, block_cols=32, thread_rows=8, thread_cols=8),
    128: FlashConfig(128, block_rows=32, block_cols=16, thread_rows=4, thread_cols=8),
}
# steps_per_pass: the most that ptxas 13.5 compiles for sm_90 without spilling
# (tests/test_attention.py checks the tuned shapes): 4 where the kernel has
# registers to spare, 1 (as before the loops were written out) at the shapes
# already at 248-255 registers. On the H100 the d64 shape ran 5.1% faster at
# seq 1024 and 5.5% at 4096 with 4 steps than with 1 (0.514 against 0.542 ms,
# 7.52 against 7.95 ms; the tuning table of
# results/attention-h100-2026-11-26.json, read by steps_per_pass_times), and
# won the sweep.
# The tile shape flash_attention uses per head dimension, tuned on the H100
# (benchmarks/attention.py). For head_dim 64 a block of 128 query rows wins:
# its 67 KiB of tiles live in dynamic shared memory, which GPUs of compute
# capability 8.0 and later give a block (up to 99 to 227 KiB) but older ones
# (a T4: 64 KiB) cannot; there flash_attention falls back to the portable
# shape (see `_config_for`).
FLASH_CONFIGS = {
    **PORTABLE_FLASH_CONFIGS,
    64: FlashConfig(64, block_rows=128, block_cols=32, thread_rows=8, thread_cols=8,
                    steps_per_pass=4),
    # For head_dim 128, 128 query rows and 64 keys per step (164 KiB of tiles, 256
    # threads): 1.29-1.36x SDPA memory-efficient's time at seq 1024 and 4096, causal
    # and not, against 1.65-1.80x for the portable 32 x 16 (H100 probe of 30
    # shapes, benchmarks/NOTES.md).
    128: FlashConfig(128, block_rows=128, block_cols=64, thread_rows=4, thread_cols=8),
}
# Causal masks at short sequences want smaller query tiles: with 128 rows a
# causal head of 512 keys has four query tiles, the last doing four times the
# work of the first, too few blocks to even the work out over the GPU. Per head
# dim, (longest sequence, tile shape) pairs, shortest first; longer causal
# sequences use FLASH_CONFIGS. Chosen by benchmarks/attention.py's causal
# tuning on the H100 (results/attention-h100-2026-11-26.json, causal_tuning:
# ten shapes at seq 512, 1024 and 2048, B4 H16, d64, in turns with SDPA
# memory-efficient): 64 x 64 tiles were fastest at 512 and 1024 (0.97x and
# 1.01x SDPA's time, the kernel called directly), the tuned 128 x 32 with four
# steps a pass at 2048 (0.985x). No shape helped head_dim 128.
CAUSAL_FLASH_CONFIGS = {
    64: ((1024, FlashConfig(64, block_rows=64, block_cols=64, thread_rows=8, thread_cols=16)),
         (2048, FlashConfig(64, block_rows=128, block_cols=32, thread_rows=8, thread_cols=8,
                            steps_per_pass=4))),
}
# The tensor-core kernel (attention.tensor_cores: both tile products in
# 3xTF32 on mma.sync, the way PyTorch's memory-efficient attention computes in
# fp32), which flash_attention runs where the GPU has TF32 tensor cores
# (compute capability 8.0 and later). Tuned on the H100 by
# benchmarks/attention.py in turns with the CUDA-core shapes
# (results/attention-h100-2026-11-26.json, tuning and causal_tuning; the
# probes before it: benchmarks/NOTES.md). Every shape keeps K and V split
# into their TF32 parts in shared memory. For head_dim 64 the fastest was
# eight warps of 16 rows with registers capped at 128 (two blocks a
# multiprocessor; ptxas then spills 40-48 bytes a thread), and under a
# causal mask up to seq 512, four warps with 64 keys a step; head_dim 128
# takes eight warps, uncapped, at every length.
TENSOR_CORE_CONFIGS = {
    64: TensorCoreConfig(64, warps=8, block_cols=32, prefetch=True, split_kv=True,
                         max_registers=128),
    128: TensorCoreConfig(128, warps=8, block_cols=32, prefetch=True, split_kv=True),
}
CAUSAL_TENSOR_CORE_CONFIGS = {
    64: ((512, TensorCoreConfig(64, warps=4, block_cols=64, prefetch=False, split_kv=True)),),
}
# Let the compiler use approximate exp and division on the GPU (the simulator
# ignores it). Chosen by the H100 runs in benchmarks/attention.py.
FAST_MATH = False


def check_config(config: FlashConfig | TensorCoreConfig) -> FlashConfig | TensorCoreConfig:
    """Refuse a tile shape the kernel cannot run (ValueError naming the field)."""
    if isinstance(config, TensorCoreConfig):
        return check_tc_config(config)
    if config.block_rows % config.thread_rows:
        raise ValueError(f"thread_rows must divide block_rows ({config.block_rows}), "
                         f"got thread_rows={config.thread_rows}")
    for name, size in (("block_cols", config.block_cols), ("head_dim", config.head_dim)):
        if size % config.thread_cols:
            raise ValueError(f"thread_cols must divide {name} ({size}), "
                             f"got thread_cols={config.thread_cols}")
    if WARP_SIZE % config.thread_cols:
        # The threads that share a row must sit in one warp for the shuffles.
        raise ValueError(f"thread_cols must divide the warp size (32), got {config.thread_cols}")
    if config.threads % WARP_SIZE or config.threads > 1024:
        raise ValueError(f"threads per block must be a multiple of 32 up to 1024, "
                         f"got {config.threads}")
    for name, size in (("block_rows * head_dim", config.block_rows * config.head_dim),
                       ("block_cols * head_dim", config.block_cols * config.head_dim)):
        if size % config.threads:
            raise ValueError(f"the threads per block ({config.threads}) must divide "
                             f"{name} ({size}), so that each loads the same share")
    if config.threads % config.head_dim and config.head_dim % config.threads:
        raise ValueError(f"threads per block ({config.threads}) and head_dim "
                         f"({config.head_dim}) must divide one another")
    if config.shared_bytes > DYNAMIC_SHARED_LIMIT_BYTES:
        raise ValueError(f"the tiles need {config.shared_bytes} bytes of shared memory; "
                         f"a block may have at most {DYNAMIC_SHARED_LIMIT_BYTES} (and "
                         f"{STATIC_SHARED_LIMIT_BYTES} without opting in to dynamic "
                         f"shared memory)")
    steps = config.steps_per_pass
    if steps not in (1, 2, 4) or config.block_cols % steps or config.head_dim % (4 * steps):
        raise ValueError(f"steps_per_pass must be 1, 2 or 4 and divide block_cols "
                         f"({config.block_cols}) and head_dim / 4 ({config.head_dim // 4}), "
                         f"got {steps!r}")
    if config.thread_rows % 4 or config.out_cols_per_thread % 4:
        # Reads of P and V come four floats at a time (128-bit loads).
        raise ValueError(f"thread_rows and head_dim / thread_cols must be multiples of 4 "
                         f"(the kernel reads P and V four floats at a time), got "
                         f"thread_rows={config.thread_rows}, head_dim / thread_cols="
                         f"{config.out_cols_per_thread}")
    return config
