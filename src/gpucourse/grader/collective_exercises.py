"""Grade collectives that a student writes in a notebook, on real processes.

Week 4's exercises ask for the ring reduce-scatter, all-gather and all-reduce
written from ``torch.distributed``'s point-to-point calls. The test cells
run the student's function on 2, 3 and 4 gloo processes on this machine::

    from gpucourse.exercise_processes import check_collective
    check_collective(my_all_reduce, "all_reduce", world_sizes=(2, 3), lengths=(10, 2))

``time_all_reduce`` times the student's all-reduce, and
``expect_alpha_beta_fit`` checks the student's least-squares fit of the
alpha-beta model to those timings against ``numpy.linalg.lstsq`` on the same
data (``least_squares_alpha_beta``); ``example_timings`` stands in for
timings of an all-reduce that cannot be timed yet.

This module holds what is checked; how the ranks are started and stopped is
in :mod:`gpucourse.grader.forked_ranks`, and what a ring may call in
:mod:`gpucourse.grader.ring_rules`. The grader checks that each rank sent
only to the next rank on the ring and received only from the previous one,
in no more messages than the ring has steps, and exactly the elements the
ring moves.

**Inputs.** Each rank draws its own random tensor after the fork and reports
it with its result, so that no rank can read another's input from memory it
shares with the grader; the grader computes the reference (a float64 sum, or
the gathered chunks) from what the ranks report, with NumPy operations that a
student's cell cannot replace, and compares with ``gpucourse.verify``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from gpucourse import collectives as _collectives
from gpucourse.grader.captured import (_float, _isinstance, _len, _lstsq, _np_array,
                                       _np_float64, _type)
from gpucourse.grader.expect import _plain_float, expect_array, expect_float
from gpucourse.grader.forked_ranks import run_forked
from gpucourse.grader.ring_rules import _Rank, _student_code, check_point_to_point_only

# Captured at import, before any student code runs in the notebook (as the
# built-ins and numpy.linalg.lstsq are in gpucourse.grader.captured): the
# grader's references use these, not whatever gpucourse.collectives.chunk_bounds
# is by then.
_chunk_bounds = _collectives.chunk_bounds
_alpha_beta_terms = _collectives.alpha_beta_terms

COLLECTIVES = ("reduce_scatter", "all_gather", "all_reduce")
DTYPES = ("float64", "float32")
# All-reduce timings for the alpha-beta fit: float32 tensors of 8 B to 1 MiB.
TIMED_SIZES_BYTES = (8, 128, 2048, 32768, 262144, 1048576)


# -----------------------------------------------------------------------------
# The collectives, checked


def _check_dtype(dtype) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def _check_sizes(name, values, minimum, maximum):
    if _isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a sequence of whole numbers, got {values!r}")
    values = tuple(values)
    if not values or not all(type(v) is int and minimum <= v <= maximum for v in values):
        raise ValueError(f"{name} must be whole numbers from {minimum} to {maximum}, "
                         f"got {values!r}")
    return values


def expected_messages(collective: str, length: int, world_size: int, rank: int):
    """(most messages, elements sent, elements received) of ``rank`` in the ring
    ``collective`` on a tensor of ``length`` elements, cut as
    ``gpucourse.collectives.chunk_bounds`` cuts it.

    The ring has N - 1 steps per phase and each rank sends one chunk per step,
    always to the next rank. A reduce-scatter ends with chunk r complete on
    rank r, so each chunk starts at the rank after its owner and rank r sends
    every chunk but its own (and receives every chunk but rank r - 1's); an
    all-gather starts from chunk r on rank r, so rank r passes on every chunk
    but the one it receives last, chunk r + 1's (and receives every chunk but
    its own). An all-reduce is one of each.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, "
                         f"got {collective!r}")
    sizes = [stop - start for start, stop in _chunk_bounds(length, world_size)]
    n = world_size
    reduce_scatter = (n - 1, length - sizes[rank], length - sizes[(rank - 1) % n])
    all_gather = (n - 1, length - sizes[(rank + 1) % n], length - sizes[rank])
    if collective == "reduce_scatter":
        return reduce_scatter
    if collective == "all_gather":
        return all_gather
    return tuple(a + b for a, b in zip(reduce_scatter, all_gather))


