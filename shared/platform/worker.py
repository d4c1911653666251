"""Durable consumers with the outbox sweeper beside them: what every service that records
decisions from a stream runs (shared/platform/service.py composes one from a service's spec)."""

from __future__ import annotations

from collections.abc import Sequence

from shared.platform.bus.consumer import PullConsumer
from shared.records.outbox import Outbox, Sweeper


class Worker:
    def __init__(
        self, consumers: Sequence[PullConsumer], outbox: Outbox | None, sweep_interval_s: float = 2.0
    ) -> None:
        self._consumers = tuple(consumers)
        self._sweeper = Sweeper(outbox, sweep_interval_s) if outbox is not None else None

    async def start(self) -> None:
        for consumer in self._consumers:
            await consumer.start()
        if self._sweeper is not None:
            self._sweeper.start()

    async def drain(self, timeout: float) -> None:
        """Messages in hand finish first; the sweeper publishes what they recorded last."""
        for consumer in self._consumers:
            await consumer.drain(timeout)
        if self._sweeper is not None:
            await self._sweeper.stop(timeout)

    @property
    def bound(self) -> bool:
        return all(consumer.bound for consumer in self._consumers)
