"""Every number in the prose has a provenance.

The chapters (the markdown cells of ``notebooks/*.ipynb``) and the book's own
pages (``book/*.md``) may state a number in one of three ways:

1. **computed at build time**: a ``{glue:text}`` (or ``{glue}``) role, a
   ``{glue:md}`` directive, or a table or figure drawn by a code cell. These
   never reach the prose as digits, so there is nothing to check. A plain
   count or size that the page's own code sets as a literal (the 1024
   workers of a demonstration, a tile of 32) also counts as shown: the reader
   sees it in the code cell. This holds only for numbers without a unit of
   data, time, rate or share after them (bytes, bits/s, FLOP, seconds, %):
   those are facts about machines, and need one of the next two;
2. **cited**: the sentence that holds the number also holds a ``{cite}``,
   ``{cite:p}`` or ``{cite:t}`` role naming its source;
3. **listed**: ``book/provenance.yml`` has an entry with the number, the file
   it appears in, a piece of the sentence (``context``) that pins it down,
   and its source or the reason it needs none (a definition, a choice made in
   the chapter's own code, arithmetic shown on the page). An entry whose
   file is ``"*"`` holds on every page: that is the place for facts of the
   trade such as the 32 threads of a warp. The list is meant to stay small.
   A ``source`` is either the key of a bibliography entry (one word) or a
   reason in words; a key must exist.

Anything else fails the test, which names the file, the cell and the sentence.

What counts as "a number" (the rules, in the order they are applied):

- Text that is not prose is removed first: fenced code blocks and directives
  (````` ``` ````` and ``~~~``), display math (``$$ ... $$`` and
  ``\\begin ... \\end``), inline math (``$ ... $``), inline code, HTML tags
  and comments, link targets (the text of a link stays), MyST roles other than
  citations (``{glue:text}`...```, ``{numref}`...```, ``{doc}`...```), and
  the ``(label)=`` targets. Math is the place for variables and formulas; a
  formula states no fact about the world.
- A number is a run of digits, with optional thousands commas and a decimal
  part (``3.35``, ``1,979``, ``10^18`` counts as ``10``), that is not part of
  a name: digits glued to letters or underscores on either side (``H100``,
  ``fp32``, ``sm_90``, ``1F1B``, ``4b``) and digits after a letter and a
  hyphen (``GPT-3``, ``ZeRO-1``, ``top-1``) are names, not numbers. So is a
  dotted version or instance name (``trn2.48xlarge``, ``3.11.7``).
- Numbering is not a fact: a number right after *week, chapter, part, level,
  exercise, section, figure, table, step, stage, question, puzzle or set* (and lists such
  as "weeks 8 and 9" or "levels 4-6"), and the marker of a numbered list
  (``1.`` at the start of a line) are skipped, as is a page's front matter.
- Years (four digits from 1900 to 2099) are skipped: a date is where a fact
  sits in time, not the fact. So are the widths of number formats
  (``16-bit``, ``32 bits``, ``128-bit`` loads): they name a format, like
  ``fp32``.
- A sentence ends at ``.``, ``!`` or ``?`` followed by a space and a capital,
  at a blank line, at each list item, table row and heading. Common
  abbreviations (*e.g.*, *i.e.*, *et al.*, *vs.*, *cf.*) do not end one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE_FILE = ROOT / "book" / "provenance.yml"

# -----------------------------------------------------------------------------
# Reading the prose


def markdown_cells(path: Path) -> list[tuple[str, str]]:
    """(where, text) for each stretch of prose in one page: a notebook's
    markdown cells ("cell 3") or a markdown page as a whole ("page")."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return [(f"cell {i}", "".join(c["source"])) for i, c in enumerate(cells)
                if c["cell_type"] == "markdown"]
    return [("page", path.read_text(encoding="utf-8"))]


def pages() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))


CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`[^`]*`")
CITE_MARK = "\u27e6cite\u27e7"  # stands in for a citation once the text is cleaned

_REMOVE = [
    re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.S | re.M),  # fences and directives
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.S),
    re.compile(r"(?<![\\$])\$(?!\$)(?:[^$\\\n]|\\.)+?\$"),  # inline math
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"\{[\w:-]+\}`[^`]*`"),  # MyST roles (citations are marked before this runs)
    re.compile(r"``[^`]+``|`[^`\n]+`"),  # inline code
    re.compile(r"<[^>\n]+>"),  # HTML tags
    re.compile(r"^\([\w-]+\)=[ \t]*$", re.M),  # (label)= targets
]
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def clean(text: str) -> str:
    """The prose of a markdown text: citations replaced by a marker, and code,
    math, roles, tags and link targets removed (see the module's docstring)."""
    text = re.sub(r"\A---\n.*?\n---[ \t]*\n", " ", text, flags=re.S)  # a page's front matter
    text = re.sub(r"^([ \t]*)\d+\.[ \t]", r"\1- ", text, flags=re.M)  # numbered list markers
    text = CITE_ROLE.sub(CITE_MARK, text)
    for pattern in _REMOVE:
        text = pattern.sub(" ", text)
    return _LINK.sub(r"\1", text)


_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|et al|vs|cf|approx|resp|Eq|Fig)\.", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])[)\"'*_]*\s+(?=[A-Z(\[*_\"'\u27e6])")


def sentences(prose: str) -> list[str]:
    """Split cleaned prose into sentences: at blank lines, list items, table
    rows, headings, and a full stop before a capital."""
    protected = _ABBREVIATIONS.sub(lambda m: m.group(0)[:-1] + "\u2024", prose)
    blocks = re.split(r"\n\s*\n|\n(?=\s*(?:[-*+]|\d+\.)\s)|\n(?=\s*[|#])", protected)
    out = []
    for block in blocks:
        if block.lstrip().startswith("|"):
            out.extend(row for row in block.split("\n") if row.strip())
            continue
        out.extend(_SENTENCE_END.split(" ".join(block.split())))
    return [s.replace("\u2024", ".").strip() for s in out if s.strip()]


_ORDINAL_WORDS = (r"weeks?|chapters?|parts?|levels?|exercises?|sections?|figures?|tables?"
                  r"|steps?|stages?|questions?|puzzles?|sets?")
_NUMBERING = re.compile(
    rf"\b(?:{_ORDINAL_WORDS})\s+\d+[a-z]?(?:(?:\s*[-\u2013,]\s*|\s+(?:and|or|to)\s+)\d+[a-z]?)*",
    re.I)
_LIST_MARKER = re.compile(r"^\s*\d+\.\s")
_NUMBER = re.compile(
    r"(?<![\w.\-])(?<![A-Za-z]-)"  # not the tail of a name (H100, GPT-3, trn2.48xlarge)
    r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?"
    r"(?![\w]|\.\d)")  # not the head of a name (1F1B, 4b) or of a version (3.11.7)
_YEAR = re.compile(r"^(19|20)\d\d$")
_BIT_WIDTH = re.compile(r"(?:-|\s)bits?\b")
_UNIT = re.compile(r"\s*-?\s*(?:%|[kKMGTPE]i?B\b|[kMGT]?bit/s|[kMGT]?b/s|[kMGTP]?FLOPS?\b|[kMGTP]?FLOP/s"
                   r"|bytes?\b|[mµun]?s\b|seconds?\b|minutes?\b|hours?\b|days?\b|[kMG]Hz\b|GT/s|W\b"
                   r"|per ?cent\b|percent\b)")


def numbers_in(sentence: str) -> list[tuple[str, bool]]:
    """The numbers of one sentence that need a provenance (see the docstring),
    each with whether a unit follows it."""
    text = _LIST_MARKER.sub(" ", sentence)
    text = _NUMBERING.sub(" ", text)
    found = []
    for match in _NUMBER.finditer(text):
        number = match.group(0)
        if _YEAR.match(number) or _BIT_WIDTH.match(text, match.end()):
            continue
        found.append((number, bool(_UNIT.match(text, match.end()))))
    return found


_CODE_NUMBER = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?(?![\w.])")


def code_literals(path: Path) -> set[str]:
    """The numeric literals of a notebook's code cells, written without
    separators ("4_096" and "4096" both give "4096")."""
    if path.suffix != ".ipynb":
        return set()
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return {m.group(0).replace("_", "") for m in _CODE_NUMBER.finditer(code)}


# -----------------------------------------------------------------------------
# The provenance file


@dataclass(frozen=True)
class Entry:
    number: str
    where: str  # a path relative to the repository root, or "*" for every page
    context: str  # a piece of the sentence the number sits in
    source: str  # a bib key or a reason


