"""What the console reads from JetStream directly: recent decisions and dead letters, by
sequence (`$JS.API.STREAM.MSG.GET`), and the live feed of decisions from an ordered consumer.

Dead letters keep a runner's original bytes as their body; the console shows only their
headers (closed reasons, sizes, times), never the body. CONTINUITY_DECISIONS also carries
refusals (contract 10.5), a refused event's notice to its runner: they are not decisions of a
run, and neither list shows them."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from shared.contract import Decision, subjects
from shared.contract.tenancy import is_refusal
from shared.platform.logs import Log

log = Log("continuity.console")

SUBJECT_CHARS = 200
"""How much of a dead letter's original subject is shown (a runner chose it)."""
RECENT_SCAN = 200
"""How many of the stream's latest messages are looked through for the recent decisions: a
storm of refusals must not hide the decisions before it, nor make a page read the stream."""


@dataclass(frozen=True)
class DecisionLine:
    """A decision as the console shows it: closed codes and identifiers, no free text."""

    decision_id: str
    run_id: str
    runner_id: str
    tenant: str
    attempt: int
    action: str
    reason: str
    reconciled_outcome: str | None
    decided_at: str

    @classmethod
    def of(cls, d: Decision) -> DecisionLine:
        return cls(
            d.decision_id,
            d.run_id,
            d.runner_id,
            d.session.tenant,
            d.attempt,
            d.action,
            d.reason,
            d.reconciled_outcome,
            d.decided_at,
        )

    def as_json(self) -> bytes:
        return msgspec.json.encode(self.__dict__)


@dataclass(frozen=True)
class DeadLetter:
    seq: int
    subject: str
    reason: str
    original_subject: str
    service: str
    dead_at: str
    size: str
    truncated: bool


_decode_decision = msgspec.json.Decoder(Decision).decode


def decision_of(data: bytes) -> DecisionLine | None:
    try:
        return DecisionLine.of(_decode_decision(data))
    except (msgspec.MsgspecError, ValueError):
        return None


async def _between(
    js: JetStreamContext, stream: str, subject: str, first: int, last: int
) -> list[tuple[int, object]]:
    """The messages of `stream` from sequence `first` to `last` (oldest first) as (sequence,
    raw message); sequences removed meanwhile are skipped."""
    seq = first
    found: list[tuple[int, object]] = []
    while seq <= last:
        try:
            raw = await js.get_msg(stream, seq, subject=subject, next=True)
        except NotFoundError:
            break
        seq = raw.seq or seq
        if seq > last:
            break
        found.append((seq, raw))
        seq += 1
    return found


async def _recent(js: JetStreamContext, stream: str, subject: str, limit: int) -> list[tuple[int, object]]:
    """The last `limit` messages of `stream` (oldest first) as (sequence, raw message)."""
    info = await js.stream_info(stream)
    if not info.state.messages:
        return []
    last, first = info.state.last_seq, info.state.first_seq
    return await _between(js, stream, subject, max(first, last - limit + 1), last)


async def recent_decisions(js: JetStreamContext, limit: int, scan: int = RECENT_SCAN) -> list[DecisionLine]:
    """The last `limit` decisions (oldest first) among the stream's latest `scan` messages,
    read back from the newest a window at a time, refusals left out."""
    stream = subjects.DECISIONS_STREAM
    info = await js.stream_info(stream)
    if not info.state.messages:
        return []
    first, end = info.state.first_seq, info.state.last_seq
    floor = max(first, end - max(scan, limit) + 1)
    lines: list[DecisionLine] = []
    while end >= floor and len(lines) < limit:
        start = max(floor, end - limit + 1)
        window = await _between(js, stream, subjects.DECISIONS_ALL, start, end)
        older = [decision_of(getattr(raw, "data", b"") or b"") for _, raw in window]
        lines = [line for line in older if line is not None] + lines
        end = start - 1
    return lines[-limit:]


async def recent_dead_letters(js: JetStreamContext, limit: int) -> list[DeadLetter]:
    letters = []
    for seq, raw in await _recent(js, subjects.DEAD_STREAM, subjects.DEAD_ALL, limit):
        headers = getattr(raw, "headers", None) or {}
        letters.append(
            DeadLetter(
                seq=seq,
                subject=str(getattr(raw, "subject", "")),
                reason=headers.get("Continuity-Dead-Reason", "-"),
                original_subject=headers.get("Continuity-Original-Subject", "-")[:SUBJECT_CHARS],
                service=headers.get("Continuity-Service", "-"),
                dead_at=headers.get("Continuity-Dead-At", "-"),
                size=headers.get("Continuity-Original-Size", "-"),
                truncated=headers.get("Continuity-Truncated") == "true",
            )
        )
    return letters


class DecisionFeed:
    """One ordered consumer on CONTINUITY_DECISIONS (new messages only), fanned out to every
    open page. A page that cannot keep up loses its oldest lines, never the console's memory."""

    def __init__(self, js: JetStreamContext, keep: int = 20, per_listener: int = 100) -> None:
        self._js = js
        self._sub: Subscription | None = None
        self._listeners: set[asyncio.Queue[DecisionLine | None]] = set()
        self._per_listener = per_listener
        self.latest: deque[DecisionLine] = deque(maxlen=keep)

    @property
    def ready(self) -> bool:
        return self._sub is not None

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    async def start(self) -> None:
        self._sub = await self._js.subscribe(
            subjects.DECISIONS_ALL,
            stream=subjects.DECISIONS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            cb=self._received,
        )

    async def _received(self, msg: Msg) -> None:
        line = decision_of(msg.data)
        if line is None:
            # A refusal is expected on this stream (a quota storm sends many): skipped unlogged.
            if not is_refusal(msg.data):
                log.warning("console_undecodable_decision")
            return
        self.latest.appendleft(line)
        for queue in self._listeners:
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(line)

    def listen(self) -> asyncio.Queue[DecisionLine | None]:
        queue: asyncio.Queue[DecisionLine | None] = asyncio.Queue(self._per_listener + 1)
        self._listeners.add(queue)
        return queue

    def unlisten(self, queue: asyncio.Queue[DecisionLine | None]) -> None:
        self._listeners.discard(queue)

    async def stop(self) -> None:
        for queue in self._listeners:  # ends every open stream
            with contextlib.suppress(asyncio.QueueEmpty):
                queue.get_nowait()
            queue.put_nowait(None)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
