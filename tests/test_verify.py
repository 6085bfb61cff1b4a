"""The test-cell checks resist the cheats a student would try.

Each cheat is tried as a student would write it in a cell before the test
cell: an answer whose type always compares equal, a replaced math.isclose or
numpy.allclose, a call to the course's own implementation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpucourse import verify
from gpucourse.hpc import amdahl_speedup


class AlwaysEqual(float):
    def __eq__(self, other):
        return True

    def __le__(self, other):
        return True

    __hash__ = float.__hash__


def test_expect_float_accepts_plain_numbers_close_enough():
    assert verify.expect_float(19.6357, 19.6357) == 19.6357
    assert verify.expect_float(np.float64(0.1 + 0.2), 0.3, rel=1e-12) == pytest.approx(0.3)
    assert verify.expect_float(4, 4.0) == 4.0
    assert verify.expect_float(float("nan"), float("nan")) != 0  # NaN where NaN is expected
    verify.expect_float(float("inf"), float("inf"))
    verify.expect_float(1e-12, 0.0, abs=1e-9)


def test_expect_float_says_what_was_expected():
    with pytest.raises(AssertionError, match=r"should be 2\.0 .* got 2\.5"):
        verify.expect_float(2.5, 2.0)
    with pytest.raises(AssertionError, match="got inf"):
        verify.expect_float(float("inf"), 1.0)
    with pytest.raises(AssertionError):
        verify.expect_float(float("nan"), 1.0)


def test_an_always_equal_float_subclass_earns_nothing():
    cheat = AlwaysEqual(0.0)
    assert cheat == 19.6357  # what fooled `assert answer == expected`
    with pytest.raises(AssertionError, match="subclass"):
        verify.expect_float(cheat, 19.6357)
    with pytest.raises(AssertionError, match="must be an int"):
        verify.expect_int(cheat, 14)


def test_other_types_are_refused_with_their_name():
    for bad in (True, "19.6", [19.6], np.array(19.6), None):
        with pytest.raises(AssertionError, match="must be a float"):
            verify.expect_float(bad, 19.6)
    with pytest.raises(AssertionError, match="must be an int"):
        verify.expect_int(14.0, 14)
    assert verify.expect_int(np.int64(14), 14) == 14


def test_patched_comparisons_change_nothing(monkeypatch):
    # A student cell that replaces the usual comparison functions.
    monkeypatch.setattr(math, "isclose", lambda *a, **k: True)
    monkeypatch.setattr(np, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(np, "isclose", lambda *a, **k: np.array(True))
    monkeypatch.setattr(np, "array_equal", lambda *a, **k: True)
    with pytest.raises(AssertionError):
        verify.expect_float(1.0, 2.0)
    with pytest.raises(AssertionError, match="1 of 3 elements"):
        verify.expect_array(np.array([1.0, 2.0, 4.0]), [1.0, 2.0, 3.0])


def test_expect_array_checks_type_dtype_shape_and_values():
    good = np.array([[1.0, 2.0], [3.0, np.nan]], dtype=np.float32)
    verify.expect_array(good, [[1, 2], [3, np.nan]], dtype=np.float32)
    with pytest.raises(AssertionError, match="dtype float32"):
        verify.expect_array(good.astype(np.float64), good, dtype=np.float32)
    with pytest.raises(AssertionError, match=r"shape \(4,\)"):
        verify.expect_array(good, np.zeros(4))
    with pytest.raises(AssertionError, match="numpy array"):
        verify.expect_array([[1.0, 2.0], [3.0, np.nan]], good)

    class Sneaky(np.ndarray):
        def __eq__(self, other):
            return np.ones(self.shape, dtype=bool)
    with pytest.raises(AssertionError, match="numpy array"):
        verify.expect_array(np.zeros(3).view(Sneaky), [1.0, 2.0, 3.0])
    with pytest.raises(AssertionError, match=r"at \(1, 0\): expected 3\.0, got 5\.0"):
        verify.expect_array(np.array([[1.0, 2.0], [5.0, 4.0]]), [[1, 2], [3, 4]])


def test_expect_raises():
    verify.expect_raises(amdahl_speedup, 1.5, 4, naming="parallel_fraction")
    with pytest.raises(AssertionError, match="does not name 'workers'"):
        verify.expect_raises(amdahl_speedup, 1.5, 4, naming="workers")
    with pytest.raises(AssertionError, match="returned normally"):
        verify.expect_raises(amdahl_speedup, 0.5, 4)
    with pytest.raises(NotImplementedError):  # a stub fails loudly, not quietly
        verify.expect_raises(_stub)
    with pytest.raises(ValueError, match="error must be an exception class"):
        verify.expect_raises(amdahl_speedup, 0.5, 4, error="ValueError")


def _stub(*args):
    raise NotImplementedError()


# What a student might write in place of the work.
from gpucourse import hpc as course_hpc  # noqa: E402
from gpucourse.hpc import amdahl_speedup as course_amdahl  # noqa: E402


def cheat_direct(p, n):
    return course_amdahl(p, n)


def cheat_module(p, n):
    return course_hpc.amdahl_speedup(p, n)


def cheat_import(p, n):
    from gpucourse.hpc import amdahl_speedup as inner
    return inner(p, n)


def cheat_deep(p, n):
    return _helper(p, n)


def _helper(p, n):
    return cheat_module(p, n)


def honest(p, n):
    return 1.0 / ((1.0 - p) + p / n)


@pytest.mark.parametrize("cheat", [cheat_direct, cheat_module, cheat_import, cheat_deep,
                                   course_amdahl])
def test_answers_that_call_the_course_fail(cheat):
    with pytest.raises(AssertionError, match="gpucourse"):
        verify.expect_own_work(cheat)


def test_honest_answers_pass_own_work_check():
    verify.expect_own_work(honest)
    assert verify.library_uses(honest) == []
    verify.expect_own_work(cheat_module, allowed=("gpucourse.hpc",))


def test_library_uses_rejects_bad_arguments():
    with pytest.raises(ValueError, match="forbidden and allowed"):
        verify.library_uses(honest, forbidden="gpucourse")
    with pytest.raises(ValueError, match="rel must be"):
        verify.expect_float(1.0, 1.0, rel=-1)


x = 3.0  # a notebook global whose name is also an attribute name below


def uses_attribute_x(point):
    return point.x + 1


def test_attribute_names_are_not_taken_for_globals():
    assert "x" not in verify.global_names(uses_attribute_x.__code__)
    assert verify.library_uses(uses_attribute_x) == []
    assert "gpucourse.hpc" in verify.global_names(cheat_import.__code__)


class AlwaysEqualList(list):
    def __eq__(self, other):
        return True


class AlwaysEqualStr(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_expect_equal_accepts_the_same_plain_structure():
    expected = [("F", 0), ("B", 0)]
    assert verify.expect_equal([("F", 0), ("B", np.int64(0))], expected) is not None
    verify.expect_equal({"bound": "memory", "rate": 2.5, "ok": True, "n": 3},
                        {"bound": "memory", "rate": 2.5, "ok": True, "n": 3})
    verify.expect_equal({"gradients", "parameters"}, {"parameters", "gradients"})
    verify.expect_equal(None, None)


@pytest.mark.parametrize("value, expected, message", [
    ([("F", 0), ("B", 1)], [("F", 0), ("B", 0)], r"\[1\]\[1\] should be the int 0"),
    ([["F", 0]], [("F", 0)], r"\[0\] must be a tuple"),
    ({"bound": "compute"}, {"bound": "memory"}, "should be 'memory'"),
    ({"a": 1}, {"a": 1, "b": 2}, "keys"),
    ({"x"}, {"x", "y"}, "should be"),
    (1, True, "should be True"),
    (1.0, 1, "should be the int 1"),
    ((1, 2), (1, 2, 3), "3 items"),
])
def test_expect_equal_names_the_difference(value, expected, message):
    with pytest.raises(AssertionError, match=message):
        verify.expect_equal(value, expected)


def test_always_equal_containers_and_strings_earn_nothing():
    cheat = AlwaysEqualList()
    assert cheat == [("F", 0)]
    with pytest.raises(AssertionError, match="must be a list"):
        verify.expect_equal(cheat, [("F", 0)])
    with pytest.raises(AssertionError, match="string"):
        verify.expect_equal([AlwaysEqualStr("B")], ["F"])
    with pytest.raises(AssertionError, match="key of type"):
        verify.expect_equal({AlwaysEqualStr("x"): 1}, {"bound": 1})


def test_expect_equal_refuses_an_expected_value_it_cannot_compare():
    with pytest.raises(ValueError, match="expected must be built of"):
        verify.expect_equal(np.zeros(2), np.zeros(2))


def test_peak_allocated_bytes_sees_a_whole_matrix_and_not_a_loop_of_small_ones(monkeypatch):
    import tracemalloc

    import numpy as np

    from gpucourse.verify import peak_allocated_bytes

    result, peak = peak_allocated_bytes(lambda n: float(np.ones((n, n)).sum()), 512)
    assert result == 512.0 * 512 and peak >= 512 * 512 * 8  # one 2 MiB matrix, held
    _, small = peak_allocated_bytes(lambda n: [float(np.ones(n).sum()) for _ in range(100)], 512)
    assert small < 64 * 1024  # a hundred 4 KiB rows, never held together
    # A notebook cell that replaces tracemalloc's functions changes nothing here.
    monkeypatch.setattr(tracemalloc, "get_traced_memory", lambda: (0, 0))
    _, peak = peak_allocated_bytes(lambda: np.ones((256, 256)))
    assert peak >= 256 * 256 * 8
    with pytest.raises(ValueError, match="function must be callable"):
        peak_allocated_bytes(3)
