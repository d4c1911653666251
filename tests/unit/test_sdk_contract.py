"""The wire contract has one home, the Python runner SDK (docs/architecture.md, "One home for the
contract"): every message a runner sends or receives, and every type they use, is the SDK's own
object in the server's `shared.contract`, never a copy. And the SDK stands alone: it never
imports the server's packages. The TypeScript SDK's closed sets and the fields of what it
receives are the services' too (read from its source)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import continuity_runner.contract as sdk
import continuity_runner.errors as sdk_errors
import continuity_runner.limits as sdk_limits
import continuity_runner.signing as sdk_signing
import continuity_runner.types as sdk_types
import msgspec
import pytest

import shared.contract as server
import shared.contract.events as server_events
import shared.contract.limits as server_limits
import shared.contract.signing as server_signing
import shared.contract.tenancy as server_tenancy
import shared.contract.types as server_types

SDK_ROOT = Path(__file__).resolve().parents[2] / "sdk" / "python"
TS_CONTRACT = Path(__file__).resolve().parents[2] / "sdk" / "typescript" / "src" / "contract.ts"
TS_CHECKS = TS_CONTRACT.with_name("checks.ts")

# SDK name -> server name: every message a runner sends or receives.
PAIRS: dict[str, str] = {
    "SessionRef": "SessionRef",
    "CommitRequest": "CommitRequest",
    "CommitReply": "CommitReply",
    "DecideRequest": "DecideRequest",
    "DecideReply": "DecideReply",
    "RejectRequest": "RejectRequest",
    "RejectReply": "RejectReply",
    "GetRequest": "GetRequest",
    "SessionView": "SessionView",
    "ErrorInfo": "ErrorInfo",
    "CommandResult": "CommandResult",
    "ToolCall": "ToolCall",
    "ResumeFailed": "ResumeFailed",
    "HarnessInfo": "HarnessInfo",
    "TurnCompleted": "TurnCompleted",
    "Decision": "Decision",
    "ArchiveRequest": "ArchiveCommand",
    "ArchiveResult": "ArchiveResult",
    "ErrorDetail": "ErrorDetail",
    "ErrorBody": "ErrorBody",
    "ClaimRequest": "ClaimRequest",
    "OwnershipReply": "OwnershipReply",
    "Refusal": "Refusal",
}


def server_struct(name: str) -> Any:
    """The server's Struct of that name: the section 10 ones live in shared.contract.tenancy."""
    return getattr(server, name, None) or getattr(server_tenancy, name)


def server_modules() -> list[Any]:
    return [
        importlib.import_module(m.name) for m in pkgutil.walk_packages(server.__path__, "shared.contract.")
    ]


@pytest.mark.parametrize(("sdk_name", "server_name"), sorted(PAIRS.items()))
def test_the_servers_struct_is_the_sdks(sdk_name: str, server_name: str) -> None:
    assert server_struct(server_name) is getattr(sdk, sdk_name)


def test_every_struct_of_the_sdk_is_the_servers() -> None:
    structs = {
        name
        for name, value in vars(sdk).items()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ in (sdk.__name__, sdk_errors.__name__)
    }
    assert structs == set(PAIRS)


def test_the_server_defines_no_second_copy_of_a_runners_message() -> None:
    """A Struct defined in shared.contract never has the name of one of the SDK's: a second
    definition would be a copy that can drift."""
    taken = set(PAIRS) | set(PAIRS.values())
    defined = {
        f"{module.__name__}.{name}"
        for module in server_modules()
        for name, value in vars(module).items()
        if isinstance(value, type) and value.__module__ == module.__name__ and name in taken
    }
    assert defined == set()


def test_the_servers_types_and_limits_are_the_sdks() -> None:
    shared_names = [n for n in vars(sdk_types) if not n.startswith("_") and n[0].isupper()]
    assert "Time" in shared_names and "TIME_PATTERN" in shared_names
    for name in shared_names:
        assert getattr(server_types, name) is getattr(sdk_types, name), name
    names = [n for n in vars(sdk_limits) if n.isupper()]
    assert names
    for name in names:
        assert getattr(server_limits, name) == getattr(sdk_limits, name), name
    assert (server_events.TURN_COMMAND, server_events.TURN_STATUS) == (sdk.TURN_COMMAND, sdk.TURN_STATUS)


