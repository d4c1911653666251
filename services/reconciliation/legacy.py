"""The listing of an earlier release: two single sorted sets (`keys.LEGACY_RECONCILIATION_INDEXES`)
instead of the buckets. The service moves their entries into the buckets once, when it starts;
a store without them costs one read."""

from __future__ import annotations

from shared.records import keys
from shared.records.session import text

from .step import split_member
from .store import ReconciliationStore


async def move_legacy(store: ReconciliationStore, batch: int = 500) -> int:
    """Move the entries of the legacy sets into the buckets, by their record's status, then
    remove them; an entry whose record is gone is dropped. Returns how many were looked at;
    0 once the legacy sets are gone."""
    redis = store.redis
    moved = 0
    for legacy in keys.LEGACY_RECONCILIATION_INDEXES:
        while True:
            rows = await redis.zrange_scored(legacy, 0, batch - 1)
            if not rows:
                break
            statuses = await redis.batch(
                [("HGET", keys.reconciliation(*split_member(m)), "status") for m, _ in rows]
            )
            for (m, score), status in zip(rows, statuses, strict=True):
                if status is not None:
                    sk, run_id = split_member(m)
                    await store.index_put(sk, run_id, score, text(status))
            await redis.zrem(legacy, *(m for m, _ in rows))
            moved += len(rows)
    return moved
