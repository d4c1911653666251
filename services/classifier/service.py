"""The classifier service: a durable pull consumer on runner events, and the outbox sweeper."""

from __future__ import annotations

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox, Sweeper
from shared.pipeline import PipelinedRedis
from shared.runtime import Context

from .handler import EventHandler


class ClassifierApp:
    name = "classifier"

    def __init__(self) -> None:
        self._consumer: PullConsumer | None = None
        self._sweeper: Sweeper | None = None
        self._redis: PipelinedRedis | None = None

    async def start(self, ctx: Context) -> None:
        # Events are handled many at a time: their Redis commands share one pipelined connection.
        self._redis = PipelinedRedis(ctx.config.redis_url)
        outbox = Outbox(ctx.redis, ctx.js, fast=self._redis)
        consumer = PullConsumer.from_config(
            ctx.js,
            ctx.config,
            stream=subjects.EVENTS_STREAM,
            durable=subjects.CLASSIFIER_CONSUMER,
            filter_subject=subjects.EVENTS_ALL,
            handler=EventHandler(self._redis, outbox, ctx.config),
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
        if self._redis is not None:
            await self._redis.aclose()

    def ready(self) -> bool:
        return self._consumer is not None and self._consumer.bound
