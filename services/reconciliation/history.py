"""The reconciliation service's side of CONTINUITY_HISTORY (contract 9.14): it moves a run there
when the runs index meets the run's outcome, and reads finished runs back for the operators'
requests once Redis no longer holds them (`shared.records.history`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

from nats.js import JetStreamContext

from shared.contract.decisions import RunOutcome
from shared.contract.runs import RunEntry
from shared.platform.config import Config
from shared.platform.logs import Log
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.history import FINAL_STATUSES, HistoryMover, HistoryReader, Moved, RunHistory
from shared.records.history_listing import HistoryListing
from shared.records.outcomes import HARNESS_FIELD, HARNESS_VERSION_FIELD
from shared.records.session import text

log = Log("continuity.history")


class History:
    def __init__(self, redis: Redis, js: JetStreamContext, config: Config) -> None:
        self.mover = HistoryMover(redis, js, config)
        self.reader = HistoryReader(js)
        self.listing = HistoryListing(js)
        self.linger_s = config.history_linger_s
        """How long a moved run's records stay in Redis (contract 9.14)."""

    async def move(self, sk: str, run_id: str) -> Moved:
        return await self.mover.move(sk, run_id)

    async def after_outcome(self, outcome: RunOutcome) -> None:
        """Move the run an outcome ended. A failure is logged, never raised: the run's records
        then stay in Redis for the retention, as complete as before, and
        `continuity history migrate` moves them later."""
        try:
            moved = await self.move(outcome.session.key, outcome.run_id)
        except Exception as exc:
            log.warning("history_move_deferred", run_id=outcome.run_id, error_type=type(exc).__name__)
            return
        log.debug("history_moved", run_id=outcome.run_id, result=moved.code)

    async def load(self, run_id: str) -> RunHistory | None:
        """The run's history from the stream; None when it holds none (or there is no stream
        yet). A NATS failure raises: not found is an answer, an outage is not."""
        return await self.reader.load(run_id)


class RunTrail(NamedTuple):
    """What `runs.stats` and the replay read of a run: its audit trail (as stored) and harness."""

    audit: list[bytes]
    harness: str
    harness_version: str


async def trails(redis: Redis, history: History | None, entries: Sequence[RunEntry]) -> list[RunTrail]:
    """Each run's trail, in one round trip to Redis; the finished runs whose records have left
    Redis are read from the stream, their reads all in flight together."""
    commands: list[tuple[str | int, ...]] = []
    for e in entries:
        commands.append(("LRANGE", keys.run_audit(e.session.key, e.run_id), 0, -1))
        commands.append(("HMGET", keys.run(e.session.key, e.run_id), HARNESS_FIELD, HARNESS_VERSION_FIELD))
    replies = await redis.batch(commands) if commands else []
    found = [
        RunTrail(replies[2 * i], text(replies[2 * i + 1][0]), text(replies[2 * i + 1][1]))
        for i in range(len(entries))
    ]
    moved = [
        i
        for i, (entry, trail) in enumerate(zip(entries, found, strict=True))
        if not trail.audit and history is not None and entry.status in FINAL_STATUSES
    ]
    if history is not None and moved:
        loaded = await asyncio.gather(*(history.load(entries[i].run_id) for i in moved))
        for i, copy in zip(moved, loaded, strict=True):
            if copy is not None:
                found[i] = RunTrail(
                    [item.encode() for item in copy.audit],
                    copy.run.get(HARNESS_FIELD, ""),
                    copy.run.get(HARNESS_VERSION_FIELD, ""),
                )
    return found
