"""`RunStore`: the one owner of the records' atomic writes, one method per Lua script
(`shared.records.scripts`, where each script's KEYS are declared), and of the run index.

The run index (run_id -> the session key a run's records live under) is the one run key outside
a session's hash tag, so it is written before a run's first step (a recorded run is always
found), claimed with the run retention, and right after every recorded step given the time to
live the script left on the run record (none while the run waits on a person; for a run just
claimed whose step waits, in the same write as the step, and set back if nothing is recorded). A crash in
between leaves the index living longer than the run, never shorter, and the redelivered
message, finding its step recorded, aligns it again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any

import msgspec

from shared.contract.reconciliation import AuditEntry
from shared.platform.redis import Redis
from shared.platform.redis.durability import NONE, Durability
from shared.platform.redis.store import NotReplicated
from shared.records import keys, scripts
from shared.records.retention import DEFAULT, Retention, waits
from shared.records.session import text
from shared.records.steps import NotOwned, RunStep, SessionChanged, common_args, retention_args, step_args

_encode = msgspec.json.Encoder().encode
_decode_audit = msgspec.json.Decoder(AuditEntry).decode
decode_audit = _decode_audit
"""An audit entry as stored (JSON)."""


COMPATIBILITY_AUDIT_KEPT = 1000
"""Entries of the declarations' audit trail kept."""


