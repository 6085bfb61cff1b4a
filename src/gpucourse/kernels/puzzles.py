"""The GPU puzzles (chapter 8's on-ramp): inputs, checks and pictures.

The puzzles are small Numba-CUDA kernels that the student writes in
``exercises/08_gpu_puzzles``. Each is graded three ways, by the helpers here
and in :mod:`gpucourse.kernels.inspection`:

* **by value**: :func:`check_puzzle` launches the kernel on Numba's simulator
  and compares its output with the float64 NumPy reference that the test cell
  computed (this module holds no answers);
* **by what each thread touches**: the same launch counts, per thread, the
  elements read and written in global and shared memory, and fails a kernel
  that reads more than the puzzle allows, naming the thread and what it read;
* **by what a GPU would run**: :func:`check_compiles` compiles the kernel for
  a real GPU (PTX, on the CPU) and checks for shared memory and barriers
  where the puzzle is about them.

The drawing functions make the chapter's pictures of the programming model:
which thread handles which element, how blocks tile a matrix, a halo, a
reduction tree, a scan, a tile product. Like the course's other plots they
take ``ax=None`` and return the axes; matplotlib is imported inside them.
"""

from __future__ import annotations

import dis
import json
import math
import re
import types
from pathlib import Path

import numpy as np

from gpucourse import verify
from gpucourse.kernels import inspection

