"""sdk/bad-inputs.json against the services' own decoding: every input both runner SDKs refuse is
refused by the services too, with the same code and at the same field, and every input at the
limits that the SDKs must send is taken. So the SDKs refuse nothing the services take, and what
they let through is never dead-lettered as invalid. The file covers every limit of contract 9.8
that a runner's call can break, and the archive answers are the Python SDK's.

The SDKs play the same file through their calls: tests/integration/test_sdk_python.py and
sdk/typescript/test/inputs.test.ts."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from continuity_runner import ArchiveResult
from continuity_runner.checks import archive_answer

import shared.contract as server
from shared.contract.decoding import InvalidInput, decode
from shared.contract.limits import MAX_EVENT_BYTES, MAX_REQUEST_BYTES
from tests.support.sdk_inputs import ARCHIVE_ANSWERS, BAD, GOOD, INPUTS, arguments, expand

NOW = "2026-11-30T12:00:00.000Z"


def wire(call: str, args: dict[str, Any]) -> tuple[type[Any], int, dict[str, Any]]:
    """What the services receive for the call: the message's Struct, its byte limit, its fields."""
    requests = {
        "decide": server.DecideRequest,
        "commit": server.CommitRequest,
        "reject": server.RejectRequest,
        "get": server.GetRequest,
    }
    if call in requests:
        return requests[call], MAX_REQUEST_BYTES, args
    event = {
        "type": "resume_failed",
        "event_id": "evt-inputs",
        "runner_id": "runner-inputs",
        "occurred_at": NOW,
        **arguments({"call": "report_resume_failure"}),
    }
    if call == "report_resume_failure":
        event.update(args)
    elif call == "sign_command_result":
        run_id, attempt = args.pop("run_id"), args.pop("attempt")
        result = {**args, "key_id": "k1", "signature": "0" * 64}
        event.update(run_id=run_id, attempt=attempt, command_result=result)
    elif call == "connect":
        event["runner_id"] = args["runner_id"]
    else:
        raise AssertionError(f"no SDK call {call}")
    return server.ResumeFailed, MAX_EVENT_BYTES, event


def encoded(message: dict[str, Any]) -> bytes:
    """The message's bytes as an SDK sends them (UTF-8 JSON); a lone surrogate, which UTF-8
    cannot carry, escaped as JavaScript's JSON.stringify escapes it."""
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode()


def services_verdict(case: dict[str, Any]) -> InvalidInput | None:
    kind, limit, message = wire(case["call"], arguments(case))
    try:
        decode(encoded(message), msgspec.json.Decoder(kind), max_bytes=limit)
    except InvalidInput as refused:
        return refused
    return None


def path_of(refused: InvalidInput) -> str | None:
    """The field a refusal's sanitized message names (`$.error.code` -> `error.code`)."""
    found = [w.strip("`") for w in refused.message.split() if w.startswith("`$")]
    if not found:
        return None
    path = found[0].removeprefix("$").strip(".")
    if refused.code == "missing_field":
        name = refused.message.split("`")[1]
        path = f"{path}.{name}".strip(".")
    return path or None


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_the_services_refuse_each_bad_input_alike(case: dict[str, Any]) -> None:
    refused = services_verdict(case)
    if case.get("services_accept"):
        assert refused is None, "the services refuse it now: drop services_accept"
        return
    assert refused is not None
    assert refused.code == case.get("services_code", case["code"])
    if refused.code in ("payload_too_large", "malformed_json"):
        return  # no field: the message is refused whole
    path = path_of(refused)
    assert path is not None
    # A time is checked by its Struct after its pattern: the services name the Struct's path.
    assert case["field"] == path or case["field"].startswith(f"{path}."), (case["field"], path)


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_the_services_take_each_good_input(case: dict[str, Any]) -> None:
    assert services_verdict(case) is None


def test_a_refusal_is_told_apart() -> None:
    """The check can fail: an input the file calls bad that the services take is noticed."""
    assert services_verdict({"call": "decide", "input": {}}) is None
    assert services_verdict({"call": "decide", "input": {"adapter": "a" * 257}}) is not None


def test_the_file_covers_every_limit_a_call_can_break() -> None:
    fields = {c["field"] for c in BAD}
    assert {
        "error.code",
        "error.type",
        "error.message",
        "pending_tool_call.tool_name",
        "pending_tool_call.tool_call_id",
        "pending_tool_call.started_at",
        "pending_tool_call.recorded_outcome",
        "adapter",
        "model",
        "cwd",
        "cursor",
        "latest_cursor",
        "prompt_hash",
        "command_result.command",
        "command_result.status",
        "command_result.classification",
        "command_result.signature",
        "command_result.key_id",
        "command_result.issued_at",
        "session.tenant",
        "session.conversation_id",
        "session.agent_id",
        "run_id",
        "event_id",
        "native_session_id",
        "ready_generation",
        "compatibility_generation",
        "runner_id",
        "attempt",
        "epoch",
        "expected_revision",
        "checkpoint_policy",
        "compatibility",
        "code",
        "cancelled",
        "governed_wait_elapsed",
    } <= fields
    times = {arguments(c).get("issued_at") for c in BAD if c["call"] == "sign_command_result"}
    assert {
        "2026-11-30T12:00:00+02:00",
        "2026-11-30T12:00:00-00:00",
        "2026-02-30T12:00:00Z",
        "2026-02-29T12:00:00Z",
        "2026-13-01T12:00:00Z",
        "2026-12-31T23:59:60Z",
    } <= times
    attempts = {json.dumps(arguments(c)["attempt"]) for c in BAD if c["field"] == "attempt"}
    assert {"0", "1001"} <= attempts
    epochs = {arguments(c)["epoch"] for c in BAD if c["field"] == "epoch"}
    assert {-1, 2**53} <= epochs
    oversized = {c["call"] for c in BAD if c["code"] == "payload_too_large"}
    assert {"report_resume_failure", "decide", "commit"} <= oversized
    assert {c["call"] for c in GOOD} == set(INPUTS["calls"])
    names = [c["name"] for c in BAD + GOOD + ARCHIVE_ANSWERS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", ARCHIVE_ANSWERS, ids=[c["name"] for c in ARCHIVE_ANSWERS])
def test_the_archive_answer_is_the_files(case: dict[str, Any]) -> None:
    result, answer = ArchiveResult(**expand(case["result"])), ArchiveResult(**expand(case["answer"]))
    assert archive_answer(result) == answer
