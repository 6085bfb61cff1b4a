"""Week 4: collective communication, its cost, and the frameworks built on it.

Everything the fourth chapter computes lives here:

* the ring all-reduce written from point-to-point sends and receives (a
  reduce-scatter, then an all-gather), a naive all-reduce for contrast, and
  the ring reduce-scatter and all-gather on their own. They run on the
  processes of a ``torch.distributed`` group: gloo on CPU, NCCL on GPUs;
* a pure-NumPy simulation of the same ring, one array per rank, for the
  figures and the exercises (no processes needed);
* the alpha-beta (latency-bandwidth) cost model of each algorithm, a timing
  worker that measures the collectives over message sizes, and a least-squares
  fit of latency and bandwidth to what it measured;
* the bytes each parallel strategy sends per step (data parallelism, ZeRO,
  tensor parallelism) and the communication-to-computation ratio (CCR) on
  NVLink, PCIe, InfiniBand and Ethernet, from their specifications;
* DeepSpeed, PyTorch FSDP and Megatron-LM side by side, as data.

How the chunks are cut. A tensor of ``L`` elements on ``N`` ranks is cut into
``N`` contiguous chunks the way ``numpy.array_split`` cuts it: the first
``L % N`` chunks hold ``ceil(L / N)`` elements and the rest ``floor(L / N)``.
When ``N`` divides ``L`` every chunk has ``L / N`` elements, which is what
``dist.reduce_scatter_tensor`` and ``dist.all_gather_into_tensor`` expect;
otherwise the chunks differ by one element at most, and when ``L < N`` the
last ``N - L`` chunks are empty. Rank ``r`` owns chunk ``r``.

Units are in the names: ``_bytes`` is bytes, ``_s`` seconds,
``_bytes_per_s`` bytes per second (one direction of one link), ``flops_per_s``
floating-point operations per second. Every public function checks its
arguments and raises ``ValueError`` naming the argument and what it accepts.

torch is imported inside the functions that need it, matplotlib inside the
plotting functions; importing this module imports neither (nor Numba).
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass

import numpy as np

from gpucourse.checks import (at_least as _at_least, count as _count, positive as _positive,
                              real as _real, scalar_or_array as _scalar_or_array)

# -----------------------------------------------------------------------------
# Cutting a tensor into one chunk per rank


def chunk_bounds(length, world_size) -> list[tuple[int, int]]:
    """The [start, stop) of each rank's chunk of a ``length``-element tensor.

    Chunks are contiguous and cut like ``numpy.array_split``: the first
    ``length % world_size`` chunks are one element longer. ``length`` may be
    0 or smaller than ``world_size`` (some chunks are then empty).
    """
    length = _whole_at_least("length", length, 0)
    n = _count("world_size", world_size)
    base, extra = divmod(length, n)
    bounds, start = [], 0
    for rank in range(n):
        stop = start + base + (1 if rank < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _whole_at_least(name, value, minimum) -> int:
    x = _real(name, value)
    if x < minimum or not x.is_integer():
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(x)


# -----------------------------------------------------------------------------
# The collectives, from point-to-point messages


def _group_of(group):
    """(rank, world size) of this process in ``group``; clear errors otherwise."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("the collectives need an initialised process group: call "
                           "torch.distributed.init_process_group first, or run them through "
                           "gpucourse.distributed.run_on_processes")
    try:
        rank = dist.get_rank(group)
        world_size = dist.get_world_size(group)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"group must be None or a process group of torch.distributed, "
                         f"got {group!r} ({error})") from None
    if rank < 0:
        raise ValueError("group must contain this process (its rank in it is -1)")
    return rank, world_size


def _check_tensor(tensor, *, min_dim=0):
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype == torch.bool:
        raise ValueError("tensor must hold numbers that can be summed, got dtype torch.bool")
    if tensor.dim() < min_dim:
        raise ValueError(f"tensor must have at least {min_dim} dimension(s), "
                         f"got a {tensor.dim()}-d tensor")


def _exchange(send, recv, rank, world_size, group):
    """Send ``send`` to the next rank on the ring while receiving ``recv`` from
    the previous one. Both are posted before either is waited on, so no rank
    waits for a partner that is itself waiting: the ring cannot deadlock.

    They are posted as one batch (``dist.batch_isend_irecv``). On gloo that
    is the same as two separate calls; NCCL launches the batch as one grouped
    send-and-receive. Posted separately, NCCL would queue each rank's receive
    behind its own send, and a send larger than NCCL's buffer waits for its
    receive, so two ranks sending to each other would wait forever
    (NVIDIA/nccl issue 479)."""
    import torch.distributed as dist

    operations = []
    if send is not None and send.numel():
        operations.append(dist.P2POp(dist.isend, send, group=group,
                                     group_peer=(rank + 1) % world_size))
    if recv is not None and recv.numel():
        operations.append(dist.P2POp(dist.irecv, recv, group=group,
                                     group_peer=(rank - 1) % world_size))
    if operations:
        for request in dist.batch_isend_irecv(operations):
            request.wait()


def _ring_reduce_scatter_flat(flat, bounds, rank, world_size, group):
    """Reduce-scatter ``flat`` in place: afterwards ``flat[bounds[rank]]`` holds
    the sum over all ranks of that chunk (the other chunks hold partial sums).

    At step s (0 .. N-2), rank r sends its running sum of chunk (r - s - 1)
    to rank r + 1 and receives rank r - 1's running sum of chunk (r - s - 2),
    which it adds to its own. Every chunk travels once around the ring,
    picking up one rank's contribution per hop, and the last hop (s = N - 2)
    brings chunk r home complete to rank r.
    """
    import torch

    largest = max(stop - start for start, stop in bounds)
    incoming = torch.empty(largest, dtype=flat.dtype, device=flat.device)
    for step in range(world_size - 1):
        send_start, send_stop = bounds[(rank - step - 1) % world_size]
        recv_start, recv_stop = bounds[(rank - step - 2) % world_size]
        buffer = incoming[:recv_stop - recv_start]
        _exchange(flat[send_start:send_stop], buffer, rank, world_size, group)
        flat[recv_start:recv_stop] += buffer


def _ring_all_gather_flat(flat, bounds, rank, world_size, group):
    """All-gather ``flat`` in place: rank r starts with chunk r complete and
    ends with every chunk. At step s, rank r passes on chunk (r - s) and
    receives chunk (r - s - 1) straight into place."""
    for step in range(world_size - 1):
        send_start, send_stop = bounds[(rank - step) % world_size]
        recv_start, recv_stop = bounds[(rank - step - 1) % world_size]
        _exchange(flat[send_start:send_stop], flat[recv_start:recv_stop],
                  rank, world_size, group)


def ring_all_reduce(tensor, group=None):
    """Sum ``tensor`` over every rank of ``group``, in place, with the ring algorithm.

    Works like ``torch.distributed.all_reduce(tensor)`` (the default SUM):
    every rank passes a tensor of the same shape and dtype, and afterwards
    each holds the element-wise sum. Any shape and any number of elements
    (also fewer than ranks) is accepted; the chunks are cut as the module
    docstring says. Built from ``isend``/``irecv`` only: a reduce-scatter,
    then an all-gather, 2(N - 1) steps in all, each rank sending about
    2(N - 1)/N of the tensor's bytes. Returns ``tensor`` itself.
    """
    _check_tensor(tensor)
    rank, world_size = _group_of(group)
    if world_size == 1 or tensor.numel() == 0:
        return tensor
    # Work on a flat, contiguous view; a non-contiguous tensor gets a copy
    # that is written back at the end.
    work = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    bounds = chunk_bounds(work.numel(), world_size)
    _ring_reduce_scatter_flat(work, bounds, rank, world_size, group)
    _ring_all_gather_flat(work, bounds, rank, world_size, group)
    if not tensor.is_contiguous():
        tensor.copy_(work.view(tensor.shape))
    return tensor


