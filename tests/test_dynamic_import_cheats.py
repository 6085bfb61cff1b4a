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
(:mod:`gpucourse.grader.own_work`) is blind to all six by construction. A
chapter with fewer namesakes than ways spreads them over a few students, all
graded in one nbgrader run; every other exercise is left as the student version
has it, so that the run costs little more than nbgrader's start.
"""

from __future__ import annotations

import re

import pytest

from test_grading import autograde, exercises_of, filled_in, graded_errors, source_notebook

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
        ("fit_solution", "fit_alpha_beta", "gpucourse.collectives", FORWARD),
        ("ccr_solution", "tensor_parallel_ccr", "gpucourse.collectives", FORWARD),
    ],
    "05_memory": [
        ("partition_solution", "zero1_partition", "gpucourse.memory", FORWARD),
    ],
    "07_infrastructure_and_cost": [
        ("per_exaflop_solution", "cost_per_exaflop_usd", "gpucourse.economics", FORWARD),
        ("break_even_hours_solution", "break_even_hours", "gpucourse.economics", FORWARD),
        ("break_even_price_solution", "break_even_price_per_chip_hour_usd",
         "gpucourse.economics", FORWARD),
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
    """{student: {solution grade_id: kind}}: the six kinds over the chapter's targets,
    as few students as the targets allow."""
    targets = [target[0] for target in TARGETS[chapter]]
    students: dict[str, dict[str, str]] = {}
    for index, kind in enumerate(KINDS):
        student = f"hider{index // len(targets) + 1}"
        students.setdefault(student, {})[targets[index % len(targets)]] = kind
    return students


@pytest.fixture(scope="module", params=sorted(TARGETS))
def graded(request, tmp_path_factory):
    """One nbgrader autograde run per chapter: {student: (scores, errors)} and the plan."""
    chapter = request.param
    by_id = {target[0]: target for target in TARGETS[chapter]}
    students = plan(chapter)
    notebooks = {student: filled_in(chapter, only=set(), replace={
        solution: cheat_source(kind, *by_id[solution][1:])
        for solution, kind in cheats.items()}) for student, cheats in students.items()}
    course = tmp_path_factory.mktemp(f"course-hidden-{chapter}")
    scores = autograde(chapter, notebooks, course)
    return chapter, students, {student: (scores[student], graded_errors(course, chapter, student))
                               for student in students}


def test_the_cheats_are_invisible_to_the_reading_of_names():
    """The static check passes every cheat here: what fails them is the run-time check."""
    from gpucourse.grader.own_work import library_uses

    for chapter, targets in TARGETS.items():
        solution, name, module, call = targets[0]
        for kind in KINDS:
            scope: dict = {"__name__": "__main__"}
            exec(cheat_source(kind, name, module, call), scope)
            assert library_uses(scope[name]) == [], (chapter, kind)


def test_every_hidden_call_earns_nothing(graded):
    chapter, students, results = graded
    tests = {solution: group["tests"] for solution, group in
             exercises_of(source_notebook(chapter)).items()}
    kinds_seen = set()
    for student, cheats in students.items():
        scores, errors = results[student]
        for solution, kind in cheats.items():
            kinds_seen.add(kind)
            for test_cell in tests[solution]:
                score, max_score = scores[test_cell]
                assert max_score > 0 and score == 0, (
                    f"{chapter}: {test_cell} ({kind}) earned {score} of {max_score}")
                assert RUNTIME_REASON in errors.get(test_cell, ""), (
                    f"{chapter}: {test_cell} ({kind}) failed for another reason: "
                    f"{errors.get(test_cell, 'no error')[:600]}")
                assert "gpucourse." in errors[test_cell], errors[test_cell][:600]
    assert kinds_seen == set(KINDS)
