"""What the two multi-GPU benchmarks (collectives_gpu.py, memory_gpu.py) share.

Importing this module turns NVLink multicast (NVLS) off for NCCL, PyTorch and
NVSHMEM (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): on the course's shared GPU hosts a program that uses
it can put the host's GPUs out of service. Each script imports it before
torch, and so does every spawned worker, which imports its script again.

The rest is the launcher's side: the arguments both scripts take; one
process per GPU over NCCL, or, with --cpu-smoke, two CPU processes over gloo;
where the results go; and what the results file says about the machine.
"""

from __future__ import annotations

import os

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

RESULTS = Path(__file__).parent / "results"


# -----------------------------------------------------------------------------
# On every rank


def rank_device():
    """This rank's GPU under NCCL (run_on_processes has selected it), else the CPU."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def line_up(device):
    """Every rank waits here until all have arrived and its GPU is idle."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.zeros(1, device=device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_facts(device) -> dict:
    """The device a rank ran on: its name, memory and multiprocessors on a GPU."""
    import torch

    facts = {"device": str(device)}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        facts.update(name=properties.name, memory_bytes=properties.total_memory,
                     multiprocessors=properties.multi_processor_count)
    return facts


# -----------------------------------------------------------------------------
# The launcher


def add_arguments(parser, smoke_help: str) -> None:
    """--gpus, --out, --cpu-smoke and --timeout, as both scripts take them."""
    parser.add_argument("--gpus", type=int, default=None,
                        help="processes, one per GPU (default: every visible GPU)")
    parser.add_argument("--out", default=None,
                        help="folder for the JSON (default: benchmarks/results; a temporary "
                             "folder with --cpu-smoke)")
    parser.add_argument("--cpu-smoke", action="store_true", help=smoke_help)
    parser.add_argument("--timeout", type=float, default=540.0, help="seconds for the whole run")


def parse_arguments(argv, description: str, smoke_help: str,
                    smoke_prefix: str) -> tuple[object, str, int, Path]:
    """The opening of both scripts' main(): their arguments parsed (add_arguments),
    then (args, backend, processes, results folder) as processes() picks them."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser, smoke_help)
    args = parser.parse_args(argv)
    return (args, *processes(args, parser, smoke_prefix))


def processes(args, parser, smoke_prefix: str) -> tuple[str, int, Path]:
    """(backend, processes, results folder) for the parsed arguments: gloo on
    2 CPU processes for --cpu-smoke, else NCCL on --gpus (default every
    visible GPU, at least 2). Wrong --gpus stops with parser.error."""
    import torch

    if args.cpu_smoke:
        backend, world_size = "gloo", args.gpus or 2
        out_dir = Path(args.out or tempfile.mkdtemp(prefix=smoke_prefix))
    else:
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible < 2:
            parser.error(f"needs at least 2 visible GPUs, found {visible} "
                         "(use --cpu-smoke on a machine without them)")
        world_size = args.gpus or visible
        if not 2 <= world_size <= visible:
            parser.error(f"--gpus must be 2 to {visible} (the visible GPUs), got {world_size}")
        backend = "nccl"
        out_dir = Path(args.out or RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    return backend, world_size, out_dir


def record_start(benchmark, results, world_size, backend, cpu_smoke,
                 environment_keys) -> tuple[dict, str]:
    """The fields a results file of either script starts with (what ran where,
    when, with which versions and settings), and the file's name. `results`
    holds each rank's return value, with its device facts under "facts";
    `environment_keys` are the variables recorded beside MULTICAST_OFF."""
    from gpucourse.results import gpu_slug

    gpu = "cpu (gloo smoke test)" if cpu_smoke else results[0]["facts"]["name"]
    slug = "cpu-smoke" if cpu_smoke else gpu_slug(gpu)
    today = datetime.date.today().isoformat()
    record = {
        "benchmark": benchmark,
        "gpu": gpu,
        "gpu_count": world_size,
        "devices": [r["facts"] for r in results],
        "date": today,
        "backend": backend,
        "versions": versions(cuda=backend == "nccl"),
        "environment": {k: os.environ.get(k) for k in (*MULTICAST_OFF, *environment_keys)},
    }
    return record, f"{benchmark}-{slug}x{world_size}-{today}.json"


def versions(cuda: bool) -> dict:
    """Python, torch, numpy and CUDA runtime; with cuda, NCCL and the driver too."""
    import numpy as np
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "numpy": np.__version__, "cuda_runtime": torch.version.cuda, "nccl": None,
           "cuda_driver": None}
    if cuda:
        nccl = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        try:  # the driver's version is nice to have, not essential
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            out["cuda_driver"] = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:
            pass
    return out


def topology() -> str | None:
    """`nvidia-smi topo -m`: how the GPUs are linked (NVLink, PCIe), if it answers."""
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                              timeout=30, check=True).stdout
    except Exception:
        return None
