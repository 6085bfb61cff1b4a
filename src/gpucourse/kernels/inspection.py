"""Kept for old imports; the code lives in gpucourse.grader's ``tracing`` and ``ptx``.

Looking inside a kernel is part of the grader: what each thread reads and
writes (``trace``, ``Trace``, ``CountingArray``) is in
:mod:`gpucourse.grader.tracing`, what a GPU would run (``ptx``, ``facts``,
``expect_structure``, ``kernel_module_source``, ``start_compiler``) in
:mod:`gpucourse.grader.ptx`. ``from gpucourse.kernels import inspection``
still gives every name this module used to hold.
"""

from gpucourse.grader.ptx import (  # noqa: F401 (re-exported)
    ALLOWED_HELPER_MODULES, DEFAULT_CC, KernelSourceError, PTXFacts, expect_structure, facts,
    kernel_module_source, ptx, ptx_facts, start_compiler,
    _argument_types, _compile_message, _Compiler, _compiler, _function_source,
    _is_device_function, _is_jitted, _LOAD, _read_line, _STORE,
)
from gpucourse.grader.tracing import (  # noqa: F401 (re-exported)
    SHOWN_ACCESSES, Access, CountingArray, Trace, stopping_simulated_threads, thread_name, trace,
    _argument_names, _as_dim3, _counting_shared_arrays, _current_thread,
    _device_functions_simulated, _python_load, _python_store, _python_vector_helpers,
    _shared_name, _simulated, _trace_lock,
)
