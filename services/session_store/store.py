"""Session records in Redis: one read for a decision, one script for each write."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import msgspec

from shared.contract.sessions import CommitRequest
from shared.contract.tenancy import OwnershipEntry, OwnershipReply
from shared.contract.times import now_rfc3339
from shared.platform.redis import store
from shared.platform.redis.pipeline import PipelinedRedis
from shared.records import keys
from shared.records.retention import DEFAULT, Retention
from shared.records.session import READ_FIELDS, V1_FIELDS, StoredSession, binding_stamp

_COMMIT = store.Script("session_commit")
_REJECT = store.Script("session_reject")
_OWNER = store.Script("session_owner")
_encode = msgspec.json.Encoder().encode
_decode_entry = msgspec.json.Decoder(OwnershipEntry).decode


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

    async def commit(self, req: CommitRequest, runner_id: str | None = None) -> CommitResult:
        """Commit; a runner's commit (`runner_id`) is refused on another runner's session and
        binds a session nobody owns yet to it."""
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
            runner_id or "",
            _binding_entry(runner_id) if runner_id else "",
        ]
        code, revision, epoch = await _COMMIT(
            self._redis, [keys.session(sk), keys.held_archive(sk, ""), keys.session_ownership(sk)], args
        )
        return CommitResult(
            code.decode() if isinstance(code, bytes) else str(code), int(revision), int(epoch)
        )

    async def reject(self, session_key: str, native_session_id: str, runner_id: str | None = None) -> bool:
        cleared = await _REJECT(
            self._redis, [keys.session(session_key)], [native_session_id, runner_id or ""]
        )
        return bool(cleared)

    async def give(
        self, session_key: str, owner: str, *, actor: str, kind: str, held_refuses: bool
    ) -> tuple[str, OwnershipReply]:
        """Make `owner` the session's owner (a claim or a transfer): the script's code, and the
        ownership after it."""
        head = _encode({"at": now_rfc3339(), "kind": kind, "actor": actor, "owner": owner})[:-1]
        code, previous, epoch, revision = await _OWNER(
            self._redis,
            [keys.session(session_key), keys.session_ownership(session_key)],
            [owner, "1" if held_refuses else "0", head],
        )
        before = previous.decode() if isinstance(previous, bytes) else str(previous)
        reply = OwnershipReply(
            owner=owner if code in (b"ok", "ok", b"unchanged", "unchanged") else before,
            previous_owner=before or None,
            epoch=int(epoch),
            revision=int(revision),
        )
        return code.decode() if isinstance(code, bytes) else str(code), reply

    async def ownership(self, session_key: str) -> list[OwnershipEntry]:
        """The session's ownership changes, oldest first."""
        raw = await store.call(
            self._redis.execute_command("LRANGE", keys.session_ownership(session_key), 0, -1)
        )
        return [_decode_entry(item) for item in reversed(raw)]


def _binding_entry(runner_id: str) -> bytes:
    """The ownership entry of a first commit, without its epoch and closing brace: the script
    adds the record's epoch, which a binding does not change."""
    entry = {
        "at": now_rfc3339(),
        "kind": "bound",
        "actor": runner_id,
        "previous_owner": None,
        "owner": runner_id,
    }
    return _encode(entry)[:-1]
