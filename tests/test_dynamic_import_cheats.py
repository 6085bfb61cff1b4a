"""The course's own implementation, reached by a name the code does not show, earns nothing.

Every chapter whose exercises have a namesake in the package (``amdahl_speedup``
in ``gpucourse.hpc``, ``max_min_rates`` in ``gpucourse.network``, ...) is
graded by nbgrader's real autograde with answers that call that namesake in
each of the six ways that hide it from a reading of the code's names:

* ``importlib.import_module("gpucourse...")``;
* ``__import__("gpucourse...")``;
* a ``sys.modules["gpucourse..."]`` lookup;
* ``getattr`` on a module imported in the cell, found through ``globals()``;
* ``exec`` of a string that imports it;
* a closure that keeps it in a list.

Each must earn nothing, and fail with the run-time check's message
(:mod:`gpucourse.grader.runtime`), which names what ran: the reading of names
(:mod:`gpucourse.grader.own_work`) is blind to all six by construction. One
student a chapter answers each of its namesakes one of these ways (chapter 1
all six; see :func:`plan`, and GPUCOURSE_ALL_HIDDEN_CHEATS=1 for all six in
every chapter); every other exercise is left as the student version has it. They are graded in the
nbgrader run of the chapter's other cheats (test_grading.grade_cheater), where a
student costs about a second and a run of their own would cost ten, and checked
there by :func:`check_hidden_calls` (tests named test_hidden_calls_earn_nothing
in test_early_cheats, test_collective_cheats, test_sgemm_cheats and
test_attention_cheats). Here: that the reading of names passes every one of
them, and that every chapter with a namesake has its cheats.
"""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

from test_grading import exercises_of, source_notebook

KINDS = ("import_module", "__import__", "sys.modules", "getattr", "exec", "closure")

# {chapter: [(solution grade_id, the exercise's function, the package module holding
# its namesake, how the answer calls it: an expression of `lib`, the module,
# and the answer's `args` and `kwargs`)]}. Calls are forwarded as they are,
# except where the namesake takes its arguments in another form.
FORWARD = "lib.{name}(*args, **kwargs)"
TARGETS = {
    "01_hpc_foundations": [
        ("amdahl_solution", "amdahl_speedup", "gpucourse.hpc", FORWARD),
        ("fit_amdahl_solution", "fit_amdahl", "gpucourse.hpc", FORWARD),
        ("fit_gustafson_solution", "fit_gustafson", "gpucourse.hpc", FORWARD),
        ("karp_flatt_solution", "karp_flatt", "gpucourse.hpc", FORWARD),
        ("roofline_solution", "roofline", "gpucourse.hpc", FORWARD),
        ("place_solution", "place_on_roofline", "gpucourse.hpc", FORWARD),
    ],
    "02_tensor_and_pipeline_parallelism": [
        ("column_solution", "column_parallel_linear", "gpucourse.parallelism", FORWARD),
        ("row_solution", "row_parallel_linear", "gpucourse.parallelism", FORWARD),
    ],
    "03_experts_and_zero": [
        ("capacity_solution", "expert_capacity", "gpucourse.parallelism", FORWARD),
        ("balance_solution", "load_balancing_loss", "gpucourse.parallelism", FORWARD),
    ],
    "04_frameworks_and_communication": [
        ("fit_solution", "fit_alpha_beta", "gpucourse.collectives",
         "(lambda fit: (fit.latency_s, fit.bandwidth_bytes_per_s))(lib.fit_alpha_beta(*args))"),
        ("ccr_solution", "tensor_parallel_ccr", "gpucourse.collectives", FORWARD),
    ],
    "05_memory": [
        ("partition_solution", "zero1_partition", "gpucourse.memory",
         "[sorted(owned) for owned in lib.zero1_partition(*args, **kwargs)]"),
    ],
    "07_infrastructure_and_cost": [
        ("break_even_hours_solution", "break_even_hours", "gpucourse.economics", FORWARD),
    ],
    "07_network": [
        ("maxmin_solution", "max_min_rates", "gpucourse.network", FORWARD),
        ("completion_solution", "completion_times", "gpucourse.network", FORWARD),
        ("proportional_solution", "proportional_design", "gpucourse.network", FORWARD),
    ],
    # The factories of levels 4a and 4b build the library's kernels.
    "08_sgemm": [
        ("tiling_1d_solution", "make_matmul_1d", "gpucourse.kernels.sgemm",
         "lib._make_1d_kernel(lib.TileConfig(*args, 1))"),
        ("tiling_2d_solution", "make_matmul_2d", "gpucourse.kernels.sgemm",
         "lib._make_2d_kernel(lib.TileConfig(*args))"),
    ],
    "09_flash_attention": [
        ("online_solution", "online_softmax", "gpucourse.kernels.attention", FORWARD),
        ("causal_solution", "causal_key_tiles", "gpucourse.kernels.attention", FORWARD),
    ],
    "11_tensor_cores": [
        ("bf16_solution", "round_to_bf16", "gpucourse.chapters.tensor_cores", FORWARD),
        ("swizzle_solution", "swizzled_chunk", "gpucourse.chapters.tensor_cores", FORWARD),
    ],
}

# What the run-time check's message says (gpucourse.grader.runtime.Watch.message).
RUNTIME_REASON = "while the grader called"


