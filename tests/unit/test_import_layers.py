"""The layer rule of docs/architecture.md, held against every import of the product: each layer
imports only the layers below it, a service never imports another service, and the command
reaches a service only through its public spec (`service.py`) or the registry. The Python runner
SDK is part of the product: its contract modules are the bottom layer, under the server's
contract, and the rest of it is a layer the server's contract never imports."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"shared": ROOT, "services": ROOT, "continuity": ROOT, "continuity_runner": ROOT / "sdk" / "python"}
"""Each top-level package of the product and the folder it lives in."""
PRODUCT = tuple(SOURCES)


@dataclass(frozen=True)
class Layer:
    """One row of the rule: the modules a layer holds and the layers it may import."""

    name: str
    pattern: str
    """A regular expression over dotted module names."""
    may_import: frozenset[str]


_CONTRACT = frozenset({"sdk-contract", "contract"})
"""The wire contract: the runner SDK's messages and the server's own."""

LAYERS: tuple[Layer, ...] = (
    Layer("sdk-contract", r"continuity_runner\.(contract|errors|limits|signing|types)", frozenset()),
    Layer("sdk", r"continuity_runner(\..+)?", frozenset({"sdk-contract"})),
    Layer("contract", r"shared\.contract(\..+)?", frozenset({"sdk-contract"})),
    Layer("platform", r"shared\.platform(\..+)?", _CONTRACT),
    Layer("policy", r"shared\.policy(\..+)?", _CONTRACT),
    # The outcome statistics read the SDK's harness table, the one runners ship with.
    Layer("records", r"shared\.records(\..+)?", _CONTRACT | {"platform", "sdk"}),
    Layer("registry", r"services\.registry", _CONTRACT | {"platform", "policy", "records", "service"}),
    Layer("service-spec", r"services\.[a-z_]+\.service", _CONTRACT | {"platform", "policy", "records"}),
    Layer("service", r"services\.[a-z_]+(\..+)?", _CONTRACT | {"platform", "policy", "records"}),
    Layer(
        "entrypoints",
        r"continuity(\..+)?",
        _CONTRACT | {"sdk", "platform", "policy", "records", "registry", "service-spec", "entrypoints"},
    ),
)
"""First match wins: the SDK's contract modules are read before the rest of the SDK,
`services.registry` and each `services.<name>.service` before the catch-all row of a service's
own modules."""

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
        path = SOURCES.get(parts[0], ROOT).joinpath(*parts)
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
    for top, source in SOURCES.items():
        for path in sorted((source / top).rglob("*.py")):
            parts = path.relative_to(source).with_suffix("").parts
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


def test_a_contract_module_importing_the_runner_sdks_runner_is_refused() -> None:
    """The server's contract builds on the SDK's contract modules alone, never on its runner."""
    assert violations("from continuity_runner.contract import Decision", "shared.contract.decisions") == []
    assert violations("from continuity_runner.runner import Runner", "shared.contract.signing") == [
        "shared.contract.signing (contract) imports continuity_runner.runner (sdk)"
    ]
    assert violations("from continuity_runner import connect", "shared.contract.client") == [
        "shared.contract.client (contract) imports continuity_runner (sdk)"
    ]


def test_the_runner_sdk_importing_the_server_is_refused() -> None:
    assert violations("from shared.contract import limits", "continuity_runner.types") == [
        "continuity_runner.types (sdk-contract) imports shared.contract.limits (contract)"
    ]
    assert violations("from shared.platform import tracing", "continuity_runner.runner") == [
        "continuity_runner.runner (sdk) imports shared.platform.tracing (platform)"
    ]
    assert violations("from continuity_runner.checks import check_value", "continuity_runner.contract") == [
        "continuity_runner.contract (sdk-contract) imports continuity_runner.checks (sdk)"
    ]


def import_graph() -> dict[str, set[str]]:
    """Each module of the product and the modules of the product it imports, at any depth."""
    return {
        module: {existing(name) for name in imports(path.read_text(), module, is_package)} - {module}
        for path, module, is_package in product_modules()
    }


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str]:
    """A chain of imports from `start` back to itself, or [] when there is none."""
    chains = [[start]]
    seen = {start}
    while chains:
        chain = chains.pop()
        for target in sorted(graph.get(chain[-1], ())):
            if target == start:
                return [*chain, start]
            if target not in seen:
                seen.add(target)
                chains.append([*chain, target])
    return []


def test_the_sdks_contract_modules_import_no_circle() -> None:
    """`contract`, `types`, `errors`, `limits` and `signing` import one another one way only, at
    any depth: no import inside a function or under TYPE_CHECKING closes a circle."""
    graph = import_graph()
    contract = [m for m in graph if (layer := layer_of(m)) is not None and layer.name == "sdk-contract"]
    assert sorted(contract) == [
        f"continuity_runner.{n}" for n in ("contract", "errors", "limits", "signing", "types")
    ]
    assert [chain for m in contract if (chain := cycle_through(graph, m))] == []


def test_a_circle_is_seen() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_through(graph, "a") == ["a", "b", "c", "a"]
    assert cycle_through(graph, "d") == []
