"""One event on `continuity.events.<runner_id>.<event_type>`: validate, authenticate, classify,
decide, record in one atomic step, publish (contract sections 4 and 7).

Outcomes of `handle`: it returns (the message is acknowledged), raises `Reject` (dead letter,
then acknowledged), or lets a Redis or NATS failure propagate (negative acknowledgement with a
delay, redelivery; the shared consumer moves it to `continuity.dead.exhausted` at the cap).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg

from shared import keys, metrics, records, signing, store, subjects
from shared.bus.consumer import Reject
from shared.config import Config
from shared.contracts import AuditEntry
from shared.contracts.decisions import ArchiveWork, Decision, ReconcileWork, decision_id
from shared.contracts.events import ResumeFailed
from shared.contracts.limits import MAX_EVENT_BYTES
from shared.contracts.types import Action, DecisionReason, FailureClass
from shared.decoding import InvalidInput, decode
from shared.logs import Log
from shared.outbox import Outbox, OutboxEntry
from shared.pipeline import PipelinedRedis
from shared.times import rfc3339_from_epoch

from . import table
from .classify import Evidence, TypedError, classify

log = Log("continuity.classifier")

ACTOR = "classifier"
EVENT_TYPE = "resume_failed"

_decoder = msgspec.json.Decoder(ResumeFailed)
_encode = msgspec.json.Encoder().encode


DECIDE_TRIES = 3
"""Reads and decisions of one event before a session that keeps changing counts as transient."""


def archive_work_id(run_id: str, attempt: int) -> str:
    return f"work:{run_id}:{attempt}:archive"


def reconcile_work_id(run_id: str, attempt: int) -> str:
    return f"work:{run_id}:{attempt}:reconcile"


def archive_id(run_id: str, attempt: int) -> str:
    """`<run_id>-<attempt>`, readable; a run_id too long for that to stay a TOKEN (128
    characters) gets a digest of it instead, which is just as unique and deterministic."""
    readable = f"{run_id}-{attempt}"
    if len(readable) <= 128:
        return readable
    return f"run-{hashlib.sha256(run_id.encode()).hexdigest()[:40]}-{attempt}"


@dataclass(frozen=True, slots=True)
class SavedSession:
    """The two fields of the session record the classifier reads."""

    policy: str | None
    epoch: int | None


class _SlotView(msgspec.Struct):
    """Enough of a recorded slot value (a Decision or an ArchiveWork) to name its messages."""

    type: str
    action: str | None = None


class EventHandler:
    def __init__(
        self,
        client: PipelinedRedis,
        outbox: Outbox,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = client
        self._outbox = outbox
        self._keys = config.runner_keys
        self._backoff_s = config.retry_backoff_s
        self._clock = clock

    async def __call__(self, msg: Msg) -> None:
        type_label = _type_label(msg.subject)
        try:
            outcome = await self._handle(msg)
        except Reject as rej:
            outcome = "quarantined" if rej.dead_subject == subjects.DEAD_QUARANTINE else "invalid"
            metrics.labelled(metrics.EVENTS, type_label, outcome).inc()
            log.warning("event_rejected", reason=rej.reason, outcome=outcome, stream_seq=_stream_seq(msg))
            raise
        except Exception:
            metrics.labelled(metrics.EVENTS, type_label, "transient").inc()
            raise
        metrics.labelled(metrics.EVENTS, type_label, outcome).inc()

    async def _handle(self, msg: Msg) -> str:
        event = self._validate(msg)
        failure_class = classify(
            Evidence(
                authenticated_classification=self._authenticated_classification(event),
                error=TypedError.of(event.error),
            )
        )
        sk = event.session.key
        published_at = _published_at(msg)
        for _ in range(DECIDE_TRIES):
            # One round trip: index the run (unless it is already) and read the session record.
            claimed = records.claim_run(self._redis, event.run_id, sk)
            session = self._redis.send("HGETALL", keys.session(sk))
            indexed, raw_session = await claimed, await session
            if indexed is not None and indexed != sk:
                # A run's slots live under its session's tag: an event naming another session for
                # the same run would find no slot there and decide the run a second time.
                raise Reject(subjects.DEAD_INVALID, "run_session_mismatch")
            saved = _saved_session(raw_session)
            verdict, reason = table.decide(
                table.Facts(
                    failure_class=failure_class,
                    pending_tool_call=event.pending_tool_call is not None,
                    attempt=event.attempt,
                    policy=table.effective_policy(saved.policy),
                    governed_wait_elapsed=event.governed_wait_elapsed,
                )
            )
            now = self._clock()
            if verdict == "archive":
                step = self._archive_step(event, failure_class, reason, published_at, now)
            else:
                step = self._decision_step(event, failure_class, verdict, reason, saved.epoch, now)
            # Recorded only if the policy and epoch decided on are still the stored ones.
            step.read = (saved.policy or "", saved.epoch or 0)
            try:
                existing = await records.record_step(self._redis, sk, event.run_id, step)
                break
            except records.SessionChanged:
                continue  # a commit landed between the read and the recording: decide again
        else:
            raise records.SessionChanged(sk)  # a transient failure: the event is redelivered
        if existing is not None:
            # The slot was taken by an earlier delivery: no second decision, but finish
            # publishing what that delivery recorded if a crash stopped it before the flush.
            await self._flush_leftovers(sk, event.run_id, event.attempt, existing)
            log.info("event_duplicate", run_id=event.run_id, attempt=event.attempt)
            return "duplicate"

        await self._outbox.flush(sk, step.outbox)
        metrics.labelled(metrics.FAILURE_CLASSES, failure_class).inc()
        log.info(
            "event_decided",
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            failure_class=failure_class,
            action=verdict,
            reason=reason,
        )
        if verdict == "archive":
            return "archive_requested"
        metrics.labelled(metrics.DECISIONS, verdict, reason).inc()
        if published_at is not None:
            metrics.DECISION_LATENCY.observe(max(0.0, time.time() - published_at))
        return "decided"

    def _validate(self, msg: Msg) -> ResumeFailed:
        runner = subjects.runner_of_event_subject(msg.subject)
        if runner is None:
            raise Reject(subjects.DEAD_INVALID, "invalid_subject")
        if msg.subject.rsplit(".", 1)[-1] != EVENT_TYPE:
            raise Reject(subjects.DEAD_INVALID, "unsupported_event_type")
        try:
            event = decode(msg.data, _decoder, max_bytes=MAX_EVENT_BYTES)
        except InvalidInput as err:
            raise Reject(subjects.DEAD_INVALID, err.code) from None
        if event.runner_id != runner:
            raise Reject(subjects.DEAD_INVALID, "runner_mismatch")
        return event

    def _authenticated_classification(self, event: ResumeFailed) -> str | None:
        """The classification of a verified command result; an unverifiable one quarantines."""
        result = event.command_result
        if result is None:
            return None
        verdict = signing.verify(self._keys, event.runner_id, event.run_id, event.attempt, result)
        if verdict is not signing.Verdict.VALID:
            raise Reject(subjects.DEAD_QUARANTINE, verdict.value)
        return result.classification

    def _decision_step(
        self,
        event: ResumeFailed,
        failure_class: FailureClass,
        action: Action,
        reason: DecisionReason,
        epoch: int | None,
        now: float,
    ) -> records.RunStep:
        decision = Decision(
            decision_id=decision_id(event.run_id, event.attempt, action),
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            session=event.session,
            action=action,
            reason=reason,
            failure_class=failure_class,
            epoch=epoch,
            not_before=(
                rfc3339_from_epoch(now + table.retry_delay_s(self._backoff_s, event.attempt))
                if action == "retry_same_session"
                else None
            ),
            decided_at=rfc3339_from_epoch(now),
        )
        entry = records.decision_entry(decision)
        payload = entry.payload
        outbox = [entry]
        if action == "reconcile":
            tool_call = event.pending_tool_call
            work = ReconcileWork(
                runner_id=event.runner_id,
                run_id=event.run_id,
                attempt=event.attempt,
                session=event.session,
                native_session_id=event.native_session_id,
                tool_call=tool_call,
                recorded_outcome=tool_call.recorded_outcome if tool_call is not None else None,
                decision_id=decision.decision_id,
                opened_at=decision.decided_at,
            )
            outbox.append(
                OutboxEntry(
                    subject=subjects.WORK_RECONCILE,
                    msg_id=reconcile_work_id(event.run_id, event.attempt),
                    payload=_encode(work),
                )
            )
        return records.RunStep(
            slot=str(event.attempt),
            slot_value=payload,
            run_fields=records.run_fields(
                event.run_id,
                event.runner_id,
                event.session,
                event.attempt,
                records.STATUS_BY_ACTION[action],
                decision,
            ),
            outbox=outbox,
            audit=records.decision_audit(decision, actor=ACTOR),
            # The saved session stays exactly as it was, held for the operator or reconciliation.
            hold=event.native_session_id if table.holds_session(action) else None,
        )

    def _archive_step(
        self,
        event: ResumeFailed,
        failure_class: FailureClass,
        reason: DecisionReason,
        published_at: float | None,
        now: float,
    ) -> records.RunStep:
        work = ArchiveWork(
            archive_id=archive_id(event.run_id, event.attempt),
            runner_id=event.runner_id,
            run_id=event.run_id,
            attempt=event.attempt,
            session=event.session,
            native_session_id=event.native_session_id,
            failure_class=failure_class,
            event_published_at=published_at,
        )
        payload = _encode(work)
        return records.RunStep(
            slot=str(event.attempt),
            slot_value=payload,
            # No runner decision yet: the archiver decides after the remote move.
            run_fields=records.run_fields(
                event.run_id, event.runner_id, event.session, event.attempt, "replacing", None
            ),
            outbox=[
                OutboxEntry(
                    subject=subjects.WORK_ARCHIVE,
                    msg_id=archive_work_id(event.run_id, event.attempt),
                    payload=payload,
                )
            ],
            audit=AuditEntry(
                at=rfc3339_from_epoch(now),
                kind="decision",
                actor=ACTOR,
                attempt=event.attempt,
                action="archive",
                reason=reason,
            ),
        )

    async def _flush_leftovers(self, sk: str, run_id: str, attempt: int, existing: bytes) -> None:
        try:
            slot = msgspec.json.decode(existing, type=_SlotView)
        except msgspec.MsgspecError:
            # Not ours to repair here; the sweeper publishes any entry it finds.
            log.warning("slot_unreadable", run_id=run_id, attempt=attempt)
            return
        msg_ids = _announced_ids(slot, run_id, attempt)
        if not msg_ids:
            return
        raw = await store.call(self._redis.execute_command("HMGET", keys.outbox(sk), *msg_ids))
        entries = [msgspec.json.decode(data, type=OutboxEntry) for data in raw if data is not None]
        if entries:
            await self._outbox.flush(sk, entries)
            log.info("outbox_repaired", run_id=run_id, attempt=attempt, count=len(entries))


def _saved_session(raw: list[bytes] | dict[bytes, bytes]) -> SavedSession:
    """From HGETALL's reply (a flat list from the pipelined connection, a dict from redis-py)."""
    if not raw:
        return SavedSession(policy=None, epoch=None)
    fields = raw if isinstance(raw, dict) else dict(zip(raw[::2], raw[1::2], strict=True))
    policy = fields.get(b"checkpoint_policy")
    return SavedSession(
        policy=policy.decode("utf-8", "replace") if policy is not None else None,
        epoch=_int(fields.get(b"epoch")),
    )


def _announced_ids(slot: _SlotView, run_id: str, attempt: int) -> list[str]:
    """The outbox message ids the step that wrote `slot` recorded."""
    if slot.type == "archive":
        return [archive_work_id(run_id, attempt)]
    if slot.type == "decision" and slot.action is not None:
        ids = [decision_id(run_id, attempt, slot.action)]
        if slot.action == "reconcile":
            ids.append(reconcile_work_id(run_id, attempt))
        return ids
    return []


def _type_label(subject: str) -> str:
    """A closed metric label: runners choose subject tokens, so unknown types share one."""
    return EVENT_TYPE if subject.rsplit(".", 1)[-1] == EVENT_TYPE else "other"


def _published_at(msg: Msg) -> float | None:
    """When JetStream stored the event, in epoch seconds."""
    try:
        return msg.metadata.timestamp.timestamp()
    except Exception:
        return None


def _stream_seq(msg: Msg) -> int | None:
    try:
        return int(msg.metadata.sequence.stream)
    except Exception:
        return None


def _int(value: bytes | None) -> int:
    """A record written by an older release has no epoch: it was never replaced, so 0."""
    try:
        return int(value) if value else 0
    except ValueError:
        return 0
