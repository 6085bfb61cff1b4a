"""The ring all-reduce and its halves, written from point-to-point messages,
and the same ring simulated in NumPy.

A tensor is cut into one chunk per rank; a reduce-scatter passes chunks
around the ring, adding as it goes, until each rank holds the full sum of its
own chunk, and an all-gather passes the sums around until every rank holds
all of them. Together they are the ring all-reduce, which sends
``2 (N - 1) / N`` of the tensor per rank whatever the number of ranks. The
naive all-reduce (everyone to a root and back) is here for contrast. The
functions run on a ``torch.distributed`` group (torch is imported inside
them); ``simulate_ring_all_reduce`` plays the same steps on NumPy arrays, one
per rank, for the figures and the exercises.
"""

from __future__ import annotations

import math

import numpy as np

from gpucourse.checks import count as _count, whole_at_least as _whole_at_least


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
