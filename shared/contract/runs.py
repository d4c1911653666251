"""`continuity.runs.list`: runs found by what they are waiting for (an addition to the contract,
section 9.1), so that an operator finds stopped runs without knowing their ids."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from shared.contract.limits import REPLAY_MAX_RUNS, REPLAY_MAX_SINCE_S
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
    recovery_ms: int | None = None
    """A final run's time from its first failure to its completed turn (4.6)."""


class RunsListReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    items: list[RunEntry]
    next_cursor: str | None = None


class RunsStatsRequest(msgspec.Struct, kw_only=True):
    """`continuity.runs.stats` (an addition, 4.6): the policy judged by outcomes, over the runs
    whose last step is within `since_s`."""

    since_s: Annotated[float, Meta(gt=0, le=REPLAY_MAX_SINCE_S)] = 86_400.0
    runner_id: RunnerId | None = None
    tenant: Token | None = None
    bucket_s: Annotated[float, Meta(ge=60.0, le=86_400.0)] = 3_600.0
    """The width of one point of each row's series."""
    max_runs: Annotated[int, Meta(ge=1, le=REPLAY_MAX_RUNS)] = REPLAY_MAX_RUNS


class RowStats(msgspec.Struct, kw_only=True, omit_defaults=False):
    """One policy row, failure class, harness and harness version: what its decisions led to."""

    rule: str
    """The row's id; `operator` for an operator's or a reconciliation's decision."""
    action: str
    failure_class: str
    harness: str
    """`unknown` when the runner named none."""
    harness_version: str
    decisions: int
    recovered: int
    """Decisions whose attempt completed a turn."""
    failed: int
    """Decisions followed by another failure of the run."""
    abandoned: int
    held: int
    """Decisions that stopped for an operator or a reconciliation."""
    pending: int
    success_rate: float | None
    """recovered / (recovered + failed + abandoned); null before any of them."""
    recovery_p50_s: float | None
    recovery_p95_s: float | None
    """Time to recovery of the runs this row's decision recovered."""
    attempts_mean: float | None
    """Attempts the runs this row's decision recovered had used."""


class SeriesPoint(msgspec.Struct, kw_only=True, omit_defaults=False):
    at: str
    """The start of the point's bucket."""
    recovered: int
    judged: int
    """recovered + failed + abandoned of the decisions made in the bucket."""


class RowSeries(msgspec.Struct, kw_only=True, omit_defaults=False):
    rule: str
    points: list[SeriesPoint]


class RunsStatsReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    since: str
    runs: int
    statuses: dict[str, int]
    """Runs by their status now."""
    rows: list[RowStats]
    series: list[RowSeries]
    truncated: bool
    """`max_runs` was reached before every matching run was read."""
