"""Reading the streams as a runner or an operator does, for assertions."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from shared.contract import ResumeFailed, subjects
from tests.support.decisions import Decisions
from tests.support.waiting import wait_for


async def read_stream(js: JetStreamContext, stream: str, subject: str) -> list[Msg]:
    """Every message stored in `stream` on `subject` (wildcards allowed), through an ephemeral
    consumer of its own that leaves the stream as it was."""
    sub = await js.pull_subscribe(subject, stream=stream)
    try:
        pending = (await sub.consumer_info()).num_pending or 0
        msgs: list[Msg] = []
        while len(msgs) < pending:
            msgs.extend(await sub.fetch(pending - len(msgs), timeout=5))
        return msgs
    finally:
        await sub.unsubscribe()


class Bus:
    """A runner's and an operator's view of the streams, for assertions."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self._work: dict[str, dict[str, list[bytes]]] = {}
        self._work_durables: dict[str, str] = {}

    async def publish(
        self, event: ResumeFailed | bytes, *, subject: str | None = None, msg_id: str | None = None
    ) -> int:
        """Publish as a runner does; returns the stream sequence of the stored event."""
        if isinstance(event, ResumeFailed):
            subject = subject or subjects.event(event.runner_id, "resume_failed")
            data = msgspec.json.encode(event)
        else:
            assert subject is not None
            data = event
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        ack = await self.js.publish(subject, data, headers=headers)
        return int(ack.seq)

    async def settled(self, seq: int, timeout: float = 10.0) -> None:
        """Every event up to `seq` was handled and acknowledged by the classifier."""

        async def done() -> bool:
            info = await self.js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
            return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= seq

        await wait_for(done, timeout=timeout, what=f"classifier acknowledged event seq {seq}")

    async def read_all(self, stream: str, subject: str) -> list[Msg]:
        """Every message stored on `subject`, through a fresh consumer that acknowledges them
        (as a runner reads; on a work-queue stream that consumes them)."""
        sub = await self.js.pull_subscribe(subject, stream=stream)
        try:
            pending = (await sub.consumer_info()).num_pending or 0
            msgs: list[Msg] = []
            while len(msgs) < pending:
                msgs.extend(await sub.fetch(pending - len(msgs), timeout=5))
            for m in msgs:
                await m.ack()
            return msgs
        finally:
            await sub.unsubscribe()

    async def decisions(self, runner: str) -> list[dict[str, Any]]:
        """Every decision stored for `runner`, as plain JSON objects."""
        reader = Decisions(self.js, runner)
        try:
            return [msgspec.to_builtins(d) for d in await reader.all()]
        finally:
            await reader.close()

    async def refusals(self, runner: str) -> list[dict[str, Any]]:
        """Every refusal of `runner`'s events stored on its decisions subject (contract 10.5)."""
        reader = Decisions(self.js, runner)
        try:
            await reader.all()
            return [msgspec.to_builtins(r) for r in reader.refusals]
        finally:
            await reader.close()

    async def dead(self, subject: str, needle: str) -> list[Msg]:
        """Dead letters on `subject` whose original bytes contain `needle`."""
        msgs = await self.read_all(subjects.DEAD_STREAM, subject)
        return [m for m in msgs if needle.encode() in m.data]

    async def work(self, subject: str, run_id: str) -> list[dict[str, Any]]:
        """Work items for `run_id`; a work-queue stream allows one consumer per subject, so one
        durable per subject collects every item for the whole module."""
        durable = self._work_durables.get(subject)
        if durable is None:
            durable = f"test-{uuid.uuid4().hex[:8]}"
            await self.js.add_consumer(
                subjects.WORK_STREAM,
                ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT, filter_subject=subject),
            )
            self._work_durables[subject] = durable
        sub = await self.js.pull_subscribe_bind(durable, subjects.WORK_STREAM)
        try:
            pending = (await sub.consumer_info()).num_pending or 0
            store = self._work.setdefault(subject, {})
            fetched = 0
            while fetched < pending:
                for m in await sub.fetch(pending - fetched, timeout=5):
                    fetched += 1
                    item = msgspec.json.decode(m.data)
                    store.setdefault(item["run_id"], []).append(m.data)
                    await m.ack()
        finally:
            await sub.unsubscribe()
        return [msgspec.json.decode(d) for d in self._work.get(subject, {}).get(run_id, [])]


def header(msg: Msg, name: str) -> str | None:
    headers: Mapping[str, str] = msg.headers or {}
    return headers.get(name)
