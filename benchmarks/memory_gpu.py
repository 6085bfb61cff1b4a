"""What DDP, ZeRO-1 and FSDP2 hold per GPU (CUDA allocator), beside the course's predictions.

    PYTHONPATH=src python3 benchmarks/memory_gpu.py [--gpus N] [--out DIR]
    PYTHONPATH=src python3 benchmarks/memory_gpu.py --cpu-smoke

The GPU version of the measurement in gpucourse.memory (issue 5). One process
per GPU (default: every visible GPU, at least 2), joined by NCCL through
gpucourse.distributed.run_on_processes, in a single launch, trains the
course's small transformer for two fp32 Adam steps under

* DDP (DistributedDataParallel: every rank holds everything),
* ZeRO-1 (torch's ZeroRedundancyOptimizer: Adam states split by whole tensors),
* ZeRO-3 (FSDP2's fully_shard on every block and the root: parameters,
  gradients and Adam states split by rows),

for the module's "even" and "odd" models (memory.EVEN, memory.ODD) and for
"even_large", the even model's shape grown to about 100 M parameters
(hidden 1024, 8 layers), where the model states dwarf the allocator's
rounding and the activations. For each rank, model and wrapper it records

* the model-state bytes counted tensor by tensor on the rank's local tensors
  (params, grads, Adam moments), as the CPU measurement does, beside both
  predictions of memory.predict: "formula" (model_states_per_gpu, the even
  split) and "layout" (the split torch really makes);
* torch.cuda.memory_allocated and max_memory_allocated after each phase
  (setup = model on the GPU, wrapped, optimizer made; then per step forward,
  backward and optimizer step), each peak taken since the previous phase,
  all minus what was allocated before the run began.

What the allocator sees is more than the model states: DDP's gradient
buckets, FSDP2's unsharded parameters during forward and backward, the
activations, and the allocator's 512-byte rounding. The JSON keeps both so
the chapter can show the difference. It writes
DIR/memory-<gpu-slug>x<N>-<YYYY-MM-DD>.json.

NVLink multicast (NVLS) is forced off for NCCL, PyTorch and NVSHMEM before
anything starts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): on the course's shared GPU hosts a program that uses
it can put the host's GPUs out of service.

--cpu-smoke runs the same code on 2 CPU processes with gloo for the even and
odd models (no allocator readings: those exist only on a GPU) and writes to a
temporary folder unless --out is given.

Needs torch with CUDA and NCCL (or, for --cpu-smoke, any torch); no installs.
"""

from __future__ import annotations

# First, before torch, here and in every spawned worker (which imports this
# file again): it turns NVLink multicast off, whatever the environment said.
import _multi_gpu
from _multi_gpu import device_facts, line_up, rank_device

import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from gpucourse import memory  # noqa: E402
from gpucourse.distributed import run_on_processes  # noqa: E402

# Every tensor of this model has a multiple of 1024 rows and every size comes
# 8 (or 48) times, so it splits exactly over 2, 4 and 8 ranks, like EVEN.
EVEN_LARGE = memory.TinyConfig("even_large", hidden=1024, heads=16, n_layers=8, seq_len=256,
                               batch=8)
CONFIGS = {"even": memory.EVEN, "odd": memory.ODD, "even_large": EVEN_LARGE}
GPU_CONFIGS = ("even", "odd", "even_large")
SMOKE_CONFIGS = ("even", "odd")
STEPS = 2


# -----------------------------------------------------------------------------
# Runs on every rank


def measure_one(rank, world_size, device, config, wrapper, steps):
    """Train and measure one (config, wrapper) on this rank; returns its row."""
    import gc

    import torch

    cuda = device.type == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device) if cuda else None
    phases = []

    def on_phase(phase, step):
        # Allocated now and the peak since the last phase, both above the
        # baseline; the peak counter then starts again.
        entry = {"phase": phase, "step": step, "allocated_bytes": None, "peak_bytes": None}
        if cuda:
            torch.cuda.synchronize(device)
            entry["allocated_bytes"] = torch.cuda.memory_allocated(device) - baseline
            entry["peak_bytes"] = torch.cuda.max_memory_allocated(device) - baseline
            torch.cuda.reset_peak_memory_stats(device)
        phases.append(entry)

    measured = memory._train_and_measure(config, wrapper, rank, world_size, steps,
                                         device=device, on_phase=on_phase)
    predicted = memory.predict(config, wrapper, world_size, rank)
    triple = [measured["params_bytes"], measured["grads_bytes"], measured["optimizer_bytes"]]
    peaks = [p["peak_bytes"] for p in phases if p["peak_bytes"] is not None]
    final = phases[-1]["allocated_bytes"]
    row = {
        "model": config.name, "wrapper": wrapper, "world_size": world_size, "rank": rank,
        "device": str(device), "n_params": sum(math.prod(s) for s in measured["shapes"]),
        "measured_bytes": dict(zip(("params", "grads", "optimizer"), triple)),
        "formula_bytes": dict(zip(("params", "grads", "optimizer"), predicted["formula"])),
        "layout_bytes": dict(zip(("params", "grads", "optimizer"), predicted["layout"])),
        "matches_layout": triple == list(predicted["layout"]),
        "matches_formula": triple == list(predicted["formula"]),
        "params_allocated_bytes": measured["params_allocated_bytes"],
        "local_numels": measured["local_numels"],
        "baseline_allocated_bytes": baseline,
        "phases": phases,
        "max_memory_allocated_bytes": max(peaks) if peaks else None,
        "final_allocated_bytes": final,
        # What the allocator holds after the last step beyond the model states
        # (DDP's buckets, FSDP2's padding, rounding, leftovers).
        "final_minus_model_states_bytes": None if final is None else final - sum(triple),
    }
    del measured
    gc.collect()
    return row


