"""The classifier's choice as a pure function: no servers, a fixed clock."""

from __future__ import annotations

import msgspec
import pytest

from services.classifier.step import Choice, SlotView, Unverified, announced_ids, choose, failure_class_of
from shared.contract import signing, subjects
from shared.contract.decisions import ArchiveWork, Decision, ReconcileWork
from shared.contract.events import CommandResult, ErrorInfo, ResumeFailed, ToolCall
from shared.contract.sessions import SessionRef
from shared.contract.times import rfc3339_from_epoch
from shared.contract.types import FailureClass
from shared.platform.redis.store import pairs
from shared.policy import SHIPPED
from shared.records.session import (
    NO_SESSION,
    SAVED_FIELDS,
    SavedSession,
    saved_session,
    saved_session_of,
)
from shared.records.steps import run_fields_arg

NOW = 1_800_000_000.25
SESSION = SessionRef(tenant="t", conversation_id="c", agent_id="a")
KEYS = {"k1": b"0123456789abcdef0123456789abcdef"}
REPLACING = SavedSession(policy="allow_replacement_after_resume_failure", epoch=4)


def event(attempt: int = 1, **kw: object) -> ResumeFailed:
    return ResumeFailed(
        type="resume_failed",
        event_id="e1",
        runner_id="r1",
        run_id="run-1",
        attempt=attempt,
        session=SESSION,
        native_session_id="ns-1",
        occurred_at="2027-01-15T08:00:00.000Z",
        **kw,  # type: ignore[arg-type]
    )


def signed(classification: str, key: bytes = KEYS["k1"]) -> CommandResult:
    unsigned = CommandResult(
        command="resume",
        status="failed",
        classification=classification,
        issued_at="2027-01-15T08:00:00.000Z",
        key_id="k1",
        signature="0" * 64,
    )
    unsigned.signature = signing.sign(key, "r1", "run-1", 1, unsigned)
    return unsigned


def choice(ev: ResumeFailed, saved: SavedSession, failure_class: FailureClass = "unclassified") -> Choice:
    source = "none" if failure_class == "unclassified" else "error_code"
    return choose(
        ev, (failure_class, source), saved, NOW, backoff_s=5.0, published_at=NOW - 1, policy=SHIPPED
    )


def test_a_retry_waits_the_backoff_of_its_attempt_and_holds_nothing() -> None:
    chosen = choice(event(attempt=2), SavedSession(policy="same_session_only", epoch=3))
    assert (chosen.verdict, chosen.reason) == ("retry_same_session", "native_session_interrupted")
    step = chosen.step
    decision = msgspec.json.decode(step.slot_value, type=Decision)
    assert decision.decision_id == "run-1:2:retry_same_session"
    assert decision.not_before == rfc3339_from_epoch(NOW + 10.0)
    assert decision.decided_at == rfc3339_from_epoch(NOW)
    assert decision.epoch == 3
    assert step.slot == "2" and step.hold is None
    assert step.read == ("same_session_only", 3)
    [entry] = step.outbox
    assert (entry.subject, entry.msg_id, entry.payload) == (
        subjects.decisions("r1"),
        decision.decision_id,
        step.slot_value,
    )
    assert step.run_fields["status"] == "retrying"
    # The run record's last decision is the slot value, sent once: the script copies it.
    assert step.slot_is_last_decision and "last_decision" not in step.run_fields
    assert msgspec.json.decode(run_fields_arg(step))["last_decision"] is True
    assert step.audit is not None
    assert (step.audit.at, step.audit.actor, step.audit.action, step.audit.decision_id) == (
        decision.decided_at,
        "classifier",
        "retry_same_session",
        decision.decision_id,
    )


def test_an_operator_decision_holds_the_saved_session() -> None:
    chosen = choice(event(), NO_SESSION, "provider_attach_refused")
    assert chosen.verdict == "operator"
    assert chosen.step.hold == "ns-1"
    assert chosen.step.read == ("", 0)
    decision = msgspec.json.decode(chosen.step.slot_value, type=Decision)
    assert decision.not_before is None and decision.epoch is None
    assert chosen.step.run_fields["status"] == "operator"


