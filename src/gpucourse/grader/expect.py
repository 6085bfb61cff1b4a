"""The value checks a graded test cell makes, written so that a submission cannot fake them.

A test cell that writes ``assert math.isclose(answer(...), 19.6357)`` trusts
three things the student's code controls: the type of the answer (a float
subclass whose ``==`` is always True passes), the comparison function (a
student cell can replace ``math.isclose`` or ``numpy.allclose``), and that
the answer was computed at all (calling the course's own implementation
passes too). The checks here trust none of the first two:

* **Exact types.** A result must be exactly a ``float`` (or numpy float
  scalar), an ``int`` (or numpy integer), or an ``ndarray`` of the stated
  dtype; subclasses are refused. The value is then converted to plain Python
  floats through C methods of built-in types (``float()``, ``ndarray.tolist``)
  that no Python code can override.
* **Own arithmetic.** Comparisons are written out with ``<=`` and ``-`` on
  plain floats, not with ``math`` or ``numpy`` functions that a student cell
  could have replaced.

The third, that the answer is the student's own work, is read from the
function's code in :mod:`gpucourse.grader.own_work`, and watched as it runs
by :mod:`gpucourse.grader.runtime`; every check here first fails an answer
the watch caught. They are separate modules because they read code, not
values. Students import both through
``gpucourse.verify``, the name the test cells use.

Each check raises ``AssertionError`` with a message that says what was
expected, what came back, and what to fix; that is what a student sees under
a failed test. The checks themselves reject bad arguments with ``ValueError``.
"""

from __future__ import annotations

import numpy as np

# Captured at import, before any student code runs in the notebook.
from gpucourse.grader.captured import (_FLOAT_SCALARS, _INT_SCALARS, _float, _int, _isinstance,
                                       _len, _ndarray, _np_array, _np_dtype, _np_float64,
                                       _trace_memory, _trace_reset_peak, _trace_start,
                                       _trace_stop, _tracing, _type, _unravel_index)
# Every check first fails an answer that the run-time watch caught running forbidden code.
from gpucourse.grader.runtime import raise_if_caught


def _check_tolerance(name, value):
    if _type(value) not in (float, int) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return _float(value)


def _plain_float(value, what: str) -> float:
    """``value`` as a Python float, refusing anything but exact float types."""
    kind = _type(value)
    if kind is float or kind in _FLOAT_SCALARS:
        return _float(value)
    if kind is int or kind in _INT_SCALARS:
        return _float(value)
    raise AssertionError(f"{what} must be a float, got {_describe_type(value)}")


def _describe_type(value) -> str:
    kind = _type(value)
    if kind in (float, int, bool) or kind in _FLOAT_SCALARS or kind in _INT_SCALARS:
        return f"{kind.__name__} {value!r}"
    if _isinstance(value, (float, int)):
        return f"an object of type {kind.__name__} (a subclass of {kind.__mro__[1].__name__}; " \
               "return a plain number)"
    return f"an object of type {kind.__name__}"


def _close(actual: float, expected: float, rel: float, abs_: float) -> bool:
    """|actual - expected| <= max(rel * max(|actual|, |expected|), abs_), NaN equal to NaN."""
    if actual != actual or expected != expected:  # NaN
        return actual != actual and expected != expected
    if actual == expected:  # equal infinities too
        return True
    if actual - actual != 0 or expected - expected != 0:  # an infinity against anything else
        return False
    difference = actual - expected
    if difference < 0:
        difference = -difference
    size_a = actual if actual >= 0 else -actual
    size_e = expected if expected >= 0 else -expected
    scale = size_a if size_a > size_e else size_e
    allowed = rel * scale
    if abs_ > allowed:
        allowed = abs_
    return difference <= allowed


