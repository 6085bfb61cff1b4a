"""The GPU puzzles' grading helpers (gpucourse.grader.puzzles).

Each helper runs on small kernels written here, right and wrong, on Numba's
CUDA simulator: a right kernel passes, and each wrong one fails with a message
that names what went wrong (the element, the thread, the missing barrier).
The kernels sit at the top level of this file because the PTX compiler reads
their source.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from gpucourse.device import cuda, on_gpu
from gpucourse.chapters import puzzles as pictures
from gpucourse.grader import ptx, puzzles, tracing
from numba import float32

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / "08_gpu_puzzles" / "08_gpu_puzzles.ipynb"
HALF_BLOCK = 4
SWAPPED = 2 * HALF_BLOCK  # shared-array sizes must be constants
# A global named like the attribute in `cuda.threadIdx.x`: the PTX compiler
# must not take the kernels below for users of it.
x = np.arange(3)


# The small kernels below share their shapes with test_inspection.py's (add_one,
# the unguarded one, staging through shared memory): deliberate variants, each
# file keeping its own, since the PTX compiler reads a kernel's own file.
@cuda.jit
def add_one(a, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if i < a.size:
        out[i] = a[i] + 1.0


@cuda.jit
def add_one_unguarded(a, out):
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    out[i] = a[i] + 1.0


@cuda.jit
def add_two(a, out):
    i = cuda.threadIdx.x
    if i < a.size:
        out[i] = a[i] + 2.0


@cuda.jit
def add_one_first_half(a, out):
    i = cuda.threadIdx.x
    if i < a.size // 2:
        out[i] = a[i] + 1.0


@cuda.jit
def add_one_twice(a, out):
    i = cuda.threadIdx.x
    if i < a.size:
        out[i] = a[i] + 1.0
        out[a.size - 1] = a[a.size - 1] + 1.0


@cuda.jit
def add_one_by_numpy(a, out):
    if cuda.threadIdx.x == 0:
        out[:] = np.add(a, 1.0)


@cuda.jit
def add_one_in_a_loop(a, out):
    # Thread 0 does all the work: the right values, the wrong counts.
    if cuda.threadIdx.x == 0:
        for i in range(a.size):
            out[i] = a[i] + 1.0


@cuda.jit
def neighbours_from_global(a, out):
    i = cuda.threadIdx.x
    if i < a.size:
        total = a[i]
        if i > 0:
            total += a[i - 1]
        if i + 1 < a.size:
            total += a[i + 1]
        out[i] = total


@cuda.jit
def copy_rows(a, out):
    c = cuda.threadIdx.x
    r = cuda.threadIdx.y
    if r < a.shape[0] and c < a.shape[1]:
        out[r, c] = a[r, c]


# A deliberate variant of copy_rows: threadIdx.x walks the rows instead of the
# columns, so neighbouring threads read elements a row apart.
@cuda.jit
def copy_columns(a, out):
    r = cuda.threadIdx.x
    c = cuda.threadIdx.y
    if r < a.shape[0] and c < a.shape[1]:
        out[r, c] = a[r, c]


# A deliberate variant of copy_rows too: it reads every element, keeps the lower
# triangle.
@cuda.jit
def lower_copy_reading_all(a, out):
    c = cuda.threadIdx.x
    r = cuda.threadIdx.y
    if r < a.shape[0] and c < a.shape[1]:
        value = a[r, c]
        out[r, c] = value if c <= r else -math.inf


@cuda.jit
def swap_halves_shared(a, out):
    staged = cuda.shared.array(SWAPPED, float32)
    t = cuda.threadIdx.x
    staged[t] = a[t]
    cuda.syncthreads()
    out[t] = staged[(t + HALF_BLOCK) % SWAPPED]


@cuda.jit
def swap_halves_no_barrier(a, out):
    staged = cuda.shared.array(SWAPPED, float32)
    t = cuda.threadIdx.x
    staged[t] = a[t]
    out[t] = a[(t + HALF_BLOCK) % SWAPPED]


def not_a_kernel(a, out):
    out[0] = a[0]


def _plus_one(a):
    return a.astype(np.float64) + 1.0


def _check_plus_one(kernel, a, block, **limits):
    """check_puzzle on one block of `block` threads adding one to each element of `a`."""
    return puzzles.check_puzzle(kernel, 1, block, (a, puzzles.blank(a.size)), _plus_one(a),
                                **limits)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def test_inputs_are_reproducible_float32_and_int32():
    v = puzzles.random_vector(10, 3)
    assert v.dtype == np.float32 and v.shape == (10,)
    np.testing.assert_array_equal(v, puzzles.random_vector(10, 3))
    assert not np.array_equal(v, puzzles.random_vector(10, 4))
    assert abs(float(puzzles.random_vector(4000, 1, scale=40.0).std()) - 40.0) < 2.0
    m = puzzles.random_matrix(3, 5, 1)
    assert m.dtype == np.float32 and m.shape == (3, 5)
    counts = puzzles.random_counts(50, 2, high=7)
    assert counts.dtype == np.int32 and counts.min() >= 0 and counts.max() <= 7


def test_blank_shows_unwritten_elements():
    assert np.isnan(puzzles.blank(4)).all() and puzzles.blank(4).dtype == np.float32
    assert puzzles.blank((2, 3)).shape == (2, 3)
    ints = puzzles.blank(5, np.int32)
    assert ints.dtype == np.int32 and (ints == -1).all()


def test_blocks_is_the_ceiling():
    assert [puzzles.blocks(n, 8) for n in (1, 8, 9, 16, 17)] == [1, 1, 2, 2, 3]


@pytest.mark.parametrize("call, naming", [
    (lambda: puzzles.random_vector(0, 1), "n must"),
    (lambda: puzzles.random_vector(4, -1), "seed must"),
    (lambda: puzzles.random_vector(4, 1, scale=0.0), "scale must"),
    (lambda: puzzles.random_matrix(2, 2.5, 1), "cols must"),
    (lambda: puzzles.random_counts(3, 1, high=0), "high must"),
    (lambda: puzzles.blank((2, 0)), "shape must"),
    (lambda: puzzles.blank(3, np.uint8), "dtype must"),
    (lambda: puzzles.blocks(10, True), "per_block must"),
])
def test_bad_input_is_refused_by_name(call, naming):
    with pytest.raises(ValueError, match=naming):
        call()


# --------------------------------------------------------------------------
# check_puzzle: value, writes, reads
# --------------------------------------------------------------------------

def test_a_right_kernel_passes_and_its_trace_comes_back():
    a = puzzles.random_vector(20, 1)
    out = puzzles.blank(20)
    run = puzzles.check_puzzle(add_one, puzzles.blocks(20, 8), 8, (a, out), _plus_one(a),
                               reads={"a": 1}, writes={"out": 1})
    assert isinstance(run, tracing.Trace)
    assert run.total("a") == 20 and run.most("out", "write")[0] == 1
    np.testing.assert_allclose(out, _plus_one(a), rtol=1e-6)


# Wrong kernels of the add-one puzzle on one block, each with what check_puzzle
# stops it with: (kernel, elements, seed, threads, limits, error, message).
WRONG_ADD_ONE = [
    pytest.param(add_two, 8, 2, 8, {}, AssertionError,
                 r"out of add_two differs .* in 8 of 8 elements",
                 id="a_wrong_value_names_the_element"),
    pytest.param(add_one_first_half, 8, 3, 8, {}, AssertionError,
                 r"no thread wrote out\[4\], out\[5\], out\[6\], out\[7\] \(4 of 8 elements",
                 id="an_unwritten_element_is_named"),
    pytest.param(add_one_twice, 4, 4, 4, {}, AssertionError,
                 r"out\[3\] was written 5 times .*thread \(0, 0, 0\)",
                 id="an_element_written_twice_names_its_writers"),
    # Threads 5, 6 and 7 all read past the end; whichever runs first is named.
    pytest.param(add_one_unguarded, 5, 5, 8, {}, AssertionError,
                 r"add_one_unguarded used an index outside an array: block \(0, 0, 0\), "
                 r"thread \(([567]), 0, 0\) used index \(\1,\) of a, whose shape is \(5,\)",
                 id="reading_past_the_end_names_the_thread"),
    pytest.param(add_one_in_a_loop, 6, 6, 6, {"reads": {"a": 1}}, AssertionError,
                 r"thread \(0, 0, 0\) read 6 elements of a",
                 id="one_thread_doing_all_the_work_fails_on_counts"),
]


@pytest.mark.parametrize("kernel, elements, seed, threads, limits, error, message", WRONG_ADD_ONE)
def test_a_wrong_kernel_fails_with_what_went_wrong(kernel, elements, seed, threads, limits, error,
                                                  message):
    a = puzzles.random_vector(elements, seed)
    with pytest.raises(error, match=message):
        _check_plus_one(kernel, a, threads, **limits)


def test_numpy_in_a_kernel_fails_before_it_runs():
    a = puzzles.random_vector(6, 7)
    assert puzzles.numpy_uses(add_one_by_numpy) == ["np (in add_one_by_numpy)"]
    assert puzzles.numpy_uses(add_one) == []
    with pytest.raises(AssertionError, match=r"add_one_by_numpy uses NumPy \(np"):
        _check_plus_one(add_one_by_numpy, a, 6)


def test_total_reads_are_limited():
    a = puzzles.random_vector(6, 8)
    padded = np.concatenate([[0.0], a.astype(np.float64), [0.0]])
    expected = padded[:-2] + padded[1:-1] + padded[2:]
    run = puzzles.check_puzzle(neighbours_from_global, 1, 8, (a, puzzles.blank(6)), expected,
                               reads={"a": 3})
    assert run.total("a") == 16
    with pytest.raises(AssertionError, match="read a 16 times in all; at most 6 allowed"):
        puzzles.check_puzzle(neighbours_from_global, 1, 8, (a, puzzles.blank(6)), expected,
                             total_reads={"a": 6})
    # The first thread in launch order that went over is named.
    with pytest.raises(AssertionError, match=r"thread \(1, 0, 0\) read 3 elements of a "
                                             r"\(a\[1\], a\[0\], a\[2\]\)"):
        puzzles.check_puzzle(neighbours_from_global, 1, 8, (a, puzzles.blank(6)), expected,
                             reads={"a": 1})


def test_coalesced_reads_go_along_rows():
    a = puzzles.random_matrix(3, 5, 9)
    puzzles.check_puzzle(copy_rows, 1, (8, 8), (a, puzzles.blank((3, 5))), a,
                         coalesced={"a": "read", "out": "write"})
    with pytest.raises(AssertionError, match=r"thread \(0, 0, 0\) read a\[0, 0\] and thread "
                                             r"\(1, 0, 0\) read a\[1, 0\]"):
        puzzles.check_puzzle(copy_columns, 1, (8, 8), (a, puzzles.blank((3, 5))), a,
                             coalesced={"a": "read"})


def test_elements_that_must_not_be_read():
    a = puzzles.random_matrix(4, 4, 10)
    above = np.triu(np.ones((4, 4), dtype=bool), k=1)
    expected = np.where(above, -np.inf, a.astype(np.float64))
    with pytest.raises(AssertionError, match=r"thread \(1, 0, 0\) read a\[0, 1\], which no "
                                             r"thread may read \(above the diagonal\)"):
        puzzles.check_puzzle(lower_copy_reading_all, 1, (4, 4), (a, puzzles.blank((4, 4))),
                             expected, not_read={"a": (above, "above the diagonal")})


def test_shared_memory_is_counted():
    a = puzzles.random_vector(8, 11)
    expected = np.roll(a.astype(np.float64), -HALF_BLOCK)
    run = puzzles.check_puzzle(swap_halves_shared, 1, 8, (a, puzzles.blank(8)), expected,
                               reads={"a": 1}, uses_shared=True, shared_reads=1,
                               shared_writes=1)
    assert run.shared_names() == ["shared staged"]
    # Reading the neighbour's value from global memory instead: a second read of a.
    with pytest.raises(AssertionError, match=r"read 2 elements of a"):
        puzzles.check_puzzle(swap_halves_no_barrier, 1, 8, (a, puzzles.blank(8)), expected,
                             reads={"a": 1})


def test_integer_outputs_are_compared_exactly():
    a = np.arange(6, dtype=np.int32)
    out = puzzles.blank(6, np.int32)
    # add_one adds 1.0 into an int32 array: 1, 2, ..., exact.
    puzzles.check_puzzle(add_one, 1, 8, (a, out), a + 1)
    with pytest.raises(AssertionError, match="differs"):
        puzzles.check_puzzle(add_one, 1, 8, (a, puzzles.blank(6, np.int32)), a + 1.5)


@pytest.mark.parametrize("change, naming", [
    (dict(kernel=not_a_kernel), "kernel must be a @cuda.jit function"),
    (dict(args=[np.zeros(2, np.float32)]), "args must hold the 2 arguments"),
    (dict(args="a, out"), "args must be a tuple"),
    (dict(output="result"), "output must name one of add_one's parameters"),
    (dict(expected=np.zeros(3)), r"expected must have the shape of out, \(4,\)"),
    (dict(total_reads={"b": 1}), "total_reads names b"),
    (dict(coalesced={"a": "sideways"}), "coalesced"),
    (dict(reads={"b": 1}), "reads names 'b'"),
])
def test_check_puzzle_refuses_bad_arguments(change, naming):
    a = puzzles.random_vector(4, 12)
    call = dict(kernel=add_one, grid=1, block=4, args=(a, puzzles.blank(4)),
                expected=_plus_one(a))
    call.update(change)
    with pytest.raises(ValueError, match=naming):
        puzzles.check_puzzle(call.pop("kernel"), call.pop("grid"), call.pop("block"),
                             call.pop("args"), call.pop("expected"), **call)


def test_the_output_must_be_an_array():
    with pytest.raises(ValueError, match="the argument out must be a numpy array"):
        puzzles.check_puzzle(add_one, 1, 4, (puzzles.random_vector(4, 1), 3.0), np.zeros(4))


# --------------------------------------------------------------------------
# check_compiles: PTX for a real GPU
# --------------------------------------------------------------------------

def test_kernel_source_ignores_globals_named_like_attributes():
    # `cuda.threadIdx.x` names the attribute x, not this module's global x.
    source, name = ptx.kernel_module_source(copy_rows)
    assert name == "copy_rows" and "x = " not in source.split("def copy_rows")[0]


def test_check_compiles_finds_shared_memory_and_barriers():
    a = puzzles.random_vector(8, 13)
    found = puzzles.check_compiles(swap_halves_shared, a, a, shared=True, barriers=True)
    assert found.shared_bytes == 4 * SWAPPED and found.barriers >= 1
    puzzles.check_compiles(add_one, a, a, what="puzzle 0")
    with pytest.raises(AssertionError, match="puzzle 8 must stage tiles in shared memory"):
        puzzles.check_compiles(add_one, a, a,
                               what="puzzle 8", shared=True)
    with pytest.raises(AssertionError, match="declares shared memory but never reads it"):
        puzzles.check_compiles(swap_halves_no_barrier, a, a, what="puzzle 8", shared=True)
    with pytest.raises(AssertionError, match="must synchronise its block"):
        puzzles.check_compiles(swap_halves_no_barrier, a, a, barriers=True)
    with pytest.raises(ValueError, match="kernel must be a @cuda.jit function"):
        puzzles.check_compiles(not_a_kernel, a, a)


def test_check_compiles_refuses_a_kernel_that_only_the_simulator_runs():
    a = puzzles.random_vector(8, 14)
    with pytest.raises(AssertionError, match="does not compile for a GPU"):
        puzzles.check_compiles(add_one_by_numpy, a, a)


# --------------------------------------------------------------------------
# The puzzles' listing and the pictures
# --------------------------------------------------------------------------

def test_listing_reads_the_puzzles_and_their_points():
    found = pictures.listing(SOLUTIONS)
    assert [p["number"] for p in found] == list(range(1, len(found) + 1))
    assert len(found) >= 12
    assert all(p["function"] and p["points"] >= 2 for p in found)
    assert found[0]["function"] == "relu"


def test_listing_refuses_a_heading_with_other_points(tmp_path):
    cells = json.loads(SOLUTIONS.read_text())
    for cell in cells["cells"]:
        source = "".join(cell["source"])
        if source.startswith("## Puzzle 1:"):
            cell["source"] = source.replace("(2 points)", "(5 points)")
    wrong = tmp_path / "wrong.ipynb"
    wrong.write_text(json.dumps(cells))
    with pytest.raises(ValueError, match="puzzle 1 states other points"):
        pictures.listing(wrong)
    with pytest.raises(ValueError, match="notebook must be an existing .ipynb"):
        pictures.listing(tmp_path / "missing.ipynb")


@pytest.mark.parametrize("draw", [
    lambda: pictures.draw_launch(20, 8, blocks=3),
    lambda: pictures.draw_grid((7, 7), (4, 4), (2, 2), mask="causal"),
    lambda: pictures.draw_broadcast(3, 6),
    lambda: pictures.draw_window(20, 8, 4),
    lambda: pictures.draw_tree(16, op="max"),
    lambda: pictures.draw_scan(8),
    lambda: pictures.draw_tile_product(8),
    lambda: pictures.draw_transpose((6, 10), 4),
])
def test_every_picture_draws(draw):
    import matplotlib.pyplot as plt

    ax = draw()
    assert ax.patches and ax.get_title()
    plt.close(ax.figure)


def test_the_launch_picture_crosses_out_idle_threads():
    import matplotlib.pyplot as plt

    ax = pictures.draw_launch(20, 8, blocks=3)
    assert "4 threads idle" in ax.get_title()
    assert len(ax.lines) - 3 == 4  # one cross per idle thread, beside the three block bars
    plt.close(ax.figure)


@pytest.mark.parametrize("call, naming", [
    (lambda: pictures.draw_launch(100, 8), "at most 64"),
    (lambda: pictures.draw_grid((4, 4), (4, 4), mask="upper"), "mask must"),
    (lambda: pictures.draw_window(20, 4, 8), "window must be at most block"),
    (lambda: pictures.draw_tree(12), "power of two"),
    (lambda: pictures.draw_tree(8, op="min"), "op must"),
    (lambda: pictures.draw_scan(1), "n must"),
    (lambda: pictures.draw_tile_product(4, thread=(4, 0)), "thread must"),
    (lambda: pictures.draw_transpose((6, 10), 8), "tile that fits"),
])
def test_pictures_refuse_bad_input(call, naming):
    with pytest.raises(ValueError, match=naming):
        call()


def test_trace_draws_vectors_as_strips_and_refuses_unknown_names():
    import matplotlib.pyplot as plt

    a = puzzles.random_vector(16, 15)
    run = tracing.trace(neighbours_from_global, 1, 16, a, puzzles.blank(16))
    figure = run.draw(["a"])
    width, height = figure.get_size_inches()
    assert width > 2 * height  # a strip, not a square
    reads = figure.axes[0].images[0].get_array()
    assert reads.tolist() == [[2] + [3] * 14 + [2]]
    plt.close(figure)
    square = tracing.trace(copy_rows, 1, (4, 4), puzzles.random_matrix(3, 4, 16),
                           puzzles.blank((3, 4))).draw()
    assert tuple(square.get_size_inches()) == (2 * 2.8, 4.2)  # matrices: as before
    plt.close(square)
    with pytest.raises(ValueError, match="names must be some of"):
        run.draw(["b"])


@pytest.mark.skipif(on_gpu(), reason="on a GPU, kernels compile in this process, not a compiler's")
def test_an_interrupted_compile_does_not_hand_its_reply_to_the_next(monkeypatch):
    a = puzzles.random_vector(8, 17)
    puzzles.check_compiles(add_one, a, a)  # the compiler process is running

    def interrupted(stream, timeout_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(ptx, "_read_line", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ptx.ptx(swap_halves_shared, a, a)
    assert ptx._compiler._process is None  # stopped: its late reply is gone with it
    monkeypatch.undo()
    assert puzzles.check_compiles(swap_halves_shared, a, a, shared=True).shared_bytes > 0
    assert ptx.facts(add_one, a, a).shared_bytes == 0
