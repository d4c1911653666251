"""Reconciliation records and operator steps in Redis.

Layout (every key of one run under its session's hash tag, see `shared.records.keys`):
- `keys.reconciliation(sk, run_id)`: hash of the record. `session`, `tool_call` and
  `resolution` are JSON; an absent value is the empty string. `action_outcome` and
  `continue_decision_id` are kept beside `resolution` so the scripts compare them directly.
- `keys.reconciliation_history(sk, run_id)`: list of the earlier records of the run (JSON), when
  a later attempt stopped on a pending call again and the record was opened anew.
- The listing: `keys.RECONCILIATION_BUCKETS` buckets, the bucket of a run a hash of its run_id;
  each bucket is two sorted sets under its own hash tag (`keys.reconciliations_open`,
  `keys.reconciliations_delivered`), member `<sk>\\n<run_id>`, score the opening time. A record
  is in one of them by its status; `index_put` moves it atomically within its bucket. No key
  is a single hot spot and no script spans two slots; a list merges the buckets in order.
  After a crash a member may sit in the open set of a delivered record; readers check the
  record's status, and the gauge refresher moves such members.
- Retention (contract 9.9): the scripts give records their time to live; an entry of the
  delivered sets goes (`trim`) once its record has expired, an open one never.

A list is read in pages (`cursor`) merged from the buckets (`merge`); a record keeps its member
and score when it is delivered, so a cursor serves every status.

The indexes are not under a session's tag, so they are written outside the recording scripts:
after the record is opened (the work item is acknowledged only after both) and after it is
delivered.
"""

from __future__ import annotations

import time

from shared.contract import AuditEntry
from shared.contract.decisions import ReconcileWork
from shared.contract.reconciliation import ReconciliationRecord, Resolution, RunView
from shared.contract.times import epoch_of
from shared.contract.types import ActionOutcome
from shared.platform import tracing
from shared.platform.redis import Redis
from shared.platform.redis.store import pairs
from shared.records import keys
from shared.records.history import RunHistory
from shared.records.reconciliations import TRACE_FIELD, continue_fresh, opened_audit, record_fields
from shared.records.retention import DEFAULT, Retention
from shared.records.session import text
from shared.records.steps import TRACE_FIELD as RUN_TRACE_FIELD
from shared.records.store import RunStore, decode_audit

from .cursor import PAGE_ITEMS_BYTES, decode_cursor, encode_cursor
from .history import History
from .merge import merge_indexes, take
from .step import (
    DELIVERED_INDEXES,
    OPEN_INDEXES,
    TRIM_BATCH,
    Continuation,
    encoded_size,
    parse_record,
    parse_run,
    split_member,
)


