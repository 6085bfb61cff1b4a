"""When ranks fail or hang, the collectives' grader says the same thing every time.

A rank's own mistake must be reported, never the "Connection reset by peer"
of a rank that only lost its partner, and a hang must say which rank waited
on which. Each run is small (a few elements, three or four ranks) and ends
in well under a second, or at a short deadline for the hang.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from gpucourse.grader.collective_exercises import check_collective
from gpucourse.grader.forked_ranks import _cycle, run_forked

import pytest

RUNS = 10
DEADLINE_S = 1.0


def reduce_scatter_into_float32(tensor):
    # The student's ring, but each chunk arrives in a buffer of torch.empty's default
    # dtype (float32), while the tensor is float64: gloo gets 8-byte elements for a
    # buffer of 4-byte ones.
    rank, n = dist.get_rank(), dist.get_world_size()
    size = tensor.numel() // n
    for step in range(n - 1):
        send = (rank - step) % n
        arrived = torch.empty(size)
        requests = [dist.isend(tensor[send * size:(send + 1) * size], (rank + 1) % n),
                    dist.irecv(arrived, (rank - 1) % n)]
        for request in requests:
            request.wait()
        into = (rank - step - 1) % n
        tensor[into * size:(into + 1) * size] += arrived


def test_a_receive_buffer_of_the_wrong_dtype_gives_the_same_message_every_time():
    messages = set()
    for _ in range(RUNS):
        with pytest.raises(AssertionError) as failure:
            check_collective(reduce_scatter_into_float32, "reduce_scatter", world_sizes=(3,),
                             lengths=(6,), timeout_s=DEADLINE_S)
        messages.add(str(failure.value))
    assert len(messages) == 1, messages
    message = messages.pop()
    assert ("on 3 processes: message 1 of those from rank 0 to rank 1 does not fit its receive: "
            "rank 0 sends 2 float64 elements (16 bytes), and rank 1 receives it into 2 float32 "
            "elements (8 bytes)") in message
    assert "same dtype" in message
    assert "Connection" not in message and "GLHF" not in message


def test_the_rank_that_died_is_named_not_the_one_that_lost_its_connection():
    def dies_in_rank_one(rank, world_size):
        if rank == 1:
            time.sleep(0.1)
            os._exit(3)
        dist.recv(torch.zeros(2), 1)  # rank 0's receive is cut off: connection closed

    for _ in range(3):
        with pytest.raises(AssertionError) as failure:
            run_forked(dies_in_rank_one, 2, timeout_s=DEADLINE_S)
        message = str(failure.value)
        assert message.startswith("dies_in_rank_one on 2 processes: rank 1 of 2 exited (exit "
                                  "code 3) without reporting a result"), message
        assert "Connection" not in message.split("Every process was stopped.")[0]


def test_a_hang_says_who_waited_on_whom():
    def deadlocks(rank, world_size):
        # Ranks 1 and 2 each receive before they send; rank 0 receives from rank 3,
        # which is busy with something else.
        if rank == 3:
            time.sleep(30)
        peer = {0: 3, 1: 2, 2: 1}[rank]
        dist.recv(torch.zeros(4), peer)
        dist.send(torch.zeros(4), peer)

    start = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_forked(deadlocks, 4, timeout_s=DEADLINE_S)
    # Well under rank 3's 30 s, with room for a loaded machine to fork and reap.
    assert time.monotonic() - start < DEADLINE_S + 15
    message = str(failure.value)
    assert "did not finish within 1 s: ranks [0, 1, 2, 3] were still running" in message
    assert "rank 0 waited in a receive of 4 elements from rank 3." in message
    assert "rank 1 waited in a receive of 4 elements from rank 2." in message
    assert "rank 2 waited in a receive of 4 elements from rank 1." in message
    assert "rank 3 was running its own code, not waiting in a send or a receive." in message
    assert "They wait on each other in a cycle (rank 1 -> rank 2 -> rank 1" in message


def test_a_receive_from_a_rank_that_returned_says_so():
    def receives_what_nobody_sends(rank, world_size):
        if rank == 0:
            dist.recv(torch.zeros(3), 1)  # rank 1 returns: the connection closes under it

    with pytest.raises(AssertionError) as failure:
        run_forked(receives_what_nobody_sends, 2, timeout_s=DEADLINE_S)
    message = str(failure.value)
    assert message == ("receives_what_nobody_sends on 2 processes: ranks [0] were left waiting "
                       "for peers that had stopped, and were stopped.\nrank 0 waited in a "
                       "receive of 3 elements from rank 1, which had already returned: nothing "
                       "will ever match it.")


def test_the_cycle_is_found_from_its_lowest_rank():
    assert _cycle({0: 2, 2: 1, 1: 0}) == [0, 2, 1]
    assert _cycle({3: 1, 1: 2, 2: 1}) == [1, 2]
    assert _cycle({0: 1, 1: 3}) == []
