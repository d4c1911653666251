"""A durable consumer with the outbox sweeper beside it: what every service that records
decisions from a stream runs. Services compose one (the reconciliation service adds endpoints)."""

from __future__ import annotations

from shared.bus.consumer import PullConsumer
from shared.outbox import Outbox, Sweeper


class Worker:
    def __init__(self, consumer: PullConsumer, outbox: Outbox, sweep_interval_s: float = 2.0) -> None:
        self._consumer = consumer
        self._sweeper = Sweeper(outbox, sweep_interval_s)

    async def start(self) -> None:
        await self._consumer.start()
        self._sweeper.start()

    async def drain(self, timeout: float) -> None:
        """Messages in hand finish first; the sweeper publishes what they recorded last."""
        await self._consumer.drain(timeout)
        await self._sweeper.stop(timeout)

    @property
    def bound(self) -> bool:
        return self._consumer.bound