def naive_all_reduce(tensor, group=None, root=0):
    """Sum ``tensor`` over every rank, in place, by gathering it on one rank.

    Every other rank sends its whole tensor to ``root``, which adds them up
    and sends the sum back to each rank in turn: 2(N - 1) messages of the
    full size, all through the root's one link. Same result as
    ``ring_all_reduce``; kept for contrast. Returns ``tensor``.
    """
    import torch
    import torch.distributed as dist

    _check_tensor(tensor)
    rank, world_size = _group_of(group)
    root = _whole_at_least("root", root, 0)
    if root >= world_size:
        raise ValueError(f"root must be a rank of the group, 0 to {world_size - 1}, got {root}")
    if world_size == 1 or tensor.numel() == 0:
        return tensor
    work = tensor.contiguous()
    if rank == root:
        incoming = torch.empty_like(work)
        for other in range(world_size):
            if other != root:
                dist.recv(incoming, group=group, group_src=other)
                work += incoming
        for other in range(world_size):
            if other != root:
                dist.send(work, group=group, group_dst=other)
    else:
        dist.send(work, group=group, group_dst=root)
        dist.recv(work, group=group, group_src=root)
    if work.data_ptr() != tensor.data_ptr():
        tensor.copy_(work)
    return tensor


def ring_reduce_scatter(tensor, group=None):
    """Sum ``tensor`` over the ranks and give rank r only its chunk r of the sum.

    ``tensor`` (at least 1-d, the same shape on every rank) is cut along its
    first dimension into one block of rows per rank, as ``numpy.array_split``
    cuts it. Returns a new tensor: the sum over ranks of block r, with the
    remaining dimensions unchanged. When N divides the first dimension this is
    ``dist.reduce_scatter_tensor(output, tensor)``; otherwise the first
    ``rows % N`` ranks get one row more, and a rank whose block is empty gets
    a tensor with 0 rows. ``tensor`` itself is left unchanged.
    """
    _check_tensor(tensor, min_dim=1)
    rank, world_size = _group_of(group)
    rows = tensor.shape[0]
    row_bounds = chunk_bounds(rows, world_size)
    start, stop = row_bounds[rank]
    if world_size == 1 or tensor.numel() == 0:
        return tensor[start:stop].clone()
    per_row = tensor.numel() // rows
    work = tensor.contiguous().view(-1).clone()
    bounds = [(a * per_row, b * per_row) for a, b in row_bounds]
    _ring_reduce_scatter_flat(work, bounds, rank, world_size, group)
    return work[start * per_row:stop * per_row].view(stop - start, *tensor.shape[1:]).clone()


