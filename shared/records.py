"""Run records: the decision slots of a run, its record, its audit trail and its outbox
entries, written together in one atomic step (`record_step.lua`).

A slot names one decision point of a run (the classifier's `<attempt>`, the archiver's
`<attempt>:archive`, an operator's `<attempt>:continue`); a slot is written once, so a
redelivered or re-sent message finds it taken and makes no second decision.
"""

from __future__ import annotations

from collections.abc import Awaitable

import msgspec
import redis.asyncio as aioredis

from shared import keys, store, subjects
from shared.contracts.decisions import Decision
from shared.contracts.reconciliation import AuditEntry
from shared.contracts.session import SessionRef
from shared.contracts.types import Action, RunStatus
from shared.outbox import OutboxEntry
from shared.pipeline import PipelinedRedis
from shared.times import now_rfc3339

_RECORD_STEP = store.Script("record_step", with_lib=True)
_encode = msgspec.json.Encoder().encode

STATUS_BY_ACTION: dict[Action, RunStatus] = {
    "retry_same_session": "retrying",
    "open_replacement": "replacing",
    "operator": "operator",
    "reconcile": "reconciling",
    "continue_fresh": "continued",
}


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


class SessionChanged(Exception):
    """The session record changed between the read a decision was made on and its recording."""


def run_fields(
    run_id: str,
    runner_id: str,
    session: SessionRef,
    attempt: int,
    status: RunStatus,
    last_decision: Decision | None,
) -> dict[str, str]:
    fields = {
        "run_id": run_id,
        "runner_id": runner_id,
        "session": _encode(session).decode(),
        "attempt": str(attempt),
        "status": status,
        "updated_at": now_rfc3339(),
    }
    if last_decision is not None:
        fields["last_decision"] = _encode(last_decision).decode()
    return fields


def decision_entry(decision: Decision) -> OutboxEntry:
    """The outbox entry that publishes `decision` to its runner, de-duplicated by its id; its
    payload is also the slot value that records the decision."""
    return OutboxEntry(
        subject=subjects.decisions(decision.runner_id), msg_id=decision.decision_id, payload=_encode(decision)
    )


def decision_audit(decision: Decision, actor: str) -> AuditEntry:
    return AuditEntry(
        at=decision.decided_at,
        kind="decision",
        actor=actor,
        attempt=decision.attempt,
        action=decision.action,
        reason=decision.reason,
        decision_id=decision.decision_id,
    )


def step_keys(session_key: str, run_id: str) -> list[str]:
    return [
        keys.run(session_key, run_id),
        keys.run_decisions(session_key, run_id),
        keys.outbox(session_key),
        keys.run_audit(session_key, run_id),
        keys.session(session_key),
    ]


def step_args(step: RunStep) -> list[bytes | str]:
    return [
        step.slot,
        step.slot_value,
        _encode(step.run_fields),
        _encode([[e.msg_id, _encode(e).decode()] for e in step.outbox]) if step.outbox else "",
        _encode(step.audit) if step.audit else "",
        step.hold or "",
        "1" if step.read is not None else "0",
        step.read[0] if step.read is not None else "",
        str(step.read[1]) if step.read is not None else "0",
    ]


async def record_step(client: store.Commands, session_key: str, run_id: str, step: RunStep) -> bytes | None:
    """Record `step`; returns None when recorded, or the slot's existing value for a duplicate."""
    recorded, existing = await _RECORD_STEP(client, step_keys(session_key, run_id), step_args(step))
    if int(recorded) == 2:
        raise SessionChanged(session_key)
    return None if int(recorded) == 1 else bytes(existing)


async def index_run(client: aioredis.Redis, run_id: str, session_key: str) -> None:
    """Map run_id to its session; written before the step, so a recorded run is always found."""
    await store.call(client.set(keys.run_index(run_id), session_key))


def claim_run(client: PipelinedRedis, run_id: str, session_key: str) -> Awaitable[str | None]:
    """Index run_id under `session_key` unless it is indexed already, in one atomic command;
    returns the session key it was indexed under before (None when this call indexed it).
    (A raw-reply client: redis-py would turn SET's reply into a bool.)"""
    sent = client.send("SET", keys.run_index(run_id), session_key, "NX", "GET")

    async def previous() -> str | None:
        value = await sent
        return value.decode() if value else None

    return previous()


async def session_of_run(client: aioredis.Redis, run_id: str) -> str | None:
    value = await store.call(client.get(keys.run_index(run_id)))
    return value.decode() if value else None


async def audit_trail(client: aioredis.Redis, session_key: str, run_id: str) -> list[AuditEntry]:
    raw = await store.call(client.lrange(keys.run_audit(session_key, run_id), 0, -1))  # type: ignore[arg-type]
    return [msgspec.json.decode(item, type=AuditEntry) for item in raw]
