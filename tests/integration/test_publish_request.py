"""The JetStream publish's own request: a publish nobody answers times out with nats-py's
error, and no reply slot outlives its publish, answered or not."""

from __future__ import annotations

import asyncio
import time
import uuid

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig

from shared.platform.bus.publish import publish

pytestmark = pytest.mark.asyncio


async def test_an_unanswered_publish_times_out_and_leaves_no_reply_slot(nc: Client) -> None:
    js = nc.jetstream()
    subject = f"silent.{uuid.uuid4().hex}"
    sub = await nc.subscribe(subject)  # a responder that never answers: no 503 either
    try:
        started = time.monotonic()
        with pytest.raises(nats.errors.TimeoutError):
            await publish(js, subject, b"x", "t-1", timeout=0.3)
        assert 0.25 <= time.monotonic() - started < 5
        assert nc._resp_map == {}
        received = await sub.next_msg(timeout=2)
        assert received.headers == {"Nats-Msg-Id": "t-1"}
        assert received.reply  # sent as a request
    finally:
        await sub.unsubscribe()


async def test_concurrent_publishes_each_get_their_own_ack(nc: Client) -> None:
    js = nc.jetstream()
    name = f"MANY_{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    try:
        await asyncio.gather(*(publish(js, f"{name.lower()}.a", b"%d" % i, f"m-{i}") for i in range(200)))
        assert (await js.stream_info(name)).state.messages == 200
        assert nc._resp_map == {}
    finally:
        await js.delete_stream(name)