class ReconciliationStore:
    def __init__(self, client: Redis, retention: Retention = DEFAULT, history: History | None = None) -> None:
        self.redis = client
        self.retention = retention
        self.runs = RunStore(client, retention)
        self.history = history
        """Where a finished run is read once its records have left Redis (contract 9.14)."""

    async def _moved(self, run_id: str) -> RunHistory | None:
        return await self.history.load(run_id) if self.history is not None else None

    async def _moved_record(self, run_id: str) -> dict[bytes, bytes]:
        """A listed reconciliation whose run has left Redis, as HGETALL would answer it."""
        moved = await self._moved(run_id)
        return moved.raw(moved.reconciliation) if moved is not None else {}

    async def session_of_run(self, run_id: str) -> str | None:
        return await self.runs.session_of_run(run_id)

    # Opening -----------------------------------------------------------------------------

    async def open(self, work: ReconcileWork) -> str:
        """Open the record once, then index it; returns 'opened', 'reopened' or 'exists'."""
        sk = work.session.key
        fields = record_fields(work)
        code, opened_at = await self.runs.reconciliation_open(
            sk, work.run_id, work.attempt, fields, opened_audit(work, fields)
        )
        # The run index is the classifier's, written before its step; setting the same value
        # again keeps `get` working for a record whatever wrote it first.
        await self.runs.index_run(work.run_id, sk)
        # Scored by the stored opening time, so a redelivery re-indexes identically.
        status = await self.redis.hget(keys.reconciliation(sk, work.run_id), "status")
        if status == b"open":
            await self.runs.follow_run(work.run_id, -1)  # found while it is open
        await self.index_put(sk, work.run_id, epoch_of(opened_at), text(status))
        return code

    async def index_put(self, sk: str, run_id: str, score: float, status: str) -> None:
        """List the record in its bucket's open set while `status` is open, else delivered."""
        await self.runs.reconciliation_index_put(sk, run_id, score, status == "open")

    # Reading ------------------------------------------------------------------------------

    async def load(self, run_id: str) -> tuple[str, ReconciliationRecord] | None:
        found = await self.load_traced(run_id)
        return (found[0], found[1]) if found is not None else None

    async def load_traced(self, run_id: str) -> tuple[str, ReconciliationRecord, str | None] | None:
        """`load`, and the traceparent the record was opened in (None when tracing is off here,
        or the record keeps none), from the same read."""
        sk = await self.session_of_run(run_id)
        raw = await self.redis.hgetall(keys.reconciliation(sk, run_id)) if sk is not None else None
        if not raw:
            moved = await self._moved(run_id)
            if moved is None or not moved.reconciliation:
                return None
            sk, raw = moved.session_key, moved.raw(moved.reconciliation)
        assert sk is not None
        trace = raw.get(TRACE_FIELD.encode()) if tracing.ENABLED else None
        return sk, parse_record(raw), tracing.valid(trace.decode()) if trace else None

    async def run_trace(self, run_id: str) -> str | None:
        """The traceparent of the run's last step; read only when tracing is on here."""
        if not tracing.ENABLED:
            return None
        sk = await self.session_of_run(run_id)
        raw = await self.redis.hget(keys.run(sk, run_id), RUN_TRACE_FIELD) if sk is not None else None
        return tracing.valid(raw.decode()) if raw else None

    async def load_run(self, run_id: str) -> tuple[str, RunView] | None:
        sk = await self.session_of_run(run_id)
        raw = await self.redis.hgetall(keys.run(sk, run_id)) if sk is not None else None
        if raw and sk is not None:
            return sk, parse_run(raw)
        moved = await self._moved(run_id)
        return (moved.session_key, parse_run(moved.raw(moved.run))) if moved is not None else None

    async def records(
        self, status: str | None, limit: int, cursor: str | None = None, max_bytes: int = PAGE_ITEMS_BYTES
    ) -> tuple[list[ReconciliationRecord], str | None]:
        """One page, oldest first, after `cursor`: at most `limit` records and (but for a first
        record, which always fits a reply) at most `max_bytes` of them encoded. Returns the
        page and the cursor of the next one, None when no record of `status` follows."""
        sources = {"open": OPEN_INDEXES, "delivered": DELIVERED_INDEXES}.get(
            status or "", OPEN_INDEXES + DELIVERED_INDEXES
        )
        after = decode_cursor(cursor) if cursor is not None else None
        chunk = min(max(limit, 64), 500)
        items: list[ReconciliationRecord] = []
        size = 0
        last: tuple[float, bytes] | None = None
        merged = merge_indexes(self.redis, sources, after, chunk)
        while True:
            rows = [row async for row in take(merged, chunk)]
            if not rows:
                return items, None
            found = await self.redis.batch(
                [("HGETALL", keys.reconciliation(*split_member(m))) for _, m in rows]
            )
            for (score, m), flat in zip(rows, found, strict=True):
                raw = pairs(flat) or await self._moved_record(split_member(m)[1])
                if not raw:
                    continue
                record = parse_record(raw)
                if status is not None and record.status != status:
                    continue
                encoded = encoded_size(record)
                if items and (len(items) >= limit or size + encoded > max_bytes):
                    assert last is not None
                    return items, encode_cursor(*last)
                items.append(record)
                size += encoded
                last = (score, m)

    async def audit(self, run_id: str) -> list[AuditEntry] | None:
        sk = await self.session_of_run(run_id)
        if sk is not None and await self.redis.exists(keys.run(sk, run_id)):
            return await self.runs.audit_trail(sk, run_id)
        moved = await self._moved(run_id)
        return [decode_audit(item.encode()) for item in moved.audit] if moved is not None else None

    # Operator steps -----------------------------------------------------------------------

    async def record_resolution(
        self, sk: str, record: ReconciliationRecord, outcome: ActionOutcome, evidence: str, actor: str
    ) -> Continuation:
        """Resolve and record continue_fresh atomically; publishing is the caller's (or the
        sweeper's) job. The returned code says whether this call won."""
        decision, step = continue_fresh(
            record, "execution_reconciled", actor, "operator_resolve", time.time(), outcome
        )
        resolution = Resolution(
            action_outcome=outcome, evidence=evidence, actor=actor, resolved_at=decision.decided_at
        )
        code, detail = await self.runs.record_resolution(
            sk,
            record.run_id,
            step,
            outcome=outcome,
            resolution=resolution,
            decision_id=decision.decision_id,
            attempt=record.attempt,
        )
        return Continuation(code, detail, decision, sk, step.outbox)

    async def record_retry(self, sk: str, run: RunView, actor: str) -> Continuation:
        decision, step = continue_fresh(run, "operator_retry", actor, "operator_retry", time.time())
        code, detail = await self.runs.record_retry(sk, run.run_id, step, attempt=run.attempt)
        return Continuation(code, detail, decision, sk, step.outbox)

    # The indexes ---------------------------------------------------------------------------

    async def drop_from_open(self, sk: str, run_id: str) -> None:
        """List a delivered record as delivered. A record reopened meanwhile (a later attempt)
        is listed as open again, so a concurrent reopen is never lost from the index."""
        rec_key = keys.reconciliation(sk, run_id)
        status, opened_at = await self.redis.hmget(rec_key, "status", "opened_at")
        if not opened_at:
            return
        score = epoch_of(opened_at.decode())
        await self.index_put(sk, run_id, score, "delivered")
        status, opened_at = await self.redis.hmget(rec_key, "status", "opened_at")
        if status == b"open" and opened_at:
            await self.index_put(sk, run_id, epoch_of(opened_at.decode()), "open")

    async def open_summary(self, now: float | None = None) -> tuple[int, float]:
        """(open records, age in seconds of the oldest), moving delivered members on the way."""
        now = time.time() if now is None else now
        count = 0
        oldest: float | None = None
        stale: list[tuple[str, str]] = []
        page = 500
        for index_key in OPEN_INDEXES:
            start = 0
            while True:
                members = await self.redis.zrange_scored(index_key, start, start + page - 1)
                if not members:
                    break
                start += page
                statuses = await self.redis.batch(
                    [("HGET", keys.reconciliation(*split_member(m)), "status") for m, _ in members]
                )
                for (m, score), status in zip(members, statuses, strict=True):
                    if status == b"open":
                        count += 1
                        oldest = score if oldest is None else min(oldest, score)
                    else:
                        stale.append(split_member(m))
        for sk, run_id in stale:
            await self.drop_from_open(sk, run_id)
        return count, (max(0.0, now - oldest) if oldest is not None else 0.0)

    async def trim(self, now: float | None = None) -> int:
        """Remove the delivered entries whose record has expired; returns how many. Only entries
        opened more than a retention ago can have (a record is kept a retention after its
        delivery), and of those only the ones whose record is gone are removed: a record that
        was open long and delivered lately stays listed until it expires itself."""
        now = time.time() if now is None else now
        cutoff = now - self.retention.run_s
        removed = 0
        for index_key in DELIVERED_INDEXES:
            old = await self.redis.zrangebyscore(index_key, "-inf", cutoff, 0, TRIM_BATCH)
            if not old:
                continue
            found = await self.redis.batch([("EXISTS", keys.reconciliation(*split_member(m))) for m in old])
            gone = [m for m, exists in zip(old, found, strict=True) if not exists]
            if gone:
                removed += await self.redis.zrem(index_key, *gone)
        return removed
