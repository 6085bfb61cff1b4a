"""The GPU puzzles cannot be passed by a kernel that is not what the puzzle asks for.

One submission, graded by nbgrader's real autograde, answers ten of the
thirteen puzzles with a cheat and the other three correctly:

* **NumPy in disguise**: the first thread hands whole arrays to NumPy, or does
  all the work in a loop while the other threads idle. On the simulator a
  kernel is plain Python, so the values come out right; the grader's NumPy
  check and per-thread counts fail it.
* **Reading more than allowed**: each thread re-reads its neighbours (a
  window, a whole row) from global memory instead of sharing them, or a tile
  goes straight from global memory to global memory with no shared tile.
* **Hard-coded to the visible test**: its size, its limit, its number of
  experts. The visible tests pass (the students' self-check gives their
  points); the hidden tests do not.

Each cheated puzzle must earn nothing and every other puzzle its full points.
"""

from __future__ import annotations

import nbformat
import pytest

from gpucourse.grading import score_notebook
from test_grading import autograde, exercises_of, filled_in, source_notebook

pytestmark = pytest.mark.slow

CHAPTER = "08_gpu_puzzles"

NUMPY_IN_DISGUISE = {
    "relu_solution": '''
@cuda.jit
def relu(x, out):
    if cuda.threadIdx.x == 0:  # the first thread does the whole array at once
        out[:] = np.maximum(x, 0.0)
''',
    "residual_solution": '''
@cuda.jit
def residual_add(x, skip, out):
    if cuda.threadIdx.x == 0:  # one thread loops over everything, the others idle
        for i in range(x.size):
            out[i] = x[i] + skip[i]
''',
    "dot_solution": '''
DOT_THREADS = 16


@cuda.jit
def dot_partials(a, b, out):
    if cuda.threadIdx.x == 0:
        start = cuda.blockIdx.x * DOT_THREADS
        stop = min(start + DOT_THREADS, a.size)
        out[cuda.blockIdx.x] = np.dot(a[start:stop], b[start:stop])
''',
}

READS_TOO_MUCH = {
    "average_solution": '''
AVERAGE_BLOCK = 8
WINDOW = 4


@cuda.jit
def moving_average(x, out):
    # Each thread re-reads its window from global memory: no shared memory, no halo.
    i = cuda.blockIdx.x * AVERAGE_BLOCK + cuda.threadIdx.x
    if i < x.size:
        total = float32(0.0)
        count = 0
        for k in range(WINDOW):
            if i - k >= 0:
                total += x[i - k]
                count += 1
        out[i] = total / count
''',
    "softmax_solution": '''
SOFTMAX_THREADS = 16


@cuda.jit
def softmax_rows(x, out):
    # Each thread reads its whole row from global memory, twice.
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    if t < x.shape[1]:
        best = -math.inf
        for c in range(x.shape[1]):
            best = max(best, x[r, c])
        total = 0.0
        for c in range(x.shape[1]):
            total += math.exp(x[r, c] - best)
        out[r, t] = math.exp(x[r, t] - best) / total
''',
    "tiled_solution": '''
TRANSPOSE_TILE = 4


@cuda.jit
def transpose_tiled(x, out):
    # Puzzle 4's transpose on a grid: no shared tile, writes down the columns of out.
    c = cuda.blockIdx.x * TRANSPOSE_TILE + cuda.threadIdx.x
    r = cuda.blockIdx.y * TRANSPOSE_TILE + cuda.threadIdx.y
    if r < x.shape[0] and c < x.shape[1]:
        out[c, r] = x[r, c]
''',
}

HARD_CODED = {
    "clip_solution": '''
@cuda.jit
def clip(g, limit, out):
    i = cuda.threadIdx.x
    if i < g.size:
        out[i] = min(max(g[i], -1.0), 1.0)  # the visible test's limit
''',
    "transpose_solution": '''
@cuda.jit
def transpose(x, out):
    c = cuda.threadIdx.x
    r = cuda.threadIdx.y
    if r < 5 and c < 7:  # the visible test's shape
        out[c, r] = x[r, c]
''',
    "sgd_solution": '''
@cuda.jit
def sgd_step(w, grad, lr, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < 20:  # the visible test's size
        out[i] = w[i] - lr * grad[i]
''',
    "scan_solution": '''
SCAN_THREADS = 16


@cuda.jit
def expert_offsets(counts, offsets):
    running = cuda.shared.array(SCAN_THREADS, int32)
    e = cuda.threadIdx.x
    own = 0
    if e < counts.size:
        own = counts[e]
    running[e] = own
    cuda.syncthreads()
    total = own
    offset = 1
    while offset < 8:  # enough for the visible test's eight experts
        if e >= offset:
            total += running[e - offset]
        cuda.syncthreads()
        running[e] = total
        cuda.syncthreads()
        offset *= 2
    if e < counts.size:
        offsets[e] = total - own
''',
}

CHEATS = {**NUMPY_IN_DISGUISE, **READS_TOO_MUCH, **HARD_CODED}


@pytest.fixture(scope="module")
def cheating_submission():
    return filled_in(CHAPTER, replace=CHEATS)


@pytest.fixture(scope="module")
def autograded_scores(cheating_submission, tmp_path_factory):
    """Points per graded cell of the cheating submission, from nbgrader autograde."""
    # test_grading's autograde: the student version generated once and shared
    # with the chapter's grading round trip (a generate_assignment of its own
    # here cost nbgrader's start-up again), then one `nbgrader autograde`.
    scores = autograde(CHAPTER, {"cheater": cheating_submission},
                       tmp_path_factory.mktemp("course-cheats"))["cheater"]
    # Written answers wait for a person: they are no cheat's business.
    return {name: score for name, score in scores.items() if score[0] != "manual"}


def _tests_of(solutions) -> set[str]:
    groups = exercises_of(source_notebook(CHAPTER))
    return {test for solution in solutions for test in groups[solution]["tests"]}


def test_every_cheat_loses_its_puzzle_and_only_its_puzzle(autograded_scores):
    cheated = _tests_of(CHEATS)
    assert cheated and set(autograded_scores) > cheated
    for name, (score, max_score) in autograded_scores.items():
        if name in cheated:
            assert score == 0, f"{name} gave a cheat {score} of {max_score} points"
        else:
            assert score == max_score, f"{name} lost points beside the cheats"


def test_hard_coded_answers_pass_the_visible_tests_and_only_those(cheating_submission,
                                                                  tmp_path):
    # The students' self-check runs the visible tests alone: there, the answers
    # hard-coded to them earn their points, while NumPy in disguise and
    # over-reading kernels already fail. The autograde above takes them all.
    path = tmp_path / f"{CHAPTER}.ipynb"
    nbformat.write(cheating_submission, path)
    scores = {s.grade_id: s for s in score_notebook(path)}
    for name in _tests_of(HARD_CODED):
        assert scores[name].error is None, f"{name}: {scores[name].error}"
    messages = {name: scores[name].error or "" for name in _tests_of(NUMPY_IN_DISGUISE)
                | _tests_of(READS_TOO_MUCH)}
    assert all(messages.values()), f"a cheat passed the visible tests: {messages}"
    assert "uses NumPy" in messages["test_relu"] and "uses NumPy" in messages["test_dot"]
    assert "thread (0, 0, 0) read 16 elements of x" in messages["test_residual"]
    assert "elements of x" in messages["test_average"]
    assert "read 21 elements of x" in messages["test_softmax"]
    assert "shared memory" in messages["test_tiled"] or "row of out" in messages["test_tiled"]
