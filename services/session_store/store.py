"""Session records in Redis: one read for a decision, one script for each write."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from shared import keys, store
from shared.contracts.sessions import CommitRequest
from shared.pipeline import PipelinedRedis
from shared.runs.retention import DEFAULT, Retention
from shared.session_record import READ_FIELDS, V1_FIELDS, StoredSession, binding_stamp
from shared.times import now_rfc3339

_COMMIT = store.Script("session_commit")
_REJECT = store.Script("session_reject")


async def _stored(read: Awaitable[Any]) -> StoredSession | None:
    values = await store.call(read)
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

    def __init__(self, client: store.Commands, retention: Retention = DEFAULT) -> None:
        self._redis = client
        self._archive_ms = retention.archive_ms
        # The pipelined client's `send` is its `execute_command` minus a coroutine per call.
        self._read = client.send if isinstance(client, PipelinedRedis) else client.execute_command

    def read(self, session_key: str) -> Awaitable[StoredSession | None]:
        """The record, its HMGET sent now (for a pipelined endpoint, before it is awaited)."""
        return _stored(self._read("HMGET", keys.session(session_key), *READ_FIELDS))

    async def commit(self, req: CommitRequest) -> CommitResult:
        sk = req.session.key
        v1 = {
            "native_session_id": req.native_session_id,
            "adapter": req.adapter,
            "model": req.model,
            "cwd": req.cwd,
            "cursor": req.cursor or "",
            "prompt_hash": req.prompt_hash or "",
            "checkpoint_policy": req.checkpoint_policy,
            "updated_at": now_rfc3339(),
        }
        generation = req.compatibility_generation or ""
        stamp = binding_stamp(v1) if generation else b""
        args = [
            *(v1[name] for name in V1_FIELDS),
            generation,
            stamp,
            "" if req.expected_revision is None else req.expected_revision,
            "" if req.epoch is None else req.epoch,
            self._archive_ms,
        ]
        code, revision, epoch = await _COMMIT(
            self._redis, [keys.session(sk), keys.held_archive(sk, "")], args
        )
        return CommitResult(
            code.decode() if isinstance(code, bytes) else str(code), int(revision), int(epoch)
        )

    async def reject(self, session_key: str, native_session_id: str) -> bool:
        cleared = await _REJECT(self._redis, [keys.session(session_key)], [native_session_id])
        return bool(cleared)
