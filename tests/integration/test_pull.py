"""The pull protocol (shared/platform/bus/pull.py) against a real JetStream: one request serves many
messages, each handed on as it arrives; the server's statuses end a request; a lost consumer is
refused; a drain ends a request at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from shared.platform.bus.pull import UNANSWERED, Puller, PullRefused
from tests.support import wait_for


@pytest.fixture
async def stream(nc: Client) -> AsyncIterator[tuple[JetStreamContext, str]]:
    js = nc.jetstream()
    name = f"PULL_{uuid.uuid4().hex[:8].upper()}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    await js.add_consumer(name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    yield js, name
    await js.delete_stream(name)


async def bound(js: JetStreamContext, name: str) -> Puller:
    return Puller(await js.pull_subscribe_bind("d", name))


async def test_one_request_hands_on_each_message_as_it_arrives(stream: tuple[JetStreamContext, str]) -> None:
    js, name = stream
    puller = await bound(js, name)
    got: list[Msg] = []
    # One request for five: the first two are stored before it, the rest while it waits.
    for i in range(2):
        await js.publish(f"{name.lower()}.x", b"%d" % i)
    pulling = asyncio.ensure_future(puller.pull(5, got.append, expires_s=30))
    for i in range(2, 5):
        await js.publish(f"{name.lower()}.x", b"%d" % i)
    assert await asyncio.wait_for(pulling, 10) == 5
    assert [m.data for m in got] == [b"0", b"1", b"2", b"3", b"4"]
    for m in got:
        await m.ack()

    async def all_acknowledged() -> bool:
        return (await js.consumer_info(name, "d")).num_ack_pending == 0

    await wait_for(all_acknowledged, timeout=10, what="the five acknowledged")


async def test_an_expired_request_returns_what_came(stream: tuple[JetStreamContext, str]) -> None:
    js, name = stream
    puller = await bound(js, name)
    await js.publish(f"{name.lower()}.x", b"only")
    got: list[Msg] = []
    # The server answers 408 after half a second: the request ends with the one message.
    assert await puller.pull(10, got.append, expires_s=0.5) == 1
    assert [m.data for m in got] == [b"only"]
    # Nothing more is pending: the next request ends empty at its expiry too.
    assert await puller.pull(10, got.append, expires_s=0.3) == 0


async def test_a_deleted_consumer_is_refused(stream: tuple[JetStreamContext, str], nc: Client) -> None:
    js, name = stream
    puller = await bound(js, name)
    await js.delete_consumer(name, "d")
    # A request to a deleted consumer is refused, for the caller to bind (and create) again:
    # from 2.10 the server answers it 503 (no responders) at once; 2.9 answers nothing, and the
    # request is refused as unanswered shortly after its expiry.
    with pytest.raises(PullRefused) as refused:
        await puller.pull(10, lambda m: None, expires_s=0.3)
    version = nc.connected_server_version
    assert refused.value.status == ("503" if (version.major, version.minor) >= (2, 10) else UNANSWERED)


async def test_a_consumer_deleted_under_a_waiting_request_refuses_it(
    stream: tuple[JetStreamContext, str],
) -> None:
    js, name = stream
    puller = await bound(js, name)
    pulling = asyncio.ensure_future(puller.pull(10, lambda m: None, expires_s=60))

    async def waiting() -> bool:
        return (await js.consumer_info(name, "d")).num_waiting == 1

    await wait_for(waiting, timeout=10, what="the request waiting on the server")
    await js.delete_consumer(name, "d")
    # The server ends the request with 409 at once; long before its expiry it is refused.
    with pytest.raises(PullRefused) as refused:
        await asyncio.wait_for(pulling, 10)
    assert refused.value.status == "409"


async def test_wake_ends_a_waiting_request(stream: tuple[JetStreamContext, str]) -> None:
    js, name = stream
    puller = await bound(js, name)
    pulling = asyncio.ensure_future(puller.pull(10, lambda m: None, expires_s=60))
    puller.wake()  # before or while it waits: either way it ends that request
    assert await asyncio.wait_for(pulling, 5) == 0
