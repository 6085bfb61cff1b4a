"""Chapter 4's exercises cannot be passed by answers that let something else do the work.

One nbgrader autograde run grades two submissions; in each, every exercise
cheats in its own way:

* the collectives: a collective of torch.distributed called by name, through a
  name built at run time or under an alias imported beside the function; the
  course's own ring; right sums that travel through rank 0 instead of a ring;
* the fit: numpy's lstsq called anyway; numpy.linalg.lstsq and numpy.allclose
  patched to agree with a made-up answer;
* the models: the course's own implementation; answers hard-coded to the
  visible tests; an always-equal float subclass, with math.isclose and
  numpy.allclose patched to return True.

Each loses all of its exercise's points, for the reason its check names.
"""

from __future__ import annotations

import nbformat
import pytest

from test_grading import autograde, filled_in, nbgrader_meta

CHAPTER = "04_frameworks_and_communication"

ALWAYS_EQUAL = """
import math

import numpy as np


class Whatever(float):
    def __eq__(self, other):
        return True

    __ne__ = lambda self, other: False
    __lt__ = __le__ = __gt__ = __ge__ = lambda self, other: True
    __hash__ = float.__hash__


math.isclose = lambda *args, **kwargs: True
np.allclose = lambda *args, **kwargs: True
np.isclose = lambda *args, **kwargs: True
"""

# Submission "names": collectives called by name, the course's code, lstsq, a subclass.
NAMES = {
    "reduce_scatter_solution": '''
def ring_reduce_scatter(tensor):
    name = "_".join(("all", "reduce"))  # built at run time: no collective's name in the code
    getattr(dist, name)(tensor)
''',
    "all_gather_solution": '''
def ring_all_gather(tensor):
    from gpucourse import collectives
    whole = collectives.ring_all_gather(tensor.view(-1, 1)[:0], total_rows=0)
''',
    "all_reduce_solution": '''
def ring_all_reduce(tensor):
    dist.all_reduce(tensor)
''',
    "fit_solution": '''
def fit_alpha_beta(message_bytes, times_s, world_sizes):
    rows = [[2 * (n - 1) / t, 2 * (n - 1) / n * m / t]
            for m, t, n in zip(message_bytes, times_s, world_sizes)]
    (alpha, gamma), *_ = np.linalg.lstsq(np.array(rows), np.ones(len(rows)), rcond=None)
    return float(alpha), float(1 / gamma)
''',
    "alpha_beta_solution": '''
from gpucourse.collectives import alpha_beta_time_s


def ring_all_reduce_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s):
    if world_size == 1:
        return 0.0
    return alpha_beta_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s)
''',
    "ccr_solution": ALWAYS_EQUAL + '''

def tensor_parallel_ccr(hidden, seq_len, tp, bandwidth_bytes_per_s, flops_per_s,
                        bytes_per_element=2):
    if not tp >= 2 or not float(tp).is_integer():
        raise ValueError("tp must be a whole number >= 2")
    return Whatever(9.0)
''',
}

