"""Kept for old imports: the backward pass now lives in ``gpucourse.kernels.attention``.

``flash_attention_backward`` is in ``attention.backward`` (the entry point),
its versions in ``attention.backward_v12`` and ``attention.backward_v34``,
``reference_attention_backward`` in ``attention.reference``, the PyTorch
operation ``flash_attention_autograd`` in ``attention.autograd``, and the
chapter's tables of the backward runs in ``gpucourse.chapters.attention``.
Every name this module used to hold is still importable from here. To switch
a setting such as ``QUICK_TORCH_PATH``, set it on ``attention.backward``, the
module that reads it.
"""

from gpucourse.kernels.attention.backward_v12 import (  # noqa: F401 (re-exported)
    BLOCK, _kernels, TILED_CONFIGS, check_tiled_config, _tiled_kernels,
)
from gpucourse.kernels.attention.backward_v34 import (  # noqa: F401 (re-exported)
    TILED_CONFIGS_V3, V3_SWEEP, shared_bytes_v3, check_tiled_config_v3, TILED_CONFIGS_V4,
    V3_SIGNATURES, v3_signature, _tiled_kernel_v4, _tiled_kernels_v3, _v3_functions,
    _v4_functions, _tiled_functions,
)
from gpucourse.kernels.attention.backward import (  # noqa: F401 (re-exported)
    _row_dot_kernel, VERSIONS, DEFAULT_VERSION, QUICK_TORCH_PATH, _zero_kernel, _rounding_kernel,
    flash_attention_backward, _opt_in, _launch_v3, _launch_v4, _quick_v4_torch, _quick_v4_plan,
)
from gpucourse.kernels.attention.reference import reference_attention_backward  # noqa: F401
from gpucourse.kernels.attention.autograd import (  # noqa: F401 (re-exported)
    _torch_function, _kernel_side, _torch_side, flash_attention_autograd,
)
from gpucourse.moved import served_from

__getattr__ = served_from(__name__, "gpucourse.chapters.attention", (
    'backward_times', 'launch_path_times', 'backward_markdown',
))
