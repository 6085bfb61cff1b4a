"""What a ring built by a student may call: point-to-point messages, and no collective.

The exercise is to build collectives, so the student's function may not call
one. Two checks enforce it:

* before any process starts, ``check_point_to_point_only`` reads the names
  the function's code refers to (and those of the notebook functions it
  calls) and fails on any collective's name (``all_reduce``,
  ``reduce_scatter_tensor``, ``all_gather``, ``broadcast``, ``barrier``, ...)
  and on any use of the course's package (``gpucourse.verify.expect_own_work``);
* in each rank, while the student's function runs, every collective of
  ``torch.distributed`` (the module functions and the methods of the process
  group they end in) and the course's own ring raise "use point-to-point
  calls". This catches what the names do not show (``getattr(dist, name)``).

The point-to-point calls are counted on their way through the process group
(``dist.send``, ``recv``, ``isend``, ``irecv`` and ``batch_isend_irecv`` all
end in its ``send`` and ``recv``), so that the grader can check each rank's
messages against the ring's (see :mod:`gpucourse.grader.collective_exercises`).

The rules are a module of their own because two others apply them: the ranks
install the guards (:mod:`gpucourse.grader.forked_ranks`) and the checks
read the names before a launch (:mod:`gpucourse.grader.collective_exercises`).
"""

from __future__ import annotations

from contextlib import contextmanager

from gpucourse import collectives as _collectives
from gpucourse.grader.own_work import expect_no_names, expect_own_work

# What a function built from point-to-point calls may not name: the
# collectives of torch.distributed (and of its process groups, and of
# torch.ops.c10d), whatever module they are reached through.
COLLECTIVE_NAMES = frozenset({
    "all_reduce", "allreduce", "allreduce_", "all_reduce_coalesced", "allreduce_coalesced",
    "reduce_scatter", "reduce_scatter_", "reduce_scatter_tensor", "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "all_gather", "allgather", "allgather_", "all_gather_into_tensor", "_all_gather_base",
    "all_gather_object", "all_gather_coalesced", "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "all_to_all", "all_to_all_single", "alltoall", "alltoall_base",
    "broadcast", "broadcast_", "broadcast_object_list",
    "reduce_scatter_multigpu", "all_reduce_multigpu", "all_gather_multigpu",
    "scatter_object_list", "gather_object", "barrier", "monitored_barrier",
    "_functional_collectives", "functional_collectives",
})
# The same, as functions of torch.distributed refused at run time (plain
# "reduce", "gather" and "scatter" too: by name they are too common to refuse).
_REFUSED_FUNCTIONS = sorted(COLLECTIVE_NAMES | {"reduce", "gather", "scatter"})
# ... and as methods of the process group that those functions call.
_REFUSED_METHODS = ("allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced",
                    "allgather_into_tensor_coalesced", "_allgather_base", "reduce_scatter",
                    "reduce_scatter_tensor_coalesced", "_reduce_scatter_base", "broadcast",
                    "reduce", "gather", "scatter", "alltoall", "alltoall_base", "barrier",
                    "monitored_barrier")
# The course's own collectives (gpucourse.collectives), refused in the ranks.
_COURSE_COLLECTIVES = ("ring_all_reduce", "naive_all_reduce", "ring_reduce_scatter",
                       "ring_all_gather", "_ring_reduce_scatter_flat", "_ring_all_gather_flat",
                       "_exchange")
POINT_TO_POINT = "dist.send, dist.recv, dist.isend, dist.irecv or dist.batch_isend_irecv"


def check_point_to_point_only(function) -> None:
    """Fail when ``function`` names a collective of torch.distributed or uses
    the course's package: the ring must be built from point-to-point calls."""
    expect_no_names(function, COLLECTIVE_NAMES,
                    f"a collective does the work for you; build it from point-to-point calls "
                    f"({POINT_TO_POINT})")
    expect_own_work(function, forbidden=("gpucourse",))


class _Rank:
    """What a rank knows about itself while the student's function runs."""

    student_running = False
    messages: list = []  # ("send" or "recv", peer group rank, elements) in call order


@contextmanager
def _student_code():
    """Mark the student's function as running: collectives refuse, messages count."""
    _Rank.student_running = True
    try:
        yield
    finally:
        _Rank.student_running = False


def _refusing(original, what: str):
    def refuse(*args, **kwargs):
        if _Rank.student_running:
            raise RuntimeError(f"{what} is not allowed in this exercise: use point-to-point "
                               f"calls ({POINT_TO_POINT})")
        return original(*args, **kwargs)

    refuse.__name__ = getattr(original, "__name__", what)
    return refuse


def _counting(original, kind: str):
    def count(self, tensors, peer, *args, **kwargs):
        _Rank.messages.append((kind, int(peer), sum(int(t.numel()) for t in tensors)))
        return original(self, tensors, peer, *args, **kwargs)

    return count


def _counting_any_source(original):
    def count(self, tensors, *args, **kwargs):  # a receive from any rank: peer -1
        _Rank.messages.append(("recv", -1, sum(int(t.numel()) for t in tensors)))
        return original(self, tensors, *args, **kwargs)

    return count


def _install_guards() -> None:
    """In a rank: refuse collectives and the course's ring while the student's
    code runs, and count every point-to-point message."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    group_class = distributed_c10d.ProcessGroup  # every call below ends in its methods
    for method in _REFUSED_METHODS:
        if hasattr(group_class, method):
            setattr(group_class, method, _refusing(getattr(group_class, method),
                                                   f"a collective (process group .{method})"))
    group_class.send = _counting(group_class.send, "send")
    group_class.recv = _counting(group_class.recv, "recv")
    group_class.recv_anysource = _counting_any_source(group_class.recv_anysource)
    for module in (dist, distributed_c10d):
        for name in _REFUSED_FUNCTIONS:
            if callable(getattr(module, name, None)):
                setattr(module, name, _refusing(getattr(module, name),
                                                f"a collective (dist.{name})"))
    for name in _COURSE_COLLECTIVES:
        setattr(_collectives, name, _refusing(getattr(_collectives, name),
                                              f"the course's own {name}; write the ring "
                                              "yourself"))
