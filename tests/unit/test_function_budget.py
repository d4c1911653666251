"""Every function of the product fits in 60 lines, from its `def` to the last line of its body
(docstring included): a longer one is split into the steps it takes, each named for what it does."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (
    ROOT / "shared",
    ROOT / "services",
    ROOT / "continuity",
    ROOT / "sdk" / "python" / "continuity_runner",
)
BUDGET = 60


def long_functions(folders: tuple[Path, ...] = PRODUCT, budget: int = BUDGET) -> list[str]:
    """`path:line name (n lines)` for each function or method longer than `budget` lines."""
    found: list[str] = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    lines = node.end_lineno - node.lineno + 1
                    if lines > budget:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_the_walk_reads_every_folder_of_the_product() -> None:
    for folder in PRODUCT:
        assert any(folder.rglob("*.py")), folder


def test_no_product_function_is_over_the_budget() -> None:
    found = long_functions()
    assert not found, f"{len(found)} function(s) over {BUDGET} lines:\n" + "\n".join(found)
