"""A run step, and how each recording script takes one.

A step is what one decision point writes, in one atomic script: the decision slot, the run
record, the outbox entries, an audit entry and, after some decisions, the saved session held.
Four scripts record steps (`record_step`, the archiver's `archive_local_move`, the operator's
`reconciliation_resolve` and `reconciliation_retry`); they take the step's five common
arguments in the same order, packed here once.

Each script also gives the run's records their retention (`retention`); the run index is the
one record outside the session's hash tag, so right after a script it is given the time to
live the script left on the run record (none while the run waits on a person). A crash in
between leaves the index living longer than the run, never shorter, and the redelivered
message, finding its step recorded, aligns it again.
"""

from __future__ import annotations

import msgspec

from shared.contract.reconciliation import AuditEntry
from shared.contract.sessions import SessionRef
from shared.contract.times import now_rfc3339
from shared.contract.types import RunStatus
from shared.platform.redis import store
from shared.records import keys
from shared.records.outbox import OutboxEntry
from shared.records.retention import DEFAULT, Retention, waits
from shared.records.session import text

_RECORD_STEP = store.Script("record_step", with_lib=True)
_LOCAL_MOVE = store.Script("archive_local_move", with_lib=True)
_RESOLVE = store.Script("reconciliation_resolve", with_lib=True)
_RETRY = store.Script("reconciliation_retry", with_lib=True)
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
    return fields


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


def _common_args(step: RunStep) -> list[bytes | str]:
    """slot, slot value, run fields, outbox entries, audit entry: every script's middle."""
    return [
        step.slot,
        step.slot_value,
        run_fields_arg(step),
        outbox_arg(step.outbox),
        _encode(step.audit) if step.audit else "",
    ]


def _retention_args(step: RunStep, retention: Retention) -> list[bytes | str]:
    """The run retention, and whether the step waits on a person (kept until the next one)."""
    return [str(retention.run_ms), "1" if waits(step.run_fields["status"]) else "0"]


async def follow_run(client: store.Commands, run_id: str, ttl_ms: int) -> None:
    """Give the run index the time to live a script left on the run record: none (-1) while
    the run waits, else the same; -2 (nothing recorded) changes nothing."""
    if ttl_ms == -1:
        await store.call(client.execute_command("PERSIST", keys.run_index(run_id)))
    elif ttl_ms > 0:
        await store.call(client.execute_command("PEXPIRE", keys.run_index(run_id), ttl_ms))


def step_keys(session_key: str, run_id: str) -> list[str]:
    return [
        keys.run(session_key, run_id),
        keys.run_decisions(session_key, run_id),
        keys.outbox(session_key),
        keys.run_audit(session_key, run_id),
        keys.session(session_key),
        keys.reconciliation(session_key, run_id),
        keys.reconciliation_history(session_key, run_id),
    ]


def step_args(step: RunStep, retention: Retention = DEFAULT) -> list[bytes | str]:
    read = step.read
    return [
        *_common_args(step),
        step.hold or "",
        "1" if read is not None else "0",
        read[0] if read is not None else "",
        str(read[1]) if read is not None else "0",
        *_retention_args(step, retention),
        step.for_runner or "",
    ]


async def record_step(
    client: store.Commands,
    session_key: str,
    run_id: str,
    step: RunStep,
    retention: Retention = DEFAULT,
    *,
    index_fresh: bool = False,
) -> bytes | None:
    """Record `step`; returns None when recorded, or the slot's existing value for a duplicate.
    `index_fresh`: the caller has just indexed the run with the run retention (`claim_run`), so
    a run record given that same time to live needs no second command for its index."""
    recorded, existing, ttl = await _RECORD_STEP(
        client, step_keys(session_key, run_id), step_args(step, retention)
    )
    if int(recorded) == 2:
        raise SessionChanged(session_key)
    if int(recorded) == 3:
        raise NotOwned(text(existing))
    if not (index_fresh and int(ttl) > 0):
        await follow_run(client, run_id, int(ttl))
    return None if int(recorded) == 1 else bytes(existing)


async def record_local_move(
    client: store.Commands,
    session_key: str,
    run_id: str,
    archive_id: str,
    step: RunStep,
    *,
    epoch: int,
    progress: dict[str, str],
    retention: Retention = DEFAULT,
) -> tuple[str, bytes]:
    """The archiver's local move with its `open_replacement` step, recorded only while the
    session's epoch is still `epoch`; returns the script's code and detail."""
    status, value, ttl = await _LOCAL_MOVE(
        client,
        [
            *step_keys(session_key, run_id),
            keys.archive_copy(session_key, archive_id),
            keys.archive_progress(session_key, archive_id),
        ],
        [
            *_common_args(step),
            str(epoch),
            _encode(progress),
            *_retention_args(step, retention),
            str(retention.archive_ms),
        ],
    )
    await follow_run(client, run_id, int(ttl))
    return text(status), bytes(value)


async def record_resolution(
    client: store.Commands,
    session_key: str,
    run_id: str,
    step: RunStep,
    *,
    outcome: str,
    resolution: msgspec.Struct,
    decision_id: str,
    attempt: int,
    retention: Retention = DEFAULT,
) -> tuple[str, str]:
    """An operator's resolution with its `continue_fresh` step; returns code and detail."""
    code, detail, ttl = await _RESOLVE(
        client,
        [
            keys.reconciliation(session_key, run_id),
            keys.run(session_key, run_id),
            keys.run_decisions(session_key, run_id),
            keys.outbox(session_key),
            keys.run_audit(session_key, run_id),
            keys.reconciliation_history(session_key, run_id),
        ],
        [
            outcome,
            _encode(resolution),
            *_common_args(step),
            decision_id,
            str(attempt),
            *_retention_args(step, retention),
        ],
    )
    await follow_run(client, run_id, int(ttl))
    return text(code), text(detail)


async def record_retry(
    client: store.Commands,
    session_key: str,
    run_id: str,
    step: RunStep,
    *,
    attempt: int,
    retention: Retention = DEFAULT,
) -> tuple[str, str]:
    """An operator's retry with its `continue_fresh` step; returns code and detail."""
    code, detail, ttl = await _RETRY(
        client,
        [
            keys.run(session_key, run_id),
            keys.run_decisions(session_key, run_id),
            keys.outbox(session_key),
            keys.run_audit(session_key, run_id),
            keys.reconciliation(session_key, run_id),
            keys.reconciliation_history(session_key, run_id),
        ],
        [str(attempt), *_common_args(step), *_retention_args(step, retention)],
    )
    await follow_run(client, run_id, int(ttl))
    return text(code), text(detail)