def load_entries(path: Path = PROVENANCE_FILE) -> list[Entry]:
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    entries = []
    for i, item in enumerate(raw):
        missing = {"number", "where", "context", "source"} - set(item)
        if missing:
            raise ValueError(f"{path.name} entry {i} lacks {', '.join(sorted(missing))}")
        entries.append(Entry(str(item["number"]), item["where"], item["context"], item["source"]))
    return entries


@dataclass(frozen=True)
class Finding:
    where: str
    cell: str
    number: str
    sentence: str

    def __str__(self):
        return f"{self.where}, {self.cell}: {self.number!r} in: {self.sentence}"


def unsourced(texts, entries, used=None, literals=None) -> list[Finding]:
    """Numbers with no provenance in `texts`, an iterable of (file, cell,
    markdown). `literals` maps a file to the numbers its code sets (see
    `code_literals`); `used`, if given, collects the entries that matched."""
    findings = []
    literals = literals or {}
    for where, cell, markdown in texts:
        for sentence in sentences(clean(markdown)):
            if CITE_MARK in sentence:
                continue
            for number, has_unit in numbers_in(sentence):
                if not has_unit and number.replace(",", "") in literals.get(where, ()):
                    continue
                entry = next((e for e in entries if e.number == number and e.where in (where, "*")
                              and e.context in sentence), None)
                if entry is None:
                    findings.append(Finding(where, cell, number, sentence.replace(CITE_MARK, "")))
                elif used is not None:
                    used.add(entry)
    return findings


def book_texts():
    for path in pages():
        where = path.relative_to(ROOT).as_posix()
        for cell, text in markdown_cells(path):
            yield where, cell, text


def book_literals():
    return {path.relative_to(ROOT).as_posix(): code_literals(path) for path in pages()}


# -----------------------------------------------------------------------------
# The tests


def test_every_number_in_the_book_has_a_provenance():
    entries = load_entries()
    used: set[Entry] = set()
    findings = unsourced(book_texts(), entries, used, book_literals())
    assert not findings, ("numbers with no glue, no citation in their sentence and no entry in "
                          "book/provenance.yml:\n" + "\n".join(map(str, findings)))
    stale = [e for e in entries if e not in used]
    assert not stale, ("book/provenance.yml entries that match no sentence any more (remove "
                       "them or fix their context):\n" + "\n".join(map(str, stale)))


def test_an_unsourced_number_fails_and_is_located():
    page = ("# Week 3: a synthetic page\n\n"
            "The H100 SXM has 132 multiprocessors.\n\n"
            "Its fp32 peak is 67 TFLOP/s {cite}`nvidia_h100_datasheet`. It has "
            "{glue:text}`sms` of them, and $p - 1$ idle stages. GPT-3 and ZeRO-1 are names.\n")
    findings = unsourced([("book/synthetic.md", "cell 0", page)], [])
    assert [(f.where, f.cell, f.number) for f in findings] == [("book/synthetic.md", "cell 0", "132")]
    # The real book's rules and allow-list do not excuse it either.
    findings = unsourced([("book/synthetic.md", "cell 0", page)], load_entries(), None, book_literals())
    assert [f.number for f in findings] == ["132"]
    assert "132 multiprocessors" in findings[0].sentence
    assert "book/synthetic.md, cell 0" in str(findings[0])


def test_an_entry_covers_only_its_own_sentence():
    page = "A warp has 32 threads.\n\nA block had 32 warps."
    entry = Entry("32", "book/synthetic.md", "A warp has", "definition")
    findings = unsourced([("book/synthetic.md", "page", page)], [entry])
    assert [f.sentence for f in findings] == ["A block had 32 warps."]


@pytest.mark.parametrize("text, expected", [
    ("At 3.35 TB/s and 1,979 TFLOPS, 8 GPUs.", ["3.35", "1,979", "8"]),
    ("GPT-3, H100, sm_90, 1F1B, 4b, trn2.48xlarge, numpy 2.4.6 and fp32.", []),
    ("In weeks 8 and 9, level 4-6 and week 1, in 2022.", []),
    ("Set 11 and sets 2 and 4 held 24 shapes.", ["24"]),
    ("1. First a step of 10 ms.", ["10"]),
    ("---\nkernelspec: python3\n---\nText.", []),
    ("A 64-bit adder adds 32 bits; 16-bit weights.", []),
    ("Math $2(N-1)\\alpha$ and `code 42` and {glue:text}`x` hold none.", []),
    ("A [link to 5 things](https://example.org/7) is prose.", ["5"]),
])
def test_what_counts_as_a_number(text, expected):
    found = [n for s in sentences(clean(text)) for n, _ in numbers_in(s)]
    assert found == expected


