"""Argument checks shared by every module of the course.

Each returns the value converted (a float, an int, or a float array) or raises
ValueError naming the argument, what it accepts and what it got, e.g.
``ValueError("workers must be >= 1, got 0")``. Bools, strings, None, NaN and
infinities are refused as numbers.
"""

from __future__ import annotations

import numbers

import numpy as np


def describe(value) -> str:
    """How a bad value is shown in an error message."""
    if isinstance(value, (list, tuple, np.ndarray)):
        flat = np.asarray(value).ravel()
        return f"an array containing {flat[:5].tolist()}{'...' if flat.size > 5 else ''}"
    return repr(value)


def real(name, value, *, array_ok=False):
    """Return value as a float (or a float array when array_ok), refusing
    bools, strings, None, NaN and infinities."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a number, got the bool {value!r}")
    if array_ok and isinstance(value, (list, tuple, np.ndarray)):
        array = np.asarray(value)
        if array.dtype.kind not in "iuf":
            raise ValueError(f"{name} must be a number or an array of numbers, "
                             f"got an array of dtype {array.dtype}")
        x = array.astype(float)
    elif isinstance(value, numbers.Real):
        x = float(value)
    else:
        accepted = "a number or an array of numbers" if array_ok else "a number"
        raise ValueError(f"{name} must be {accepted}, got {value!r}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite (not NaN or infinite), got {describe(value)}")
    return x


def at_least(name, value, minimum, *, array_ok=False):
    x = real(name, value, array_ok=array_ok)
    if np.any(x < minimum):
        raise ValueError(f"{name} must be >= {minimum}, got {describe(value)}")
    return x


def positive(name, value, *, array_ok=False):
    x = real(name, value, array_ok=array_ok)
    if np.any(x <= 0):
        raise ValueError(f"{name} must be > 0, got {describe(value)}")
    return x


def fraction(name, value, *, open_at_zero=False):
    x = real(name, value)
    if not (0 < x <= 1 if open_at_zero else 0 <= x <= 1):
        accepted = "in (0, 1]" if open_at_zero else "in [0, 1]"
        raise ValueError(f"{name} must be {accepted}, got {value!r}")
    return x


def count(name, value) -> int:
    """A whole number >= 1 (a float such as 4096.0 is accepted)."""
    x = real(name, value)
    if x < 1 or not x.is_integer():
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(x)


def whole_at_least(name, value, minimum) -> int:
    """A whole number >= `minimum` (a float such as 4096.0 is accepted)."""
    x = real(name, value)
    if x < minimum or not x.is_integer():
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(x)


def finite_array(name, value, ndim=None, *, min_ndim=None):
    """value as a finite float64 array, with `ndim` dimensions if given."""
    if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, str):
        raise ValueError(f"{name} must be an array of numbers, got {value!r}")
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be an array of numbers, got an array of dtype {array.dtype}")
    if ndim is not None and array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {array.shape}")
    if min_ndim is not None and array.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {array.shape}")
    array = array.astype(np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return array


def whole(name, value, least: int = 1) -> int:
    """An integer >= `least`, given as one: a Python or NumPy int (no float,
    however whole, and no bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return int(value)


def whole_seed(seed) -> int:
    """A random seed: a whole number >= 0 (bools refused)."""
    return whole("seed", seed, 0)


def scalar_or_array(x):
    """Give back a plain float for scalar results, an ndarray otherwise."""
    return float(x) if np.ndim(x) == 0 else x