def expect_float(value, expected, *, rel: float = 1e-9, abs: float = 0.0,
                 name: str = "the result") -> float:
    """Check that ``value`` is a float within ``rel``/``abs`` of ``expected``.

    Integers are accepted where a float is asked for (``4`` for ``4.0``);
    bools, strings, subclasses and arrays are not. Returns the value as a
    plain float.
    """
    raise_if_caught()
    rel = _check_tolerance("rel", rel)
    abs_ = _check_tolerance("abs", abs)
    expected = _float(expected)
    if _type(value) is bool:
        raise AssertionError(f"{name} must be a float, got the bool {value!r}")
    actual = _plain_float(value, name)
    if not _close(actual, expected, rel, abs_):
        raise AssertionError(f"{name} should be {expected!r} (to a relative {rel:g}), "
                             f"got {actual!r}")
    return actual


def expect_int(value, expected: int, *, name: str = "the result") -> int:
    """Check that ``value`` is an integer (``int`` or numpy integer) equal to ``expected``."""
    raise_if_caught()
    kind = _type(value)
    if not (kind is int or kind in _INT_SCALARS):
        raise AssertionError(f"{name} must be an int, got {_describe_type(value)}")
    actual = _int(value)
    if actual != _int(expected):
        raise AssertionError(f"{name} should be {_int(expected)}, got {actual}")
    return actual


def _flatten(nested) -> list:
    if _type(nested) is list:
        out = []
        for item in nested:
            out.extend(_flatten(item))
        return out
    return [nested]


def expect_array(value, expected, *, dtype=None, rel: float = 1e-9, abs: float = 0.0,
                 name: str = "the result", show: int = 3) -> np.ndarray:
    """Check that ``value`` is an ndarray of ``expected``'s shape, close to it elementwise.

    ``dtype``: the dtype the result must have exactly (for example
    ``np.float32``); ``None`` accepts any float or integer dtype. NaN matches
    NaN and infinities match themselves. The message names the first
    ``show`` elements that differ.
    """
    raise_if_caught()
    rel = _check_tolerance("rel", rel)
    abs_ = _check_tolerance("abs", abs)
    reference = _np_array(expected, dtype=_np_float64)
    if _type(value) is not _ndarray:
        raise AssertionError(f"{name} must be a numpy array (np.ndarray), got "
                             f"{_describe_type(value)}")
    if dtype is not None:
        wanted = _np_dtype(dtype)
        if not value.dtype == wanted:
            raise AssertionError(f"{name} must have dtype {wanted}, got {value.dtype}")
    elif value.dtype.kind not in "fiu":
        raise AssertionError(f"{name} must hold numbers, got dtype {value.dtype}")
    if tuple(value.shape) != tuple(reference.shape):
        raise AssertionError(f"{name} should have shape {tuple(reference.shape)}, "
                             f"got {tuple(value.shape)}")
    actual = _flatten(_ndarray.tolist(_ndarray.astype(value, _np_float64)))
    wanted_values = _flatten(reference.tolist())
    wrong = []
    for position in range(_len(wanted_values)):
        if not _close(_float(actual[position]), wanted_values[position], rel, abs_):
            wrong.append(position)
    if wrong:
        shape = tuple(reference.shape)
        shown = []
        for position in wrong[:show]:
            index = tuple(_int(i) for i in _unravel_index(position, shape)) if shape else ()
            shown.append(f"at {index}: expected {wanted_values[position]!r}, "
                         f"got {actual[position]!r}")
        raise AssertionError(f"{name} differs from the reference in {_len(wrong)} of "
                             f"{_len(wanted_values)} elements; " + "; ".join(shown))
    return value


_PLAIN_CONTAINERS = (list, tuple, dict, set, frozenset)