def test_a_code_literal_excuses_a_count_but_not_a_quantity(tmp_path):
    notebook = tmp_path / "demo.ipynb"
    notebook.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["workers, step_s = 1_024, 80\n"]},
        {"cell_type": "markdown", "source": ["With 1024 workers and 80 GB each."]}]}))
    literals = {"demo": code_literals(notebook)}
    texts = [("demo", "cell 1", "With 1024 workers and 80 GB each.")]
    assert [f.number for f in unsourced(texts, [], None, literals)] == ["80"]


def test_sentences_split_where_a_reader_would():
    text = "One is 1.5 GB, e.g. here. Two ends et al. {cite}`x` here.\n\n- a list item\n| a | 3 |"
    assert sentences(clean(text)) == ["One is 1.5 GB, e.g. here.",
                                      f"Two ends et al. {CITE_MARK} here.", "- a list item",
                                      "| a | 3 |"]


def test_an_entry_for_every_page_covers_every_page():
    entry = Entry("32", "*", "threads of a warp", "nvidia_cuda_programming_guide")
    texts = [("book/a.md", "page", "The 32 threads of a warp."),
             ("notebooks/b.ipynb", "cell 1", "The 32 threads of a warp, and 32 lanes."),
             ("notebooks/b.ipynb", "cell 2", "A block of 32 warps.")]
    assert [(f.where, f.cell) for f in unsourced(texts, [entry])] == [("notebooks/b.ipynb", "cell 2")]


# -----------------------------------------------------------------------------
# The bibliography: every source a reader can follow

BIB_FILES = [ROOT / "book" / "references.bib", *sorted((ROOT / "book" / "bib").glob("*.bib"))]
_IDENTIFIER_FIELDS = ("doi", "eprint", "isbn", "url")
# An identifier written into a free-text field: a URL, an arXiv id or a DOI.
_IDENTIFIER_IN_TEXT = re.compile(r"\\url\{https?://|\barXiv:\d{4}\.\d{4,5}|\bdoi\.org/|\bdoi:10\.")


def bibliography():
    from pybtex.database import parse_file

    entries = {}
    for path in BIB_FILES:
        for key, entry in parse_file(str(path)).entries.items():
            assert key not in entries, f"{key} is defined twice (again in {path.name})"
            entries[key] = entry
    return entries


def test_the_bibliography_config_lists_every_bib_file():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert sorted(config["bibtex_bibfiles"]) == sorted(p.relative_to(ROOT).as_posix() for p in BIB_FILES)


def test_every_bibliography_entry_can_be_followed():
    problems = []
    for key, entry in bibliography().items():
        fields = {name.lower(): value for name, value in entry.fields.items()}
        if not (any(name in fields for name in _IDENTIFIER_FIELDS)
                or any(_IDENTIFIER_IN_TEXT.search(fields.get(name, ""))
                       for name in ("howpublished", "note", "journal"))):
            problems.append(f"{key}: no DOI, arXiv id, ISBN or URL")
        if not (entry.persons.get("author") or entry.persons.get("editor")
                or "organization" in fields or "institution" in fields):
            problems.append(f"{key}: no author, editor or organization")
        if "title" not in fields:
            problems.append(f"{key}: no title")
        if re.search(r"course (notes|source)|source material|unpublished", str(fields), re.I):
            problems.append(f"{key}: stands for material a reader cannot find")
    assert not problems, "\n".join(problems)


def test_every_citation_and_every_sourced_entry_names_a_bibliography_entry():
    keys = set(bibliography())
    cited = set()
    for path in pages():
        for _, text in markdown_cells(path):
            for role in CITE_ROLE.findall(text):
                cited.update(k.strip() for k in role.split("`")[1].split(","))
    assert not cited - keys, f"cited but not in the bibliography: {sorted(cited - keys)}"
    for entry in load_entries():
        if " " not in entry.source.strip():
            assert entry.source in keys, f"provenance entry {entry}: {entry.source!r} is no bib key"


