"""The run-time own-work check sees what a function runs, however the call was hidden.

``expect_own_work(f)`` first reads the names ``f`` uses, then watches ``f``
as the rest of the test calls it (gpucourse.grader.runtime). These tests call
it the way a test cell does, with answers written in this file as a student
writes them in a notebook: honest ones pass; the course's code reached by a
hidden name fails as it runs, naming what ran, whether or not the answer
catches the failure, switches the watching off, or launches a library kernel.
The whole nbgrader round trip of these cheats is in test_dynamic_import_cheats.
"""

from __future__ import annotations

import functools
import importlib
import sys

import numpy as np
import pytest

from gpucourse.grader import runtime
from gpucourse.verify import expect_array, expect_float, expect_own_work

HIDDEN = r"while the grader called \w+, it ran gpucourse\.hpc\.speedup\.amdahl_speedup"


def honest(parallel_fraction, workers):
    return 1 / ((1 - parallel_fraction) + parallel_fraction / workers)


def through_import_module(parallel_fraction, workers):
    return importlib.import_module("gpucourse.hpc").amdahl_speedup(parallel_fraction, workers)


def through_sys_modules(parallel_fraction, workers):
    return sys.modules["gpucourse.hpc"].amdahl_speedup(parallel_fraction, workers)


def catching(parallel_fraction, workers):
    """Calls the course's version and swallows whatever the grader raises."""
    try:
        return sys.modules["gpucourse.hpc"].amdahl_speedup(parallel_fraction, workers)
    except BaseException:
        return honest(parallel_fraction, workers)


def switching_off(parallel_fraction, workers):
    sys.setprofile(None)
    if hasattr(sys, "monitoring"):
        for tool in range(6):
            sys.monitoring.set_events(tool, 0)
    return sys.modules["gpucourse.hpc"].amdahl_speedup(parallel_fraction, workers)


def _helper(parallel_fraction, workers):
    return sys.modules["gpucourse.hpc"].amdahl_speedup(parallel_fraction, workers)


def through_a_helper(parallel_fraction, workers):
    """The notebook's own helper makes the call: it runs on the answer's behalf too."""
    return _helper(parallel_fraction, workers)


@pytest.fixture(autouse=True)
def fresh_watch():
    runtime.stop()
    yield
    runtime.stop()


def test_an_honest_answer_passes_and_the_watching_ends_with_the_test():
    def graded_cell():
        expect_own_work(honest)
        expect_float(honest(0.5, 2), 4 / 3)
        expect_array(honest(0.5, np.array([1.0, 2.0])), [1.0, 4 / 3])
        assert runtime.caught() == []
        assert runtime._WATCH.on

    graded_cell()
    assert not runtime._WATCH.on and runtime._WATCH.watched == {}
    assert sys.getprofile() is None


@pytest.mark.parametrize("answer", [through_import_module, through_sys_modules, catching,
                                    through_a_helper])
def test_the_course_code_reached_by_a_hidden_name_fails_as_it_runs(answer):
    expect_own_work(answer)  # the names alone show nothing
    with pytest.raises(AssertionError, match=HIDDEN):
        answer(0.5, 2)
    with pytest.raises(AssertionError, match=HIDDEN):  # and every later check fails too
        expect_float(4 / 3, 4 / 3)


def test_switching_the_watching_off_is_itself_caught():
    expect_own_work(switching_off)
    value = switching_off(0.5, 2)  # the watching is off: nothing raises here ...
    with pytest.raises(AssertionError, match=r"sys\.setprofile|sys\.monitoring"):
        expect_float(value, 4 / 3)  # ... but the next check fails


def test_a_helper_the_grader_passes_in_may_run_the_course_code():
    from gpucourse.hpc import amdahl_speedup

    def apply(function, parallel_fraction, workers):
        return function(parallel_fraction, workers)

    def apply_default(parallel_fraction, workers, function=amdahl_speedup):
        return function(parallel_fraction, workers)

    expect_own_work(apply)
    expect_float(apply(amdahl_speedup, 0.5, 2), 4 / 3)
    expect_own_work(apply_default)  # a default is the student's choice, not the grader's
    with pytest.raises(AssertionError, match="amdahl_speedup"):
        apply_default(0.5, 2)


def test_a_wrapped_course_function_is_refused_at_once():
    from gpucourse.hpc import amdahl_speedup

    with pytest.raises(AssertionError, match="write it yourself"):
        expect_own_work(functools.partial(amdahl_speedup))
    with pytest.raises(AssertionError, match="must be a function written in the notebook"):
        expect_own_work(max)


def test_a_library_kernel_launched_by_the_answer_is_caught():
    def multiply(a, b):
        kernel = sys.modules["gpucourse.kernels.sgemm"].sgemm_coalesced
        c = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
        kernel[(1, 1), (2, 2)](a, b, c)
        return c

    importlib.import_module("gpucourse.kernels.sgemm")
    a = np.ones((2, 2), dtype=np.float32)
    expect_own_work(multiply)
    with pytest.raises(AssertionError, match=r"it ran the kernel gpucourse\.kernels\.sgemm\."
                                             r"naive\.sgemm_coalesced"):
        multiply(a, a)


def test_the_answer_cannot_stop_the_watching_itself():
    def stopping(parallel_fraction, workers):
        sys.modules["gpucourse.grader.runtime"].stop()
        return sys.modules["gpucourse.hpc"].amdahl_speedup(parallel_fraction, workers)

    expect_own_work(stopping)
    with pytest.raises(AssertionError, match=r"gpucourse\.grader\.runtime\.stop"):
        stopping(0.5, 2)


class _Events:
    def __init__(self):
        self.callbacks = {"post_run_cell": []}

    def register(self, event, callback):
        self.callbacks[event].append(callback)


class _Shell:
    """What the watch reads of IPython's shell: the notebook's namespace (here this
    module's), the cell's number and the post_run_cell event."""

    def __init__(self):
        self.user_ns, self.execution_count, self.events = globals(), 1, _Events()

    def end_cell(self):
        for callback in self.events.callbacks["post_run_cell"]:
            callback(None)
        self.execution_count += 1


def test_in_a_notebook_each_call_is_watched_and_nothing_else(monkeypatch):
    """In a cell, a trampoline switches the hook on for the watched calls alone (the
    grader's own work between them runs at full speed), and the cell's end puts
    the function back as it was."""
    shell = _Shell()
    monkeypatch.setattr(runtime, "_shell", lambda: shell)
    code = through_sys_modules.__code__
    seen = []

    def probe(parallel_fraction, workers):
        seen.append(sys.modules["gpucourse.grader.runtime"]._WATCH.on)
        return honest(parallel_fraction, workers)

    expect_own_work(probe)
    expect_own_work(through_sys_modules)
    assert sys.getprofile() is None and not runtime._WATCH.on  # not between calls
    expect_float(probe(0.5, 2), 4 / 3)
    assert seen == [True] and sys.getprofile() is None
    expect_own_work(probe)  # read again in the same cell: its own code, not the trampoline's
    with pytest.raises(AssertionError, match=HIDDEN):
        through_sys_modules(0.5, 2)
    shell.end_cell()
    assert through_sys_modules.__code__ is code and runtime._WATCH.watched == {}
    expect_own_work(honest)  # the next cell starts afresh
    expect_float(honest(0.5, 2), 4 / 3)
    shell.end_cell()