def ring_all_gather(tensor, group=None, total_rows=None):
    """Concatenate every rank's ``tensor`` along the first dimension, in rank order.

    With ``total_rows=None`` every rank passes a tensor of the same shape and
    the result has N times its rows: ``dist.all_gather_into_tensor``.
    With ``total_rows=R``, rank r passes its own block of an R-row tensor cut
    as ``ring_reduce_scatter`` cuts it (the first ``R % N`` ranks hold one row
    more), and every rank gets the whole R-row tensor back. So
    ``ring_all_gather(ring_reduce_scatter(x), total_rows=len(x))`` is the
    all-reduce of ``x``, for any number of rows. Returns a new tensor.
    """
    import torch

    _check_tensor(tensor, min_dim=1)
    rank, world_size = _group_of(group)
    mine = tensor.shape[0]
    if total_rows is None:
        total_rows = mine * world_size
        row_bounds = [(r * mine, (r + 1) * mine) for r in range(world_size)]
    else:
        total_rows = _whole_at_least("total_rows", total_rows, 0)
        row_bounds = chunk_bounds(total_rows, world_size)
        expected = row_bounds[rank][1] - row_bounds[rank][0]
        if mine != expected:
            raise ValueError(f"tensor must hold rank {rank}'s block of total_rows={total_rows} "
                             f"split over {world_size} ranks, {expected} rows, got {mine}")
    per_row = math.prod(tensor.shape[1:])
    out = torch.empty((total_rows, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
    start, stop = row_bounds[rank]
    out[start:stop] = tensor
    if world_size > 1 and out.numel():
        bounds = [(a * per_row, b * per_row) for a, b in row_bounds]
        _ring_all_gather_flat(out.view(-1), bounds, rank, world_size, group)
    return out


# -----------------------------------------------------------------------------
# The same ring, simulated in NumPy (one array per rank, no processes)


def simulate_ring_all_reduce(arrays, record=False):
    """Run the ring all-reduce on a list of 1-d NumPy arrays, one per rank.

    Returns the list of per-rank results (each the sum of all arrays). With
    ``record=True`` it also returns the history: a list of
    ``(phase, step, contributions)`` where ``contributions[r][c]`` is the set
    of ranks whose values rank r's copy of chunk c holds after that step.
    Exactly the message schedule of ``ring_all_reduce``, without messages.
    """
    if not isinstance(arrays, (list, tuple)) or len(arrays) < 1:
        raise ValueError(f"arrays must be a non-empty list of 1-d arrays (one per rank), "
                         f"got {type(arrays).__name__}")
    data = [np.array(a, dtype=float) for a in arrays]
    shapes = {a.shape for a in data}
    if len(shapes) != 1 or data[0].ndim != 1:
        raise ValueError(f"arrays must all be 1-d and of the same length, got shapes "
                         f"{sorted(shapes)}")
    n = len(data)
    bounds = chunk_bounds(data[0].size, n)
    contributions = [[{r} for _ in range(n)] for r in range(n)]
    history = [("start", 0, [[set(c) for c in row] for row in contributions])]
    for step in range(n - 1):  # reduce-scatter
        sent = [(r, (r - step - 1) % n) for r in range(n)]
        # Every rank sends before any adds: copy the outgoing chunks first.
        messages = [(data[r][slice(*bounds[c])].copy(), set(contributions[r][c]))
                    for r, c in sent]
        for (r, c), (values, who) in zip(sent, messages):
            receiver = (r + 1) % n
            data[receiver][slice(*bounds[c])] += values
            contributions[receiver][c] |= who
        history.append(("reduce-scatter", step + 1, [[set(c) for c in row] for row in contributions]))
    for step in range(n - 1):  # all-gather
        sent = [(r, (r - step) % n) for r in range(n)]
        messages = [(data[r][slice(*bounds[c])].copy(), set(contributions[r][c]))
                    for r, c in sent]
        for (r, c), (values, who) in zip(sent, messages):
            receiver = (r + 1) % n
            data[receiver][slice(*bounds[c])] = values
            contributions[receiver][c] = set(who)
        history.append(("all-gather", step + 1, [[set(c) for c in row] for row in contributions]))
    return (data, history) if record else data


def plot_ring_all_reduce(world_size=4, axes=None):
    """The ring all-reduce step by step: one panel per step, ranks as rows and
    chunks as columns, each cell shaded by how many ranks' values it holds.
    The chunk each rank sends next is outlined."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    n = _whole_at_least("world_size", world_size, 2)
    if n > 8:
        raise ValueError(f"world_size must be 2 to 8 to draw legibly, got {world_size}")
    _, history = simulate_ring_all_reduce([np.zeros(n)] * n, record=True)
    if axes is None:
        _, axes = plt.subplots(1, len(history), figsize=(2.0 * len(history), 2.6))
    axes = np.atleast_1d(axes)
    if len(axes) != len(history):
        raise ValueError(f"axes must hold {len(history)} panels (2N - 1 for N = {n}), "
                         f"got {len(axes)}")
    cmap = plt.get_cmap("Blues")
    for index, (ax, (phase, step, contributions)) in enumerate(zip(axes, history)):
        # The chunk each rank sends in the *next* step, outlined in red.
        next_sent = {}
        if index + 1 < len(history):
            next_phase, next_step, _ = history[index + 1]
            s = next_step - 1
            for r in range(n):
                next_sent[r] = (r - s - 1) % n if next_phase == "reduce-scatter" else (r - s) % n
        for r in range(n):
            for c in range(n):
                count = len(contributions[r][c])
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor=cmap(0.15 + 0.75 * count / n),
                                       edgecolor="white", lw=1.5))
                ax.text(c + 0.5, r + 0.5, "".join(str(k) for k in sorted(contributions[r][c])),
                        ha="center", va="center", fontsize=8 if n <= 4 else 6,
                        color="white" if count > n / 2 else "black")
                if next_sent.get(r) == c:
                    ax.add_patch(Rectangle((c + 0.06, r + 0.06), 0.88, 0.88, fill=False,
                                           edgecolor="C3", lw=2))
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_aspect("equal")
        ax.set_xticks(np.arange(n) + 0.5, [str(c) for c in range(n)], fontsize=8)
        ax.set_yticks(np.arange(n) + 0.5, [f"rank {r}" if index == 0 else "" for r in range(n)],
                      fontsize=8)
        ax.tick_params(length=0)
        ax.set_xlabel("chunk", fontsize=8)
        title = "start" if phase == "start" else f"{phase}\nstep {step}"
        ax.set_title(title, fontsize=9)
        for side in ax.spines.values():
            side.set_visible(False)
    return axes


# -----------------------------------------------------------------------------
# The alpha-beta cost model

# Each algorithm's time is  latency_terms * alpha + byte_fraction * bytes / beta,
# for a message of `bytes` (the full tensor) on N ranks, every link carrying
# `beta` bytes per second in each direction and every message paying `alpha`.
ALGORITHMS = ("ring_all_reduce", "naive_all_reduce", "ring_reduce_scatter", "ring_all_gather")


def alpha_beta_terms(algorithm, world_size):
    """(latency terms, bytes fraction) of an algorithm on ``world_size`` ranks.

    * ring all-reduce: 2(N-1) steps, each moving 1/N of the message:
      (2(N-1), 2(N-1)/N) (Patarasuk and Yuan, 2009);
    * ring reduce-scatter or all-gather alone: half of that, ((N-1), (N-1)/N);
    * naive all-reduce: the root receives N - 1 whole messages, then sends
      N - 1, one after the other on its link: (2(N-1), 2(N-1)).
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    n = _count("world_size", world_size)
    return {
        "ring_all_reduce": (2 * (n - 1), 2 * (n - 1) / n),
        "ring_reduce_scatter": (n - 1, (n - 1) / n),
        "ring_all_gather": (n - 1, (n - 1) / n),
        "naive_all_reduce": (2 * (n - 1), 2 * (n - 1)),
    }[algorithm]


def alpha_beta_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s,
                      algorithm="ring_all_reduce"):
    """Modelled time of a collective on a message of ``message_bytes`` (Hockney, 1994).

    For the ring all-reduce: 2(N-1)·latency + 2(N-1)/N · bytes / bandwidth.
    ``message_bytes`` may be an array. With uneven chunks the real ring moves
    the largest chunk, ceil(L/N) elements, per step; the model uses L/N.
    """
    size = _at_least("message_bytes", message_bytes, 0, array_ok=True)
    alpha = _at_least("latency_s", latency_s, 0)
    beta = _positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    latency_terms, byte_fraction = alpha_beta_terms(algorithm, world_size)
    return _scalar_or_array(latency_terms * alpha + byte_fraction * size / beta)


@dataclass(frozen=True)
class AlphaBetaFit:
    """Latency and bandwidth fitted to measured collective times."""

    latency_s: float
    bandwidth_bytes_per_s: float
    algorithm: str
    rms_relative_error: float  # of the model against the points it was fitted to
    points: int

    def time_s(self, message_bytes, world_size):
        return alpha_beta_time_s(message_bytes, world_size, self.latency_s,
                                 self.bandwidth_bytes_per_s, self.algorithm)


def fit_alpha_beta(message_bytes, times_s, world_sizes, algorithm="ring_all_reduce") -> AlphaBetaFit:
    """Least-squares latency and bandwidth from measured times.

    The model is linear in alpha and 1/beta: t = a·alpha + b·bytes·(1/beta),
    with (a, b) from ``alpha_beta_terms`` for each point's world size. The fit
    minimises the *relative* error, sum(((model - t) / t)^2), so that the
    microsecond-scale small messages (which carry the latency) count as much
    as the large ones (which carry the bandwidth). Latency is kept >= 0; the
    bandwidth must come out positive, or the data did not grow with size.
    ``world_sizes`` is one number or one per point.
    """
    size = _at_least("message_bytes", message_bytes, 0, array_ok=True)
    t = _positive("times_s", times_s, array_ok=True)
    if np.ndim(size) != 1 or np.shape(size) != np.shape(t):
        raise ValueError(f"message_bytes and times_s must be 1-d and of equal length, "
                         f"got shapes {np.shape(size)} and {np.shape(t)}")
    n = _at_least("world_sizes", world_sizes, 2, array_ok=True)
    n = np.broadcast_to(n, size.shape) if np.ndim(n) == 0 else n
    if np.shape(n) != size.shape or not np.all(n == np.round(n)):
        raise ValueError(f"world_sizes must be one whole number >= 2 or one per point "
                         f"({size.size}), got {np.shape(n)}")
    if len(np.unique(size)) < 2:
        raise ValueError("message_bytes must hold at least two different sizes to separate "
                         "latency from bandwidth")
    terms = np.array([alpha_beta_terms(algorithm, int(k)) for k in n])
    design = np.column_stack([terms[:, 0], terms[:, 1] * size]) / t[:, None]
    target = np.ones_like(t)
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, target, rcond=None)
    if alpha < 0:  # latency too small to resolve: fit bandwidth alone
        alpha = 0.0
        column = design[:, 1]
        inverse_beta = float(column @ target / (column @ column))
    if not inverse_beta > 0:
        raise ValueError("times_s must grow with message_bytes: the fitted bandwidth is not "
                         "positive")
    model = terms[:, 0] * alpha + terms[:, 1] * size * inverse_beta
    rms = float(np.sqrt(np.mean(((model - t) / t) ** 2)))
    return AlphaBetaFit(float(alpha), float(1 / inverse_beta), algorithm, rms, int(size.size))


# -----------------------------------------------------------------------------
# Measuring the collectives (a worker for gpucourse.distributed.run_on_processes)

TIMED = ("ring", "naive", "builtin")
DEFAULT_SIZES_BYTES = tuple(8 * 4 ** k for k in range(11)) + (16 * 2 ** 20,)  # 8 B ... 16 MiB