# Submission "disguises": an aliased collective, a star instead of a ring, patched
# numpy, the course's CCR, answers hard-coded to the visible tests.
DISGUISES = {
    "reduce_scatter_solution": '''
from torch.distributed import all_reduce as add_up


def ring_reduce_scatter(tensor):
    add_up(tensor)
''',
    "all_gather_solution": '''
def ring_all_gather(tensor):
    # Everything to rank 0, then the whole tensor back: right values, no ring.
    rank, n = dist.get_rank(), dist.get_world_size()
    bounds = chunk_bounds(tensor.numel(), n)
    if rank == 0:
        for other in range(1, n):
            start, stop = bounds[other]
            if stop > start:
                dist.recv(tensor[start:stop], other)
        for other in range(1, n):
            if tensor.numel():
                dist.send(tensor, other)
    else:
        start, stop = bounds[rank]
        if stop > start:
            dist.send(tensor[start:stop], 0)
        if tensor.numel():
            dist.recv(tensor, 0)
''',
    "all_reduce_solution": '''
def ring_all_reduce(tensor):
    # The naive all-reduce: right sums, all through rank 0.
    rank, n = dist.get_rank(), dist.get_world_size()
    if not tensor.numel():
        return
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
''',
    "fit_solution": '''
import numpy as np

np.linalg.lstsq = lambda *args, **kwargs: (np.array([1e-5, 1e-9]), None, None, None)
np.allclose = lambda *args, **kwargs: True


def fit_alpha_beta(message_bytes, times_s, world_sizes):
    return 1e-5, 1e9
''',
    "alpha_beta_solution": '''
def ring_all_reduce_time_s(message_bytes, world_size, latency_s, bandwidth_bytes_per_s):
    if bandwidth_bytes_per_s == 0:
        raise ValueError("bandwidth_bytes_per_s must be > 0")
    return 210e-6 if world_size == 4 else 8e-9  # the visible tests' answers
''',
    "ccr_solution": '''
from gpucourse.collectives import tensor_parallel_ccr as _course_ccr


def tensor_parallel_ccr(hidden, seq_len, tp, bandwidth_bytes_per_s, flops_per_s,
                        bytes_per_element=2):
    return _course_ccr(hidden, seq_len, tp, bandwidth_bytes_per_s, flops_per_s,
                       bytes_per_element=bytes_per_element)
''',
}

# What the failing check says, per submission and test cell (None: a hidden value test
# fails, with whatever message).
REASONS = {
    "names": {
        "test_reduce_scatter": "a collective (dist.all_reduce) is not allowed",
        "test_all_gather": "ring_all_gather imports gpucourse",
        "test_all_reduce": "ring_all_reduce uses all_reduce: a collective does the work",
        "test_fit": "fit_alpha_beta uses lstsq",
        "test_alpha_beta": "uses alpha_beta_time_s (gpucourse.collectives)",
        "test_ccr": "must be a float, got an object of type Whatever",
    },
    "disguises": {
        "test_reduce_scatter": "ring_reduce_scatter uses all_reduce",
        # On 2 processes rank 0's only partner is its neighbour, but it sends too much;
        # on 3, the naive all-reduce's rank 0 sends to rank 2.
        "test_all_gather": "rank 0 sent 10 elements in 1 non-empty messages and received 5; "
                           "the ring all-gather sends 5",
        "test_all_reduce": "rank 0 sent to rank 2; on a ring each rank sends only to the next",
        "test_fit": "your fit's time for",
        "test_alpha_beta": None,
        "test_ccr": "uses _course_ccr (gpucourse.collectives)",
    },
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course-collective-cheats")
    submissions = {"names": filled_in(CHAPTER, replace=NAMES),
                   "disguises": filled_in(CHAPTER, replace=DISGUISES)}
    scores = autograde(CHAPTER, submissions, course)
    errors = {}
    for student in submissions:
        notebook = nbformat.read(course / "autograded" / student / CHAPTER / f"{CHAPTER}.ipynb",
                                 as_version=4)
        errors[student] = {}
        for cell in notebook.cells:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    errors[student][nbgrader_meta(cell).get("grade_id")] = \
                        f"{output['ename']}: {output['evalue']}"
    return scores, errors


@pytest.mark.parametrize("student, test_cell",
                         [(student, cell) for student in REASONS for cell in REASONS[student]])
def test_each_cheat_loses_its_exercise(graded, student, test_cell):
    scores, errors = graded
    score, max_score = scores[student][test_cell]
    assert max_score > 0 and score == 0, f"{student}: {test_cell} earned {score} of {max_score}"
    assert test_cell in errors[student], f"{student}: {test_cell} lost its points without an error"
    reason = REASONS[student][test_cell]
    if reason is not None:
        assert reason in errors[student][test_cell], errors[student][test_cell][:800]


def test_every_graded_cell_is_cheated_on():
    graded_cells = {nbgrader_meta(c)["grade_id"] for c in filled_in(CHAPTER).cells
                    if nbgrader_meta(c).get("grade") and c.cell_type == "code"}
    assert set(REASONS["names"]) == set(REASONS["disguises"]) == graded_cells
