"""Kept for old imports: the tensor-core forward kernel is now ``gpucourse.kernels.attention.tensor_cores``.

Every name this module used to hold is still importable from here.
"""

from gpucourse.kernels.attention.tensor_cores import (  # noqa: F401 (re-exported)
    ROWS_PER_WARP, TensorCoreConfig, check_tc_config, reset_simulator, flash_forward_tc,
    FLOAT32_BYTES, STATIC_SHARED_LIMIT_BYTES, DYNAMIC_SHARED_LIMIT_BYTES, WARP_SIZE,
    unsigned, unsigned64, _INLINE,
)
