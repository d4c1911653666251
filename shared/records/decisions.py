"""Building every Decision a service records, and every `RunStep` that records a run's step.

The attempt budget, the backoff of `retry_same_session` and the hold rule live here, once:
the classifier's table, the archiver and the reconciliation service all build through
`decision` and `decision_step` (or `archive_step`, the classifier's request for an archive).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from shared.contract import limits, subjects
from shared.contract.decisions import ArchiveWork, Decision, Explanation, ReconcileWork
from shared.contract.reconciliation import AuditEntry
from shared.contract.sessions import SessionRef
from shared.contract.times import rfc3339_from_epoch
from shared.contract.types import Action, ActionOutcome, DecisionReason, FailureClass, RunStatus
from shared.platform import tracing
from shared.records import names
from shared.records.names import decision_id
from shared.records.outbox import OutboxEntry
from shared.records.steps import RunStep, run_fields

ATTEMPT_BUDGET = limits.ATTEMPT_BUDGET

HOLDING_ACTIONS: frozenset[str] = frozenset({"reconcile", "operator"})
"""The actions after which the saved session is left exactly as it was, `held` (contract 4.4,
last line); the classifier's table states it per row and a unit test keeps the two alike."""

REJECTING_ACTIONS: frozenset[str] = frozenset({"continue_fresh"})
"""The actions after which a table's row rejects the saved handle (contract 4.4); the policy
states it per row (`Row.rejects_session`) and a unit test keeps the two alike."""

STATUS_BY_ACTION: dict[Action, RunStatus] = {
    "retry_same_session": "retrying",
    "open_replacement": "replacing",
    "operator": "operator",
    "reconcile": "reconciling",
    "continue_fresh": "continued",
}

_encode = msgspec.json.Encoder().encode


class Run(Protocol):
    """What a decision needs of its run: an event, a work item, a record or a run view."""

    @property
    def run_id(self) -> str: ...
    @property
    def runner_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def session(self) -> SessionRef: ...


def holds_session(action: str) -> bool:
    """Whether a decision with this action holds the saved session."""
    return action in HOLDING_ACTIONS


def rejects(action: str) -> bool:
    """Whether a table's decision with this action may reject the saved handle (contract 4.4):
    a `continue_fresh` of the classifier's table; an operator's `continue_fresh` keeps the held
    session as it is (contract 6)."""
    return action in REJECTING_ACTIONS


def within_budget(attempt: int) -> bool:
    """Whether a failure at this attempt may still be retried; at the budget an operator decides."""
    return attempt < ATTEMPT_BUDGET


def retry_delay_s(base_s: float, attempt: int) -> float:
    """Backoff of `retry_same_session`: the base, doubled for every earlier attempt."""
    return base_s * 2.0 ** (attempt - 1)


def decision(
    run: Run,
    action: Action,
    reason: DecisionReason,
    now: float,
    *,
    backoff_s: float = 0.0,
    failure_class: FailureClass | None = None,
    epoch: int | None = None,
    detail: str | None = None,
    reconciled_outcome: ActionOutcome | None = None,
    rule: str | None = None,
) -> Decision:
    """The decision for `run`, decided at `now` (epoch seconds); a `retry_same_session` is not
    to be tried before the backoff of its attempt."""
    return Decision(
        decision_id=decision_id(run.run_id, run.attempt, action),
        runner_id=run.runner_id,
        run_id=run.run_id,
        attempt=run.attempt,
        session=run.session,
        action=action,
        reason=reason,
        failure_class=failure_class,
        epoch=epoch,
        not_before=(
            rfc3339_from_epoch(now + retry_delay_s(backoff_s, run.attempt))
            if action == "retry_same_session"
            else None
        ),
        detail=detail,
        reconciled_outcome=reconciled_outcome,
        decided_at=rfc3339_from_epoch(now),
        rule=rule,
    )