# Where a puzzle's output starts: a float element no thread writes stays NaN,
# an integer one stays -1.
UNWRITTEN_INT = -1
# How many offending elements or threads a message lists.
SHOWN = 4


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def random_vector(n: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """``n`` float32 values drawn from a normal distribution of standard deviation ``scale``."""
    n = _positive_int("n", n)
    seed = _positive_int("seed", seed, minimum=0)
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def random_matrix(rows: int, cols: int, seed: int, scale: float = 1.0) -> np.ndarray:
    """A ``rows x cols`` float32 matrix of normal values of standard deviation ``scale``."""
    rows = _positive_int("rows", rows)
    cols = _positive_int("cols", cols)
    return random_vector(rows * cols, seed, scale).reshape(rows, cols)


def random_counts(n: int, seed: int, high: int = 10) -> np.ndarray:
    """``n`` int32 counts drawn uniformly from 0 to ``high`` (inclusive)."""
    n = _positive_int("n", n)
    seed = _positive_int("seed", seed, minimum=0)
    high = _positive_int("high", high)
    return np.random.default_rng(seed).integers(0, high + 1, n).astype(np.int32)


def blank(shape, dtype=np.float32) -> np.ndarray:
    """An output array that shows what no thread wrote: NaN (floats) or -1 (integers)."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if not dims or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                           and d >= 1 for d in dims):
        raise ValueError(f"shape must be a whole number >= 1 or a tuple of them, got {shape!r}")
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return np.full(dims, np.nan, dtype=kind)
    if kind.kind == "i":
        return np.full(dims, UNWRITTEN_INT, dtype=kind)
    raise ValueError(f"dtype must be a float or signed integer dtype, got {kind}")


def blocks(size: int, per_block: int) -> int:
    """How many blocks of ``per_block`` threads cover ``size`` elements (the ceiling)."""
    size = _positive_int("size", size)
    per_block = _positive_int("per_block", per_block)
    return (size + per_block - 1) // per_block


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------

def _name(kernel) -> str:
    return getattr(getattr(kernel, "py_func", kernel), "__name__", "the kernel")


def _check_kernel(kernel) -> types.FunctionType:
    function = getattr(kernel, "py_func", None)
    if not isinstance(function, types.FunctionType):
        raise ValueError(f"kernel must be a @cuda.jit function, got {type(kernel).__name__} "
                         "(did you forget the @cuda.jit line?)")
    return function


def _globals_read(function) -> list[str]:
    """The global names a function's code loads (attribute names excluded)."""
    names = []

    def visit(code):
        names.extend(i.argval for i in dis.get_instructions(code)
                     if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                visit(constant)

    visit(function.__code__)
    return list(dict.fromkeys(names))


def numpy_uses(kernel) -> list[str]:
    """The NumPy names a kernel (or a device function it calls) uses, as "name (in fn)"."""
    found, seen = [], set()

    def visit(function):
        if id(function) in seen:
            return
        seen.add(id(function))
        scope = function.__globals__
        for name in _globals_read(function):
            value = scope.get(name)
            if value is None:
                continue
            module = value.__name__ if isinstance(value, types.ModuleType) else \
                getattr(value, "__module__", None)
            if isinstance(module, str) and (module == "numpy" or module.startswith("numpy.")):
                found.append(f"{name} (in {function.__name__})")
            elif isinstance(getattr(value, "py_func", None), types.FunctionType):
                visit(value.py_func)

    visit(_check_kernel(kernel))
    return found


def expect_no_numpy(kernel) -> None:
    """Fail a kernel that calls NumPy: a puzzle's threads do the work themselves."""
    uses = numpy_uses(kernel)
    if uses:
        raise AssertionError(
            f"{_name(kernel)} uses NumPy ({', '.join(uses)}). On the simulator a kernel is "
            "plain Python, so NumPy would run there, but a puzzle's threads must do the work "
            "themselves, element by element; use numbers, math and numba's float32")


def _elements(elements) -> str:
    return ", ".join("[" + ", ".join(map(str, e)) + "]" for e in elements)


def expect_each_written_once(run: inspection.Trace, output: str) -> None:
    """Fail unless every element of ``output`` was written by exactly one thread."""
    counts = run.element_counts(output, "write")
    never = [tuple(int(i) for i in e) for e in np.argwhere(counts == 0)]
    if never:
        shown = ", ".join(f"{output}{_elements([e])}" for e in never[:SHOWN])
        more = f" and {len(never) - SHOWN} more" if len(never) > SHOWN else ""
        raise AssertionError(
            f"no thread wrote {shown}{more} ({len(never)} of {counts.size} elements of "
            f"{output} were never written): every element needs a thread; check that the "
            "launch covers it and that your bounds test lets it through")
    twice = [tuple(int(i) for i in e) for e in np.argwhere(counts > 1)]
    if twice:
        element = twice[0]
        writers = [inspection.thread_name(t) for t, seen in run.accesses(output, "write").items()
                   if element in seen]
        raise AssertionError(
            f"{output}{_elements([element])} was written {counts[element]} times (by "
            f"{'; '.join(writers[:SHOWN])}): each element must be written by exactly one "
            "thread, once")


def expect_not_read(run: inspection.Trace, name: str, mask, why: str = "") -> None:
    """Fail when any thread read an element of ``name`` where ``mask`` is True."""
    if name not in run.arrays:
        raise ValueError(f"name must be one of {sorted(run.arrays)}, got {name!r}")
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != run.arrays[name].shape:
        raise ValueError(f"mask must be a boolean array of {name}'s shape "
                         f"{run.arrays[name].shape}, got {mask.dtype} {mask.shape}")
    for thread, elements in sorted(run.accesses(name, "read").items()):
        bad = [e for e in elements if mask[e]]
        if bad:
            raise AssertionError(
                f"{inspection.thread_name(thread)} read {name}{_elements(bad[:SHOWN])}"
                f"{' and more' if len(bad) > SHOWN else ''}, which no thread may read"
                + (f" ({why})" if why else ""))


def expect_coalesced(run: inspection.Trace, name: str, kind: str = "read") -> None:
    """Fail unless threads next to each other in x touch neighbouring elements of a row.

    For each block and each (threadIdx.y, threadIdx.z), the first element of
    ``name`` that each thread reads (or writes) must sit in the same row as its
    neighbour's, one column (last index) further per step of threadIdx.x. That
    is what lets the 32 threads of a warp share a few memory transactions.
    """
    first = {thread: elements[0] for thread, elements in run.accesses(name, kind).items()
             if elements and thread != ("host",)}
    for (block, index), element in sorted(first.items()):
        neighbour = (block, (index[0] + 1,) + index[1:])
        if neighbour not in first:
            continue
        other = first[neighbour]
        if other[:-1] != element[:-1] or other[-1] != element[-1] + 1:
            verb = "read" if kind == "read" else "wrote"
            raise AssertionError(
                f"in block {block}, thread {index} {verb} {name}{_elements([element])} and "
                f"thread {neighbour[1]} {verb} {name}{_elements([other])}: threads next to "
                f"each other in x (threadIdx.x) must {kind} elements next to each other in a "
                f"row of {name} (the last index), so that a warp's accesses coalesce into few "
                "memory transactions")


def expect_total(run: inspection.Trace, name: str, limit: int, kind: str = "read",
                 why: str = "") -> None:
    """Fail when all threads together access ``name`` more than ``limit`` times."""
    limit = _positive_int("limit", limit, minimum=0)
    total = run.total(name, kind)
    if total > limit:
        raise AssertionError(
            f"the threads {'read' if kind == 'read' else 'wrote'} {name} {total} times in all; "
            f"at most {limit} allowed" + (f" ({why})" if why else ""))


def check_puzzle(kernel, grid, block, args, expected, *, output: str = "out",
                 reads: dict | None = None, writes: dict | None = None,
                 shared_reads: int | None = None, shared_writes: int | None = None,
                 uses_shared: bool | None = None, total_reads: dict | None = None,
                 coalesced: dict | None = None, not_read: dict | None = None,
                 rel: float = 1e-5, abs: float = 1e-5) -> inspection.Trace:
    """Launch a puzzle's kernel on the simulator and check its answer and its accesses.

    ``kernel[grid, block](*args)`` runs with each array argument counted (see
    :func:`inspection.trace`); ``output`` names the kernel's parameter that
    holds the result, which must come in as :func:`blank` so that unwritten
    elements show. Checks, in order, each failing with an AssertionError that
    says what to fix:

    1. the kernel uses no NumPy;
    2. every element of ``output`` is written by exactly one thread;
    3. ``output`` equals ``expected`` (float64, computed by the test cell) to
       ``rel``/``abs`` (exactly, for integer outputs), with the output's dtype;
    4. no thread reads or writes more than ``reads``/``writes``
       ({parameter: most elements per thread}), ``shared_reads``/
       ``shared_writes`` (per thread, all shared arrays together), and shared
       memory is used (or not) as ``uses_shared`` says;
    5. ``total_reads`` ({parameter: most reads by all threads together});
       ``coalesced`` ({parameter: "read" or "write"}) see :func:`expect_coalesced`;
       ``not_read`` ({parameter: boolean mask, or (mask, why)}) elements no
       thread may read.

    Returns the :class:`inspection.Trace` for further checks.
    """
    function = _check_kernel(kernel)
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args must be a tuple of the kernel's arguments, got "
                         f"{type(args).__name__}")
    names = list(function.__code__.co_varnames[:function.__code__.co_argcount])
    if output not in names:
        raise ValueError(f"output must name one of {_name(kernel)}'s parameters "
                         f"({', '.join(names)}), got {output!r}")
    if len(args) != len(names):
        raise ValueError(f"args must hold the {len(names)} arguments of {_name(kernel)} "
                         f"({', '.join(names)}), got {len(args)}")
    result = args[names.index(output)]
    if not isinstance(result, np.ndarray):
        raise ValueError(f"the argument {output} must be a numpy array made by blank(), "
                         f"got {type(result).__name__}")
    reference = np.asarray(expected, dtype=np.float64)
    if reference.shape != result.shape:
        raise ValueError(f"expected must have the shape of {output}, {result.shape}, "
                         f"got {reference.shape}")
    for label, table in (("total_reads", total_reads), ("coalesced", coalesced),
                         ("not_read", not_read)):
        unknown = sorted(set(table or {}) - set(names))
        if unknown:
            raise ValueError(f"{label} names {', '.join(unknown)}, which "
                             f"{'is' if len(unknown) == 1 else 'are'} not a parameter of "
                             f"{_name(kernel)} ({', '.join(names)})")

    expect_no_numpy(kernel)
    run = inspection.trace(kernel, grid, block, *args)
    expect_each_written_once(run, output)
    exact = result.dtype.kind in "iu"
    verify.expect_array(result, reference, dtype=result.dtype, rel=0.0 if exact else rel,
                        abs=0.0 if exact else abs, name=f"{output} of {_name(kernel)}")
    run.expect(reads=reads, writes=writes, shared_reads=shared_reads,
               shared_writes=shared_writes, uses_shared=uses_shared)
    for name, limit in (total_reads or {}).items():
        expect_total(run, name, limit)
    for name, kind in (coalesced or {}).items():
        if kind not in ("read", "write"):
            raise ValueError(f"coalesced[{name!r}] must be 'read' or 'write', got {kind!r}")
        expect_coalesced(run, name, kind)
    for name, rule in (not_read or {}).items():
        mask, why = rule if isinstance(rule, tuple) else (rule, "")
        expect_not_read(run, name, mask, why)
    return run


def check_compiles(kernel, *example_args, what: str | None = None,
                   shared: bool | None = None, barriers: bool | None = None):
    """Compile ``kernel`` for a GPU (PTX, on this CPU) and check its structure.

    ``example_args``: arguments like those of a launch (their types matter).
    ``shared``/``barriers``: the kernel must (True) declare shared memory and
    read it / synchronise its block. Also fails a kernel that calls the
    course's package (:func:`gpucourse.verify.expect_own_work`). Returns the
    :class:`inspection.PTXFacts`.
    """
    _check_kernel(kernel)
    verify.expect_own_work(kernel)
    return inspection.expect_structure(kernel, *example_args, what=what or _name(kernel),
                                       shared=shared, barriers=barriers)


def _warm_up_kernel(source, target):
    target[0] = source[0]


def start_compiler() -> None:
    """Start the PTX compiler now (a couple of seconds, once), so graded cells do not wait."""
    from gpucourse.device import cuda

    example = np.zeros(1, dtype=np.float32)
    inspection.ptx(cuda.jit(_warm_up_kernel), example, example)


# --------------------------------------------------------------------------
# The puzzles' points, read from the notebook
# --------------------------------------------------------------------------

_HEADING = re.compile(r"^##\s+Puzzle\s+(\d+):\s+(.+?)\s+\((\d+)\s+points?\)\s*$", re.M)


def listing(notebook) -> list[dict]:
    """The puzzles of an nbgrader notebook: number, title, function and points, in order.

    Each puzzle is a markdown heading ``## Puzzle N: title (P points)``, a
    solution cell and graded test cells; the points are the test cells'
    nbgrader points, and a heading that states other points is an error.
    """
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be an existing .ipynb file, got {notebook}")
    cells = json.loads(path.read_text())["cells"]
    found: list[dict] = []
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        meta = cell.get("metadata", {}).get("nbgrader", {})
        heading = _HEADING.search(source) if cell["cell_type"] == "markdown" else None
        if heading:
            found.append({"number": int(heading.group(1)), "title": heading.group(2),
                          "stated_points": int(heading.group(3)), "function": None,
                          "points": 0})
        elif found and cell["cell_type"] == "code" and meta.get("solution"):
            match = re.search(r"^def\s+(\w+)", source, re.M)
            found[-1]["function"] = match.group(1) if match else None
        elif found and cell["cell_type"] == "code" and meta.get("grade"):
            found[-1]["points"] += meta.get("points", 0)
    for puzzle in found:
        if puzzle.pop("stated_points") != puzzle["points"]:
            raise ValueError(f"puzzle {puzzle['number']} states other points in its heading "
                             f"than its test cells give ({puzzle['points']})")
    return found


# --------------------------------------------------------------------------
# Pictures
# --------------------------------------------------------------------------

_COLOURS = ("#9ecae1", "#a1d99b", "#fdae6b", "#bcbddc", "#fc9272", "#c7e9c0")


def _axes(ax, size):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=size)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def _box(ax, x, y, text="", colour="white", edge="0.3", style="-", size=8, text_colour="black",
         width=1.0, height=1.0, hatch=None):
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), width, height, facecolor=colour, edgecolor=edge, lw=0.8,
                           ls=style, hatch=hatch))
    if text:
        ax.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=size,
                color=text_colour)


