"""Run a notebook's code cells in order, in one namespace, and say which failed: the solutions on a GPU.

    GPUCOURSE_DEVICE=gpu PYTHONPATH=src python3 benchmarks/run_notebook.py NOTEBOOK [NOTEBOOK ...]

The GPU machine's image has Python, Numba and torch but no Jupyter, so this
reads the notebook's JSON and executes each code cell as a kernel would
(lines of IPython magics, `%` and `!`, left out), from the notebook's own
folder. Each cell is reported with its nbgrader id, its time and, if it
failed, its error's last line; the exit status is the number of cells that
failed. A failing cell does not stop the others (as nbgrader's autograde).
"""

from __future__ import annotations

import json
import linecache
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30.4 with numpy 2.5 (PLATFORM.md)
    np.row_stack = np.vstack


def run(path: Path) -> int:
    """Run one notebook; the number of its code cells that failed."""
    cells = json.loads(path.read_text())["cells"]
    namespace = {"__name__": "__main__"}
    failed, here = 0, os.getcwd()
    os.chdir(path.parent)
    try:
        for number, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            code = "\n".join(line for line in source.splitlines()
                             if not line.lstrip().startswith(("%", "!")))
            name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {number}"
            start = time.perf_counter()
            # Each cell's source where inspect finds it, as IPython keeps it
            # (the graders read a kernel's source to compile it for the GPU).
            filename = f"<{path.name}:{name}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            try:
                exec(compile(code, filename, "exec"), namespace)
                status = "ok"
            except NotImplementedError:
                status = "not written"
                failed += 1
            except Exception as error:  # a failing cell is reported, the rest still run
                failed += 1
                status = f"FAILED: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
                traceback.print_exc(limit=3)
            print(f"{path.name} {name}: {status} ({time.perf_counter() - start:.1f} s)", flush=True)
    finally:
        os.chdir(here)
    return failed


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.exit("usage: python3 benchmarks/run_notebook.py NOTEBOOK [NOTEBOOK ...]")
    failed = sum(run(Path(p).resolve()) for p in argv)
    print(f"{failed} cell(s) failed")
    return min(failed, 255)


if __name__ == "__main__":
    sys.exit(main())
