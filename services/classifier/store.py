"""The classifier's reads and writes in Redis: the run's claim, the saved session and the tenant's
recovery budget read in one round trip, and the step recorded by `RunStore` (the quotas it
counts are `shared.records.quotas`')."""

from __future__ import annotations

import asyncio
from typing import Any

from shared.platform.redis import Redis
from shared.records import keys, outcomes
from shared.records.retention import Retention
from shared.records.session import SAVED_FIELDS
from shared.records.store import RunStore


class ClassifierStore:
    """Every read is sent when called, before it is awaited: the reads of one event (and of
    concurrent events) go out in one write."""

    def __init__(self, redis: Redis, retention: Retention) -> None:
        self.redis = redis
        self.runs = RunStore(redis, retention)
        # The run index and the step are the RunStore's, taken as they are: no call in between
        # on the hot path.
        self.claim_run = self.runs.claim_run
        self.unclaim_run = self.runs.unclaim_run
        self.record = self.runs.record_step

    def saved_session(self, session_key: str) -> asyncio.Future[Any]:
        """HMGET of the session record's `SAVED_FIELDS` (for `saved_session_of`)."""
        return self.redis.send("HMGET", keys.session(session_key), *SAVED_FIELDS)

    def run_before(self, session_key: str, run_id: str) -> asyncio.Future[Any]:
        """The run's last decision, status and harness before this event's step (for counting
        what followed that decision, 4.6)."""
        return self.redis.send(
            "HMGET", keys.run(session_key, run_id), "last_decision", "status", outcomes.HARNESS_FIELD
        )

    def spent(self, budget_key: str) -> asyncio.Future[Any]:
        """The recovery budget spent in a window (None when nothing was spent)."""
        return self.redis.send("GET", budget_key)
