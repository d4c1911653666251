"""The tests' own layout: every test module in its layer, helpers only in tests/support, and no
test module importing another one (shared code lives in tests.support or a conftest)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("unit", "integration", "deploy", "chaos", "security")


def all_test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def imported_test_modules(source: str, module: str) -> list[str]:
    """The `tests.…test_*` modules that `source` (the module `module`, dotted) imports, however
    it spells the import: absolute, relative, or a test module imported by name from a package."""
    package = module.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            candidates = [origin, *(f"{origin}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in candidates:
            parts = name.split(".")
            if parts[0] == "tests" and any(p.startswith("test_") for p in parts[1:]):
                found.append(name)
    return found


def defines_tests(source: str) -> bool:
    return any(
        (isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_"))
        or (isinstance(n, ast.ClassDef) and n.name.startswith("Test"))
        for n in ast.parse(source).body
    )


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def test_the_detector_sees_every_spelling_of_a_test_module_import() -> None:
    module = "tests.integration.test_a"
    for source in (
        "import tests.integration.test_b",
        "from tests.integration.test_b import helper",
        "from tests.deploy import test_metric_references",
        "from .test_b import helper",
        "from . import test_b",
        "from ..unit.test_c import helper",
        "def f():\n    from tests.test_old import helper",
    ):
        assert imported_test_modules(source, module), source
    for source in (
        "from tests.support import wait_for",
        "from tests.support.reconciliation import new_run",
        "from tests.deploy.conftest import DEPLOY",
        "import shared.records.test_like",
    ):
        assert imported_test_modules(source, module) == [], source


def test_no_test_module_imports_another() -> None:
    offenders = {
        dotted(path): found
        for path in all_test_modules()
        if (found := imported_test_modules(path.read_text(), dotted(path)))
    }
    assert offenders == {}, "import shared helpers from tests.support instead"


def test_every_test_module_holds_tests_and_sits_in_a_layer() -> None:
    modules = all_test_modules()
    assert len(modules) > 40  # the glob found the suite
    helpers = [dotted(p) for p in modules if not defines_tests(p.read_text())]
    assert helpers == [], "a module of helpers belongs in tests/support, under a name without test_"
    outside = [dotted(p) for p in modules if p.relative_to(TESTS).parts[0] not in LAYERS]
    assert outside == [], f"every test module belongs in one of tests/{{{','.join(LAYERS)}}}/"


def test_no_support_module_is_named_like_a_test() -> None:
    support = sorted((TESTS / "support").glob("*.py"))
    assert support, "tests/support holds the shared helpers"
    assert [p.name for p in support if p.name.startswith("test_")] == []