def memory_worker(rank, world_size, runs, steps):
    """Every (config name, wrapper) in `runs`, one after another, with the
    ranks lined up between runs."""
    device = rank_device()
    rows = []
    for name, wrapper in runs:
        rows.append(measure_one(rank, world_size, device, CONFIGS[name], wrapper, steps))
        line_up(device)
    return {"rows": rows, "facts": device_facts(device)}


# -----------------------------------------------------------------------------
# The launcher


def main(argv=None):
    args, backend, world_size, out_dir = _multi_gpu.parse_arguments(
        argv, __doc__.splitlines()[0],
        "2 CPU processes over gloo, even and odd models: checks the logic", "memory-smoke-")
    configs = SMOKE_CONFIGS if args.cpu_smoke else GPU_CONFIGS

    runs = tuple((name, wrapper) for name in configs for wrapper in memory.WRAPPERS)
    started = time.monotonic()
    results = run_on_processes(memory_worker, world_size, args=(runs, STEPS), backend=backend,
                               timeout_s=args.timeout)
    elapsed_s = time.monotonic() - started
    rows = sorted((row for r in results for row in r["rows"]),
                  key=lambda row: (configs.index(row["model"]),
                                   memory.WRAPPERS.index(row["wrapper"]), row["rank"]))

    record, name = _multi_gpu.record_start("memory", results, world_size, backend,
                                           args.cpu_smoke,
                                           ("CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF"))
    gpu = record["gpu"]
    record.update({
        "method": (f"{world_size} processes, {'one per GPU, ' if backend == 'nccl' else ''}"
                   f"{backend}; each model trained {STEPS} steps of fp32 Adam (lr 1e-3) from "
                   "the same seed under each wrapper; model-state bytes counted on each rank's "
                   "local tensors (Adam's step counters left out) and compared with "
                   "gpucourse.memory.predict; "
                   + ("torch.cuda.memory_allocated and max_memory_allocated read after each "
                      "phase (device synchronized), the peak counter reset after each reading, "
                      "all minus the allocation before the run (after gc and empty_cache)"
                      if backend == "nccl" else "no allocator readings (CPU)")),
        "configs": {name: dataclasses.asdict(CONFIGS[name]) for name in configs},
        "wall_s": elapsed_s,
        "results": rows,
    })
    path = out_dir / name
    path.write_text(json.dumps(record, indent=1) + "\n")

    print(f"\n{gpu} x {world_size} ({backend}, {elapsed_s:.0f} s): wrote {path}")
    print(f"{'model':>10} {'wrapper':>7} {'rank':>4} {'measured (p, g, o) bytes':>30} "
          f"{'= layout':>8} {'= formula':>9} {'peak alloc.':>12} {'final - states':>14}")
    for row in rows:
        m = row["measured_bytes"]
        peak = row["max_memory_allocated_bytes"]
        extra = row["final_minus_model_states_bytes"]
        print(f"{row['model']:>10} {row['wrapper']:>7} {row['rank']:>4} "
              f"{m['params']:>10} {m['grads']:>9} {m['optimizer']:>9} "
              f"{str(row['matches_layout']):>8} {str(row['matches_formula']):>9} "
              f"{'-' if peak is None else peak:>12} {'-' if extra is None else extra:>14}")
    # Exactness is the check: every rank's counted bytes must equal the
    # tensor-by-tensor layout. Where the sizes divide evenly (the even models
    # on 2, 4 or 8 ranks) the layout is the formula, so that matches too.
    failed = [r for r in rows if not r["matches_layout"]]
    for r in failed:
        print(f"MISMATCH {r['model']} {r['wrapper']} rank {r['rank']}: measured "
              f"{r['measured_bytes']}, layout {r['layout_bytes']}, formula {r['formula_bytes']}")
    print(f"{len(rows) - len(failed)} of {len(rows)} rows match the tensor-by-tensor layout, "
          f"{sum(r['matches_formula'] for r in rows)} also the even-split formula")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
