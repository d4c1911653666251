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

A list is read in pages: a page's cursor is the (score, member) of its last record, so the next
page starts right after it however the indexes changed meanwhile (a record keeps its member and
score when it is delivered, so a cursor serves every status).

The indexes are not under a session's tag, so they are written outside the recording scripts:
after the record is opened (the work item is acknowledged only after both) and after it is
delivered.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import heapq
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import redis.asyncio as aioredis

from shared.contract import AuditEntry
from shared.contract.decisions import Decision, ReconcileWork
from shared.contract.limits import MAX_PAGE_BYTES, NAME_CHARS
from shared.contract.reconciliation import ReconciliationRecord, Resolution, RunView, ToolCallRecord
from shared.contract.sessions import SessionRef
from shared.contract.times import now_rfc3339
from shared.contract.types import (
    Action,
    ActionOutcome,
    DecisionReason,
    ReconciliationStatus,
    RecordedOutcome,
    RunStatus,
)
from shared.platform.redis import store
from shared.records import decisions, index, keys, steps
from shared.records.names import continue_slot
from shared.records.outbox import OutboxEntry
from shared.records.retention import DEFAULT, Retention
from shared.records.session import text


def open_index(run_id: str) -> str:
    """The sorted set that lists `run_id`'s reconciliation while it is open."""
    return keys.reconciliations_open(keys.reconciliation_bucket(run_id))


def delivered_index(run_id: str) -> str:
    return keys.reconciliations_delivered(keys.reconciliation_bucket(run_id))


OPEN_INDEXES = [keys.reconciliations_open(b) for b in range(keys.RECONCILIATION_BUCKETS)]
DELIVERED_INDEXES = [keys.reconciliations_delivered(b) for b in range(keys.RECONCILIATION_BUCKETS)]
TRIM_BATCH = 500
"""Entries of one delivered set looked at per trim, so one round stays short."""

CONTINUE_ACTION: Action = "continue_fresh"
SERVICE_ACTOR = "reconciliation"

_OPEN = store.Script("reconciliation_open", with_lib=True)
_INDEX_PUT = store.Script("reconciliation_index_put")

_encode = msgspec.json.Encoder().encode
_session = msgspec.json.Decoder(SessionRef)
_tool_call = msgspec.json.Decoder(ToolCallRecord)
_position = msgspec.json.Decoder(tuple[float, str])
_resolution = msgspec.json.Decoder(Resolution)
_decision = msgspec.json.Decoder(Decision)


def member(session_key: str, run_id: str) -> str:
    return f"{session_key}\n{run_id}"


def split_member(value: bytes | str) -> tuple[str, str]:
    text = value.decode() if isinstance(value, bytes) else value
    session_key, _, run_id = text.rpartition("\n")
    return session_key, run_id


def epoch_of(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def _text(raw: dict[bytes, bytes], name: str) -> str:
    return text(raw.get(name.encode()))


PAGE_ITEMS_BYTES = MAX_PAGE_BYTES - 4096
"""The items of one page: the page limit less room for the reply's envelope and cursor."""


class BadCursor(ValueError):
    """A `cursor` that no page of this list returned."""


def encode_cursor(score: float, name: bytes) -> str:
    raw = _encode((score, name.decode()))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, bytes]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, name = _position.decode(raw)
    except (binascii.Error, ValueError, msgspec.MsgspecError):
        raise BadCursor("not a cursor of this list") from None
    return score, name.encode()


def _tool_call_of(text: str) -> ToolCallRecord | None:
    if not text:
        return None
    call = _tool_call.decode(text)
    if len(call.tool_name) > NAME_CHARS:
        # Opened before tool names had a limit: shown cut to it, so every record fits a reply.
        call.tool_name = call.tool_name[:NAME_CHARS]
    return call


