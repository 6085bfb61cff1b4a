"""Chapter 8's kernel exercises cannot be passed by kernels that only look right.

One nbgrader autograde run grades a submission whose every SGEMM exercise
cheats in its own way, while its constraint check is right:

* level 1, NumPy in disguise: the first thread computes all of C with np.dot
  (right on the simulator, where a kernel is Python);
* level 2, the library's kernel under the exercise's name;
* level 3, hard-coded to the visible test's shape;
* level 4a, a factory that returns the library's level-4a kernel;
* level 4b, level 3 in disguise: one output at a time, one accumulator, the
  tiles loaded again for each output;
* level 5, level 4b's kernel: correct, but with 32-bit loads;
* level 6, a search that hard-codes the visible test's best configuration.

Each loses all of its exercise's points, for the reason its check names; the
constraint check keeps its points.
"""

from __future__ import annotations

import inspect

from test_dynamic_import_cheats import check_hidden_calls
from test_grading import cheat_tests, filled_in, nbgrader_meta
from test_sgemm_checks import _one_output_at_a_time, numpy_in_disguise

CHAPTER = "08_sgemm"


def _solution_body(grade_id: str) -> str:
    """The model solution's code of one exercise, markers removed."""
    notebook = filled_in(CHAPTER)
    return next(c.source for c in notebook.cells if nbgrader_meta(c).get("grade_id") == grade_id)


def _renamed(function, name: str) -> str:
    """The source of one of test_sgemm_checks' cheating kernels, under the exercise's name."""
    function = getattr(function, "py_func", function)
    return inspect.getsource(function).replace(f"def {function.__name__}(", f"def {name}(")


LIBRARY_KERNEL = """
from gpucourse.kernels import sgemm

matmul_coalesced = sgemm.sgemm_coalesced
"""

LIBRARY_FACTORY = """
from gpucourse.kernels import sgemm


def make_matmul_1d(bm, bn, bk, tm):
    return sgemm._make_1d_kernel(sgemm.TileConfig(bm, bn, bk, tm, 1))
"""


def cheats() -> dict[str, str]:
    """{solution grade_id: cheating code}."""
    # Level 3: the model solution with the visible test's shape (17 x 20 times 20 x 12)
    # written in.
    level_3 = _solution_body("shared_solution")
    hard_coded_shape = level_3.replace("m, k = a.shape", "m, k = 17, 20").replace(
        "n = b.shape[1]", "n = 12")
    assert hard_coded_shape.count("= 17, 20") == 1 and "n = 12" in hard_coded_shape
    # Level 5: the model level-4b kernel, renamed (right values, right counts, scalar loads).
    scalar_level_5 = _solution_body("tiling_2d_solution").replace(
        "def make_matmul_2d(", "def make_matmul_vectorized(")
    # Level 6: the model search, with the visible test's answer written in.
    hard_coded_best = _solution_body("autotune_solution").replace(
        'return {"best": best, "tried": tried}',
        'return {"best": (64, 32, 8, 8, 8), "tried": tried}')
    assert hard_coded_best != _solution_body("autotune_solution")
    return {
        "naive_solution": _renamed(numpy_in_disguise, "matmul_naive"),
        "coalesced_solution": LIBRARY_KERNEL,
        "shared_solution": hard_coded_shape,
        "tiling_1d_solution": LIBRARY_FACTORY,
        "tiling_2d_solution": _renamed(_one_output_at_a_time, "make_matmul_2d"),
        "vectorized_solution": scalar_level_5,
        "autotune_solution": hard_coded_best,
    }


# What the failing check says, for each test cell (None: a hidden value test fails).
REASONS = {
    "test_naive": "thread (0, 0, 0) read",
    "test_coalesced": "comes from gpucourse.kernels.sgemm",
    "test_shared": None,
    "test_tiling_1d": "uses sgemm (gpucourse.kernels.sgemm)",
    "test_tiling_2d": "level 4b: block",
    "test_vectorized": "your kernel issues only 32-bit loads",
    "test_autotune": "best",
}


# The fixture `graded` (one autograde run of the cheats) and the test that
# each cheat loses its exercise for its reason.
graded, test_each_cheat_loses_its_exercise = cheat_tests(CHAPTER, cheats, REASONS,
                                                         "course-sgemm-cheats")


def test_the_honest_exercise_keeps_its_points(graded):
    scores, _ = graded
    assert scores["test_config"][0] == scores["test_config"][1] == 3


def test_hidden_calls_earn_nothing(graded):
    """The hidden-call cheats graded in the same run (test_dynamic_import_cheats)."""
    check_hidden_calls(CHAPTER, graded.hidden)
