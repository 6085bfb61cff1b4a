"""What chapter 9 counts: floating-point operations, memory traffic and extra memory.

``attention_flops`` counts the two matrix products; ``naive_hbm_bytes`` and
``flash_hbm_bytes`` the bytes that the naive pipeline and the tiled kernel
must move to and from device memory (HBM); ``flash_shared_bytes`` the
shared-memory (SRAM) bytes the tiled kernel reads and writes, counted from
its loops; ``extra_memory_bytes`` the memory each needs beyond Q, K, V and O.
This is arithmetic on the sizes alone, kept apart from the kernels so that
the chapter's reasoning about where the time goes can be read, and tested,
without them.
"""

from __future__ import annotations

from gpucourse.kernels.attention.arguments import _check_flag, _count
from gpucourse.kernels.attention.config import (FLASH_CONFIGS, SUPPORTED_HEAD_DIMS,
                                                FlashConfig, check_config)
from gpucourse.kernels.attention.limits import FLOAT32_BYTES


def attention_flops(batch, heads, seq, head_dim, causal=False) -> float:
    """Floating-point operations of the forward pass: 4 * batch * heads * seq^2 * head_dim.

    Two matrix products (Q K^T and P V), each 2 * seq^2 * head_dim per head
    (a multiply and an add). The causal mask halves it, the usual convention
    for reporting FLOP/s (Dao 2023). The softmax's exponentials are not counted.
    """
    batch, heads, seq, head_dim = (_count(n, x) for n, x in
                                   (("batch", batch), ("heads", heads), ("seq", seq),
                                    ("head_dim", head_dim)))
    causal = _check_flag("causal", causal)
    flops = 4.0 * batch * heads * seq * seq * head_dim
    return flops / 2 if causal else flops


def naive_hbm_bytes(batch, heads, seq, head_dim, dtype_bytes=FLOAT32_BYTES) -> int:
    """Device-memory bytes the three-kernel pipeline must move, at the least.

    Scores: read Q and K, write S (seq^2). Softmax: read S, write P. P V: read
    P and V, write O. Per head that is 4 seq head_dim + 4 seq^2 elements; each
    input read once (caches may re-read more, never less).
    """
    batch, heads, seq, head_dim, dtype_bytes = (_count(n, x) for n, x in
                                                (("batch", batch), ("heads", heads),
                                                 ("seq", seq), ("head_dim", head_dim),
                                                 ("dtype_bytes", dtype_bytes)))
    per_head = 4 * seq * head_dim + 4 * seq * seq
    return batch * heads * per_head * dtype_bytes


def flash_hbm_bytes(batch, heads, seq, head_dim, block_rows=None,
                    dtype_bytes=FLOAT32_BYTES, causal=False, kv_cached=False) -> int:
    """Device-memory bytes of the tiled kernel.

    Q is read once and O written once (plus 4 bytes of log-sum-exp a row).
    With ``kv_cached=False`` every block of ``block_rows`` query rows reads all
    of K and V again (only the tiles it does not skip when causal): what the
    kernel asks of the memory system, and what reaches HBM when no cache
    helps. With ``kv_cached=True`` K and V are read from HBM once, as when the
    L2 cache holds a head's K and V while its query tiles run (a few MB per
    head, against the H100's 50 MB of L2): the compulsory traffic.
    """
    batch, heads, seq, head_dim, dtype_bytes = (_count(n, x) for n, x in
                                                (("batch", batch), ("heads", heads),
                                                 ("seq", seq), ("head_dim", head_dim),
                                                 ("dtype_bytes", dtype_bytes)))
    causal = _check_flag("causal", causal)
    kv_cached = _check_flag("kv_cached", kv_cached)
    if block_rows is None:
        block_rows = FLASH_CONFIGS[head_dim].block_rows if head_dim in FLASH_CONFIGS else 64
    block_rows = _count("block_rows", block_rows)
    query_tiles = -(-seq // block_rows)
    if kv_cached:
        kv_rows = seq
    elif causal:
        # Query tile t sees keys 0 .. (t + 1) * block_rows - 1 (at most seq).
        kv_rows = sum(min((t + 1) * block_rows, seq) for t in range(query_tiles))
    else:
        kv_rows = query_tiles * seq
    elements = 2 * seq * head_dim + 2 * kv_rows * head_dim
    return batch * heads * (elements * dtype_bytes + seq * FLOAT32_BYTES)


def flash_shared_bytes(batch, heads, seq, head_dim, config: FlashConfig | None = None) -> int:
    """Shared-memory (SRAM) bytes the tiled kernel reads and writes, counted
    from its loops (non-causal): per key tile, the K and V tiles are written
    once; each thread reads head_dim * (TM + CS) values for its scores, writes
    TM * CS probabilities, and reads block_cols * (TM + CO) values for P V."""
    batch, heads, seq, head_dim = (_count(n, x) for n, x in
                                   (("batch", batch), ("heads", heads), ("seq", seq),
                                    ("head_dim", head_dim)))
    if config is None:
        if head_dim not in FLASH_CONFIGS:
            raise ValueError(f"head_dim must be one of {', '.join(map(str, SUPPORTED_HEAD_DIMS))}"
                             f" (or pass a config), got {head_dim}")
        config = FLASH_CONFIGS[head_dim]
    c = check_config(config)
    query_tiles = -(-seq // c.block_rows)
    key_tiles = -(-seq // c.block_cols)
    per_thread = (head_dim * (c.thread_rows + c.score_cols_per_thread)
                  + c.thread_rows * c.score_cols_per_thread
                  + c.block_cols * (c.thread_rows + c.out_cols_per_thread))
    per_tile = 2 * c.block_cols * head_dim + c.threads * per_thread
    q_load = c.block_rows * head_dim
    elements = query_tiles * (q_load + key_tiles * per_tile)
    return batch * heads * elements * FLOAT32_BYTES


def extra_memory_bytes(batch, heads, seq, variant) -> int:
    """Device memory beyond Q, K, V and O: the score matrix for the naive
    pipeline (batch * heads * seq^2 float32), the log-sum-exp for flash."""
    batch, heads, seq = (_count(n, x) for n, x in
                         (("batch", batch), ("heads", heads), ("seq", seq)))
    if variant == "naive":
        return batch * heads * seq * seq * FLOAT32_BYTES
    if variant == "flash":
        return batch * heads * seq * FLOAT32_BYTES
    raise ValueError(f"variant must be 'naive' or 'flash', got {variant!r}")
