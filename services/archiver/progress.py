"""The progress of one archive in Redis, `continuity:archiveop:{<session key>}:<archive_id>`.

States, each written before the step it enables:

    (absent) -> remote_started -> remote_ok | remote_failed -> done

`remote_started` is written, atomically and only by one caller, before the remote move is
sent; so a move is sent at most once per archive_id, whatever crashes or duplicates follow.
It carries a lease (the archive timeout plus a grace period, on the Redis server's clock):
while the lease runs, its sender may still be waiting for the runner and others wait too.
The result records the bounded, redacted detail, never the runner's raw output. Every write
gives the progress the run retention (contract section 9.9): it is a record of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import redis.asyncio as aioredis

from shared.contract.decisions import ArchiveWork
from shared.platform.redis import store
from shared.records import keys
from shared.records.names import archive_slot
from shared.records.retention import DEFAULT, Retention
from shared.records.session import text

_BEGIN = store.Script("archive_begin", with_lib=True)
_RESULT = store.Script("archive_result", with_lib=True)
_DONE = store.Script("archive_done", with_lib=True)
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Begin:
    state: str
    lease_left_s: float


@dataclass(frozen=True, slots=True)
class MoveResult:
    """What a remote move came to; `detail` is already redacted and bounded."""

    exit_code: int | None
    timed_out: bool
    detail: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def label(self) -> str:
        """The `continuity_archive_total` result."""
        return "ok" if self.ok else "timed_out" if self.timed_out else "failed"

    def fields(self) -> dict[str, str]:
        return {
            "state": "remote_ok" if self.ok else "remote_failed",
            "exit_code": "" if self.exit_code is None else str(self.exit_code),
            "timed_out": "true" if self.timed_out else "false",
            "detail": self.detail,
        }

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes]) -> MoveResult:
        exit_code = raw.get(b"exit_code", b"")
        return cls(
            exit_code=int(exit_code) if exit_code else None,
            timed_out=raw.get(b"timed_out") == b"true",
            detail=text(raw.get(b"detail")),
        )


class Progress:
    def __init__(self, client: aioredis.Redis, retention: Retention = DEFAULT) -> None:
        self._redis = client
        self._retention_ms = str(retention.run_ms)

    async def begin(self, work: ArchiveWork, lease_s: float, updated_at: str) -> Begin:
        sk = work.session.key
        fields = {
            "archive_id": work.archive_id,
            "run_id": work.run_id,
            "runner_id": work.runner_id,
            "attempt": str(work.attempt),
            "updated_at": updated_at,
        }
        state, left_ms = await _BEGIN(
            self._redis,
            [keys.archive_progress(sk, work.archive_id), keys.run_decisions(sk, work.run_id)],
            [archive_slot(work.attempt), int(lease_s * 1000), _encode(fields), self._retention_ms],
        )
        return Begin(state=text(state), lease_left_s=int(left_ms) / 1000)

    async def record_result(self, work: ArchiveWork, result: MoveResult, updated_at: str) -> bool:
        """Keep the runner's answer; False when the progress had already moved on."""
        fields = {**result.fields(), "updated_at": updated_at}
        key = keys.archive_progress(work.session.key, work.archive_id)
        return bool(await _RESULT(self._redis, [key], [_encode(fields), self._retention_ms]))

    async def load_result(self, work: ArchiveWork) -> MoveResult:
        key = keys.archive_progress(work.session.key, work.archive_id)
        raw: dict[bytes, bytes] = await store.call(self._redis.hgetall(key))  # type: ignore[arg-type]
        return MoveResult.from_fields(raw)

    async def mark_done(self, work: ArchiveWork, decision_id: str, updated_at: str) -> None:
        key = keys.archive_progress(work.session.key, work.archive_id)
        fields = {"state": "done", "decision_id": decision_id, "updated_at": updated_at}
        await _DONE(self._redis, [key], [_encode(fields), self._retention_ms])
