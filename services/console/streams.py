"""What the console reads from JetStream directly, all of it by sequence
(`$JS.API.STREAM.MSG.GET`): recent decisions and dead letters, and the live feed of decisions.

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
from nats.js import JetStreamContext

from shared.contract import Decision, subjects
from shared.contract.tenancy import is_refusal
from shared.platform.bus import reading
from shared.platform.logs import Log

log = Log("continuity.console")

SUBJECT_CHARS = 200
"""How much of a dead letter's original subject is shown (a runner chose it)."""
RECENT_SCAN = 200
"""How many of the stream's latest messages are looked through for the recent decisions: a
storm of refusals must not hide the decisions before it, nor make a page read the stream."""
FEED_POLL_S = 0.5
"""How often the live feed looks for new decisions."""


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
    return [(raw.seq or first, raw) for raw in await reading.between(js, stream, subject, first, last)]


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
    """The live feed of decisions, fanned out to every open page: CONTINUITY_DECISIONS read by
    sequence, from the moment the console starts (new messages only), every `poll_s`. No
    consumer is created for it: the console's NATS user may create none (a consumer create
    request may name any deliver subject, which the server does not check against the creator's
    permissions; docs/operations/nats-authorization.md). A page that cannot keep up loses its
    oldest lines, never the console's memory; a poll shows at most `batch` new messages, the
    newest."""

    def __init__(
        self,
        js: JetStreamContext,
        keep: int = 20,
        per_listener: int = 100,
        poll_s: float = FEED_POLL_S,
        batch: int = RECENT_SCAN,
    ) -> None:
        self._js = js
        self._listeners: set[asyncio.Queue[DecisionLine | None]] = set()
        self._per_listener = per_listener
        self._poll_s = poll_s
        self._batch = batch
        self._next: int | None = None
        """The sequence of the next message to show; None until the feed started."""
        self._task: asyncio.Task[None] | None = None
        self.latest: deque[DecisionLine] = deque(maxlen=keep)

    @property
    def ready(self) -> bool:
        return self._next is not None

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    async def start(self) -> None:
        info = await self._js.stream_info(subjects.DECISIONS_STREAM)
        self._next = info.state.last_seq + 1
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                await self.read_new()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away for a moment: the next poll tries again
                log.warning("console_feed_read_failed", error_type=type(exc).__name__)
            await asyncio.sleep(self._poll_s)  # the feed's pace, not a wait for an event

    async def read_new(self) -> None:
        """Show the messages published since the last read (the newest `batch` of them)."""
        assert self._next is not None, "start() first"
        info = await self._js.stream_info(subjects.DECISIONS_STREAM)
        first, last = info.state.first_seq, info.state.last_seq
        if last + 1 < self._next:  # the stream was made again: its sequences start over
            self._next = first
        if last < self._next:
            return
        start = max(self._next, last - self._batch + 1, first)
        shown = await _between(self._js, subjects.DECISIONS_STREAM, subjects.DECISIONS_ALL, start, last)
        for _, raw in shown:
            self._received(getattr(raw, "data", b"") or b"")
        self._next = last + 1

    def _received(self, data: bytes) -> None:
        line = decision_of(data)
        if line is None:
            # A refusal is expected on this stream (a quota storm sends many): skipped unlogged.
            if not is_refusal(data):
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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
