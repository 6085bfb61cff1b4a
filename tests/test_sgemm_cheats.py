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

import nbformat
import pytest

from test_grading import autograde, filled_in, nbgrader_meta

CHAPTER = "08_sgemm"

NUMPY_IN_DISGUISE = '''
@cuda.jit
def matmul_naive(a, b, c):
    if cuda.blockIdx.x == 0 and cuda.blockIdx.y == 0 and cuda.threadIdx.x == 0 \\
            and cuda.threadIdx.y == 0:
        c[:, :] = np.dot(np.asarray(a), np.asarray(b))
'''

LIBRARY_KERNEL = '''
from gpucourse.kernels import sgemm

matmul_coalesced = sgemm.sgemm_coalesced
'''

HARD_CODED_SHAPE = '''
TILE = 16
TILE_ELEMENTS = TILE * TILE


@cuda.jit
def matmul_shared(a, b, c):
    a_tile = cuda.shared.array(TILE_ELEMENTS, float32)
    b_tile = cuda.shared.array(TILE_ELEMENTS, float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, 20, TILE):  # the visible test's 17 x 20 times 20 x 12
        a_tile[ty * TILE + tx] = a[row, k0 + tx] if row < 17 and k0 + tx < 20 else 0.0
        b_tile[ty * TILE + tx] = b[k0 + ty, col] if k0 + ty < 20 and col < 12 else 0.0
        cuda.syncthreads()
        for i in range(TILE):
            acc += a_tile[ty * TILE + i] * b_tile[i * TILE + tx]
        cuda.syncthreads()
    if row < 17 and col < 12:
        c[row, col] = acc
'''

LIBRARY_FACTORY = '''
from gpucourse.kernels import sgemm


def make_matmul_1d(bm, bn, bk, tm):
    return sgemm._make_1d_kernel(sgemm.TileConfig(bm, bn, bk, tm, 1))
'''

ONE_OUTPUT_AT_A_TIME = '''
def make_matmul_2d(bm, bn, bk, tm, tn):
    threads = (bm // tm) * (bn // tn)
    a_elements = bm * bk
    b_elements = bk * bn
    a_loads = a_elements // threads
    b_loads = b_elements // threads
    per_row = bn // tn

    @cuda.jit
    def matmul_2d(a, b, c):
        a_tile = cuda.shared.array(a_elements, float32)
        b_tile = cuda.shared.array(b_elements, float32)
        m, k = a.shape
        n = b.shape[1]
        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * bm
        col0 = cuda.blockIdx.x * bn
        for i in range(tm):
            for j in range(tn):
                r = (t // per_row) * tm + i
                q = (t % per_row) * tn + j
                acc = float32(0.0)
                for k0 in range(0, k, bk):
                    for s in range(a_loads):
                        e = t + s * threads
                        inside = row0 + e // bk < m and k0 + e % bk < k
                        a_tile[e] = a[row0 + e // bk, k0 + e % bk] if inside else 0.0
                    for s in range(b_loads):
                        e = t + s * threads
                        inside = k0 + e // bn < k and col0 + e % bn < n
                        b_tile[e] = b[k0 + e // bn, col0 + e % bn] if inside else 0.0
                    cuda.syncthreads()
                    for dot in range(bk):
                        acc += a_tile[r * bk + dot] * b_tile[dot * bn + q]
                    cuda.syncthreads()
                if row0 + r < m and col0 + q < n:
                    c[row0 + r, col0 + q] = acc

    return matmul_2d
'''


def _solution_body(grade_id: str) -> str:
    """The model solution's code of one exercise, markers removed."""
    notebook = filled_in(CHAPTER)
    return next(c.source for c in notebook.cells if nbgrader_meta(c).get("grade_id") == grade_id)


def cheats() -> dict[str, str]:
    """{solution grade_id: cheating code}."""
    # Level 5: the model level-4b kernel, renamed (right values, right counts, scalar loads).
    scalar_level_5 = _solution_body("tiling_2d_solution").replace(
        "def make_matmul_2d(", "def make_matmul_vectorized(")
    # Level 6: the model search, with the visible test's answer written in.
    hard_coded_best = _solution_body("autotune_solution").replace(
        'return {"best": best, "tried": tried}', 'return {"best": (64, 32, 8, 8, 8), "tried": tried}')
    assert hard_coded_best != _solution_body("autotune_solution")
    return {
        "naive_solution": NUMPY_IN_DISGUISE,
        "coalesced_solution": LIBRARY_KERNEL,
        "shared_solution": HARD_CODED_SHAPE,
        "tiling_1d_solution": LIBRARY_FACTORY,
        "tiling_2d_solution": ONE_OUTPUT_AT_A_TIME,
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


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course-sgemm-cheats")
    scores = autograde(CHAPTER, {"cheater": filled_in(CHAPTER, replace=cheats())}, course)
    notebook = nbformat.read(course / "autograded" / "cheater" / CHAPTER / f"{CHAPTER}.ipynb",
                             as_version=4)
    errors = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors[nbgrader_meta(cell).get("grade_id")] = \
                    f"{output['ename']}: {output['evalue']}"
    return scores["cheater"], errors


@pytest.mark.parametrize("test_cell", sorted(REASONS))
def test_each_cheat_loses_its_exercise(graded, test_cell):
    scores, errors = graded
    score, max_score = scores[test_cell]
    assert max_score > 0 and score == 0, f"{test_cell} earned {score} of {max_score}"
    reason = REASONS[test_cell]
    assert test_cell in errors, f"{test_cell} lost its points without an error"
    if reason is not None:
        assert reason in errors[test_cell], errors[test_cell][:500]


def test_the_honest_exercise_keeps_its_points(graded):
    scores, _ = graded
    assert scores["test_config"][0] == scores["test_config"][1] == 3
