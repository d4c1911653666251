"""The classifier service: a durable pull consumer on runner events, and the outbox sweeper."""

from __future__ import annotations

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox
from shared.pipeline import PipelinedRedis
from shared.runtime import Context
from shared.worker import Worker

from .handler import EventHandler


class ClassifierApp:
    name = "classifier"

    def __init__(self) -> None:
        self._worker: Worker | None = None
        self._redis: PipelinedRedis | None = None

    async def start(self, ctx: Context) -> None:
        # Events are handled many at a time: their Redis commands share one pipelined connection.
        self._redis = PipelinedRedis(
            ctx.config.redis_url, cluster=ctx.config.redis_cluster, ssl_context=ctx.redis_tls
        )
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
        self._worker = Worker(consumer, outbox)
        await self._worker.start()

    async def drain(self, timeout: float) -> None:
        if self._worker is not None:
            await self._worker.drain(timeout)
        if self._redis is not None:
            await self._redis.aclose()

    def ready(self) -> bool:
        return self._worker is not None and self._worker.bound