def check_collective(function, collective, world_sizes=(2, 3, 4), lengths=(10, 2),
                     dtype="float64", timeout_s=3.0) -> None:
    """Run a student's ring ``collective`` on real processes and check it.

    ``function(tensor)`` must work in place on a 1-d float tensor (see the
    exercise's docstring). For each world size, one launch of gloo processes
    runs it once per length, each rank on a fresh random tensor of ``dtype``:

    * "reduce_scatter": afterwards rank r's chunk r must hold the sum over
      ranks of chunk r (the other chunks may hold anything);
    * "all_gather": rank r starts with chunk r of a tensor and NaN elsewhere,
      and must end with the whole tensor;
    * "all_reduce": every rank must end with the sum of all ranks' tensors.

    The messages each rank sent and received are checked first, against the
    ring (``expected_messages``): on 3 or more ranks a message to or from the
    wrong neighbour is named (on 2, the next and the previous rank are one).
    Then sums are compared with a float64 sum of the inputs (to 1e-12 relative
    in float64, 1e-5 in float32), gathered chunks exactly.
    Raises AssertionError with what went wrong, on which rank, world size and
    length; bad arguments raise ValueError.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, "
                         f"got {collective!r}")
    if not callable(function):
        raise ValueError(f"function must be a function, got {function!r}")
    world_sizes = _check_sizes("world_sizes", world_sizes, 1, 8)
    lengths = _check_sizes("lengths", lengths, 0, 100_000)
    dtype = _check_dtype(dtype)
    check_point_to_point_only(function)
    name = getattr(function, "__name__", "the function")

    def task(rank, world_size):
        import torch

        # Drawn here, after the fork: no rank can see another's input.
        rng = np.random.default_rng()
        cases = []
        for length in lengths:
            values = rng.normal(size=length).astype(dtype)
            if collective == "all_gather":
                start, stop = _chunk_bounds(length, world_size)[rank]
                values[:start] = np.nan
                values[stop:] = np.nan
            tensor = torch.from_numpy(values.copy())
            _Rank.messages = []
            with _student_code():
                function(tensor)
            cases.append((values, tensor.numpy().copy(), list(_Rank.messages)))
        return cases

    for world_size in world_sizes:
        per_rank = run_forked(task, world_size, timeout_s, name)
        for index, length in enumerate(lengths):
            where = f"{name} on {world_size} processes, a {dtype} tensor of {length} elements"
            inputs = [per_rank[rank][index][0] for rank in range(world_size)]
            # The most precise failure first: who talked to whom, and how much, names a
            # wrong neighbour or a wrong chunk, where the values would only differ.
            for rank in range(world_size):
                _check_messages(collective, per_rank[rank][index][2], length, world_size,
                                rank, where)
            for rank in range(world_size):
                _check_result(collective, inputs, per_rank[rank][index][1], length,
                              world_size, rank, dtype, where)


def _check_result(collective, inputs, result, length, world_size, rank, dtype, where):
    bounds = _chunk_bounds(length, world_size)
    if collective == "all_gather":
        # Chunk c comes from rank c's input, exactly.
        expected = _np_array([np.nan] * length, dtype=_np_float64)
        for owner, (start, stop) in enumerate(bounds):
            expected[start:stop] = inputs[owner][start:stop]
        rel = abs_ = 0.0
    else:
        expected = inputs[0].astype(_np_float64)  # ndarray arithmetic: C methods, not patchable
        for other in inputs[1:]:
            expected += other.astype(_np_float64)
        rel = abs_ = 1e-12 if dtype == "float64" else 1e-5
    start, stop = bounds[rank] if collective == "reduce_scatter" else (0, length)
    if _isinstance(result, np.ndarray) and result.shape == (length,):
        result = result[start:stop]
    what = (f"rank {rank}'s chunk {rank} (elements {start} to {stop - 1}) after the "
            "reduce-scatter" if collective == "reduce_scatter" else f"rank {rank}'s tensor")
    try:
        expect_array(result, expected[start:stop], dtype=dtype, rel=rel, abs=abs_, name=what)
    except AssertionError as error:
        hint = ""
        if collective == "all_gather" and "nan" in str(error):
            hint = (" (NaN: on entry every chunk but the rank's own holds NaN, so an element "
                    "still NaN was never received)")
        raise AssertionError(f"{where}: {error}{hint}") from None


def _check_messages(collective, messages, length, world_size, rank, where):
    most, sent_expected, received_expected = expected_messages(collective, length, world_size,
                                                               rank)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    sends = [(peer, count) for kind, peer, count in messages if kind == "send"]
    receives = [(peer, count) for kind, peer, count in messages if kind == "recv"]
    wrong_peer = [peer for peer, _ in sends if peer != right]
    if wrong_peer:
        raise AssertionError(f"{where}: rank {rank} sent to rank {wrong_peer[0]}; on a ring "
                             f"each rank sends only to the next one, (rank + 1) % N = {right}")
    wrong_peer = [peer for peer, _ in receives if peer != left]
    if wrong_peer:
        source = "any rank" if wrong_peer[0] < 0 else f"rank {wrong_peer[0]}"
        raise AssertionError(f"{where}: rank {rank} received from {source}; on a ring each "
                             f"rank receives only from the previous one, (rank - 1) % N = "
                             f"{left}")
    sent = sum(count for _, count in sends)
    received = sum(count for _, count in receives)
    nonempty = sum(1 for _, count in sends if count)
    phase = "all-reduce" if collective == "all_reduce" else collective.replace("_", "-")
    if nonempty > most or sent != sent_expected or received != received_expected:
        raise AssertionError(
            f"{where}: rank {rank} sent {sent} elements in {nonempty} non-empty messages and "
            f"received {received}; the ring {phase} sends {sent_expected} and receives "
            f"{received_expected} on this rank, in at most {most} messages (one chunk per "
            "step, each chunk as it is, no padding and no whole tensors)")


# -----------------------------------------------------------------------------
# Timing the student's all-reduce, and the grader's fit


def time_all_reduce(function, world_sizes=(2, 3, 4), sizes_bytes=TIMED_SIZES_BYTES, repeats=5,
                    warmup=1, timeout_s=30.0) -> list[dict]:
    """Time a student's all-reduce on float32 tensors of each size.

    For each world size, one launch of gloo processes: for each size,
    ``warmup`` untimed calls and ``repeats`` timed ones, each started together
    after a barrier and timed with ``time.perf_counter``. A repeat takes as
    long as its slowest rank; the row keeps the median over repeats. Returns
    rows ``{"world_size", "bytes", "seconds"}``, as
    ``gpucourse.collectives.time_collectives`` does. Fails (AssertionError)
    if the all-reduce names a collective or gives a wrong sum while timed.
    """
    if not callable(function):
        raise ValueError(f"function must be a function, got {function!r}")
    world_sizes = _check_sizes("world_sizes", world_sizes, 2, 8)
    sizes_bytes = _check_sizes("sizes_bytes", sizes_bytes, 4, 64 * 2 ** 20)
    if any(size % 4 for size in sizes_bytes):
        raise ValueError(f"sizes_bytes must be multiples of 4 (float32 elements), "
                         f"got {sizes_bytes}")
    repeats = _check_sizes("repeats", (repeats,), 1, 100)[0]
    warmup = _check_sizes("warmup", (warmup,), 0, 100)[0]
    check_point_to_point_only(function)
    name = getattr(function, "__name__", "the function")

    def task(rank, world_size):
        import torch
        import torch.distributed as dist

        seconds, wrong = [], []
        for size in sizes_bytes:
            tensor = torch.empty(size // 4, dtype=torch.float32)
            for repeat in range(warmup + repeats):
                tensor.fill_(1.0)
                dist.barrier()
                start = time.perf_counter()
                with _student_code():
                    function(tensor)
                elapsed = time.perf_counter() - start
                if repeat >= warmup:
                    seconds.append(elapsed)
            if not bool((tensor == world_size).all()):
                wrong.append(size)
        return seconds, wrong

    rows = []
    for world_size in world_sizes:
        per_rank = run_forked(task, world_size, timeout_s, name)
        wrong = sorted({size for _, sizes in per_rank for size in sizes})
        if wrong:
            raise AssertionError(f"{name} on {world_size} processes gave wrong sums while it "
                                 f"was timed, at {wrong} bytes: fix it before fitting")
        slowest = [max(per_rank[rank][0][i] for rank in range(world_size))
                   for i in range(len(sizes_bytes) * repeats)]
        for index, size in enumerate(sizes_bytes):
            rows.append({"world_size": world_size, "bytes": size,
                         "seconds": statistics.median(slowest[index * repeats:
                                                             (index + 1) * repeats])})
    return rows


def least_squares_alpha_beta(message_bytes, times_s, world_sizes) -> tuple[float, float]:
    """The grader's answer to the fitting exercise: ``(latency_s, bandwidth_bytes_per_s)``.

    The ring all-reduce model, t = 2(N-1) alpha + 2(N-1)/N * M / beta, is
    linear in alpha and 1/beta; each point's row of the design is divided by
    its measured time, so that the fit minimises the relative error, as
    ``gpucourse.collectives.fit_alpha_beta`` does, and solved with numpy's
    ``lstsq`` (captured when this module was imported). Unlike the course's
    fit, the latency is not kept >= 0: this is the plain least-squares answer.
    """
    sizes = [_float(m) for m in message_bytes]
    times = [_float(t) for t in times_s]
    counts = [int(n) for n in world_sizes]
    if not (len(sizes) == len(times) == len(counts)) or len(sizes) < 2:
        raise ValueError("message_bytes, times_s and world_sizes must be of equal length >= 2")
    rows, target = [], []
    for size, seconds, n in zip(sizes, times, counts):
        latency_terms, byte_fraction = _alpha_beta_terms("ring_all_reduce", n)
        rows.append([latency_terms / seconds, byte_fraction * size / seconds])
        target.append(1.0)
    (alpha, inverse_beta), *_ = _lstsq(_np_array(rows, dtype=_np_float64),
                                       _np_array(target, dtype=_np_float64), rcond=None)
    return _float(alpha), 1.0 / _float(inverse_beta)


# Example timings for the fit when a student's all-reduce cannot be timed:
# the ring's model with a latency and a bandwidth of the order gloo reaches
# between processes of one machine, times a noise of about 10%.
EXAMPLE_LATENCY_S = 50e-6
EXAMPLE_BANDWIDTH_BYTES_PER_S = 1e9


def example_timings(world_sizes=(2, 3), sizes_bytes=TIMED_SIZES_BYTES, seed=0) -> list[dict]:
    """Rows ``{"world_size", "bytes", "seconds"}`` like ``time_all_reduce``'s, made
    up from the ring all-reduce's alpha-beta model (``EXAMPLE_LATENCY_S``,
    ``EXAMPLE_BANDWIDTH_BYTES_PER_S``) with random noise of about 10%: what the
    fitting exercise uses when the student's all-reduce cannot be timed yet."""
    world_sizes = _check_sizes("world_sizes", world_sizes, 2, 64)
    sizes_bytes = _check_sizes("sizes_bytes", sizes_bytes, 0, 2 ** 40)
    rng = np.random.default_rng(seed)
    rows = []
    for world_size in world_sizes:
        for size in sizes_bytes:
            model = _collectives.alpha_beta_time_s(size, world_size, EXAMPLE_LATENCY_S,
                                                   EXAMPLE_BANDWIDTH_BYTES_PER_S)
            rows.append({"world_size": world_size, "bytes": size,
                         "seconds": _float(model * rng.lognormal(0.0, 0.1))})
    return rows


