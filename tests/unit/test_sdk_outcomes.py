"""The outcome messages of the Python runner SDK (contract 4.6) are the services' byte for byte:
a `turn_completed` the SDK makes decodes as the server's `TurnCompleted` and back, its signed
result verifies under the server's check, and harness names and versions are taken or refused
alike. (Published on real NATS: tests/integration/test_sdk_outcomes.py.)"""

from __future__ import annotations

import msgspec
import pytest
from continuity_runner import HarnessInfo, ResumeFailed, SessionRef, TurnCompleted, harness
from continuity_runner.checks import encode_checked
from continuity_runner.contract import TURN_COMMAND, TURN_STATUS
from continuity_runner.limits import MAX_EVENT_BYTES
from continuity_runner.signing import sign_command_result

import shared.contract as server
from shared.contract.signing import Verdict, verify

KEYS = {"k1": b"the key of the outcome unit tests"}
SESSION = SessionRef(tenant="acme", conversation_id="conv-1", agent_id="claude")


def turn(harness_info: HarnessInfo | None) -> TurnCompleted:
    result = sign_command_result("k1", KEYS["k1"], "runner-a", "run-1", 2, TURN_COMMAND, TURN_STATUS)
    return TurnCompleted(
        type="turn_completed",
        event_id="evt-1",
        runner_id="runner-a",
        run_id="run-1",
        attempt=2,
        session=SESSION,
        native_session_id="ns-1",
        occurred_at="2026-12-06T20:00:00.000Z",
        result=result,
        harness=harness_info,
    )


@pytest.mark.parametrize(
    "info", [None, HarnessInfo(name="codex"), HarnessInfo(name="claude-code", version="2.1.332")]
)
def test_a_turn_the_sdk_makes_is_the_servers_and_verifies(info: HarnessInfo | None) -> None:
    event = turn(info)
    payload = encode_checked(event, MAX_EVENT_BYTES)
    theirs = msgspec.json.decode(payload, type=server.TurnCompleted)
    assert msgspec.to_builtins(theirs) == msgspec.to_builtins(event)
    assert msgspec.json.encode(theirs) == payload
    assert (theirs.result.command, theirs.result.status, theirs.result.classification) == (
        "turn",
        "completed",
        None,
    )
    assert verify(KEYS, "runner-a", "run-1", 2, theirs.result) is Verdict.VALID


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("claude-code", "2.1.332"),
        ("gemini-cli", "0.9.0-nightly.20260101+abc"),
        ("a.b_c", "V1"),
        ("Claude", None),
        ("-codex", None),
        ("codex", "-1"),
        ("codex", ".1"),
        ("codex\n", None),
        ("codex", "1 0"),
        ("x" * 64, "1" * 64),
        ("x" * 65, None),
        ("codex", "1" * 65),
        ("", None),
    ],
)
def test_harness_names_and_versions_are_taken_or_refused_as_the_server_does(
    name: str, version: str | None
) -> None:
    body = msgspec.json.encode({"name": name, "version": version})

    def takes(cls: type[msgspec.Struct]) -> bool:
        try:
            msgspec.json.decode(body, type=cls)
        except msgspec.ValidationError:
            return False
        return True

    assert takes(HarnessInfo) == takes(server.HarnessInfo)


def test_a_resume_failure_of_an_earlier_release_decodes_without_a_harness() -> None:
    event = {
        "type": "resume_failed",
        "event_id": "evt-1",
        "runner_id": "runner-a",
        "run_id": "run-1",
        "attempt": 1,
        "session": msgspec.to_builtins(SESSION),
        "native_session_id": "ns-1",
        "occurred_at": "2026-12-06T20:00:00Z",
    }
    assert msgspec.json.decode(msgspec.json.encode(event), type=ResumeFailed).harness is None


def test_a_verdict_of_no_failure_says_whether_a_turn_was_reported() -> None:
    untold = harness.NotAFailure("claude-code.success")
    assert untold.reported_event_id is None and untold == harness.NotAFailure("claude-code.success", None)
    told = harness.NotAFailure("claude-code.success", "evt-1")
    assert told != untold and (told.kind, told.reported_event_id) == ("not_a_failure", "evt-1")
