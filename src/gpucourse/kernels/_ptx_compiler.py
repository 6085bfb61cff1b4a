"""Kept for old imports; the code lives in :mod:`gpucourse.grader.ptx_compiler`.

The compiler process now runs as ``python -m gpucourse.grader.ptx_compiler``.
"""

from gpucourse.grader.ptx_compiler import (  # noqa: F401 (re-exported)
    _DeferredCuda, _TargetDevice, _compile_without_a_gpu, _warm_up, compile_request, main,
    numba_type,
)
