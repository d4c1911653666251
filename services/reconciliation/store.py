"""Reconciliation records and operator steps in Redis.

Layout (every key of one run under its session's hash tag, see `shared.keys`):
- `keys.reconciliation(sk, run_id)`: hash of the record. `session`, `tool_call` and
  `resolution` are JSON; an absent value is the empty string. `action_outcome` and
  `continue_decision_id` are kept beside `resolution` so the scripts compare them directly.
- `<that key>:history`: list of the earlier records of the run (JSON), when a later attempt
  stopped on a pending call again and the record was opened anew.
- `keys.RECONCILIATION_INDEX`: every record, member `<sk>\\n<run_id>`, score its opening time.
- `OPEN_INDEX`: the records still open, same members: the gauges and `list status=open` read it
  without walking delivered records. A member may outlive its record's delivery after a crash;
  readers check the record's status, and the gauge refresher prunes such members.

A list is read in pages: a page's cursor is the (score, member) of its last record, so the next
page starts right after it however the index changed meanwhile (both indexes order the same
members the same way, so a cursor serves either status).

The two indexes are not under a session's tag, so they are written outside the atomic scripts:
after the record is opened (the work item is acknowledged only after both) and after it is
delivered.
"""

from __future__ import annotations

import base64
import binascii
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import redis.asyncio as aioredis

from shared import keys, store
from shared.contracts import AuditEntry
from shared.contracts.decisions import Decision, ReconcileWork
from shared.contracts.limits import MAX_PAGE_BYTES, NAME_CHARS
from shared.contracts.reconciliation import ReconciliationRecord, Resolution, RunView, ToolCallRecord
from shared.contracts.session import SessionRef
from shared.contracts.types import (
    Action,
    ActionOutcome,
    DecisionReason,
    ReconciliationStatus,
    RecordedOutcome,
    RunStatus,
)
from shared.outbox import OutboxEntry
from shared.runs import decisions, index, steps
from shared.runs.names import continue_slot
from shared.runs.session_hash import text
from shared.times import now_rfc3339

OPEN_INDEX = "continuity:reconciliations:open"
"""Sorted set of the open records' `<session key>\\n<run_id>`, by opening time."""

CONTINUE_ACTION: Action = "continue_fresh"
SERVICE_ACTOR = "reconciliation"

_OPEN = store.Script("reconciliation_open", with_lib=True)

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
    def __init__(self, client: aioredis.Redis) -> None:
        self.redis = client

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
            [rec_key, keys.run_audit(sk, work.run_id), f"{rec_key}:history"],
            [str(work.attempt), _encode(fields), _encode(audit)],
        )
        # The run index is the classifier's, written before its step; setting the same value
        # again keeps `get` working for a record whatever wrote it first.
        await index.index_run(self.redis, work.run_id, sk)
        # Scored by the stored opening time, so a redelivery re-indexes identically.
        score = epoch_of(opened_at.decode())
        name = member(sk, work.run_id)
        await store.call(self.redis.zadd(keys.RECONCILIATION_INDEX, {name: score}))
        status = await store.call(self.redis.hget(rec_key, "status"))  # type: ignore[misc]
        if status == b"open":
            await store.call(self.redis.zadd(OPEN_INDEX, {name: score}))
        return str(code.decode())

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
        index = OPEN_INDEX if status == "open" else keys.RECONCILIATION_INDEX
        after = decode_cursor(cursor) if cursor is not None else None
        chunk = min(max(limit, 64), 500)
        items: list[ReconciliationRecord] = []
        size = 0
        last: tuple[float, bytes] | None = None
        offset = 0
        low: float | str = after[0] if after is not None else "-inf"
        while True:
            rows: list[tuple[bytes, float]] = await store.call(
                self.redis.zrangebyscore(index, low, "+inf", start=offset, num=chunk, withscores=True)
            )
            if not rows:
                return items, None
            offset += len(rows)
            pipe = self.redis.pipeline(transaction=False)
            for m, _ in rows:
                sk, run_id = split_member(m)
                pipe.hgetall(keys.reconciliation(sk, run_id))
            for (m, score), raw in zip(rows, await store.call(pipe.execute()), strict=True):
                if not raw or (after is not None and (score, m) <= after):
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
        )
        return Continuation(code, detail, decision, sk, step.outbox)

    async def record_retry(self, sk: str, run: RunView, actor: str) -> Continuation:
        decision, step = continue_fresh(run, "operator_retry", actor, "operator_retry", time.time())
        code, detail = await steps.record_retry(self.redis, sk, run.run_id, step, attempt=run.attempt)
        return Continuation(code, detail, decision, sk, step.outbox)

    # The open index -----------------------------------------------------------------------

    async def drop_from_open(self, sk: str, run_id: str) -> None:
        """Remove a delivered record from the open index. A record reopened meanwhile (a later
        attempt) is put back, so a concurrent reopen is never lost from the index."""
        name = member(sk, run_id)
        rec_key = keys.reconciliation(sk, run_id)
        await store.call(self.redis.zrem(OPEN_INDEX, name))
        status, opened_at = await store.call(self.redis.hmget(rec_key, ["status", "opened_at"]))  # type: ignore[misc]
        if status == b"open" and opened_at:
            await store.call(self.redis.zadd(OPEN_INDEX, {name: epoch_of(opened_at.decode())}))

    async def open_summary(self, now: float | None = None) -> tuple[int, float]:
        """(open records, age in seconds of the oldest), pruning delivered members on the way."""
        now = time.time() if now is None else now
        count = 0
        oldest: float | None = None
        stale: list[tuple[str, str]] = []
        start = 0
        page = 500
        while True:
            members: list[tuple[bytes, float]] = await store.call(
                self.redis.zrange(OPEN_INDEX, start, start + page - 1, withscores=True)
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
