"""Run a function on N processes joined by torch.distributed, with a deadline.

Every multi-process demonstration in the course (collectives, tensor
parallelism, ZeRO and FSDP measurements) goes through `run_on_processes`:

    from gpucourse.distributed import run_on_processes
    results = run_on_processes(my_function, world_size=4, args=(size,))

`my_function(rank, world_size, *args)` runs in each process after the process
group is initialised (gloo on CPU; NCCL if asked for and GPUs exist), and
whatever it returns comes back as a list indexed by rank. The function must be
importable (defined in a module, not in a notebook cell), because processes
are started with the "spawn" method, the one that is safe with torch.

A worker that raises, dies or hangs never hangs the caller: the first failure,
or the deadline, stops every process and raises RuntimeError naming the rank
and carrying its traceback.
"""

from __future__ import annotations

import os
import queue
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

BACKENDS = ("gloo", "nccl")


def _rendezvous_store(timeout_s: float):
    """The key-value store the workers meet at, served by this process on a port
    the system picks. Holding it here (rather than choosing a free port and
    letting rank 0 open it later) leaves no moment in which another run on the
    machine can take the port and receive our workers."""
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=timeout_s + 60),
                         wait_for_workers=False)


def _worker(rank, world_size, backend, port, function, args, results, store_timeout_s):
    # Each worker computes on one thread: with N processes on a small machine,
    # more threads only fight over the same cores.
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            # Bind the GPU first, so that NCCL's communicator knows its device
            # (otherwise a barrier warns that the device is unknown).
            torch.cuda.set_device(rank % torch.cuda.device_count())
        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=store_timeout_s))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
        value = function(rank, world_size, *args)
        results.put((rank, "ok", value))
    except BaseException:  # report everything, KeyboardInterrupt included
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# How long a rank's error waits for a partner's death to show (see run_on_processes).
DEATH_GRACE_S = 1.0


def _rank_that_died(processes, exclude: set, grace_s: float = DEATH_GRACE_S):
    """The first rank not in `exclude` whose process has exited with a nonzero
    code, waiting up to `grace_s` seconds for one; None if none has."""
    deadline = time.monotonic() + grace_s
    while True:
        for rank, process in enumerate(processes):
            if rank not in exclude and not process.is_alive() and process.exitcode not in (0, None):
                return rank
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def run_on_processes(function: Callable[..., Any], world_size: int, args: tuple = (),
                     backend: str = "gloo", timeout_s: float = 120.0) -> list[Any]:
    """Run ``function(rank, world_size, *args)`` on ``world_size`` processes.

    Returns the per-rank return values, in rank order. Raises RuntimeError if
    a worker raises or exits early (with its traceback), or if the whole run
    takes longer than ``timeout_s`` seconds; the processes are stopped first.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    if not callable(function):
        raise ValueError(f"function must be callable, got {function!r}")

    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.Queue()
    store = _rendezvous_store(timeout_s)
    # Workers import torch afresh; keep them from each starting a thread per core.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    processes = [context.Process(target=_worker, daemon=True,
                                 args=(rank, world_size, backend, store.port, function, args, results,
                                       timeout_s + 60))
                 for rank in range(world_size)]
    for process in processes:
        process.start()

    deadline = time.monotonic() + timeout_s
    values: dict[int, Any] = {}
    try:
        while len(values) < world_size:
            try:
                rank, status, value = results.get(timeout=0.2)
            except queue.Empty:
                dead = [r for r, p in enumerate(processes)
                        if not p.is_alive() and r not in values and p.exitcode != 0]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} of {world_size} died "
                                       f"(exit code {processes[dead[0]].exitcode}) "
                                       "before returning a result")
                if time.monotonic() > deadline:
                    missing = sorted(set(range(world_size)) - set(values))
                    raise RuntimeError(f"{function.__name__} on {world_size} processes did not "
                                       f"finish within {timeout_s:g} s; ranks {missing} were "
                                       "still running (a hang, or a collective that not every "
                                       "rank joined) and were stopped")
                continue
            if status == "error":
                # A rank that dies takes its connections with it, and its
                # partners then fail with "connection closed": report the
                # death, the cause, where one follows within a moment.
                died = _rank_that_died(processes, exclude=set(values) | {rank})
                if died is not None:
                    raise RuntimeError(f"rank {died} of {world_size} died (exit code "
                                       f"{processes[died].exitcode}) before returning a result; "
                                       f"rank {rank} then failed in {function.__name__}:\n{value}")
                raise RuntimeError(f"rank {rank} of {world_size} failed in "
                                   f"{function.__name__}:\n{value}")
            values[rank] = value
    finally:
        for process in processes:
            process.join(timeout=5 if len(values) == world_size else 0.1)
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
    return [values[rank] for rank in range(world_size)]
