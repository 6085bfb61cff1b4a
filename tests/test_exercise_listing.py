"""gpucourse.grading.exercise_listing: what the book says a student writes, and for how many points."""

from __future__ import annotations

import json

import pytest

from gpucourse.grading import exercise_listing
from test_grading import CHAPTERS, ROOT, exercises_of, source_notebook, written_answers


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_the_listing_gives_the_points_the_grader_gives(chapter):
    listing = exercise_listing(ROOT / "exercises" / chapter / f"{chapter}.ipynb")
    notebook = source_notebook(chapter)
    autograded = sum(points for group in exercises_of(notebook).values()
                     for points in group["tests"].values())
    assert sum(section["points"] for section in listing) == autograded
    assert sum(section["by_hand"] for section in listing) == sum(written_answers(notebook).values())


def test_the_listing_of_chapter_4_names_each_function():
    chapter = "04_frameworks_and_communication"
    listing = exercise_listing(ROOT / "exercises" / chapter / f"{chapter}.ipynb")
    assert [s["functions"] for s in listing] == [
        ["ring_reduce_scatter"], ["ring_all_gather"], ["ring_all_reduce"], ["fit_alpha_beta"],
        ["ring_all_reduce_time_s"], ["tensor_parallel_ccr"], []]
    assert listing[-1]["title"] == "Written answers" and listing[-1]["by_hand"] == 8


def test_a_heading_that_states_other_points_is_refused(tmp_path):
    def cell(kind, source, **nbgrader):
        return {"cell_type": kind, "source": source, "metadata": {"nbgrader": nbgrader}}

    notebook = {"cells": [cell("markdown", "## Exercise 1: sums (3 points)"),
                          cell("code", "def add(a, b):\n    pass", solution=True),
                          cell("code", "assert add(1, 2) == 3", grade=True, points=2)]}
    path = tmp_path / "ex.ipynb"
    path.write_text(json.dumps(notebook))
    with pytest.raises(ValueError, match="'Exercise 1: sums' of ex.ipynb states other points"):
        exercise_listing(path)
    with pytest.raises(ValueError, match="notebook must be an existing .ipynb"):
        exercise_listing(tmp_path / "missing.ipynb")
