"""JetStream's pull protocol, one request at a time, each message handed on as it arrives.

A pull request asks the server for up to N messages of a durable consumer
(`$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>`, `{"batch": N, "expires": ns}`, replied to the
subscription's inbox); the server sends them as they are stored, until N were sent or the
request expires (status 408). One request for the free slots serves a whole burst, where
nats-py's `fetch` returns at the first message and sends one or two requests per fetch: under
load about one per message, each a JSON body, a timer task per message and work for the server.

Deliveries are told from status messages by their reply subject (the ack subject): a
publisher's headers may hold anything, a `Status` too. Status messages end a request: 408
(expired) and 404 (nothing, for `no_wait`); 100 is an idle heartbeat. 409 means the server
ended it (a leader change, a deleted consumer, a limit): it is raised as `PullRefused`, for the
caller to bind again after a pause rather than ask again at once, unless messages came with the
request. So is any other status (503: no consumer answers), and a request the server did not
end by shortly after its expiry (a restart lost it, or its consumer is gone: JetStream answers
a request to a deleted consumer with nothing at all).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared.platform.bus import nats_private

PULL_EXPIRES_S = 2.0
"""How long the server keeps one pull request waiting for messages."""
_LATE_S = 1.0
"""How long past its expiry a request may go unanswered before it counts as lost."""

_ENDS = frozenset({"404", "408"})
_CONFLICT = "409"
UNANSWERED = "unanswered"
"""`PullRefused.status` of a request the server did not end by its expiry."""
_HEARTBEAT = "100"


class PullRefused(Exception):
    """The server answered a pull request with a status that is not part of its course."""

    def __init__(self, status: str) -> None:
        super().__init__(f"pull request answered with status {status}")
        self.status = status


class _Wake:
    """Ends the request in progress (a drain)."""


_WAKE = _Wake()


class Puller:
    """Pull requests over a bound pull subscription (nats-py's `PullSubscription`): its inbox
    subscription and queue, without its `fetch`."""

    def __init__(self, sub: JetStreamContext.PullSubscription) -> None:
        plumbing = nats_private.pull_plumbing(sub)
        self._nc = plumbing.nc
        self._sub = plumbing.sub
        # Its deliveries, and the marks this class puts there to end a request.
        self._queue = plumbing.queue
        self._next = plumbing.next_subject
        self._inbox = plumbing.inbox

    def wake(self) -> None:
        """End the request in progress now (or the next one, if none is)."""
        self._queue.put_nowait(_WAKE)

    async def pull(
        self, count: int, deliver: Callable[[Msg], None], expires_s: float = PULL_EXPIRES_S
    ) -> int:
        """Ask for up to `count` messages and hand each to `deliver` as it arrives, until
        `count` arrived or the request ended; returns how many arrived."""
        loop = asyncio.get_running_loop()
        lost = object()  # this request's own mark: a mark of an earlier one is skipped
        body = b'{"batch":%d,"expires":%d}' % (count, int(expires_s * 1_000_000_000))
        await self._nc.publish(self._next, body, reply=self._inbox)
        timer = loop.call_later(expires_s + _LATE_S, self._queue.put_nowait, lost)
        received = 0
        try:
            while received < count:
                item = await self._queue.get()
                if item is _WAKE:
                    break
                if item is lost:  # the server never ended it: a restart, or no consumer
                    raise PullRefused(UNANSWERED)
                if not isinstance(item, Msg):
                    continue
                nats_private.taken_from_queue(self._sub, len(item.data))
                if item.reply:  # a delivery: its ack subject. A publisher's own headers,
                    received += 1  # a `Status` among them, never make it a status message.
                    deliver(item)
                    continue
                status = item.headers.get("Status") if item.headers else None
                if status is None:
                    continue  # neither a delivery nor a status: nothing of this request
                if status in _ENDS:
                    break
                if status == _CONFLICT and received:
                    break  # what came is handled; a lasting conflict refuses the next request
                if status != _HEARTBEAT:
                    raise PullRefused(status)
        finally:
            timer.cancel()
        return received
