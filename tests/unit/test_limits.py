"""The contract's limits and decoding rules (section 9.8), on `shared.contract.decoding.decode`: every
limit at its value passes and one above fails, with a closed code and no value in the text."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from shared import contract as contracts
from shared.contract import limits
from shared.contract.decoding import InvalidInput, decode, too_deep

TIME = "2026-11-30T12:00:00.123Z"


def event() -> dict[str, Any]:
    return {
        "type": "resume_failed",
        "event_id": "ev-1",
        "runner_id": "r-1",
        "run_id": "run-1",
        "attempt": 1,
        "session": {"tenant": "acme", "conversation_id": "c-1", "agent_id": "codex"},
        "native_session_id": "ns-1",
        "occurred_at": TIME,
        "error": {"type": "Transport", "code": "eof", "message": "closed"},
        "command_result": {
            "command": "provider.attach",
            "status": "refused",
            "classification": "provider_attach_refused",
            "issued_at": TIME,
            "key_id": "k1",
            "signature": "ab" * 32,
        },
        "pending_tool_call": {"tool_call_id": "call-1", "tool_name": "shell", "started_at": TIME},
    }


def commit() -> dict[str, Any]:
    return {
        "session": {"tenant": "acme", "conversation_id": "c-1", "agent_id": "codex"},
        "native_session_id": "ns-1",
        "adapter": "codex",
        "model": "gpt-5-codex",
        "cwd": "/workspaces/acme",
        "checkpoint_policy": "same_session_only",
        "cursor": "c-41",
        "prompt_hash": "ph-1",
        "expected_revision": 7,
        "epoch": 3,
    }


def decide() -> dict[str, Any]:
    return {
        "session": {"tenant": "acme", "conversation_id": "c-1", "agent_id": "codex"},
        "adapter": "codex",
        "model": "gpt-5-codex",
        "cwd": "/workspaces/acme",
        "latest_cursor": "c-41",
    }


def reconcile_work() -> dict[str, Any]:
    return {
        "type": "reconcile",
        "runner_id": "r-1",
        "run_id": "run-1",
        "attempt": 1,
        "session": {"tenant": "acme", "conversation_id": "c-1", "agent_id": "codex"},
        "native_session_id": "ns-1",
        "tool_call": {"tool_call_id": "call-1", "tool_name": "shell", "started_at": TIME},
        "decision_id": "run-1:1:reconcile",
        "opened_at": TIME,
    }


BUILDERS: dict[type[msgspec.Struct], Any] = {
    contracts.ResumeFailed: event,
    contracts.CommitRequest: commit,
    contracts.DecideRequest: decide,
    contracts.ReconcileWork: reconcile_work,
    contracts.ResolveRequest: lambda: {
        "run_id": "run-1",
        "action_outcome": "completed",
        "evidence": "checked",
        "actor": "ops",
    },
    contracts.ArchiveResult: lambda: {"exit_code": 0, "timed_out": False, "output": "moved"},
    contracts.ListRequest: lambda: {"status": "open", "limit": 10, "cursor": "abc"},
}


def payload(struct: type[msgspec.Struct], path: str = "", value: Any = None) -> bytes:
    body = copy.deepcopy(BUILDERS[struct]())
    if path:
        *parents, name = path.split(".")
        target = body
        for p in parents:
            target = target[p]
        target[name] = value
    return msgspec.json.encode(body)


def attempt(struct: type[msgspec.Struct], data: bytes, max_bytes: int = limits.MAX_EVENT_BYTES) -> Any:
    return decode(data, msgspec.json.Decoder(struct), max_bytes=max_bytes)


def rejected(
    struct: type[msgspec.Struct], data: bytes, max_bytes: int = limits.MAX_EVENT_BYTES
) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        attempt(struct, data, max_bytes)
    return info.value


def test_every_builder_decodes() -> None:
    for struct in BUILDERS:
        assert isinstance(attempt(struct, payload(struct)), struct)


def _id(value: Any) -> str:
    return str(getattr(value, "__name__", value))


# Sizes ------------------------------------------------------------------------------------


def padded(size: int) -> bytes:
    """A valid event of exactly `size` bytes, padded with an unknown field."""
    base = payload(contracts.ResumeFailed)[:-1] + b',"pad":""}'
    return base[:-2] + b"x" * (size - len(base)) + b'"}'


def test_an_event_of_exactly_the_limit_decodes_and_one_byte_more_is_too_large() -> None:
    assert len(padded(limits.MAX_EVENT_BYTES)) == limits.MAX_EVENT_BYTES
    assert attempt(contracts.ResumeFailed, padded(limits.MAX_EVENT_BYTES)).run_id == "run-1"
    err = rejected(contracts.ResumeFailed, padded(limits.MAX_EVENT_BYTES + 1))
    assert err.code == "payload_too_large"


def test_an_oversized_payload_is_refused_before_parsing() -> None:
    # Not JSON at all, and deeper than any stack: only the size is looked at.
    err = rejected(contracts.ResumeFailed, b"[" * (1024 * 1024))
    assert err.code == "payload_too_large"
    assert "1048576" not in err.message


def test_requests_default_to_the_request_limit() -> None:
    data = payload(contracts.CommitRequest)[:-1] + b',"pad":"' + b"x" * limits.MAX_REQUEST_BYTES + b'"}'
    with pytest.raises(InvalidInput) as info:
        decode(data, msgspec.json.Decoder(contracts.CommitRequest))
    assert info.value.code == "payload_too_large"


def test_an_event_with_every_field_at_its_limit_fits_well_within_the_event_limit() -> None:
    body = event()
    body["error"] = {"type": "t" * 256, "code": "c" * 256, "message": "m" * 4096}
    body["command_result"].update(
        command="x" * 1024, status="s" * 256, classification="k" * 256, signature="a" * 128, key_id="k" * 128
    )
    body["pending_tool_call"].update(tool_name="n" * 256, tool_call_id="i" * 128)
    for name in ("event_id", "run_id", "native_session_id"):
        body[name] = "t" * 128
    body["runner_id"] = "r" * 64
    body["session"] = {k: "s" * 128 for k in body["session"]}
    data = msgspec.json.encode(body)
    assert attempt(contracts.ResumeFailed, data)
    assert len(data) < 10 * 1024 < limits.MAX_EVENT_BYTES


def test_a_commit_with_every_field_at_its_limit_fits_the_request_limit() -> None:
    body = commit() | {"adapter": "a" * 256, "model": "m" * 256, "cwd": "/" * 4096, "cursor": "c" * 1024}
    body |= {"prompt_hash": "p" * 256, "compatibility_generation": "g" * 128}
    data = msgspec.json.encode(body)
    assert len(data) < limits.MAX_REQUEST_BYTES
    assert decode(data, msgspec.json.Decoder(contracts.CommitRequest)).cwd == "/" * 4096


# Field lengths ----------------------------------------------------------------------------

LENGTHS = [
    (contracts.ResumeFailed, "pending_tool_call.tool_name", limits.NAME_CHARS),
    (contracts.ResumeFailed, "error.type", limits.NAME_CHARS),
    (contracts.ResumeFailed, "error.code", limits.NAME_CHARS),
    (contracts.ResumeFailed, "error.message", limits.MESSAGE_CHARS),
    (contracts.ResumeFailed, "command_result.command", limits.COMMAND_CHARS),
    (contracts.ResumeFailed, "command_result.status", limits.NAME_CHARS),
    (contracts.ResumeFailed, "command_result.classification", limits.NAME_CHARS),
    (contracts.ResumeFailed, "command_result.signature", limits.SIGNATURE_CHARS),
    (contracts.ResumeFailed, "run_id", 128),
    (contracts.CommitRequest, "adapter", limits.NAME_CHARS),
    (contracts.CommitRequest, "model", limits.NAME_CHARS),
    (contracts.CommitRequest, "cwd", limits.PATH_CHARS),
    (contracts.CommitRequest, "cursor", limits.CURSOR_CHARS),
    (contracts.CommitRequest, "prompt_hash", limits.NAME_CHARS),
    (contracts.DecideRequest, "latest_cursor", limits.CURSOR_CHARS),
    (contracts.DecideRequest, "cwd", limits.PATH_CHARS),
    (contracts.ReconcileWork, "decision_id", limits.NAME_CHARS),
    (contracts.ReconcileWork, "tool_call.tool_name", limits.NAME_CHARS),
    (contracts.ResolveRequest, "evidence", limits.EVIDENCE_CHARS),
    (contracts.ArchiveResult, "output", limits.OUTPUT_CHARS),
    (contracts.ListRequest, "cursor", limits.CURSOR_CHARS),
]


@pytest.mark.parametrize(("struct", "path", "limit"), LENGTHS, ids=_id)
def test_a_field_at_its_limit_passes_and_one_character_more_fails(
    struct: type[msgspec.Struct], path: str, limit: int
) -> None:
    assert attempt(struct, payload(struct, path, "a" * limit))
    err = rejected(struct, payload(struct, path, "S3CRET" + "a" * (limit - 5)))
    assert err.code == "invalid_field"
    assert path.split(".")[-1] in err.message
    assert "S3CRET" not in err.message


def test_lengths_count_characters_not_bytes() -> None:
    name = "é" * limits.NAME_CHARS  # 512 bytes of UTF-8
    data = payload(contracts.ResumeFailed, "pending_tool_call.tool_name", name)
    assert attempt(contracts.ResumeFailed, data).pending_tool_call.tool_name == name


# Integers ---------------------------------------------------------------------------------

INTS = [
    (contracts.ResumeFailed, "attempt", 1, limits.MAX_ATTEMPT),
    (contracts.ReconcileWork, "attempt", 1, limits.MAX_ATTEMPT),
    (contracts.CommitRequest, "epoch", 0, limits.MAX_SAFE_INT),
    (contracts.CommitRequest, "expected_revision", 0, limits.MAX_SAFE_INT),
    (contracts.ArchiveResult, "exit_code", -limits.MAX_SAFE_INT, limits.MAX_SAFE_INT),
    (contracts.ListRequest, "limit", 1, 1000),
]


@pytest.mark.parametrize(("struct", "path", "low", "high"), INTS, ids=_id)
def test_integers_are_bounded(struct: type[msgspec.Struct], path: str, low: int, high: int) -> None:
    for ok in (low, high):
        assert attempt(struct, payload(struct, path, ok))
    for bad in (low - 1, high + 1, 2**53, 2**70, -(2**70)):
        if low <= bad <= high:
            continue
        assert rejected(struct, payload(struct, path, bad)).code == "invalid_field", bad


def test_max_safe_int_is_javascripts() -> None:
    assert limits.MAX_SAFE_INT == 2**53 - 1 == 9007199254740991
    assert float(limits.MAX_SAFE_INT) == limits.MAX_SAFE_INT and float(2**53 + 1) != 2**53 + 1


# Times ------------------------------------------------------------------------------------

TIME_FIELDS = [
    (contracts.ResumeFailed, "occurred_at"),
    (contracts.ResumeFailed, "command_result.issued_at"),
    (contracts.ResumeFailed, "pending_tool_call.started_at"),
    (contracts.ReconcileWork, "opened_at"),
    (contracts.ReconcileWork, "tool_call.started_at"),
]
GOOD_TIMES = [
    "2026-11-30T12:00:00Z",
    "2026-11-30T12:00:00.123456789Z",
    "2026-11-30T12:00:00+00:00",
    "2024-02-29T00:00:00Z",  # a leap year
    "2000-02-29T23:59:59.9Z",  # divisible by 400
    "2026-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
]
BAD_TIMES = [
    "2026-13-01T00:00:00Z",  # month 13
    "2026-00-10T00:00:00Z",
    "2026-01-00T00:00:00Z",
    "2026-01-32T00:00:00Z",
    "2026-02-30T00:00:00Z",
    "2025-02-29T00:00:00Z",  # not a leap year
    "1900-02-29T00:00:00Z",  # divisible by 100, not by 400
    "2026-04-31T00:00:00Z",
    "2026-11-30T24:00:00Z",
    "2026-11-30T24:00:01Z",
    "2026-11-30T23:60:00Z",
    "2016-12-31T23:59:60Z",  # a leap second: rejected (section 9.8)
    "2026-11-30T12:00:00+02:00",  # not UTC
    "2026-11-30T12:00:00-00:00",  # offset unknown
    "2026-11-30t12:00:00z",
    "2026-11-30 12:00:00Z",
    "0000-01-01T00:00:00Z",
    "2026-11-30T12:00:00.1234567890Z",
    "2026-11-30T12:00:00",
    "2026-11-30T12:00:00Z\n",
]


@pytest.mark.parametrize(("struct", "path"), TIME_FIELDS, ids=_id)
def test_times_are_real_utc_instants_kept_as_sent(struct: type[msgspec.Struct], path: str) -> None:
    for good in GOOD_TIMES:
        value = attempt(struct, payload(struct, path, good))
        for part in path.split("."):
            value = getattr(value, part)
        assert value == good
    for bad in BAD_TIMES:
        err = rejected(struct, payload(struct, path, bad))
        assert err.code == "invalid_field", bad
        assert bad.strip() not in err.message


# Nesting and UTF-8 ------------------------------------------------------------------------


def nested(depth: int) -> bytes:
    """An event whose unknown field makes the whole message exactly `depth` deep."""
    value = b"1"
    for i in range(depth - 1):  # the event's own object is the first level
        value = b"[" + value + b"]" if i % 2 else b'{"a":' + value + b"}"
    return payload(contracts.ResumeFailed)[:-1] + b',"x":' + value + b"}"


def test_nesting_up_to_the_limit_decodes_and_one_level_more_is_malformed() -> None:
    assert not too_deep(nested(limits.MAX_DEPTH))
    assert too_deep(nested(limits.MAX_DEPTH + 1))
    assert not too_deep(b"{}", 1) and too_deep(b'{"a":[]}', 1) and not too_deep(b'{"a":[]}', 2)
    assert attempt(contracts.ResumeFailed, nested(limits.MAX_DEPTH)).run_id == "run-1"
    assert rejected(contracts.ResumeFailed, nested(limits.MAX_DEPTH + 1)).code == "malformed_json"


def test_nesting_beyond_the_stack_is_malformed_not_a_recursion_error() -> None:
    deep = b'{"x":' + b"[" * 30000 + b"]" * 30000 + b"}"
    for struct in (contracts.ResumeFailed, contracts.CommitRequest, contracts.ListRequest):
        assert rejected(struct, deep).code == "malformed_json"


def test_brackets_inside_strings_are_text_not_nesting() -> None:
    message = '[[[{{{"\\"' * 200
    data = payload(contracts.ResumeFailed, "error.message", message)
    assert attempt(contracts.ResumeFailed, data).error.message == message


def test_many_shallow_containers_are_not_deep() -> None:
    data = payload(contracts.ResumeFailed)[:-1] + b',"x":[' + b"[],{}," * 2000 + b"[]]}"
    assert attempt(contracts.ResumeFailed, data).run_id == "run-1"


@pytest.mark.parametrize(
    "tail",
    [b',"x":"\xff"}', b',"\xc3\x28":1}', b',"x":{"y":["\xed\xa0\x80"]}}', b',"x":"\xe2\x82"}'],
    ids=["value", "key", "surrogate", "truncated"],
)
def test_invalid_utf8_anywhere_is_malformed(tail: bytes) -> None:
    data = payload(contracts.ResumeFailed)[:-1] + tail
    assert rejected(contracts.ResumeFailed, data).code == "malformed_json"


def test_valid_utf8_in_unknown_fields_passes() -> None:
    data = payload(contracts.ResumeFailed)[:-1] + ',"x":"héllo ✓ 😀"}'.encode()
    assert attempt(contracts.ResumeFailed, data).run_id == "run-1"
