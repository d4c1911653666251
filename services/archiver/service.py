"""The archiver service: a durable pull consumer on `continuity.work.archive`.

Entries its decisions leave in the outbox after a crash are published by the redelivered work
item itself, and by the classifier's sweeper, which covers every session's outbox.
"""

from __future__ import annotations

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox
from shared.runtime import Context

from .handler import ArchiveHandler


class ArchiverApp:
    name = "archiver"

    def __init__(self) -> None:
        self._consumer: PullConsumer | None = None

    async def start(self, ctx: Context) -> None:
        consumer = PullConsumer(
            ctx.js,
            stream=subjects.WORK_STREAM,
            durable=subjects.ARCHIVER_CONSUMER,
            filter_subject=subjects.WORK_ARCHIVE,
            handler=ArchiveHandler(ctx.nc, ctx.redis, Outbox(ctx.redis, ctx.js), ctx.config),
            service=self.name,
            max_deliver=ctx.config.max_deliver,
            nak_delay_s=ctx.config.nak_delay_s,
            ack_wait_s=ctx.config.ack_wait_s,
        )
        await consumer.start()
        self._consumer = consumer

    async def drain(self, timeout: float) -> None:
        if self._consumer is not None:
            await self._consumer.drain(timeout)

    def ready(self) -> bool:
        return self._consumer is not None and self._consumer.bound
