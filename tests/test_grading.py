"""The grading round trip, on nbgrader's own machinery.

For every chapter in solutions/:
- exercises/ is exactly what `nbgrader generate_assignment` makes from it;
- the source notebook is well formed (solutions, graded tests with points,
  hidden tests) and the student version hides what it should;
- `nbgrader autograde` gives a correct submission full points, an untouched
  one zero on every graded cell without breaking, and a submission whose
  exercises raise, hang or delete files (one exercise each) loses only the
  points of the exercises that misbehave;
- the students' self-check reports the same.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from gpucourse.grader.release import chapters, nbgrader_command, release_in_course
from gpucourse.grader.self_check import format_scores, score_notebook

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = chapters(ROOT)
# A hanging cell is interrupted after this long in these tests (the course's
# own limit, in nbgrader_config.py, is longer).
TEST_TIMEOUT_S = 20


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def source_notebook(chapter: str):
    return nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)


def release_notebook(chapter: str):
    return nbformat.read(ROOT / "exercises" / chapter / f"{chapter}.ipynb", as_version=4)


def exercises_of(notebook) -> dict[str, dict]:
    """Group the graded test cells under the solution cell that precedes them."""
    groups: dict[str, dict] = {}
    current = None
    for cell in notebook.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution") and cell.cell_type == "code":
            current = meta["grade_id"]
            groups[current] = {"tests": {}}
        elif meta.get("grade") and cell.cell_type == "code":
            assert current is not None, f"graded cell {meta['grade_id']} precedes every solution"
            groups[current]["tests"][meta["grade_id"]] = meta["points"]
    return groups


def written_answers(notebook) -> dict[str, float]:
    """The manually graded answers: markdown cells an nbgrader grader scores by hand
    ({grade_id: points})."""
    return {nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"] for c in notebook.cells
            if c.cell_type == "markdown" and nbgrader_meta(c).get("grade")}


def autograded_ids(chapter: str) -> set[str]:
    """The graded test cells of a chapter, the ones nbgrader scores by itself."""
    return {gid for group in exercises_of(source_notebook(chapter)).values()
            for gid in group["tests"]}


def test_there_is_a_chapter_to_grade():
    assert CHAPTERS, "solutions/ holds no nbgrader source notebook"


def test_exercises_are_generated_from_solutions_and_up_to_date(autograded):
    # The student version generated for the grading run (as `make exercises`
    # makes it), from solutions/ as committed: generating it again here would
    # cost a chapter's worth of nbgrader start-up for the same file.
    chapter = autograded["chapter"]
    fresh = json.loads((autograded["course"] / "exercises" / chapter / f"{chapter}.ipynb")
                       .read_text())
    committed_path = ROOT / "exercises" / chapter / f"{chapter}.ipynb"
    assert committed_path.is_file(), f"run `make exercises`: {committed_path} is missing"
    committed = json.loads(committed_path.read_text())
    assert committed == fresh, (f"exercises/{chapter} is out of date with solutions/{chapter}: "
                                "run `make exercises` and commit the result")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_source_notebook_is_well_formed(chapter):
    notebook = source_notebook(chapter)
    groups = exercises_of(notebook)
    assert len(groups) >= 3, f"{chapter} needs at least three exercises"
    for solution, group in groups.items():
        assert group["tests"], f"exercise {solution} has no graded test cell"
        assert all(points > 0 for points in group["tests"].values())
    sources = {nbgrader_meta(c).get("grade_id"): c.source for c in notebook.cells}
    hidden = [gid for gid, src in sources.items() if "### BEGIN HIDDEN TESTS" in src]
    assert hidden, f"{chapter} has no hidden tests"
    ids = [nbgrader_meta(c).get("grade_id") for c in notebook.cells if nbgrader_meta(c)]
    assert len(ids) == len(set(ids)), "grade_ids must be unique"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_version_hides_solutions_and_hidden_tests(chapter):
    text = (ROOT / "exercises" / chapter / f"{chapter}.ipynb").read_text()
    for marker in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
        assert marker not in text
    notebook = release_notebook(chapter)
    stubs = [c for c in notebook.cells if nbgrader_meta(c).get("solution")]
    assert stubs and all("raise NotImplementedError()" in c.source for c in stubs
                         if c.cell_type == "code")
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")
    # A written answer's model answer stays in the source notebook.
    for cell in stubs:
        if cell.cell_type == "markdown":
            assert cell.source.strip() == "YOUR ANSWER HERE", (
                f"{nbgrader_meta(cell)['grade_id']}: the student version shows {cell.source!r}")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_written_answers_have_a_model_answer_and_a_rubric(chapter):
    notebook = source_notebook(chapter)
    cells = notebook.cells
    for index, cell in enumerate(cells):
        meta = nbgrader_meta(cell)
        if cell.cell_type != "markdown" or not meta.get("grade"):
            continue
        assert meta.get("solution") and meta["points"] > 0, f"{meta['grade_id']}: not an answer"
        model = cell.source.split("### BEGIN SOLUTION")[-1].split("### END SOLUTION")[0]
        assert "### BEGIN SOLUTION" in cell.source and len(model.split()) >= 30, (
            f"{meta['grade_id']}: the source notebook needs a model answer of a few sentences "
            "between ### BEGIN SOLUTION and ### END SOLUTION")
        # The question: the markdown cell before the answer (a code cell that
        # prints the student's own results may come between them).
        question = next((c.source for c in reversed(cells[:index]) if c.cell_type == "markdown"),
                        "")
        # The rubric: shown with the question, or kept for the grader beside the
        # model answer where it would give the answer away.
        assert any("rubric" in text.lower() or "points:" in text.lower()
                   for text in (question, model)), (
            f"{meta['grade_id']}: state how the answer is graded (a rubric) in the question "
            "or beside the model answer")


def filled_in(chapter: str, replace: dict[str, str] | None = None, only=None):
    """The student version with every solution written in, like a good student.

    ``replace`` maps a solution's grade_id to other code, for the submissions
    that misbehave. ``only``: the grade_ids of the solutions to write in (the
    others stay as the student version has them); default all.
    """
    source = {nbgrader_meta(c).get("grade_id"): c.source for c in source_notebook(chapter).cells}
    notebook = release_notebook(chapter)
    for cell in notebook.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution"):
            grade_id = meta["grade_id"]
            if only is not None and grade_id not in only and grade_id not in (replace or {}):
                continue
            code = (replace or {}).get(grade_id, source[grade_id])
            cell.source = "\n".join(line for line in code.splitlines()
                                    if line.strip() not in ("### BEGIN SOLUTION",
                                                            "### END SOLUTION"))
    return notebook


MISBEHAVIOURS = ("raises", "loops", "deletes")


def misbehaving_in_turn(chapter: str, only=None):
    """One submission whose first three exercises misbehave, each its own way (raises,
    loops, deletes files), and whose other exercises are right. One grading run then
    shows that each misbehaviour costs only its own exercise's points. The three
    are the first that no other exercise builds on (calls), so that every other
    exercise can still earn its points, and that leave at least one exercise
    outside them and what they call. ``only``: as for :func:`filled_in`.

    Returns the notebook and {grade_id of a broken solution: how it misbehaves}.
    """
    sources = {nbgrader_meta(c).get("grade_id"): c.source for c in source_notebook(chapter).cells}
    calls = built_on(chapter)
    exercises = list(exercises_of(source_notebook(chapter)))
    called = set().union(*calls.values())
    broken, solved_with_them = {}, set()
    for grade_id in exercises:
        if len(broken) == len(MISBEHAVIOURS) or grade_id in called:
            continue
        # The autograde fixture solves the broken exercises, and what they call, in
        # a submission that leaves the rest untouched: keep one exercise for that.
        if len(solved_with_them | {grade_id} | calls[grade_id]) < len(exercises):
            broken[grade_id] = MISBEHAVIOURS[len(broken)]
            solved_with_them |= {grade_id} | calls[grade_id]
    replace = {}
    for grade_id, how in broken.items():
        # The code before the marker, without the marker line's indentation.
        definition = sources[grade_id].split("### BEGIN SOLUTION")[0].rstrip(" ")
        replace[grade_id] = {
            # The solution cell itself raises: its function is never defined.
            "raises": "raise RuntimeError('this submission is broken')\n",
            # The function never returns: its test cell hangs until interrupted.
            # It waits rather than spins, so that the grading of one chapter
            # does not take a core from the tests running beside it.
            "loops": definition + "    import time\n    while True:\n        time.sleep(0.05)\n",
            # Deletes every file it can reach in its folder, itself included.
            "deletes": ("import os\nfor name in os.listdir('.'):\n"
                        "    if os.path.isfile(name):\n        os.remove(name)\n"),
        }[how]
    return filled_in(chapter, replace=replace, only=only), broken


def _release_once(course: Path, chapter: str) -> None:
    """``release_in_course(ROOT, course, chapter)``, generated once per version of
    the chapter's solution and shared by every test that grades the chapter (the
    grading round trip and the cheats tests, in whichever pytest worker): nbgrader's
    generate_assignment costs about 10 s of CPU a call. The course folder is
    copied from a cache keyed by the solution's bytes and the nbgrader config."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "solutions" / chapter).rglob("*")) + [ROOT / "nbgrader_config.py"]:
        if path.is_file() and ".ipynb_checkpoints" not in path.parts:
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    cache = Path(tempfile.gettempdir()) / "gpucourse-releases" / f"{chapter}-{digest.hexdigest()[:16]}"
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker generates, the others wait and copy
        if not (cache / "done").exists():
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            release_in_course(ROOT, cache, chapter)
            (cache / "done").write_text("")
    shutil.copytree(cache, course, dirs_exist_ok=True, ignore=shutil.ignore_patterns("done"))


