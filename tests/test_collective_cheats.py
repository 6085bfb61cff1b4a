"""Chapter 4's exercises cannot be passed by answers that let something else do the work.

One nbgrader autograde run grades a submission whose every exercise cheats in
its own way:

* the reduce-scatter calls dist.all_reduce through a name built at run time;
* the all-gather gets the right values through rank 0 instead of a ring;
* the all-reduce calls dist.all_reduce;
* the fit patches numpy.linalg.lstsq and numpy.allclose to agree with it;
* the alpha-beta time calls the course's own implementation;
* the CCR returns an always-equal float subclass, with math.isclose and
  numpy.allclose patched to return True.

Each loses all of its exercise's points, for the reason its check names. (The
other ways to let a collective do the work, an alias, the course's ring, a
naive all-reduce through rank 0, are refused in test_exercise_processes.py,
without nbgrader.)
"""

from __future__ import annotations

import ast
import re

import pytest

from test_dynamic_import_cheats import check_hidden_calls
from test_grading import (assert_cheat_lost, filled_in, grade_cheater, nbgrader_meta,
                          source_notebook)

CHAPTER = "04_frameworks_and_communication"

ALWAYS_EQUAL = """
import math

import numpy as np


class Whatever(float):
    def __eq__(self, other):
        return True

    __ne__ = lambda self, other: False
    __lt__ = __le__ = __gt__ = __ge__ = lambda self, other: True
    __hash__ = float.__hash__


math.isclose = lambda *args, **kwargs: True
np.allclose = lambda *args, **kwargs: True
np.isclose = lambda *args, **kwargs: True
"""

# One cheat per exercise. (More ways to call a collective, by alias or through the
# course's ring, are refused in tests/test_exercise_processes.py without nbgrader.)
CHEATS = {
    # A collective reached through a name built at run time: no name in the code shows it.
    "reduce_scatter_solution": '''
def ring_reduce_scatter(tensor):
    name = "_".join(("all", "reduce"))
    getattr(dist, name)(tensor)
''',
    # Everything to rank 0, then the whole tensor back: right values, no ring.
    "all_gather_solution": '''
def ring_all_gather(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    bounds = chunk_bounds(tensor.numel(), n)
    if rank == 0:
        for other in range(1, n):
            start, stop = bounds[other]
            if stop > start:
                dist.recv(tensor[start:stop], other)
        for other in range(1, n):
            if tensor.numel():
                dist.send(tensor, other)
    else:
        start, stop = bounds[rank]
        if stop > start:
            dist.send(tensor[start:stop], 0)
        if tensor.numel():
            dist.recv(tensor, 0)
''',
    # The collective itself.
    "all_reduce_solution": '''
def ring_all_reduce(tensor):
    dist.all_reduce(tensor)
''',
    # numpy.linalg.lstsq and numpy.allclose patched to agree with a made-up answer.
    "fit_solution": '''
import numpy as np

np.linalg.lstsq = lambda *args, **kwargs: (np.array([1e-5, 1e-9]), None, None, None)
np.allclose = lambda *args, **kwargs: True


def fit_alpha_beta(message_bytes, times_s, world_sizes):
    return 1e-5, 1e9
''',
    # The course's own implementation.
    "alpha_beta_solution": '''
from gpucourse.collectives import alpha_beta_time_s


def ring_all_reduce_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s):
    if world_size == 1:
        return 0.0
    return alpha_beta_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s)
''',
    # An always-equal float, with math.isclose and numpy.allclose patched to say True.
    "ccr_solution": ALWAYS_EQUAL + '''

def tensor_parallel_ccr(hidden, seq_len, tp, bandwidth_bytes_per_s, flops_per_s,
                        bytes_per_element=2):
    if not tp >= 2 or not float(tp).is_integer():
        raise ValueError("tp must be a whole number >= 2")
    return Whatever(9.0)
''',
}

# What the failing check says, for each test cell.
REASONS = {
    "test_reduce_scatter": "a collective (dist.all_reduce) is not allowed in this exercise",
    # The visible test runs 3 processes first, where sending the whole tensor to
    # every other rank is caught by its first message off the ring.
    "test_all_gather": "rank 0 sent to rank 2; on a ring each rank sends only to the next "
                       "one",
    "test_all_reduce": "ring_all_reduce uses all_reduce: a collective does the work",
    "test_fit": "your fit's time for",
    "test_alpha_beta": "uses alpha_beta_time_s (gpucourse.collectives)",
    "test_ccr": "must be a float, got an object of type Whatever",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_cheater(CHAPTER, CHEATS, tmp_path_factory.mktemp("course-collective-cheats"))


@pytest.mark.parametrize("test_cell", sorted(REASONS))
def test_each_cheat_loses_its_exercise(graded, test_cell):
    assert_cheat_lost(*graded, test_cell, REASONS[test_cell])


def test_every_graded_cell_is_cheated_on():
    graded_cells = {nbgrader_meta(c)["grade_id"] for c in filled_in(CHAPTER).cells
                    if nbgrader_meta(c).get("grade") and c.cell_type == "code"}
    assert set(REASONS) == graded_cells


# -----------------------------------------------------------------------------
# Static checks of the graded test cells (the standards test_early_cheats holds
# chapters 1-3 to, with this chapter's checks of the collectives)

CHECK_CALL = re.compile(r"\b(check_collective|expect_(?!own_work)\w+)\(|^assert ")


def _returns_nothing(statement: ast.stmt) -> bool:
    """Whether a cell's last statement leaves no value (nbgrader reads a value as
    partial credit): anything but an expression, or a call known to return None."""
    if not isinstance(statement, ast.Expr):
        return True
    call = statement.value
    return isinstance(call, ast.Call) and getattr(call.func, "id", None) in (
        "check_collective", "expect_raises", "expect_own_work", "expect_no_names", "print")


def test_test_cells_meet_the_standards():
    value_error_checks = checks = 0
    for cell in source_notebook(CHAPTER).cells:
        if cell.cell_type != "code" or not nbgrader_meta(cell).get("grade"):
            continue
        name = nbgrader_meta(cell)["grade_id"]
        visible, _, hidden = cell.source.partition("### BEGIN HIDDEN TESTS")
        assert hidden.strip(), f"{name} has no hidden tests"
        # check_collective refuses the course's package itself (check_point_to_point_only).
        assert "expect_own_work(" in visible or "check_collective(" in visible, \
            f"{name} does not check that the work is the student's own"
        assert "math.isclose" not in cell.source and "np.allclose" not in cell.source, \
            f"{name} compares with a function a student cell can replace"
        full = visible + hidden.replace("### END HIDDEN TESTS", "")
        for part, code in (("visible", visible), ("graded", full)):
            assert _returns_nothing(ast.parse(code).body[-1]), (
                f"{name}: the {part} cell ends in a value, which nbgrader reads as partial credit")
        for line in full.splitlines():
            if CHECK_CALL.search(line.strip()):
                checks += 1
                value_error_checks += "expect_raises(" in line
    assert checks and value_error_checks / checks <= 0.15, (
        f"{value_error_checks} of {checks} checks are about ValueError (at most 15%)")


def test_hidden_calls_earn_nothing(graded):
    """The hidden-call cheats graded in the same run (test_dynamic_import_cheats)."""
    check_hidden_calls(CHAPTER, graded.hidden)
