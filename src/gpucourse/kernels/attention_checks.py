"""Kept for old imports; the code lives in :mod:`gpucourse.grader.attention` (the checks),
:mod:`gpucourse.kernels.timing_attention` (timing on a GPU) and
:mod:`gpucourse.chapters.attention_timing` (the committed H100 rows, the table, the plot).

``from gpucourse.kernels import attention_checks as check`` still gives every
name this module used to hold.
"""

from gpucourse.chapters.attention_timing import (  # noqa: F401 (re-exported)
    COMMITTED_VARIANTS, committed_rows, format_table, plot_rows,
    _ROW_FIELDS, _check_rows, _label,
)
from gpucourse.grader.attention import (  # noqa: F401 (re-exported)
    BLOCK_K, BLOCK_Q, EXTRA_SHARED_READS_PER_KEY, FLOAT32_BYTES, HEAD_DIM_MAX,
    LOCAL_FLOATS_MAX, LSE_ABS, LSE_REL, OUT_ABS, OUT_REL, PARAMETERS, SCORE_ROUNDING,
    SHARED_FLOATS_MAX, attention_traffic_bytes, blocks, expect_accesses, expect_attention,
    expect_flash_structure, expect_own_work, key_tiles, launch_shape, random_qkv, run,
    trace_attention,
    _block_rows, _by_block, _case, _check_inputs, _check_scale, _example_arguments, _flag,
    _head_dim, _parameters, _quiet, _shown, _stopping, _whole,
)
from gpucourse.kernels.timing_attention import (  # noqa: F401 (re-exported)
    TIMED_SEQS, WRONG_ABOVE, time_attention, _check_kernels, _sdpa,
)
