"""Every use of nats-py's private attributes, in one place.

nats-py keeps some of what this project needs out of its public API: the connection behind a
JetStream context, the one reply subscription its requests share, micro's endpoint counters
and subscriptions, and the plumbing of a pull subscription. Each access is a small function
here with the reason it is needed; nothing else in the project touches a private attribute of
a nats-py object. pyproject.toml pins nats-py to one minor version, and
tests/unit/test_nats_private.py fails when an attribute used here is gone from it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.micro.request import Request
from nats.micro.service import Endpoint, Service

# ---- the connection and its requests ------------------------------------------------------------


def connection(js: JetStreamContext) -> Client:
    """The connection of a JetStream context: its server limit, its name and its request
    plumbing are read from there, and the context has no public accessor for it."""
    return js._nc


def reply_prefix(nc: Client) -> str | None:
    """The prefix of the connection's one reply subscription (None before its first request):
    a publish awaits its acknowledgement there, as `nc.request` does, without a subscription
    of its own."""
    prefix = nc._resp_sub_prefix
    return prefix.decode() if prefix else None


async def open_replies(nc: Client) -> str:
    """Subscribe the connection's reply subscription, as its first request would; its prefix."""
    await nc._init_request_sub()
    prefix = reply_prefix(nc)
    assert prefix is not None
    return prefix


def expect_reply(nc: Client, token: str, reply: asyncio.Future[Any]) -> None:
    """Have the reply subscription resolve `reply` with the answer to `token` (nats-py routes
    each answer by its token through this map)."""
    nc._resp_map[token] = reply


def forget_reply(nc: Client, token: str) -> None:
    """Stop expecting an answer to `token` (answered, or given up)."""
    nc._resp_map.pop(token, None)


# ---- micro ----------------------------------------------------------------------------------------


def reply_subject(request: Request) -> str | None:
    """Where a micro request is to be answered: `Request` does not expose it, its message does."""
    return request._msg.reply


def newest_endpoint(service: Service) -> Endpoint:
    """The endpoint micro made for the last `add_endpoint`, which returns nothing."""
    endpoint: Endpoint = service._endpoints[-1]
    return endpoint


def count_error(endpoint: Endpoint, last_error: str) -> None:
    """Count an error answered in a task of its own in `$SRV.STATS`: micro counts only what its
    handler raises, and has no public way to add to the count."""
    endpoint._num_errors += 1
    endpoint._last_error = last_error  # type: ignore[assignment]  # micro declares it None


def endpoint_subscription(endpoint: Endpoint) -> Subscription | None:
    """An endpoint's subscription, to drain it: micro only stops endpoints by unsubscribing,
    which drops the requests already delivered."""
    return endpoint._subscription


# ---- pull subscriptions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PullPlumbing:
    """What a pull request needs of a bound `PullSubscription`, whose `fetch` is not used."""

    nc: Client
    sub: Subscription
    queue: asyncio.Queue[object]
    """The inbox subscription's queue of deliveries and status messages."""
    next_subject: str
    """`$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>`."""
    inbox: str


def pull_plumbing(psub: JetStreamContext.PullSubscription) -> PullPlumbing:
    """The connection, inbox subscription, queue and subjects of a pull subscription: requests
    for many messages at once are sent on them directly."""
    return PullPlumbing(
        nc=psub._nc,
        sub=psub._sub,
        queue=psub._sub._pending_queue,  # type: ignore[arg-type]  # holds any object put there
        next_subject=psub._nms,
        inbox=psub._deliver,
    )


def taken_from_queue(sub: Subscription, size: int) -> None:
    """Account for a message of `size` bytes taken from the subscription's queue directly:
    nats-py counts queued bytes against the subscription's limit and lowers the count only in
    its own getters."""
    sub._pending_size -= size