def _arrow(ax, start, end, colour="0.35", width=0.8):
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="->", color=colour, lw=width, shrinkA=1, shrinkB=1))


def draw_launch(n: int, threads_per_block: int, blocks: int = 1, ax=None):
    """A 1-D launch: which element each thread handles, and the threads a guard idles.

    Thread boxes (coloured by block, labelled with threadIdx.x) sit above the
    array; an arrow joins thread ``i = blockIdx.x * blockDim.x + threadIdx.x``
    to element ``i``; threads with ``i >= n`` are crossed out.
    """
    n = _positive_int("n", n)
    threads_per_block = _positive_int("threads_per_block", threads_per_block)
    blocks = _positive_int("blocks", blocks)
    total = threads_per_block * blocks
    if total > 64 or n > 64:
        raise ValueError(f"draw at most 64 threads and elements, got {total} threads and "
                         f"{n} elements")
    ax = _axes(ax, (max(n, total) * 0.42 + 1.5, 2.4))
    for i in range(total):
        block, local = divmod(i, threads_per_block)
        idle = i >= n
        _box(ax, i, 2, str(local), colour="0.92" if idle else _COLOURS[block % len(_COLOURS)],
             style="--" if idle else "-", text_colour="0.5" if idle else "black")
        if idle:
            ax.plot([i + 0.2, i + 0.8], [2.2, 2.8], color="0.5", lw=0.8)
        else:
            _arrow(ax, (i + 0.5, 2), (i + 0.5, 1))
    for b in range(blocks):
        left = b * threads_per_block
        ax.text(left + threads_per_block / 2, 3.3, f"block {b}", ha="center", va="bottom",
                fontsize=8)
        ax.plot([left + 0.05, left + threads_per_block - 0.05], [3.15, 3.15], color="0.3", lw=1)
    for i in range(n):
        _box(ax, i, 0, str(i), colour="white")
    ax.text(-0.3, 2.5, "threads", ha="right", va="center", fontsize=8)
    ax.text(-0.3, 0.5, "elements", ha="right", va="center", fontsize=8)
    idle = max(total - n, 0)
    ax.set_title(f"{blocks} block{'s' if blocks > 1 else ''} of {threads_per_block} threads "
                 f"over {n} elements" + (f": {idle} thread{'s' if idle > 1 else ''} idle"
                                         if idle else ""), fontsize=9)
    ax.set_xlim(-2.5, max(n, total) + 0.5)
    ax.set_ylim(-0.3, 4.0)
    return ax


