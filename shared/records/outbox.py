"""The transactional outbox: messages recorded in Redis with the state they announce, then
published to JetStream with `Nats-Msg-Id`, then deleted.

A service publishes its own entries right after recording them (`flush`). Entries left behind
by a crash between recording and publishing are found by the sweeper, which scans every
session's outbox (a SCAN of every master on Redis Cluster, `Redis.scan`) and publishes what is older
than a grace period, and by a message that finds its step recorded already (`flush_leftovers`).
Both take such an entry first (`take`, one atomic script): one taker at a time publishes it, so a
re-sent report and a sweeper never both send it on the subject. An entry younger than the grace
period is its recorder's, which publishes it right after its step. A publisher stalled for longer
than the grace period between its step and its publication can still meet a taker: JetStream's
duplicate window (`Nats-Msg-Id`) then keeps one copy in the stream, which is what runners read.

An entry too large ever to be published (`PayloadTooLarge`) is set aside after its one try,
by `flush` or by the sweeper, whichever meets it: a bounded copy goes to
`continuity.dead.invalid` (reason `payload_too_large`, de-duplicated by its msg id), the entry
leaves the outbox, `continuity_outbox_set_aside_total` counts it, and the log names its msg id.
What it announced stays recorded as it is: the run keeps its one decision, undelivered, and an
operator finds it with `continuity runs show`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Sequence

import msgspec
from nats.js import JetStreamContext

from shared.contract import subjects
from shared.platform import metrics, tracing
from shared.platform.bus import nats_private
from shared.platform.bus.publish import TOO_LARGE_REASON, PayloadTooLarge, dead_letter, publish
from shared.platform.logs import Log
from shared.platform.parts import Task
from shared.platform.redis import Redis
from shared.records import keys, scripts

log = Log("continuity.outbox")

SWEEP_SCAN_COUNT = 5000
"""Keys one SCAN step of the sweeper walks (a hint to the server). The sweep visits every key
either way; larger steps cost this process far fewer round trips per sweep."""


class OutboxEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    subject: str
    msg_id: str
    payload: bytes
    recorded_at: float = msgspec.field(default_factory=time.time)
    trace: str = ""
    """The `traceparent` of the work that recorded it, as it arrived (tracing on): its
    publication, by `flush` or by the sweeper after a crash, joins that trace, and so does what
    it announces."""


_decode_entry = msgspec.json.Decoder(OutboxEntry).decode


class Outbox:
    """A service's outbox: `flush` after recording, `sweep` for what crashes left behind."""

    def __init__(
        self,
        client: Redis,
        js: JetStreamContext,
        *,
        grace_s: float = 5.0,
        service: str | None = None,
    ) -> None:
        self._redis = client
        self._js = js
        self._grace_s = grace_s
        self._service = service or _service_of(js)
        self._span_name = f"continuity-{self._service} outbox publish"

    async def flush(self, session_key: str, entries: list[OutboxEntry]) -> None:
        """Publish freshly recorded entries, then delete them; a failure leaves them for the
        sweeper. An entry too large to publish is set aside, the others still go out, and then
        `PayloadTooLarge` tells the caller that what it recorded was not delivered."""
        too_large: PayloadTooLarge | None = None
        sent: list[str] = []
        for entry in entries:
            try:
                await self._publish(entry, "flush")
            except PayloadTooLarge as err:
                await self._set_aside(keys.outbox(session_key), entry, err)
                too_large = too_large or err
                continue
            sent.append(entry.msg_id)
        if sent:
            await self._redis.execute("HDEL", keys.outbox(session_key), *sent)
        if too_large is not None:
            raise too_large

    async def take(self, outbox_key: str, msg_ids: Sequence[str]) -> list[OutboxEntry]:
        """The entries of `msg_ids` recorded more than the grace period ago, taken for this
        publisher: another taker leaves them alone for a grace period (`outbox_take.lua`)."""
        if not msg_ids:
            return []
        now = time.time()
        reply = await self._redis.script(
            scripts.OUTBOX_TAKE, [outbox_key], [repr(now - self._grace_s), repr(now), *msg_ids]
        )
        return [_decode_entry(data) for data in reply[1::2]]

    async def flush_leftovers(self, session_key: str, msg_ids: Sequence[str]) -> int:
        """Publish what a step recorded earlier and its recorder left unpublished (a crash
        between the step and its publication); how many were published. Entries younger than
        the grace period stay with their recorder, which is publishing them."""
        entries = await self.take(keys.outbox(session_key), msg_ids)
        if entries:
            await self.flush(session_key, entries)
        return len(entries)

    async def _publish(self, entry: OutboxEntry, by: str) -> None:
        """Publish `entry` with its trace context: in a span of that trace when tracing is on
        here, else passing the recorded `traceparent` on as it is."""
        if not tracing.ENABLED:
            await publish(self._js, entry.subject, entry.payload, entry.msg_id, traceparent=entry.trace)
            return
        if by == "flush" and not tracing.current_sampled():
            # A span nobody exports: its trace context goes on as the current span's, unsampled,
            # without a span of its own.
            await publish(self._js, entry.subject, entry.payload, entry.msg_id, traceparent=tracing.current())
            return
        with tracing.span(
            self._span_name,
            # Right after recording: a child of the work in hand; by the sweeper: of the work
            # as it arrived where it was recorded (`tracing.recorded`).
            parent=(entry.trace or None) if by == "sweeper" else None,
            kind="producer",
            published_by=by,
            msg_id=entry.msg_id,
            named={"messaging.destination.name": entry.subject},
        ):
            await publish(self._js, entry.subject, entry.payload, entry.msg_id, traceparent=tracing.current())

    async def _set_aside(self, outbox_key: str | bytes, entry: OutboxEntry, err: PayloadTooLarge) -> None:
        """Park an entry that can never be published and remove it from the outbox. If the dead
        letter cannot be published now (NATS away), the entry stays for the next sweep."""
        await dead_letter(
            self._js,
            subjects.DEAD_INVALID,
            reason=TOO_LARGE_REASON,
            original_subject=entry.subject,
            payload=entry.payload,
            msg_id=f"dead:outbox:{entry.msg_id}",
            service=self._service,
        )
        await self._redis.execute("HDEL", outbox_key, entry.msg_id)
        metrics.OUTBOX_SET_ASIDE.inc()
        log.error("outbox_entry_set_aside", msg_id=entry.msg_id, size=err.size, limit=err.limit)

    async def sweep(self) -> int:
        """Publish every entry older than the grace period; returns how many were published."""
        published = 0
        pending = 0
        cutoff = time.time() - self._grace_s
        async for key in self._redis.scan(keys.OUTBOX_PATTERN, SWEEP_SCAN_COUNT):
            raw = await self._redis.hgetall(key)
            pending += len(raw)
            due: list[str] = []
            for msg_id, data in raw.items():
                try:
                    entry = _decode_entry(data)
                except msgspec.DecodeError:
                    # Only the recording scripts write here; an unreadable entry is kept for an
                    # operator, never allowed to stop the sweep of every other entry.
                    log.error("outbox_entry_unreadable", key=key.decode(errors="replace"))
                    continue
                if entry.recorded_at <= cutoff:
                    due.append(msg_id.decode())
            sent, set_aside = await self._sweep_key(key.decode(), due)
            published += sent
            pending -= sent + set_aside
        metrics.OUTBOX_PENDING.set(pending)
        if published:
            log.info("outbox_republished", count=published)
        return published

    async def _sweep_key(self, key: str, due: list[str]) -> tuple[int, int]:
        """Take the due entries of one outbox, publish and delete them: how many were
        published, and how many set aside."""
        published = set_aside = 0
        for entry in await self.take(key, due):
            try:
                await self._publish(entry, "sweeper")
            except PayloadTooLarge as err:
                await self._set_aside(key, entry, err)
                set_aside += 1
                continue
            await self._redis.execute("HDEL", key, entry.msg_id)
            published += 1
        return published, set_aside

    def sweeper(self, interval_s: float = 2.0) -> Task:
        """The sweep every `interval_s` as a part of a service, stopped by its drain after the
        handlers (it publishes what they recorded last).

        Every service that records decisions runs one, so what any crashed replica left recorded
        but unpublished goes out even when no other kind of service is running."""
        return Task(functools.partial(self.run_sweeper, interval_s=interval_s), name="outbox-sweeper")

    async def run_sweeper(self, stop: asyncio.Event, interval_s: float = 2.0) -> None:
        while not stop.is_set():
            try:
                await self.sweep()
            except Exception as exc:  # Redis or NATS away: the next round tries again
                log.warning("outbox_sweep_failed", error_type=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


def _service_of(js: JetStreamContext) -> str:
    """The service's name from its connection's (`continuity-<service>`, see `runtime`)."""
    name = str(nats_private.connection(js).options.get("name") or "")
    return name.removeprefix("continuity-") or "unknown"