def test_a_pending_tool_call_is_reconciled_with_its_work_item() -> None:
    call = ToolCall(tool_call_id="tc-1", tool_name="deploy", started_at="2027-01-15T07:59:00.000Z")
    chosen = choice(event(pending_tool_call=call), REPLACING)
    assert chosen.verdict == "reconcile" and chosen.step.hold == "ns-1"
    decision_entry, work_entry = chosen.step.outbox
    assert decision_entry.msg_id == "run-1:1:reconcile"
    assert (work_entry.subject, work_entry.msg_id) == (subjects.WORK_RECONCILE, "work:run-1:1:reconcile")
    work = msgspec.json.decode(work_entry.payload, type=ReconcileWork)
    assert work.decision_id == decision_entry.msg_id and work.tool_call == call
    assert work.opened_at == rfc3339_from_epoch(NOW)


def test_a_replaceable_session_is_archived_first_without_a_runner_decision() -> None:
    chosen = choice(event(), REPLACING)
    assert (chosen.verdict, chosen.reason) == ("archive", "native_session_continuity_break")
    step = chosen.step
    work = msgspec.json.decode(step.slot_value, type=ArchiveWork)
    assert (work.archive_id, work.failure_class, work.event_published_at) == (
        "run-1-1",
        "unclassified",
        NOW - 1,
    )
    [entry] = step.outbox
    assert (entry.subject, entry.msg_id) == (subjects.WORK_ARCHIVE, "work:run-1:1:archive")
    assert step.run_fields["status"] == "replacing" and "last_decision" not in step.run_fields
    assert not step.slot_is_last_decision and b"last_decision" not in run_fields_arg(step)
    assert step.hold is None and step.read == ("allow_replacement_after_resume_failure", 4)
    assert step.audit is not None and (step.audit.action, step.audit.decision_id) == ("archive", None)


def test_the_attempt_budget_sends_the_third_failure_to_an_operator() -> None:
    assert choice(event(attempt=2), REPLACING).verdict == "archive"
    chosen = choice(event(attempt=3), REPLACING)
    assert (chosen.verdict, chosen.reason) == ("operator", "native_session_retry_exhausted")


def test_a_verified_command_result_classifies_and_a_forged_one_quarantines() -> None:
    assert failure_class_of(event(command_result=signed("provider_attach_refused")), KEYS) == (
        "provider_attach_refused",
        "command_result",
    )
    typed = event(error=ErrorInfo(type="t", code="native_event_replay_conflict", message="ignored"))
    assert failure_class_of(typed, KEYS) == ("event_replay_conflict", "error_code")
    forged = event(command_result=signed("provider_attach_refused", key=b"another key"))
    assert failure_class_of(forged, KEYS) == Unverified("signature_invalid")


def test_a_missing_session_continues_fresh_and_rejects_the_saved_handle() -> None:
    chosen = choice(event(attempt=3), REPLACING, "native_session_missing")
    assert (chosen.verdict, chosen.reason) == ("continue_fresh", "native_session_missing")
    step = chosen.step
    assert (step.hold, step.reject) == (None, "ns-1")
    assert step.read == ("allow_replacement_after_resume_failure", 4)
    decision = msgspec.json.decode(step.slot_value, type=Decision)
    assert decision.decision_id == "run-1:3:continue_fresh" and decision.rule == "4.4.10"
    assert decision.not_before is None and decision.epoch == 4
    assert decision.failure_class == "native_session_missing"
    assert step.run_fields["status"] == "continued"


@pytest.mark.parametrize(
    ("failure_class", "reason", "rule"),
    [
        ("context_overflow", "native_context_overflow", "4.4.11"),
        ("transcript_corrupt", "native_transcript_corrupt", "4.4.12"),
    ],
)
def test_an_overflow_or_a_corrupt_transcript_holds_the_session(
    failure_class: str, reason: str, rule: str
) -> None:
    chosen = choice(event(), REPLACING, failure_class)  # type: ignore[arg-type]
    assert (chosen.verdict, chosen.reason, chosen.explanation.rule) == ("operator", reason, rule)
    assert (chosen.step.hold, chosen.step.reject) == ("ns-1", None)


