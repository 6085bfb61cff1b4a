"""Weeks 1 to 3, 5 to 7 and 10: the named cheats earn nothing, under nbgrader's real autograde.

For each of chapters 1, 2, 3, 5, 6, the two of week 7 and 10, one autograde run
grades a submission in which most exercises cheat, each in one of the ways a
student would try:

* **an always-equal answer**: a float, int, list, tuple, set or array
  subclass whose ``==`` says True to anything;
* **patched comparisons**: a cell that replaces ``math.isclose``,
  ``numpy.allclose``, ``numpy.isclose``, ``numpy.array_equal`` and
  ``numpy.testing.assert_allclose`` with functions that always agree, then
  answers wrongly;
* **the course's own implementation** (``gpucourse``) called, imported or
  wrapped in place of the answer;
* **hard-coded to the visible tests**: right on the visible cases, wrong on
  the hidden ones.

Each cheated exercise must earn nothing, and the honest exercises of the same
submission (placed after the patching cells, so that a patch would show) their
full points. Written answers wait for a person and are no cheat's business.

The cheap, static checks at the end hold every graded test cell of these
chapters to the issue's standards: hidden tests, a check that the answer is the
student's own work, at most 15% of the checks about ValueError, and no test
cell whose last line is a value (nbgrader would read it as partial credit).
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest

from test_dynamic_import_cheats import TARGETS, check_hidden_calls
from test_grading import (exercises_of, filled_in, grade_cheater, nbgrader_meta,
                          source_notebook)

CHAPTERS = ("01_hpc_foundations", "02_tensor_and_pipeline_parallelism", "03_experts_and_zero",
            "05_memory", "06_training_playbook", "07_network", "07_infrastructure_and_cost",
            "10_tiny_gpt")

ALWAYS_EQUAL = '''
class AlwaysEqual{base}({base}):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __le__ = __ge__ = __eq__
    __hash__ = {base}.__hash__
'''


def always_equal(*bases: str) -> str:
    """Classes AlwaysEqualfloat, AlwaysEquallist, ... that compare equal to anything."""
    return "".join(ALWAYS_EQUAL.format(base=base) for base in bases)


ALWAYS_EQUAL_ARRAY = '''
class AlwaysEqualArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(np.shape(other), dtype=bool)
'''

PATCH_COMPARISONS = '''
import math

import numpy as np
import numpy.testing

math.isclose = lambda *args, **kwargs: True
np.allclose = lambda *args, **kwargs: True
np.isclose = lambda a, b, *args, **kwargs: np.ones(np.broadcast(a, b).shape, dtype=bool)
np.array_equal = lambda *args, **kwargs: True
numpy.testing.assert_allclose = lambda *args, **kwargs: None
'''

# {chapter: {solution grade_id: (how it cheats, code)}}
CHEATS = {
    "01_hpc_foundations": {
        "amdahl_solution": ("always-equal", PATCH_COMPARISONS + always_equal("float") + '''
def amdahl_speedup(parallel_fraction, workers):
    if np.ndim(workers):
        return np.zeros(np.shape(workers)).view(AlwaysEqualArray)
    return AlwaysEqualfloat(0.0)
''' + ALWAYS_EQUAL_ARRAY),
        "workers_solution": ("always-equal", always_equal("int") + '''
def workers_needed(parallel_fraction, target_speedup):
    return AlwaysEqualint(1)
'''),
        "fit_amdahl_solution": ("course", '''
from gpucourse.hpc import fit_amdahl
'''),
        "fit_gustafson_solution": ("course", '''
def fit_gustafson(workers, speedups):
    return hpc.fit_gustafson(workers, speedups)
'''),
        "karp_flatt_solution": ("hard-coded", '''
def karp_flatt(workers, speedups):
    # The two visible cases, written in.
    return np.array([1 / 9]) if len(workers) == 2 else np.full(3, 0.2)
'''),
        "roofline_solution": ("patched", PATCH_COMPARISONS + '''
def roofline(peak_flops_per_s, bandwidth_bytes_per_s, intensity_flop_per_byte):
    return peak_flops_per_s * 0 + 1.0
'''),
        "counts_solution": ("always-equal", always_equal("tuple") + '''
def kernel_counts(kernel, shape, bytes_per_element=8):
    if kernel not in ("add", "triad", "matvec", "matmul"):
        raise ValueError("kernel must be add, triad, matvec or matmul")
    return AlwaysEqualtuple((0, 0))
'''),
        "place_solution": ("always-equal", always_equal("dict") + '''
def place_on_roofline(flops, bytes_moved, seconds, peak_flops_per_s, bandwidth_bytes_per_s):
    return AlwaysEqualdict(bound="memory")
'''),
    },
    "02_tensor_and_pipeline_parallelism": {
        "column_solution": ("course", '''
import gpucourse.parallelism as par


def column_parallel_linear(x, weight, bias, world_size):
    return par.column_parallel_linear(x, weight, bias, world_size)
'''),
        "row_solution": ("course", '''
from gpucourse.parallelism import row_parallel_linear
'''),
        "megatron_solution": ("always-equal", always_equal("list") + '''
def megatron_mlp_partials(x, w1, b1, w2, world_size):
    return AlwaysEquallist()
'''),
        "bubble_solution": ("always-equal", always_equal("float") + '''
def bubble_fraction(stages, micro_batches):
    return AlwaysEqualfloat(0.5)
'''),
        "order_solution": ("patched", PATCH_COMPARISONS + always_equal("list") + '''
def one_f_one_b_order(stage, stages, micro_batches):
    return AlwaysEquallist([("F", 0)])
'''),
        "timetable_solution": ("hard-coded", '''
def pipeline_timetable(stages, micro_batches, schedule="1f1b", forward_s=1.0, backward_s=2.0):
    # The visible test's two-stage timetable, written in.
    return {(0, "F", 0): (0.0, 1.0), (0, "F", 1): (1.0, 2.0), (0, "B", 0): (4.0, 6.0),
            (0, "B", 1): (7.0, 9.0), (1, "F", 0): (1.0, 2.0), (1, "B", 0): (2.0, 4.0),
            (1, "F", 1): (4.0, 5.0), (1, "B", 1): (5.0, 7.0)}
'''),
        "timetable_bubble_solution": ("patched", PATCH_COMPARISONS + '''
def timetable_bubble(timetable):
    return 0.0
'''),
    },
    "03_experts_and_zero": {
        "capacity_solution": ("always-equal", always_equal("int") + '''
def expert_capacity(tokens, experts, k, capacity_factor):
    return AlwaysEqualint(1)
'''),
        "route_solution": ("always-equal", ALWAYS_EQUAL_ARRAY + '''
def route_top1(router_logits, capacity):
    tokens, experts = np.shape(router_logits)
    return (np.zeros(tokens, dtype=np.int64).view(AlwaysEqualArray),
            np.zeros(experts, dtype=np.int64).view(AlwaysEqualArray))
'''),
        "top_k_solution": ("course", '''
def route_top_k(router_logits, k, capacity):
    from gpucourse import parallelism

    routing = parallelism.route_tokens(router_logits, k, 1.0)
    return routing.expert_index, routing.tokens_per_expert, routing.dropped
'''),
        "balance_solution": ("patched", PATCH_COMPARISONS + always_equal("float") + '''
def load_balancing_loss(router_probs, alpha=1.0):
    return AlwaysEqualfloat(1.0)
'''),
        "zero_solution": ("always-equal", always_equal("set") + '''
def zero_sharded(stage):
    return AlwaysEqualset()
'''),
    },
    # Chapter 5's cheats leave exercises 4 and 5 honest; exercise 6, which builds on
    # them and trains models on two processes, cheats, so that its measurement
    # (seconds) never runs here.
    "05_memory": {
        "zero_solution": ("always-equal", always_equal("float") + '''
def zero_bytes_per_gpu(n_params, zero_stage, dp, k=12):
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError("zero_stage must be one of 0, 1, 2, 3")
    return AlwaysEqualfloat(0.0)
'''),
        "fit_solution": ("patched", PATCH_COMPARISONS + '''
def min_gpus_to_fit(n_params, gpu_memory_bytes, zero_stage, activation_bytes=0):
    return 1
'''),
        "act_solution": ("hard-coded", '''
def layer_activation_bytes(seq_len, micro_batch, hidden, heads, tp=1, sequence_parallel=False,
                           recompute="none"):
    # The visible cases, written in.
    if heads % tp:
        raise ValueError("tp must divide heads")
    return float(2048 * 12288 * (114 if tp == 1 else 13 if recompute == "selective" else 23))
'''),
        "rank_bytes_solution": ("course", '''
def predict_rank_bytes(shapes, wrapper, world_size, rank):
    from gpucourse import memory

    numels = [math.prod(shape) for shape in shapes]
    everything = sum(numels)
    if wrapper == "ddp":
        return (4 * everything, 4 * everything, 8 * everything)
    if wrapper == "zero1":
        mine = sum(numels[i] for i in memory.zero1_partition(numels, world_size)[rank])
        return (4 * everything, 4 * everything, 8 * mine)
    mine = sum(memory.fsdp2_local_numel(shape, world_size, rank) for shape in shapes)
    return (4 * mine, 4 * mine, 8 * mine)
'''),
    },
}

# Later chapters: the cheats sit on exercises no honest one builds on, so that the
# honest exercises of the same submission can keep their points.
CHEATS.update({
    "06_training_playbook": {
        "layer_flops_solution": ("always-equal", always_equal("int") + '''
def layer_forward_flops(batch, seq_len, hidden):
    if batch < 1:
        raise ValueError("batch must be >= 1")
    return AlwaysEqualint(0)
'''),
        "attention_share_solution": ("patched", PATCH_COMPARISONS + '''
def attention_flops_share(seq_len, hidden):
    if not seq_len > 0:
        raise ValueError("seq_len must be > 0")
    return 0.25
'''),
        "memory_solution": ("hard-coded", '''
def memory_per_gpu(model, dp, tp, pp, zero_stage=0, recompute="selective"):
    # The visible toy model's two cases, written in.
    if model["heads"] % tp:
        raise ValueError("tp must divide the heads")
    return float(16 * 1840 / (dp if zero_stage == 3 else 1) + 2 * 1088)
'''),
        "feasible_solution": ("course", '''
def feasible_layouts(cluster, model, zero_stage=0, recompute="selective"):
    from gpucourse import planner

    c = planner.Cluster(cluster["nodes"], cluster["gpus_per_node"], 1e11, 1e10,
                        cluster["gpu_memory_bytes"], 1e15)
    layouts = planner.plan_layouts(c, planner.Model(**model), orders=("tp-pp-dp",),
                                   zero_stage=zero_stage, recompute=recompute)
    rows = sorted((x.tp, x.pp, x.dp) for x in layouts if x.fits and x.within_node["tp"])
    return np.array([(dp, tp, pp) for tp, pp, dp in rows], dtype=np.int64).reshape(-1, 3)
'''),
    },
    "07_network": {
        "proportional_solution": ("patched", PATCH_COMPARISONS + '''
def proportional_design(flow_links, sizes, alpha):
    if not alpha > 0:
        raise ValueError("alpha must be > 0")
    return {link: 1.0 for path in flow_links for link in path}
'''),
        "uniform_solution": ("always-equal", always_equal("float") + '''
def uniform_design_time(flow_links, size, capacity):
    if not capacity > 0:
        raise ValueError("capacity must be > 0")
    return AlwaysEqualfloat(0.0)
'''),
        "interference_solution": ("course", '''
from gpucourse.network import is_interference_free
'''),
        "slowdown_solution": ("hard-coded", '''
def uniform_slowdown(flow_links, sizes):
    # The two visible cases, written in.
    return 1.5 if len(flow_links) == 3 else 1.0
'''),
    },
    "07_infrastructure_and_cost": {
        "per_exaflop_solution": ("always-equal", always_equal("float") + '''
def cost_per_exaflop_usd(instance, mfu, spot_discount=0.0):
    return AlwaysEqualfloat(0.0)
'''),
        "break_even_price_solution": ("patched", PATCH_COMPARISONS + '''
def break_even_price_per_chip_hour_usd(peak_flops_per_s, against_peak_flops_per_s,
                                       against_price_per_chip_hour_usd, mfu, against_mfu=None):
    if against_mfu is not None and not 0 < against_mfu <= 1:
        raise ValueError("against_mfu must be in (0, 1]")
    return float(against_price_per_chip_hour_usd)
'''),
        "cheapest_solution": ("course", '''
def cheapest_instance(total_flops, budget_usd, deadline_hours, instances, mfu, spot_discount=0.0,
                      max_instances=1024):
    from gpucourse import economics

    if not deadline_hours > 0:
        raise ValueError("deadline_hours must be > 0")
    mine = [economics.custom_instance(key, i["chip"], i["chips"], i["price_per_hour_usd"])
            for key, i in instances.items()]
    run = economics.cheapest_instance(total_flops, budget_usd, deadline_hours * 3600, mine, mfu,
                                      spot_discount, max_instances)
    return None if run is None else (run.instance, run.instances)
'''),
        "utilisation_solution": ("hard-coded", '''
def utilisation_needed(purchase_usd, owned_cost_per_hour_usd, cloud_price_per_hour_usd,
                       lifetime_years):
    # The visible cases, written in.
    if not lifetime_years > 0:
        raise ValueError("lifetime_years must be > 0")
    return 10_000 / 8766 / lifetime_years
'''),
    },
})

# Week 10: an always-equal gradient; a linear layer's backward pass whose products
# bypass the matmul it is given (right values, NumPy's @ instead); a tiled backward
# pass that is exercise 3's whole-matrix one in disguise (right values, an N x M
# matrix in memory); and an "operation" that is PyTorch's own attention, never the
# course's kernels.
CHEATS["10_tiny_gpt"] = {
    "numerical_solution": ("always-equal", ALWAYS_EQUAL_ARRAY + '''
def numerical_gradient(f, x, eps=1e-6):
    if not eps > 0:
        raise ValueError("eps must be > 0")
    for _ in range(2 * np.size(x)):
        f(np.array(x, dtype=np.float64))
    return np.zeros(np.shape(x)).view(AlwaysEqualArray)
'''),
    "tiled_solution": ("whole-matrix", '''
def tiled_attention_backward(q, k, v, out, lse, dout, causal=False, scale=None, block=16):
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError("block must be a whole number >= 1")
    return attention_backward(q, k, v, dout, causal=causal, scale=scale)
'''),
    "linear_solution": ("bypass", '''
def linear_backward(x, weight, grad_out, matmul):
    x, weight, grad_out = (np.asarray(a) for a in (x, weight, grad_out))
    if weight.ndim != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError("weight must be (out_features, in_features)")
    rows = grad_out.reshape(-1, weight.shape[0])
    return (rows @ weight).reshape(x.shape), rows.T @ x.reshape(-1, x.shape[-1]), rows.sum(axis=0)
'''),
    "function_solution": ("pytorch", '''
class CourseAttention:
    @staticmethod
    def apply(q, k, v, causal):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    @staticmethod
    def forward(ctx, q, k, v, causal):
        return None

    @staticmethod
    def backward(ctx, dout):
        return None
'''),
}

# A word of the message each kind of cheat must fail with, in its visible tests.
REASONS = {"always-equal": ("subclass", "must be a", "must return a", "object of type"),
           "course": ("gpucourse",),
           "patched": ("should be", "differs from", "should have", "must be a"),
           "hard-coded": (),
           "whole-matrix": ("allocated",),
           "bypass": ("matmul calls",),
           "pytorch": ("grad_fn", "must call")}


def _tests_of(chapter: str, solutions) -> dict[str, str]:
    """{test cell grade_id: the solution it tests} for the given solutions."""
    groups = exercises_of(source_notebook(chapter))
    return {test: solution for solution in solutions for test in groups[solution]["tests"]}


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory):
    chapter = request.param
    replace = {solution: cheat for solution, (_, cheat) in CHEATS[chapter].items()}
    course = tmp_path_factory.mktemp(f"course-cheats-{chapter}")
    graded = grade_cheater(chapter, replace, course)
    return chapter, *graded, graded.hidden


@pytest.mark.slow
def test_every_cheat_earns_nothing_and_honest_work_keeps_its_points(graded):
    chapter, scores, errors, _ = graded
    cheated = _tests_of(chapter, CHEATS[chapter])
    honest = set(_tests_of(chapter, exercises_of(source_notebook(chapter)))) - set(cheated)
    assert cheated and honest, "each chapter's submission needs cheats and honest exercises"
    for name in cheated:
        score, max_score = scores[name]
        assert max_score > 0 and score == 0, (
            f"{chapter}: {name} gave a {CHEATS[chapter][cheated[name]][0]} cheat {score} of "
            f"{max_score} points")
        assert name in errors, f"{chapter}: {name} lost its points without an error"
        how = CHEATS[chapter][cheated[name]][0]
        if REASONS[how]:
            assert any(word in errors[name] for word in REASONS[how]), \
                f"{chapter}: {name} ({how}) failed for another reason: {errors[name][:300]}"
    for name in honest:
        score, max_score = scores[name]
        assert score == max_score, f"{chapter}: {name} lost points beside the cheats"


@pytest.mark.slow
def test_hidden_calls_earn_nothing(graded):
    """The hidden-call cheats graded in the same run (test_dynamic_import_cheats)."""
    chapter, _, _, hidden = graded
    if chapter not in TARGETS:
        pytest.skip(f"{chapter}'s exercises have no namesake in the package")
    check_hidden_calls(chapter, hidden)


@pytest.mark.slow
def test_hard_coded_answers_pass_only_the_visible_tests(tmp_path):
    """The self-check runs the visible tests alone: there, an answer written for them
    passes, so only the hidden tests, in the autograde above, take its points."""
    from gpucourse.grading import score_notebook

    for chapter in ("01_hpc_foundations", "02_tensor_and_pipeline_parallelism", "05_memory"):
        hard_coded = {solution: cheat for solution, (how, cheat) in CHEATS[chapter].items()
                      if how == "hard-coded"}
        path = tmp_path / f"{chapter}.ipynb"
        nbformat.write(filled_in(chapter, replace=hard_coded), path)
        scores = {s.grade_id: s for s in score_notebook(path)}
        for name in _tests_of(chapter, hard_coded):
            assert scores[name].error is None and scores[name].points == scores[name].max_points, \
                f"{chapter}: {name}: {scores[name].error}"


# -----------------------------------------------------------------------------
# Static checks of the graded test cells

def _test_cells(chapter):
    return [cell for cell in source_notebook(chapter).cells
            if cell.cell_type == "code" and nbgrader_meta(cell).get("grade")]


def _ends_in_a_value(code: str) -> bool:
    """True when the last statement is an expression other than a call known to
    return None (nbgrader takes a cell's value as its partial credit)."""
    last = ast.parse(code).body[-1]
    if not isinstance(last, ast.Expr):
        return False
    call = last.value
    return not (isinstance(call, ast.Call) and getattr(call.func, "id", None)
                in ("expect_raises", "expect_own_work", "expect_placement", "print"))


def _visible_and_hidden(source: str) -> tuple[str, str]:
    """A test cell's visible code (what the student sees) and its hidden tests, the
    lines between each ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS (a cell may
    have several such blocks, one that defines the grader's helpers at the top)."""
    visible, hidden, inside = [], [], False
    for line in source.splitlines():
        marker = line.strip()
        if marker in ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"):
            inside = marker.startswith("### BEGIN")
            continue
        (hidden if inside else visible).append(line)
    return "\n".join(visible), "\n".join(hidden)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_test_cells_meet_the_standards(chapter):
    value_error_checks = checks = 0
    for cell in _test_cells(chapter):
        name = nbgrader_meta(cell)["grade_id"]
        visible, hidden = _visible_and_hidden(cell.source)
        assert hidden.strip(), f"{name} has no hidden tests"
        assert "expect_own_work(" in visible, \
            f"{name} does not check that the work is the student's own"
        assert "from gpucourse.verify import" in visible, f"{name} does not import its own checks"
        assert "math.isclose" not in cell.source and "np.allclose" not in cell.source, \
            f"{name} compares with a function a student cell can replace"
        full = "\n".join(line for line in cell.source.splitlines()
                         if line.strip() not in ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"))
        for part, code in (("visible", visible), ("graded", full)):
            assert not _ends_in_a_value(code), (
                f"{name}: the {part} cell ends in a value, which nbgrader reads as partial credit")
        for line in full.splitlines():
            line = line.strip()
            if re.match(r"(expect_(?!own_work)\w+\(|assert )", line):
                checks += 1
                value_error_checks += line.startswith("expect_raises(")
    assert checks and value_error_checks / checks <= 0.15, (
        f"{chapter}: {value_error_checks} of {checks} checks are about ValueError (at most 15%)")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_chapter_has_two_written_answers(chapter):
    written = [cell for cell in source_notebook(chapter).cells
               if cell.cell_type == "markdown" and nbgrader_meta(cell).get("grade")]
    assert len(written) >= 2
