"""gpucourse.exercise_processes: the grader of week 4's collectives, on real gloo processes.

The functions below play the student: a ring built from point-to-point calls
(as the exercise asks), and answers that cheat, raise, hang, exit or leave
processes of their own behind. Each grader run must end within seconds, say
what went wrong and on which rank, and leave no process alive.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
import psutil
import pytest
import torch
import torch.distributed as dist

from gpucourse import collectives
from gpucourse.grader.collective_exercises import (EXAMPLE_BANDWIDTH_BYTES_PER_S,
                                                   EXAMPLE_LATENCY_S, check_collective,
                                                   example_timings, expect_alpha_beta_fit,
                                                   expected_messages, least_squares_alpha_beta,
                                                   time_all_reduce)
from gpucourse.grader.forked_ranks import run_forked
from gpucourse.grader.ring_rules import check_point_to_point_only

# A hang is stopped after this long; the tests allow a few seconds more for the
# stacks to be printed and the processes reaped.
DEADLINE_S = 3.0
# What a loaded machine may add to starting, stopping and reaping the ranks
# (a fresh-clone run on two busy cores took 5 s to fail a run of 3 ranks,
# and 8 s to stop a hang): a bound that still fails a run that is waited
# out instead of stopped, since that never ends.
SLACK_S = 20.0

# -----------------------------------------------------------------------------
# A student's answer: the ring, in place on a 1-d tensor, from isend/irecv.


def _bounds(length, n):
    base, extra = divmod(length, n)
    edges = [0]
    for rank in range(n):
        edges.append(edges[-1] + base + (1 if rank < extra else 0))
    return edges


def _pass_on(send, receive):
    rank, n = dist.get_rank(), dist.get_world_size()
    requests = []
    if send.numel():
        requests.append(dist.isend(send, (rank + 1) % n))
    if receive.numel():
        requests.append(dist.irecv(receive, (rank - 1) % n))
    for request in requests:
        request.wait()


def student_reduce_scatter(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    edges = _bounds(tensor.numel(), n)
    for step in range(n - 1):
        out, into = (rank - step - 1) % n, (rank - step - 2) % n
        incoming = torch.empty(edges[into + 1] - edges[into], dtype=tensor.dtype)
        _pass_on(tensor[edges[out]:edges[out + 1]], incoming)
        tensor[edges[into]:edges[into + 1]] += incoming


def student_all_gather(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    edges = _bounds(tensor.numel(), n)
    for step in range(n - 1):
        out, into = (rank - step) % n, (rank - step - 1) % n
        _pass_on(tensor[edges[out]:edges[out + 1]], tensor[edges[into]:edges[into + 1]])


def student_all_reduce(tensor):
    student_reduce_scatter(tensor)
    student_all_gather(tensor)


# -----------------------------------------------------------------------------
# Answers that go wrong.


def calls_all_reduce(tensor):
    dist.all_reduce(tensor)


def calls_the_course(tensor):
    collectives.ring_all_reduce(tensor)


_all_reduce_under_another_name = dist.all_reduce


def calls_all_reduce_by_alias(tensor):
    _all_reduce_under_another_name(tensor)  # no collective's name in the code


def calls_all_reduce_by_a_name_made_at_run_time(tensor):
    getattr(dist, "_".join(("all", "reduce")))(tensor)  # no name in the code, nor an alias


def rank_one_raises(tensor):
    if dist.get_rank() == 1:
        raise ValueError("chunk bounds went wrong")
    student_all_reduce(tensor)


def everyone_receives_first(tensor):
    # Every rank waits for its left neighbour, which waits too: a deadlock.
    dist.recv(torch.empty_like(tensor), (dist.get_rank() - 1) % dist.get_world_size())


def gathers_on_rank_zero(tensor):
    # Right sums, but not a ring: everything goes through rank 0.
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        incoming = torch.empty_like(tensor)
        for other in range(1, n):
            dist.recv(incoming, other)
            tensor += incoming
        for other in range(1, n):
            dist.send(tensor, other)
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)


def forgets_the_all_gather(tensor):
    student_reduce_scatter(tensor)


# -----------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_ring_all_reduce_from_point_to_point_calls_passes(world_size):
    # 10 and 2 elements: uneven chunks, and fewer elements than ranks on 3.
    check_collective(student_all_reduce, "all_reduce", world_sizes=(world_size,),
                     lengths=(10, 2), timeout_s=DEADLINE_S)


def test_reduce_scatter_and_all_gather_pass_on_their_own_in_float32():
    for collective, function in (("reduce_scatter", student_reduce_scatter),
                                 ("all_gather", student_all_gather)):
        check_collective(function, collective, world_sizes=(3,), lengths=(7, 0),
                         dtype="float32", timeout_s=DEADLINE_S)


def test_expected_messages_are_those_of_the_course_ring():
    # Rank r of the reduce-scatter sends every chunk but its own; the all-gather
    # forwards every chunk but the one it receives last.
    sizes = [stop - start for start, stop in collectives.chunk_bounds(10, 4)]  # 3, 3, 2, 2
    assert sizes == [3, 3, 2, 2]
    assert expected_messages("reduce_scatter", 10, 4, 2) == (3, 10 - 2, 10 - 3)
    assert expected_messages("all_gather", 10, 4, 2) == (3, 10 - 2, 10 - 2)
    assert expected_messages("all_reduce", 10, 4, 0) == (6, 7 + 7, 8 + 7)


def test_calling_a_collective_is_refused_with_a_message():
    with pytest.raises(AssertionError, match="calls_all_reduce uses all_reduce: a collective "
                                             "does the work for you"):
        check_collective(calls_all_reduce, "all_reduce", world_sizes=(2,), lengths=(4,))
    with pytest.raises(AssertionError, match=r"calls_the_course uses collectives "
                                             r"\(gpucourse.collectives\)"):
        check_point_to_point_only(calls_the_course)


def test_a_collective_under_an_alias_is_refused_by_its_real_name():
    with pytest.raises(AssertionError, match="calls_all_reduce_by_alias uses all_reduce"):
        check_point_to_point_only(calls_all_reduce_by_alias)


def test_a_collective_that_no_name_shows_is_refused_in_the_ranks():
    check_point_to_point_only(calls_all_reduce_by_a_name_made_at_run_time)  # nothing to see
    with pytest.raises(AssertionError) as failure:
        check_collective(calls_all_reduce_by_a_name_made_at_run_time, "all_reduce",
                         world_sizes=(2,), lengths=(4,), timeout_s=DEADLINE_S)
    # Both ranks raise; whichever did first is named.
    assert re.search("rank [01] of 2 raised an error", str(failure.value))
    assert ("a collective (dist.all_reduce) is not allowed in this exercise: use "
            "point-to-point calls") in str(failure.value)


def left_behind(before: set[int]) -> list:
    """Processes started by this test that are still alive (other tests in the
    same pytest worker may keep children of their own, such as
    multiprocessing's resource tracker)."""
    return [child for child in psutil.Process().children(recursive=True)
            if child.pid not in before]


def children_now() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def test_a_rank_that_raises_is_named_with_its_error():
    before = children_now()
    start = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        # A timeout longer than any start-up, so that ending before it shows
        # the other ranks were stopped when rank 1 raised, not timed out.
        check_collective(rank_one_raises, "all_reduce", world_sizes=(3,), lengths=(6,),
                         timeout_s=SLACK_S + 10)
    message = str(failure.value)
    assert "rank 1 of 3 raised an error in rank_one_raises" in message
    assert "ValueError: chunk bounds went wrong" in message
    assert time.monotonic() - start < SLACK_S  # the others were stopped, not waited for
    assert not left_behind(before)


def test_a_hang_ends_within_seconds_and_leaves_no_process(tmp_path):
    pids = tmp_path / "pids"

    def hangs_and_forks(tensor):
        # Each rank starts a process of its own, then deadlocks.
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(1)
        with open(pids, "a") as file:
            file.write(f"{os.getpid()} {child}\n")
        everyone_receives_first(tensor)

    before = children_now()
    start = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        check_collective(hangs_and_forks, "all_reduce", world_sizes=(2,), lengths=(4,),
                         timeout_s=DEADLINE_S)
    assert time.monotonic() - start < DEADLINE_S + SLACK_S
    message = str(failure.value)
    assert "did not finish within 3 s: ranks [0, 1] were still running and were stopped" \
        in message
    assert "everyone_receives_first" in message  # each rank's stack shows where it waits
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 4  # two ranks, each with a child
    time.sleep(0.2)
    for pid in started:
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"process {pid} survived"
    assert not left_behind(before)


def test_a_rank_that_exits_is_reported():
    def exits(tensor):
        os._exit(3)

    with pytest.raises(AssertionError, match=r"exited \(exit code 3\) without reporting"):
        check_collective(exits, "all_reduce", world_sizes=(2,), lengths=(4,),
                         timeout_s=DEADLINE_S)


def test_right_sums_that_are_not_a_ring_fail_on_their_messages():
    with pytest.raises(AssertionError, match="rank 0 sent to rank 2; on a ring each rank "
                                             "sends only to the next one"):
        check_collective(gathers_on_rank_zero, "all_reduce", world_sizes=(3,), lengths=(6,),
                         timeout_s=DEADLINE_S)


def test_a_ring_that_skips_a_phase_is_named_by_its_messages_first():
    # A ring that forgets the all-gather sends too little: the check of each
    # rank's messages (issue 34: the most precise failure first) names the
    # rank and what it sent before any value is compared.
    with pytest.raises(AssertionError, match="on 2 processes, a float64 tensor of 5 elements: "
                                             "rank 0 sent 2 elements in 1 non-empty messages "
                                             "and received 3; the ring all-reduce sends 5"):
        check_collective(forgets_the_all_gather, "all_reduce", world_sizes=(2,), lengths=(5,),
                         timeout_s=DEADLINE_S)


def test_time_all_reduce_times_the_students_ring():
    rows = time_all_reduce(student_all_reduce, world_sizes=(2,), sizes_bytes=(8, 4096),
                           repeats=2, timeout_s=10.0)
    assert [(row["world_size"], row["bytes"]) for row in rows] == [(2, 8), (2, 4096)]
    assert all(type(row["seconds"]) is float and 0 < row["seconds"] < 1 for row in rows)


def test_least_squares_alpha_beta_recovers_the_model_and_matches_the_course_fit():
    sizes = np.array([8, 1024, 65536, 2 ** 20, 8, 2 ** 20], dtype=float)
    world_sizes = [2, 2, 2, 2, 4, 4]
    exact = [collectives.alpha_beta_time_s(m, n, 20e-6, 2e9) for m, n in zip(sizes, world_sizes)]
    alpha, beta = least_squares_alpha_beta(sizes, exact, world_sizes)
    assert alpha == pytest.approx(20e-6, rel=1e-9) and beta == pytest.approx(2e9, rel=1e-9)
    # Noisy times: the same answer as the course's own fit (which minimises the same
    # relative error), whose latency is positive here.
    noisy = np.array(exact) * np.random.default_rng(0).uniform(0.8, 1.25, size=len(exact))
    fit = collectives.fit_alpha_beta(sizes, noisy, world_sizes)
    assert fit.latency_s > 0
    assert least_squares_alpha_beta(sizes, noisy, world_sizes) == \
        pytest.approx((fit.latency_s, fit.bandwidth_bytes_per_s), rel=1e-9)


def _columns(rows):
    return ([row["bytes"] for row in rows], [row["seconds"] for row in rows],
            [row["world_size"] for row in rows])


def test_a_fit_is_checked_by_its_model_times_against_lstsq():
    rows = example_timings(world_sizes=(2, 5), seed=3)
    sizes, times, ranks = _columns(rows)
    assert sorted({row["world_size"] for row in rows}) == [2, 5] and len(rows) == 12
    # The example timings scatter about the model they were made from.
    model = [collectives.alpha_beta_time_s(m, n, EXAMPLE_LATENCY_S,
                                           EXAMPLE_BANDWIDTH_BYTES_PER_S)
             for m, n in zip(sizes, ranks)]
    assert all(0.6 < t / expected < 1.6 for t, expected in zip(times, model))
    assert expect_alpha_beta_fit(least_squares_alpha_beta, sizes, times, ranks) == \
        least_squares_alpha_beta(sizes, times, ranks)

    def off_by_a_little(message_bytes, times_s, world_sizes):
        latency, bandwidth = least_squares_alpha_beta(message_bytes, times_s, world_sizes)
        return latency * 1.001, bandwidth

    class Anything(float):
        def __eq__(self, other):
            return True

    with pytest.raises(AssertionError, match="your fit's time for 8 bytes on 2 processes"):
        expect_alpha_beta_fit(off_by_a_little, sizes, times, ranks)
    with pytest.raises(AssertionError, match="latency_s must be a float, got an object of "
                                             "type Anything"):
        expect_alpha_beta_fit(lambda *data: (Anything(1.0), 1e9), sizes, times, ranks)
    with pytest.raises(AssertionError, match="must return a tuple"):
        expect_alpha_beta_fit(lambda *data: [1e-5, 1e9], sizes, times, ranks)


def test_bad_arguments_raise_value_errors_that_name_them():
    with pytest.raises(ValueError, match="collective"):
        check_collective(student_all_reduce, "broadcast")
    with pytest.raises(ValueError, match="world_sizes"):
        check_collective(student_all_reduce, "all_reduce", world_sizes=(0,))
    with pytest.raises(ValueError, match="lengths"):
        check_collective(student_all_reduce, "all_reduce", lengths=(2.5,))
    with pytest.raises(ValueError, match="dtype"):
        check_collective(student_all_reduce, "all_reduce", dtype="int8")
    with pytest.raises(ValueError, match="world_size"):
        run_forked(lambda rank, n: None, 0)
    with pytest.raises(ValueError, match="timeout_s"):
        run_forked(lambda rank, n: None, 2, timeout_s=-1)
    with pytest.raises(ValueError, match="sizes_bytes"):
        time_all_reduce(student_all_reduce, sizes_bytes=(6,))
    with pytest.raises(ValueError, match="equal length"):
        least_squares_alpha_beta([8, 16], [1e-6], [2, 2])
