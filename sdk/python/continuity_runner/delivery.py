"""One message delivered from the runner's durable consumer, with its acknowledgement."""

from __future__ import annotations

from collections import OrderedDict

from nats.aio.msg import Msg

from continuity_runner import tracing
from continuity_runner.contract import Decision, Refusal

ACKNOWLEDGED_KEPT = 4096
"""Decision ids a runner remembers as acknowledged (the latest ones): a copy of one comes within
the consumer's ack wait (an acknowledgement lost), or soon after a recovery (the same decision
stored again outside the stream's duplicate window)."""


class Acknowledged:
    """The decision ids this runner acknowledged, the latest `limit` of them."""

    def __init__(self, limit: int = ACKNOWLEDGED_KEPT) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def __contains__(self, decision_id: object) -> bool:
        return decision_id in self._ids

    def add(self, decision_id: str) -> None:
        self._ids[decision_id] = None
        self._ids.move_to_end(decision_id)
        if len(self._ids) > self._limit:
            self._ids.popitem(last=False)


class Delivery:
    """A decision or a refusal (contract 10.5), and the JetStream message that carried it.

    Both come from the runner's decisions subject, in the order they were published; `message`
    is one or the other (`decision` and `refusal` say which, the other being None). Acknowledge
    once it is acted on (`ack`); `nak` has it delivered again after `delay` seconds.
    Unacknowledged, it is delivered again after the consumer's ack wait. A decision once
    acknowledged is not delivered again: a copy of it is acknowledged and skipped.
    """

    def __init__(
        self,
        message: Decision | Refusal,
        msg: Msg,
        redelivery_delay: float,
        acknowledged: Acknowledged | None = None,
    ) -> None:
        self.message = message
        self._msg = msg
        self._redelivery_delay = redelivery_delay
        self._acknowledged = acknowledged

    @property
    def decision(self) -> Decision | None:
        """The decision, or None for a refusal."""
        return self.message if isinstance(self.message, Decision) else None

    @property
    def refusal(self) -> Refusal | None:
        """The refusal of one of the runner's events, or None for a decision."""
        return self.message if isinstance(self.message, Refusal) else None

    @property
    def traceparent(self) -> str | None:
        """The trace the decision belongs to (the `traceparent` it carried: the trace of the
        report it answers), or None; a malformed header is None, never an error."""
        return tracing.header_value(self._msg.headers)

    @property
    def num_delivered(self) -> int:
        """1 on the first delivery, more on each redelivery."""
        return self._msg.metadata.num_delivered

    async def ack(self) -> None:
        # Remembered first: the runner acted on it, so a copy is one even if this ack is lost.
        if self._acknowledged is not None and isinstance(self.message, Decision):
            self._acknowledged.add(self.message.decision_id)
        await self._msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        await self._msg.nak(delay=self._redelivery_delay if delay is None else delay)

    async def in_progress(self) -> None:
        """Resets the consumer's ack wait while a long action is still under way."""
        await self._msg.in_progress()