def parse_record(raw: dict[bytes, bytes]) -> ReconciliationRecord:
    tool_call = _text(raw, "tool_call")
    recorded = _text(raw, "recorded_outcome")
    resolution = _text(raw, "resolution")
    return ReconciliationRecord(
        run_id=_text(raw, "run_id"),
        runner_id=_text(raw, "runner_id"),
        session=_session.decode(raw[b"session"]),
        attempt=int(_text(raw, "attempt")),
        tool_call=_tool_call_of(tool_call),
        recorded_outcome=msgspec.convert(recorded, RecordedOutcome) if recorded else None,  # type: ignore[arg-type]
        status=msgspec.convert(_text(raw, "status"), ReconciliationStatus),  # type: ignore[arg-type]
        opened_at=_text(raw, "opened_at"),
        resolution=_resolution.decode(resolution) if resolution else None,
    )


def parse_run(raw: dict[bytes, bytes]) -> RunView:
    last = _text(raw, "last_decision")
    return RunView(
        run_id=_text(raw, "run_id"),
        runner_id=_text(raw, "runner_id"),
        session=_session.decode(raw[b"session"]),
        attempt=int(_text(raw, "attempt")),
        status=msgspec.convert(_text(raw, "status"), RunStatus),  # type: ignore[arg-type]
        last_decision=_decision.decode(last) if last else None,
    )


def record_fields(work: ReconcileWork) -> dict[str, str]:
    recorded = work.recorded_outcome
    if recorded is None and work.tool_call is not None:
        recorded = work.tool_call.recorded_outcome
    return {
        "run_id": work.run_id,
        "runner_id": work.runner_id,
        "session": _encode(work.session).decode(),
        "attempt": str(work.attempt),
        "native_session_id": work.native_session_id,
        "tool_call": _encode(work.tool_call).decode() if work.tool_call else "",
        "recorded_outcome": recorded or "",
        "status": "open",
        "opened_at": work.opened_at,
        "reconcile_decision_id": work.decision_id,
    }


@dataclass(frozen=True)
class Continuation:
    """The outcome of recording a continue_fresh step: the script's code ('resolved' or
    'retried' when this call recorded it), and what to publish for which session."""

    code: str
    detail: str
    decision: Decision
    session_key: str
    outbox: list[OutboxEntry]


def continue_fresh(
    run: decisions.Run,
    reason: DecisionReason,
    actor: str,
    kind: str,
    now: float,
    reconciled_outcome: ActionOutcome | None = None,
) -> tuple[Decision, steps.RunStep]:
    """An operator's `continue_fresh` and the step recording it in the continuation slot, with
    the audit entry of `kind` by `actor`; the saved session is not touched (it stays held)."""
    decided = decisions.decision(run, CONTINUE_ACTION, reason, now, reconciled_outcome=reconciled_outcome)
    return decided, decisions.decision_step(decided, continue_slot(run.attempt), actor, audit_kind=kind)


