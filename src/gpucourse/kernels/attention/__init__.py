"""Weeks 9-10: FlashAttention, forward and backward, in Numba-CUDA.

Self-attention for one head is O = softmax(s Q K^T) V, with Q, K, V of shape
(seq, head_dim) and s = 1 / sqrt(head_dim). This package computes it three
ways, each in a module of its own:

* ``reference``: numpy in float64, the yardstick every test uses, with the
  online softmax and the tiled loop order written out in numpy;
* ``naive``: three Numba kernels that write the whole seq x seq score matrix
  to device memory (scores, row softmax, then P V);
* ``forward`` and ``tensor_cores``: one kernel in the loop order of
  FlashAttention-2 (Dao 2023). A block of threads owns a tile of query rows;
  it streams key and value tiles through shared memory, keeps a running
  maximum and a running sum for each row (the online softmax of Milakov and
  Gimelshein 2018), rescales its output when the maximum grows, and divides
  by the sum once, at the end. The score matrix never leaves the chip.
  ``forward`` computes the two tile products on the CUDA cores, one fp32 FMA
  each; ``tensor_cores`` runs them on the tensor cores in 3xTF32, which is
  what a GPU with TF32 tensor cores gets; ``half`` is FlashAttention-2 in
  fp16 and bf16 on the half-precision tensor cores (mma.sync m16n8k16,
  cp.async, ldmatrix), which half-precision CUDA tensors get there.

Around the kernels: ``limits`` holds the GPU's limits that every kernel
sizes its tiles against; ``shared_tiles`` what the tile shapes and kernels
share about shared memory (padded rows, runs of four-float loads); ``config``
the tile shapes, and the ones tuned on an H100; ``arguments`` the checks
every entry point runs; ``flash`` the entry point ``flash_attention``, which
picks a kernel and a shape and launches it;
``cost`` the counts of operations and bytes that chapter 9 reasons with.

The backward pass (week 10) recomputes the probabilities from the forward's
log-sum-exp: ``backward`` is its entry point ``flash_attention_backward``,
whose four versions on the CUDA cores, each faster than the last, live in
``backward_v12`` and ``backward_v34``, and its two on the tensor cores in
``half_backward`` (version 5, fp16 and bf16) and ``tf32_backward`` (version 6,
float32 in 3xTF32, the default at head dims 64 and 128 on tensor-core GPUs);
``autograd`` wraps forward and backward as one PyTorch operation,
``flash_attention_autograd``, on which chapter 10's model trains.

Inputs are float32 arrays of shape (batch, heads, seq, head_dim) (keys and
values may have another sequence length than the queries: cross-attention;
``flash_attention`` also takes float16 and bfloat16, computing in half
precision on a GPU's tensor cores and in float32 elsewhere):
numpy arrays (the result comes back as numpy), Numba device arrays (the
result stays on the device) or CUDA torch tensors (the result is a torch
tensor on the same device). Importing this package imports Numba (through
``gpucourse.device``) but not torch.

Every name is importable from here (``attention.flash_attention``), as it
was when all of this was one module. The chapter's tables and figures live
in ``gpucourse.chapters.attention`` and are still answered here, imported on
first use.
"""

from gpucourse.device import cuda, on_gpu  # noqa: F401 (re-exported)
from gpucourse.kernels._vector_load import SHARED_ALIGNMENT, load_float4_flat  # noqa: F401
from gpucourse.kernels.attention.limits import (  # noqa: F401 (re-exported)
    unsigned, unsigned64, _INLINE, STATIC_SHARED_LIMIT_BYTES, DYNAMIC_SHARED_LIMIT_BYTES,
    WARP_SIZE, FLOAT32_BYTES,
)
from gpucourse.kernels.attention.tensor_cores import (  # noqa: F401 (re-exported)
    TensorCoreConfig, check_tc_config, flash_forward_tc, reset_simulator,
)
from gpucourse.kernels.attention.config import (  # noqa: F401 (re-exported)
    SUPPORTED_HEAD_DIMS, FlashConfig, PORTABLE_FLASH_CONFIGS, FLASH_CONFIGS,
    CAUSAL_FLASH_CONFIGS, TENSOR_CORE_CONFIGS, CAUSAL_TENSOR_CORE_CONFIGS, FAST_MATH,
    check_config,
)
from gpucourse.kernels.attention.arguments import (  # noqa: F401 (re-exported)
    _kind, _is_c_contiguous, _dtype_name, _check_qkv, _check_flag, _check_scale, _count,
    _check_cross_shapes,
)
from gpucourse.kernels.attention.reference import (  # noqa: F401 (re-exported)
    reference_attention, online_softmax, online_softmax_step, causal_key_tiles, tiled_attention,
    reference_attention_backward,
)
from gpucourse.kernels.attention.naive import (  # noqa: F401 (re-exported)
    NAIVE_TILE, NAIVE_ROWS_PER_BLOCK, _scores_kernel, _softmax_kernel, _pv_kernel,
    naive_attention,
)
from gpucourse.kernels.attention.forward import (  # noqa: F401 (re-exported)
    _flash_kernel, _FLOAT_POINTER, FLASH_SIGNATURE, HALF_DTYPES, FLASH_DTYPES, _bfloat16,
    _IO_CONVERSIONS, _flash_signature, float16, float32, int32, types,
)
from gpucourse.kernels.attention.flash import (  # noqa: F401 (re-exported)
    _config_for, _fitting_config, _launch_flash, _launch_plan, flash_attention,
    _quick_torch_flash, _default_scale2, _torch_for_quick_path, _run_flash, _flat,
    _current_gpu, _has_tf32_tensor_cores, _max_shared_bytes_per_block, _compiled_flash,
    _from_kernel, _to_kernel, core_launch, launch_config,
)
from gpucourse.kernels.attention.cost import (  # noqa: F401 (re-exported)
    attention_flops, naive_hbm_bytes, flash_hbm_bytes, flash_shared_bytes, extra_memory_bytes,
)
from gpucourse.kernels.attention.backward import (  # noqa: F401 (re-exported)
    VERSIONS, FLOAT32_VERSIONS, DEFAULT_VERSION, flash_attention_backward,
)
from gpucourse.kernels.attention.autograd import flash_attention_autograd  # noqa: F401
from gpucourse.kernels.launch import empty_like as _empty_like  # noqa: F401 (re-exported)
from gpucourse.kernels.launch import is_device_array as _is_device_array  # noqa: F401
from gpucourse.kernels.launch import torch_float32 as _torch_float32  # noqa: F401

# The chapter's results readers, tables and figures live with chapter 9
# (gpucourse.chapters.attention), which imports the modules above; they are
# served from here for old imports.
from gpucourse.moved import served_from  # noqa: E402

__getattr__ = served_from(__name__, "gpucourse.chapters.attention", (
    'VARIANT_LABELS', 'VARIANT_COLORS', '_RESULT_FIELDS', 'find_benchmark_results',
    'load_benchmark', '_rows', 'first_oom_seq', 'plot_benchmark', 'plot_tiling', 'plot_traffic',
    'SOURCE_CONFIG', 'NO_RESULTS_MESSAGE', '_fmt', '_ratio_span', 'benchmark_markdown',
    'throughput', 'kernel_ratios', 'kernels_markdown', 'steps_per_pass_times', '_parse_config',
    '_half_cases', 'half_precision_ratios', 'half_precision_markdown', 'backward_times',
    'launch_path_times', 'backward_markdown',
))