def expect_alpha_beta_fit(fit, message_bytes, times_s, world_sizes) -> tuple[float, float]:
    """Check a student's least-squares fit on one data set: fail (AssertionError)
    unless ``fit(message_bytes, times_s, world_sizes)`` returns a tuple of two
    floats, (latency_s, bandwidth_bytes_per_s), whose model times
    2(N-1) alpha + 2(N-1)/N M / beta at every point agree to 1e-6 relative with
    those of ``least_squares_alpha_beta``, the grader's ``numpy.linalg.lstsq``.

    The model times are compared rather than alpha and beta themselves: on
    measured timings whose times barely grow with the size, 1/beta is close to
    0 and beta itself is ill-determined, while the fitted times are not.
    Returns the student's (latency_s, bandwidth_bytes_per_s).
    """
    sizes = [_float(m) for m in message_bytes]
    times = [_float(t) for t in times_s]
    counts = [int(n) for n in world_sizes]
    result = fit(list(sizes), list(times), list(counts))
    if _type(result) is not tuple or _len(result) != 2:
        raise AssertionError(f"{getattr(fit, '__name__', 'fit')} must return a tuple "
                             f"(latency_s, bandwidth_bytes_per_s), got {result!r}")
    latency = _plain_float(result[0], "latency_s")
    bandwidth = _plain_float(result[1], "bandwidth_bytes_per_s")
    if bandwidth == 0:
        raise AssertionError("bandwidth_bytes_per_s must not be 0")
    reference_latency, reference_bandwidth = least_squares_alpha_beta(sizes, times, counts)
    for size, seconds, n in zip(sizes, times, counts):
        latency_terms, byte_fraction = _alpha_beta_terms("ring_all_reduce", n)
        expect_float(latency_terms * latency + byte_fraction * size / bandwidth,
                     latency_terms * reference_latency + byte_fraction * size
                     / reference_bandwidth, rel=1e-6,
                     name=f"your fit's time for {size:g} bytes on {n} processes (latency_s "
                          f"{latency!r}, bandwidth_bytes_per_s {bandwidth!r}; numpy's lstsq "
                          f"gives {reference_latency!r}, {reference_bandwidth!r})")
    return latency, bandwidth
