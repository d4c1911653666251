"""Session records in Redis: one read for a decision, one script for each write.

With CONTINUITY_REDIS_WAIT_* set, a commit is acknowledged only once the replicas (or
append-only files) asked for hold it; one they do not hold in time is answered `unavailable`
but stays written on the master, and a failover may lose it. Such a commit leaves a token in
the record's `unconfirmed` field, cleared once a wait covering it is met: a decide or get that
reads the token confirms before answering (`SessionStore.read`), so that no runner resumes a
handle that a failover then loses."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable

import msgspec

from shared.contract.sessions import CommitRequest
from shared.contract.tenancy import OwnershipEntry, OwnershipReply
from shared.contract.times import now_rfc3339
from shared.platform.redis import TRANSIENT_REDIS_ERRORS, Redis
from shared.platform.redis.durability import UNCONFIRMED, Durability
from shared.platform.redis.store import NotReplicated
from shared.records import keys, scripts
from shared.records.compatibility import Declarations
from shared.records.retention import DEFAULT, Retention
from shared.records.session import READ_FIELDS, StoredSession, commit_args
from shared.records.store import RunStore

_encode = msgspec.json.Encoder().encode
_decode_entry = msgspec.json.Decoder(OwnershipEntry).decode


_FENCED_FIELDS = (*READ_FIELDS, UNCONFIRMED)
"""What a read asks for while writes are waited for: the record and its token, last."""


def _stored(values: list[bytes | None]) -> StoredSession | None:
    # HMGET of a missing key: a None for every field.
    return StoredSession.from_values(values) if any(v is not None for v in values) else None


def _token() -> str:
    """An `unconfirmed` token: random, so that no other write's token is ever taken for it."""
    return secrets.token_hex(8)


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
        durability: Durability | None = None,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 0,
    ) -> None:
        """`durability` (CONTINUITY_REDIS_WAIT_*); without it, `wait_replicas` replicas within
        `wait_timeout_ms` (WAIT alone)."""
        self.redis = client
        self.runs = RunStore(client, retention)
        self.declarations = Declarations(client, self.runs)
        """Compatibility declarations: read by a decide across a changed generation."""
        self._archive_ms = retention.archive_ms
        if durability is None:
            durability = Durability(replicas=wait_replicas, timeout_ms=wait_timeout_ms)
        self.durability = durability
        """What must hold a commit before it is acknowledged (CONTINUITY_REDIS_WAIT_*)."""

    def read(self, session_key: str) -> Awaitable[StoredSession | None]:
        """The record, its HMGET sent now (for a pipelined endpoint, before it is awaited). A
        record carrying an `unconfirmed` token is confirmed first (`_confirm`)."""
        if not self.durability.waits:
            return self._plain(self.redis.send("HMGET", keys.session(session_key), *READ_FIELDS))
        return self._fenced(session_key, self.redis.send("HMGET", keys.session(session_key), *_FENCED_FIELDS))

    async def _plain(self, sent: Awaitable[list[bytes | None]]) -> StoredSession | None:
        return _stored(await self.redis.reply(sent))

    async def _fenced(self, session_key: str, sent: Awaitable[list[bytes | None]]) -> StoredSession | None:
        values = await self.redis.reply(sent)
        if values[-1] is not None:
            values = await self._confirm(session_key)
        return _stored(values[:-1])

    async def _confirm(self, session_key: str) -> list[bytes | None]:
        """The read fence: the record read again by a script that rewrites its token (a write),
        with the waits right behind it on its connection. They count every earlier write of the
        master's replication stream, the unconfirmed one included: met, the record is held and
        its token goes; not met, `NotReplicated` (answered `unavailable`, never the record)."""
        key = keys.session(session_key)
        token = _token()
        values, shortfall = await self.redis.script_durable(
            scripts.SESSION_CONFIRM, [key], [token, *_FENCED_FIELDS], self.durability
        )
        if values[-1] is None:
            return list(values)  # confirmed meanwhile by another write's wait: nothing to confirm
        if shortfall is not None:
            raise NotReplicated(f"a session read is not confirmed: {shortfall}")
        await self._confirmed(key, token)
        return list(values)

    async def _settle(self, session_key: str) -> None:
        """Before a refusal is answered (a commit's conflict, a reject that clears nothing, a
        change of owner not made): it was read off the record, so a record carrying a token is
        confirmed first, as a read is; not met, `NotReplicated`."""
        if not self.durability.waits:
            return
        if await self.redis.hget(keys.session(session_key), UNCONFIRMED) is not None:
            await self._confirm(session_key)

    async def _confirmed(self, key: str, token: str) -> None:
        """Clear the token of a write now confirmed held; left behind (an outage), the next read
        confirms again, which costs it a wait and nothing else."""
        with contextlib.suppress(*TRANSIENT_REDIS_ERRORS):
            await self.redis.script(scripts.SESSION_CONFIRMED, [key], [token])

    async def commit(self, req: CommitRequest, runner_id: str | None = None) -> CommitResult:
        """Commit; a runner's commit (`runner_id`) is refused on another runner's session and
        binds a session nobody owns yet to it. A commit not held as CONTINUITY_REDIS_WAIT_* asks
        raises `NotReplicated`, its token left in the record."""
        token = _token() if self.durability.waits else ""
        args = commit_args(req, runner_id, self._archive_ms, token)
        code, revision, epoch = await self.runs.session_commit(
            req.session.key, args, durability=self.durability
        )
        if token and code == "ok":
            await self._confirmed(keys.session(req.session.key), token)
        elif code != "ok":
            await self._settle(req.session.key)
        return CommitResult(code, revision, epoch)

    async def reject(self, session_key: str, native_session_id: str, runner_id: str | None = None) -> bool:
        """Reject the stored handle; a rejection not held as CONTINUITY_REDIS_WAIT_* asks raises
        `NotReplicated`, its token left in the record (as a commit's: a read confirms it)."""
        token = _token() if self.durability.waits else ""
        cleared = await self.runs.session_reject(
            session_key, native_session_id, runner_id, durability=self.durability, token=token
        )
        if token and cleared:
            await self._confirmed(keys.session(session_key), token)
        elif not cleared:
            await self._settle(session_key)
        return cleared

    async def give(
        self, session_key: str, owner: str, *, actor: str, kind: str, held_refuses: bool
    ) -> tuple[str, OwnershipReply]:
        """Make `owner` the session's owner (a claim or a transfer): the script's code, and the
        ownership after it."""
        head = _encode({"at": now_rfc3339(), "kind": kind, "actor": actor, "owner": owner})[:-1]
        token = _token() if self.durability.waits else ""
        code, before, epoch, revision = await self.runs.session_owner(
            session_key,
            owner,
            held_refuses=held_refuses,
            entry_head=head,
            durability=self.durability,
            token=token,
        )
        if token and code == "ok":
            await self._confirmed(keys.session(session_key), token)
        elif code != "ok":
            await self._settle(session_key)
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
