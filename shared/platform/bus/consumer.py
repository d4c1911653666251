"""A durable JetStream pull consumer with the contract's delivery rules (section 7).

The handler of one message either returns (the message is acknowledged), raises `Reject`
(the message goes to a dead-letter subject with a closed reason, then is acknowledged), raises
`PayloadTooLarge` (something it had to publish can never be sent: the message goes to
`continuity.dead.invalid` with the reason `payload_too_large` and is acknowledged, after one
try), or raises anything else, which is transient: the message is negatively acknowledged with
a delay and redelivered, and after `max_deliver` deliveries it moves to
`continuity.dead.exhausted`. No input can stop the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.contract import subjects
from shared.contract.decoding import InvalidInput, decode
from shared.contract.limits import MAX_EVENT_BYTES
from shared.platform import metrics, tracing
from shared.platform.bus.ack_reply import stream_seq
from shared.platform.bus.fair import FairQueue
from shared.platform.bus.publish import TOO_LARGE_REASON, PayloadTooLarge, dead_letter
from shared.platform.bus.pull import Puller
from shared.platform.bus.streams import DurableConsumer, durable_config, ensure_consumer
from shared.platform.config import Config
from shared.platform.environment import MAX_IN_FLIGHT
from shared.platform.logs import Log

log = Log("continuity.consumer")


class Reject(Exception):
    """The message can never be processed: dead-letter it with a closed reason."""

    def __init__(self, dead_subject: str, reason: str) -> None:
        super().__init__(reason)
        self.dead_subject = dead_subject
        self.reason = reason


Handler = Callable[[Msg], Awaitable[None]]
M = TypeVar("M")


def decoding(message_type: type[M], handler: Callable[[M], Awaitable[None]]) -> Handler:
    """A handler of raw deliveries that decodes each into `message_type` (at most an event's
    size) and hands it on; one that cannot be decoded is dead-lettered with its closed reason."""
    decoder = msgspec.json.Decoder(message_type)

    async def handle(msg: Msg) -> None:
        try:
            message = decode(msg.data, decoder, max_bytes=MAX_EVENT_BYTES)
        except InvalidInput as err:
            raise Reject(subjects.DEAD_INVALID, err.code) from None
        await handler(message)

    return handle


class PullConsumer:
    """One durable consumer of a service, pulled and handled under the delivery rules above: a
    part of its service (shared/platform/parts.py)."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        stream: str,
        durable: str,
        filter_subject: str | None,
        handler: Handler,
        service: str,
        max_deliver: int,
        nak_delay_s: float,
        ack_wait_s: float,
        batch: int = 64,
        replicas: int = 1,
        fair_key: Callable[[Msg], str] | None = None,
        hold: int | None = None,
        per_key: int | None = None,
    ) -> None:
        """`batch` messages are handled at once. With `fair_key`, up to `hold` (more than
        `batch`) are held, and started by key in rotation, at most `per_key` of one key at once
        (shared/platform/bus/fair.py): one key's backlog cannot hold back another key's message."""
        self._js = js
        self._stream = stream
        self._durable = durable
        self._filter = filter_subject
        self._handler = handler
        self._service = service
        self._span_name = f"continuity-{service} {durable}"
        self._max_deliver = max_deliver
        self._nak_delay = nak_delay_s
        self._ack_wait = ack_wait_s
        self._batch = batch
        self._replicas = replicas
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pending_task: asyncio.Task[None] | None = None
        self._fair_key = fair_key
        self._hold = max(batch, hold or batch) if fair_key is not None else batch
        self._fair: FairQueue[Msg] = FairQueue(per_key or batch)
        self._handling = 0
        self._slots = asyncio.Semaphore(self._hold)
        self._min_fetch = max(1, batch // 4)
        self._inflight: set[asyncio.Task[None]] = set()
        self._puller: Puller | None = None
        self._started = 0
        """Deliveries of the request in progress handed to tasks: their slots are theirs."""
        self.bound = False

    @classmethod
    def from_config(
        cls,
        js: JetStreamContext,
        config: Config,
        *,
        stream: str,
        durable: str,
        filter_subject: str | None,
        handler: Handler,
        service: str,
        fair_key: Callable[[Msg], str] | None = None,
    ) -> PullConsumer:
        """A consumer with the delivery settings of the service's configuration; with
        `fair_key`, it holds up to the consumer's whole `max_ack_pending` and serves keys in
        turn, each at most `runner_in_flight` at once."""
        return cls(
            js,
            stream=stream,
            durable=durable,
            filter_subject=filter_subject,
            handler=handler,
            service=service,
            max_deliver=config.max_deliver,
            nak_delay_s=config.nak_delay_s,
            ack_wait_s=config.ack_wait_s,
            batch=config.consumer_in_flight,
            replicas=config.stream_replicas,
            fair_key=fair_key,
            hold=MAX_IN_FLIGHT,
            per_key=config.runner_in_flight,
        )

    async def ensure(self) -> None:
        """Create the durable consumer if it is missing; an existing one is never changed here."""
        config = durable_config(self._durable, self._filter, self._ack_wait)
        await ensure_consumer(self._js, DurableConsumer(self._stream, config, self._replicas))

    async def start(self) -> None:
        await self.ensure()
        self._task = asyncio.create_task(self._run(), name=f"consumer-{self._durable}")
        self._pending_task = asyncio.create_task(self._watch_pending())

    def ready(self) -> bool:
        """Bound to its durable consumer: pulling."""
        return self.bound

    async def drain(self, timeout: float) -> None:
        """Stop pulling; messages in hand finish (or are redelivered to another replica)."""
        deadline = time.monotonic() + timeout  # one budget for the three waits below
        self._stopping.set()
        if self._puller is not None:
            self._puller.wake()
        await self._finish(self._task, deadline)
        await self._return_held()
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=max(deadline - time.monotonic(), 0.0))
        await self._finish(self._pending_task, deadline)
        self.bound = False

    @staticmethod
    async def _finish(task: asyncio.Task[None] | None, deadline: float) -> None:
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        sub = None
        while not self._stopping.is_set():
            try:
                if self._puller is None:  # set and cleared with `sub`
                    await self.ensure()
                    sub = await self._js.pull_subscribe_bind(self._durable, self._stream)
                    self._puller = Puller(sub)
                    self.bound = True
                puller = self._puller
                # Ask for as many as there are free slots: a slow message (a runner taking its
                # time) holds one slot, not the whole batch, and receiving overlaps processing.
                # Under load, wait for a quarter of the slots: one request for many messages
                # costs the server and this process far less than many requests for one.
                free = 0
                while free < self._min_fetch or (free < self._hold and not self._slots.locked()):
                    if not await self._take_slot():
                        break
                    free += 1
                if self._stopping.is_set():  # drained while waiting for slots: ask for nothing
                    for _ in range(free):
                        self._slots.release()
                    break
                try:
                    received = await puller.pull(free, self._start)
                except BaseException:
                    for _ in range(free - self._started):
                        self._slots.release()
                    raise
                finally:
                    self._started = 0
                for _ in range(free - received):
                    self._slots.release()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away or the consumer lost: bind again after a pause
                self.bound = False
                log.warning("consumer_unavailable", consumer=self._durable, error_type=type(exc).__name__)
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()
                sub = None
                self._puller = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), 1.0)
        # Unsubscribe before the connection drains: nothing marks the subscription's queue
        # done, so a connection drain would otherwise wait on it for the whole drain timeout.
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _take_slot(self) -> bool:
        """A free slot, or False once a drain has begun. Held messages keep their slots until
        the drain returns them, and it returns them once this loop has ended: waiting here for
        a slot after the drain began would wait for the drain itself, to its deadline."""
        if not self._slots.locked():
            await self._slots.acquire()  # at once
            return True
        if self._stopping.is_set():
            return False
        taking = asyncio.ensure_future(self._slots.acquire())
        stopping = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait((taking, stopping), return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not taking.done():
            taking.cancel()  # a slot granted meanwhile goes back to the semaphore
        with contextlib.suppress(asyncio.CancelledError):
            await taking
        return taking.done() and not taking.cancelled()

    def _start(self, msg: Msg) -> None:
        """Handle one delivery in a task of its own (held first, with a fair key); its slot
        was taken for the request."""
        self._started += 1
        if self._fair_key is None:
            task = asyncio.create_task(self._process(msg))
            self._inflight.add(task)
            task.add_done_callback(self._done)
            return
        key = self._key(msg)
        if self._stopping.is_set():  # arrived as the drain began: held, and returned with the rest
            self._fair.push(key, msg)
            return
        if self._handling < self._batch and self._fair.start_now(key):
            self._begin(key, msg)
            return
        self._fair.push(key, msg)
        self._pump()

    def _key(self, msg: Msg) -> str:
        assert self._fair_key is not None
        try:
            return self._fair_key(msg)
        except Exception:  # a subject the key function cannot read: one shared key
            return ""

    def _pump(self) -> None:
        """Start held messages while handlers are free, by key in rotation."""
        while self._handling < self._batch:
            picked = self._fair.pop()
            if picked is None:
                return
            self._begin(*picked)

    def _begin(self, key: str, msg: Msg) -> None:
        self._handling += 1
        task = asyncio.create_task(self._process(msg))
        self._inflight.add(task)
        task.add_done_callback(functools.partial(self._fair_done, key=key))

    def _fair_done(self, task: asyncio.Task[None], *, key: str) -> None:
        self._inflight.discard(task)
        self._handling -= 1
        self._fair.done(key)
        self._slots.release()
        if not self._stopping.is_set():
            self._pump()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._slots.release()

    async def _return_held(self) -> None:
        """At the drain: held messages not yet started go back at once, for another replica
        (taken in one pass: the fair order no longer matters, and no handler starts now)."""
        for _, msg in self._fair.take_all():
            self._slots.release()
            await self._settle(msg.nak())

    async def _process(self, msg: Msg) -> None:
        if tracing.ENABLED:
            await self._process_traced(msg)
            return
        await self._settle_handled(msg)

    async def _process_traced(self, msg: Msg) -> None:
        """`_process` in a span continuing the sender's trace (the message's `traceparent`)."""
        with tracing.span(self._span_name, parent=tracing.parent_of(msg.headers), kind="consumer") as begun:
            if begun is not None and begun.sampled:  # an attribute only a span exported shows
                tracing.annotate(stream_seq=stream_seq(msg.reply))  # not `msg.metadata`: costs more
            await self._settle_handled(msg)

    async def _settle_handled(self, msg: Msg) -> None:
        try:
            await self._handler(msg)
        except Reject as rej:
            tracing.annotate(outcome="dead_letter", dead_reason=rej.reason)
            await self._dead(msg, rej.dead_subject, rej.reason)
        except PayloadTooLarge as err:
            log.error(
                "message_unpublishable",
                consumer=self._durable,
                size=err.size,
                limit=err.limit,
                stream_seq=msg.metadata.sequence.stream,
            )
            await self._dead(msg, subjects.DEAD_INVALID, TOO_LARGE_REASON)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            tracing.annotate(outcome="transient", **{"error.type": type(exc).__name__})
            await self._transient(msg, exc)
        else:
            await self._settle(msg.ack())

    async def _transient(self, msg: Msg, exc: Exception) -> None:
        delivered = msg.metadata.num_delivered
        if delivered >= self._max_deliver:
            log.error(
                "message_exhausted",
                consumer=self._durable,
                deliveries=delivered,
                error_type=type(exc).__name__,
            )
            await self._dead(msg, subjects.DEAD_EXHAUSTED, "exhausted")
            return
        log.warning(
            "message_retry", consumer=self._durable, deliveries=delivered, error_type=type(exc).__name__
        )
        await self._settle(msg.nak(delay=self._nak_delay * delivered))

    async def _dead(self, msg: Msg, dead_subject: str, reason: str) -> None:
        seq = msg.metadata.sequence.stream
        try:
            await dead_letter(
                self._js,
                dead_subject,
                reason=reason,
                original_subject=msg.subject,
                payload=msg.data,
                msg_id=f"dead:{self._stream}:{seq}",
                service=self._service,
                original_msg_id=(msg.headers or {}).get("Nats-Msg-Id"),
            )
        except Exception as exc:  # cannot park it: leave it to redelivery, lose nothing
            log.warning("dead_letter_failed", consumer=self._durable, error_type=type(exc).__name__)
            await self._settle(msg.nak(delay=self._nak_delay))
            return
        await self._settle(msg.ack())

    async def _settle(self, ack: Awaitable[None]) -> None:
        # An ack lost to a disconnect only means a redelivery, which handlers make harmless.
        with contextlib.suppress(Exception):
            await ack

    async def _watch_pending(self) -> None:
        gauge = metrics.CONSUMER_PENDING.labels(consumer=self._durable)
        while not self._stopping.is_set():
            with contextlib.suppress(Exception):
                info = await self._js.consumer_info(self._stream, self._durable)
                gauge.set(info.num_pending + info.num_ack_pending)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 5.0)
