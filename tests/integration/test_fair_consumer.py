"""A pull consumer with a fair key (shared/platform/bus/consumer.py, shared/platform/bus/fair.py) on a real
JetStream: it holds more than it handles and starts held messages by key in turn."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
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