def time_collectives(rank, world_size, sizes_bytes=DEFAULT_SIZES_BYTES, algorithms=TIMED,
                     repeats=5, warmup=1):
    """Time all-reduces of float32 tensors of each size; runs on every rank.

    Meant for ``run_on_processes(time_collectives, N, args=(sizes, ...))``.
    For each algorithm ("ring" = ``ring_all_reduce``, "naive" =
    ``naive_all_reduce``, "builtin" = ``dist.all_reduce``) and size: ``warmup``
    untimed calls, then ``repeats`` timed ones, each started together after a
    barrier and timed with ``time.perf_counter``. A repeat takes as long as its
    slowest rank (the maximum over ranks); the result is the median over
    repeats. Every rank returns the same list of rows
    ``{"algorithm", "world_size", "bytes", "seconds"}``. CPU only, no CUDA.
    """
    import torch
    import torch.distributed as dist

    sizes = [_whole_at_least("sizes_bytes", s, 4) for s in sizes_bytes]
    if any(s % 4 for s in sizes):
        raise ValueError(f"sizes_bytes must be multiples of 4 (float32 elements), got {sizes}")
    unknown = [a for a in algorithms if a not in TIMED]
    if unknown or not algorithms:
        raise ValueError(f"algorithms must be some of {', '.join(TIMED)}, got {list(algorithms)}")
    repeats = _count("repeats", repeats)
    warmup = _whole_at_least("warmup", warmup, 0)
    run = {"ring": ring_all_reduce, "naive": naive_all_reduce, "builtin": dist.all_reduce}

    local = []  # (algorithm, size, seconds) of every timed repeat, on this rank
    for algorithm in algorithms:
        for size in sizes:
            x = torch.ones(size // 4, dtype=torch.float32)
            for repeat in range(warmup + repeats):
                dist.barrier()
                start = time.perf_counter()
                run[algorithm](x)
                elapsed = time.perf_counter() - start
                if repeat >= warmup:
                    local.append((algorithm, size, elapsed))
    # One MAX reduction at the end, so that gathering the timings never
    # disturbs them.
    slowest = torch.tensor([seconds for *_, seconds in local], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    rows = []
    for i in range(0, len(local), repeats):
        algorithm, size, _ = local[i]
        rows.append({"algorithm": algorithm, "world_size": world_size, "bytes": size,
                     "seconds": statistics.median(slowest[i:i + repeats].tolist())})
    return rows


def measure_collectives(world_sizes=(2, 4), sizes_bytes=DEFAULT_SIZES_BYTES, algorithms=TIMED,
                        repeats=5, warmup=1, timeout_s=300.0):
    """Run ``time_collectives`` on each world size (one launch each, gloo on CPU)
    and return all rows together."""
    from gpucourse.distributed import run_on_processes

    rows = []
    for n in world_sizes:
        n = _whole_at_least("world_sizes", n, 2)
        rows += run_on_processes(time_collectives, n, args=(tuple(sizes_bytes), tuple(algorithms),
                                                            repeats, warmup),
                                 timeout_s=timeout_s)[0]
    return rows


def compare_with_builtin(rank, world_size, lengths=(1, 3, 8, 13, 1000), seed=0):
    """On every rank: all-reduce random float64 tensors of each length with
    ``ring_all_reduce``, ``naive_all_reduce`` and ``dist.all_reduce``, and
    return rows ``{"world_size", "length", "algorithm", "max_abs_diff"}``, the
    largest difference from the built-in over all ranks (0 is exact)."""
    import torch
    import torch.distributed as dist

    lengths = [_whole_at_least("lengths", n, 1) for n in lengths]
    generator = torch.Generator().manual_seed(int(seed) * 1000 + rank)
    rows = []
    for length in lengths:
        x = torch.randn(length, dtype=torch.float64, generator=generator)
        reference = x.clone()
        dist.all_reduce(reference)
        for name, function in (("ring", ring_all_reduce), ("naive", naive_all_reduce)):
            difference = (function(x.clone()) - reference).abs().max().reshape(1)
            dist.all_reduce(difference, op=dist.ReduceOp.MAX)
            rows.append({"world_size": world_size, "length": length, "algorithm": name,
                         "max_abs_diff": difference.item()})
    return rows


def check_and_time(rank, world_size, lengths, sizes_bytes, algorithms, repeats, warmup):
    """``compare_with_builtin`` then ``time_collectives``, in one launch."""
    return {"checks": compare_with_builtin(rank, world_size, lengths),
            "timings": time_collectives(rank, world_size, sizes_bytes, algorithms, repeats,
                                        warmup)}


def run_collectives_lab(world_sizes=(2, 4), lengths=(1, 3, 8, 13, 1000),
                        sizes_bytes=DEFAULT_SIZES_BYTES, algorithms=TIMED, repeats=3, warmup=1,
                        timeout_s=300.0):
    """The chapter's experiment: for each world size, one launch of gloo
    processes that checks the collectives against ``dist.all_reduce`` and then
    times them. Returns ``{"checks": [...], "timings": [...]}``."""
    from gpucourse.distributed import run_on_processes

    result = {"checks": [], "timings": []}
    for n in world_sizes:
        n = _whole_at_least("world_sizes", n, 2)
        rank0 = run_on_processes(check_and_time, n, args=(tuple(lengths), tuple(sizes_bytes),
                                                          tuple(algorithms), repeats, warmup),
                                 timeout_s=timeout_s)[0]
        result["checks"] += rank0["checks"]
        result["timings"] += rank0["timings"]
    return result


def plot_measured_vs_model(rows, fit, ax=None):
    """Measured all-reduce times (points) against the fitted alpha-beta model
    (lines), log-log, one colour per world size and one marker per algorithm."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("rows must hold at least one measurement")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 5))
    markers = {"ring": "o", "naive": "s", "builtin": "^"}
    names = {"ring": "ring (ours)", "naive": "naive (ours)", "builtin": "dist.all_reduce"}
    world_sizes = sorted({r["world_size"] for r in rows})
    sizes = np.array(sorted({r["bytes"] for r in rows}), dtype=float)
    for i, n in enumerate(world_sizes):
        for algorithm in markers:
            chosen = [r for r in rows if r["world_size"] == n and r["algorithm"] == algorithm]
            if chosen:
                ax.scatter([r["bytes"] for r in chosen], [r["seconds"] for r in chosen],
                           marker=markers[algorithm], color=f"C{i}", s=28,
                           facecolors="none" if algorithm != "ring" else None,
                           label=f"{names[algorithm]}, N = {n}")
        ax.plot(sizes, fit.time_s(sizes, n), color=f"C{i}", lw=1.5,
                label=f"ring model, N = {n}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("time per all-reduce (s)")
    ax.set_title(f"All-reduce on loopback gloo: fitted latency "
                 f"{fit.latency_s * 1e6:.0f} µs, bandwidth {fit.bandwidth_bytes_per_s / 1e9:.2f} GB/s",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# Measured on GPUs: reading a results file of benchmarks/collectives_gpu.py
#
# The chapter reads the records with measured_runs() (below: one per GPU
# count) and passes each to the functions here. Its "results" rows carry
# {"algorithm", "world_size", "bytes", "seconds", "algbw_bytes_per_s",
# "busbw_bytes_per_s"}: bytes is the whole tensor, algbw = bytes / seconds, and
# busbw = algbw * 2(N-1)/N for an all-reduce, * (N-1)/N for a reduce-scatter or
# an all-gather (the convention of NVIDIA's nccl-tests), which reads as the
# bandwidth of each link whatever N is. Its "checks" rows compare our
# collectives with NCCL's on the GPUs: {"check", "max_abs_diff", "passed", ...}.

# Each measured algorithm, and the alpha-beta model fitted to it (NCCL's
# built-ins are fitted with the ring model, as the benchmark does).
MEASURED_MODEL = {
    "builtin": "ring_all_reduce", "ring": "ring_all_reduce", "naive": "naive_all_reduce",
    "builtin_reduce_scatter": "ring_reduce_scatter", "ring_reduce_scatter": "ring_reduce_scatter",
    "builtin_all_gather": "ring_all_gather", "ring_all_gather": "ring_all_gather",
}
MEASURED_LABELS = {
    "builtin": "all-reduce, NCCL", "ring": "all-reduce, our ring",
    "naive": "all-reduce, our naive",
    "builtin_reduce_scatter": "reduce-scatter, NCCL",
    "ring_reduce_scatter": "reduce-scatter, our ring",
    "builtin_all_gather": "all-gather, NCCL", "ring_all_gather": "all-gather, our ring",
}
ALL_REDUCES = ("builtin", "ring", "naive")
SCATTER_GATHERS = ("builtin_reduce_scatter", "ring_reduce_scatter",
                   "builtin_all_gather", "ring_all_gather")
# (colour, line style, marker): one colour per operation, NCCL solid, ours dashed.
_MEASURED_STYLE = {
    "builtin": ("C0", "-", "o"), "ring": ("C1", "--", "s"), "naive": ("C2", ":", "^"),
    "builtin_reduce_scatter": ("C3", "-", "o"), "ring_reduce_scatter": ("C3", "--", "s"),
    "builtin_all_gather": ("C4", "-", "o"), "ring_all_gather": ("C4", "--", "s"),
}
_ROW_FIELDS = ("algorithm", "world_size", "bytes", "seconds", "busbw_bytes_per_s")


def measured_algorithms(record) -> list[str]:
    """The algorithms measured in a collectives results record, in the order
    of ``MEASURED_MODEL`` (any others after them, sorted)."""
    present = {row["algorithm"] for row in _check_record(record)}
    return [a for a in MEASURED_MODEL if a in present] + sorted(present - set(MEASURED_MODEL))


def _check_record(record) -> list[dict]:
    """The "results" rows of a collectives record, after checking its shape."""
    if not isinstance(record, dict) or not isinstance(record.get("results"), list) \
            or not record["results"]:
        raise ValueError("record must be a collectives results record (a dict with a non-empty "
                         "'results' list, from measured_runs() or gpucourse.results.load_results), "
                         f"got {type(record).__name__}")
    for row in record["results"]:
        missing = [f for f in _ROW_FIELDS if not isinstance(row, dict) or f not in row]
        if missing:
            raise ValueError(f"record must hold rows with {', '.join(_ROW_FIELDS)}; "
                             f"a row lacks {missing}")
    return record["results"]


def _measured_rows(record, algorithm) -> list[dict]:
    """The rows of one algorithm in a collectives results record, smallest
    message first."""
    present = sorted({row["algorithm"] for row in _check_record(record)})
    if algorithm not in present:
        raise ValueError(f"algorithm must be one measured in the record ({', '.join(present)}), "
                         f"got {algorithm!r}")
    rows = sorted((row for row in record["results"] if row["algorithm"] == algorithm),
                  key=lambda row: row["bytes"])
    if len({row["bytes"] for row in rows}) != len(rows):
        raise ValueError(f"record must hold one row per message size, but {algorithm!r} "
                         f"repeats a size")
    return rows


def measured_bus_bandwidth(record, algorithm):
    """(message sizes in bytes, bus bandwidth in bytes per second) of one
    measured algorithm, as two float arrays, smallest message first."""
    rows = _measured_rows(record, algorithm)
    return (np.array([row["bytes"] for row in rows], dtype=float),
            np.array([row["busbw_bytes_per_s"] for row in rows], dtype=float))


def measured_checks(record) -> dict:
    """How the correctness checks of a run went: {"passed", "total",
    "max_abs_diff"} (the largest difference from NCCL's result over all
    checks; 0.0 means bit for bit the same)."""
    checks = record.get("checks") if isinstance(record, dict) else None
    if not isinstance(checks, list) or not checks or not all(
            isinstance(c, dict) and "passed" in c and "max_abs_diff" in c for c in checks):
        raise ValueError("record must carry a non-empty 'checks' list of rows with 'passed' and "
                         "'max_abs_diff' (a results file of benchmarks/collectives_gpu.py)")
    return {"passed": sum(bool(c["passed"]) for c in checks), "total": len(checks),
            "max_abs_diff": float(max(c["max_abs_diff"] for c in checks))}


def bus_bandwidth_ratio(record, algorithm="ring", reference="builtin", message_bytes=None) -> float:
    """Bus bandwidth of ``algorithm`` over that of ``reference`` at one message
    size: ``message_bytes``, or by default the largest size both were
    measured at. Above 1, ``algorithm`` was the faster."""
    sizes, busbw = measured_bus_bandwidth(record, algorithm)
    ref_sizes, ref_busbw = measured_bus_bandwidth(record, reference)
    common = sorted(set(sizes) & set(ref_sizes))
    if not common:
        raise ValueError(f"reference must share a message size with algorithm {algorithm!r}, "
                         f"but {reference!r} has none in common")
    size = common[-1] if message_bytes is None else _positive("message_bytes", message_bytes)
    if size not in common:
        raise ValueError(f"message_bytes must be a size both were measured at "
                         f"({int(common[0])} ... {int(common[-1])}), got {message_bytes!r}")
    return float(busbw[list(sizes).index(size)] / ref_busbw[list(ref_sizes).index(size)])


def bandwidth_bound_bytes(record, share=0.8, algorithm="builtin") -> int:
    """The smallest message size from which ``algorithm``'s bus bandwidth stays
    at or above ``share`` of its own peak: where, by its own measurement, the
    link rather than latency sets the pace. The default asks where NCCL's
    all-reduce reaches 80% of the best it did."""
    share = _real("share", share)
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    sizes, busbw = measured_bus_bandwidth(record, algorithm)
    below = np.flatnonzero(busbw < share * busbw.max())
    start = 0 if below.size == 0 else below[-1] + 1  # past the last size that falls short
    return int(sizes[start])


def fit_measured(record, algorithm, min_bytes=0) -> AlphaBetaFit:
    """Fit latency and bandwidth (``fit_alpha_beta``) to one measured
    algorithm's times, with the model of ``MEASURED_MODEL``, using the sizes
    of at least ``min_bytes`` (default: all of them). With ``min_bytes=0``
    this is the fit the benchmark stored in the record's "fits"."""
    minimum = _at_least("min_bytes", min_bytes, 0)
    rows = [row for row in _measured_rows(record, algorithm) if row["bytes"] >= minimum]
    if algorithm not in MEASURED_MODEL:
        raise ValueError(f"algorithm must be one of {', '.join(MEASURED_MODEL)} to be fitted, "
                         f"got {algorithm!r}")
    if len(rows) < 2:
        raise ValueError(f"min_bytes must leave at least two message sizes of {algorithm!r} to "
                         f"fit, got min_bytes={min_bytes!r}")
    return fit_alpha_beta([row["bytes"] for row in rows], [row["seconds"] for row in rows],
                          [row["world_size"] for row in rows], MEASURED_MODEL[algorithm])


def format_bytes(size) -> str:
    """A byte count in binary units for labels: 4096 -> '4 KiB',
    268435456 -> '256 MiB', 100 -> '100 B'."""
    size = _at_least("size", size, 0)
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def measured_fits_markdown(record, min_bytes, algorithms=None) -> str:
    """A Markdown table, one row per algorithm: the alpha-beta fit over every
    size and over the sizes from ``min_bytes`` up (latency in µs, bandwidth in
    GB/s, rms relative error in %), beside the peak measured bus bandwidth."""
    names = measured_algorithms(record) if algorithms is None else list(algorithms)
    if not names:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    edge = format_bytes(_at_least("min_bytes", min_bytes, 0))
    lines = [f"| measured | all sizes: α (µs) | β (GB/s) | rms error | from {edge}: α (µs) "
             f"| β (GB/s) | rms error | peak bus bandwidth (GB/s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        whole, tail = fit_measured(record, name), fit_measured(record, name, min_bytes)
        peak = measured_bus_bandwidth(record, name)[1].max()
        cells = [f"{f.latency_s * 1e6:.0f} | {f.bandwidth_bytes_per_s / 1e9:.0f} | "
                 f"{100 * f.rms_relative_error:.1f}%" for f in (whole, tail)]
        lines.append(f"| {MEASURED_LABELS.get(name, name)} | {cells[0]} | {cells[1]} "
                     f"| {peak / 1e9:.0f} |")
    return "\n".join(lines)


def measured_setup(record) -> dict:
    """Where and how a run was made, from the record: {"gpu", "gpu_count",
    "date", "torch", "nccl", "link" (the GPU0-GPU1 entry of ``nvidia-smi topo
    -m``, e.g. "NV18" for 18 bonded NVLinks; None if the file has no matrix),
    "links" (the distinct entries between any two GPUs of the matrix, sorted:
    ["NV18"] when every pair shows NV18), "multicast_off" (True when
    NCCL_NVLS_ENABLE was "0")}."""
    if not isinstance(record, dict):
        raise ValueError(f"record must be a results record (a dict), got {type(record).__name__}")
    missing = [f for f in ("gpu", "date", "versions") if f not in record]
    if missing:
        raise ValueError(f"record must carry gpu, date and versions; it lacks {missing}")
    link, links = None, set()
    # The matrix is tab-separated, with terminal colour codes around its header
    # line; each GPU's row starts with its name, then one entry per GPU ("X"
    # for itself), then the CPU and NUMA affinities.
    lines = str(record.get("topology", "")).splitlines()
    gpu_columns = len(re.findall(r"GPU\d+", lines[0])) if lines else 0
    for line in lines[1:]:
        fields = line.split("\t")
        if not re.fullmatch(r"GPU\d+", fields[0].strip()):
            continue
        entries = [f.strip() for f in fields[1:1 + gpu_columns]]
        links.update(e for e in entries if e and e != "X")
        if fields[0].strip() == "GPU0" and len(fields) > 2:
            link = fields[2].strip() or None
    environment = record.get("environment") or {}
    return {"gpu": record["gpu"], "gpu_count": record.get("gpu_count"), "date": record["date"],
            "torch": record["versions"].get("torch"), "nccl": record["versions"].get("nccl"),
            "link": link, "links": sorted(links),
            "multicast_off": environment.get("NCCL_NVLS_ENABLE") == "0"}


def plot_measured_bus_bandwidth(record, algorithms=ALL_REDUCES, ax=None):
    """Bus bandwidth (GB/s) against message size (log axis) of the measured
    ``algorithms``, one line each: NCCL's solid, ours dashed, one colour per
    operation."""
    import matplotlib.pyplot as plt

    algorithms = list(algorithms)
    if not algorithms:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    curves = {name: measured_bus_bandwidth(record, name) for name in algorithms}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for name, (sizes, busbw) in curves.items():
        colour, style, marker = _MEASURED_STYLE.get(name, ("C7", "-.", "x"))
        ax.plot(sizes, busbw / 1e9, color=colour, ls=style, marker=marker, ms=4, lw=1.8,
                mfc="white" if style != "-" else colour, label=MEASURED_LABELS.get(name, name))
    sizes = np.unique(np.concatenate([s for s, _ in curves.values()]))
    ticks = sizes[::2] if sizes.size > 9 else sizes
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size (the whole tensor)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


def plot_measured_fit(record, algorithms=("builtin", "ring"), min_bytes=None, ax=None):
    """Measured time per call (points) against the alpha-beta model fitted to
    every size (solid line) and, with ``min_bytes``, to the sizes from
    ``min_bytes`` up (dotted line), log-log, one colour per algorithm."""
    import matplotlib.pyplot as plt

    algorithms = list(algorithms)
    if not algorithms:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for name in algorithms:
        rows = _measured_rows(record, name)
        colour = _MEASURED_STYLE.get(name, ("C7",))[0]
        sizes = np.array([row["bytes"] for row in rows], dtype=float)
        n = rows[0]["world_size"]
        ax.scatter(sizes, [row["seconds"] * 1e6 for row in rows], color=colour, s=22, zorder=3,
                   label=f"{MEASURED_LABELS.get(name, name)}, measured")
        fits = [(fit_measured(record, name), "-", "all sizes")]
        if min_bytes is not None:
            fits.append((fit_measured(record, name, min_bytes), ":",
                         f"sizes from {format_bytes(min_bytes)}"))
        for fit, style, what in fits:
            ax.plot(sizes, fit.time_s(sizes, n) * 1e6, color=colour, ls=style, lw=1.5,
                    label=f"model fitted to {what}: α {fit.latency_s * 1e6:.0f} µs, "
                          f"β {fit.bandwidth_bytes_per_s / 1e9:.0f} GB/s")
    if min_bytes is not None:
        ax.axvspan(min_bytes, sizes.max(), color="0.5", alpha=0.1, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sizes[::2] if sizes.size > 9 else sizes
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("message size (the whole tensor)")
    ax.set_ylabel("time per call (µs)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# Several runs side by side: the same script on 2 GPUs, on 4, ...
#
# Each run is its own results file; measured_runs() reads them all and keys
# them by GPU count, so that a chapter names the run it describes rather than
# taking whichever file happens to be the newest.

_RUN_STYLES = (("--", "s"), ("-", "o"), ("-.", "^"), (":", "D"))  # one per N, smallest first


def measured_world_size(record) -> int:
    """The number of ranks (GPUs) of a collectives run: the world size every
    row of the record shares."""
    sizes = {row["world_size"] for row in _check_record(record)}
    if len(sizes) != 1:
        raise ValueError(f"record must hold rows of one world size, got {sorted(sizes)}")
    return int(sizes.pop())


def measured_runs(directory=None) -> dict[int, dict]:
    """Every collectives results file in ``directory`` (default: the
    repository's ``benchmarks/results``), keyed by its GPU count: {2: record,
    4: record}. Where two files have the same GPU count, the newer (by the
    date in its name) is kept. Raises ValueError if there is none, or if a
    file's "gpu_count" disagrees with the world size of its rows."""
    from gpucourse import results

    def world_size(path, record):
        count, ranks = record.get("gpu_count"), measured_world_size(record)
        if count != ranks:
            raise ValueError(f"{path.name} must state its gpu_count as the world size of its "
                             f"rows ({ranks}), got gpu_count={count!r}")
        return ranks

    runs = results.newest_by("collectives", world_size, directory)
    if not runs:
        where = results.results_dir() if directory is None else directory
        raise ValueError(f"directory must hold collectives-<gpu>-<date>.json results files, "
                         f"found none in {where}")
    return runs


def _check_runs(runs) -> dict:
    """Runs as measured_runs() returns them, checked: {N: record}, N the
    record's own world size."""
    if not isinstance(runs, dict) or not runs:
        raise ValueError("runs must be a non-empty dict {gpu count: record}, as "
                         f"measured_runs() returns, got {type(runs).__name__}"
                         f"{' (empty)' if isinstance(runs, dict) else ''}")
    for n, record in runs.items():
        ranks = measured_world_size(record)
        if n != ranks:
            raise ValueError(f"runs must be keyed by each record's world size, but key {n!r} "
                             f"holds a run on {ranks} ranks")
    return dict(sorted(runs.items()))


def small_message_time_s(record, algorithm, max_bytes=2 ** 20) -> float:
    """The median time per call of one measured algorithm over the message
    sizes up to ``max_bytes`` (default 1 MiB): the floor set by latency,
    which at these sizes goes up and down from one size to the next, so
    the median rather than any one size."""
    limit = _positive("max_bytes", max_bytes)
    rows = _measured_rows(record, algorithm)
    times = [row["seconds"] for row in rows if row["bytes"] <= limit]
    if not times:
        raise ValueError(f"max_bytes must be at least the smallest size measured "
                         f"({rows[0]['bytes']}), got {max_bytes!r}")
    return float(np.median(times))


def model_link_share(algorithm, world_size) -> float:
    """The share of the link bandwidth beta that ``algorithm``'s bus bandwidth
    approaches for large messages in the alpha-beta model: the bus bandwidth
    factor (2(N-1)/N for an all-reduce, (N-1)/N otherwise) over the bytes
    fraction of ``alpha_beta_terms``. 1 for the rings, which keep every link
    busy; 1/N for the naive all-reduce, whose root's link carries 2(N-1)
    whole messages."""
    _, byte_fraction = alpha_beta_terms(algorithm, world_size)
    n = _count("world_size", world_size)
    if n < 2:  # one rank sends nothing: no bandwidth to share
        raise ValueError(f"world_size must be >= 2 for a share of the link, got {world_size!r}")
    bus_factor = 2 * (n - 1) / n if algorithm.endswith("all_reduce") else (n - 1) / n
    return bus_factor / byte_fraction


def plot_measured_runs(runs, algorithms=ALL_REDUCES, quantity="bus_bandwidth", ax=None):
    """Several runs on one axis: for each algorithm (one colour) and each
    run (one line style and marker per GPU count), the bus bandwidth (GB/s,
    ``quantity="bus_bandwidth"``) or the time per call (µs, log axis,
    ``quantity="time"``) against message size (log axis)."""
    import matplotlib.pyplot as plt

    runs = _check_runs(runs)
    if quantity not in ("bus_bandwidth", "time"):
        raise ValueError(f"quantity must be 'bus_bandwidth' or 'time', got {quantity!r}")
    algorithms = list(algorithms)
    if not algorithms:
        raise ValueError("algorithms must name at least one measured algorithm, got none")
    curves = {(name, n): _measured_rows(record, name)
              for name in algorithms for n, record in runs.items()}
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for (name, n), rows in curves.items():
        colour = _MEASURED_STYLE.get(name, ("C7",))[0]
        style, marker = _RUN_STYLES[list(runs).index(n) % len(_RUN_STYLES)]
        sizes = np.array([row["bytes"] for row in rows], dtype=float)
        y = (np.array([row["busbw_bytes_per_s"] for row in rows]) / 1e9
             if quantity == "bus_bandwidth" else np.array([row["seconds"] for row in rows]) * 1e6)
        ax.plot(sizes, y, color=colour, ls=style, marker=marker, ms=4, lw=1.8,
                mfc=colour if style == "-" else "white",
                label=f"{MEASURED_LABELS.get(name, name)}, N = {n}")
    sizes = np.unique([row["bytes"] for rows in curves.values() for row in rows]).astype(float)
    ticks = sizes[::2] if sizes.size > 9 else sizes
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [format_bytes(s) for s in ticks], rotation=45, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("message size (the whole tensor)")
    if quantity == "bus_bandwidth":
        ax.set_ylim(bottom=0)
        ax.set_ylabel("bus bandwidth (GB/s)")
    else:
        ax.set_yscale("log")
        ax.set_ylabel("time per call (µs)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


# -----------------------------------------------------------------------------
# How many bytes each strategy sends


def data_parallel_comm_bytes(n_params, world_size, bytes_per_param=2, zero_stage=0):
    """Bytes each GPU sends per training step under data parallelism.

    Plain data parallelism (and ZeRO stages 1 and 2) all-reduce the gradients
    once: with a ring, 2(N-1)/N · Ψ · bytes. ZeRO stage 3 also all-gathers
    the parameters in the forward and again in the backward pass and
    reduce-scatters the gradients: 3(N-1)/N · Ψ · bytes, 1.5 times as much
    (Rajbhandari et al., 2020, section 7). ``bytes_per_param`` is 2 for fp16
    or bf16 gradients.
    """
    psi = _positive("n_params", n_params)
    n = _count("world_size", world_size)
    b = _positive("bytes_per_param", bytes_per_param)
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    passes = 3 if zero_stage == 3 else 2
    return passes * (n - 1) / n * psi * b


def tensor_parallel_comm_bytes(batch, seq_len, hidden, n_layers, tp, bytes_per_element=2):
    """Bytes each GPU sends per training step for tensor parallelism's activations.

    Megatron-LM's split of a transformer layer needs two all-reduces of the
    b × s × h activations in the forward pass and two in the backward pass
    (Shoeybi et al., 2019), each a ring all-reduce over the ``tp`` GPUs:
    4 · 2(t-1)/t · b·s·h · bytes per layer.
    """
    b = _count("batch", batch)
    s = _count("seq_len", seq_len)
    h = _count("hidden", hidden)
    layers = _count("n_layers", n_layers)
    t = _count("tp", tp)
    e = _positive("bytes_per_element", bytes_per_element)
    return layers * 4 * 2 * (t - 1) / t * b * s * h * e


def transformer_layer_flops(batch, seq_len, hidden, backward=True):
    """FLOPs of one transformer layer: 24·b·s·h²·(1 + s/(6h)) forward
    (Narayanan et al., 2021, section 5.1), three times that with the backward
    pass (which costs twice the forward), no activation recomputation."""
    b = _count("batch", batch)
    s = _count("seq_len", seq_len)
    h = _count("hidden", hidden)
    forward = 24 * b * s * h * h * (1 + s / (6 * h))
    return 3 * forward if backward else forward


def ccr(comm_bytes, flops, bandwidth_bytes_per_s, flops_per_s):
    """Communication-to-computation ratio: time to send ``comm_bytes`` over the
    link over time to do ``flops`` of arithmetic. Below 1 the communication
    can hide behind the computation (if the two overlap); above 1 the link
    sets the pace. Arguments may be arrays."""
    c = _at_least("comm_bytes", comm_bytes, 0, array_ok=True)
    f = _positive("flops", flops, array_ok=True)
    bw = _positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s, array_ok=True)
    rate = _positive("flops_per_s", flops_per_s, array_ok=True)
    return _scalar_or_array((c / bw) / (f / rate))


def tensor_parallel_ccr(hidden, seq_len, tp, bandwidth_bytes_per_s, flops_per_s,
                        bytes_per_element=2):
    """CCR of one tensor-parallel transformer layer, forward and backward.

    Per GPU: 4 ring all-reduces of b·s·h elements against 1/t of the layer's
    FLOPs. The batch cancels, leaving
    8(t-1)·e·h / (72 h²(1 + s/6h)) · F / B.
    """
    t = _whole_at_least("tp", tp, 2)
    comm = tensor_parallel_comm_bytes(1, seq_len, hidden, 1, t, bytes_per_element)
    flops = transformer_layer_flops(1, seq_len, hidden) / t
    return ccr(comm, flops, bandwidth_bytes_per_s, flops_per_s)


def data_parallel_ccr(tokens_per_gpu, world_size, bandwidth_bytes_per_s, flops_per_s,
                      bytes_per_param=2, zero_stage=0):
    """CCR of one data-parallel training step.

    Per GPU: the gradient all-reduce (``data_parallel_comm_bytes``) against
    6·Ψ·T FLOPs for T tokens (Kaplan et al., 2020). Ψ cancels, leaving
    2(N-1)/N · e / (6 T) · F / B (3(N-1)/N for ZeRO-3): more tokens per GPU
    per step, less communication per FLOP.
    """
    tokens = _positive("tokens_per_gpu", tokens_per_gpu)
    comm = data_parallel_comm_bytes(1, world_size, bytes_per_param, zero_stage)
    return ccr(comm, 6 * tokens, bandwidth_bytes_per_s, flops_per_s)


# -----------------------------------------------------------------------------
# Interconnects, from their specifications


@dataclass(frozen=True)
class Interconnect:
    """One link's bandwidth in ONE direction, per GPU (or per adapter)."""

    name: str
    kind: str  # "NVLink", "PCIe", "InfiniBand" or "Ethernet"
    bandwidth_bytes_per_s: float
    source: str  # bib key
    note: str  # what the source prints, and what is derived here


def pcie_x16_bytes_per_s(gigatransfers_per_s, lanes=16) -> float:
    """PCIe 3.0 and later: each lane carries `GT/s` bits per second with
    128b/130b encoding, so x16 moves 16 · GT/s · 128/130 / 8 bytes per second
    each way (31.5 GB/s for Gen4, 63.0 GB/s for Gen5)."""
    rate = _positive("gigatransfers_per_s", gigatransfers_per_s)
    lanes = _count("lanes", lanes)
    return lanes * rate * 1e9 * 128 / 130 / 8


INTERCONNECTS = {
    "NVLink 4 (H100)": Interconnect(
        "NVLink 4 (H100 SXM)", "NVLink", 450e9, "nvidia_h100_datasheet",
        "printed: NVLink 900 GB/s, both directions together; 450 GB/s each way"),
    "NVLink 3 (A100)": Interconnect(
        "NVLink 3 (A100 SXM)", "NVLink", 300e9, "nvidia_a100_datasheet",
        "printed: NVLink 600 GB/s, both directions together; 300 GB/s each way"),
    "PCIe Gen5 x16": Interconnect(
        "PCIe Gen5 x16", "PCIe", pcie_x16_bytes_per_s(32), "pcisig_pcie5",
        "32 GT/s per lane, 128b/130b: 16 x 32 x 128/130 / 8 = 63.0 GB/s each way"),
    "PCIe Gen4 x16": Interconnect(
        "PCIe Gen4 x16", "PCIe", pcie_x16_bytes_per_s(16), "pcisig_pcie4",
        "16 GT/s per lane, 128b/130b: 16 x 16 x 128/130 / 8 = 31.5 GB/s each way"),
    "InfiniBand NDR": Interconnect(
        "InfiniBand NDR (400 Gb/s)", "InfiniBand", 400e9 / 8, "nvidia_connectx7",
        "printed: 400 Gb/s per port; / 8 bits = 50 GB/s each way"),
    "InfiniBand HDR": Interconnect(
        "InfiniBand HDR (200 Gb/s)", "InfiniBand", 200e9 / 8, "nvidia_connectx6",
        "printed: 200 Gb/s per port; / 8 bits = 25 GB/s each way"),
    "400 GbE": Interconnect(
        "Ethernet 400GbE", "Ethernet", 400e9 / 8, "ieee8023bs",
        "400 Gb/s MAC data rate; / 8 bits = 50 GB/s each way"),
    "100 GbE": Interconnect(
        "Ethernet 100GbE", "Ethernet", 100e9 / 8, "ieee8023ba",
        "100 Gb/s MAC data rate; / 8 bits = 12.5 GB/s each way"),
}

# The dense BF16 tensor-core peak of the H100 SXM: the datasheet prints
# 1,979 TFLOPS "with sparsity"; dense matrices get half of that.
H100_BF16_DENSE_FLOPS_PER_S = 1979e12 / 2


def plot_ccr(hidden_sizes=(1024, 2048, 4096, 8192, 12288, 16384), seq_len=2048, tp=8,
             flops_per_s=H100_BF16_DENSE_FLOPS_PER_S, interconnects=None, ax=None):
    """CCR of a tensor-parallel transformer layer against its hidden size,
    one line per interconnect, with CCR = 1 marked."""
    import matplotlib.pyplot as plt

    links = INTERCONNECTS if interconnects is None else interconnects
    hidden = [_count("hidden_sizes", h) for h in hidden_sizes]
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.8))
    styles = {"NVLink": "-", "PCIe": "--", "InfiniBand": "-.", "Ethernet": ":"}
    for i, link in enumerate(links.values()):
        values = [tensor_parallel_ccr(h, seq_len, tp, link.bandwidth_bytes_per_s, flops_per_s)
                  for h in hidden]
        ax.plot(hidden, values, marker="o", ms=4, lw=2, color=f"C{i}",
                ls=styles.get(link.kind, "-"),
                label=f"{link.name}: {link.bandwidth_bytes_per_s / 1e9:.1f} GB/s")
    ax.axhline(1, color="black", lw=1)
    ax.text(hidden[-1], 1.1, "CCR = 1: sending takes as long as computing", fontsize=8,
            ha="right")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(hidden, [str(h) for h in hidden])
    ax.set_xlabel("hidden size h")
    ax.set_ylabel("communication / computation time")
    ax.set_title(f"Tensor parallelism over {tp} GPUs, every link at the same FLOP rate "
                 f"({flops_per_s / 1e12:.0f} TFLOP/s), s = {seq_len}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_comm_volume(n_params, world_size, batch, seq_len, hidden, n_layers, tp, ax=None):
    """Bytes per GPU per step for each strategy, as horizontal bars."""
    import matplotlib.pyplot as plt

    bars = {
        "DP all-reduce (DDP, ZeRO-1, ZeRO-2)": data_parallel_comm_bytes(n_params, world_size),
        "ZeRO-3 / FSDP (full shard)": data_parallel_comm_bytes(n_params, world_size, zero_stage=3),
        f"tensor parallel, t = {tp} (activations)": tensor_parallel_comm_bytes(
            batch, seq_len, hidden, n_layers, tp),
    }
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2.8))
    rows = np.arange(len(bars))
    values = np.array(list(bars.values())) / 1e9
    ax.barh(rows, values, color=["C0", "C1", "C2"])
    for row, value in zip(rows, values):
        ax.text(value * 1.01, row, f"{value:.1f} GB", va="center", fontsize=9)
    ax.set_yticks(rows, list(bars))
    ax.invert_yaxis()
    ax.set_xlim(0, values.max() * 1.25)
    ax.set_xlabel("bytes sent per GPU per step (GB)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return ax


# -----------------------------------------------------------------------------
# The frameworks side by side


@dataclass(frozen=True)
class Framework:
    name: str
    strategies: tuple[str, ...]
    reported: str  # a reported result or overhead, as the source states it
    reported_date: str  # when the source was published, "YYYY-MM"
    source: str  # bib key(s), comma-separated
    use_when: str


FRAMEWORKS = (
    Framework(
        "DeepSpeed (ZeRO)",
        ("data parallel", "ZeRO stages 1-3", "CPU/NVMe offload", "pipeline parallel"),
        "ZeRO-100B trained models of over 100B parameters on 400 GPUs at 15 PFLOP/s, "
        "8x the model size and 10x the throughput of the previous state of the art; "
        "ZeRO-3 sends 1.5x the bytes of data parallelism",
        "2020-11", "rajbhandari2020zero,rasley2020deepspeed",
        "the model's training state does not fit one GPU but the model is not huge, "
        "and the links are modest: shard everything, keep plain data-parallel code"),
    Framework(
        "PyTorch FSDP",
        ("data parallel", "full sharding (ZeRO-3 style)", "hybrid sharding", "CPU offload"),
        "performance comparable to DistributedDataParallel while training significantly "
        "larger models, with near-linear scaling in TFLOPS",
        "2023-08", "zhao2023fsdp",
        "the same regime as ZeRO-3, staying inside PyTorch; composes with PyTorch's own "
        "tensor parallelism for larger models"),
    Framework(
        "Megatron-LM",
        ("tensor parallel", "pipeline parallel (interleaved 1F1B)", "data parallel",
         "sequence parallel"),
        "8.3B parameters on 512 V100 GPUs at 15.1 PFLOP/s, 76% scaling efficiency (2019); "
        "1T parameters on 3072 A100 GPUs at 502 PFLOP/s, 52% of peak (2021)",
        "2021-11", "shoeybi2019megatron,narayanan2021megatron",
        "very large models on NVLink nodes joined by InfiniBand: tensor parallel inside a "
        "node, pipeline and data parallel across nodes"),
)


def frameworks_markdown() -> str:
    """The frameworks table as Markdown, for the chapter."""
    lines = ["| framework | strategies | reported (date) | use it when |", "|---|---|---|---|"]
    for f in FRAMEWORKS:
        lines.append(f"| {f.name} | {', '.join(f.strategies)} | {f.reported} "
                     f"({f.reported_date}) {{cite}}`{f.source}` | {f.use_when} |")
    return "\n".join(lines)


# Mixed-precision training with Adam keeps 16 bytes per parameter: fp16
# parameters and gradients (2 + 2) and fp32 master weights, momentum and
# variance (4 + 4 + 4) (Rajbhandari et al., 2020, section 3.1).
TRAINING_BYTES_PER_PARAM = 16


def suggest_strategy(n_params, gpu_memory_bytes, gpus_per_node, fast_intra_node=True,
                     fast_inter_node=True) -> str:
    """A first choice of strategy from model size and interconnect.

    A rule of thumb, not an optimiser: it counts only the 16 bytes per
    parameter of mixed-precision Adam (activations need room too).
    * the training state fits one GPU: data parallelism (DDP);
    * it fits when sharded over one node: ZeRO-3 / FSDP;
    * otherwise tensor parallelism inside a node (only if the node has NVLink),
      pipeline and data parallelism across nodes (Megatron-LM, or
      DeepSpeed with Megatron); over slow inter-node links, shard within a
      node and keep cross-node traffic to one gradient reduction.
    """
    psi = _positive("n_params", n_params)
    memory = _positive("gpu_memory_bytes", gpu_memory_bytes)
    per_node = _count("gpus_per_node", gpus_per_node)
    state = TRAINING_BYTES_PER_PARAM * psi
    if state <= memory:
        return "DDP"
    if state <= memory * per_node:
        return "FSDP/ZeRO-3"
    if not fast_intra_node:
        return "FSDP/ZeRO-3 + offload"
    return "TP + PP + DP (Megatron-LM)" if fast_inter_node else "TP in node + hybrid-shard DP"