def autograde(chapter: str, submissions: dict, course: Path) -> dict[str, dict]:
    """Autograde ``submissions`` ({student: notebook}) of one chapter with nbgrader's own
    machinery, in the fresh course folder ``course``, as an instructor would: one run
    that grades every submission in turn. Returns {student: {grade_id: (score, max)}};
    the graded notebooks stay in ``course/autograded/<student>/<chapter>/``. A written
    answer's score is "manual": it waits for a person."""
    # The student version, generated the way `make exercises` does it.
    _release_once(course, chapter)
    db = f"sqlite:///{course / 'gradebook.db'}"
    common = [f"--CourseDirectory.db_url={db}", "--log-level=WARN"]

    def nbgrader(*args):
        return nbgrader_command([*args, *common], cwd=course, timeout_s=900)

    for student, notebook in submissions.items():
        folder = course / "submitted" / student / chapter
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{chapter}.ipynb")
        # A file of the student's own, for the deleting submission to find.
        (folder / "notes.txt").write_text("my notes\n")

    done = nbgrader("autograde", chapter, "--force", f"--Execute.timeout={TEST_TIMEOUT_S}")
    assert done.returncode == 0, f"autograde broke:\n{done.stderr[-4000:]}"

    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(db) as gradebook:
        for student in submissions:
            notebook = gradebook.find_submission_notebook(chapter, chapter, student)
            # A written answer waits for a person: nbgrader records 0 and flags it.
            scores[student] = {grade.name: ("manual" if grade.needs_manual_grade
                                            else grade.score, grade.max_score)
                               for grade in notebook.grades}
    return scores


