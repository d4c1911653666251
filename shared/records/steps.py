"""A run step, and how the recording scripts take one (no I/O: `shared.records.store` runs them).

A step is what one decision point writes, in one atomic script: the decision slot, the run
record, the outbox entries, an audit entry and, after some decisions, the saved session held
(or its handle rejected).
Four scripts record steps (`record_step`, the archiver's `archive_local_move`, the operator's
`reconciliation_resolve` and `reconciliation_retry`); they take the same KEYS
(`scripts.step_keys`) and the step's five common arguments in the same order, packed here once.
"""

from __future__ import annotations

import msgspec

from shared.contract.reconciliation import AuditEntry
from shared.contract.sessions import SessionRef
from shared.contract.times import now_rfc3339
from shared.contract.types import RunStatus
from shared.platform import tracing
from shared.records.outbox import OutboxEntry
from shared.records.retention import DEFAULT, Retention, waits

_encode = msgspec.json.Encoder().encode


class RunStep(msgspec.Struct, kw_only=True):
    slot: str
    slot_value: bytes
    run_fields: dict[str, str]
    outbox: list[OutboxEntry]
    audit: AuditEntry | None = None
    hold: str | None = None
    """The native session id to hold for an operator: the saved session's state becomes `held`
    only while its record still saves this handle."""
    reject: str | None = None
    """The native session id to reject (contract 3.4, as a `resume_target_missing`): the saved
    session's state becomes `rejected`, with `revision` + 1, only while its record still saves
    this handle and is neither `held` nor `archived` (`record_step` only)."""
    read: tuple[str, int] | None = None
    """The session's checkpoint policy and epoch the step was decided on ('' and 0 without a
    record): when given, the step is recorded only while they are still the stored ones."""
    slot_is_last_decision: bool = False
    """The slot value is the decision the run record keeps as `last_decision`: the scripts copy
    it there, so the decision is sent once, not twice."""
    for_runner: str | None = None
    """The runner whose event this step answers: `record_step` records it only while the run
    (if recorded) and the session (if owned) are that runner's (contract 10.4)."""


class SessionChanged(Exception):
    """The session record changed between the read a decision was made on and its recording."""


class NotOwned(Exception):
    """The run or the session belongs to another runner than the step's (`reason`:
    `run_not_owned` or `session_not_owned`); nothing was recorded."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def run_fields(
    run_id: str,
    runner_id: str,
    session: SessionRef,
    attempt: int,
    status: RunStatus,
    last_decision: msgspec.Struct | None,
    updated_at: str | None = None,
) -> dict[str, str]:
    """The run record's fields (`keys.run`); `updated_at` defaults to now."""
    fields = {
        "run_id": run_id,
        "runner_id": runner_id,
        "session": _encode(session).decode(),
        "attempt": str(attempt),
        "status": status,
        "updated_at": updated_at if updated_at is not None else now_rfc3339(),
    }
    if last_decision is not None:
        fields["last_decision"] = _encode(last_decision).decode()
    # A run stopped for a person keeps its trace (tracing on): the operator's step continues it.
    trace = tracing.recorded() if waits(status) else ""
    if trace:
        fields[TRACE_FIELD] = trace
    return fields


TRACE_FIELD = "trace"
"""The run record's field holding the `traceparent` of the step that stopped it for a person
(tracing on)."""


def outbox_arg(entries: list[OutboxEntry]) -> bytes | str:
    """Outbox entries as the scripts' `outbox_put` reads them: `[[msg_id, entry JSON], ...]`."""
    return _encode([[e.msg_id, _encode(e).decode()] for e in entries]) if entries else ""


_SLOT_FIELD = b',"last_decision":true}'


def run_fields_arg(step: RunStep) -> bytes:
    """The run fields as the scripts' `hset_json` reads them: a JSON object of strings, where
    `"last_decision": true` stands for the step's slot value."""
    encoded = _encode(step.run_fields)
    # Run fields are never empty (`run_fields`): the field goes in before the closing brace.
    return encoded[:-1] + _SLOT_FIELD if step.slot_is_last_decision else encoded


def common_args(step: RunStep) -> list[bytes | str]:
    """slot, slot value, run fields, outbox entries, audit entry: every script's middle."""
    return [
        step.slot,
        step.slot_value,
        run_fields_arg(step),
        outbox_arg(step.outbox),
        _encode(step.audit) if step.audit else "",
    ]


def retention_args(step: RunStep, retention: Retention) -> list[bytes | str]:
    """The run retention, and whether the step waits on a person (kept until the next one)."""
    return [str(retention.run_ms), "1" if waits(step.run_fields["status"]) else "0"]


def step_args(step: RunStep, retention: Retention = DEFAULT) -> list[bytes | str]:
    read = step.read
    return [
        *common_args(step),
        step.hold or "",
        "1" if read is not None else "0",
        read[0] if read is not None else "",
        str(read[1]) if read is not None else "0",
        *retention_args(step, retention),
        step.for_runner or "",
        step.reject or "",
    ]