def cheat_source(kind: str, name: str, module: str, call: str) -> str:
    """A solution cell defining ``name`` that returns ``call`` on the module ``module``,
    reached in the way ``kind`` (one of KINDS) names."""
    call = call.format(name=name)
    if kind == "getattr":  # every attribute of the module read by getattr
        call = re.sub(r"lib\.(\w+)", r'getattr(lib, "\1")', call)
    body = {
        "import_module": f'lib = importlib.import_module("{module}")',
        "__import__": f'lib = __import__("{module}", fromlist=["_"])',
        "sys.modules": f'lib = sys.modules["{module}"]',
        "getattr": 'lib = globals()["_course_module"]',
        "exec": f'scope = {{}}\n    exec("import {module} as lib", scope)\n    lib = scope["lib"]',
    }
    header = f"import importlib\nimport sys\n\nimportlib.import_module({module!r})\n"
    if kind == "getattr":
        header += f"import {module} as _course_module\n"
    if kind == "closure":
        return header + f'''

def _hidden():
    box = [importlib.import_module("{module}")]

    def {name}(*args, **kwargs):
        lib = box[0]
        return {call}

    return {name}


{name} = _hidden()
'''
    return header + f'''

def {name}(*args, **kwargs):
    {body[kind]}
    return {call}
'''


def plan(chapter: str) -> dict[str, dict[str, str]]:
    """{student: {solution grade_id: kind}}.

    By default one student a chapter (each costs the run a few seconds: the
    chapter's notebook runs again), whose targets take the kinds in turn, the
    turn going on from chapter to chapter: chapter 1, with six targets, shows
    all six, and together the chapters show each kind three times or more. With
    GPUCOURSE_ALL_HIDDEN_CHEATS=1, every chapter shows all six, on as few
    students as its targets allow.
    """
    targets = [target[0] for target in TARGETS[chapter]]
    students: dict[str, dict[str, str]] = {}
    if os.environ.get("GPUCOURSE_ALL_HIDDEN_CHEATS") == "1":
        for index, kind in enumerate(KINDS):
            student = f"hider{index // len(targets) + 1}"
            students.setdefault(student, {})[targets[index % len(targets)]] = kind
        return students
    start = sum(len(TARGETS[other]) for other in sorted(TARGETS) if other < chapter)
    return {"hider1": {target: KINDS[(start + index) % len(KINDS)]
                       for index, target in enumerate(targets[:len(KINDS)])}}


def hidden_submissions(chapter: str) -> dict:
    """{student: notebook} of the chapter's hidden-call cheats (none for a chapter
    without a namesake): each cheat's exercise answered, every other one left as
    the student version has it. test_grading.grade_cheater grades them in the
    same nbgrader run as the chapter's other cheats."""
    if chapter not in TARGETS:
        return {}
    from test_grading import filled_in

    by_id = {target[0]: target for target in TARGETS[chapter]}
    return {student: filled_in(chapter, only=set(), replace={
        solution: cheat_source(kind, *by_id[solution][1:]) for solution, kind in cheats.items()})
        for student, cheats in plan(chapter).items()}


def check_hidden_calls(chapter: str, hidden: dict) -> None:
    """Every hidden-call cheat of ``chapter`` earned nothing, failing with the run-time
    check's message; ``hidden`` is grade_cheater's {student: (scores, errors)}."""
    tests = {solution: group["tests"] for solution, group in
             exercises_of(source_notebook(chapter)).items()}
    for student, cheats in plan(chapter).items():
        scores, errors = hidden[student]
        for solution, kind in cheats.items():
            for test_cell in tests[solution]:
                score, max_score = scores[test_cell]
                assert max_score > 0 and score == 0, (
                    f"{chapter}: {test_cell} ({kind}) earned {score} of {max_score}")
                assert RUNTIME_REASON in errors.get(test_cell, ""), (
                    f"{chapter}: {test_cell} ({kind}) failed for another reason: "
                    f"{errors.get(test_cell, 'no error')[:600]}")
                assert "gpucourse." in errors[test_cell], errors[test_cell][:600]


def test_the_cheats_are_invisible_to_the_reading_of_names():
    """The static check passes every cheat here: what fails them is the run-time check."""
    from gpucourse.grader.own_work import library_uses

    for chapter, targets in TARGETS.items():
        solution, name, module, call = targets[0]
        for kind in KINDS:
            scope: dict = {"__name__": "__main__"}
            exec(cheat_source(kind, name, module, call), scope)
            assert library_uses(scope[name]) == [], (chapter, kind)


def test_each_kind_is_tried_in_several_chapters():
    kinds = Counter(kind for chapter in TARGETS for cheats in plan(chapter).values()
                    for kind in cheats.values())
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 3, kinds
    assert sorted(plan("01_hpc_foundations")["hider1"].values()) == sorted(KINDS)


def test_every_chapter_with_a_namesake_has_its_hidden_cheats():
    """Each chapter whose exercises define a function of the same name as a public
    function of the package is in TARGETS (found by reading the code, not listed)."""
    import ast

    from gpucourse.grader.release import chapters
    from test_grading import ROOT, nbgrader_meta

    package = set()
    for path in (ROOT / "src" / "gpucourse").rglob("*.py"):
        if "grader" not in path.parts:
            package |= {node.name for node in ast.parse(path.read_text()).body
                        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
    for chapter in chapters(ROOT):
        defined = set()
        for cell in source_notebook(chapter).cells:
            if cell.cell_type == "code" and nbgrader_meta(cell).get("solution"):
                defined |= {node.name for node in ast.parse(cell.source).body
                            if isinstance(node, ast.FunctionDef)}
        assert not (defined & package) or chapter in TARGETS, (
            f"{chapter} defines {sorted(defined & package)}, namesakes of the package's "
            "functions: give it hidden-call cheats in TARGETS")
