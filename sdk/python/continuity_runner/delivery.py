"""One decision delivered from the runner's durable consumer, with its acknowledgement."""

from __future__ import annotations

from nats.aio.msg import Msg

from continuity_runner.contract import Decision


class Delivery:
    """A decision and the JetStream message that carried it.

    Acknowledge once the decision is acted on (`ack`); `nak` has it delivered again after
    `delay` seconds. Unacknowledged, it is delivered again after the consumer's ack wait.
    """

    def __init__(self, decision: Decision, msg: Msg, redelivery_delay: float) -> None:
        self.decision = decision
        self._msg = msg
        self._redelivery_delay = redelivery_delay

    @property
    def num_delivered(self) -> int:
        """1 on the first delivery, more on each redelivery."""
        return self._msg.metadata.num_delivered

    async def ack(self) -> None:
        await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        await self._msg.nak(delay=self._redelivery_delay if delay is None else delay)

    async def in_progress(self) -> None:
        """Resets the consumer's ack wait while a long action is still under way."""
        await self._msg.in_progress()