def _plain(value, expected, where: str) -> None:
    """Raise AssertionError unless ``value`` is ``expected`` built of exact plain types."""
    wanted = _type(expected)
    kind = _type(value)
    if wanted is bool or expected is None:
        if kind is not wanted or value is not expected:
            raise AssertionError(f"{where} should be {expected!r}, got {_describe_type(value)}")
        return
    if wanted is int:
        if not (kind is int or kind in _INT_SCALARS) or _int(value) != expected:
            raise AssertionError(f"{where} should be the int {expected!r}, got "
                                 f"{_describe_type(value)}")
        return
    if wanted is float:
        actual = _plain_float(value, where) if kind is not bool else None
        if actual is None or not _close(actual, expected, 1e-12, 0.0):
            raise AssertionError(f"{where} should be {expected!r}, got {_describe_type(value)}")
        return
    if wanted is str:
        if kind is not str:
            raise AssertionError(f"{where} should be the string {expected!r}, got "
                                 f"{_describe_type(value)}")
        if not str.__eq__(value, expected):
            raise AssertionError(f"{where} should be {expected!r}, got {value!r}")
        return
    if wanted not in _PLAIN_CONTAINERS:
        raise ValueError(f"expected must be built of bool, int, float, str, None, list, tuple, "
                         f"dict and set, got {wanted.__name__} at {where}")
    if kind is not wanted:
        raise AssertionError(f"{where} must be a {wanted.__name__}, got {_describe_type(value)}")
    if wanted is dict:
        for key in value:
            if _type(key) not in (str, int, tuple, float, bool):
                raise AssertionError(f"{where} has a key of type {_type(key).__name__}")
        if _len(value) != _len(expected) or not all(key in value for key in expected):
            raise AssertionError(f"{where} should have the keys {sorted(expected, key=repr)}, "
                                 f"got {sorted(value, key=repr)}")
        for key in expected:
            _plain(value[key], expected[key], f"{where}[{key!r}]")
        return
    if wanted in (set, frozenset):
        for item in value:
            if _type(item) not in (str, int, tuple, float, bool):
                raise AssertionError(f"{where} holds an item of type {_type(item).__name__}")
        if not (_len(value) == _len(expected) and all(item in value for item in expected)):
            raise AssertionError(f"{where} should be {sorted(expected, key=repr)}, "
                                 f"got {sorted(value, key=repr)}")
        return
    if _len(value) != _len(expected):
        raise AssertionError(f"{where} should have {_len(expected)} items, got {_len(value)}")
    for position in range(_len(expected)):
        _plain(value[position], expected[position], f"{where}[{position}]")


def expect_equal(value, expected, *, name: str = "the result"):
    """Check that ``value`` equals ``expected``, a structure of lists, tuples, dicts, sets,
    strings, ints, floats, bools and None, with the same exact types at every level.

    An int may come as a numpy integer and a float as a numpy float (floats
    agree to a relative 1e-12); subclasses and look-alikes are refused, so an
    object whose ``==`` is always True fails. Returns ``value``.
    """
    raise_if_caught()
    _plain(value, expected, name)
    return value


def expect_raises(function, *args, error=ValueError, naming: str = "", **kwargs) -> None:
    """Check that ``function(*args, **kwargs)`` raises ``error`` whose message names ``naming``.

    Any other exception propagates as it is (a stub's NotImplementedError
    fails loudly); returning normally fails.
    """
    raise_if_caught()
    if not (_isinstance(error, type) and issubclass(error, BaseException)):
        raise ValueError(f"error must be an exception class, got {error!r}")
    try:
        function(*args, **kwargs)
    except error as raised:
        if naming and naming not in str(raised):
            raise AssertionError(f"{error.__name__} raised, but its message {str(raised)!r} "
                                 f"does not name {naming!r}") from None
        return
    raise AssertionError(f"{getattr(function, '__name__', function)}"
                         f"{args!r} should raise {error.__name__}"
                         + (f" naming {naming!r}" if naming else "") + ", and returned normally")


def peak_allocated_bytes(function, *args, **kwargs):
    """Call ``function(*args, **kwargs)`` while Python's ``tracemalloc`` records
    allocations (NumPy reports its arrays' memory to it); return (its result,
    the most bytes it held allocated at any moment beyond what existed
    before the call). The tracemalloc functions used were captured when this
    module was imported, so a notebook cell that replaces them changes
    nothing here."""
    raise_if_caught()
    if not callable(function):
        raise ValueError(f"function must be callable, got {_describe_type(function)}")
    was_tracing = _tracing()
    if not was_tracing:
        _trace_start()
    try:
        _trace_reset_peak()
        before = _trace_memory()[0]
        result = function(*args, **kwargs)
        peak = _trace_memory()[1] - before
    finally:
        if not was_tracing:
            _trace_stop()
    return result, _int(peak)
