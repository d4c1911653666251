"""The run index (run_id -> the session key its records live under) and a run's audit trail.

The index is the one run key that is not under a session's hash tag, so it is written before
a run's first step: a recorded run is always found.
"""

from __future__ import annotations

from collections.abc import Awaitable

import msgspec
import redis.asyncio as aioredis

from shared import keys, store
from shared.contracts.reconciliation import AuditEntry
from shared.pipeline import PipelinedRedis

_decode_audit = msgspec.json.Decoder(AuditEntry).decode


async def index_run(client: aioredis.Redis, run_id: str, session_key: str) -> None:
    """Map run_id to its session (again: setting the same value keeps every reader working)."""
    await store.call(client.set(keys.run_index(run_id), session_key))


def claim_run(client: PipelinedRedis, run_id: str, session_key: str) -> Awaitable[str | None]:
    """Index run_id under `session_key` unless it is indexed already, in one atomic command;
    returns the session key it was indexed under before (None when this call indexed it).
    (A raw-reply client: redis-py would turn SET's reply into a bool.)"""
    sent = client.send("SET", keys.run_index(run_id), session_key, "NX", "GET")

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
