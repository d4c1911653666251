"""`shared.platform.bus.publish.publish` against a real JetStream: stored once per msg id, and the same
exceptions as nats-py's `js.publish` when there is no stream or the server refuses."""

from __future__ import annotations

import uuid

import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, StreamConfig

from shared.platform.bus.publish import publish

pytestmark = pytest.mark.asyncio


async def test_a_publish_is_stored_once_per_msg_id(nc: Client) -> None:
    js = nc.jetstream()
    name = f"PUBLISH_{uuid.uuid4().hex[:8]}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    try:
        for _ in range(2):  # the second is a duplicate inside the window
            await publish(js, f"{name.lower()}.a", b"one", "id-1")
        await publish(js, f"{name.lower()}.a", b"two", "id-2")
        info = await js.stream_info(name)
        assert info.state.messages == 2
        assert (await js.get_msg(name, 1)).data == b"one"
    finally:
        await js.delete_stream(name)


async def test_no_stream_raises_what_js_publish_raises(nc: Client) -> None:
    js = nc.jetstream()
    subject = f"nostream.{uuid.uuid4().hex}"
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await js.publish(subject, b"x", timeout=2, headers={"Nats-Msg-Id": "a"})
    with pytest.raises(nats.js.errors.NoStreamResponseError):
        await publish(js, subject, b"x", "a", timeout=2)


async def test_a_refusal_raises_the_servers_error_as_js_publish_does(nc: Client) -> None:
    js = nc.jetstream()
    name = f"FULL_{uuid.uuid4().hex[:8]}"
    subject = f"{name.lower()}.a"
    await js.add_stream(
        StreamConfig(name=name, subjects=[f"{name.lower()}.>"], max_msgs=1, discard=DiscardPolicy.NEW)
    )
    try:
        await publish(js, subject, b"first", "m-1")
        with pytest.raises(nats.js.errors.APIError) as theirs:
            await js.publish(subject, b"second", timeout=2, headers={"Nats-Msg-Id": "m-2"})
        with pytest.raises(nats.js.errors.APIError) as ours:
            await publish(js, subject, b"second", "m-3", timeout=2)
        assert type(ours.value) is type(theirs.value)
        assert (ours.value.code, ours.value.err_code) == (theirs.value.code, theirs.value.err_code)
        assert ours.value.code is not None and ours.value.code >= 400
        assert (await js.stream_info(name)).state.messages == 1
    finally:
        await js.delete_stream(name)
