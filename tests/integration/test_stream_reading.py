"""Reading a stream by sequence (shared/platform/bus/reading.py), as the console and the
operator's `watch` and `dead` do, against a real JetStream: forward by subject, backward,
removed sequences skipped, and the first sequence stored since a time."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from shared.platform.bus import reading

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def stream(nc: Client) -> AsyncIterator[tuple[JetStreamContext, str]]:
    """A stream of the test's own, on `<name>.>`."""
    js = nc.jetstream()
    name = f"READ_{uuid.uuid4().hex[:8].upper()}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    yield js, name
    await js.delete_stream(name)


async def publish(js: JetStreamContext, name: str, subject: str, body: str) -> int:
    return (await js.publish(f"{name.lower()}.{subject}", body.encode())).seq


async def test_forward_and_backward_skip_other_subjects_and_removed_sequences(
    stream: tuple[JetStreamContext, str],
) -> None:
    js, name = stream
    assert (await reading.bounds(js, name)).last == 0
    assert await reading.between(js, name, f"{name.lower()}.>", 0, 0) == []
    seqs = [await publish(js, name, subject, f"m{i}") for i, subject in enumerate("ababab")]
    await js.delete_msg(name, seqs[2])  # an `a` in the middle

    now = await reading.bounds(js, name)
    assert (now.first, now.last) == (seqs[0], seqs[-1])
    only_a = await reading.between(js, name, f"{name.lower()}.a", now.first, now.last)
    assert [(m.seq, m.data) for m in only_a] == [(seqs[0], b"m0"), (seqs[4], b"m4")]
    # Up to `last` only, from `first` on.
    assert [m.data for m in await reading.between(js, name, f"{name.lower()}.>", seqs[1], seqs[3])] == [
        b"m1",
        b"m3",
    ]
    newest_first = [m.data async for m in reading.backward(js, name, now.first, now.last)]
    assert newest_first == [b"m5", b"m4", b"m3", b"m1", b"m0"]


async def test_reading_from_first_since_gives_the_messages_stored_since_a_time(
    stream: tuple[JetStreamContext, str],
) -> None:
    js, name = stream
    every = f"{name.lower()}.>"
    for i in range(5):
        await publish(js, name, "a", f"old{i}")
    since = datetime.now(UTC)
    for i in range(6):
        await publish(js, name, "b" if i % 2 else "a", f"new{i}")

    async def read_since(subject: str, when: datetime) -> list[bytes]:
        now = await reading.bounds(js, name)
        start = await reading.first_since(js, name, subject, when, now)
        return [m.data or b"" for m in await reading.between(js, name, subject, start, now.last)]

    assert await read_since(every, since) == [f"new{i}".encode() for i in range(6)]
    assert await read_since(f"{name.lower()}.a", since) == [b"new0", b"new2", b"new4"]
    assert await read_since(f"{name.lower()}.b", since) == [b"new1", b"new3", b"new5"]
    assert await read_since(f"{name.lower()}.c", since) == []
    assert await read_since(every, datetime.now(UTC) + timedelta(hours=1)) == []
    # A time before the stream: all of it, also once its first messages were removed.
    hour_ago = since - timedelta(hours=1)
    assert len(await read_since(every, hour_ago)) == 11
    for seq in (1, 2, 3):
        await js.delete_msg(name, seq)
    assert (await read_since(every, hour_ago))[:2] == [b"old3", b"old4"]
    # The start itself: past the old messages, at the first new one.
    assert await reading.first_since(js, name, every, since, await reading.bounds(js, name)) == 6
