"""The simulator's sanitizer (gpucourse.grader.sanitizer): what a GPU punishes, caught.

Each check meets kernels that break it (an uninitialised shared read, a
barrier inside a guard, an early return past a barrier, two threads writing
one slot, a missing barrier) and kernels that do not (a tiled transpose, a
tree reduction, atomics, syncthreads_count), and the course's own solutions
(chapter 8's puzzles and SGEMM levels, chapter 9's attention kernels) run
through it at small sizes without a finding.
"""

from __future__ import annotations

import linecache
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from gpucourse.device import cuda
from gpucourse.grader import sanitizer, tracing
from gpucourse.grader.sanitizer import Sanitizer, SanitizerError, sanitized
from numba import float32, int32

ROOT = Path(__file__).resolve().parents[1]
THREADS = 8
TILE = 4


@cuda.jit
def unwritten_slot_read(x, out):
    # Thread THREADS - 1 never writes its slot; thread 0 reads it.
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    if t < THREADS - 1:
        staged[t] = x[t]
    cuda.syncthreads()
    out[t] = staged[THREADS - 1 - t]


@cuda.jit
def barrier_inside_guard(x, out):
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    if t < x.size:
        staged[t] = x[t]
        cuda.syncthreads()
        out[t] = staged[x.size - 1 - t]