def decision_entry(decided: Decision) -> OutboxEntry:
    """The outbox entry that publishes `decided` to its runner, de-duplicated by its id; its
    payload is also the slot value that records the decision."""
    return OutboxEntry(
        subject=subjects.decisions(decided.runner_id),
        msg_id=decided.decision_id,
        payload=_encode(decided),
        trace=tracing.recorded(),
    )


def decision_audit(
    decided: Decision, actor: str, kind: str = "decision", explanation: Explanation | None = None
) -> AuditEntry:
    """The audit entry of `decided` by `actor`: a plain decision, or an operator's step (`kind`)
    with the outcome it reconciled, and why a table decided it (`explanation`)."""
    return AuditEntry(
        at=decided.decided_at,
        kind=kind,
        actor=actor,
        attempt=decided.attempt,
        action=decided.action,
        reason=decided.reason,
        decision_id=decided.decision_id,
        outcome=decided.reconciled_outcome,
        explanation=explanation,
    )


def decision_step(
    decided: Decision,
    slot: str,
    actor: str,
    *,
    native_session_id: str | None = None,
    also: Sequence[OutboxEntry] = (),
    audit_kind: str = "decision",
    read: tuple[str, int] | None = None,
    for_runner: str | None = None,
    explanation: Explanation | None = None,
    rejects_session: bool = False,
) -> RunStep:
    """The step recording `decided` in `slot`: its outbox entry (then `also`), the run record,
    the audit entry of `audit_kind` by `actor` and, when the action holds the saved session,
    the hold of `native_session_id`; with `rejects_session` (a table's row that says so, only
    for `continue_fresh`), the rejection of `native_session_id` instead (contract 3.4). The run
    record's `last_decision` is the slot value, which the recording script copies there."""
    if rejects_session and not rejects(decided.action):
        raise ValueError(f"a {decided.action} decision does not reject the saved handle")
    entry = decision_entry(decided)
    return RunStep(
        slot=slot,
        slot_value=entry.payload,
        run_fields=run_fields(
            decided.run_id,
            decided.runner_id,
            decided.session,
            decided.attempt,
            STATUS_BY_ACTION[decided.action],
            None,
            decided.decided_at,
        ),
        slot_is_last_decision=True,
        outbox=[entry, *also],
        audit=decision_audit(decided, actor, audit_kind, explanation),
        hold=native_session_id if native_session_id is not None and holds_session(decided.action) else None,
        reject=native_session_id if rejects_session else None,
        read=read,
        for_runner=for_runner,
    )


def reconcile_entry(work: ReconcileWork) -> OutboxEntry:
    """The outbox entry that asks the reconciliation service to open `work`'s record."""
    return OutboxEntry(
        subject=subjects.WORK_RECONCILE,
        msg_id=names.work_id(work.run_id, work.attempt, "reconcile"),
        payload=_encode(work),
        trace=tracing.recorded(),
    )


def archive_step(
    work: ArchiveWork,
    reason: DecisionReason,
    actor: str,
    now: float,
    *,
    read: tuple[str, int] | None = None,
    for_runner: str | None = None,
    explanation: Explanation | None = None,
) -> RunStep:
    """The step asking for `work` (no runner decision yet: the archiver decides after the
    remote move): the work item in the classifier's slot and the outbox, the run `replacing`."""
    payload = _encode(work)
    at = rfc3339_from_epoch(now)
    return RunStep(
        slot=names.classifier_slot(work.attempt),
        slot_value=payload,
        run_fields=run_fields(work.run_id, work.runner_id, work.session, work.attempt, "replacing", None, at),
        outbox=[
            OutboxEntry(
                subject=subjects.WORK_ARCHIVE,
                msg_id=names.work_id(work.run_id, work.attempt, "archive"),
                payload=payload,
                trace=tracing.recorded(),
            )
        ],
        audit=AuditEntry(
            at=at,
            kind="decision",
            actor=actor,
            attempt=work.attempt,
            action="archive",
            reason=reason,
            explanation=explanation,
        ),
        read=read,
        for_runner=for_runner,
    )
