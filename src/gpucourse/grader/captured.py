"""The built-ins and NumPy functions the grader uses, captured before any student code runs.

A notebook cell can rebind whatever it can name: ``builtins.float``,
``numpy.linalg.lstsq``, ``tracemalloc.get_traced_memory``. The grader's
checks call the objects captured here instead, taken when the grader was
first imported (by the test cells' first import, before the student's code
has run), so a cell that replaces them changes nothing in the grading. They
are one module so that every check module uses the same captures instead of
keeping a copy of its own; the leading underscores say that they are the
grader's, not for test cells.
"""

import builtins
import tracemalloc

import numpy as np

_float = builtins.float
_int = builtins.int
_isinstance = builtins.isinstance
_type = builtins.type
_len = builtins.len
_ndarray = np.ndarray
_np_array = np.array
_np_dtype = np.dtype
_np_float64 = np.float64
_unravel_index = np.unravel_index
_lstsq = np.linalg.lstsq
_FLOAT_SCALARS = (np.float64, np.float32, np.float16)
_INT_SCALARS = (np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8)
_trace_start = tracemalloc.start
_trace_stop = tracemalloc.stop
_trace_memory = tracemalloc.get_traced_memory
_trace_reset_peak = tracemalloc.reset_peak
_tracing = tracemalloc.is_tracing

__all__ = ["_FLOAT_SCALARS", "_INT_SCALARS", "_float", "_int", "_isinstance", "_len", "_lstsq",
           "_ndarray", "_np_array", "_np_dtype", "_np_float64", "_trace_memory",
           "_trace_reset_peak", "_trace_start", "_trace_stop", "_tracing", "_type",
           "_unravel_index"]
