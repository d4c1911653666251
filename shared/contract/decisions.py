"""Recovery decisions and the work items behind them (contract sections 4.5, 5 and 6).

A runner receives the `Decision`, so it has one home, the runner SDK's
`continuity_runner.contract` (docs/architecture.md, "One home for the contract"); the rest is
the services' own."""

from __future__ import annotations

from typing import Literal

import msgspec
from continuity_runner.contract import Decision

from shared.contract.events import ToolCall
from shared.contract.limits import ATTEMPT_BUDGET
from shared.contract.sessions import SessionRef
from shared.contract.types import (
    Action,
    Attempt,
    CheckpointPolicy,
    ClassSource,
    DecisionReason,
    FailureClass,
    HarnessName,
    HarnessVersion,
    Name,
    OutcomeStatus,
    PolicyVersion,
    RecordedOutcome,
    RowId,
    RunnerId,
    Time,
    Token,
    check_time,
)

__all__ = ["ArchiveWork", "Decision", "Explanation", "ReconcileWork", "RunOutcome"]


class RunOutcome(msgspec.Struct, kw_only=True, omit_defaults=False):
    """How a decided attempt ended (an addition, 4.6), on `continuity.decisions.<runner_id>.outcome`:
    kept in CONTINUITY_DECISIONS for the runs index, never delivered to the runner (its
    consumer takes `continuity.decisions.<runner_id>` alone). Published through the outbox by
    the step that records the outcome, so it is sent once it is recorded, never before."""

    type: Literal["outcome"] = "outcome"
    outcome_id: str
    """`<run_id>:<attempt>:outcome` (`:abandoned` for an abandonment)."""
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    status: OutcomeStatus
    action: Action
    """The action of the decision this outcome judges."""
    reason: DecisionReason
    decision_id: str
    rule: RowId | None = None
    """The policy row of that decision (null for an operator's or a reconciliation's)."""
    failure_class: FailureClass | None = None
    harness: HarnessName | None = None
    harness_version: HarnessVersion | None = None
    recovery_ms: int | None = None
    """From the run's first failure to the completed turn (null when abandoned)."""
    recorded_at: Time


class Explanation(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Why a recovery decision was made (an addition, 9.11): the row that matched and every
    input it read. Recorded by the step that records the decision; never a message text, a
    secret or a generation value. A field at its default is left out of the stored form: an
    explanation is kept with every run, so its common case is short."""

    rule: RowId
    """The matching row's id (`4.4.1` to `4.4.13` in the shipped policy)."""
    policy: PolicyVersion
    """The version of the policy that decided."""
    failure_class: FailureClass
    class_source: ClassSource = "none"
    pending_tool_call: bool = False
    attempt: int
    budget: int = ATTEMPT_BUDGET
    """The attempt budget of contract 4.1."""
    checkpoint_policy: CheckpointPolicy = "same_session_only"
    """The policy read from the session record (`same_session_only` without one)."""
    governed_wait_elapsed: bool = False
    budget_spent: bool = False
    """The tenant's recovery budget was spent (the storm breaker, 10.6)."""


class ArchiveWork(msgspec.Struct, kw_only=True):
    """Work item on `continuity.work.archive`: archive, then replace (addition to the contract)."""

    type: Literal["archive"] = "archive"
    archive_id: Token
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    native_session_id: Token
    failure_class: FailureClass
    event_published_at: float | None = None
    rule: RowId | None = None
    """The policy row that asked for the archive: the archiver's decision carries it."""


class ReconcileWork(msgspec.Struct, kw_only=True):
    """Work item on `continuity.work.reconcile`: open a reconciliation (addition to the contract)."""

    type: Literal["reconcile"] = "reconcile"
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    native_session_id: Token
    tool_call: ToolCall | None
    recorded_outcome: RecordedOutcome | None = None
    decision_id: Name
    opened_at: Time

    def __post_init__(self) -> None:
        check_time(self.opened_at)
