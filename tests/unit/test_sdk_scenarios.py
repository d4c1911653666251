"""sdk/scenarios.json, the scenarios both runner SDKs play against the services, equals the
simulator's catalogue (continuity/tools/simulate/scenarios.py): the same scenarios in the same order,
the decision contract 4.4 requires for every policy, attempt and governed wait, and an event
for each that carries what the scenario says (checked with the classifier's own rules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from continuity.tools.simulate.scenarios import ATTEMPT_BUDGET, POLICIES, SCENARIOS, Facts, expected
from services.classifier.classify import Evidence, TypedError, classify
from shared.contract import ResumeFailed

DOC: dict[str, Any] = json.loads((Path(__file__).parents[2] / "sdk" / "scenarios.json").read_text())
BY_NAME: dict[str, dict[str, Any]] = {s["name"]: s for s in DOC["scenarios"]}
HARNESSES: dict[str, Any] = json.loads((Path(__file__).parents[2] / "sdk" / "harnesses.json").read_text())


def expected_rows(name: str) -> list[dict[str, Any]]:
    scenario = SCENARIOS[name]
    if scenario.failure_class is None:
        return []
    rows = []
    for policy in POLICIES:
        for attempt in range(1, ATTEMPT_BUDGET + 1):
            for governed in (False, True):
                e = expected(
                    Facts(scenario.failure_class, scenario.pending_tool_call, attempt, policy, governed)
                )
                archive = e.verdict == "archive"
                rows.append(
                    {
                        "policy": policy,
                        "attempt": attempt,
                        "governed_wait_elapsed": governed,
                        "action": "open_replacement" if archive else e.verdict,
                        "archive_first": archive,
                        "reason": e.reason,
                        "rule": e.rule,
                    }
                )
    return rows


def event_of(fields: dict[str, Any]) -> ResumeFailed:
    """The scenario's event as the SDKs build it (the signature itself is checked by the SDK tests)."""
    event: dict[str, Any] = {
        "type": "resume_failed",
        "event_id": "e-1",
        "runner_id": "runner-a",
        "run_id": "r-1",
        "attempt": 1,
        "session": {"tenant": "t", "conversation_id": "c", "agent_id": "a"},
        "native_session_id": "n-1",
        "occurred_at": "2026-11-30T12:00:00.000Z",
        "error": fields.get("error"),
        "governed_wait_elapsed": False,
    }
    if "command_result" in fields:
        result = {k: v for k, v in fields["command_result"].items() if k != "key"}
        event["command_result"] = {
            **result,
            "issued_at": "2026-11-30T12:00:00.000Z",
            "key_id": "k1",
            "signature": "00",
        }
    if "pending_tool_call" in fields:
        call = fields["pending_tool_call"]
        event["pending_tool_call"] = {
            **call,
            "tool_call_id": "tc-1",
            "started_at": "2026-11-30T12:00:00.000Z",
        }
    return msgspec.convert(event, ResumeFailed)


def test_the_file_lists_the_catalogue_in_order() -> None:
    assert [s["name"] for s in DOC["scenarios"]] == list(SCENARIOS)
    assert DOC["attempt_budget"] == ATTEMPT_BUDGET
    assert DOC["policies"] == list(POLICIES)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_scenario_equals_the_catalogue(name: str) -> None:
    scenario, entry = SCENARIOS[name], BY_NAME[name]
    assert {k: entry[k] for k in ("label", "sends", "outcome", "failure_class", "pending_tool_call")} == {
        "label": scenario.label,
        "sends": scenario.sends,
        "outcome": scenario.outcome,
        "failure_class": scenario.failure_class,
        "pending_tool_call": scenario.pending_tool_call,
    }
    assert (entry["dead"], entry["dead_reason"]) == (scenario.dead, scenario.dead_reason)
    assert entry["expect"] == expected_rows(name)
    harness = scenario.harness
    assert entry["success_probability"] == scenario.success_probability
    assert entry["harness"] == (
        None if harness is None else {"name": harness.name, "version": harness.version}
    )


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_decided_scenario_has_a_probability_and_a_known_harness(name: str) -> None:
    """Every scenario that gets a decision says how often its decided attempts then complete a
    turn, and names a harness of the shipped table (a dead-lettered one: neither); no two name
    the same harness, so that `continuity.runs.stats` rows tell the scenarios apart."""
    scenario = SCENARIOS[name]
    if scenario.failure_class is None:
        assert (scenario.success_probability, scenario.harness) == (None, None)
        return
    assert scenario.success_probability is not None and 0.0 < scenario.success_probability < 1.0
    assert scenario.harness is not None
    assert scenario.harness.name in {h["name"] for h in HARNESSES["harnesses"]}
    named = [s.harness.name for s in SCENARIOS.values() if s.harness is not None]
    assert named.count(scenario.harness.name) == 1


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_event_carries_what_the_scenario_says(name: str) -> None:
    scenario, fields = SCENARIOS[name], BY_NAME[name]["event"]
    if "raw" in fields:
        assert scenario.dead == "invalid"
        with pytest.raises(msgspec.DecodeError):
            msgspec.json.decode(fields["raw"].encode(), type=ResumeFailed)
        return
    event = event_of(fields)
    key = fields.get("command_result", {}).get("key")
    assert key in (None, "live", "wrong", "unknown")
    if scenario.dead == "quarantine":
        assert key == {"signature_invalid": "wrong", "unknown_key": "unknown"}[scenario.dead_reason or ""]
        return
    assert scenario.dead is None and key in (None, "live")
    # A live key's result is authenticated; the class comes from it or the typed error only.
    classification = event.command_result.classification if event.command_result else None
    found, _ = classify(Evidence(classification, TypedError.of(event.error)))
    assert found == scenario.failure_class
    assert (event.pending_tool_call is not None) == scenario.pending_tool_call
    assert ("resend" in fields) == (name == "duplicate")


def test_a_changed_row_is_noticed() -> None:
    """The comparison can fail: one flipped reason no longer equals the catalogue."""
    rows = [dict(r) for r in BY_NAME["drop"]["expect"]]
    rows[0]["reason"] = "native_session_continuity_break"
    assert rows != expected_rows("drop")