def graded_errors(course: Path, chapter: str, student: str) -> dict[str, str]:
    """{grade_id: "ErrorName: message"} of the cells that raised in a submission that
    :func:`autograde` graded in ``course``."""
    notebook = nbformat.read(course / "autograded" / student / chapter / f"{chapter}.ipynb",
                             as_version=4)
    errors = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                errors[nbgrader_meta(cell).get("grade_id")] = \
                    f"{output['ename']}: {output['evalue']}"
    return errors


class Graded(tuple):
    """grade_cheater's (scores, errors) of "cheater", with ``hidden``: {student:
    (scores, errors)} of the students graded in the same run whose answers call
    the course's code by a hidden name (test_dynamic_import_cheats)."""

    hidden: dict


def grade_cheater(chapter: str, replace: dict, course: Path) -> Graded:
    """Autograde one submission, "cheater", whose solution cells ``replace`` gives
    ({grade_id: source}): its scores and the errors its graded cells raised. The
    same nbgrader run grades the chapter's hidden-call cheats (each student costs
    about a second; a run of its own, nbgrader's start, about ten)."""
    from test_dynamic_import_cheats import hidden_submissions

    others = hidden_submissions(chapter)
    scores = autograde(chapter, {"cheater": filled_in(chapter, replace=replace), **others},
                       course)
    graded = Graded((scores["cheater"], graded_errors(course, chapter, "cheater")))
    graded.hidden = {student: (scores[student], graded_errors(course, chapter, student))
                     for student in others}
    return graded


