"""One event on `continuity.events.<runner_id>.<event_type>`: validate, authenticate, classify,
decide, record in one atomic step, publish (contract sections 4 and 7).

Outcomes of `handle`: it returns (the message is acknowledged), raises `Reject` (dead letter,
then acknowledged), or lets a Redis or NATS failure propagate (negative acknowledgement with a
delay, redelivery; the shared consumer moves it to `continuity.dead.exhausted` at the cap).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
from nats.aio.msg import Msg

from shared import identity, keys, metrics, store, subjects
from shared.bus.ack_reply import stored_at, stream_seq
from shared.bus.consumer import Reject
from shared.config import Config
from shared.contracts.events import ResumeFailed
from shared.contracts.limits import MAX_EVENT_BYTES
from shared.decoding import InvalidInput, decode
from shared.logs import Log
from shared.outbox import Outbox, OutboxEntry
from shared.pipeline import PipelinedRedis
from shared.runs import index, steps
from shared.runs.retention import Retention
from shared.runs.session_hash import SAVED_FIELDS, saved_session_of

from .step import SlotView, announced_ids, choose, failure_class_of

log = Log("continuity.classifier")

EVENT_TYPE = "resume_failed"
_TYPE_SUFFIX = "." + EVENT_TYPE

_decoder = msgspec.json.Decoder(ResumeFailed)


DECIDE_TRIES = 3
"""Reads and decisions of one event before a session that keeps changing counts as transient."""


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
        self._directory = identity.RunnerDirectory(client, cache_s=config.runner_cache_s)
        self._enforced = config.tenancy == "enforced"
        self._outbox = outbox
        self._keys = config.runner_keys
        self._backoff_s = config.retry_backoff_s
        self._retention = Retention.from_config(config)
        self._clock = clock

    async def __call__(self, msg: Msg) -> None:
        type_label = _type_label(msg.subject)
        try:
            outcome = await self._handle(msg)
        except Reject as rej:
            outcome = _OUTCOMES.get(rej.dead_subject, "invalid")
            metrics.adder(metrics.EVENTS, type_label, outcome)()
            seq = stream_seq(msg.reply)
            log.warning("event_rejected", reason=rej.reason, outcome=outcome, stream_seq=seq)
            raise
        except Exception:
            metrics.adder(metrics.EVENTS, type_label, "transient")()
            raise
        metrics.adder(metrics.EVENTS, type_label, outcome)()

    async def _handle(self, msg: Msg) -> str:
        event = self._validate(msg)
        record = await self._directory.get(event.runner_id)
        allowed = identity.access(record, event.session.tenant, enforced=self._enforced)
        if allowed is not identity.Access.ALLOWED:
            identity.refused(event.runner_id, record, allowed.value)
            raise Reject(subjects.DEAD_REFUSED, allowed.value)
        failure_class = failure_class_of(event, self._keys)
        sk = event.session.key
        published_at = stored_at(msg.reply)  # when JetStream stored the event
        for _ in range(DECIDE_TRIES):
            # One round trip: index the run (unless it is already) and read the session record.
            claimed = index.claim_run(self._redis, event.run_id, sk, self._retention.run_ms)
            session = self._redis.send("HMGET", keys.session(sk), *SAVED_FIELDS)
            indexed, raw_session = await claimed, await session
            if indexed is not None and indexed != sk:
                # A run's slots live under its session's tag: an event naming another session for
                # the same run would find no slot there and decide the run a second time.
                raise Reject(subjects.DEAD_INVALID, "run_session_mismatch")
            choice = choose(
                event,
                failure_class,
                saved_session_of(raw_session),
                self._clock(),
                backoff_s=self._backoff_s,
                published_at=published_at,
            )
            try:
                existing = await steps.record_step(
                    self._redis, sk, event.run_id, choice.step, self._retention, index_fresh=indexed is None
                )
                break
            except steps.SessionChanged:
                continue  # a commit landed between the read and the recording: decide again
            except steps.NotOwned as refusal:
                if indexed is None:
                    # This event indexed the run a moment ago: leave no claim on the run_id.
                    await store.call(self._redis.execute_command("DEL", keys.run_index(event.run_id)))
                identity.refused(event.runner_id, record, refusal.reason)
                raise Reject(subjects.DEAD_REFUSED, refusal.reason) from None
        else:
            raise steps.SessionChanged(sk)  # a transient failure: the event is redelivered
        if existing is not None:
            # The slot was taken by an earlier delivery: no second decision, but finish
            # publishing what that delivery recorded if a crash stopped it before the flush.
            await self._flush_leftovers(sk, event.run_id, event.attempt, existing)
            log.info("event_duplicate", run_id=event.run_id, attempt=event.attempt)
            return "duplicate"

        verdict, reason = choice.verdict, choice.reason
        await self._outbox.flush(sk, choice.step.outbox)
        metrics.adder(metrics.FAILURE_CLASSES, failure_class)()
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
        metrics.adder(metrics.DECISIONS, verdict, reason)()
        if published_at is not None:
            metrics.observer(metrics.DECISION_LATENCY)(max(0.0, time.time() - published_at))
        return "decided"

    def _validate(self, msg: Msg) -> ResumeFailed:
        runner = subjects.runner_of_event_subject(msg.subject)
        if runner is None:
            raise Reject(subjects.DEAD_INVALID, "invalid_subject")
        if not msg.subject.endswith(_TYPE_SUFFIX):  # the subject's last token, of four
            raise Reject(subjects.DEAD_INVALID, "unsupported_event_type")
        try:
            event = decode(msg.data, _decoder, max_bytes=MAX_EVENT_BYTES)
        except InvalidInput as err:
            raise Reject(subjects.DEAD_INVALID, err.code) from None
        if event.runner_id != runner:
            raise Reject(subjects.DEAD_INVALID, "runner_mismatch")
        return event

    async def _flush_leftovers(self, sk: str, run_id: str, attempt: int, existing: bytes) -> None:
        try:
            slot = msgspec.json.decode(existing, type=SlotView)
        except msgspec.MsgspecError:
            # Not ours to repair here; the sweeper publishes any entry it finds.
            log.warning("slot_unreadable", run_id=run_id, attempt=attempt)
            return
        msg_ids = announced_ids(slot, run_id, attempt)
        if not msg_ids:
            return
        raw = await store.call(self._redis.execute_command("HMGET", keys.outbox(sk), *msg_ids))
        entries = [msgspec.json.decode(data, type=OutboxEntry) for data in raw if data is not None]
        if entries:
            await self._outbox.flush(sk, entries)
            log.info("outbox_repaired", run_id=run_id, attempt=attempt, count=len(entries))


_OUTCOMES = {subjects.DEAD_QUARANTINE: "quarantined", subjects.DEAD_REFUSED: "refused"}
"""The `outcome` label of an event dead-lettered on each subject (any other: `invalid`)."""


def _type_label(subject: str) -> str:
    """A closed metric label: runners choose subject tokens, so unknown types share one."""
    return EVENT_TYPE if subject.endswith(_TYPE_SUFFIX) else "other"
