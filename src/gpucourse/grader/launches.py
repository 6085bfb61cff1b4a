"""What every kernel check shares: checked arguments, how many blocks cover a size,
random inputs, and a launch that stays quiet and leaves no thread behind.

The puzzles, the SGEMM ladder and the FlashAttention kernels are graded by
three modules (:mod:`gpucourse.grader.puzzles`, :mod:`gpucourse.grader.sgemm`
and :mod:`gpucourse.grader.attention`), each knowing its own exercises'
contract. What they all do the same way around a launch is here, once: the
check of a whole-number argument, the ceiling division that sizes a grid, the
float32 random vectors and matrices they run the kernels on, and the two
guards every launch of a student's kernel runs under.
"""

from __future__ import annotations

import math
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
    no thread running behind it; on a GPU, nothing to do."""
    return nullcontext() if on_gpu() else tracing.stopping_simulated_threads()


@contextmanager
def _quiet():
    """No warnings for 0 * Inf: the simulator's threads multiply NumPy scalars, which warn
    (a GPU does not). The filter is process-wide, so it covers the simulator's threads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