def cheat_tests(chapter: str, cheats, reasons: dict, folder: str):
    """What a cheats file's tests share: its module fixture `graded`, grade_cheater's
    (scores, errors) for the submission that ``cheats()`` gives ({grade_id:
    cheating code}, built when a test first asks, since it may read the
    notebooks), autograded once in a temporary folder named ``folder``; and
    test_each_cheat_loses_its_exercise, for each test cell of ``reasons`` (its
    expected reason, assert_cheat_lost's). The file assigns both to those names."""

    @pytest.fixture(scope="module")
    def graded(tmp_path_factory):
        return grade_cheater(chapter, cheats(), tmp_path_factory.mktemp(folder))

    @pytest.mark.parametrize("test_cell", sorted(reasons))
    def test_each_cheat_loses_its_exercise(graded, test_cell):
        assert_cheat_lost(*graded, test_cell, reasons[test_cell])

    return graded, test_each_cheat_loses_its_exercise


def assert_cheat_lost(scores: dict, errors: dict, test_cell: str, reason: str | None) -> None:
    """A cheated exercise's test cell earned nothing, failing with an error that
    says ``reason`` (any error when reason is None)."""
    score, max_score = scores[test_cell]
    assert max_score > 0 and score == 0, f"{test_cell} earned {score} of {max_score}"
    assert test_cell in errors, f"{test_cell} lost its points without an error"
    if reason is not None:
        assert reason in errors[test_cell], errors[test_cell][:800]


@pytest.fixture(scope="module", params=CHAPTERS)
def autograded(request, tmp_path_factory):
    """Autograde two submissions of one chapter with nbgrader, once, so that every
    solution runs once and every exercise is seen both solved and not:

    - "first": the exercises that "misbehaving" breaks solved (and those they
      call) and the written answers written, every other exercise left as the
      student version has it;
    - "misbehaving": three exercises misbehave in turn (raise, hang, delete files),
      the others are solved, the written answers left untouched.
    """
    chapter = request.param
    course = tmp_path_factory.mktemp(f"course-{chapter}")
    code = set(exercises_of(source_notebook(chapter)))
    written = set(written_answers(source_notebook(chapter)))
    misbehaving, broken = misbehaving_in_turn(chapter, only=code)
    # The broken exercises, and those they call, are solved in "first".
    calls = built_on(chapter)
    first = set(broken).union(*(calls[grade_id] for grade_id in broken))
    submissions = {"first": filled_in(chapter, only=first | written),
                   "misbehaving": misbehaving}
    scores = autograde(chapter, submissions, course)
    owner = {test: solution for solution, group in exercises_of(source_notebook(chapter)).items()
             for test in group["tests"]}
    return {"chapter": chapter, "course": course, "scores": scores, "broken": broken,
            "first": first, "owner": owner}


def _autograded_scores(autograded, student) -> dict:
    """A submission's scores of the cells nbgrader grades by itself (written answers
    wait for a person)."""
    own = autograded_ids(autograded["chapter"])
    return {name: s for name, s in autograded["scores"][student].items() if name in own}


def _solved_in(autograded, test: str) -> str:
    """The submission in which the exercise of graded cell ``test`` is solved."""
    return "first" if autograded["owner"].get(test) in autograded["broken"] else "misbehaving"


def test_written_answers_wait_for_a_person(autograded):
    """An answer waits for a person; one left as the student version has it earns 0."""
    written = written_answers(source_notebook(autograded["chapter"]))
    for student, score in (("first", "manual"), ("misbehaving", 0)):
        scores = autograded["scores"][student]
        assert {name: scores[name] for name in written} == \
            {name: (score, points) for name, points in written.items()}, student


