"""The layer rule of docs/architecture.md, held against every import of the product: each layer
imports only the layers below it, a service never imports another service, and the command
reaches a service only through its public spec (`service.py`) or the registry."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("shared", "services", "continuity")


@dataclass(frozen=True)
class Layer:
    """One row of the rule: the modules a layer holds and the layers it may import."""

    name: str
    pattern: str
    """A regular expression over dotted module names."""
    may_import: frozenset[str]


_DOMAIN = frozenset({"contract", "platform", "policy", "records"})
"""What a service builds on."""

LAYERS: tuple[Layer, ...] = (
    Layer("contract", r"shared\.contract(\..+)?", frozenset()),
    Layer("platform", r"shared\.platform(\..+)?", frozenset({"contract"})),
    Layer("policy", r"shared\.policy(\..+)?", frozenset({"contract"})),
    Layer("records", r"shared\.records(\..+)?", frozenset({"contract", "platform"})),
    Layer(
        "registry", r"services\.registry", frozenset({"contract", "platform", "policy", "records", "service"})
    ),
    Layer(
        "service-spec",
        r"services\.[a-z_]+\.service",
        frozenset({"contract", "platform", "policy", "records"}),
    ),
    Layer("service", r"services\.[a-z_]+(\..+)?", frozenset({"contract", "platform", "policy", "records"})),
    Layer(
        "entrypoints",
        r"continuity(\..+)?",
        frozenset({"contract", "platform", "policy", "records", "registry", "service-spec", "entrypoints"}),
    ),
)
"""First match wins: `services.registry` and each `services.<name>.service` are read before the
catch-all row of a service's own modules."""

PACKAGES = {"shared": "platform", "services": "registry"}
"""The bare top-level packages (their `__init__` holds nothing) counted as their lowest users."""


def layer_of(module: str) -> Layer | None:
    if module in PACKAGES:
        return next(layer for layer in LAYERS if layer.name == PACKAGES[module])
    return next((layer for layer in LAYERS if re.fullmatch(layer.pattern, module)), None)


def service_of(module: str) -> str | None:
    """The service package a module belongs to (`services.archiver.step` -> `archiver`)."""
    parts = module.split(".")
    if parts[0] == "services" and len(parts) > 1 and parts[1] != "registry":
        return parts[1]
    return None


def imports(source: str, module: str, is_package: bool) -> list[str]:
    """Every project module `source` imports, at any depth (imports inside functions count),
    relative ones resolved, and `importlib.import_module` of a literal name."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # `from shared.records import keys` imports the module shared.records.keys; a name
            # that is not a module counts as its module (`existing` below).
            found += [origin if alias.name == "*" else f"{origin}.{alias.name}" for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(node.args[0].value)
    return [name for name in found if name.split(".")[0] in PRODUCT]


def existing(name: str) -> str:
    """`name` if it is a module of the tree, else its parent (`shared.records.keys.outbox`, a
    function imported by name, counts as `shared.records.keys`)."""
    parts = name.split(".")
    while parts:
        path = ROOT.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    return name


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What in `source` (the module `module`) breaks the rule, one line each."""
    own = layer_of(module)
    if own is None:
        return []
    found = []
    for target in dict.fromkeys(existing(name) for name in imports(source, module, is_package)):
        other = layer_of(target)
        if other is None or (service_of(module) is not None and service_of(target) == service_of(module)):
            continue  # outside the product, or a service's own modules
        if (other is own and own.name != "service") or other.name in own.may_import:
            continue
        found.append(f"{module} ({own.name}) imports {target} ({other.name})")
    return found


def product_modules() -> list[tuple[Path, str, bool]]:
    modules = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            modules.append((path, ".".join(parts[:-1] if is_package else parts), is_package))
    return modules


def test_every_import_of_the_product_follows_the_layer_rule() -> None:
    broken = [
        line
        for path, module, is_package in product_modules()
        for line in violations(path.read_text(), module, is_package)
    ]
    assert broken == []


def test_every_module_of_the_product_is_in_a_layer() -> None:
    assert [m for _, m, _ in product_modules() if layer_of(m) is None and m not in PRODUCT] == []


def test_each_layer_is_a_folder_of_the_tree() -> None:
    for folder in ("shared/contract", "shared/platform", "shared/records", "continuity/cli"):
        assert (ROOT / folder / "__init__.py").is_file(), folder


# The detector itself, on planted violations: each must be seen.


def test_a_contract_module_importing_the_platform_is_refused() -> None:
    assert violations("from shared.platform import metrics", "shared.contract.errors") == [
        "shared.contract.errors (contract) imports shared.platform.metrics (platform)"
    ]


def test_the_platform_importing_records_is_refused_in_every_spelling() -> None:
    for source in (
        "from shared.records import keys",
        "import shared.records.keys",
        "def f():\n    from shared.records.keys import outbox\n",
        "importlib.import_module('shared.records.keys')",
    ):
        assert violations(source, "shared.platform.service") == [
            "shared.platform.service (platform) imports shared.records.keys (records)"
        ], source


def test_a_service_importing_another_service_is_refused() -> None:
    assert violations("from services.archiver import step", "services.classifier.store") == [
        "services.classifier.store (service) imports services.archiver.step (service)"
    ]
    assert violations("from services.archiver.service import build", "services.classifier.step") == [
        "services.classifier.step (service) imports services.archiver.service (service-spec)"
    ]


def test_the_command_reaches_a_service_only_through_its_spec() -> None:
    assert violations("from services.reconciliation.service import NAME", "continuity.cli.streams") == []
    assert violations("from services.reconciliation import store", "continuity.tools.memory") == [
        "continuity.tools.memory (entrypoints) imports services.reconciliation.store (service)"
    ]


def test_a_service_may_import_its_own_modules_relatively() -> None:
    assert violations("from .store import X", "services.reconciliation.handlers") == []
    assert violations("from . import wire", "services.reconciliation", is_package=True) == []
