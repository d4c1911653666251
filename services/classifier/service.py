"""The classifier service: a durable pull consumer on runner events, and the outbox sweeper."""

from __future__ import annotations

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox, Sweeper
from shared.runtime import Context

from .handler import EventHandler


class ClassifierApp:
    name = "classifier"

    def __init__(self) -> None:
        self._consumer: PullConsumer | None = None
        self._sweeper: Sweeper | None = None

    async def start(self, ctx: Context) -> None:
        outbox = Outbox(ctx.redis, ctx.js)
        consumer = PullConsumer.from_config(
            ctx.js,
            ctx.config,
            stream=subjects.EVENTS_STREAM,
            durable=subjects.CLASSIFIER_CONSUMER,
            filter_subject=subjects.EVENTS_ALL,
            handler=EventHandler(ctx.redis, outbox, ctx.config),
            service=self.name,
        )
        await consumer.start()
        self._consumer = consumer
        self._sweeper = Sweeper(outbox)
        self._sweeper.start()

    async def drain(self, timeout: float) -> None:
        if self._consumer is not None:
            await self._consumer.drain(timeout)
        if self._sweeper is not None:
            await self._sweeper.stop(timeout)

    def ready(self) -> bool:
        return self._consumer is not None and self._consumer.bound
