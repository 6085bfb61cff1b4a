"""Kept for old imports; the code lives in :mod:`gpucourse.grader.sgemm`.

``from gpucourse.kernels import sgemm_checks as check`` still gives every
name of chapter 8's SGEMM checks.
"""

from gpucourse.grader.sgemm import (  # noqa: F401 (re-exported)
    BLOCK_SIDE, CONFIG_FIELDS, LEVELS, STRUCTURE, TILE, TUNING_TOLERANCE, REL, ABS,
    RecordingFactory, access_limits, blocks, expect_accesses, expect_level_structure,
    expect_own_work, expect_product, launch_shape, random_matrix, run, threads_per_block,
    trace_level,
    _RecordedKernel, _config, _example_arguments, _expect_own_element, _expect_patch, _inputs,
    _level, _make_patch_kernel, _parameters, _quiet, _stopping, _whole, _why,
)