class ReconciliationStore:
    def __init__(self, client: aioredis.Redis, retention: Retention = DEFAULT) -> None:
        self.redis = client
        self.retention = retention

    async def session_of_run(self, run_id: str) -> str | None:
        return await index.session_of_run(self.redis, run_id)

    # Opening -----------------------------------------------------------------------------

    async def open(self, work: ReconcileWork) -> str:
        """Open the record once, then index it; returns 'opened', 'reopened' or 'exists'."""
        sk = work.session.key
        fields = record_fields(work)
        audit = AuditEntry(
            at=now_rfc3339(),
            kind="reconciliation_opened",
            actor=SERVICE_ACTOR,
            attempt=work.attempt,
            action="reconcile",
            decision_id=work.decision_id,
            outcome=fields["recorded_outcome"] or None,
        )
        rec_key = keys.reconciliation(sk, work.run_id)
        code, opened_at = await _OPEN(
            self.redis,
            [rec_key, keys.run_audit(sk, work.run_id), keys.reconciliation_history(sk, work.run_id)],
            [str(work.attempt), _encode(fields), _encode(audit)],
        )
        # The run index is the classifier's, written before its step; setting the same value
        # again keeps `get` working for a record whatever wrote it first.
        await index.index_run(self.redis, work.run_id, sk)
        # Scored by the stored opening time, so a redelivery re-indexes identically.
        status = await store.call(self.redis.hget(rec_key, "status"))  # type: ignore[misc]
        if status == b"open":
            await steps.follow_run(self.redis, work.run_id, -1)  # found while it is open
        await self.index_put(sk, work.run_id, epoch_of(opened_at.decode()), text(status))
        return str(code.decode())

    async def index_put(self, sk: str, run_id: str, score: float, status: str) -> None:
        """List the record in its bucket's open set while `status` is open, else delivered."""
        where = "open" if status == "open" else "delivered"
        await _INDEX_PUT(
            self.redis,
            [open_index(run_id), delivered_index(run_id)],
            [member(sk, run_id), repr(score), where],
        )

    # Reading ------------------------------------------------------------------------------

    async def load(self, run_id: str) -> tuple[str, ReconciliationRecord] | None:
        sk = await self.session_of_run(run_id)
        if sk is None:
            return None
        raw = await store.call(self.redis.hgetall(keys.reconciliation(sk, run_id)))  # type: ignore[misc]
        return (sk, parse_record(raw)) if raw else None

    async def load_run(self, run_id: str) -> tuple[str, RunView] | None:
        sk = await self.session_of_run(run_id)
        if sk is None:
            return None
        raw = await store.call(self.redis.hgetall(keys.run(sk, run_id)))  # type: ignore[misc]
        return (sk, parse_run(raw)) if raw else None

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
            rows = [row async for row in _take(merged, chunk)]
            if not rows:
                return items, None
            pipe = self.redis.pipeline(transaction=False)
            for _, m in rows:
                sk, run_id = split_member(m)
                pipe.hgetall(keys.reconciliation(sk, run_id))
            for (score, m), raw in zip(rows, await store.call(pipe.execute()), strict=True):
                if not raw:
                    continue
                record = parse_record(raw)
                if status is not None and record.status != status:
                    continue
                encoded = len(_encode(record)) + 1
                if items and (len(items) >= limit or size + encoded > max_bytes):
                    assert last is not None
                    return items, encode_cursor(*last)
                items.append(record)
                size += encoded
                last = (score, m)

    async def audit(self, run_id: str) -> list[AuditEntry] | None:
        sk = await self.session_of_run(run_id)
        if sk is None or not await store.call(self.redis.exists(keys.run(sk, run_id))):
            return None
        return await index.audit_trail(self.redis, sk, run_id)

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
        code, detail = await steps.record_resolution(
            self.redis,
            sk,
            record.run_id,
            step,
            outcome=outcome,
            resolution=resolution,
            decision_id=decision.decision_id,
            attempt=record.attempt,
            retention=self.retention,
        )
        return Continuation(code, detail, decision, sk, step.outbox)

    async def record_retry(self, sk: str, run: RunView, actor: str) -> Continuation:
        decision, step = continue_fresh(run, "operator_retry", actor, "operator_retry", time.time())
        code, detail = await steps.record_retry(
            self.redis, sk, run.run_id, step, attempt=run.attempt, retention=self.retention
        )
        return Continuation(code, detail, decision, sk, step.outbox)

    # The indexes ---------------------------------------------------------------------------

    async def drop_from_open(self, sk: str, run_id: str) -> None:
        """List a delivered record as delivered. A record reopened meanwhile (a later attempt)
        is listed as open again, so a concurrent reopen is never lost from the index."""
        rec_key = keys.reconciliation(sk, run_id)
        status, opened_at = await store.call(self.redis.hmget(rec_key, ["status", "opened_at"]))  # type: ignore[misc]
        if not opened_at:
            return
        score = epoch_of(opened_at.decode())
        await self.index_put(sk, run_id, score, "delivered")
        status, opened_at = await store.call(self.redis.hmget(rec_key, ["status", "opened_at"]))  # type: ignore[misc]
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
                members: list[tuple[bytes, float]] = await store.call(
                    self.redis.zrange(index_key, start, start + page - 1, withscores=True)
                )
                if not members:
                    break
                start += page
                pipe = self.redis.pipeline(transaction=False)
                for m, _ in members:
                    sk, run_id = split_member(m)
                    pipe.hget(keys.reconciliation(sk, run_id), "status")
                statuses: list[Any] = await store.call(pipe.execute())
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
            old: list[bytes] = await store.call(
                self.redis.zrangebyscore(index_key, "-inf", cutoff, start=0, num=TRIM_BATCH)
            )
            if not old:
                continue
            pipe = self.redis.pipeline(transaction=False)
            for m in old:
                pipe.exists(keys.reconciliation(*split_member(m)))
            gone = [m for m, found in zip(old, await store.call(pipe.execute()), strict=True) if not found]
            if gone:
                removed += int(await store.call(self.redis.zrem(index_key, *gone)))
        return removed

    async def move_legacy(self, batch: int = 500) -> int:
        """Move the entries of an earlier release's single sorted sets into the buckets, by
        their record's status, then remove them; an entry whose record is gone is dropped.
        Returns how many were looked at; 0 once the legacy sets are gone."""
        moved = 0
        for legacy in keys.LEGACY_RECONCILIATION_INDEXES:
            while True:
                rows: list[tuple[bytes, float]] = await store.call(
                    self.redis.zrange(legacy, 0, batch - 1, withscores=True)
                )
                if not rows:
                    break
                pipe = self.redis.pipeline(transaction=False)
                for m, _ in rows:
                    pipe.hget(keys.reconciliation(*split_member(m)), "status")
                for (m, score), status in zip(rows, await store.call(pipe.execute()), strict=True):
                    if status is not None:
                        sk, run_id = split_member(m)
                        await self.index_put(sk, run_id, score, text(status))
                await store.call(self.redis.zrem(legacy, *(m for m, _ in rows)))
                moved += len(rows)
        return moved


