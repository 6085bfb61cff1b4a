"""What the single-GPU benchmark scripts share: the opening of main() and the results file.

Every script that times kernels on one GPU starts the same way: an --out
folder (benchmarks/results unless told otherwise), TF32 off so that fp32 means
fp32, and a results record whose first fields say what ran, on which GPU, on
which day, with which versions and how it was measured (CONVENTIONS.md). It
ends the same way too: the record written as JSON to
<out>/<benchmark>-<gpu-slug>-<date>[-quick].json. Those lines live here once
instead of in each script. The scripts find this module because Python puts
the running script's folder, benchmarks/, on the path; the two multi-GPU
scripts have their own launcher beside it, _multi_gpu.py.

Nothing here imports torch, numba or gpucourse when the module loads: a script
may first have to choose the simulator or check for a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def add_out_argument(parser) -> None:
    """--out, the folder for the results file (default: benchmarks/results)."""
    parser.add_argument("--out", default=str(RESULTS))


# The --note and --suffix of the running script, which ``write_record``
# applies to the record it writes (set when its arguments are parsed).
_RUN = {"note": None, "suffix": ""}
_SUFFIX = re.compile(r"([a-z0-9]+(-[a-z0-9]+)*)?")


class _BenchmarkParser(argparse.ArgumentParser):
    """An argument parser that hands --note and --suffix to ``write_record``."""

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        if not _SUFFIX.fullmatch(parsed.suffix):
            self.error(f"--suffix must be lowercase words and digits joined by hyphens, like "
                       f"peeled-second; got {parsed.suffix!r}")
        _RUN.update(note=parsed.note, suffix=f"-{parsed.suffix}" if parsed.suffix else "")
        return parsed


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """A script's argument parser: described by its docstring's first line,
    with --out, and --note and --suffix for the record ``write_record``
    writes (what a run is for, and the end of its file's name)."""
    parser = _BenchmarkParser(description=doc.splitlines()[0])
    add_out_argument(parser)
    parser.add_argument("--note", default=None,
                        help="what this run is for: saved in its record after the benchmark's "
                             "name (CONVENTIONS.md's note of a rerun or a trial)")
    parser.add_argument("--suffix", default="",
                        help="added to the results file's name, after a hyphen, before .json "
                             "(peeled-second: ...-<date>-peeled-second.json): lowercase words "
                             "and digits joined by hyphens")
    return parser


def start(parser, argv=None, check_gpu=None):
    """The opening of a GPU benchmark: its arguments parsed, the GPU checked for
    (`check_gpu`, where given), TF32 off. Returns (arguments, start time)."""
    args = parser.parse_args(argv)
    if check_gpu is not None:
        check_gpu()
    started = time.perf_counter()
    tf32_off()
    return args, started


def tf32_off() -> None:
    """fp32 products in fp32: no TF32 in cuBLAS or cuDNN, matmul precision "highest".

    ("highest" is torch's default, and cuDNN's flag touches only convolutions:
    a script that set fewer of the three flags before computes the same.)"""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def need_a_gpu(script: str, without_one: str) -> None:
    """Stop with a message unless the driver reports a GPU and torch sees it.
    `without_one` tells the reader what runs without a GPU instead."""
    from gpucourse.device import probe_gpu  # asks the driver; imports nothing of Numba

    if probe_gpu() is None:
        sys.exit(f"{script} needs an NVIDIA GPU (the CUDA driver reports none); {without_one}")
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"{script} needs torch with CUDA (for cuBLAS and the inputs); this torch sees "
                 "no GPU")


def versions() -> dict:
    """Python, Numba, numba-cuda, NumPy, torch and the CUDA driver: the versions
    the SGEMM and tensor-core results files record."""
    from importlib import metadata

    import numpy as np
    import torch

    def version(package):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    try:
        from numba.cuda.cudadrv.driver import driver as cuda_driver

        driver = ".".join(map(str, cuda_driver.get_version()))
    except Exception:  # the driver's version is nice to have, not essential
        driver = None
    return {"python": platform.python_version(), "numba": version("numba"),
            "numba_cuda": version("numba-cuda"), "numpy": np.__version__,
            "torch": torch.__version__, "cuda_driver": driver}


def short_versions() -> dict:
    """Python, Numba, torch and NumPy: the versions the attention-backward and
    tiny-GPT results files record (a deliberate variant of versions(): those
    files have always held these four)."""
    import numba
    import numpy as np
    import torch

    return dict(python=platform.python_version(), numba=numba.__version__,
                torch=torch.__version__, numpy=np.__version__)


def record_start(benchmark: str, gpu: str, versions: dict, method: str, **more) -> dict:
    """The fields a results record opens with, in CONVENTIONS.md's order:
    benchmark, gpu, date (today), versions, method, then `more`."""
    return {"benchmark": benchmark, "gpu": gpu, "date": datetime.date.today().isoformat(),
            "versions": versions, "method": method, **more}


def results_path(out_dir, record: dict, suffix: str = "") -> Path:
    """<out_dir>/<benchmark>-<gpu-slug>-<date><suffix>.json for a record."""
    from gpucourse.results import gpu_slug

    name = f"{record['benchmark']}-{gpu_slug(record['gpu'])}-{record['date']}{suffix}.json"
    return Path(out_dir) / name


def write_json(path: Path, record: dict) -> Path:
    """Write the record as indented JSON (its folder made first); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def write_record(record: dict, out_dir, suffix: str = "") -> Path:
    """Write the record to its results file under out_dir; returns the path.
    The running script's --note goes into the record after its benchmark's
    name (where it has none), and its --suffix after `suffix` in the name."""
    if _RUN["note"] and "note" not in record:
        record = {key: value for key, value in record.items() if key == "benchmark"} | {
            "note": _RUN["note"]} | {k: v for k, v in record.items() if k != "benchmark"}
    return write_json(results_path(out_dir, record, suffix + _RUN["suffix"]), record)


def wall_ms(call, calls: int) -> float:
    """Wall-clock ms per call of a loop of `calls` calls that ends in a
    synchronize: what a user waits for, host work included."""
    import torch

    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / calls * 1e3


def medians_in_turns(calls: dict, time_ms, rounds: int) -> dict:
    """{name: median ms} of each of `calls` (name: call) timed by `time_ms`
    (a call -> (ms, ...)), the calls in turns, `rounds` times over: a drift of
    the GPU's clocks during the run reaches every call alike."""
    import statistics

    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(time_ms(call)[0])
    return {name: statistics.median(t) for name, t in times.items()}
