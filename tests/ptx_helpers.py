"""What a GPU would run, read on a machine without one: helpers for the tests
that compile a kernel to PTX (numba.cuda.compile_ptx, NVVM from the
numba-cuda[cu13] wheels) and ask ptxas, through nvJitLink, for its registers
and spills."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Run first in the compiling process: the real compiler (not the simulator)
# and a stand-in for the GPU that device functions ask for a compute capability.
PRELUDE = """
import os
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ.pop("GPUCOURSE_DEVICE", None)
import numpy as np
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
import numba.cuda
from gpucourse.grader.ptx_compiler import _compile_without_a_gpu
_compile_without_a_gpu()
"""


def compile_without_a_gpu(body: str, *args: str) -> str:
    """Run PRELUDE and then `body` in a fresh Python process (with `args` as its
    command-line arguments) and return what it printed. Skips the test where
    the NVVM wheels are missing; fails with the process's error otherwise."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    script = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env=env, timeout=300)
    if done.returncode and "libnvrtc" in done.stderr + done.stdout:
        pytest.skip("compiling PTX needs the numba-cuda[cu13] wheels (NVVM)")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def ptxas_report(ptx_text: str, arch: str = "sm_90", max_registers: int = 0) -> str:
    """ptxas's report (registers, spills) on the PTX, linked for `arch` by
    nvJitLink from the CUDA wheels (``gpucourse.grader.ptx_compiler.link_ptx``): what
    the GPU's driver would do with it (with max_registers, the cap a kernel
    compiled with Numba's max_registers gets). Skips where nvJitLink is
    missing."""
    from gpucourse.grader.ptx_compiler import LinkerUnavailable, link_ptx

    try:
        return link_ptx(ptx_text, arch, max_registers)[0]
    except LinkerUnavailable as error:
        pytest.skip(str(error))


def innermost_loop(ptx_text: str, marker: str = "mma.sync", most: bool = False) -> list:
    """The PTX instructions of the shortest loop (a label and a branch back to
    it) that holds `marker` (with `most`, the loop that holds it most often):
    a kernel's main loop, whose length per mma says how much besides the
    tensor cores' work each step issues. [] if none."""
    import re

    lines = [line.strip() for line in ptx_text.splitlines()]
    labels = {}
    for i, line in enumerate(lines):
        found = re.match(r"^(\$L__BB\d+_\d+):", line)
        if found:
            labels[found.group(1)] = i
    best = []
    for i, line in enumerate(lines):
        branch = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if branch and labels.get(branch.group(1), i) < i:
            body = [x for x in lines[labels[branch.group(1)]:i + 1]
                    if x and not x.startswith(("$", "//", "{", "}", "."))]
            count = sum(marker in x for x in body)
            if not count:
                continue
            if most:
                better = (count, -len(body)) > (sum(marker in x for x in best), -len(best))
            else:
                better = len(body) < len(best)
            if not best or better:
                best = body
    return best
