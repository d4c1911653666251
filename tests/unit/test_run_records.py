"""shared.records without servers: names, building decisions, the session hash, script arguments."""

from __future__ import annotations

import msgspec
import pytest

from shared.contract.decisions import Decision
from shared.contract.reconciliation import AuditEntry
from shared.contract.sessions import SessionRef
from shared.platform.redis.store import pairs
from shared.records import decisions, names, session, steps
from shared.records.retention import DEFAULT

NOW = 1_800_000_000.0


class _Run(msgspec.Struct):
    run_id: str
    runner_id: str
    attempt: int
    session: SessionRef


RUN = _Run("run-1", "r1", 2, SessionRef(tenant="t", conversation_id="c", agent_id="a"))


def test_slots_and_message_ids() -> None:
    assert names.decision_id("run-1", 2, "operator") == "run-1:2:operator"
    assert [names.classifier_slot(2), names.archive_slot(2), names.continue_slot(2)] == [
        "2",
        "2:archive",
        "2:continue",
    ]
    assert names.work_id("run-1", 2, "archive") == "work:run-1:2:archive"
    assert names.work_id("run-1", 2, "reconcile") == "work:run-1:2:reconcile"


def test_only_a_retry_carries_a_not_before() -> None:
    retry = decisions.decision(RUN, "retry_same_session", "native_session_interrupted", NOW, backoff_s=1.5)
    assert retry.not_before is not None and retry.not_before.startswith("2027-01-15T08:00:03.000")
    operator = decisions.decision(RUN, "operator", "native_session_interrupted", NOW, backoff_s=1.5)
    assert operator.not_before is None


def test_the_hold_rule_and_the_budget() -> None:
    assert {a for a in decisions.STATUS_BY_ACTION if decisions.holds_session(a)} == {"operator", "reconcile"}
    assert [decisions.within_budget(a) for a in (1, 2, 3)] == [True, True, False]


def test_a_decision_step_holds_only_for_a_holding_action() -> None:
    held = decisions.decision(RUN, "operator", "native_event_replay_conflict", NOW)
    step = decisions.decision_step(held, "2", "svc", native_session_id="ns")
    assert step.hold == "ns"
    fresh = decisions.decision(RUN, "continue_fresh", "operator_retry", NOW)
    step = decisions.decision_step(
        fresh, "2:continue", "alice", native_session_id="ns", audit_kind="operator_retry"
    )
    assert step.hold is None
    assert step.audit == AuditEntry(
        at=fresh.decided_at,
        kind="operator_retry",
        actor="alice",
        attempt=2,
        action="continue_fresh",
        reason="operator_retry",
        decision_id=fresh.decision_id,
    )
    assert step.run_fields["status"] == "continued"
    assert msgspec.json.decode(step.slot_value, type=Decision) == fresh


def test_session_hash_fields() -> None:
    assert session.integer(None) == 0 and session.integer(b"x") == 0
    assert session.integer(b"7") == 7
    assert session.text(None) == "" and session.text("s") == "s"
    assert session.text(b"\xff") == "\ufffd"
    assert pairs([b"a", b"1"]) == {b"a": b"1"}


def test_every_script_takes_the_step_in_the_same_order() -> None:
    decided = decisions.decision(RUN, "operator", "native_event_replay_conflict", NOW)
    step = decisions.decision_step(decided, "2", "svc", native_session_id="ns")
    step.read = ("same_session_only", 3)
    args = steps.step_args(step)
    assert args[:2] == ["2", step.slot_value]
    # The run fields, with the last decision standing for the slot value the script copies.
    assert msgspec.json.decode(args[2]) == {**step.run_fields, "last_decision": True}
    assert msgspec.json.decode(args[3]) == [
        [decided.decision_id, msgspec.json.encode(step.outbox[0]).decode()]
    ]
    assert msgspec.json.decode(args[4], type=AuditEntry) == step.audit
    assert args[5:9] == ["ns", "1", "same_session_only", "3"]
    # Then the retention, and whether the step waits on a person (an operator's does).
    assert args[9:11] == [str(DEFAULT.run_ms), "1"]
    # Then the runner the step answers ('' for none: no ownership check, contract 10.4), and
    # last the handle to reject ('' for none: an operator decision holds, it never rejects).
    assert args[11:] == ["", ""]
    step.for_runner = "runner-a"
    assert steps.step_args(step)[11:] == ["runner-a", ""]
    fresh = decisions.decision(RUN, "continue_fresh", "native_session_missing", NOW)
    rejecting = decisions.decision_step(fresh, "2", "svc", native_session_id="ns", rejects_session=True)
    assert (rejecting.hold, rejecting.reject) == (None, "ns")
    assert steps.step_args(rejecting)[5] == "" and steps.step_args(rejecting)[12] == "ns"
    assert decisions.decision_step(fresh, "2", "svc", native_session_id="ns").reject is None
    with pytest.raises(ValueError, match="does not reject"):
        decisions.decision_step(decided, "2", "svc", native_session_id="ns", rejects_session=True)
    step.read = None
    assert steps.step_args(step)[6:9] == ["0", "", "0"]
    assert steps.outbox_arg([]) == ""
