"""The book's tables of what a student writes, read from the exercise notebooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucourse.chapters.exercises import exercise_listing, format_listing

ROOT = Path(__file__).resolve().parents[1]


def _notebook(tmp_path, cells) -> Path:
    path = tmp_path / "exercise.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def _cell(kind, source, **nbgrader):
    return {"cell_type": kind, "source": source, "metadata": {"nbgrader": nbgrader}}


def test_listing_reads_sections_functions_and_points(tmp_path):
    path = _notebook(tmp_path, [
        _cell("markdown", "# Title\n\nIntro."),
        _cell("markdown", "## Exercise 1: one (3 points)\n\nText."),
        _cell("code", "def helper():\n    pass\n\n\ndef one(x):\n    raise NotImplementedError()",
              solution=True, grade_id="one"),
        _cell("code", "check()", grade=True, points=2, grade_id="test_one_a"),
        _cell("code", "check()", grade=True, points=1, grade_id="test_one_b"),
        _cell("markdown", "## Written answers (4 points, graded by hand)\n\n**Question 1.**"),
        _cell("markdown", "YOUR ANSWER HERE", grade=True, solution=True, points=4,
              grade_id="written"),
    ])
    listing = exercise_listing(path)
    assert listing == [
        {"title": "Exercise 1: one", "functions": ["helper", "one"], "points": 3.0,
         "autograded": 3.0, "written": 0},
        {"title": "Written answers", "functions": [], "points": 4.0, "autograded": 0.0,
         "written": 1}]
    table = format_listing(listing)
    assert "| Exercise 1: one | `helper`, `one` | 3 |" in table
    assert "| Written answers | 1 written answers, graded by hand | 4 |" in table
    assert table.splitlines()[-1] == ("| **Total** | 3 points graded automatically, 4 by hand "
                                      "| 7 |")


def test_a_heading_that_states_other_points_is_an_error(tmp_path):
    path = _notebook(tmp_path, [
        _cell("markdown", "## Exercise 1: one (5 points)"),
        _cell("code", "def one():\n    pass", solution=True, grade_id="one"),
        _cell("code", "check()", grade=True, points=2, grade_id="test_one")])
    with pytest.raises(ValueError, match="states other points"):
        exercise_listing(path)


def test_listing_refuses_what_is_not_a_notebook(tmp_path):
    with pytest.raises(ValueError, match="notebook must be an existing .ipynb"):
        exercise_listing(tmp_path / "missing.ipynb")


@pytest.mark.parametrize("chapter", ["01_hpc_foundations", "02_tensor_and_pipeline_parallelism",
                                     "03_experts_and_zero", "05_memory", "06_training_playbook",
                                     "07_network", "07_infrastructure_and_cost"])
def test_the_early_chapters_list_their_points(chapter):
    listing = exercise_listing(ROOT / "exercises" / chapter / f"{chapter}.ipynb")
    assert sum(e["autograded"] for e in listing) >= 24
    assert sum(e["written"] for e in listing) >= 2
    assert all(e["functions"] for e in listing if not e["written"])


@pytest.mark.parametrize("chapter", sorted(p.name for p in (ROOT / "solutions").iterdir()
                                           if any(p.glob("*.ipynb"))))
def test_the_listing_gives_the_points_the_grader_gives(chapter):
    """Every chapter's listing sums to the points of its graded cells (read here
    on their own: code cells autograded, markdown cells by hand)."""
    listing = exercise_listing(ROOT / "exercises" / chapter / f"{chapter}.ipynb")
    source = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text())
    graded = [(cell["cell_type"], cell["metadata"]["nbgrader"]["points"])
              for cell in source["cells"]
              if cell.get("metadata", {}).get("nbgrader", {}).get("grade")]
    assert sum(e["autograded"] for e in listing) == sum(p for kind, p in graded if kind == "code")
    assert sum(e["points"] - e["autograded"] for e in listing) == \
        sum(p for kind, p in graded if kind == "markdown")


def test_the_listing_of_chapter_4_names_each_function():
    chapter = "04_frameworks_and_communication"
    listing = exercise_listing(ROOT / "exercises" / chapter / f"{chapter}.ipynb")
    assert [e["functions"] for e in listing] == [
        ["ring_reduce_scatter"], ["ring_all_gather"], ["ring_all_reduce"], ["fit_alpha_beta"],
        ["ring_all_reduce_time_s"], ["tensor_parallel_ccr"], []]
    assert listing[-1]["title"] == "Written answers" and listing[-1]["written"] == 2
    assert sum(e["autograded"] for e in listing) == 27


def test_the_flash_attention_chapter_lists_its_kernels():
    listing = exercise_listing(ROOT / "exercises" / "09_flash_attention" /
                               "09_flash_attention.ipynb")
    functions = {name for exercise in listing for name in exercise["functions"]}
    assert {"flash_attention_kernel", "flash_attention_causal", "attention_traffic"} <= functions
    assert sum(e["written"] for e in listing) == 2 and sum(e["points"] for e in listing) == 35


def test_the_course_meets_its_totals():
    """Issue 14's bar for the course as a whole: at least 300 autograded points,
    and at least two answers in words (graded by hand) in every chapter."""
    chapters = sorted(p.name for p in (ROOT / "solutions").iterdir() if any(p.glob("*.ipynb")))
    listings = {c: exercise_listing(ROOT / "exercises" / c / f"{c}.ipynb") for c in chapters}
    assert sum(e["autograded"] for listing in listings.values() for e in listing) >= 300
    few = {c: sum(e["written"] for e in listing) for c, listing in listings.items()}
    assert all(n >= 2 for n in few.values()), f"chapters with fewer than two written answers: {few}"
