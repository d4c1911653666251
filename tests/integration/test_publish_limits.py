"""Publication against a real server's `max_payload`: the size check counts what the server
counts, dead letters always fit, and a consumer's handler whose output can never be published
is dead-lettered once instead of being retried."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import GetRequest, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.platform.bus.consumer import PullConsumer
from shared.platform.bus.publish import (
    DEAD_COPY_MAX,
    DEAD_REASON_HEADER,
    DEAD_SIZE_HEADER,
    DEAD_SUBJECT_HEADER,
    DEAD_TRUNCATED_HEADER,
    PayloadTooLarge,
    dead_letter,
    header_size,
    publish,
)
from shared.platform.bus.streams import ensure_streams
from shared.records import keys
from tests.support import ConfiguredNatsServer, make_config, new_session, read_stream, running, wait_for

pytestmark = pytest.mark.asyncio

STREAM = "LIMITS_TEST"


@pytest.fixture
async def js_nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await ensure_streams(js)
    await js.add_stream(StreamConfig(name=STREAM, subjects=["limits.>"]))
    yield nc
    await nc.close()


def _subject() -> str:
    return f"limits.{uuid.uuid4().hex[:12]}"


async def _stored_size(nc: Client, subject: str) -> int:
    [msg] = await read_stream(nc.jetstream(), STREAM, subject)
    return len(msg.data) + header_size(msg.headers)


async def _dead_for(nc: Client, original_subject: str) -> list[Msg]:
    msgs = await read_stream(nc.jetstream(), subjects.DEAD_STREAM, subjects.DEAD_ALL)
    return [m for m in msgs if (m.headers or {}).get(DEAD_SUBJECT_HEADER) == original_subject]


async def test_the_limit_counts_headers_exactly_as_the_server_does(
    js_nc: Client, nats_server: NatsServer
) -> None:
    js = js_nc.jetstream()
    limit = js_nc.max_payload
    subject, msg_id = _subject(), f"id-{uuid.uuid4().hex}"
    room = limit - header_size({"Nats-Msg-Id": msg_id})

    await publish(js, subject, b"a" * room, msg_id)  # exactly at the limit: stored
    assert await _stored_size(js_nc, subject) == limit

    with pytest.raises(PayloadTooLarge) as refused:
        await publish(js, _subject(), b"a" * (room + 1), f"id-{uuid.uuid4().hex}")
    assert (refused.value.size, refused.value.limit) == (limit + 1, limit)
    assert js_nc.is_connected  # refused before sending: the connection is untouched

    # What the check prevents: the same byte more, sent as nats-py would send it, is refused by
    # the server, which closes that connection for good.
    other = await nats.connect(nats_server.url, allow_reconnect=False)
    await other.publish(_subject(), b"a" * (room + 1), headers={"Nats-Msg-Id": msg_id})
    await wait_for(lambda: other.is_closed, what="the server to close the connection that sent it")


@pytest.mark.parametrize(
    "headers",
    [
        {"Nats-Msg-Id": "id\r\nwith\nbreaks", "traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"},
        {" Nats-Msg-Id ": "  spaced  ", "Continuity-Service": "s\u00e9rvice"},
    ],
    ids=["line breaks in a value", "spaces around, and not ascii"],
)
async def test_the_limit_counts_a_header_as_nats_py_writes_it(
    nats_server: NatsServer, headers: dict[str, str]
) -> None:
    """nats-py strips keys and values and writes a line break inside a value as a space: the
    message at exactly the limit is taken, one byte more closes the connection."""
    nc = await nats.connect(nats_server.url, allow_reconnect=False)
    room = nc.max_payload - header_size(headers)
    await nc.publish(_subject(), b"a" * room, headers=headers)
    await nc.flush()  # the server answers the ping after the message: it took it
    assert nc.is_connected

    await nc.publish(_subject(), b"a" * (room + 1), headers=headers)
    await wait_for(lambda: nc.is_closed, what="the server to close the connection that sent it")


async def test_a_dead_letter_keeps_a_bounded_copy_and_the_original_size(js_nc: Client) -> None:
    js = js_nc.jetstream()
    big_subject, small_subject = _subject(), _subject()
    big = bytes(range(256)) * (js_nc.max_payload // 256)  # the whole limit, before any header
    small = b'{"small": true}'
    for subject, payload in ((big_subject, big), (small_subject, small)):
        await dead_letter(
            js,
            subjects.DEAD_INVALID,
            reason="invalid_field",
            original_subject=subject,
            payload=payload,
            msg_id=f"dead:test:{uuid.uuid4().hex}",
            service="test",
        )

    [kept] = await _dead_for(js_nc, big_subject)
    assert kept.data == big[:DEAD_COPY_MAX]
    assert kept.headers is not None
    assert kept.headers[DEAD_TRUNCATED_HEADER] == "true"
    assert kept.headers[DEAD_SIZE_HEADER] == str(len(big))
    assert kept.headers[DEAD_REASON_HEADER] == "invalid_field"
    [whole] = await _dead_for(js_nc, small_subject)
    assert whole.data == small
    assert whole.headers is not None and whole.headers[DEAD_TRUNCATED_HEADER] == "false"


async def test_a_dead_letter_fits_under_a_server_limit_below_its_copy(tmp_path: Path) -> None:
    server = ConfiguredNatsServer(tmp_path / "nats", "max_payload: 16384")
    server.start()
    try:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await ensure_streams(js)
            assert nc.max_payload == 16384 < DEAD_COPY_MAX
            original = _subject()
            await dead_letter(
                js,
                subjects.DEAD_INVALID,
                reason="malformed_json",
                original_subject=original,
                payload=b"x" * 200_000,
                msg_id="dead:test:small-server",
                service="test",
            )
            [kept] = await _dead_for(nc, original)
            assert len(kept.data) + header_size(kept.headers) <= 16384
            assert len(kept.data) > 16384 - 1024  # it still keeps as much as fits
            assert kept.headers is not None and kept.headers[DEAD_SIZE_HEADER] == "200000"
            assert nc.is_connected
        finally:
            await nc.close()
    finally:
        server.stop()


async def test_a_handler_whose_output_cannot_be_published_is_dead_lettered_once(js_nc: Client) -> None:
    """The handler publishes as many bytes as the message asks: one at the limit goes out, one a
    byte over it is set aside after its one try, acknowledged, and the consumer goes on."""
    js = js_nc.jetstream()
    out = _subject()
    room = js_nc.max_payload - header_size({"Nats-Msg-Id": "out-at-limit"})
    seen: list[int] = []

    async def handler(msg: Msg) -> None:
        size, msg_id = msgspec.json.decode(msg.data, type=tuple[int, str])
        seen.append(size)
        await publish(js, out, b"o" * size, msg_id)

    inbox = _subject()
    consumer = PullConsumer(
        js,
        stream=STREAM,
        durable=f"limits-{uuid.uuid4().hex[:8]}",
        filter_subject=inbox,
        handler=handler,
        service="test",
        max_deliver=5,
        nak_delay_s=0.1,
        ack_wait_s=30,
    )
    await consumer.start()
    try:
        await js.publish(inbox, msgspec.json.encode((room + 1, "out-over-limit")))
        await js.publish(inbox, msgspec.json.encode((room, "out-at-limit")))

        async def settled() -> bool:
            info = await js.consumer_info(STREAM, consumer._durable)
            return info.num_pending == 0 and info.num_ack_pending == 0

        await wait_for(settled, what="both messages acknowledged")
        info = await js.consumer_info(STREAM, consumer._durable)
        assert info.num_redelivered == 0
        assert sorted(seen) == [room, room + 1]  # each handled once, none retried
        assert await _stored_size(js_nc, out) == js_nc.max_payload
        [dead] = await _dead_for(js_nc, inbox)
        assert dead.headers is not None and dead.headers[DEAD_REASON_HEADER] == "payload_too_large"
        assert js_nc.is_connected and consumer.bound
    finally:
        await consumer.drain(5)


async def test_a_reply_larger_than_the_servers_limit_is_a_500_and_the_service_stays_connected(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A record written by another release can hold fields longer than a reply may be on this
    server: the request gets an internal error instead of the reply that would make the server
    close the service's connection, and the next request is answered."""
    server = ConfiguredNatsServer(tmp_path / "nats", "max_payload: 4096")
    server.start()
    try:
        async with running(registry.load("session-store"), make_config(server.url, redis_server.url)) as app:
            nc = await nats.connect(server.url)
            redis = aioredis.Redis.from_url(redis_server.url)
            try:
                client = ContinuityClient(nc)
                big, small = new_session(), new_session()
                for session, cwd in ((big, "/w" * 2100), (small, "/w")):
                    await redis.hset(  # type: ignore[misc]
                        keys.session(session.key),
                        mapping={"native_session_id": "ns-1", "model": "m", "cwd": cwd, "cursor": "c"},
                    )
                with pytest.raises(RequestError) as refused:
                    await client.get(GetRequest(session=big))
                assert (refused.value.status, refused.value.code) == (500, "internal_error")
                assert (await client.get(GetRequest(session=small))).cwd == "/w"
                assert app.app.ready()
            finally:
                await redis.aclose()
                await nc.close()
    finally:
        server.stop()
