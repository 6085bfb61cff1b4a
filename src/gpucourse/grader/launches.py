"""What every kernel check shares: checked arguments, how many blocks cover a size,
random inputs, and a launch that stays quiet and leaves no thread behind.

The puzzles, the SGEMM ladder and the FlashAttention kernels are graded by
three modules (:mod:`gpucourse.grader.puzzles`, :mod:`gpucourse.grader.sgemm`
and :mod:`gpucourse.grader.attention`), each knowing its own exercises'
contract. What they all do the same way around a launch is here, once: the
check of a whole-number argument, the ceiling division that sizes a grid, the
float32 random vectors and matrices they run the kernels on, the two
guards every launch of a student's kernel runs under, and the naming of an
out-of-bounds index: on the simulator a plain launch reports only NumPy's
``index 20 is out of bounds for axis 1 with size 20``, so :func:`traced` and
:func:`naming_out_of_bounds` say which array, which thread and which block.
"""

from __future__ import annotations

import math
import re
import warnings
from contextlib import contextmanager, nullcontext

import numpy as np

from gpucourse.checks import whole as _whole
from gpucourse.device import on_gpu
from gpucourse.grader import tracing


def blocks(size: int, per_block: int) -> int:
    """How many blocks of ``per_block`` threads cover ``size`` elements (the ceiling);
    also how many tiles of ``per_block`` cover ``size``."""
    size = _whole("size", size)
    per_block = _whole("per_block", per_block)
    return (size + per_block - 1) // per_block


def random_vector(n: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """``n`` float32 values drawn from a normal distribution of standard deviation ``scale``."""
    n = _whole("n", n)
    seed = _whole("seed", seed, 0)
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def random_matrix(rows: int, cols: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """A ``rows x cols`` float32 matrix of normal values of standard deviation ``scale``
    (standard normal by default)."""
    rows = _whole("rows", rows)
    cols = _whole("cols", cols)
    return random_vector(rows * cols, seed, scale).reshape(rows, cols)


def _stopping():
    """On the simulator, a kernel interrupted mid-run (a cell that took too long) leaves
    no thread running behind it; on a GPU, nothing to do. The sanitizer
    (grader.sanitizer) watches the traced launch that every kernel check makes
    before its value checks (tracing.trace), so these plain launches do without
    its cost (tracing.simulated_launch adds it where a check has no traced launch)."""
    return nullcontext() if on_gpu() else tracing.stopping_simulated_threads()


@contextmanager
def _quiet():
    """No warnings for 0 * Inf: the simulator's threads multiply NumPy scalars, which warn
    (a GPU does not). The filter is process-wide, so it covers the simulator's threads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


# The simulator puts "tid=[3, 0, 0] ctaid=[1, 0, 0]: " before a thread's error;
# a traced array's own message names the block and the thread in words.
_SIMULATOR_PREFIX = re.compile(r"^(tid=\[[^\]]*\] ctaid=\[[^\]]*\]:? ?)+")


def _out_of_bounds(kernel, error: IndexError) -> AssertionError:
    """The AssertionError a student sees for an index outside an array."""
    name = getattr(getattr(kernel, "py_func", kernel), "__name__", "the kernel")
    detail = _SIMULATOR_PREFIX.sub("", str(error))
    return AssertionError(f"{name} used an index outside an array: {detail}. On a GPU this "
                          "reads garbage or crashes")


def traced(kernel, grid, block, *args) -> tracing.Trace:
    """:func:`gpucourse.grader.tracing.trace`, with an index outside an array failing as an
    AssertionError that names the array (the kernel's parameter, or its shared array),
    the block and the thread."""
    try:
        return tracing.trace(kernel, grid, block, *args)
    except IndexError as error:
        raise _out_of_bounds(kernel, error) from None


@contextmanager
def naming_out_of_bounds(kernel, grid, block, *args):
    """Around a plain launch of ``kernel[grid, block]`` on ``args`` (host arrays, copied):
    on the simulator, an IndexError inside is raised again as an AssertionError naming
    the array, the block and the thread, found by running the launch once more with its
    arrays counted (:func:`traced`). A run that does not repeat the error (a race) keeps
    the simulator's own message, with its thread and block."""
    try:
        yield
    except IndexError as error:
        if on_gpu():
            raise
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        try:
            with _quiet():
                traced(kernel, grid, block, *copies)
        except AssertionError as named:
            raise named from None
        except Exception:
            pass
        raise _out_of_bounds(kernel, error) from None