def test_a_busy_session_is_retried_after_the_backoff_then_stops_at_the_budget() -> None:
    chosen = choice(event(attempt=2), REPLACING, "session_busy")
    assert (chosen.verdict, chosen.reason, chosen.explanation.rule) == (
        "retry_same_session",
        "native_session_busy",
        "4.4.13",
    )
    decision = msgspec.json.decode(chosen.step.slot_value, type=Decision)
    assert decision.not_before == rfc3339_from_epoch(NOW + 10.0)
    assert (chosen.step.hold, chosen.step.reject) == (None, None)
    last = choice(event(attempt=3), REPLACING, "session_busy")
    assert (last.verdict, last.reason, last.explanation.rule) == (
        "operator",
        "native_session_retry_exhausted",
        "4.4.6",
    )


def test_a_signed_harness_class_is_read_from_the_command_result_only() -> None:
    for failure_class in ("native_session_missing", "context_overflow", "transcript_corrupt", "session_busy"):
        assert failure_class_of(event(command_result=signed(failure_class)), KEYS) == (
            failure_class,
            "command_result",
        )
        typed = event(error=ErrorInfo(type="t", code=failure_class, message=failure_class))
        assert failure_class_of(typed, KEYS) == ("unclassified", "none")


def test_the_saved_session_is_read_from_its_fields_alone() -> None:
    # HMGET of SAVED_FIELDS: policy, epoch, handle.
    assert saved_session_of([b"allow_replacement_after_resume_failure", b"4", b"ns"]) == REPLACING
    assert saved_session_of([None, None, None]) == NO_SESSION  # no record at all
    # A record of an older release has no epoch: 0, not "no record".
    assert saved_session_of([b"same_session_only", None, b"ns"]) == SavedSession("same_session_only", 0)
    assert saved_session_of([None, None, b"ns"]) == SavedSession(None, 0)
    whole = {b"checkpoint_policy": b"same_session_only", b"native_session_id": b"ns", b"cwd": b"/"}
    assert saved_session(whole) == saved_session_of([whole.get(k.encode()) for k in SAVED_FIELDS])


def test_the_saved_session_is_read_from_either_reply_form() -> None:
    flat = [b"checkpoint_policy", b"allow_replacement_after_resume_failure", b"epoch", b"4"]
    assert saved_session(pairs(flat)) == REPLACING  # the flat reply, as `Redis.hgetall` reads it
    assert (
        saved_session({b"checkpoint_policy": b"allow_replacement_after_resume_failure", b"epoch": b"4"})
        == REPLACING
    )
    assert saved_session({b"native_session_id": b"ns"}) == SavedSession(policy=None, epoch=0)
    assert saved_session(pairs([])) == NO_SESSION


def test_a_recorded_slot_names_the_messages_its_step_announced() -> None:
    assert announced_ids(SlotView(type="archive"), "run-1", 2) == ["work:run-1:2:archive"]
    assert announced_ids(SlotView(type="decision", action="reconcile"), "run-1", 2) == [
        "run-1:2:reconcile",
        "work:run-1:2:reconcile",
    ]
    assert announced_ids(SlotView(type="decision", action="operator"), "run-1", 2) == ["run-1:2:operator"]
    assert announced_ids(SlotView(type="other"), "run-1", 2) == []


def test_every_choice_is_explained_by_its_row_and_its_inputs() -> None:
    chosen = choice(event(attempt=2, governed_wait_elapsed=True), REPLACING)
    why = chosen.explanation
    assert (why.rule, why.policy, why.failure_class, why.class_source) == (
        "4.4.7",
        "shipped-1",
        "unclassified",
        "none",
    )
    assert (why.attempt, why.budget, why.checkpoint_policy) == (
        2,
        3,
        "allow_replacement_after_resume_failure",
    )
    assert why.governed_wait_elapsed and not why.pending_tool_call and not why.budget_spent
    # Recorded by the same step as the decision: in its audit entry.
    assert chosen.step.audit is not None and chosen.step.audit.explanation == why
    held = choice(event(), REPLACING, "provider_state_incompatible")
    assert held.explanation.rule == "4.4.2" and held.explanation.class_source == "error_code"
    decided = msgspec.json.decode(held.step.slot_value, type=Decision)
    assert decided.rule == "4.4.2"  # the runner's decision names its row


def test_an_explanation_stays_within_its_size_bound() -> None:
    why = choice(event(attempt=3), REPLACING, "source_reconciliation_required").explanation
    assert len(msgspec.json.encode(why)) <= 300
