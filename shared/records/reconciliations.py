"""A run's reconciliation record as the records hold it: its fields when opened, the audit entry
of its opening, and the operator's `continue_fresh` step that ends it."""

from __future__ import annotations

import msgspec

from shared.contract import AuditEntry
from shared.contract.decisions import Decision, ReconcileWork
from shared.contract.times import now_rfc3339
from shared.contract.types import Action, ActionOutcome, DecisionReason
from shared.platform import tracing
from shared.records import decisions, steps
from shared.records.names import continue_slot

CONTINUE_ACTION: Action = "continue_fresh"
SERVICE_ACTOR = "reconciliation"

_encode = msgspec.json.Encoder().encode


TRACE_FIELD = "trace"
"""The `traceparent` of the work that opened the record (tracing on): an operator's resolution
days later delivers its decision in the run's own trace."""


def record_fields(work: ReconcileWork) -> dict[str, str]:
    recorded = work.recorded_outcome
    if recorded is None and work.tool_call is not None:
        recorded = work.tool_call.recorded_outcome
    trace = tracing.recorded()
    return {
        **({TRACE_FIELD: trace} if trace else {}),
        "run_id": work.run_id,
        "runner_id": work.runner_id,
        "session": _encode(work.session).decode(),
        "attempt": str(work.attempt),
        "native_session_id": work.native_session_id,
        "tool_call": _encode(work.tool_call).decode() if work.tool_call else "",
        "recorded_outcome": recorded or "",
        "status": "open",
        "opened_at": work.opened_at,
        "reconcile_decision_id": work.decision_id,
    }


def opened_audit(work: ReconcileWork, fields: dict[str, str]) -> AuditEntry:
    """The audit entry of a record opened for `work` (its `record_fields`)."""
    return AuditEntry(
        at=now_rfc3339(),
        kind="reconciliation_opened",
        actor=SERVICE_ACTOR,
        attempt=work.attempt,
        action="reconcile",
        decision_id=work.decision_id,
        outcome=fields["recorded_outcome"] or None,
    )


def continue_fresh(
    run: decisions.Run,
    reason: DecisionReason,
    actor: str,
    kind: str,
    now: float,
    reconciled_outcome: ActionOutcome | None = None,
) -> tuple[Decision, steps.RunStep]:
    """An operator's `continue_fresh` and the step recording it in the continuation slot, with
    the audit entry of `kind` by `actor`; the saved session is not touched (it stays held)."""
    decided = decisions.decision(run, CONTINUE_ACTION, reason, now, reconciled_outcome=reconciled_outcome)
    return decided, decisions.decision_step(decided, continue_slot(run.attempt), actor, audit_kind=kind)
