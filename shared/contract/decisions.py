"""Recovery decisions and the work items behind them (contract sections 4.5, 5 and 6)."""

from __future__ import annotations

from typing import Literal

import msgspec

from shared.contract.events import ToolCall
from shared.contract.sessions import SessionRef
from shared.contract.types import (
    Action,
    ActionOutcome,
    Attempt,
    DecisionReason,
    FailureClass,
    Name,
    RecordedOutcome,
    RunnerId,
    Time,
    Token,
    check_time,
)


class Decision(msgspec.Struct, kw_only=True, omit_defaults=False):
    type: Literal["decision"] = "decision"
    decision_id: str
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    action: Action
    reason: DecisionReason
    failure_class: FailureClass | None = None
    epoch: int | None = None
    not_before: Time | None = None
    detail: str | None = None
    reconciled_outcome: ActionOutcome | None = None
    decided_at: Time


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