def test_a_correct_submission_earns_full_points(autograded):
    # Each graded cell, in the submission where its exercise is solved.
    scores = {name: autograded["scores"][_solved_in(autograded, name)][name]
              for name in autograded_ids(autograded["chapter"])}
    missing = {name: s for name, s in scores.items() if s[0] != s[1]}
    assert scores and not missing, f"points lost by the model solution: {missing}"


def test_an_untouched_exercise_runs_and_earns_nothing(autograded):
    # The exercises "first" leaves untouched (the broken ones earn 0 in the test below).
    scores = {name: s for name, s in _autograded_scores(autograded, "first").items()
              if autograded["owner"].get(name) not in autograded["first"]}
    assert scores, "no graded cells were recorded"
    earned = {name: s for name, s in scores.items() if s[0] != 0}
    assert not earned, f"points earned by an exercise left untouched: {earned}"
    graded = (autograded["course"] / "autograded" / "first" / autograded["chapter"]
              / f"{autograded['chapter']}.ipynb")
    assert graded.is_file(), "the grader did not write the autograded notebook"


def built_on(chapter: str) -> dict[str, set[str]]:
    """{solution's grade_id: the other solutions it calls, directly or not}.

    An exercise that asks the student to combine earlier answers (the layouts
    that fit call the student's own validity check) cannot earn its points when
    one of those is broken; every other exercise must."""
    notebook = source_notebook(chapter)
    code = {nbgrader_meta(c)["grade_id"]: c.source for c in notebook.cells
            if nbgrader_meta(c).get("solution") and c.cell_type == "code"}
    defines, uses = {}, {}
    for grade_id, source in code.items():
        tree = ast.parse(source)
        defines[grade_id] = {node.name for node in tree.body
                             if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        uses[grade_id] = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    direct = {grade_id: {other for other in code if other != grade_id
                         and defines[other] & uses[grade_id]} for grade_id in code}
    closure = {}
    for grade_id in code:
        seen, todo = set(), list(direct[grade_id])
        while todo:
            other = todo.pop()
            if other not in seen:
                seen.add(other)
                todo.extend(direct[other])
        closure[grade_id] = seen
    return closure


def test_a_misbehaving_exercise_loses_only_its_own_points(autograded):
    scores = _autograded_scores(autograded, "misbehaving")
    assert autograded["broken"], "no exercise misbehaves"
    for name, (score, max_score) in scores.items():
        how = autograded["broken"].get(autograded["owner"].get(name))
        if how:
            assert score == 0, f"{name} belongs to an exercise that {how}: it earned {score}"
        else:
            assert score == max_score, (f"{name} lost points it had earned, beside exercises "
                                        f"that {', '.join(autograded['broken'].values())}")


def writes_kernels(chapter: str) -> bool:
    """Whether the chapter's exercises are CUDA kernels (run on the simulator here)."""
    return any("@cuda.jit" in cell.source for cell in source_notebook(chapter).cells
               if nbgrader_meta(cell).get("solution"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_self_check_prints_points_per_exercise(chapter, tmp_path):
    untouched = tmp_path / "untouched.ipynb"
    nbformat.write(release_notebook(chapter), untouched)
    solved = tmp_path / "solved.ipynb"
    nbformat.write(filled_in(chapter), solved)
    visible = {gid for g in exercises_of(source_notebook(chapter)).values() for gid in g["tests"]}

    zero = score_notebook(untouched)
    assert {s.grade_id for s in zero} == visible
    assert all(s.points == 0 and s.error for s in zero)
    if writes_kernels(chapter):
        # Running every kernel of the solution on the simulator once more costs
        # half a minute a chapter; the autograde above already ran these cells
        # on the same solution for full points, and the report is checked on
        # the other chapters.
        return
    full = score_notebook(solved)
    assert all(s.points == s.max_points and s.error is None for s in full)

    report = format_scores(solved, full)
    assert all(grade_id in report for grade_id in visible)
    total = sum(s.max_points for s in full)
    assert f"{total:g} / {total:g}" in report.splitlines()[-1]


def test_self_check_rejects_what_is_not_a_notebook(tmp_path):
    with pytest.raises(ValueError, match="notebook must be an existing .ipynb"):
        score_notebook(tmp_path / "missing.ipynb")
