"""The archiver's reads and writes in Redis: the archive's progress, the session's epoch and
generation values, and the steps `RunStore` records.

The progress of one archive, `continuity:archiveop:{<session key>}:<archive_id>`, moves through
states each written before the step it enables:

    (absent) -> remote_started -> remote_ok | remote_failed -> done

`remote_started` is written, atomically and only by one caller, before the remote move is
sent; so a move is sent at most once per archive_id, whatever crashes or duplicates follow.
It carries a lease (the archive timeout plus a grace period, on the Redis server's clock):
while the lease runs, its sender may still be waiting for the runner and others wait too.
The result records the bounded, redacted detail, never the runner's raw output. Every write
gives the progress the run retention (contract section 9.9): it is a record of the run.
"""

from __future__ import annotations

from shared.contract.decisions import ArchiveWork
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.names import archive_slot
from shared.records.retention import DEFAULT, Retention
from shared.records.session import SAVED_FIELDS, every_generation, saved_session_of
from shared.records.steps import RunStep
from shared.records.store import RunStore

from .step import Begin, MoveResult


class ArchiveStore:
    def __init__(self, redis: Redis, retention: Retention = DEFAULT) -> None:
        self.redis = redis
        self.runs = RunStore(redis, retention)

    async def index_run(self, work: ArchiveWork) -> None:
        await self.runs.index_run(work.run_id, work.session.key)

    async def session_generations(self, session_key: str) -> frozenset[str]:
        """Every generation value the session record holds (to hide in the runner's output)."""
        return every_generation(await self.redis.hgetall(keys.session(session_key)))

    async def epoch(self, session_key: str) -> int | None:
        """The session's epoch, 0 for a record without one, None without a record."""
        values = await self.redis.hmget(keys.session(session_key), *SAVED_FIELDS)
        return saved_session_of(values).epoch

    # The progress ------------------------------------------------------------------------------

    async def begin(self, work: ArchiveWork, lease_s: float, updated_at: str) -> Begin:
        fields = {
            "archive_id": work.archive_id,
            "run_id": work.run_id,
            "runner_id": work.runner_id,
            "attempt": str(work.attempt),
            "updated_at": updated_at,
        }
        state, left_ms = await self.runs.archive_begin(
            work.session.key,
            work.run_id,
            work.archive_id,
            archive_slot(work.attempt),
            int(lease_s * 1000),
            fields,
        )
        return Begin(state=state, lease_left_s=left_ms / 1000)

    async def record_result(self, work: ArchiveWork, result: MoveResult, updated_at: str) -> bool:
        """Keep the runner's answer; False when the progress had already moved on."""
        fields = {**result.fields(), "updated_at": updated_at}
        return await self.runs.archive_result(work.session.key, work.archive_id, fields)

    async def load_result(self, work: ArchiveWork) -> MoveResult:
        raw = await self.redis.hgetall(keys.archive_progress(work.session.key, work.archive_id))
        return MoveResult.from_fields(raw)

    async def mark_done(self, work: ArchiveWork, decision_id: str, updated_at: str) -> None:
        fields = {"state": "done", "decision_id": decision_id, "updated_at": updated_at}
        await self.runs.archive_done(work.session.key, work.archive_id, fields)

    # Steps ---------------------------------------------------------------------------------------

    async def record_local_move(
        self, work: ArchiveWork, step: RunStep, *, epoch: int, progress: dict[str, str]
    ) -> tuple[str, bytes]:
        return await self.runs.record_local_move(
            work.session.key, work.run_id, work.archive_id, step, epoch=epoch, progress=progress
        )

    async def record_step(self, work: ArchiveWork, step: RunStep) -> bytes | None:
        return await self.runs.record_step(work.session.key, work.run_id, step)

    async def recorded_decision(self, work: ArchiveWork) -> bytes | None:
        """The value of the archive's decision slot, None while it is free."""
        slots = keys.run_decisions(work.session.key, work.run_id)
        return await self.redis.hget(slots, archive_slot(work.attempt))
