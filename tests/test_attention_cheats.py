"""Chapter 9's kernel exercises cannot be passed by answers that only look right.

One nbgrader autograde run grades a submission whose three new exercises each
cheat in their own way, while its NumPy exercises are right:

* the forward kernel, NumPy in disguise: the first thread computes every head
  with NumPy (right on the simulator, where a kernel is Python);
* the causal kernel, a call to the library: the first thread hands the work
  to ``gpucourse.kernels.attention``;
* the traffic count, hard-coded to the visible test's answer.

Each loses all of its exercise's points, for the reason its check names (the
kernel passes by value first: the counts and the own-work check catch it; the
hard-coded count passes the visible test: a hidden test catches it); the honest
exercises keep theirs.
"""

from __future__ import annotations

import inspect

from test_attention_checks import numpy_in_disguise
from test_dynamic_import_cheats import check_hidden_calls
from test_grading import cheat_tests

CHAPTER = "09_flash_attention"

LIBRARY_CALL = """
from gpucourse.kernels import attention


@cuda.jit
def flash_attention_causal(q, k, v, out, lse, scale):
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.threadIdx.x == 0:
        result, row_lse = attention.reference_attention(np.asarray(q), np.asarray(k),
                                                        np.asarray(v), causal=True,
                                                        scale=float(scale), return_lse=True)
        out[:] = result
        lse[:] = row_lse
"""

# The visible test's answer (1 head, 64 queries, head_dim 16, tiles 16 x 8), whatever
# the arguments.
HARD_CODED_TRAFFIC = """
def attention_traffic(heads, seq, head_dim, block_q, block_k, causal=False):
    flops = 4 * 64 * 64 * 16
    traffic = 4 * (2 * 64 * 16 + 64 + 2 * 4 * 64 * 16)
    return {"flops": flops, "bytes": traffic, "intensity": flops / traffic}
"""


def cheats() -> dict[str, str]:
    """{solution grade_id: cheating code}."""
    function = numpy_in_disguise.py_func
    numpy_kernel = inspect.getsource(function).replace(f"def {function.__name__}(",
                                                       "def flash_attention_kernel(")
    return {"flash_solution": numpy_kernel, "causal_kernel_solution": LIBRARY_CALL,
            "traffic_solution": HARD_CODED_TRAFFIC}


# What the failing check says, for each cheating exercise's test cell.
REASONS = {
    "test_flash_kernel": r"thread (0, 0, 0) read 320 elements of q",
    "test_causal_kernel": "uses attention (gpucourse.kernels.attention)",
    "test_traffic": "bytes at seq=45, causal",  # the first hidden check
}
HONEST = ("test_online_softmax", "test_tile_step", "test_causal_key_tiles")


# The fixture `graded` (one autograde run of the cheats) and the test that
# each cheat loses its exercise for its reason.
graded, test_each_cheat_loses_its_exercise = cheat_tests(CHAPTER, cheats, REASONS,
                                                         "course-attention-cheats")


def test_the_honest_exercises_keep_their_points(graded):
    scores, errors = graded
    for test_cell in HONEST:
        assert scores[test_cell][0] == scores[test_cell][1] > 0, errors.get(test_cell)


def test_hidden_calls_earn_nothing(graded):
    """The hidden-call cheats graded in the same run (test_dynamic_import_cheats)."""
    check_hidden_calls(CHAPTER, graded.hidden)
