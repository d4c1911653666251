"""No import cycle in the product: a module that imports, at any depth, a module that imports it
back can only be read (and loaded) in one order, which nothing in either file says. Imports
inside functions and under `if TYPE_CHECKING:` count too: they are how such a circle is usually
hidden, not untied. A package's `__init__` run before its submodules is not counted as an
import of the package: only the modules an import names are."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "shared": ROOT / "shared",
    "services": ROOT / "services",
    "continuity": ROOT / "continuity",
    "continuity_runner": ROOT / "sdk" / "python" / "continuity_runner",
}
"""Each top-level package of the product and its folder."""


@dataclass(frozen=True)
class Edge:
    """`importer` imports `imported` at `line` of its file."""

    importer: str
    imported: str
    line: int


def modules() -> dict[str, Path]:
    """Every module of the product by dotted name; a package is its `__init__.py`."""
    found: dict[str, Path] = {}
    for top, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _named(name: str, known: dict[str, Path]) -> str | None:
    """The module of the product that `name` is, or the innermost one that holds it."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _base(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` reads from."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join([*package, node.module] if node.module else package)


def edges_of(module: str, path: Path, known: dict[str, Path]) -> list[Edge]:
    """The product modules `module` imports, wherever the import statement stands."""
    is_package = path.name == "__init__.py"
    found: list[Edge] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(node, module, is_package)
            # `from pkg import name`: the submodule `pkg.name` when there is one, else `pkg`.
            names = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
        else:
            continue
        for name in names:
            target = _named(name, known)
            if target is not None and target != module:
                found.append(Edge(module, target, node.lineno))
    return found


def graph() -> dict[str, list[Edge]]:
    known = modules()
    return {module: edges_of(module, path, known) for module, path in known.items()}


def cycles(edges: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One shortest cycle of each strongly connected group of modules (Tarjan's algorithm, then
    a breadth-first search from the group's first module back to itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        # Recursion depth is bounded by the longest import chain, a few dozen modules.
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for edge in edges.get(module, []):
            if edge.imported not in index:
                visit(edge.imported)
                low[module] = min(low[module], low[edge.imported])
            elif edge.imported in on_stack:
                low[module] = min(low[module], index[edge.imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return [_shortest_cycle(group, edges) for group in sorted(groups)]


def _shortest_cycle(group: list[str], edges: dict[str, list[Edge]]) -> list[Edge]:
    members = set(group)
    start = group[0]
    came_by: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for edge in sorted(edges[module], key=lambda e: (e.imported, e.line)):
                if edge.imported not in members or edge.imported in came_by:
                    continue
                came_by[edge.imported] = edge
                if edge.imported == start:
                    path = [edge]
                    while path[0].importer != start:
                        path.insert(0, came_by[path[0].importer])
                    return path
                following.append(edge.imported)
        frontier = following
    raise AssertionError(f"{group} is not a cycle")


def describe(cycle: list[Edge]) -> str:
    steps = [f"{e.importer} imports {e.imported} (line {e.line})" for e in cycle]
    return "\n  ".join(steps)


def test_the_product_has_no_import_cycle() -> None:
    found = cycles(graph())
    assert not found, "import cycles:\n  " + "\n\n  ".join(describe(c) for c in found)


def test_the_graph_sees_imports_in_functions_and_under_type_checking(tmp_path: Path) -> None:
    a = tmp_path / "a.py"
    b = tmp_path / "b.py"
    c = tmp_path / "c.py"
    a.write_text("def f():\n    from pkg import b\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import X\n")
    c.write_text("from . import a\n")
    known = {"pkg.a": a, "pkg.b": b, "pkg.c": c}
    edges = {module: edges_of(module, path, known) for module, path in known.items()}
    found = cycles(edges)
    assert [describe(cycle) for cycle in found] == [
        "pkg.a imports pkg.b (line 2)\n  pkg.b imports pkg.c (line 3)\n  pkg.c imports pkg.a (line 1)"
    ]


def test_a_module_is_found_for_each_product_package() -> None:
    known = modules()
    assert {"shared.platform.service", "continuity.tools.simulate.fleet"} <= set(known)
    assert "continuity_runner.contract" in known and "services.registry" in known
