"""The private attributes of nats-py that shared/platform/bus/nats_private.py relies on exist in
the installed nats-py: each function there is called on real nats-py objects, and every private
attribute the module names is found on one of them. An upgrade of nats-py that renames one
fails here, not in a running service."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.micro.request import Request
from nats.micro.service import Endpoint, EndpointConfig, Service, ServiceConfig

from shared.platform.bus import nats_private

MODULE = Path(nats_private.__file__)


class Objects:
    """One real, unconnected object of each nats-py class the module reaches into."""

    def __init__(self) -> None:
        self.nc = Client()
        self.js = self.nc.jetstream()
        self.sub = Subscription(self.nc, 1, "_INBOX.test")
        self.pull = JetStreamContext.PullSubscription(self.js, self.sub, "STREAM", "durable", b"_INBOX.test")
        self.service = Service(self.nc, ServiceConfig(name="test", version="1.0.0"))
        self.endpoint = Endpoint(self.service, EndpointConfig(name="e", handler=_handler))
        self.request = Request(Msg(self.nc, subject="s", reply="_INBOX.reply", data=b"{}"))

    def all(self) -> list[object]:
        return [self.nc, self.js, self.sub, self.pull, self.service, self.endpoint, self.request]


async def _handler(request: Request) -> None:
    return None


@pytest.fixture
async def objects() -> Objects:
    return Objects()  # in a loop: a subscription makes an asyncio queue


def private_names() -> set[str]:
    """Every `x._name` the module reads or writes (not dunders)."""
    tree = ast.parse(MODULE.read_text())
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    }


async def test_every_private_attribute_named_exists_on_a_nats_py_object(objects: Objects) -> None:
    names = private_names()
    assert names, "the module names no private attribute: this test has nothing to hold"
    missing = sorted(n for n in names if not any(hasattr(o, n) for o in objects.all()))
    assert missing == [], f"nats-py no longer has {missing}"


async def test_the_connection_and_its_reply_subscription(objects: Objects) -> None:
    assert nats_private.connection(objects.js) is objects.nc
    assert nats_private.reply_prefix(objects.nc) is None  # no request made yet
    assert callable(objects.nc._init_request_sub)  # what `open_replies` calls
    reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    nats_private.expect_reply(objects.nc, "t1", reply)
    assert objects.nc._resp_map["t1"] is reply
    nats_private.forget_reply(objects.nc, "t1")
    assert "t1" not in objects.nc._resp_map


async def test_micro_endpoints_and_requests(objects: Objects) -> None:
    assert nats_private.reply_subject(objects.request) == "_INBOX.reply"
    objects.service._endpoints.append(objects.endpoint)  # as add_endpoint does
    assert nats_private.newest_endpoint(objects.service) is objects.endpoint
    nats_private.count_error(objects.endpoint, "400:missing_field")
    [stats] = objects.service.stats().endpoints
    assert (stats.num_errors, stats.last_error) == (1, "400:missing_field")
    assert nats_private.endpoint_subscription(objects.endpoint) is None  # not started


async def test_a_pull_subscriptions_plumbing(objects: Objects) -> None:
    plumbing = nats_private.pull_plumbing(objects.pull)
    assert plumbing.nc is objects.nc and plumbing.sub is objects.sub
    assert plumbing.next_subject.endswith(".CONSUMER.MSG.NEXT.STREAM.durable")
    assert plumbing.inbox == "_INBOX.test"
    plumbing.queue.put_nowait("mark")
    assert objects.pull.pending_msgs == 1  # the queue nats-py itself reads
    nats_private.taken_from_queue(objects.sub, 5)
    assert objects.pull.pending_bytes == -5
