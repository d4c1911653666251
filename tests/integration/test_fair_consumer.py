"""A pull consumer with a fair key (shared/platform/bus/consumer.py, shared/platform/bus/fair.py) on a real
JetStream: it holds more than it handles and starts held messages by key in turn."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from continuity.devstack.servers import NatsServer
from shared.platform.bus.consumer import PullConsumer
from tests.support import wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def js_nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_server.url)
    yield nc
    await nc.close()


async def test_a_held_quiet_key_starts_before_a_flood(
    js_nc: Client,
) -> None:
    js = js_nc.jetstream()
    tag = uuid.uuid4().hex[:8]
    stream, subject = f"FAIR_{tag}", f"fair.{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{subject}.>"]))
    started: list[str] = []
    release = asyncio.Event()

    async def handle(msg: Msg) -> None:
        started.append(msg.subject.rsplit(".", 1)[-1])
        await release.wait()  # every handler stays busy until the test lets them go

    consumer = PullConsumer(
        js,
        stream=stream,
        durable="fair",
        filter_subject=None,
        handler=handle,
        service="test",
        max_deliver=5,
        nak_delay_s=0.1,
        ack_wait_s=30,
        batch=2,
        fair_key=lambda m: m.subject.split(".")[2],
        hold=64,
        per_key=2,
    )
    for i in range(20):
        await js.publish(f"{subject}.flood.f{i}", b"{}")
    await js.publish(f"{subject}.quiet.q0", b"{}")
    await consumer.start()
    try:
        # Two handlers, both taken by the flood; the quiet message is held behind 18 more.
        await wait_for(lambda: len(started) == 2, what="both handlers busy")
        held = await js.consumer_info(stream, "fair")

        async def all_held() -> bool:
            info = await js.consumer_info(stream, "fair")
            return (info.num_ack_pending or 0) == 21

        await wait_for(all_held, what="every message held by the consumer")
        assert held.num_pending is not None
        release.set()
        # In arrival order the quiet message would start 21st; in turn, as soon as one of the
        # flood's handlers is done it is next.
        await wait_for(lambda: "q0" in started, what="the quiet message started")
        assert started.index("q0") <= 3, started
    finally:
        release.set()
        await consumer.drain(5)

    await js.delete_stream(stream)


def fair_consumer(
    js: JetStreamContext, stream: str, handle: Callable[[Msg], Awaitable[None]]
) -> PullConsumer:
    """Sixteen handlers, at most one message of a key at once, 24 messages held."""
    return PullConsumer(
        js,
        stream=stream,
        durable="fair",
        filter_subject=None,
        handler=handle,
        service="test",
        max_deliver=5,
        nak_delay_s=0.1,
        ack_wait_s=60,
        batch=16,
        fair_key=lambda m: m.subject.split(".")[2],
        hold=24,
        per_key=1,
    )


async def test_a_drain_returns_every_held_message_at_once_for_another_consumer(
    js_nc: Client,
) -> None:
    js = js_nc.jetstream()
    tag = uuid.uuid4().hex[:8]
    stream, subject = f"FAIR_{tag}", f"fair.{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{subject}.>"]))
    release = asyncio.Event()
    first: list[str] = []
    second: list[str] = []

    async def busy(msg: Msg) -> None:
        first.append(msg.subject.rsplit(".", 2)[-2] + "." + msg.subject.rsplit(".", 1)[-1])
        await release.wait()  # in hand until the test lets it go

    async def other(msg: Msg) -> None:
        second.append(msg.subject.rsplit(".", 2)[-2] + "." + msg.subject.rsplit(".", 1)[-1])

    # Three keys of eight: one of each in hand (each key at its share), 21 held, every slot taken.
    for i in range(8):
        for key in ("a", "b", "c"):
            await js.publish(f"{subject}.{key}.m{i}", b"{}")
    consumer = fair_consumer(js, stream, busy)
    replica = fair_consumer(js, stream, other)
    await consumer.start()
    draining: asyncio.Task[None] | None = None
    try:

        async def all_held() -> bool:
            info = await js.consumer_info(stream, "fair")
            return (info.num_ack_pending or 0) == 24 and len(first) == 3

        await wait_for(all_held, what="three messages in hand and 21 held")
        await replica.start()
        # The drain waits for the three in hand; the 21 held go back at once, to the replica.
        draining = asyncio.create_task(consumer.drain(30))
        await wait_for(lambda: len(second) == 21, what="every held message handled by the replica")
        assert not draining.done()  # still waiting for the three in hand
        release.set()
        await wait_for(draining.done, what="the drain finished once the three in hand were done")
        draining.result()
        assert sorted(first + second) == sorted(f"{k}.m{i}" for k in "abc" for i in range(8))

        async def all_acked() -> bool:
            info = await js.consumer_info(stream, "fair")
            return (info.num_ack_pending or 0) == 0 and (info.num_pending or 0) == 0

        await wait_for(all_acked, what="every message acknowledged once")
    finally:
        release.set()
        if draining is not None and not draining.done():
            await draining
        await replica.drain(5)
    await js.delete_stream(stream)
