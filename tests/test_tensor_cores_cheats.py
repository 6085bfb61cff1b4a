"""Chapter 11's exercises cannot be passed by answers that only look right.

One nbgrader autograde run grades two submissions of week 11. The first,
"cheater", cheats in every exercise, each its own way:

* the fragment map read from the course's tables (found through
  ``sys.modules``), which a reading of names cannot see;
* the warp product, NumPy in disguise: the first thread computes all of D
  (right on the simulator, where a kernel is Python);
* the HGEMM without shared memory: each warp loads its fragments straight
  from global memory (right values, too many reads);
* the swizzle written for the visible test's rows of 8 chunks only;
* the bf16 rounding by the course's own (``importlib``);
* the product errors by the grader's reference of the formats;
* the overflow point hard-coded to the visible test's dtype;
* the half-precision tile step without rounding P to float16 (within the
  visible test's tolerance of float64).

The second, "hider", reaches the course's code by the other routes of
test_dynamic_import_cheats: the fragment places computed by the package's
``fragments`` (``importlib``), the library's HGEMM kernels under the
exercises' names (``__import__`` and ``sys.modules``), the half-precision
step by ``exec``. Every cheated exercise earns nothing, for the reason its
check names; the written answers wait for a person. The chapter's hidden
calls of the package's namesakes (test_dynamic_import_cheats.TARGETS, when it
lists this chapter) are graded in the same run and checked there.
"""

from __future__ import annotations

import pytest

from test_dynamic_import_cheats import (RUNTIME_REASON, TARGETS, check_hidden_calls,
                                        cheat_source, hidden_submissions, plan)
from test_grading import (assert_cheat_lost, autograde, exercises_of, filled_in, graded_errors,
                          nbgrader_meta, source_notebook)

CHAPTER = "11_tensor_cores"


def _solution_body(grade_id: str) -> str:
    """The model solution's code of one exercise, markers removed."""
    notebook = filled_in(CHAPTER)
    return next(c.source for c in notebook.cells if nbgrader_meta(c).get("grade_id") == grade_id)


TABLES_BY_SYS_MODULES = '''
import importlib
import sys

importlib.import_module("gpucourse.kernels.tensor_cores.fragments")


def fragment_place(operand, lane, index):
    table = getattr(sys.modules["gpucourse.kernels.tensor_cores.fragments"],
                    operand + "_FRAGMENT")
    row, col = table[lane, index]
    return int(row), int(col)
'''

NUMPY_WARP = '''
@cuda.jit
def warp_mma(a, b, c, d):
    if cuda.threadIdx.x == 0:
        product = np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)
        d[:, :] = (product + np.asarray(c)).astype(np.float32)
'''

# Level 1 of the library, as the exercise's kernel: each warp loads its fragments of A
# and B from global memory, at every step, with no shared tiles.
GLOBAL_HGEMM = '''
@cuda.jit
def hgemm_shared(a, b, c):
    m, depth = a.shape
    n = b.shape[1]
    warp = cuda.threadIdx.x // 32
    lane = cuda.threadIdx.x % 32
    g = lane // 4
    t = lane % 4
    r = cuda.blockIdx.y * BM + (warp // WARPS_N) * 16 + g
    col = cuda.blockIdx.x * BN + (warp % WARPS_N) * 8 + g
    d0 = float32(0.0)
    d1 = float32(0.0)
    d2 = float32(0.0)
    d3 = float32(0.0)
    for k0 in range(0, depth, BK):
        a_part = cuda.local.array(8, float16)
        b_part = cuda.local.array(4, float16)
        for i in range(8):
            row = r + 8 * ((i // 2) % 2)
            kk = k0 + 2 * t + i % 2 + 8 * (i // 4)
            a_part[i] = a[row, kk] if row < m and kk < depth else float16(0.0)
        for i in range(4):
            kk = k0 + 2 * t + i % 2 + 8 * (i // 2)
            b_part[i] = b[kk, col] if kk < depth and col < n else float16(0.0)
        d0, d1, d2, d3 = mma_m16n8k16(a_part[0], a_part[1], a_part[2], a_part[3], a_part[4],
                                      a_part[5], a_part[6], a_part[7], b_part[0], b_part[1],
                                      b_part[2], b_part[3], d0, d1, d2, d3)
    col = cuda.blockIdx.x * BN + (warp % WARPS_N) * 8 + 2 * t
    if r < m and col < n:
        c[r, col] = d0
    if r < m and col + 1 < n:
        c[r, col + 1] = d1
    if r + 8 < m and col < n:
        c[r + 8, col] = d2
    if r + 8 < m and col + 1 < n:
        c[r + 8, col + 1] = d3
'''

