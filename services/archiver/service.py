"""The archiver service: a durable pull consumer on `continuity.work.archive`.

Entries its decisions leave in the outbox after a crash are published by the redelivered work
item itself, and by the outbox sweeper every recording service runs.
"""

from __future__ import annotations

from shared import subjects
from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox
from shared.runtime import Context
from shared.worker import Worker

from .handler import ArchiveHandler


class ArchiverApp:
    name = "archiver"

    def __init__(self) -> None:
        self._worker: Worker | None = None

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
        self._worker = Worker(consumer, outbox)
        await self._worker.start()

    async def drain(self, timeout: float) -> None:
        if self._worker is not None:
            await self._worker.drain(timeout)

    def ready(self) -> bool:
        return self._worker is not None and self._worker.bound