class _Source:
    """One sorted set of a merge: a buffer of its next entries after the cursor."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.offset = 0
        self.rows: list[tuple[float, bytes]] = []
        self.done = False


async def merge_indexes(
    client: aioredis.Redis, index_keys: list[str], after: tuple[float, bytes] | None, chunk: int
) -> AsyncIterator[tuple[float, bytes]]:
    """The entries of every sorted set in `index_keys` after `after`, in one (score, member)
    order (a sorted set's own order), reading each set `chunk` entries at a time."""
    low: float | str = after[0] if after is not None else "-inf"

    async def fill(source: _Source) -> None:
        while not source.rows and not source.done:
            rows: list[tuple[bytes, float]] = await store.call(
                client.zrangebyscore(source.key, low, "+inf", start=source.offset, num=chunk, withscores=True)
            )
            source.offset += len(rows)
            source.done = len(rows) < chunk
            source.rows = [(score, m) for m, score in rows if after is None or (score, m) > after]
            source.rows.reverse()  # popped from the end

    sources = [_Source(key) for key in index_keys]
    await asyncio.gather(*(fill(source) for source in sources))
    heap = [(source.rows[-1], i) for i, source in enumerate(sources) if source.rows]
    heapq.heapify(heap)
    while heap:
        row, i = heapq.heappop(heap)
        yield row
        source = sources[i]
        source.rows.pop()
        await fill(source)
        if source.rows:
            heapq.heappush(heap, (source.rows[-1], i))


async def _take(rows: AsyncIterator[tuple[float, bytes]], n: int) -> AsyncIterator[tuple[float, bytes]]:
    """At most `n` more entries of `rows`."""
    for _ in range(n):
        try:
            yield await anext(rows)
        except StopAsyncIteration:
            return
