"""Registers a thread of each cp.async ring's kernels holds, read without a GPU.

    PYTHONPATH=src python3 benchmarks/sgemm_registers.py [--out DIR]

Issue 33. A ring (``TileConfig(..., stages=2)``) is compiled three ways:
with K whole (the kernel the rates time), split-K's (a slice of K from
blockIdx.z, atomic adds) and stream-K's. Each needs its own registers, and
registers decide how many of a kernel's blocks share an SM. The explores of
2026-11-30 found split plans on rings running 5-15% under their price where
the busiest SM had more blocks than the K-whole kernel fits at once, and at
their price below that; this counts what each kernel fits.

Each kernel is compiled to PTX by ``numba.cuda.compile_ptx`` for sm_90 (NVVM
from the numba-cuda[cu13] wheels, no GPU), then linked by nvJitLink, whose
ptxas reports "Used N registers". Blocks an SM: the model's
``resident_blocks`` with those registers and the ring's shared memory, on
the H200's entry. Writes DIR/sgemm_registers-sm90-<date>.json. About a
minute. The H200's figures (2026-11-30): 64 x 128 rings 166 registers with K
whole (3 blocks an SM), 145 split (3), 199 stream-K (2); 128 x 128 rings
165 (1), 128 (2), 162 (1); 64 x 64 rings 128 (4), 94 (5), 126 (4); 64 x 256
rings 243 (2), 236 (2), 250 (2).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from _common import benchmark_parser, write_json

# Compiled in a process of its own: the real compiler, not the simulator, and
# a stand-in for the GPU that device functions ask for a compute capability.
COMPILE = """
import os, json, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ.pop("GPUCOURSE_DEVICE", None)
import numba.cuda
from gpucourse.grader.ptx_compiler import _compile_without_a_gpu
_compile_without_a_gpu()
from gpucourse.kernels.sgemm.config import TileConfig
from gpucourse.kernels.sgemm.kernel_choice import _kernel_for
from gpucourse.kernels.sgemm.split_k import C_MATRIX, SPLIT_SIGNATURE, STREAM_SIGNATURE
ways = {"whole": (False, (C_MATRIX,) * 3), "split": (True, SPLIT_SIGNATURE),
        "stream": ("stream", STREAM_SIGNATURE)}
out = {}
for tile in json.loads(sys.argv[1]):
    config = TileConfig(*tile)
    for way, (split, signature) in ways.items():
        kernel, _, _ = _kernel_for("6", 1000, 1000, True, config, split=split)
        out[f"{tile}|{way}"] = numba.cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))[0]
print(json.dumps(out))
"""


def ptxas_registers(ptx: str, arch: str = "sm_90") -> int:
    """The registers a thread uses, as nvJitLink's ptxas reports for `ptx`."""
    from gpucourse.grader.ptx_compiler import link_ptx

    found = re.findall(r"Used (\d+) registers", link_ptx(ptx, arch)[0])
    if len(found) != 1:
        raise RuntimeError(f"expected one kernel's register count in ptxas's report, got {found}")
    return int(found[0])


def main(argv=None) -> int:
    args = benchmark_parser(__doc__).parse_args(argv)
    from gpucourse.kernels import sgemm

    entry = sgemm.gpu_entry("NVIDIA H200")
    rings = [tuple(t) for t in entry["menu"] if len(t) > 5 and t[5]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", COMPILE, json.dumps(rings)], capture_output=True,
                          text=True, env=env, timeout=900)
    if done.returncode:
        raise SystemExit(f"compiling the rings' kernels failed:\n{done.stderr[-3000:]}")
    ptx = json.loads(done.stdout.strip().splitlines()[-1])
    rows = []
    for tile in rings:
        config = sgemm.TileConfig(*tile)
        for way in ("whole", "split", "stream"):
            registers = ptxas_registers(ptx[f"{list(tile)}|{way}"])
            blocks, limiter = sgemm.shape_model.resident_blocks(
                registers, config.shared_bytes, config.threads, entry)
            rows.append({"tile": sgemm.shape_model.tile_key(config), "kernel": way,
                         "registers": registers, "blocks_per_sm": blocks, "limiter": limiter})
            print(f"{rows[-1]['tile']:20s} {way:7s} {registers:4d} registers, {blocks} blocks an SM "
                  f"({limiter})", flush=True)
    record = {"benchmark": "sgemm_registers", "gpu": "sm_90 (no GPU: ptxas)",
              "date": datetime.date.today().isoformat(),
              "versions": {name: metadata.version(name)
                           for name in ("numba-cuda", "nvidia-nvvm", "nvidia-nvjitlink")},
              "method": "each ring of the H200's menu, its three kernels (K whole, split-K, "
                        "stream-K) compiled by numba.cuda.compile_ptx for sm_90 and linked by "
                        "nvJitLink -arch=sm_90 -O3; registers: ptxas's 'Used N registers'; "
                        "blocks_per_sm: shape_model.resident_blocks on the H200's entry",
              "results": rows}
    path = write_json(Path(args.out) / f"sgemm_registers-sm90-{record['date']}.json", record)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
