"""Session records in Redis: one read for a decision, one script for each write."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import msgspec

from shared.contract.sessions import CommitRequest
from shared.contract.tenancy import OwnershipEntry, OwnershipReply
from shared.contract.times import now_rfc3339
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.compatibility import Declarations
from shared.records.retention import DEFAULT, Retention
from shared.records.session import READ_FIELDS, StoredSession, commit_args
from shared.records.store import RunStore

_encode = msgspec.json.Encoder().encode
_decode_entry = msgspec.json.Decoder(OwnershipEntry).decode


async def _stored(redis: Redis, read: Awaitable[Any]) -> StoredSession | None:
    values = await redis.reply(read)
    # HMGET of a missing key: a None for every field.
    return StoredSession.from_values(values) if any(v is not None for v in values) else None


class CommitResult:
    __slots__ = ("code", "epoch", "revision")

    def __init__(self, code: str, revision: int, epoch: int) -> None:
        self.code = code
        self.revision = revision
        self.epoch = epoch


class SessionStore:
    """Every request is one Redis round trip: HMGET for a decision, one script for a write."""

    def __init__(
        self,
        client: Redis,
        retention: Retention = DEFAULT,
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
    ) -> None:
        self.redis = client
        self.runs = RunStore(client, retention)
        self.declarations = Declarations(client, self.runs)
        """Compatibility declarations: read by a decide across a changed generation."""
        self._archive_ms = retention.archive_ms
        # CONTINUITY_REDIS_WAIT_*: replicas that must hold a commit before it is acknowledged.
        self._wait = (wait_replicas, wait_timeout_ms)

    def read(self, session_key: str) -> Awaitable[StoredSession | None]:
        """The record, its HMGET sent now (for a pipelined endpoint, before it is awaited)."""
        return _stored(self.redis, self.redis.send("HMGET", keys.session(session_key), *READ_FIELDS))

    async def commit(self, req: CommitRequest, runner_id: str | None = None) -> CommitResult:
        """Commit; a runner's commit (`runner_id`) is refused on another runner's session and
        binds a session nobody owns yet to it."""
        args = commit_args(req, runner_id, self._archive_ms)
        replicas, timeout_ms = self._wait
        return CommitResult(
            *await self.runs.session_commit(req.session.key, args, replicas=replicas, timeout_ms=timeout_ms)
        )

    async def reject(self, session_key: str, native_session_id: str, runner_id: str | None = None) -> bool:
        return await self.runs.session_reject(session_key, native_session_id, runner_id)

    async def give(
        self, session_key: str, owner: str, *, actor: str, kind: str, held_refuses: bool
    ) -> tuple[str, OwnershipReply]:
        """Make `owner` the session's owner (a claim or a transfer): the script's code, and the
        ownership after it."""
        head = _encode({"at": now_rfc3339(), "kind": kind, "actor": actor, "owner": owner})[:-1]
        code, before, epoch, revision = await self.runs.session_owner(
            session_key, owner, held_refuses=held_refuses, entry_head=head
        )
        reply = OwnershipReply(
            owner=owner if code in ("ok", "unchanged") else before,
            previous_owner=before or None,
            epoch=int(epoch),
            revision=int(revision),
        )
        return code, reply

    async def ownership(self, session_key: str) -> list[OwnershipEntry]:
        """The session's ownership changes, oldest first."""
        raw = await self.redis.lrange(keys.session_ownership(session_key))
        return [_decode_entry(item) for item in reversed(raw)]
