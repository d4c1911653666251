"""`continuity.runs.list`: runs found by what they are waiting for (an addition to the contract,
section 9.1), so that an operator finds stopped runs without knowing their ids."""

from __future__ import annotations

import msgspec

from shared.contract.sessions import SessionRef
from shared.contract.types import (
    Action,
    Cursor,
    DecisionReason,
    Limit,
    RunnerId,
    RunStatus,
    Time,
    Token,
    check_time,
)


class RunsListRequest(msgspec.Struct, kw_only=True):
    """Every filter is optional; given ones must all match. `updated_*` compare the time of the
    run's last decision (`updated_before` exclusive, `updated_after` inclusive)."""

    status: RunStatus | None = None
    runner_id: RunnerId | None = None
    tenant: Token | None = None
    reason: DecisionReason | None = None
    updated_before: Time | None = None
    updated_after: Time | None = None
    limit: Limit = 100
    cursor: Cursor | None = None

    def __post_init__(self) -> None:
        check_time(self.updated_before, self.updated_after)


class RunEntry(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A run as the index knows it: from its last decision."""

    run_id: str
    runner_id: str
    session: SessionRef
    attempt: int
    status: RunStatus
    action: Action
    reason: DecisionReason
    decision_id: str
    updated_at: str


class RunsListReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    items: list[RunEntry]
    next_cursor: str | None = None
