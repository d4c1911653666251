"""The run index (run_id -> the session key its records live under) and a run's audit trail.

The index is the one run key that is not under a session's hash tag, so it is written before
a run's first step: a recorded run is always found. It is claimed with the run retention, and
every recorded step gives it the time to live of the run's records (`steps.follow_run`).
"""

from __future__ import annotations

from collections.abc import Awaitable

import msgspec
import redis.asyncio as aioredis

from shared.contract.reconciliation import AuditEntry
from shared.platform.redis import store
from shared.platform.redis.pipeline import PipelinedRedis
from shared.records import keys
from shared.records.retention import DEFAULT

_decode_audit = msgspec.json.Decoder(AuditEntry).decode


async def index_run(client: aioredis.Redis, run_id: str, session_key: str) -> None:
    """Map run_id to its session (again: setting the same value keeps every reader working),
    keeping the time to live the run's last step gave it."""
    await store.call(client.set(keys.run_index(run_id), session_key, keepttl=True))


def claim_run(
    client: PipelinedRedis, run_id: str, session_key: str, ttl_ms: int = DEFAULT.run_ms
) -> Awaitable[str | None]:
    """Index run_id under `session_key` unless it is indexed already, in one atomic command,
    for `ttl_ms` (until its first step sets the run's own); returns the session key it was
    indexed under before (None when this call indexed it).
    (A raw-reply client: redis-py would turn SET's reply into a bool.)"""
    sent = client.send("SET", keys.run_index(run_id), session_key, "NX", "GET", "PX", str(ttl_ms))

    async def previous() -> str | None:
        value = await sent
        return value.decode() if value else None

    return previous()


async def session_of_run(client: aioredis.Redis, run_id: str) -> str | None:
    value = await store.call(client.get(keys.run_index(run_id)))
    return value.decode() if value else None


async def audit_trail(client: aioredis.Redis, session_key: str, run_id: str) -> list[AuditEntry]:
    raw = await store.call(client.lrange(keys.run_audit(session_key, run_id), 0, -1))  # type: ignore[arg-type]
    return [_decode_audit(item) for item in raw]
