"""The stored-runs quota (contract 10.6): runs a runner, and a tenant's runners together, may
have started within the run retention, exact across classifier replicas.

Each owner's runs are a sorted set in Redis (member the run_id, score when it was counted). A
new run is checked and counted by one script (`shared.records.quotas`), so replicas counting
at the same moment never pass a limit together. On a single server one call counts it against
every owner, or against none when one refuses. The runner's and the tenant's sets are under
tags of their own (two slots on Redis Cluster): there a call per owner, both sent at once, and
when one owner refuses, the run the other counted is taken back. Between the two, a run later
refused holds a place for a moment: another new run may be refused then, never one admitted
past a limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from shared.contract.types import QuotaScope
from shared.platform.redis import Redis
from shared.records import quotas
from shared.records.quotas import Counted

Owner = tuple[QuotaScope, str, int]
"""A run's owner: its scope, its set's key and its limit."""
Answer = tuple[Counted, int] | Exception
"""An owner's answer to a count: how it counted the run, or the count's failure."""


class StoredRuns:
    def __init__(self, client: Redis, run_ms: int) -> None:
        self._redis = client
        self._run_ms = run_ms
        self._single: bool | None = None
        """Whether Redis is a single server (asked once): then one script counts every owner."""

    def send(self, owners: Sequence[Owner], run_id: str, now_ms: int) -> Awaitable[list[Answer]] | None:
        """The count of `admit`, sent now, before the caller's reads of the event: the same
        write carries both. None until Redis's mode is known (the first `admit` asks it)."""
        if self._single is None:
            return None
        return quotas.send_counts(
            self._redis,
            [(key, limit) for _, key, limit in owners],
            run_id,
            now_ms,
            self._run_ms,
            together=self._single,
        )

    async def admit(
        self, owners: Sequence[Owner], run_id: str, now_ms: int, answers: list[Answer] | None = None
    ) -> tuple[QuotaScope, float] | None:
        """Count a new run against every owner (or take the `answers` of a `send`): None when
        all counted it (now or before), else the first owner refusing it and when its oldest
        run leaves the retention (epoch seconds); a refused run is counted nowhere."""
        if answers is None:
            if self._single is None:
                self._single = not await self._redis.is_cluster()
            sent = self.send(owners, run_id, now_ms)
            assert sent is not None
            answers = await sent
        failed: Exception | None = None
        refused: tuple[QuotaScope, float] | None = None
        counted_now: list[str] = []
        for (scope, key, _), answer in zip(owners, answers, strict=True):
            if isinstance(answer, Exception):
                failed = failed or answer
            elif answer[0] is Counted.NOW:
                counted_now.append(key)
            elif answer[0] is Counted.REFUSED and refused is None:
                refused = scope, answer[1] / 1000
        if failed is None and refused is None:
            return None
        # Counted nowhere: a redelivery (after a failure) counts it again from the start.
        await self._uncount(counted_now, run_id)
        if failed is not None:
            raise failed
        return refused

    async def unsent(self, owners: Sequence[Owner], run_id: str, answers: list[Answer]) -> None:
        """Undo a `send` whose run turned out not to be new: what it counted now is taken back
        (it counts nothing for a run counted before); its failures do not matter."""
        counted_now = [
            key
            for (_, key, _), answer in zip(owners, answers, strict=True)
            if not isinstance(answer, Exception) and answer[0] is Counted.NOW
        ]
        if counted_now:
            await self._uncount(counted_now, run_id)

    async def forget(self, owners: Sequence[Owner], run_id: str) -> None:
        """Take back a run counted by `admit` whose run was not kept (refused after counting)."""
        await self._uncount([key for _, key, _ in owners], run_id)

    async def _uncount(self, owner_keys: Sequence[str], run_id: str) -> None:
        await asyncio.gather(*(self._redis.execute("ZREM", key, run_id) for key in owner_keys))
