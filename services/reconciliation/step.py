"""The reconciliation service's records as pure functions: the listing's keys and members, how
stored hashes read back, and a run's entry in the runs index with the version that orders its
decisions. A record's fields and the operator's `continue_fresh` step are the records'
(`shared.records.reconciliations`); reading and recording are `store`'s and `runs_index`'s."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from shared.contract.decisions import Decision, RunOutcome
from shared.contract.limits import NAME_CHARS
from shared.contract.reconciliation import (
    AuditEntry,
    ReconciliationRecord,
    Resolution,
    RunView,
    ToolCallRecord,
)
from shared.contract.runs import RunEntry
from shared.contract.sessions import SessionRef
from shared.contract.times import epoch_of
from shared.contract.types import (
    ReconciliationStatus,
    RecordedOutcome,
    RunStatus,
)
from shared.records import keys
from shared.records.decisions import STATUS_BY_ACTION
from shared.records.outbox import OutboxEntry
from shared.records.session import text

OPEN_INDEXES = [keys.reconciliations_open(b) for b in range(keys.RECONCILIATION_BUCKETS)]
DELIVERED_INDEXES = [keys.reconciliations_delivered(b) for b in range(keys.RECONCILIATION_BUCKETS)]
TRIM_BATCH = 500
"""Entries of one delivered set looked at per trim, so one round stays short."""


_encode = msgspec.json.Encoder().encode
_session = msgspec.json.Decoder(SessionRef)
_tool_call = msgspec.json.Decoder(ToolCallRecord)
_resolution = msgspec.json.Decoder(Resolution)
_decision = msgspec.json.Decoder(Decision)


member = keys.reconciliation_member


def split_member(value: bytes | str) -> tuple[str, str]:
    text = value.decode() if isinstance(value, bytes) else value
    session_key, _, run_id = text.rpartition("\n")
    return session_key, run_id


def _text(raw: dict[bytes, bytes], name: str) -> str:
    return text(raw.get(name.encode()))


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


@dataclass(frozen=True)
class Continuation:
    """The outcome of recording a continue_fresh step: the script's code ('resolved' or
    'retried' when this call recorded it), and what to publish for which session."""

    code: str
    detail: str
    decision: Decision
    session_key: str
    outbox: list[OutboxEntry]


def encoded_size(record: ReconciliationRecord) -> int:
    """What `record` adds to a page's items: its JSON and a separator."""
    return len(_encode(record)) + 1


def version_of(entry: RunEntry) -> str:
    """Orders a run's decisions as text: time (microseconds), attempt, then a continuation
    after what it continues when both carry the same time."""
    micros = round(epoch_of(entry.updated_at) * 1_000_000)
    rank = 1 if entry.action == "continue_fresh" else 0
    return f"{micros:018d}:{entry.attempt:04d}:{rank}"


def entry_of(decision: Decision) -> RunEntry:
    return RunEntry(
        run_id=decision.run_id,
        runner_id=decision.runner_id,
        session=decision.session,
        attempt=decision.attempt,
        status=STATUS_BY_ACTION[decision.action],
        action=decision.action,
        reason=decision.reason,
        decision_id=decision.decision_id,
        updated_at=decision.decided_at,
    )


def outcome_entry_of(outcome: RunOutcome) -> RunEntry:
    """A run's entry after its outcome (4.6): its final status, as of when it was recorded."""
    return RunEntry(
        run_id=outcome.run_id,
        runner_id=outcome.runner_id,
        session=outcome.session,
        attempt=outcome.attempt,
        status=outcome.status,
        action=outcome.action,
        reason=outcome.reason,
        decision_id=outcome.decision_id,
        updated_at=outcome.recorded_at,
        recovery_ms=outcome.recovery_ms,
    )


_audit_entry = msgspec.json.Decoder(AuditEntry)


def decode_trail(raw: list[bytes]) -> list[AuditEntry]:
    """A run's audit trail as stored, oldest first, leaving out what is not an audit entry of
    this release (nothing to judge or decide again in it)."""
    trail: list[AuditEntry] = []
    for item in raw:
        try:
            trail.append(_audit_entry.decode(item))
        except msgspec.MsgspecError:
            continue
    return trail
