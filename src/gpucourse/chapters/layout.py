"""How the code is organised: a map of the package, read from the code itself.

The book's back matter has a page that lists the package's parts, what each
holds and which chapters use it. Written by hand, such a page drifts the day
a module moves. So it is computed here, at build time, from three things the
code already states:

* each module's opening docstring, whose first sentence says what it holds
  (every module must have one: ``tests/test_layout.py`` checks it);
* the module's length in lines;
* the chapter notebooks that name it (``gpucourse.kernels.sgemm``,
  ``from gpucourse.kernels import sgemm``, ``from gpucourse import memory``).

Nothing here imports the modules it describes: the files are parsed with
:mod:`ast`, so drawing the map loads neither Numba nor torch. The same
parse gives the import graph among the package's modules, which the tests use
to prove that there are no import cycles.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # src/gpucourse
PACKAGE = PACKAGE_ROOT.name
# The repository, where the chapters are (absent from an installed copy).
REPOSITORY_ROOT = PACKAGE_ROOT.parents[1]


@dataclass(frozen=True)
class Module:
    """One module of the package, as its file states it."""

    name: str  # dotted: gpucourse.kernels.sgemm.matmul
    path: Path
    lines: int
    docstring: str  # the opening docstring, "" if it has none

    @property
    def summary(self) -> str:
        """The docstring's first sentence (its first paragraph, cut at the first
        full stop followed by a space), on one line."""
        paragraph = self.docstring.strip().split("\n\n")[0]
        paragraph = " ".join(paragraph.split())
        match = re.search(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)\.(\s|$)", paragraph)
        return paragraph[:match.start() + 1] if match else paragraph

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def package(self) -> str:
        """The package the module belongs to (itself, for a package's __init__)."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE_ROOT) -> list[Module]:
    """Every module of the package under `root`, sorted by dotted name."""
    found = []
    for path in sorted(Path(root).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        source = path.read_text()
        tree = ast.parse(source)
        found.append(Module(_module_name(path, Path(root)), path, len(source.splitlines()),
                            ast.get_docstring(tree) or ""))
    return sorted(found, key=lambda m: m.name)


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    """The absolute name an ImportFrom names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _longest_module(name: str, names: set[str]) -> str | None:
    """The longest leading part of a dotted name that is one of the modules."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        if ".".join(parts[:cut]) in names:
            return ".".join(parts[:cut])
    return None


def import_graph(found: list[Module] | None = None) -> dict[str, set[str]]:
    """module -> the package's modules it imports when it is imported (imports
    at module level, not those inside functions, which run later). An import
    counts the module it names: ``from gpucourse.a import b`` the module
    ``gpucourse.a.b`` where there is one, else ``gpucourse.a``. (Python also
    runs each parent package first; a parent that is still importing is no
    cycle, so those implicit imports are not counted.)"""
    found = modules() if found is None else found
    names = {m.name for m in found}
    graph: dict[str, set[str]] = {}
    for module in found:
        targets: set[str] = set()
        for node in ast.parse(module.path.read_text()).body:
            if isinstance(node, ast.If):  # `if TYPE_CHECKING:` and the like count as run
                nodes = node.body + node.orelse
            else:
                nodes = [node]
            for item in nodes:
                if isinstance(item, ast.Import):
                    imported = [alias.name for alias in item.names]
                elif isinstance(item, ast.ImportFrom):
                    base = _resolve(module, item)
                    # `from a.b import c` imports the module a.b.c where there is
                    # one, else the name c from a.b
                    imported = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names
                                else base for alias in item.names]
                else:
                    continue
                for name in imported:
                    target = _longest_module(name, names)
                    if target and target != module.name:
                        targets.add(target)
        graph[module.name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Import cycles among the package's modules, each as a list of names from a
    module back to itself; [] when there are none. A package's __init__ that
    re-exports its submodules is no cycle, unless a submodule imports a name
    back from the package itself."""
    graph = import_graph() if graph is None else graph
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def _chapter_title(notebook: Path) -> str:
    """The chapter's file stem, e.g. 08_sgemm."""
    return notebook.stem


def chapter_uses(repository: Path = REPOSITORY_ROOT) -> dict[str, list[str]]:
    """dotted module name -> the chapters (notebook stems of notebooks/) whose code
    names it, as ``gpucourse.x.y``, ``from gpucourse.x import y`` or ``from
    gpucourse.x.y import ...``. {} where the chapters are not beside the package."""
    uses: dict[str, set[str]] = {}
    folder = Path(repository) / "notebooks"
    if not folder.is_dir():
        return {}
    dotted = re.compile(rf"\b{PACKAGE}(?:\.\w+)+")
    from_import = re.compile(rf"from\s+({PACKAGE}(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n]+)")
    for notebook in sorted(folder.glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        named = set(dotted.findall(code))
        for base, names in from_import.findall(code):
            named.add(base)
            for name in names.strip("()").split("#")[0].split(","):
                if name.split():
                    named.add(f"{base}.{name.split()[0]}")
        for name in named:
            uses.setdefault(name, set()).add(_chapter_title(notebook))
    return {name: sorted(chapters) for name, chapters in uses.items()}


def _used_by(module: Module, uses: dict[str, list[str]]) -> list[str]:
    """Chapters naming the module or anything inside it."""
    found = set()
    for name, chapters in uses.items():
        if name == module.name or name.startswith(module.name + "."):
            found.update(chapters)
    return sorted(found)


def groups(found: list[Module] | None = None) -> list[tuple[str, list[Module]]]:
    """The package's parts as the page shows them: (title, modules). The top
    level's own modules first, then each subpackage with its modules."""
    found = modules() if found is None else found
    top = [m for m in found if m.package == PACKAGE]
    packages: dict[str, list[Module]] = {}
    for module in found:
        if module.package != PACKAGE:
            # gpucourse.kernels.sgemm.config belongs to gpucourse.kernels.sgemm
            packages.setdefault(module.package, []).append(module)
    return [(PACKAGE, top)] + sorted(packages.items())


def layout_markdown(found: list[Module] | None = None,
                    uses: dict[str, list[str]] | None = None) -> str:
    """The page's body: one table per package, a row per module, with its
    length, the first sentence of its docstring and the chapters using it."""
    found = modules() if found is None else found
    uses = chapter_uses() if uses is None else uses
    parts = []
    for title, members in groups(found):
        head = next((m for m in members if m.is_package and m.name == title), None)
        lines = [f"### `{title}`", ""]
        if head is not None and head.summary:
            lines += [head.summary, ""]
        lines += ["| module | lines | what it holds | chapters |", "|---|---|---|---|"]
        for module in members:
            if module.is_package and module.name == title:
                continue
            short = module.name[len(title) + 1:] if module.name.startswith(title + ".") \
                else module.name
            chapters = ", ".join(_used_by(module, uses)) or ""
            summary = module.summary.replace("|", "\\|") or "(no docstring)"
            lines.append(f"| `{short}` | {module.lines} | {summary} | {chapters} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


# -----------------------------------------------------------------------------
# The parts, and who imports whom: the page's figure

# Modules kept only so that old imports keep working: each re-exports names
# that now live elsewhere. The figure draws them apart, as "old names".
OLD_NAMES = ("verify", "grading", "instructor", "exercise_processes", "kernels.inspection",
             "kernels.sgemm_checks", "kernels.attention_checks", "kernels.puzzles",
             "kernels.attention_backward")
# The parts, top to bottom as the figure stacks them: a part imports the
# parts below it.
PARTS = (("chapters", "chapters: tables, plots, results"),
         ("grader", "grader"),
         ("old names", "old names (shims)"),
         ("models", "models: hpc, parallelism,\ncollectives, memory,\nnetwork, training, ..."),
         ("kernels.sgemm", "kernels.sgemm"),
         ("kernels.attention", "kernels.attention"),
         ("kernels.tensor_cores", "kernels.tensor_cores"),
         ("timing", "kernels.timing_attention"),
         ("kernels (helpers)", "kernels: 128-bit loads,\ntiming"),
         ("kernels.launch", "kernels.launch"),
         ("shared", "device, results, checks"))
# The layer of each part, top (0) to bottom: a part may import parts of its
# own layer or below, never above (tests/test_layout.py holds the package to
# it; the shims, which only forward names, are exempt).
LAYERS = {"chapters": 0, "grader": 1, "timing": 1, "models": 2, "kernels.sgemm": 2,
          "kernels.attention": 2, "kernels.tensor_cores": 2, "kernels (helpers)": 3,
          "kernels.launch": 3, "shared": 4}
_SHARED = ("device", "results", "checks", "moved")
_KERNEL_FAMILIES = ("sgemm", "attention", "tensor_cores", "launch")


def part_of(name: str) -> str | None:
    """The part of the package a module belongs to (one of PARTS' keys), or None
    for the package's own __init__."""
    inner = name.split(".")[1:]
    if not inner:
        return None
    if ".".join(inner) in OLD_NAMES:
        return "old names"
    if inner[0] == "kernels":
        if len(inner) > 1 and inner[1] == "timing_attention":
            return "timing"  # times a student's kernel at the grader's launch shapes
        if len(inner) > 1 and inner[1] in _KERNEL_FAMILIES:
            return f"kernels.{inner[1]}"
        return "kernels (helpers)"
    if inner[0] in ("chapters", "grader"):
        return inner[0]
    return "shared" if inner[0] in _SHARED else "models"


def part_graph(graph: dict[str, set[str]] | None = None) -> dict[tuple[str, str], int]:
    """(part, part it imports) -> how many module-level imports go that way,
    from the import graph, imports within a part left out."""
    graph = import_graph() if graph is None else graph
    edges: dict[tuple[str, str], int] = {}
    for module, targets in graph.items():
        for target in targets:
            ends = (part_of(module), part_of(target))
            if None not in ends and ends[0] != ends[1]:
                edges[ends] = edges.get(ends, 0) + 1
    return edges


def upward_imports(edges: dict[tuple[str, str], int] | None = None) -> list[tuple[str, str]]:
    """(part, part) pairs where a part imports a part in a layer above its own
    (LAYERS), the shims left out; [] when the layers hold."""
    edges = part_graph() if edges is None else edges
    return sorted((a, b) for a, b in edges
                  if a != "old names" and LAYERS[b] < LAYERS[a])


def plot_parts(ax=None):
    """The package's parts as boxes, in layers, with an arrow from each part to
    each part it imports (thicker for more imports)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 7))
    # Where each part sits: rows top to bottom, a part above the parts it
    # imports. The shims ("old names") only point elsewhere and are left out.
    where = {"chapters": (0.5, 1.0), "grader": (0.3, 0.75), "timing": (0.78, 0.75),
             "models": (0.08, 0.45), "kernels.sgemm": (0.38, 0.45),
             "kernels.attention": (0.66, 0.45), "kernels.tensor_cores": (0.94, 0.45),
             "kernels (helpers)": (0.3, 0.18), "kernels.launch": (0.72, 0.18),
             "shared": (0.5, -0.08)}
    labels = dict(PARTS)
    boxes = dict(boxstyle="round,pad=0.5", facecolor="#EAF1FB", edgecolor="#4C72B0")
    for part, (x, y) in where.items():
        ax.text(x, y, labels[part], ha="center", va="center", fontsize=9, bbox=boxes, zorder=3)
    for (source, target), count in sorted(part_graph().items()):
        if source in where and target in where:
            ax.add_patch(FancyArrowPatch(where[source], where[target], arrowstyle="-|>",
                                         mutation_scale=10, linewidth=0.6 + 0.15 * min(count, 12),
                                         color="#888888", alpha=0.7, shrinkA=18, shrinkB=18,
                                         connectionstyle="arc3,rad=0.12", zorder=2))
    ax.set_xlim(-0.08, 1.08)
    ax.set_ylim(-0.16, 1.08)
    ax.axis("off")
    ax.set_title("Who imports whom: each arrow points from a part to a part it imports")
    return ax