EIGHT_CHUNKS_ONLY = '''
def swizzled_chunk(row, chunk, chunks_per_row):
    if chunks_per_row not in (1, 2, 4, 8):
        raise ValueError("chunks_per_row must be 1, 2, 4 or 8")
    return chunk ^ (row % 8)
'''

BF16_BY_IMPORTLIB = '''
import importlib


def round_to_bf16(x):
    moves = importlib.import_module("gpucourse.kernels.tensor_cores.moves")
    if np.asarray(x).dtype != np.float32:
        raise ValueError("x must be float32")
    return (moves.round_to_bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(np.float32)
'''

ERRORS_BY_THE_GRADER = '''
from gpucourse.grader.tensor_cores import rounded


def product_errors(a, b):
    exact = a.astype(np.float64) @ b.astype(np.float64)
    return {fmt: float(np.abs(rounded(a, fmt) @ rounded(b, fmt) - exact).max()
                       / np.abs(exact).max()) for fmt in ("fp16", "bf16", "tf32")}
'''

HARD_CODED_OVERFLOW = '''
def first_overflow(dtype):
    if dtype not in (np.float16, np.float32, np.float64):
        raise ValueError("dtype must be np.float16, np.float32 or np.float64")
    return np.float16(11.09375)
'''


def cheats() -> dict[str, str]:
    """{solution grade_id: cheating code} of the student "cheater"."""
    unrounded = _solution_body("half_solution").replace(
        "p.astype(np.float16).astype(np.float64)", "p.astype(np.float64)")
    assert unrounded != _solution_body("half_solution")
    return {"fragment_solution": TABLES_BY_SYS_MODULES, "warp_solution": NUMPY_WARP,
            "hgemm_solution": GLOBAL_HGEMM, "swizzle_solution": EIGHT_CHUNKS_ONLY,
            "bf16_solution": BF16_BY_IMPORTLIB, "errors_solution": ERRORS_BY_THE_GRADER,
            "overflow_solution": HARD_CODED_OVERFLOW, "half_solution": unrounded}


FRAGMENTS = "gpucourse.kernels.tensor_cores.fragments"
PLACES = ("tuple(int(x) for x in dict(zip('ABC', lib._places()))[args[0]]"
          "[args[1], args[2]])")


def hidden_calls() -> dict[str, str]:
    """{solution grade_id: cheating code} of the student "hider": the course's code by
    the routes a reading of names cannot see."""
    return {
        "fragment_solution": cheat_source("import_module", "fragment_place", FRAGMENTS, PLACES),
        "warp_solution": ('warp_mma = __import__("gpucourse.kernels.tensor_cores.hgemm", '
                          'fromlist=["_"])._hgemm_kernel\n'),
        "hgemm_solution": ('import importlib\nimport sys\n\n'
                           'importlib.import_module("gpucourse.kernels.tensor_cores.hgemm")\n'
                           'hgemm_shared = sys.modules["gpucourse.kernels.tensor_cores.hgemm"]'
                           '._hgemm_shared_kernel\n'),
        "half_solution": cheat_source(
            "exec", "half_tile_step", "gpucourse.kernels.tensor_cores.half_step",
            "lib.half_online_softmax_step(*args, **kwargs)"),
    }


