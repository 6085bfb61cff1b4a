"""gpucourse.distributed: N processes over gloo, results back by rank, and no hangs.

The worker functions live at module level so that spawned processes can
import them.
"""

from __future__ import annotations

import os
import time

import pytest

from gpucourse.distributed import run_on_processes


def sum_of_ranks(rank, world_size, scale):
    import torch
    import torch.distributed as dist

    x = torch.tensor([float(rank) * scale])
    dist.all_reduce(x)
    return x.item()


def fail_on_rank_one(rank, world_size):
    if rank == 1:
        raise ZeroDivisionError("rank one divides by zero")
    return rank


def die_on_rank_one(rank, world_size):
    if rank == 1:
        os._exit(3)
    return rank


def wait_for_a_partner_that_never_comes(rank, world_size):
    import torch
    import torch.distributed as dist

    if rank == 0:  # rank 0 enters a collective that rank 1 never joins
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(3600)


@pytest.mark.parametrize("world_size", [2, 4])
def test_results_come_back_in_rank_order(world_size):
    results = run_on_processes(sum_of_ranks, world_size, args=(2.0,), timeout_s=90)
    expected = 2.0 * sum(range(world_size))  # every rank holds the same reduced sum
    assert results == [expected] * world_size


def test_a_raising_worker_is_reported_with_its_rank_and_traceback():
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 failed(.|\n)*ZeroDivisionError"):
        run_on_processes(fail_on_rank_one, 2, timeout_s=90)


def test_a_dying_worker_is_reported():
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 died \(exit code 3\)"):
        run_on_processes(die_on_rank_one, 2, timeout_s=90)


def test_a_hang_ends_at_the_deadline_with_a_clear_message():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not finish within 8 s"):
        run_on_processes(wait_for_a_partner_that_never_comes, 2, timeout_s=8)
    assert time.monotonic() - start < 60  # stopped, not waited out


@pytest.mark.parametrize("bad, match", [
    (dict(world_size=0), "world_size must be a whole number >= 1"),
    (dict(world_size=2.0), "world_size must be a whole number >= 1"),
    (dict(world_size=2, backend="mpi"), "backend must be one of gloo, nccl"),
    (dict(world_size=2, timeout_s=0), "timeout_s must be > 0"),
])
def test_bad_arguments_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        run_on_processes(sum_of_ranks, **bad)


class _Process:
    """A stand-in for a worker process that exits (with `code`) `after_s` seconds from now."""

    def __init__(self, code, after_s):
        self.code, self.at = code, time.monotonic() + after_s

    def is_alive(self):
        return time.monotonic() < self.at

    @property
    def exitcode(self):
        return None if self.is_alive() else self.code


def test_an_error_after_a_partners_death_reports_the_death():
    # Rank 1 dies; rank 0 then fails with gloo's "connection closed" before
    # rank 1's exit shows. The error waits a moment for a death to show and
    # names it: the death, not its echo, is what the user must fix.
    from gpucourse.distributed import _rank_that_died

    dying = [_Process(0, 0.0), _Process(3, 0.3)]
    assert _rank_that_died(dying, exclude={0}, grace_s=2.0) == 1
    # A rank that exited cleanly, or one excluded (it already reported), is not a death.
    assert _rank_that_died([_Process(0, 0.0), _Process(0, 0.0)], exclude=set(), grace_s=0.2) is None
    assert _rank_that_died([_Process(3, 0.0)], exclude={0}, grace_s=0.2) is None
    start = time.monotonic()
    assert _rank_that_died([_Process(3, 60.0)], exclude=set(), grace_s=0.3) is None
    assert time.monotonic() - start < 20  # waits the grace period, not the process's 60 s
