"""The package's layout keeps the promises of "How the code is organised".

Every module opens with a docstring (the book's map is read from them), no
module is over 800 lines, and no import cycle joins the package's modules.
The map itself is checked against the files, and the cycle finder against a
graph with a cycle in it, so that a green run means something.
"""

from __future__ import annotations

from gpucourse.chapters import layout

MAX_LINES = 800
# Modules over the limit because they are tables of data, with the reason.
DATA_TABLES: dict[str, str] = {}


def test_every_module_opens_with_a_docstring():
    missing = [m.name for m in layout.modules() if not m.docstring.strip()]
    assert not missing, f"modules without an opening docstring: {missing}"


def test_no_module_is_over_800_lines():
    long = {m.name: m.lines for m in layout.modules()
            if m.lines > MAX_LINES and m.name not in DATA_TABLES}
    assert not long, f"modules over {MAX_LINES} lines (split them by topic): {long}"


def test_no_import_cycles():
    assert layout.import_cycles() == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert layout.import_cycles(graph) == [["a", "b", "c", "a"]]
    assert layout.import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_relative_and_absolute_imports(tmp_path):
    package = tmp_path / "gpucourse"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""Top."""\n')
    (package / "sub" / "__init__.py").write_text('"""Sub."""\nfrom .one import f\n')
    (package / "sub" / "one.py").write_text('"""One."""\nfrom gpucourse.sub.two import g\n')
    (package / "sub" / "two.py").write_text(
        '"""Two."""\nfrom gpucourse.sub import f\n\ndef g():\n    from gpucourse import sub\n')
    found = layout.modules(package)
    graph = layout.import_graph(found)
    assert graph["gpucourse.sub"] == {"gpucourse.sub.one"}
    assert graph["gpucourse.sub.one"] == {"gpucourse.sub.two"}
    assert graph["gpucourse.sub.two"] == {"gpucourse.sub"}  # not the import inside g
    assert layout.import_cycles(graph) == [
        ["gpucourse.sub", "gpucourse.sub.one", "gpucourse.sub.two", "gpucourse.sub"]]


def test_the_map_lists_every_module_with_its_first_sentence():
    page = layout.layout_markdown()
    for module in layout.modules():
        assert module.summary in page.replace("\\|", "|"), module.name
    assert "| `matmul` |" in page or "| `sgemm` |" in page


def test_chapters_are_found_from_their_imports():
    uses = layout.chapter_uses()
    assert "08_sgemm" in uses["gpucourse.kernels.sgemm"]
    assert "09_flash_attention" in uses["gpucourse.kernels.attention"]


def test_no_part_imports_a_part_above_it():
    assert layout.upward_imports() == []
    # The check can fail: a model importing a chapter module would be one.
    assert layout.upward_imports({("models", "chapters"): 1, ("chapters", "models"): 4}) == [
        ("models", "chapters")]


def test_every_module_belongs_to_a_drawn_part():
    parts = {layout.part_of(m.name) for m in layout.modules()} - {None}
    assert parts <= set(layout.LAYERS) | {"old names"}
