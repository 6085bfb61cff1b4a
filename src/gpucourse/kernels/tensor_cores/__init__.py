"""Tensor cores from Numba: warp-wide matrix instructions by hand, and the GEMMs built on them.

numba-cuda has no tensor-core functions, so this package emits the PTX
instructions itself and builds matrix products on them. A warp of 32 threads
multiplies a 16 x 16 matrix A by a 16 x 8 matrix B (both fp16) and adds a 16 x
8 matrix C (fp32) in one instruction, ``mma.sync.aligned.m16n8k16``; no
thread holds a whole matrix, each holds a *fragment* at places fixed by the
PTX ISA. The TF32 instruction ``mma.sync.aligned.m16n8k8`` does the same for
fp32 inputs rounded to TF32 (10 fraction bits). The package reads from the
bottom up:

* ``fragments``: which lane holds which element of each matrix
  (``A_FRAGMENT``, ``B_FRAGMENT``, ``C_FRAGMENT`` and their TF32 twins), as
  numpy data;
* ``intrinsics``: the instructions as Numba functions (``mma_m16n8k16``,
  ``mma_m16n8k8_tf32``, ``cvt_rna_tf32``, with ``round_to_tf32`` the
  rounding in numpy), and their stand-ins on Numba's simulator;
* ``block_tiles``: what the GEMMs share;
* ``hgemm``: the fp16 GEMM, level by level (11.9 and 15.4 TFLOP/s at 4096^3
  on an H100, against cuBLAS fp16's 656);
* ``tf32gemm``: the fp32 GEMM through TF32, in one pass or in three
  (3xTF32, CUTLASS's "fast fp32", for about fp32's accuracy);
* ``moves``: the instructions that move halves fast, ``cp.async`` into shared
  memory and ``ldmatrix`` out of it, and the mma on registers as they leave
  them, in fp16 and bf16;
* ``hgemm_ladder``: HGEMM levels 3 to 7, one kernel factory whose switches
  add large tiles, ldmatrix with a swizzled layout, a cp.async pipeline,
  register double buffering and tuned tiles (22 to 353 TFLOP/s at 4096^3 on
  an H100, 53% of cuBLAS fp16);
* ``half_matmul``: the entry point users call, ``half_matmul(a, b)`` for fp16
  or bf16 torch tensors;
* ``tf32_fast``: ``tf32_matmul(a, b, passes)``, float32 products through TF32
  (one pass) or 3xTF32 (three) on the same machinery.

``attention.tensor_cores`` builds the attention forward pass on the TF32
instruction. Every name that callers use is importable from here, as
``gpucourse.kernels.tensor_cores.hgemm`` and the like, as it was when this
was a single module; the simulator's scratch state (``_SCRATCH``,
``_SCRATCH_TF32``, ``_TF32_CALLS``, ``_TF32_RESULTS``) is the same objects
the stand-ins use, not copies, so clearing it here clears theirs.
"""

from __future__ import annotations

from gpucourse.device import cuda, on_gpu  # noqa: F401 (benchmarks/tensor_cores.py reads TC.cuda)
from gpucourse.kernels.tensor_cores.block_tiles import _check_operands  # noqa: F401
from gpucourse.kernels.tensor_cores.fragments import (  # noqa: F401
    A_FRAGMENT, A_FRAGMENT_TF32, B_FRAGMENT, B_FRAGMENT_TF32, C_FRAGMENT, C_FRAGMENT_TF32, TF32_K,
    TF32_M, TF32_N, WARP, K, M, N)
from gpucourse.kernels.tensor_cores.hgemm import (  # noqa: F401
    BLOCK_K, BLOCK_M, BLOCK_N, LEVELS, SHARED_ROW, THREADS_2, TILES_M, TILES_N, WARPS_M, WARPS_N,
    WARPS_PER_BLOCK, _device_places, _hgemm_kernel, _hgemm_shared_kernel, _launch, hgemm)
from gpucourse.kernels.tensor_cores.half_matmul import half_matmul  # noqa: F401
from gpucourse.kernels.tensor_cores.intrinsics import (  # noqa: F401
    TF32_MASK, cvt_rna_tf32, forget_earlier_calls, mma_m16n8k8_tf32, mma_m16n8k16,
    round_to_tf32)
from gpucourse.kernels.tensor_cores.tf32gemm import (  # noqa: F401
    PASSES, TF32_A_ROW, TF32_B_ROW, TF32_BLOCK_K, TF32_BLOCK_M, TF32_BLOCK_N, TF32_THREADS,
    TF32_TILES_M, TF32_TILES_N, TF32_WARPS_M, TF32_WARPS_N, _TF32GEMM_KERNELS, _launch_tf32,
    tf32gemm)

if not on_gpu():  # the simulator stand-ins' scratch state: the very objects they use
    from gpucourse.kernels.tensor_cores.intrinsics import (  # noqa: F401
        _SCRATCH, _SCRATCH_TF32, _TF32_CALLS, _TF32_RESULTS)
