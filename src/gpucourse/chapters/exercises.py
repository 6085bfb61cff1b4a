"""What a chapter's exercises ask for, and the table of them the chapter shows.

Each chapter ends with a table of its exercises: what the student writes and
the points it earns. The table is read from the chapter's nbgrader notebook
in ``solutions/``, so that it cannot drift from what is graded: a heading
that states other points than its graded cells give is an error. It is here,
with the chapters, and not with the grader, because it grades nothing: it
only describes the notebooks to a reader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_SECTION = re.compile(r"^## (.+?)\s*\((\d+(?:\.\d+)?) points?(?:, graded by hand)?\)\s*$", re.M)


def exercise_listing(notebook) -> list[dict]:
    """What a student writes in an nbgrader notebook, section by section, with the points.

    Each exercise is a heading ``## Title (P points)``; what follows up to the
    next such heading belongs to it: the functions (and classes) its solution cells define,
    the points of its graded test cells (scored by the autograder) and of its
    graded markdown cells (written answers, scored by a person). Returns one
    dict per exercise: ``title``, ``functions`` (names), ``points``,
    ``autograded`` and ``written`` (the written answers' count). A heading
    that states other points than its cells give is an error, so the book's
    tables cannot drift from the notebooks.
    """
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be an existing .ipynb file, got {notebook}")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found: list[dict] = []
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        meta = cell.get("metadata", {}).get("nbgrader", {})
        heading = _SECTION.search(source) if cell["cell_type"] == "markdown" else None
        if heading and not meta.get("grade"):
            found.append({"title": heading.group(1), "stated": float(heading.group(2)),
                          "functions": [], "points": 0.0, "autograded": 0.0, "written": 0})
        if not found or not meta:
            continue
        if meta.get("solution") and cell["cell_type"] == "code":
            found[-1]["functions"] += [name for name in re.findall(r"^(?:def|class)\s+(\w+)",
                                                                   source, re.M)
                                       if not name.startswith("_")]  # given helpers
        if meta.get("grade"):
            points = float(meta.get("points", 0))
            found[-1]["points"] += points
            if cell["cell_type"] == "code":
                found[-1]["autograded"] += points
            else:
                found[-1]["written"] += 1
    for exercise in found:
        if exercise.pop("stated") != exercise["points"]:
            raise ValueError(f"the heading of {exercise['title']!r} states other points than "
                             f"its graded cells give ({exercise['points']:g})")
    return found


def format_listing(listing) -> str:
    """A Markdown table of exercise_listing's rows, with the totals."""
    rows = ["| Exercise | You write | Points |", "|---|---|---|"]
    for exercise in listing:
        if exercise["written"]:
            what = f"{exercise['written']} written answers, graded by hand"
        else:
            what = ", ".join(f"`{name}`" for name in exercise["functions"])
        rows.append(f"| {exercise['title']} | {what} | {exercise['points']:g} |")
    autograded = sum(e["autograded"] for e in listing)
    by_hand = sum(e["points"] - e["autograded"] for e in listing)
    rows.append(f"| **Total** | {autograded:g} points graded automatically, {by_hand:g} by hand "
                f"| {autograded + by_hand:g} |")
    return "\n".join(rows)
