"""The GPU puzzles' pictures of the programming model, and the listing of their points.

The drawing functions make chapter 8's pictures: which thread handles which
element, how blocks tile a matrix, a halo, a reduction tree, a scan, a tile
product, a transpose. Like the course's other plots they take ``ax=None`` and
return the axes; matplotlib is imported inside them. :func:`listing` reads
the puzzles, their functions and their points out of the nbgrader notebook,
for the chapter's table. Both are presentation, kept apart from the puzzles'
checks in :mod:`gpucourse.grader.puzzles`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from gpucourse.grader.launches import _whole


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
    n = _whole("n", n)
    threads_per_block = _whole("threads_per_block", threads_per_block)
    blocks = _whole("blocks", blocks)
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
    rows, cols = (_whole("shape[0]", shape[0]), _whole("shape[1]", shape[1]))
    bx, by = (_whole("block[0]", block[0]), _whole("block[1]", block[1]))
    gx, gy = (_whole("grid[0]", grid[0]), _whole("grid[1]", grid[1]))
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
    rows = _whole("rows", rows)
    cols = _whole("cols", cols)
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
    n = _whole("n", n)
    block = _whole("block", block)
    window = _whole("window", window)
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
    threads = _whole("threads", threads, 2)
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
    n = _whole("n", n, 2)
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
    tile = _whole("tile", tile, 2)
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
    rows, cols = (_whole("shape[0]", shape[0]), _whole("shape[1]", shape[1]))
    tile = _whole("tile", tile)
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
