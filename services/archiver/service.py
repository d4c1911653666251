"""The archiver service: a durable pull consumer on `continuity.work.archive`.

Entries its decisions leave in the outbox after a crash are published by the redelivered work
item itself, and by the outbox sweeper every recording service runs.
"""

from __future__ import annotations

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox, Sweeper
from shared.runtime import Context

from .handler import ArchiveHandler


class ArchiverApp:
    name = "archiver"

    def __init__(self) -> None:
        self._consumer: PullConsumer | None = None
        self._sweeper: Sweeper | None = None

    async def start(self, ctx: Context) -> None:
        outbox = Outbox(ctx.redis, ctx.js)
        consumer = PullConsumer.from_config(
            ctx.js,
            ctx.config,
            stream=subjects.WORK_STREAM,
            durable=subjects.ARCHIVER_CONSUMER,
            filter_subject=subjects.WORK_ARCHIVE,
            handler=ArchiveHandler(ctx.nc, ctx.redis, outbox, ctx.config),
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
