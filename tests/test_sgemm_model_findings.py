"""Chapter 8's account of `auto` as numbers (gpucourse.chapters.sgemm_model_findings).

The held-out table is checked against counts made here from the committed
runs' rows; the guard that stops the build when a rerun turns a finding
around is checked by turning one around; and every name the chapter's prose
glues from these sections is checked to come from exactly one of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpucourse.chapters import sgemm_held_out, sgemm_model_findings as findings

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "08_sgemm.ipynb"


def _chapter_glue_names() -> set[str]:
    cells = json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]
    prose = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return (set(re.findall(r"\{glue(?::\w+)?\}`([^`]+)`", prose))
            | set(re.findall(r"```\{glue:md\} (\w+)", prose)))


def _code_glue_names() -> set[str]:
    """Names the chapter's own code cells glue (literal or f-string prefixes)."""
    cells = json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return set(re.findall(r'glue\(f?"([^"{]+)', code))


def test_every_value_the_prose_reads_from_these_sections_is_glued_once():
    values = findings.chapter_values()
    names = _chapter_glue_names()
    own = {n for n in names if any(n.startswith(p) for p in _code_glue_names())}
    assert not set(values) & own, "a name is glued both by the chapter's code and the package"
    assert set(values) <= names, f"values no sentence reads: {sorted(set(values) - names)}"
    # What the prose reads and neither glues would fail the book's build (-W): name it here.
    unglued = names - set(values) - own - {"model_table", "heldout_table"}
    assert not {n for n in unglued if n.split("_")[0] in
                {"grid", "heldout", "kt", "tiles", "split", "zm", "pairs", "shifted", "peeled",
                 "explore", "host", "ringvar", "factor", "memset", "zeroing", "rows"}}, unglued
    assert all(isinstance(v, str) and v for v in values.values())


def test_the_held_out_table_counts_what_the_runs_hold():
    sets = sgemm_held_out.load_held_out_sets()
    table = findings.held_out_table(sets).splitlines()
    assert len(table) == 3 + len(sets)
    large_met = large_shapes = 0
    for line, (number, record) in zip(table[2:], sorted(sets.items())):
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows = [r for r in record["results"] if r["variant"] == "auto"]
        large = [r for r in rows if min(r["m"], r["n"]) >= 512]
        met = sum(r["vs_cublas"] >= 0.85 for r in large)
        assert cells[0] == str(number)
        assert cells[2] == f"{met} of {len(large)}", number
        misses = [r for r in large if r["vs_cublas"] < 0.85]
        for r in misses:  # every large miss is named, with its share
            assert f"{r['m']:,} x {r['n']:,} x {r['k']:,}" in cells[4], (number, r)
        if not any(min(r["m"], r["n"]) < 512 for r in rows):
            assert cells[3] == "none drawn"
        large_met, large_shapes = large_met + met, large_shapes + len(large)
    assert table[-1].startswith(f"| all | | **{large_met} of {large_shapes}** |")


def test_the_table_says_how_each_runs_rings_copied_b_as_their_records_do():
    # The record of a run says whether entry_point.RING_PAIRS was on, and
    # whether the wide and stepped copies were; the runs the history reads
    # were of sets 1-10 before pairs and of sets 11-12 with them.
    assert [sgemm_held_out.ran_with_pairs(sgemm_held_out.history_run(n))
            for n in range(1, 13)] == [False] * 10 + [True] * 2
    sets = sgemm_held_out.load_held_out_sets()
    rows = findings.held_out_table(sets).splitlines()[2:-1]
    cells = [row.strip(" |").split(" | ") for row in rows]
    assert [row[5] for row in cells] == [sets[n]["date"] for n in sorted(sets)]
    wanted = {n: "before copies in pairs" if not sgemm_held_out.ran_with_pairs(sets[n])
              else "in pairs; wide and stepped" if sets[n]["model"].get("ring_copy_wide")
              else "in pairs" for n in sets}
    assert [row[6] for row in cells] == [wanted[n] for n in sorted(sets)]
    # The sets run again on 2026-12-01 ran with every copy of that day.
    assert {n for n, text in wanted.items() if text == "in pairs; wide and stepped"} >= {
        4, 5, 6, 8, 9, 13}
    assert findings._copies_of({"model": {"ring_pairs": True, "ring_copy_wide": True}}) == \
        "in pairs"  # wide copies without the stepped ones are not that day's kernels
    assert sgemm_held_out.ran_with_pairs({"model": {"ring_pairs": True}})
    assert not sgemm_held_out.ran_with_pairs({"model": {}}) and not sgemm_held_out.ran_with_pairs({})


