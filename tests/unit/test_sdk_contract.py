"""The Python runner SDK's wire types are the services' own, field by field: names, encode
names, types with their patterns and bounds, defaults, tags and encoding settings. And the SDK
stands alone: it never imports the server's packages. The TypeScript SDK's closed sets and the
fields of what it receives are the services' too (read from its source)."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import continuity_runner.contract as sdk
import continuity_runner.limits as sdk_limits
import continuity_runner.types as sdk_types
import msgspec
import msgspec.inspect as mi
import pytest

import shared.contract as server
import shared.contract.events as server_events
import shared.contract.limits as server_limits
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
SERVER_NAME = {getattr(sdk, a): b for a, b in PAIRS.items()}


def server_struct(name: str) -> Any:
    """The server's Struct of that name: the section 10 ones live in shared.contract.tenancy."""
    return getattr(server, name, None) or getattr(server_tenancy, name)


CONFIG_FIELDS = (
    "frozen",
    "eq",
    "order",
    "array_like",
    "gc",
    "repr_omit_defaults",
    "omit_defaults",
    "forbid_unknown_fields",
    "tag",
    "tag_field",
)


def shape(t: Any) -> Any:
    """A comparable description of a msgspec type: structs by their (server) name, every
    constraint and setting kept, nested types described the same way."""
    if isinstance(t, mi.StructType):
        name = SERVER_NAME.get(t.cls, t.cls.__name__)
        fields = tuple(
            (f.name, f.encode_name, shape(f.type), f.required, repr(f.default), repr(f.default_factory))
            for f in t.fields
        )
        return ("struct", name, fields, t.tag_field, t.tag, t.array_like, t.forbid_unknown_fields)
    if isinstance(t, msgspec.Struct):
        return (type(t).__name__, tuple((k, shape(getattr(t, k))) for k in t.__struct_fields__))
    if isinstance(t, tuple):
        return tuple(shape(x) for x in t)
    return t


def settings(cls: type[msgspec.Struct]) -> tuple[Any, ...]:
    config = cls.__struct_config__
    kinds = tuple((p.name, p.kind) for p in inspect.signature(cls).parameters.values())
    # A `__post_init__` is a check beyond the types (the calendar check of times).
    checks = hasattr(cls, "__post_init__")
    return (*(getattr(config, k) for k in CONFIG_FIELDS), kinds, checks)


@pytest.mark.parametrize(("sdk_name", "server_name"), sorted(PAIRS.items()))
def test_sdk_struct_is_the_servers(sdk_name: str, server_name: str) -> None:
    mine, theirs = getattr(sdk, sdk_name), server_struct(server_name)
    assert shape(mi.type_info(mine)) == shape(mi.type_info(theirs))
    assert settings(mine) == settings(theirs)


def test_a_changed_constraint_is_told_apart() -> None:
    """The comparison sees a pattern, a default and an encoding setting that differ."""

    class Loose(msgspec.Struct, kw_only=True):
        archive_id: str
        run_id: str
        session: sdk.SessionRef
        native_session_id: str

    class Defaults(msgspec.Struct, kw_only=True, omit_defaults=True):
        exit_code: int | None
        timed_out: bool = True
        output: str = ""

    assert shape(mi.type_info(Loose)) != shape(mi.type_info(server.ArchiveCommand))
    assert shape(mi.type_info(Defaults)) != shape(mi.type_info(server.ArchiveResult))
    assert settings(Defaults) != settings(server.ArchiveResult)


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
    ],
)
def test_times_are_checked_alike(time: str) -> None:
    def accepts(cls: type[msgspec.Struct]) -> bool:
        body = {"tool_call_id": "t1", "tool_name": "shell", "started_at": time}
        try:
            msgspec.json.decode(msgspec.json.encode(body), type=cls)
        except msgspec.ValidationError:
            return False
        return True

    assert accepts(sdk.ToolCall) == accepts(server.ToolCall)


def test_the_limits_are_the_servers() -> None:
    names = [n for n in vars(sdk_limits) if n.isupper()]
    assert names
    for name in names:
        assert getattr(sdk_limits, name) == getattr(server_limits, name), name
    for pattern in ("TOKEN_PATTERN", "RUNNER_ID_PATTERN", "TIME_PATTERN"):
        assert getattr(sdk_types, pattern) == getattr(server_types, pattern)


def test_every_struct_of_the_sdk_is_compared() -> None:
    structs = {
        name
        for name, value in vars(sdk).items()
        if isinstance(value, type) and issubclass(value, msgspec.Struct) and value.__module__ == sdk.__name__
    }
    assert structs == set(PAIRS)


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
    assert (sdk.TURN_COMMAND, sdk.TURN_STATUS) == (server_events.TURN_COMMAND, server_events.TURN_STATUS)
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
