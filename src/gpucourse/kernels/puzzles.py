"""Kept for old imports; the code lives in :mod:`gpucourse.grader.puzzles` (inputs and
checks) and :mod:`gpucourse.chapters.puzzles` (the pictures and the listing of points).

``from gpucourse.kernels import puzzles`` still gives every name this module
used to hold.
"""

from gpucourse.chapters.puzzles import (  # noqa: F401 (re-exported)
    draw_broadcast, draw_grid, draw_launch, draw_scan, draw_tile_product, draw_transpose,
    draw_tree, draw_window, listing,
    _COLOURS, _HEADING, _arrow, _axes, _box,
)
from gpucourse.grader.puzzles import (  # noqa: F401 (re-exported)
    SHOWN, UNWRITTEN_INT, blank, blocks, check_compiles, check_puzzle, expect_coalesced,
    expect_each_written_once, expect_no_numpy, expect_not_read, expect_total, numpy_uses,
    random_counts, random_matrix, random_vector, start_compiler,
    _check_kernel, _elements, _globals_read, _name, _warm_up_kernel,
)