def test_the_signed_lines_are_the_sdks() -> None:
    assert server_signing.signing_input is sdk_signing.signing_input
    assert server_signing.DOMAIN == sdk_signing.DOMAIN
    signed = sdk_signing.sign_command_result("k1", b"k" * 32, "runner-a", "run-1", 2, "turn", "completed")
    verdict = server_signing.verify({"k1": b"k" * 32}, "runner-a", "run-1", 2, signed)
    assert verdict is server_signing.Verdict.VALID


@pytest.mark.parametrize(
    "time",
    [
        "2026-11-30T12:00:00.123Z",
        "2024-02-29T00:00:00+00:00",
        "2025-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-11-30T12:00:00-00:00",
        "2026-11-30T23:59:60Z",
        "0000-01-01T00:00:00Z",
        "\u0662\u0660\u0662\u0666-11-30T12:00:00Z",
    ],
)
def test_the_servers_own_times_are_checked_as_the_runners(time: str) -> None:
    """A time of the services' own messages (a runs query's bound) is held to the SDK's rule, the
    one a runner's event is held to: the calendar, and ASCII digits only."""

    def accepts(cls: type[msgspec.Struct], field: str) -> bool:
        body = {"tool_call_id": "t1", "tool_name": "shell", field: time}
        try:
            msgspec.json.decode(msgspec.json.encode(body), type=cls)
        except msgspec.ValidationError:
            return False
        return True

    expected = time in ("2026-11-30T12:00:00.123Z", "2024-02-29T00:00:00+00:00")
    assert accepts(sdk.ToolCall, "started_at") == expected
    assert accepts(server.RunsListRequest, "updated_before") == expected


def test_the_sdk_imports_nothing_of_the_server() -> None:
    forbidden = {"shared", "services", "continuity", "tests"}
    for path in (SDK_ROOT).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path} imports {name}"
    # And at run time, importing it loads none of them.
    code = (
        "import sys, continuity_runner; "
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(forbidden)!r}); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _ts_union(name: str) -> set[str]:
    """The string literals of `export type <name> = "a" | "b" ...;` in contract.ts."""
    found = re.search(rf"export type {name} =(?P<body>[^;]*);", TS_CONTRACT.read_text())
    assert found is not None, name
    return set(re.findall(r'"([^"]+)"', found["body"]))


def _ts_fields(name: str) -> list[str]:
    """The fields of `export interface <name> { ... }` in contract.ts, in order."""
    found = re.search(rf"export interface {name} \{{(?P<body>.*?)\n\}}", TS_CONTRACT.read_text(), re.DOTALL)
    assert found is not None, name
    return re.findall(r"^  (\w+)\??:", found["body"], re.MULTILINE)


@pytest.mark.parametrize(
    "name",
    [
        "Action",
        "FailureClass",
        "DecisionReason",
        "RefusalCode",
        "QuotaScope",
        "QuotaKind",
        "GenerationCheck",
        "ComponentName",
    ],
)
def test_the_typescript_sdks_closed_sets_are_the_servers(name: str) -> None:
    assert _ts_union(name) == set(get_args(getattr(server_types, name)))


@pytest.mark.parametrize(
    ("name", "struct"),
    [
        ("Decision", "Decision"),
        ("DecideReply", "DecideReply"),
        ("Refusal", "Refusal"),
        ("OwnershipReply", "OwnershipReply"),
        ("SessionView", "SessionView"),
    ],
)
def test_what_the_typescript_sdk_receives_has_the_servers_fields(name: str, struct: str) -> None:
    assert _ts_fields(name) == list(server_struct(struct).__struct_fields__)


