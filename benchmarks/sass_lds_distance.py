"""How far ahead of their use an SGEMM kernel's shared-memory reads are scheduled, without a GPU.

    PYTHONPATH=src NVDISASM=/path/to/nvdisasm python3 benchmarks/sass_lds_distance.py \\
        BM BN TM TN [--scalar] [--copies 1|2]

Issue 33. With one block of 8 warps on an SM, a warp that reads its fragments
from shared memory (LDS) and multiplies them a few instructions later waits
for the read (Nsight Compute's short scoreboard) with little else to run. This
compiles level 6's kernel for the tiles BM x BN x 16 (TM x TN a thread;
128-bit loads, or one float at a time with --scalar, as matmul runs ragged
shapes) with one or two copies of the fragments (vectorized.FRAGMENT_COPIES),
for sm_90 under the register cap matmul gives it (128 a thread where two
blocks fit), and reads the SASS: for each LDS, the FFMAs between it and the
first instruction that reads what it loaded. Few FFMAs between them means the
read's latency (about 30 cycles) is exposed unless other warps fill it.

Needs the numba-cuda[cu13] wheels (NVVM, nvJitLink) and nvdisasm, which no
wheel of the course installs: `pip install --target DIR nvidia-cuda-nvdisasm`
gives DIR/nvidia/cu13/bin/nvdisasm (NVDISASM names it; default: on PATH).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # the real compiler, not the simulator
os.environ.pop("GPUCOURSE_DEVICE", None)

import numpy as np  # noqa: E402

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 calls np.row_stack, which numpy 2.5 removed
    np.row_stack = np.vstack

from gpucourse.grader.ptx_compiler import _compile_without_a_gpu  # noqa: E402

CAP = 128  # matmul's register cap for 256 threads where two blocks fit (building_blocks (7))


def cubin(ptx: str, max_registers: int = CAP) -> bytes:
    """The PTX linked for sm_90 by nvJitLink, as the driver would."""
    from gpucourse.grader.ptx_compiler import link_ptx

    return link_ptx(ptx, "sm_90", max_registers)[1]


def instructions(sass: str) -> list[str]:
    """The SASS instructions in order, each as 'OPCODE operands'."""
    return [re.sub(r".*\*/\s*", "", line).strip().rstrip(" ;")
            for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line)]


def lds_distances(ops: list[str]) -> list[int]:
    """For each LDS, the FFMAs between it and the first later instruction that
    reads one of the registers it wrote (LDS.64 and .128 write 2 and 4)."""
    found = []
    for i, op in enumerate(ops):
        m = re.match(r"(@!?P\d+ )?LDS(\.64|\.128)?\S* R(\d+),", op)
        if not m:
            continue
        first, width = int(m.group(3)), {".64": 2, ".128": 4}.get(m.group(2), 1)
        wrote = {f"R{first + j}" for j in range(width)}
        for j in range(i + 1, len(ops)):
            sources = re.findall(r"R\d+", ops[j].split(",", 1)[1] if "," in ops[j] else "")
            if wrote & set(sources):
                found.append(sum(1 for x in ops[i + 1:j] if x.startswith("FFMA")))
                break
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tiles", nargs=4, type=int, metavar=("BM", "BN", "TM", "TN"))
    parser.add_argument("--scalar", action="store_true", help="loads of one float (ragged rows)")
    parser.add_argument("--copies", type=int, default=1, choices=(1, 2),
                        help="copies of the fragments (vectorized.FRAGMENT_COPIES)")
    args = parser.parse_args(argv)
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        parser.error("needs nvdisasm: set NVDISASM (see the docstring for the wheel)")
    _compile_without_a_gpu()
    from numba import cuda, float32, types

    from gpucourse.kernels.sgemm.config import TileConfig
    from gpucourse.kernels.sgemm.vectorized import _make_vectorized_kernel

    bm, bn, tm, tn = args.tiles
    kernel = _make_vectorized_kernel(TileConfig(bm, bn, 16, tm, tn), not args.scalar,
                                     fragment_copies=args.copies)
    matrix = types.Array(float32, 2, "C")
    ptx, _ = cuda.compile_ptx(kernel.py_func, (matrix, matrix, matrix), cc=(9, 0))
    path = "/tmp/sass_lds_distance.cubin"
    with open(path, "wb") as f:
        f.write(cubin(ptx))
    ops = instructions(subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True,
                                      check=True).stdout)
    gaps = lds_distances(ops)
    print(f"{bm}x{bn}x16, {tm}x{tn} a thread, {'one float' if args.scalar else '128-bit'} loads, "
          f"{args.copies} cop{'y' if args.copies == 1 else 'ies'} of the fragments: "
          f"{len(ops)} instructions, {sum(o.startswith('FFMA') for o in ops)} FFMA, "
          f"{len(gaps)} LDS; FFMAs between an LDS and its use: median "
          f"{statistics.median(gaps):g}, fewer than 8 for {sum(g < 8 for g in gaps) / len(gaps):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
