"""The classifier's choice for one event, as pure functions: of the event, the runner keys, the
saved session and the clock. They return what to record and publish (a `RunStep` with its
outbox entries); reading, recording and publishing are the handler's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from shared.contract import signing
from shared.contract.decisions import ArchiveWork, Explanation, ReconcileWork
from shared.contract.events import ResumeFailed
from shared.contract.types import Action, ClassSource, DecisionReason, FailureClass
from shared.policy import Policy
from shared.policy.policy import decide_recovery
from shared.policy.recovery import Facts, Row, Verdict, effective_policy
from shared.records import decisions, names
from shared.records.session import SavedSession
from shared.records.steps import RunStep

from .classify import Evidence, TypedError, classify

ACTOR = "classifier"

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Choice:
    """The row that decided, why, and the step that records it."""

    verdict: Verdict
    reason: DecisionReason
    step: RunStep
    explanation: Explanation


@dataclass(frozen=True, slots=True)
class Unverified:
    """A command result whose signature does not verify: the event is quarantined, never decided."""

    reason: str
    """`signature_invalid` or `unknown_key`."""


def failure_class_of(
    event: ResumeFailed, runner_keys: Mapping[str, bytes]
) -> tuple[FailureClass, ClassSource] | Unverified:
    """The event's class and where it was read, or `Unverified` when its command result's
    signature does not verify."""
    result = event.command_result
    authenticated: str | None = None
    if result is not None:
        verdict = signing.verify(runner_keys, event.runner_id, event.run_id, event.attempt, result)
        if verdict is not signing.Verdict.VALID:
            return Unverified(verdict.value)
        authenticated = result.classification
    return classify(Evidence(authenticated_classification=authenticated, error=TypedError.of(event.error)))


def choose(
    event: ResumeFailed,
    classified: tuple[FailureClass, ClassSource],
    saved: SavedSession,
    now: float,
    *,
    backoff_s: float,
    published_at: float | None,
    budget_spent: bool = False,
    policy: Policy,
) -> Choice:
    """The policy's row for the event and the saved session, and the step recording it with
    its explanation; the step is recorded only while the checkpoint policy and epoch it was
    decided on are still stored."""
    failure_class, source = classified
    facts = Facts(
        failure_class=failure_class,
        pending_tool_call=event.pending_tool_call is not None,
        attempt=event.attempt,
        policy=effective_policy(saved.policy),
        governed_wait_elapsed=event.governed_wait_elapsed,
        recovery_budget_spent=budget_spent,
    )
    row, why = decide_recovery(policy, facts, source)
    verdict, reason = row.verdict, row.reason
    # Recorded only while the run and the session are the event's runner's (contract 10.4).
    if verdict == "archive":
        step = decisions.archive_step(
            _archive_work(event, failure_class, published_at, row.id),
            reason,
            ACTOR,
            now,
            read=saved.read,
            for_runner=event.runner_id,
            explanation=why,
        )
    else:
        step = _decision_step(
            event, row, verdict, why, saved, now, backoff_s=backoff_s, failure_class=failure_class
        )
    return Choice(verdict=verdict, reason=reason, step=step, explanation=why)


def _decision_step(
    event: ResumeFailed,
    row: Row,
    action: Action,
    why: Explanation,
    saved: SavedSession,
    now: float,
    *,
    backoff_s: float,
    failure_class: FailureClass,
) -> RunStep:
    """The step of `row`'s decision (`action`: its verdict, never `archive`), and for `reconcile`
    its reconciliation's outbox entry."""
    decided = decisions.decision(
        event,
        action,
        row.reason,
        now,
        backoff_s=backoff_s,
        failure_class=failure_class,
        epoch=saved.epoch,
        rule=row.id,
    )
    also = (
        [decisions.reconcile_entry(_reconcile_work(event, decided.decision_id, decided.decided_at))]
        if action == "reconcile"
        else []
    )
    # A holding action keeps the saved session exactly as it was, for the operator; a row
    # that rejects the saved handle marks it `rejected` in the same step (contract 3.4).
    step = decisions.decision_step(
        decided,
        names.classifier_slot(event.attempt),
        ACTOR,
        native_session_id=event.native_session_id,
        also=also,
        read=saved.read,
        for_runner=event.runner_id,
        explanation=why,
        rejects_session=row.rejects_session,
    )
    return step


def _reconcile_work(event: ResumeFailed, decision_id: str, opened_at: str) -> ReconcileWork:
    tool_call = event.pending_tool_call
    return ReconcileWork(
        runner_id=event.runner_id,
        run_id=event.run_id,
        attempt=event.attempt,
        session=event.session,
        native_session_id=event.native_session_id,
        tool_call=tool_call,
        recorded_outcome=tool_call.recorded_outcome if tool_call is not None else None,
        decision_id=decision_id,
        opened_at=opened_at,
    )


def _archive_work(
    event: ResumeFailed, failure_class: FailureClass, published_at: float | None, rule: str
) -> ArchiveWork:
    return ArchiveWork(
        archive_id=names.archive_id(event.run_id, event.attempt),
        runner_id=event.runner_id,
        run_id=event.run_id,
        attempt=event.attempt,
        session=event.session,
        native_session_id=event.native_session_id,
        failure_class=failure_class,
        event_published_at=published_at,
        rule=rule,
    )


class SlotView(msgspec.Struct):
    """Enough of a recorded slot value (a Decision or an ArchiveWork) to name its messages."""

    type: str
    action: str | None = None


def announced_ids(slot: SlotView, run_id: str, attempt: int) -> list[str]:
    """The outbox message ids the step that wrote `slot` recorded."""
    if slot.type == "archive":
        return [names.work_id(run_id, attempt, "archive")]
    if slot.type == "decision" and slot.action is not None:
        ids = [names.decision_id(run_id, attempt, slot.action)]
        if slot.action == "reconcile":
            ids.append(names.work_id(run_id, attempt, "reconcile"))
        return ids
    return []


SPENDING: frozenset[str] = frozenset({"retry_same_session", "archive"})
"""Verdicts that spend the tenant's recovery budget (retries and replacements)."""