@pytest.mark.parametrize(
    ("name", "struct"),
    [("ResumeFailed", "ResumeFailed"), ("TurnCompleted", "TurnCompleted"), ("HarnessInfo", "HarnessInfo")],
)
def test_what_the_typescript_sdk_sends_has_the_servers_fields(name: str, struct: str) -> None:
    assert _ts_fields(name) == list(server_struct(struct).__struct_fields__)


def _ts_rule_fields(name: str) -> list[str]:
    """The fields of `export const <name> = object({ ... });` in checks.ts, in order."""
    found = re.search(
        rf"export const {name} = object\(\{{(?P<body>.*?)\n\}}\);", TS_CHECKS.read_text(), re.DOTALL
    )
    assert found is not None, name
    return re.findall(r"^  (\w+): (?:required|optional)\(", found["body"], re.MULTILINE)


@pytest.mark.parametrize(
    ("name", "struct"), [("RESUME_FAILED", "ResumeFailed"), ("TURN_COMPLETED", "TurnCompleted")]
)
def test_the_typescript_sdks_checks_of_its_events_name_the_servers_fields(name: str, struct: str) -> None:
    assert _ts_rule_fields(name) == list(server_struct(struct).__struct_fields__)


def _pattern(annotated: Any) -> str:
    [meta] = [m for m in get_args(annotated)[1:] if isinstance(m, msgspec.Meta)]
    assert meta.pattern is not None
    return meta.pattern


@pytest.mark.parametrize(
    ("name", "server_type"), [("HARNESS_NAME", "HarnessName"), ("HARNESS_VERSION", "HarnessVersion")]
)
def test_the_harness_patterns_are_the_servers(name: str, server_type: str) -> None:
    """The SDKs' harness name and version (contract 4.6): Python's `\\Z` is JavaScript's `$`."""
    theirs = _pattern(getattr(server_types, server_type))
    assert _pattern(getattr(sdk_types, server_type)) == theirs
    found = re.search(rf"export const {name}_PATTERN = /(?P<source>.*)/;", TS_CONTRACT.read_text())
    assert found is not None, name
    assert found["source"] == theirs.removesuffix("\\Z") + "$"


def test_the_turn_result_is_the_servers() -> None:
    """A `turn_completed`'s signed result: command `turn`, status `completed` (contract 4.6)."""
    source = TS_CONTRACT.read_text()
    assert f'export const TURN_COMMAND = "{server_events.TURN_COMMAND}";' in source
    assert f'export const TURN_STATUS = "{server_events.TURN_STATUS}";' in source


def test_messages_of_an_earlier_release_decode_without_their_explanation() -> None:
    """A decision or a decide reply of services from before explanations (contract 9.11) has no
    `rule`, `policy` or `generation`: the SDK decodes it with None and `not_compared`."""
    session = {"tenant": "acme", "conversation_id": "c1", "agent_id": "codex"}
    decision = {
        "type": "decision",
        "decision_id": "d1",
        "runner_id": "runner-a",
        "run_id": "run-1",
        "attempt": 1,
        "session": session,
        "action": "retry_same_session",
        "reason": "native_session_interrupted",
        "decided_at": "2026-11-30T12:00:00Z",
    }
    old = msgspec.json.decode(msgspec.json.encode(decision), type=sdk.Decision)
    assert old.rule is None
    new = msgspec.json.decode(msgspec.json.encode({**decision, "rule": "4.4.9"}), type=sdk.Decision)
    assert new.rule == "4.4.9"
    reply = {
        "mode": "fresh",
        "resume_session_id": None,
        "transcript": "full",
        "reason": "no_session",
        "revision": None,
        "epoch": None,
    }
    before = msgspec.json.decode(msgspec.json.encode(reply), type=sdk.DecideReply)
    assert (before.rule, before.policy, before.generation) == (None, None, "not_compared")
    explained = {**reply, "rule": "3.3.1a", "policy": "shipped-1", "generation": "missing"}
    after = msgspec.json.decode(msgspec.json.encode(explained), type=sdk.DecideReply)
    assert (after.rule, after.policy, after.generation) == ("3.3.1a", "shipped-1", "missing")