# What the failing check says, for each test cell of each student.
REASONS = {
    "cheater": {
        "test_fragment_place": "fragment_place('A', 0, 0) returned",  # the tables scrambled
        "test_warp_mma": "lane 0 read 256 elements of a",
        "test_hgemm": "must stage its data in shared memory",
        "test_hgemm_ptx": "must stage tiles in shared memory",
        "test_swizzle": "with 1 chunks a row, row 1 stores its chunks at [1]",
        "test_bf16": RUNTIME_REASON,
        "test_errors": "uses rounded (gpucourse.grader.tensor_cores)",
        "test_overflow": "the dtype of first_overflow(float32)",
        "test_half_step": "acc after the tile at key 0",
    },
    "hider": {
        "test_fragment_place": RUNTIME_REASON,
        "test_warp_mma": "comes from gpucourse.kernels.tensor_cores.hgemm",
        "test_hgemm": "comes from gpucourse.kernels.tensor_cores.hgemm",
        "test_hgemm_ptx": "comes from gpucourse.kernels.tensor_cores.hgemm",
        "test_half_step": RUNTIME_REASON,
    },
}


def submissions() -> tuple[dict, str]:
    """({student: notebook} to grade, the name of the student who hides calls).

    The chapter's namesake cheats (test_dynamic_import_cheats.plan) go into the
    notebook of "hider" when they are one student's and touch none of its cells
    (the usual case): each student graded costs the run a few seconds."""
    mine = hidden_calls()
    graded = {"cheater": filled_in(CHAPTER, replace=cheats())}
    students = plan(CHAPTER) if CHAPTER in TARGETS else {}
    if len(students) == 1 and not set(*students.values()) & set(mine):
        (student, kinds), = students.items()
        by_id = {target[0]: target for target in TARGETS[CHAPTER]}
        mine |= {solution: cheat_source(kind, *by_id[solution][1:])
                 for solution, kind in kinds.items()}
        graded[student] = filled_in(CHAPTER, only=set(), replace=mine)
        return graded, student
    graded["hider"] = filled_in(CHAPTER, only=set(), replace=mine)
    return graded | hidden_submissions(CHAPTER), "hider"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{student: (scores, errors)}, every student graded in one nbgrader run; "hider"
    names the student who hides calls, whatever their name."""
    course = tmp_path_factory.mktemp("course-tensor-cores-cheats")
    notebooks, hider = submissions()
    scores = autograde(CHAPTER, notebooks, course)
    graded = {student: (scores[student], graded_errors(course, CHAPTER, student))
              for student in notebooks}
    graded["hider"] = graded[hider]
    return graded


@pytest.mark.parametrize("student, test_cell",
                         [(s, t) for s, cells in REASONS.items() for t in sorted(cells)])
def test_each_cheat_loses_its_exercise(graded, student, test_cell):
    assert_cheat_lost(*graded[student], test_cell, REASONS[student][test_cell])


def test_every_exercise_is_cheated_and_nothing_else_earns(graded):
    """Each graded cell of the chapter is cheated by "cheater", and "hider" earns
    nothing anywhere (what it does not cheat it leaves untouched)."""
    tests = {test for group in exercises_of(source_notebook(CHAPTER)).values()
             for test in group["tests"]}
    assert set(REASONS["cheater"]) == tests
    scores, _ = graded["hider"]
    assert all(scores[test][0] == 0 for test in tests), scores


def test_hidden_calls_of_namesakes_earn_nothing(graded):
    """The namesake cheats of test_dynamic_import_cheats, graded in the same run."""
    if CHAPTER not in TARGETS:
        pytest.skip(f"test_dynamic_import_cheats.TARGETS does not list {CHAPTER}")
    check_hidden_calls(CHAPTER, {student: graded[student] for student in plan(CHAPTER)})