def test_every_chapter_records_what_was_checked_against_what():
    """Each chapter ends its prose with a "Sources checked" section: a list of
    what was compared with which source, every item citing its sources."""
    problems = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        sections = [text for _, text in markdown_cells(path) if text.startswith("## Sources checked")]
        if len(sections) != 1:
            problems.append(f"{path.name}: {len(sections)} 'Sources checked' sections, expected one")
            continue
        items = re.split(r"\n(?=- )", sections[0].split("\n\n", 1)[1])
        bare = [item for item in items if item.startswith("- ") and not CITE_ROLE.search(item)]
        problems += [f"{path.name}: an item cites nothing: {item[:60]!r}" for item in bare]
        if not any(item.startswith("- ") for item in items):
            problems.append(f"{path.name}: the 'Sources checked' section lists nothing")
    assert not problems, "\n".join(problems)


# -----------------------------------------------------------------------------
# Tables and case studies reproduced from a paper cite that paper, in their cell

REPRODUCED_FILE = ROOT / "book" / "reproduced.yml"
WRONG_PAPER = "rosgiralt2022quantitative"  # where the RNP case study's credit once drifted


@dataclass(frozen=True)
class Reproduction:
    where: str  # the page, relative to the repository root
    cell: str  # the id of the cell that shows or introduces the reproduction
    what: str
    source: str  # the bib key of the paper it comes from


def load_reproductions(path: Path = REPRODUCED_FILE) -> list[Reproduction]:
    import yaml

    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    return [Reproduction(item["where"], str(item["cell"]), item["what"], item["source"]) for item in raw]


def credits(cell: dict, key: str) -> bool:
    """Whether a notebook cell credits the paper `key`: a citation role naming
    it in a markdown cell, or the key in a comment of a code cell."""
    text = "".join(cell["source"])
    if cell["cell_type"] == "markdown":
        return any(key in (k.strip() for k in role.split("`")[1].split(","))
                   for role in CITE_ROLE.findall(text))
    return any(key in line.split("#", 1)[1] for line in text.splitlines() if "#" in line)


def uncredited(reproductions, root: Path = ROOT) -> list[str]:
    """The reproductions whose cell is missing or does not credit its paper."""
    problems = []
    for r in reproductions:
        cells = json.loads((root / r.where).read_text(encoding="utf-8"))["cells"]
        found = [c for c in cells if c.get("id") == r.cell]
        if len(found) != 1:
            problems.append(f"{r.where}: no cell with id {r.cell!r} ({r.what})")
        elif not credits(found[0], r.source):
            problems.append(f"{r.where}, cell {r.cell}: {r.what} does not cite {r.source}")
    return problems


def test_every_reproduced_table_and_case_study_cites_its_paper():
    reproductions = load_reproductions()
    assert any(r.source == "zanotelli_bottleneck_design" for r in reproductions)
    assert not uncredited(reproductions), "\n".join(uncredited(reproductions))


def test_the_check_fails_when_the_case_study_loses_its_citation(tmp_path):
    """On a copy of the network chapter with the case study's credit moved to
    the neighbouring theory paper, every listed cell of the case study fails,
    by name; the same check passes on an untouched copy."""
    case = [r for r in load_reproductions() if r.source == "zanotelli_bottleneck_design"]
    page = ROOT / case[0].where
    copy = tmp_path / case[0].where
    copy.parent.mkdir(parents=True)
    copy.write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    assert uncredited(case, root=tmp_path) == []

    notebook = json.loads(page.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        cell["source"] = [line.replace("zanotelli_bottleneck_design", WRONG_PAPER)
                          for line in cell["source"]]
    copy.write_text(json.dumps(notebook), encoding="utf-8")
    problems = uncredited(case, root=tmp_path)
    assert [p.split(":")[0] for p in problems] == [f"{r.where}, cell {r.cell}" for r in case]
    assert all(p.endswith("does not cite zanotelli_bottleneck_design") for p in problems)


def test_a_citation_names_its_key_exactly():
    cell = {"cell_type": "markdown", "source": ["As in {cite}`zanotelli_bottleneck_design_v2,other`."]}
    assert not credits(cell, "zanotelli_bottleneck_design")
    assert credits(cell, "other")
    code = {"cell_type": "code", "source": ["x = zanotelli_bottleneck_design  # no credit here\n"]}
    assert not credits(code, "zanotelli_bottleneck_design")
