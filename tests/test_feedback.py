"""The mistakes a new student makes fail where the student sees them, naming the mistake.

Each broken version here is an exercise's model solution with one mistake
written in, the kind issue 34 lists: an attention kernel that never subtracts
its running maximum, a thread that returns before the barriers, a missing
barrier, an index past the end of an array, a ring that talks to the wrong
neighbour. Each is checked through the grader's check functions (cheap), and
the two attention kernels once more through nbgrader: one autograde run of a
chapter 9 submission holding both, where the visible part of each test cell
must already fail, with the precise message first.
"""

from __future__ import annotations

import importlib.util
import math
import re
import textwrap
import threading

import numpy as np
import pytest

from gpucourse.grader import attention as check
from gpucourse.grader import puzzles
from test_grading import autograde, filled_in, graded_errors, nbgrader_meta, source_notebook


def solution(chapter: str, grade_id: str) -> str:
    """The model solution of one exercise, its nbgrader markers removed."""
    cell = next(c for c in source_notebook(chapter).cells
                if nbgrader_meta(c).get("grade_id") == grade_id)
    return "\n".join(line for line in cell.source.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def broken(chapter: str, grade_id: str, old: str, new: str) -> str:
    """The model solution with ``old`` (found exactly once) replaced by ``new``."""
    code = solution(chapter, grade_id)
    assert code.count(old) == 1, f"{old!r} is not once in {grade_id}"
    return code.replace(old, new)


ATTENTION = "09_flash_attention"
# The setup a chapter 9 kernel sees (the notebook's setup cell imports the same).
ATTENTION_HEADER = """
import math
import numpy as np
from gpucourse.device import cuda
from gpucourse.grader.attention import BLOCK_K, BLOCK_Q, HEAD_DIM_MAX, blocks
from numba import float32
"""

# No running maximum: every score is exponentiated as it is (the "maximum" stays 0).
NO_RUNNING_MAX = broken(ATTENTION, "flash_solution", "new_max = max(row_max, tile_max)",
                        "new_max = float32(0.0)")
# The threads past the end of the sequence return at once, before the tile loads and
# the barriers.
EARLY_RETURN = broken(ATTENTION, "causal_kernel_solution", "    inside = row < seq\n",
                      "    inside = row < seq\n    if not inside:\n        return\n")
# The barrier after a tile is used is gone: the next tile overwrites it under readers.
MISSING_BARRIER = broken(ATTENTION, "flash_solution",
                         "            row_max = new_max\n        cuda.syncthreads()\n",
                         "            row_max = new_max\n")
# The query row is read without the bounds test.
OUT_OF_BOUNDS = broken(ATTENTION, "flash_solution",
                       "q_row[c] = q[head, row, c] * scale if inside else float32(0.0)",
                       "q_row[c] = q[head, row, c] * scale")


def imported(folder, name: str, code: str):
    """The module that ``code`` makes, imported from a file of its own (the PTX check
    reads a kernel's source)."""
    path = folder / f"{name}.py"
    path.write_text(code + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("broken_kernels")


@pytest.fixture(scope="module")
def kernels(folder):
    """{name: the kernel} of the broken attention kernels."""
    return {name: getattr(imported(folder, f"broken_{name}", ATTENTION_HEADER + code), kernel)
            for name, code, kernel in (
                ("no_max", NO_RUNNING_MAX, "flash_attention_kernel"),
                ("early_return", EARLY_RETURN, "flash_attention_causal"),
                ("missing_barrier", MISSING_BARRIER, "flash_attention_kernel"),
                ("out_of_bounds", OUT_OF_BOUNDS, "flash_attention_kernel"))}


# ---------------------------------------------------------------------------
# Through the check functions
# ---------------------------------------------------------------------------

def test_no_running_max_is_named_as_an_overflow_of_the_visible_case(kernels):
    # The visible case's scores: far above 88.7, where e^s overflows float32.
    q, k, _ = check.random_qkv(1, 20, 16)
    assert check.largest_score(q, k, np.float32(40 / math.sqrt(16))) > check.FLOAT32_EXP_MAX
    check.expect_attention(kernels["no_max"], 1, 20, 16)  # at scale 1 it passes
    with pytest.raises(AssertionError, match=r"overflows float32 above 88\.7: subtract the "
                                             r"running maximum"):
        check.expect_attention(kernels["no_max"], 1, 20, 16, logit_scale=40)


def test_an_early_return_is_named_before_any_value(kernels):
    # Named by the sanitizer's synccheck when the trace runs it (grader.sanitizer), or
    # by the tile loads the idle threads left out.
    with pytest.raises(AssertionError, match=r"(?s)block \(1, 0, 0\).*(an early return|"
                                             r"returns early)"):
        check.expect_accesses(kernels["early_return"], 1, 20, 16, causal=True)


def test_a_missing_barrier_is_named_before_any_value(kernels):
    # The access check comes first: each thread still loads its share once, so the
    # counts alone cannot see it, but the sanitizer's racecheck (when the trace runs
    # it) names the unsynchronised write and read ...
    try:
        check.expect_accesses(kernels["missing_barrier"], 1, 20, 16)
    except AssertionError as error:
        assert "no cuda.syncthreads() between them" in str(error), str(error)[:600]
    # ... and the compiled kernel's barriers are counted next, before any value.
    with pytest.raises(AssertionError, match=r"must synchronise its block twice per key "
                                             r"tile.*has 1 barrier"):
        check.expect_flash_structure(kernels["missing_barrier"])


def test_a_barrier_missing_from_a_puzzle_is_named_before_its_values(folder):
    # Puzzle 8 without its barrier: its counts are a correct kernel's, and on the
    # simulator its values may come out wrong; check_puzzle names the barrier first,
    # by the sanitizer's racecheck during the trace or by the PTX check after it.
    code = broken("08_gpu_puzzles", "tiled_solution", "    cuda.syncthreads()\n", "")
    module = imported(folder, "no_barrier_transpose", "from gpucourse.device import cuda\n"
                                                      "from numba import float32\n" + code)
    x, out = puzzles.random_matrix(6, 10, 81), puzzles.blank((10, 6))
    with pytest.raises(AssertionError, match=r"no cuda.syncthreads\(\) between them|"
                                             r"puzzle 8 .*the compiled kernel has no barrier"):
        puzzles.check_puzzle(module.transpose_tiled, (3, 2), (4, 4), (x, out),
                             x.T.astype(np.float64), reads={"x": 1}, writes={"out": 1},
                             uses_shared=True, shared_reads=1, shared_writes=1,
                             compiles={"what": "puzzle 8", "shared": True, "barriers": True})


@pytest.mark.parametrize("how", ["launch", "trace"])
def test_an_out_of_bounds_read_names_the_array_the_block_and_the_thread(kernels, how):
    # Block 1's threads 4 to 15 have rows 20 to 31; whichever gets there first is named.
    wanted = (r"flash_attention_kernel used an index outside an array: block \(1, 0, 0\), "
              r"thread \((\d+), 0, 0\) used index \(0, (\d+), 0\) of q, whose shape is "
              r"\(1, 20, 16\): axis 1 must be in \[0, 20\)")
    with pytest.raises(AssertionError, match=wanted):
        if how == "launch":  # the value check's plain launch, named by a counted rerun
            check.expect_attention(kernels["out_of_bounds"], 1, 20, 16)
        else:
            check.expect_accesses(kernels["out_of_bounds"], 1, 20, 16)
    # The other threads of the failed block end too, none left running beside
    # the next cell (grader.tracing.stopping_simulated_threads, until they end).
    from numba.cuda.simulator.kernel import BlockThread

    assert not [t for t in threading.enumerate() if isinstance(t, BlockThread) and t.is_alive()]


def test_a_ring_that_talks_to_the_wrong_neighbour_is_named_on_three_ranks(folder):
    from gpucourse.grader.collective_exercises import check_collective

    # The ring run backwards: send to the previous rank, receive from the next. On two
    # ranks the two are one rank and it passes; on three the message check names it,
    # before the values that come out wrong (9 elements, in equal chunks: with unequal
    # ones the backwards ring also sends a chunk of the wrong size, and gloo stops it).
    code = broken("04_frameworks_and_communication", "reduce_scatter_solution",
                  "right, left = (rank + 1) % world_size, (rank - 1) % world_size",
                  "right, left = (rank - 1) % world_size, (rank + 1) % world_size")
    setup = next(c.source for c in source_notebook("04_frameworks_and_communication").cells
                 if nbgrader_meta(c).get("grade_id") == "setup")
    chunk_bounds = re.search(r"def chunk_bounds.*?return bounds", setup, re.S).group(0)
    module = imported(folder, "backwards_ring", "import torch\nimport torch.distributed as "
                                                "dist\n\n\n" + chunk_bounds + "\n\n\n" + code)
    with pytest.raises(AssertionError, match=r"on 3 processes.*rank 0 sent to rank 2; on a "
                                             r"ring each rank sends only to the next one"):
        check_collective(module.ring_reduce_scatter, "reduce_scatter", world_sizes=(3,),
                         lengths=(9,))


# ---------------------------------------------------------------------------
# Through nbgrader: one autograde run, the precise message of the visible case first
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def attention_errors(tmp_path_factory):
    """{grade_id: error} of a chapter 9 submission whose forward kernel has no running
    maximum and whose causal kernel returns early; its other exercises are blank (the
    kernels do not need them)."""
    course = tmp_path_factory.mktemp("course-feedback")
    submission = filled_in(ATTENTION, replace={"flash_solution": NO_RUNNING_MAX,
                                               "causal_kernel_solution": EARLY_RETURN},
                           only=())
    scores = autograde(ATTENTION, {"student": submission}, course)["student"]
    errors = graded_errors(course, ATTENTION, "student")
    for cell in ("test_flash_kernel", "test_causal_kernel"):
        assert scores[cell][0] == 0 < scores[cell][1], (cell, scores[cell])
    return errors


def test_no_running_max_fails_the_visible_case_in_the_graded_notebook(attention_errors):
    error = attention_errors["test_flash_kernel"]
    # The visible test's own case (hidden ones use other lengths, seeds and scales).
    assert "out of attention at heads=1, seq=20, head_dim=16, scores scaled 40 times up" \
        in error, error[:600]
    assert "subtract the running maximum" in error, error[:600]


def test_an_early_return_fails_the_visible_access_check(attention_errors):
    error = attention_errors["test_causal_kernel"]
    assert re.search(r"(?s)block \(1, 0, 0\).*(an early return|returns early)", error), \
        error[:600]
    assert "differs from the reference" not in error, error[:600]


def test_every_visible_softmax_case_of_the_chapters_overflows_float32_without_a_maximum():
    # Puzzle 13's second visible case and chapter 9's visible kernels reach scores above
    # 88.7: the comments that say so are checked by the cells themselves.
    for chapter, grade_id, asserted in (
            ("08_gpu_puzzles", "test_softmax", "max(axis=1).min() > 88.7"),
            ("09_flash_attention", "test_flash_kernel", "logit_scale=40)")):
        cell = next(c for c in source_notebook(chapter).cells
                    if nbgrader_meta(c).get("grade_id") == grade_id)
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        assert asserted in visible, textwrap.shorten(visible, 300)
