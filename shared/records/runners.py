"""Who a runner is and what it may touch (contract section 10).

A runner's identity is the runner_id token of the subject its message arrived on: under the
shipped authorization each runner's NATS account imports only subjects carrying its own id, so
the token is set by the server, never by the runner. From it follow:

- the runner directory (`continuity.runners.*`, kept in Redis): the tenants a runner is issued
  for, and whether it is revoked; every replica of every service reads it (cached briefly);
- `access`: the one rule that says whether a runner may act on a session of a tenant;
- `owner_refusal`: whether a session's owner lets the runner act on it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from shared.contract.tenancy import RunnerRecord
from shared.contract.times import now_rfc3339
from shared.platform import metrics
from shared.platform.redis import Redis
from shared.records import keys

_decode_record = msgspec.json.Decoder(RunnerRecord).decode
_encode = msgspec.json.Encoder().encode


class Access(enum.Enum):
    """Whether a runner may act on a session of a tenant; every refusal is a closed reason."""

    ALLOWED = "allowed"
    UNREGISTERED = "runner_not_registered"
    REVOKED = "runner_revoked"
    OUTSIDE_TENANTS = "tenant_not_allowed"


def access(record: RunnerRecord | None, tenant: str, *, enforced: bool) -> Access:
    """The rule, first match wins:
    1. a revoked runner acts on nothing;
    2. an issued runner acts only on its tenants' sessions;
    3. a runner the directory does not know acts on nothing when tenancy is enforced, and on
       any tenant when it is open (a development stack without authorization).
    Ownership (`owner_refusal`) applies after it, in both modes."""
    if record is None:
        return Access.UNREGISTERED if enforced else Access.ALLOWED
    if record.status == "revoked":
        return Access.REVOKED
    return Access.ALLOWED if tenant in record.tenants else Access.OUTSIDE_TENANTS


def owner_refusal(owner: str, runner_id: str | None) -> bool:
    """True when a session owned by `owner` ('' = nobody yet) is not the runner's to act on.
    `runner_id` None is the services' own account (operators, the CLI): never refused here."""
    return runner_id is not None and owner != "" and owner != runner_id


def refused(runner_id: str, record: RunnerRecord | None, reason: str) -> None:
    """Count a refusal per runner: an issued runner by its id, any other under one label, so a
    runner cannot mint label values."""
    label = runner_id if record is not None else "unregistered"
    metrics.labelled(metrics.TENANCY_REFUSALS, label, reason).inc()


@dataclass(slots=True)
class CachedRecord:
    until: float
    record: RunnerRecord | None


class RunnerDirectory:
    """The runner records, read through a short cache: a change (a runner issued, revoked, or
    given other tenants) reaches every replica within `cache_s`."""

    MAX_CACHED = 10_000
    """Entries kept at once; an unknown runner_id costs one too, so the cache is bounded."""

    def __init__(
        self, client: Redis, *, cache_s: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._redis = client
        self._cache_s = cache_s
        self._clock = clock
        self._cache: dict[str, CachedRecord] = {}

    def cached(self, runner_id: str) -> CachedRecord | None:
        """The cached record while it is fresh (a hit costs no coroutine on the hot path)."""
        cached = self._cache.get(runner_id)
        return cached if cached is not None and cached.until > self._clock() else None

    async def get(self, runner_id: str) -> RunnerRecord | None:
        now = self._clock()
        cached = self._cache.get(runner_id)
        if cached is not None and cached.until > now:
            return cached.record
        raw = await self._redis.get(keys.runner(runner_id))
        record = _decode_record(raw) if raw else None
        if len(self._cache) >= self.MAX_CACHED:
            self._cache.clear()
        self._cache[runner_id] = CachedRecord(now + self._cache_s, record)
        return record

    async def put(self, runner_id: str, tenants: list[str], actor: str) -> RunnerRecord:
        """Issue the runner for `tenants` (again: its tenants are replaced, a revoked runner is
        active again), recorded with an audit entry."""
        previous = await self._read(runner_id)
        record = RunnerRecord(
            runner_id=runner_id,
            tenants=sorted(set(tenants)),
            status="active",
            added_at=previous.added_at if previous is not None else now_rfc3339(),
            actor=actor,
        )
        await self._write(record, "issued" if previous is None else "updated")
        return record

    async def revoke(self, runner_id: str, actor: str) -> RunnerRecord | None:
        """Mark the runner revoked (kept, so its refusals are told from an unknown runner's)."""
        previous = await self._read(runner_id)
        if previous is None:
            return None
        record = msgspec.structs.replace(previous, status="revoked", revoked_at=now_rfc3339(), actor=actor)
        await self._write(record, "revoked")
        return record

    async def list(self) -> list[RunnerRecord]:
        ids = await self._redis.execute("SMEMBERS", keys.RUNNERS_INDEX)
        records = [await self._read(rid.decode()) for rid in sorted(ids)]
        return [r for r in records if r is not None]

    async def read(self, runner_id: str) -> RunnerRecord | None:
        """The record as stored now, past the cache (for operators)."""
        return await self._read(runner_id)

    async def _read(self, runner_id: str) -> RunnerRecord | None:
        raw = await self._redis.get(keys.runner(runner_id))
        return _decode_record(raw) if raw else None

    async def _write(self, record: RunnerRecord, change: str) -> None:
        # Three keys in three slots (the record, the index, the audit list): each write is
        # idempotent, and the record, written first, is what every check reads.
        await self._redis.execute("SET", keys.runner(record.runner_id), _encode(record))
        await self._redis.execute("SADD", keys.RUNNERS_INDEX, record.runner_id)
        entry = {"at": now_rfc3339(), "change": change, "runner_id": record.runner_id, "actor": record.actor}
        await self._redis.execute("LPUSH", keys.RUNNERS_AUDIT, _encode(entry))
        await self._redis.execute("LTRIM", keys.RUNNERS_AUDIT, 0, RUNNERS_AUDIT_KEPT - 1)
        self._cache.pop(record.runner_id, None)


RUNNERS_AUDIT_KEPT = 1000
"""Changes of the directory kept, newest first."""