def test_the_sentence_on_runs_again_holds_before_and_after_every_set_reads_pairs():
    # Chapter 8 says which sets ran again, when, and which still ran before
    # copies in pairs; once none does, it says so instead of naming none.
    import copy

    sets = sgemm_held_out.load_held_out_sets()
    text = findings._runs_again_text(sets)
    old = [n for n in sets if not sgemm_held_out.ran_with_pairs(sets[n])]
    if old:
        assert "ran before rings copied an even ragged B in pairs" in text
        assert findings._numbers(old) in text
    every = copy.deepcopy(sets)
    for record in every.values():
        record["model"]["ring_pairs"] = True
    text = findings._runs_again_text(every)
    assert text.endswith("Every set's committed run reads an even ragged B in pairs.")
    assert "ran before rings" not in text
    # Runs again on two days are named by both.
    later = next(n for n in every if sgemm_held_out.history_run(n)
                 and every[n]["date"] != sgemm_held_out.history_run(n)["date"])
    every[later]["date"] = "2099-01-01"
    assert "ran again between " in findings._runs_again_text(every)
    assert " and 2099-01-01 with the kernels of their day" in findings._runs_again_text(every)


def test_the_table_of_no_sets_is_its_header():
    assert findings.held_out_table({}).count("\n") == 1


def test_a_finding_turned_around_stops_the_build_naming_the_sentence(monkeypatch):
    real = sgemm_held_out.shifted_rings()
    assert real is not None
    turned = {**real, "shifted": {**real["shifted"], "slower": real["shifted"]["shapes"] - 1}}
    monkeypatch.setattr(findings.held, "shifted_rings", lambda: turned)
    with pytest.raises(findings.ProseMismatch, match="shifted rings lost at every shape"):
        findings.ragged_values()


def test_a_name_glued_by_two_sections_is_refused(monkeypatch):
    monkeypatch.setattr(findings, "SECTIONS", (lambda: {"a": "1"}, lambda: {"a": "2"}))
    with pytest.raises(ValueError, match="glues names another section glues"):
        findings.chapter_values()


def test_each_section_is_empty_without_its_runs(monkeypatch):
    monkeypatch.setattr(findings.ladder, "load_grid_results", lambda: None)
    monkeypatch.setattr(findings.held, "load_held_out_sets", lambda: {})
    assert findings.grid_values() == {}
    assert findings.held_out_values() == {}
    assert findings.call_time_values() == {}
    assert findings.price_values() == {}


def test_the_misses_by_row_length_add_up_to_the_tables_misses():
    sets = sgemm_held_out.load_held_out_sets()
    values = findings.held_out_values()
    large = [r for rec in sets.values() for r in rec["results"]
             if r["variant"] == "auto" and min(r["m"], r["n"]) >= 512]
    assert int(values["rows_ragged_shapes"]) + int(values["rows_aligned_shapes"]) == len(large)
    missed = sum(r["vs_cublas"] < 0.85 for r in large)
    assert int(values["rows_ragged_missed"]) + int(values["rows_aligned_missed"]) == missed


def test_set_numbers_are_listed_as_the_prose_lists_them():
    assert findings._numbers([9, 4, 5]) == "4, 5 and 9"
    assert findings._numbers([3]) == "3" and findings._numbers([]) == "none"