class RunStore:
    """The records' scripts and the run index over one `Redis` client, with one retention."""

    def __init__(self, redis: Redis, retention: Retention = DEFAULT) -> None:
        self.redis = redis
        self.retention = retention

    # The run index --------------------------------------------------------------------------

    def claim_run(self, run_id: str, session_key: str) -> Awaitable[str | None]:
        """Index run_id under `session_key` unless it is indexed already, in one atomic command
        sent now, for the run retention (until its first step sets the run's own); resolves to
        the session key it was indexed under before (None when this call indexed it)."""
        sent = self.redis.send(
            "SET", keys.run_index(run_id), session_key, "NX", "GET", "PX", str(self.retention.run_ms)
        )

        async def previous() -> str | None:
            value = await sent
            return value.decode() if value else None

        return previous()

    async def unclaim_run(self, run_id: str) -> None:
        """Undo `claim_run` of a run that recorded nothing: leave no claim on the run_id."""
        await self.redis.execute("DEL", keys.run_index(run_id))

    async def index_run(self, run_id: str, session_key: str) -> None:
        """Map run_id to its session (again: setting the same value keeps every reader working),
        keeping the time to live the run's last step gave it."""
        await self.redis.execute("SET", keys.run_index(run_id), session_key, "KEEPTTL")

    async def session_of_run(self, run_id: str) -> str | None:
        value = await self.redis.get(keys.run_index(run_id))
        return value.decode() if value else None

    async def follow_run(self, run_id: str, ttl_ms: int) -> None:
        """Give the run index the time to live a script left on the run record: none (-1) while
        the run waits, else the same; -2 (nothing recorded) changes nothing."""
        if ttl_ms == -1:
            await self.redis.execute("PERSIST", keys.run_index(run_id))
        elif ttl_ms > 0:
            await self.redis.execute("PEXPIRE", keys.run_index(run_id), ttl_ms)

    async def audit_trail(self, session_key: str, run_id: str) -> list[AuditEntry]:
        raw = await self.redis.lrange(keys.run_audit(session_key, run_id))
        return [_decode_audit(item) for item in raw]

    # Run steps --------------------------------------------------------------------------------

    async def record_step(
        self, session_key: str, run_id: str, step: RunStep, *, index_fresh: bool = False
    ) -> bytes | None:
        """Record `step`; returns None when recorded, or the slot's existing value for a
        duplicate. Raises `SessionChanged` or `NotOwned` when nothing was recorded.
        `index_fresh`: the caller has just claimed the run (`claim_run`), so a run record given
        that same time to live needs no second command for its index."""
        persisted = None
        if index_fresh and waits(step.run_fields["status"]):
            # The step keeps a fresh run's records until a person acts: its index is kept too,
            # in the same write as the script instead of a round trip after it.
            persisted = self.redis.send("PERSIST", keys.run_index(run_id))
        try:
            recorded, existing, ttl = await self.redis.script(
                scripts.RECORD_STEP, scripts.step_keys(session_key, run_id), step_args(step, self.retention)
            )
        except BaseException:
            if persisted is not None:
                with contextlib.suppress(Exception):  # Redis away: the redelivery aligns it
                    await self.redis.reply(persisted)
                    await self.follow_run(run_id, self.retention.run_ms)
            raise
        if persisted is not None:
            await self.redis.reply(persisted)
            if ttl != -1:  # nothing recorded, or kept for a time: the index as the run, or claimed
                await self.follow_run(run_id, ttl if ttl > 0 else self.retention.run_ms)
        if recorded == 2:
            raise SessionChanged(session_key)
        if recorded == 3:
            raise NotOwned(text(existing))
        if persisted is None and not (index_fresh and ttl > 0):
            await self.follow_run(run_id, ttl)
        return None if recorded == 1 else bytes(existing)

    async def record_outcome(
        self, session_key: str, run_id: str, step: RunStep, *, attempt: int, statuses: Iterable[str]
    ) -> tuple[int, bytes]:
        """Record an outcome step (contract 4.6) while the run is at `attempt` in one of
        `statuses`: the script's code (1 recorded, 0 duplicate, 3 another runner's run, 4 no
        decision waiting) and its detail (the slot's value for a duplicate, the run's status)."""
        code, detail, ttl = await self.redis.script(
            scripts.RUN_OUTCOME,
            scripts.step_keys(session_key, run_id),
            [
                *common_args(step),
                str(self.retention.run_ms),
                step.for_runner or "",
                str(attempt),
                "," + ",".join(statuses) + ",",
            ],
        )
        if code in (0, 1):
            await self.follow_run(run_id, ttl)
        return int(code), bytes(detail)

    async def record_local_move(
        self,
        session_key: str,
        run_id: str,
        archive_id: str,
        step: RunStep,
        *,
        epoch: int,
        progress: dict[str, str],
    ) -> tuple[str, bytes]:
        """The archiver's local move with its `open_replacement` step, recorded only while the
        session's epoch is still `epoch`; returns the script's code and detail."""
        status, value, ttl = await self.redis.script(
            scripts.ARCHIVE_LOCAL_MOVE,
            scripts.archive_local_move_keys(session_key, run_id, archive_id),
            [
                *common_args(step),
                str(epoch),
                _encode(progress),
                *retention_args(step, self.retention),
                str(self.retention.archive_ms),
            ],
        )
        await self.follow_run(run_id, ttl)
        return text(status), bytes(value)

    async def record_resolution(
        self,
        session_key: str,
        run_id: str,
        step: RunStep,
        *,
        outcome: str,
        resolution: msgspec.Struct,
        decision_id: str,
        attempt: int,
    ) -> tuple[str, str]:
        """An operator's resolution with its `continue_fresh` step; returns code and detail."""
        code, detail, ttl = await self.redis.script(
            scripts.RECONCILIATION_RESOLVE,
            scripts.step_keys(session_key, run_id),
            [
                outcome,
                _encode(resolution),
                *common_args(step),
                decision_id,
                str(attempt),
                *retention_args(step, self.retention),
            ],
        )
        await self.follow_run(run_id, ttl)
        return text(code), text(detail)

    async def record_retry(
        self, session_key: str, run_id: str, step: RunStep, *, attempt: int
    ) -> tuple[str, str]:
        """An operator's retry with its `continue_fresh` step; returns code and detail."""
        code, detail, ttl = await self.redis.script(
            scripts.RECONCILIATION_RETRY,
            scripts.step_keys(session_key, run_id),
            [str(attempt), *common_args(step), *retention_args(step, self.retention)],
        )
        await self.follow_run(run_id, ttl)
        return text(code), text(detail)

    # Archive progress -------------------------------------------------------------------------

    async def archive_begin(
        self, session_key: str, run_id: str, archive_id: str, slot: str, lease_ms: int, fields: dict[str, str]
    ) -> tuple[str, int]:
        """Start, or find, the archive's remote move: its state and the lease left (ms)."""
        state, left_ms = await self.redis.script(
            scripts.ARCHIVE_BEGIN,
            scripts.archive_begin_keys(session_key, run_id, archive_id),
            [slot, lease_ms, _encode(fields), self.retention.run_ms],
        )
        return text(state), int(left_ms)

    async def archive_result(self, session_key: str, archive_id: str, fields: dict[str, str]) -> bool:
        """Keep the runner's answer; False when the progress had already moved on."""
        recorded = await self.redis.script(
            scripts.ARCHIVE_RESULT,
            scripts.archive_progress_keys(session_key, archive_id),
            [_encode(fields), self.retention.run_ms],
        )
        return bool(recorded)

    async def archive_done(self, session_key: str, archive_id: str, fields: dict[str, str]) -> None:
        await self.redis.script(
            scripts.ARCHIVE_DONE,
            scripts.archive_progress_keys(session_key, archive_id),
            [_encode(fields), self.retention.run_ms],
        )

    # Reconciliation records ---------------------------------------------------------------------

    async def reconciliation_open(
        self, session_key: str, run_id: str, attempt: int, fields: dict[str, str], audit: AuditEntry
    ) -> tuple[str, str]:
        """Open a run's reconciliation record once: 'opened', 'reopened' or 'exists', and the
        stored opening time."""
        code, opened_at = await self.redis.script(
            scripts.RECONCILIATION_OPEN,
            scripts.reconciliation_open_keys(session_key, run_id),
            [str(attempt), _encode(fields), _encode(audit)],
        )
        return text(code), text(opened_at)

    async def reconciliation_index_put(
        self, session_key: str, run_id: str, score: float, is_open: bool
    ) -> None:
        """List the record in its bucket's open set, or else its delivered set."""
        await self.redis.script(
            scripts.RECONCILIATION_INDEX_PUT,
            scripts.reconciliation_index_keys(run_id),
            [
                keys.reconciliation_member(session_key, run_id),
                repr(score),
                "open" if is_open else "delivered",
            ],
        )

    # The runs index ----------------------------------------------------------------------------

    async def runs_index_apply(
        self, run_id: str, version: str, entry: bytes, score: float, status_number: int
    ) -> bool:
        """Apply a run's entry unless its bucket holds a newer one; True when applied."""
        applied = await self.redis.script(
            scripts.RUNS_INDEX_APPLY,
            scripts.runs_index_keys(keys.runs_index_bucket(run_id)),
            [run_id, version, entry, repr(score), status_number],
        )
        return bool(applied)

    async def runs_index_forget(self, run_id: str, version: str) -> bool:
        """Remove a run's entry while it is still at `version`; True when removed."""
        removed = await self.redis.script(
            scripts.RUNS_INDEX_FORGET,
            scripts.runs_index_keys(keys.runs_index_bucket(run_id)),
            [run_id, version],
        )
        return bool(removed)

    async def runs_index_read(
        self, bucket: int, status: str | None, low: str, high: str, offset: int, count: int
    ) -> list[tuple[bytes, float, bytes | None]]:
        """A slice of one bucket's listing: (run_id, score, entry JSON or None) in score order."""
        flat: list[Any] = await self.redis.script(
            scripts.RUNS_INDEX_READ, scripts.runs_index_read_keys(bucket, status), [low, high, offset, count]
        )
        return [(flat[i], float(flat[i + 1]), flat[i + 2] or None) for i in range(0, len(flat), 3)]

    # Session records -----------------------------------------------------------------------------

    async def session_commit(
        self, session_key: str, args: list[Any], *, durability: Durability = NONE
    ) -> tuple[str, int, int]:
        """Commit a session record (ARGV as `session_commit.lua` states): code, revision, epoch.
        A commit `durability` does not see held within its timeout raises `NotReplicated`."""
        keys_ = scripts.session_commit_keys(session_key)
        if not durability.waits:
            code, revision, epoch = await self.redis.script(scripts.SESSION_COMMIT, keys_, args)
            return text(code), int(revision), int(epoch)
        reply, shortfall = await self.redis.script_durable(scripts.SESSION_COMMIT, keys_, args, durability)
        code, revision, epoch = reply
        if text(code) == "ok" and shortfall is not None:
            raise NotReplicated(f"a session commit is not confirmed: {shortfall}")
        return text(code), int(revision), int(epoch)

    async def session_reject(
        self,
        session_key: str,
        native_session_id: str,
        runner_id: str | None,
        *,
        durability: Durability = NONE,
        token: str = "",
    ) -> bool:
        """Reject the stored handle (`session_reject.lua`); whether it was cleared. A clearing
        `durability` does not see held within its timeout raises `NotReplicated`, `token` left
        in the record."""
        keys_ = scripts.session_reject_keys(session_key)
        args = [native_session_id, runner_id or "", token]
        if not durability.waits:
            return bool(await self.redis.script(scripts.SESSION_REJECT, keys_, args))
        cleared, shortfall = await self.redis.script_durable(scripts.SESSION_REJECT, keys_, args, durability)
        if cleared and shortfall is not None:
            raise NotReplicated(f"a session reject is not confirmed: {shortfall}")
        return bool(cleared)

    async def session_owner(
        self,
        session_key: str,
        owner: str,
        *,
        held_refuses: bool,
        entry_head: bytes,
        durability: Durability = NONE,
        token: str = "",
    ) -> tuple[str, str, int, int]:
        """Give the session to `owner`: code, previous owner, epoch, revision. A change
        `durability` does not see held within its timeout raises `NotReplicated`, `token` left
        in the record."""
        keys_ = scripts.session_owner_keys(session_key)
        args = [owner, "1" if held_refuses else "0", entry_head, token]
        if not durability.waits:
            reply = await self.redis.script(scripts.SESSION_OWNER, keys_, args)
        else:
            reply, shortfall = await self.redis.script_durable(scripts.SESSION_OWNER, keys_, args, durability)
            if text(reply[0]) == "ok" and shortfall is not None:
                raise NotReplicated(f"a change of owner is not confirmed: {shortfall}")
        code, previous, epoch, revision = reply
        return text(code), text(previous), int(epoch), int(revision)

    async def compatibility_change(self, op: str, declaration_id: str, value: bytes, audit: bytes) -> str:
        """Declare (`op` `declare`, `value` the declaration) or revoke a compatibility
        declaration with its audit entry: `ok`, or `unchanged`."""
        code = await self.redis.script(
            scripts.COMPATIBILITY_CHANGE,
            scripts.compatibility_keys(),
            [op, declaration_id, value, audit, str(COMPATIBILITY_AUDIT_KEPT)],
        )
        return text(code)
