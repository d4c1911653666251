"""The classifier service: a durable pull consumer on runner events, and the outbox sweeper."""

from __future__ import annotations

import asyncio
import contextlib

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox
from shared.runtime import Context

from .handler import EventHandler


class ClassifierApp:
    name = "classifier"

    def __init__(self) -> None:
        self._consumer: PullConsumer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self, ctx: Context) -> None:
        outbox = Outbox(ctx.redis, ctx.js)
        consumer = PullConsumer(
            ctx.js,
            stream=subjects.EVENTS_STREAM,
            durable=subjects.CLASSIFIER_CONSUMER,
            filter_subject=subjects.EVENTS_ALL,
            handler=EventHandler(ctx.redis, outbox, ctx.config),
            service=self.name,
            max_deliver=ctx.config.max_deliver,
            nak_delay_s=ctx.config.nak_delay_s,
            ack_wait_s=ctx.config.ack_wait_s,
        )
        await consumer.start()
        self._consumer = consumer
        # Publishes what a crash left recorded but unpublished, whoever recorded it.
        self._sweeper = asyncio.create_task(outbox.run_sweeper(self._stop), name="classifier-outbox")

    async def drain(self, timeout: float) -> None:
        if self._consumer is not None:
            await self._consumer.drain(timeout)
        self._stop.set()
        if self._sweeper is not None:
            try:
                await asyncio.wait_for(self._sweeper, timeout)
            except TimeoutError:
                self._sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sweeper

    def ready(self) -> bool:
        return self._consumer is not None and self._consumer.bound
