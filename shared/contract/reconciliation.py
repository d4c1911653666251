"""Reconciliation records, runs and operator requests (contract section 6)."""

from __future__ import annotations

import msgspec

from shared.contract.decisions import Decision, Explanation
from shared.contract.sessions import SessionRef
from shared.contract.types import (
    ActionOutcome,
    Cursor,
    Evidence,
    Limit,
    ReconciliationStatus,
    RecordedOutcome,
    RunStatus,
    Time,
    Token,
)


class ListRequest(msgspec.Struct, kw_only=True):
    status: ReconciliationStatus | None = None
    limit: Limit = 100
    cursor: Cursor | None = None
    """A reply's `next_cursor`: the page after it (an addition to the contract)."""


class RunRequest(msgspec.Struct, kw_only=True):
    """`{"run_id"}`: the request of `reconciliations.get` and `runs.get`."""

    run_id: Token


class ResolveRequest(msgspec.Struct, kw_only=True):
    run_id: Token
    action_outcome: ActionOutcome
    evidence: Evidence
    actor: Token


class Resolution(msgspec.Struct, kw_only=True):
    action_outcome: ActionOutcome
    evidence: str
    actor: str
    resolved_at: Time


class ToolCallRecord(msgspec.Struct, kw_only=True):
    """A record's tool call, as shown: the shape of the event's `ToolCall`, read without the
    input limits, so a record opened before a limit existed can still be read and shown."""

    tool_call_id: str
    tool_name: str
    started_at: str
    recorded_outcome: RecordedOutcome | None = None


class ReconciliationRecord(msgspec.Struct, kw_only=True, omit_defaults=False):
    run_id: str
    runner_id: str
    session: SessionRef
    attempt: int
    tool_call: ToolCallRecord | None
    recorded_outcome: RecordedOutcome | None
    status: ReconciliationStatus
    opened_at: str
    resolution: Resolution | None = None


class ListReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    items: list[ReconciliationRecord]
    next_cursor: str | None = None
    """Null when the list ended; else the `cursor` of the next page (an addition)."""


class DeliveredReply(msgspec.Struct, kw_only=True):
    """Reply of `resolve` and of `operator.retry` (the latter an addition)."""

    status: str
    decision_id: str


class RetryRequest(msgspec.Struct, kw_only=True):
    run_id: Token
    actor: Token


class RunView(msgspec.Struct, kw_only=True, omit_defaults=False):
    run_id: str
    runner_id: str
    session: SessionRef
    attempt: int
    status: RunStatus
    last_decision: Decision | None = None


class AuditEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of a run's audit trail: what was decided or done, by whom, when (an addition)."""

    at: str
    kind: str
    actor: str
    attempt: int
    action: str | None = None
    reason: str | None = None
    decision_id: str | None = None
    outcome: str | None = None
    explanation: Explanation | None = None
    """Why the classifier decided so (9.11): present on its decisions and archive requests."""
    status: str | None = None
    """The final status an `outcome` entry gave the run (4.6)."""
    recovery_ms: int | None = None
    """On an `outcome` entry of a completed turn: from the run's first failure to the turn, as
    JetStream stored the two events (4.6)."""


class AuditReply(msgspec.Struct, kw_only=True):
    """Reply of `continuity.runs.audit` (an addition): the trail, oldest first."""

    run_id: str
    items: list[AuditEntry]
