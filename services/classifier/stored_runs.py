"""The stored-runs quota (contract 10.6): runs a runner, and a tenant's runners together, may
have started within the run retention.

Each owner's runs are a sorted set in Redis (member the run_id, score when it was counted). A
replica counts a new run against what it last read of the set plus the runs it counted since,
and writes its new runs in one batch per owner every `FLUSH_S`, trimming what left the
retention and reading the count again in the same step. So an event costs no Redis command of
its own; the price is precision: replicas see each other's new runs up to `FLUSH_S` late, and a
crash loses a batch not yet written (those runs go uncounted, never doubly).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from shared.platform.logs import Log
from shared.platform.redis import Redis

log = Log("continuity.classifier.stored_runs")

FLUSH_S = 0.1
"""How often a replica writes the runs it counted and reads the owners' counts again."""


@dataclass(slots=True)
class _Owner:
    limit: int
    stored: int = 0
    """The set's size when this replica last read it (entries within the retention)."""
    pending: dict[str, int] = field(default_factory=dict)
    """Runs counted here and not yet written: run_id -> when (ms)."""


class StoredRuns:
    def __init__(self, client: Redis, run_ms: int) -> None:
        self._redis = client
        self._run_ms = run_ms
        self._owners: dict[str, _Owner] = {}

    def admit_now(self, key: str, limit: int, run_id: str) -> bool | None:
        """`admit` without a coroutine for an owner this replica knows; None when it must read
        the owner's count first (call `admit`)."""
        owner = self._owners.get(key)
        if owner is None:
            return None
        return self._count_in(owner, limit, run_id)

    async def admit(self, key: str, limit: int, run_id: str, now_ms: int) -> bool:
        """Count a new run against the owner at `key`; False when the owner holds its limit
        (nothing counted)."""
        owner = self._owners.get(key)
        if owner is None:  # the first run of this owner here: read its count once
            owner = self._owners[key] = _Owner(limit)
            owner.stored = await self._count(key, now_ms)
        return self._count_in(owner, limit, run_id)

    @staticmethod
    def _count_in(owner: _Owner, limit: int, run_id: str) -> bool:
        owner.limit = limit
        if run_id in owner.pending:
            return True
        if owner.stored + len(owner.pending) >= limit:
            return False
        owner.pending[run_id] = int(time.time() * 1000)
        return True

    async def free_at_ms(self, key: str, now_ms: int) -> int:
        """When the owner's oldest counted run leaves the retention (ms): the oldest of its set
        and of the runs this replica counted and has not written yet."""
        oldest = await self._redis.zrange_scored(key, 0, 0)
        times = [int(oldest[0][1])] if oldest else []
        owner = self._owners.get(key)
        if owner is not None and owner.pending:
            times.append(min(owner.pending.values()))
        return min(times, default=now_ms) + self._run_ms

    async def _count(self, key: str, now_ms: int) -> int:
        trimmed = self._redis.send("ZREMRANGEBYSCORE", key, "-inf", f"({now_ms - self._run_ms}")
        counted = self._redis.send("ZCARD", key)
        await self._redis.reply(trimmed)
        return int(await self._redis.reply(counted))

    async def flush(self, now_ms: int) -> None:
        """Write every owner's pending runs (ZADD NX keeps a run's first time), trim, and read
        the counts again; owners with nothing pending are forgotten, to be read afresh. An
        owner whose write fails keeps its pending runs for the next round."""
        for key, owner in list(self._owners.items()):
            if not owner.pending:
                del self._owners[key]
                continue
            written = dict(owner.pending)
            members = [str(item) for run_id, at in written.items() for item in (at, run_id)]
            added = self._redis.send("ZADD", key, "NX", *members)
            expiring = self._redis.send("PEXPIRE", key, str(self._run_ms))
            await self._redis.reply(added)
            await self._redis.reply(expiring)
            stored = await self._count(key, now_ms)
            for run_id in written:
                owner.pending.pop(run_id, None)
            owner.stored = stored

    async def run(self, stop: asyncio.Event) -> None:
        """The flusher, beside the handlers until the drain; a last flush at the end."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), FLUSH_S)
            try:
                await self.flush(int(time.time() * 1000))
            except Exception as exc:  # Redis away: the next round writes them
                log.warning("stored_runs_flush_failed", error_type=type(exc).__name__)
            if stop.is_set():
                return