@cuda.jit
def early_return(x, out):
    # The extra threads leave before the barrier: the reduction reads their slots.
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    if t >= x.size:
        return
    staged[t] = x[t]
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if t < stride:
            staged[t] += staged[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[0] = staged[0]


@cuda.jit
def two_writers(x, out):
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    staged[t // 2] = x[t]  # threads 0 and 1 both write staged[0]
    cuda.syncthreads()
    out[t] = staged[t // 2]


@cuda.jit
def missing_barrier(x, out):
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    staged[t] = x[t]
    out[t] = staged[THREADS - 1 - t]


@cuda.jit
def tiled_transpose(x, out):
    tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    r = cuda.blockIdx.y * TILE + ty
    c = cuda.blockIdx.x * TILE + tx
    if r < x.shape[0] and c < x.shape[1]:
        tile[ty, tx] = x[r, c]
    cuda.syncthreads()
    out_r = cuda.blockIdx.x * TILE + ty
    out_c = cuda.blockIdx.y * TILE + tx
    if out_r < out.shape[0] and out_c < out.shape[1]:
        out[out_r, out_c] = tile[tx, ty]


# A deliberate variant of early_return: every thread stays, and writes its slot.
@cuda.jit
def block_sums(x, out):
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    staged[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    stride = THREADS // 2
    while stride > 0:
        if t < stride:
            staged[t] += staged[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = staged[0]


@cuda.jit
def atomic_histogram(x, out):
    # Every thread adds into one of two shared counters: atomics do not race.
    counts = cuda.shared.array(2, int32)
    t = cuda.threadIdx.x
    if t < 2:
        counts[t] = 0
    cuda.syncthreads()
    cuda.atomic.add(counts, x[t] % 2, 1)
    positive = cuda.syncthreads_count(x[t] > 0)
    if t < 2:
        out[t] = counts[t] + 0 * positive


@cuda.jit
def negative_index(x, out):
    staged = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    staged[t - 1] = x[t]  # thread 0 writes staged[-1]: the simulator wraps it around


def launch(kernel, grid, block, *args, **options):
    """kernel[grid, block](*args) under the sanitizer; returns its Sanitizer."""
    with sanitized(**options) as found:
        kernel[grid, block](*args)
    return found


def values(n, dtype=np.float32):
    return np.arange(1, n + 1).astype(dtype)


def test_a_read_of_a_slot_no_thread_wrote_names_the_thread_and_the_array():
    with pytest.raises(SanitizerError) as caught:
        launch(unwritten_slot_read, 1, THREADS, values(THREADS), np.zeros(THREADS, np.float32))
    message = str(caught.value)
    assert "initcheck: block (0, 0, 0), thread (0, 0, 0) read shared staged[7]" in message
    assert "no thread of the block had written" in message
    assert "out[t] = staged[THREADS - 1 - t]" in message  # the line, quoted
    # Without the sanitizer the simulator runs it without a word: the bug it
    # hides. Thread 0 gets whatever the slot held (the simulator does not zero
    # shared arrays: a run has handed back NaN), the others what was written.
    out = np.full(THREADS, -1, np.float32)
    unwritten_slot_read[1, THREADS](values(THREADS), out)
    np.testing.assert_array_equal(out[1:], values(THREADS)[THREADS - 2::-1])


def test_a_barrier_inside_a_guard_names_who_reached_it():
    with pytest.raises(SanitizerError) as caught:
        launch(barrier_inside_guard, 1, THREADS, values(5), np.zeros(5, np.float32))
    message = str(caught.value)
    assert "synccheck: block (0, 0, 0): at the block's 1st barrier" in message
    assert "threads (0, 0, 0) to (4, 0, 0) waited at line" in message
    assert "threads (5, 0, 0) to (7, 0, 0) had finished the kernel without reaching it" in message
    # The guard holds for every thread: nothing to say.
    assert launch(barrier_inside_guard, 1, THREADS, values(THREADS),
                  np.zeros(THREADS, np.float32)).findings == []


def test_an_early_return_past_a_barrier_is_reported_first_then_what_it_left_unwritten():
    found = launch(early_return, 1, THREADS, values(5), np.zeros(1, np.float32),
                   raise_errors=False)
    checks = [f.check for f in found.findings]
    assert "synccheck" in checks and "initcheck" in checks
    report = found.report(kernel="early_return").splitlines()
    assert report[1].startswith("- synccheck: block (0, 0, 0)")  # the cause before its effect
    assert "threads (5, 0, 0) to (7, 0, 0) had finished" in report[1]


def test_two_threads_writing_one_slot_race():
    with pytest.raises(SanitizerError) as caught:
        launch(two_writers, 1, THREADS, values(THREADS), np.zeros(THREADS, np.float32))
    message = str(caught.value)
    assert re.search(r"racecheck: block \(0, 0, 0\): thread \(0, 0, 0\) wrote shared "
                     r"staged\[0\] at line \d+ of two_writers .*and thread \(1, 0, 0\) wrote it",
                     message)
    assert "(and 3 more times)" in message  # one finding for the line, counted


def test_a_report_reads_the_same_whichever_thread_ran_first():
    # The simulator's threads run in whatever order its scheduler picks (under
    # a loaded CI machine, another order than on a quiet one); of a finding's
    # repeats, the report spells out the first in its order, not in time.
    for arrivals in ([((0, 1), "late"), ((0, 0), "early")], [((0, 0), "early"), ((0, 1), "late")]):
        found = Sanitizer(raise_errors=False)
        for order, message in arrivals:
            found.add("racecheck", ("staged", "wrote/wrote"), message, order)
        assert [(f.message, f.times) for f in found.findings] == [("early", 2)], arrivals


def test_a_missing_barrier_is_a_race_between_the_write_and_the_read():
    found = launch(missing_barrier, 1, THREADS, values(THREADS), np.zeros(THREADS, np.float32),
                   raise_errors=False)
    assert found.findings and found.findings[0].check in ("racecheck", "initcheck")
    assert any(f.check == "racecheck" for f in found.findings)
    assert "with no cuda.syncthreads() between them" in found.report()


def test_correct_kernels_report_nothing():
    x = np.arange(6 * 10, dtype=np.float32).reshape(6, 10)
    out = np.zeros((10, 6), np.float32)
    assert launch(tiled_transpose, (3, 2), (TILE, TILE), x, out).findings == []
    np.testing.assert_array_equal(out, x.T)
    sums = np.zeros(3, np.float32)
    assert launch(block_sums, 3, THREADS, values(20), sums).findings == []
    np.testing.assert_array_equal(sums, [36, 100, 74])
    counts = np.zeros(2, np.int32)
    assert launch(atomic_histogram, 1, THREADS, values(THREADS, np.int32), counts).findings == []
    np.testing.assert_array_equal(counts, [4, 4])


def test_an_index_outside_a_shared_array_names_it():
    with pytest.raises(IndexError, match=r"block \(0, 0, 0\), thread \(0, 0, 0\) used index "
                                         r"\(-1,\) of shared staged, whose shape is \(8,\)"):
        launch(negative_index, 1, THREADS, values(THREADS), np.zeros(THREADS, np.float32))


def test_the_simulator_is_itself_again_afterwards_and_traces_are_sanitized():
    from numba.cuda.simulator.kernel import BlockManager, BlockThread
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    before = (FakeCUDAShared.array, BlockThread.syncthreads, BlockManager.run)
    with sanitized():
        assert sanitizer.active()
    assert (FakeCUDAShared.array, BlockThread.syncthreads, BlockManager.run) == before
    assert not sanitizer.active()
    # The graders' traced launches run under it, and still count shared accesses.
    with pytest.raises(SanitizerError, match="racecheck"):
        tracing.trace(two_writers, 1, THREADS, values(THREADS), np.zeros(THREADS, np.float32))
    run = tracing.trace(block_sums, 1, THREADS, values(THREADS), np.zeros(1, np.float32))
    assert run.total("shared staged", "write") == THREADS + 4 + 2 + 1
    with pytest.raises(ValueError, match="raise_errors must be True or False"):
        with sanitized(raise_errors="yes"):
            pass


def test_the_environment_variable_is_read_strictly(monkeypatch):
    monkeypatch.setenv(sanitizer.ENV_VAR, "1")
    assert sanitizer.requested()
    monkeypatch.setenv(sanitizer.ENV_VAR, "0")
    assert not sanitizer.requested()
    monkeypatch.setenv(sanitizer.ENV_VAR, "yes")
    with pytest.raises(ValueError, match="accepted values are 1"):
        sanitizer.requested()


# --------------------------------------------------------------------------
# The course's own kernels: no false positives
# --------------------------------------------------------------------------

def solution_cells(chapter: str, *grade_ids: str, edit=lambda grade_id, source: source) -> dict:
    """The namespace made by running a solution notebook's setup and the given cells
    (the grader's compiler process is not started); ``edit`` may change a cell first."""
    notebook = nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in notebook.cells
             if c.cell_type == "code"}
    namespace: dict = {}
    for grade_id in ("setup", *grade_ids):
        source = re.sub(r"^\s*(puzzles\.)?start_compiler\(\).*$", "", cells[grade_id],
                        flags=re.M)
        source, name = edit(grade_id, source), f"<{chapter} {grade_id}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)  # as IPython
        exec(compile(source, name, "exec"), namespace)
    return namespace


def test_the_puzzles_solutions_pass_the_sanitizer():
    found = solution_cells("08_gpu_puzzles", "tiled_solution", "average_solution",
                           "dot_solution", "scan_solution", "tile_solution", "softmax_solution")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 10)).astype(np.float32)
    t = found["TRANSPOSE_TILE"]
    vector = rng.standard_normal(20).astype(np.float32)
    launches = [
        (found["transpose_tiled"], (3, 2), (t, t), (x, np.zeros((10, 6), np.float32))),
        (found["moving_average"], 3, found["AVERAGE_BLOCK"], (vector, np.zeros(20, np.float32))),
        (found["dot_partials"], 2, found["DOT_THREADS"],
         (vector, vector, np.zeros(2, np.float32))),
        (found["expert_offsets"], 1, found["SCAN_THREADS"],
         (np.arange(5, dtype=np.int32), np.zeros(5, np.int32))),
        (found["matmul_tile"], 1, (8, 8), (x[:3, :5].copy(), x[:5, :4].copy(),
                                           np.zeros((3, 4), np.float32))),
        (found["softmax_rows"], 2, found["SOFTMAX_THREADS"],
         (x[:2], np.zeros((2, 10), np.float32))),
    ]
    with sanitized():
        for kernel, grid, block, args in launches:
            kernel[grid, block](*args)
    np.testing.assert_allclose(launches[-1][3][1].sum(axis=1), 1.0, rtol=1e-5)


def test_the_sgemm_and_attention_solutions_pass_the_sanitizer():
    found = solution_cells("08_sgemm", "shared_solution", "tiling_1d_solution",
                           "tiling_2d_solution", "vectorized_solution")
    check = found["check"]
    with sanitized():
        check.expect_product(found["matmul_shared"], 3, 16, 16, 20)  # two steps of K, ragged
        check.expect_product(found["make_matmul_1d"](16, 16, 4, 4), "4a", 16, 16, 6,
                             (16, 16, 4, 4))
        check.expect_product(found["make_matmul_2d"](16, 16, 4, 4, 4), "4b", 16, 16, 6,
                             (16, 16, 4, 4, 4))
        check.expect_product(found["make_matmul_vectorized"](16, 16, 4, 4, 4), 5, 16, 16, 8,
                             (16, 16, 4, 4, 4))
    # The same level 3 without its second barrier: the next step's loads overwrite the
    # tiles while other threads still read them.
    def second_barrier_dropped(grade_id, source):
        if grade_id != "shared_solution":
            return source
        head, barrier, tail = source.rpartition("        cuda.syncthreads()\n")
        assert barrier, "the level-3 solution has no barrier at the end of its K loop"
        return head + tail

    broken = solution_cells("08_sgemm", "shared_solution", edit=second_barrier_dropped)
    # Which thread of a racing pair the simulator runs first is left to chance,
    # so either order of "wrote" and "read" names the race; and both tiles race
    # (the next step's loads of A and of B), so the report may name either first.
    with pytest.raises(SanitizerError, match=r"racecheck: block \(0, 0, 0\): thread .* "
                                             r"(read|wrote) shared [ab]_tile\[\d+\].*and "
                                             r"thread .* (wrote|read) it"):
        with sanitized():
            check.expect_product(broken["matmul_shared"], 3, 16, 16, 20)
    attention = solution_cells("09_flash_attention", "flash_solution", "causal_kernel_solution")
    from gpucourse.grader import attention as grader

    with sanitized():
        grader.expect_attention(attention["flash_attention_kernel"], 1, 20, 16,
                                logit_scale=40.0)
        grader.expect_attention(attention["flash_attention_causal"], 1, 20, 16, causal=True)