def draw_grid(shape, block, grid=(1, 1), mask=None, ax=None):
    """A 2-D launch over a matrix: each cell is labelled with the thread (x, y) that owns it.

    ``block``/``grid``: (x, y) sizes, x along columns. Cells are coloured by
    block; cells past the matrix (threads a guard idles) are dashed. ``mask``:
    "causal" greys the cells above the diagonal.
    """
    rows, cols = (_positive_int("shape[0]", shape[0]), _positive_int("shape[1]", shape[1]))
    bx, by = (_positive_int("block[0]", block[0]), _positive_int("block[1]", block[1]))
    gx, gy = (_positive_int("grid[0]", grid[0]), _positive_int("grid[1]", grid[1]))
    if mask not in (None, "causal"):
        raise ValueError(f"mask must be None or 'causal', got {mask!r}")
    width, height = gx * bx, gy * by
    if width * height > 256:
        raise ValueError(f"draw at most 256 threads, got {width * height}")
    ax = _axes(ax, (width * 0.55 + 1.5, height * 0.55 + 1.2))
    for row in range(height):
        for col in range(width):
            inside = row < rows and col < cols
            block_index = (col // bx) + (row // by) * gx
            colour = _COLOURS[block_index % len(_COLOURS)] if inside else "white"
            if inside and mask == "causal" and col > row:
                colour = "0.8"
            _box(ax, col, -row - 1, f"{col % bx},{row % by}", colour=colour,
                 style="-" if inside else "--", size=6,
                 text_colour="black" if inside else "0.6")
    from matplotlib.patches import Rectangle

    for j in range(gy):
        for i in range(gx):
            ax.add_patch(Rectangle((i * bx, -(j + 1) * by), bx, by, fill=False, lw=2,
                                   edgecolor="0.15"))
    if gx * gy > 1:
        for i in range(gx):
            ax.text(i * bx + bx / 2, 0.1, f"blockIdx.x = {i}", ha="center", va="bottom",
                    fontsize=7)
        for j in range(gy):
            ax.text(width + 0.2, -j * by - by / 2, f"blockIdx.y = {j}", ha="left",
                    va="center", fontsize=7, rotation=270)
    ax.add_patch(Rectangle((0, -rows), cols, rows, fill=False, lw=1.5, edgecolor="tab:red"))
    ax.text(width / 2, -height - 0.5,
            "column = blockIdx.x * blockDim.x + threadIdx.x", ha="center", va="top", fontsize=8)
    ax.text(-0.5, -height / 2, "row = blockIdx.y * blockDim.y + threadIdx.y", ha="right",
            va="center", fontsize=8, rotation=90)
    ax.set_title(f"a {rows} x {cols} matrix (red), blocks of {bx} x {by} threads (x, y)"
                 + ("; grey: above the diagonal" if mask else ""), fontsize=9)
    ax.set_xlim(-1.5, width + 1.0)
    ax.set_ylim(-height - 1.6, 1.0)
    return ax


def draw_broadcast(rows: int, cols: int, ax=None):
    """A bias vector broadcast over the rows of a matrix: column c of every row reads bias[c]."""
    rows = _positive_int("rows", rows)
    cols = _positive_int("cols", cols)
    if rows * cols > 100:
        raise ValueError(f"draw at most 100 cells, got {rows * cols}")
    ax = _axes(ax, (cols * 0.7 + 1.5, rows * 0.6 + 1.8))
    for c in range(cols):
        colour = _COLOURS[c % len(_COLOURS)]
        _box(ax, c, 1.0, f"b[{c}]", colour=colour, size=7)
        for r in range(rows):
            _box(ax, c, -r - 1, f"x[{r},{c}]", colour=colour, size=6)
        _arrow(ax, (c + 0.5, 1.0), (c + 0.5, 0.05), colour="0.4")
    ax.text(-0.3, 1.5, "bias", ha="right", va="center", fontsize=8)
    ax.text(-0.3, -rows / 2, "x", ha="right", va="center", fontsize=8)
    ax.set_title(f"out[r, c] = x[r, c] + bias[c]: each bias value serves all {rows} rows",
                 fontsize=9)
    ax.set_xlim(-1.2, cols + 0.2)
    ax.set_ylim(-rows - 0.3, 2.3)
    return ax


def draw_window(n: int, block: int, window: int, ax=None):
    """A sliding window through shared memory: one block's chunk and its halo.

    The block (the second one when there are two or more) copies its
    ``block`` elements and the ``window - 1`` before them (the halo, loaded by
    its first threads) into shared memory; then each thread reads its window
    from there.
    """
    n = _positive_int("n", n)
    block = _positive_int("block", block)
    window = _positive_int("window", window)
    if window > block:
        raise ValueError(f"window must be at most block ({block}), got {window}")
    if n > 48:
        raise ValueError(f"draw at most 48 elements, got {n}")
    shown = 1 if n > block else 0
    start = shown * block
    halo = window - 1
    ax = _axes(ax, (max(n, block + halo) * 0.45 + 2, 3.2))
    for i in range(n):
        owner = i // block
        in_halo = start - halo <= i < start
        _box(ax, i, 0, str(i), colour=_COLOURS[owner % len(_COLOURS)],
             edge="tab:red" if in_halo else "0.3", size=7)
    left = start - halo
    for j in range(block + halo):
        source = left + j
        is_halo = j < halo
        exists = 0 <= source < n
        label = str(source) if exists else "0"
        colour = "#fdd0a2" if is_halo else _COLOURS[shown % len(_COLOURS)]
        _box(ax, left + j, 2.4, label, colour=colour if exists or is_halo else "0.92", size=7,
             hatch="//" if is_halo else None)
        if exists:
            _arrow(ax, (source + 0.5, 1.0), (left + j + 0.5, 2.4),
                   colour="tab:red" if is_halo else "0.5")
    thread = min(block - 1, 2)
    ax.plot([left + thread + 0.05, left + thread + window - 0.05], [3.6, 3.6],
            color="tab:blue", lw=2)
    ax.text(left + thread + window / 2, 3.7, f"thread {thread} reads its {window} values",
            ha="center", va="bottom", fontsize=7, color="tab:blue")
    ax.text(left - 0.3, 2.9, "shared", ha="right", va="center", fontsize=8)
    ax.text(-0.3, 0.5, "x", ha="right", va="center", fontsize=8)
    ax.set_title(f"block {shown} stages {block} elements and a halo of {halo} (hatched) "
                 "in shared memory", fontsize=9)
    ax.set_xlim(min(left, 0) - 2.2, max(n, left + block + halo) + 0.3)
    ax.set_ylim(-0.3, 4.4)
    return ax


def draw_tree(threads: int, op: str = "+", ax=None):
    """A block reduction in shared memory: at each step, thread t < stride combines
    s[t] with s[t + stride]; after log2(threads) steps (one barrier each) s[0] holds it all."""
    threads = _positive_int("threads", threads, minimum=2)
    if threads & (threads - 1) or threads > 32:
        raise ValueError(f"threads must be a power of two from 2 to 32, got {threads}")
    if op not in ("+", "max"):
        raise ValueError(f"op must be '+' or 'max', got {op!r}")
    steps = int(math.log2(threads))
    ax = _axes(ax, (threads * 0.45 + 2.5, (steps + 1) * 0.8 + 0.8))
    ranges = [(t, t) for t in range(threads)]
    for step in range(steps + 1):
        y = -step * 1.6
        stride = threads >> step
        for t in range(threads):
            low, high = ranges[t]
            active = step == 0 or t < stride
            text = (f"{low}" if low == high else f"{low}-{high}") if active else ""
            _box(ax, t, y, text, colour=_COLOURS[0] if active else "0.95", size=6,
                 edge="0.3" if active else "0.8")
        if step < steps:
            half = stride // 2
            for t in range(half):
                _arrow(ax, (t + half + 0.5, y), (t + 0.5, y - 0.6), colour="tab:red")
                _arrow(ax, (t + 0.5, y), (t + 0.5, y - 0.6), colour="0.5")
                ranges[t] = (ranges[t][0], ranges[t + half][1])
            ax.text(threads + 0.4, y - 0.3,
                    f"stride {half}: threads 0-{half - 1}" if half > 1 else "stride 1: thread 0",
                    ha="left", va="center", fontsize=7)
    ax.set_title(f"a {'sum' if op == '+' else 'maximum'} over {threads} threads in "
                 f"{steps} steps; a box shows which elements it covers", fontsize=9)
    ax.set_xlim(-0.5, threads + 4.5)
    ax.set_ylim(-steps * 1.6 - 0.3, 1.4)
    return ax


def draw_scan(n: int, ax=None):
    """An inclusive prefix sum in log2(n) steps: at offset d, element t adds element t - d."""
    n = _positive_int("n", n, minimum=2)
    if n > 16:
        raise ValueError(f"draw at most 16 elements, got {n}")
    steps = math.ceil(math.log2(n))
    ax = _axes(ax, (n * 0.55 + 2.5, (steps + 1) * 0.9 + 0.8))
    low = list(range(n))
    for step in range(steps + 1):
        y = -step * 1.6
        for t in range(n):
            text = f"{low[t]}" if low[t] == t else f"{low[t]}-{t}"
            _box(ax, t, y, text, colour=_COLOURS[1] if low[t] == 0 else _COLOURS[0], size=6)
        if step < steps:
            offset = 1 << step
            for t in range(offset, n):
                _arrow(ax, (t - offset + 0.5, y), (t + 0.5, y - 0.6), colour="tab:red", width=0.6)
            low = [low[t - offset] if t >= offset else low[t] for t in range(n)]
            ax.text(n + 0.4, y - 0.3, f"offset {offset}", ha="left", va="center", fontsize=7)
    ax.set_title(f"an inclusive scan of {n} elements in {steps} steps; a box shows the "
                 "elements it sums (green: a finished prefix)", fontsize=9)
    ax.set_xlim(-0.5, n + 3)
    ax.set_ylim(-steps * 1.6 - 0.3, 1.4)
    return ax


def draw_tile_product(tile: int, thread=(2, 1), ax=None):
    """One tile of a matrix product: thread (x, y) multiplies row y of A's tile by
    column x of B's tile, both read from shared memory."""
    tile = _positive_int("tile", tile, minimum=2)
    if tile > 8:
        raise ValueError(f"draw tiles of at most 8, got {tile}")
    tx, ty = thread
    if not (0 <= tx < tile and 0 <= ty < tile):
        raise ValueError(f"thread must be (x, y) inside the tile, got {thread!r}")
    ax = _axes(ax, (3 * tile * 0.3 + 2, tile * 0.3 + 1.0))
    panels = (("A tile", 0), ("B tile", tile + 1.5), ("out", 2 * tile + 3))
    for title, left in panels:
        for r in range(tile):
            for c in range(tile):
                mine = ((title == "A tile" and r == ty) or (title == "B tile" and c == tx)
                        or (title == "out" and (r, c) == (ty, tx)))
                _box(ax, left + c, -r - 1, colour="tab:orange" if mine else _COLOURS[0])
        ax.text(left + tile / 2, 0.2, title + (" (shared)" if title != "out" else ""),
                ha="center", va="bottom", fontsize=8)
    ax.text(tile + 0.75, -tile / 2, "x", ha="center", va="center", fontsize=12)
    ax.text(2 * tile + 2.25, -tile / 2, "=", ha="center", va="center", fontsize=12)
    ax.set_title(f"thread (x={tx}, y={ty}): out[{ty}, {tx}] = row {ty} of A . column {tx} "
                 "of B", fontsize=9)
    ax.set_xlim(-0.3, 3 * tile + 3.3)
    ax.set_ylim(-tile - 0.3, 1.2)
    return ax


def draw_transpose(shape, tile: int, ax=None):
    """Transposing through a shared tile: a block reads a tile of x along its rows and
    writes the transposed tile into out along out's rows."""
    rows, cols = (_positive_int("shape[0]", shape[0]), _positive_int("shape[1]", shape[1]))
    tile = _positive_int("tile", tile)
    if rows > 12 or cols > 12 or tile > min(rows, cols):
        raise ValueError(f"draw matrices of at most 12 x 12 with a tile that fits, got "
                         f"{shape!r} and tile {tile}")
    from matplotlib.patches import Rectangle

    ax = _axes(ax, ((rows + cols) * 0.45 + 2.5, max(rows, cols) * 0.45 + 1.2))
    bx = 1 if cols >= 2 * tile else 0  # the block drawn: (bx, 0)
    for r in range(rows):
        for c in range(cols):
            mine = 0 <= r < tile and bx * tile <= c < (bx + 1) * tile
            _box(ax, c, -r - 1, f"{r},{c}" if mine else "",
                 colour="#fdd0a2" if mine else "white", edge="0.6", size=5)
    left = cols + 2
    for r in range(cols):
        for c in range(rows):
            mine = bx * tile <= r < (bx + 1) * tile and 0 <= c < tile
            _box(ax, left + c, -r - 1, f"{c},{r}" if mine else "",
                 colour="#fdd0a2" if mine else "white", edge="0.6", size=5)
    for r in range(tile):
        _arrow(ax, (bx * tile + 0.1, -r - 0.85), (bx * tile + tile - 0.1, -r - 0.85),
               colour="tab:blue")
        _arrow(ax, (left + 0.1, -(bx * tile + r) - 0.85), (left + tile - 0.1,
               -(bx * tile + r) - 0.85), colour="tab:blue")
    ax.add_patch(Rectangle((0, -rows), cols, rows, fill=False, lw=1.2))
    ax.add_patch(Rectangle((left, -cols), rows, cols, fill=False, lw=1.2))
    ax.text(cols / 2, 0.2, f"x ({rows} x {cols})", ha="center", va="bottom", fontsize=8)
    ax.text(left + rows / 2, 0.2, f"out = x.T ({cols} x {rows})", ha="center", va="bottom",
            fontsize=8)
    ax.set_title(f"block ({bx}, 0) reads a {tile} x {tile} tile of x along its rows (each "
                 "arrow: one row of threads)\nand writes it, transposed, along rows of out "
                 "(labels: where each value came from in x)", fontsize=9)
    ax.set_xlim(-0.3, left + rows + 0.3)
    ax.set_ylim(-max(rows, cols) - 0.3, 1.2)
    return ax
