"""Pipelined endpoints (shared/platform/bus/endpoints.py) on a real NATS server: the handler is called
for every request of a burst while earlier replies are still pending, each request gets its own
reply or its own error, and one failure never holds up or spoils the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.micro.request import Request

from shared.contract.errors import NOT_FOUND
from shared.platform.bus.endpoints import ANSWER_CHUNK, Endpoints
from tests.support.servers import NatsServer

BURST = 40


class Ask(msgspec.Struct):
    n: int


class Answer(msgspec.Struct):
    n: int
    called_before_reply: int


@pytest.fixture
def subject(request: pytest.FixtureRequest) -> str:
    """A subject of each test's own: the NATS server here (2.9) may, for an instant, answer "no
    responders" to a request on a subject whose queue subscriber of the previous test is just
    closing, though the new one is in place."""
    return f"continuity.test.pipelined.{request.node.name.removeprefix('test_')[:40]}"


@pytest.fixture
async def server_nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


async def ask(nc: Client, subject: str, payload: bytes) -> tuple[dict[str, str] | None, dict[str, object]]:
    msg = await nc.request(subject, payload, timeout=30)
    return msg.headers, msgspec.json.decode(msg.data)


async def test_a_burst_is_answered_request_by_request(server_nc: Client, nc: Client, subject: str) -> None:
    loop = asyncio.get_running_loop()
    called: list[int] = []
    all_called: asyncio.Future[None] = loop.create_future()

    def handler(req: Ask) -> Awaitable[Answer]:
        # Called at dispatch, before any reply of the burst is awaited.
        called.append(req.n)
        if req.n == 7:
            raise RuntimeError("a bug in one request")
        if req.n == 9:
            raise NOT_FOUND.error("nothing for nine")
        if len(called) == BURST - 1:  # every request but the undecodable one
            all_called.set_result(None)

        async def reply() -> Answer:
            # No reply before the whole burst was handed to the handler: an endpoint that
            # awaited each reply before calling the handler for the next would never finish.
            await all_called
            return Answer(n=req.n, called_before_reply=len(called))

        return reply()

    endpoints = Endpoints(server_nc, "continuity-test-pipelined", "1.0.0", "test")
    endpoints.add("answer", subject, Ask, handler, pipelined=True)
    await endpoints.start()
    try:
        payloads = [msgspec.json.encode(Ask(n)) for n in range(BURST - 1)] + [b'{"n": "x"}']
        answers = await asyncio.gather(*(ask(nc, subject, p) for p in payloads))
    finally:
        await endpoints.drain(5)

    for n, (headers, body) in enumerate(answers[: BURST - 1]):
        if n == 7:
            assert headers is not None and headers["Nats-Service-Error-Code"] == "500"
            assert body["error"] == {"code": "internal_error", "message": "internal error"}
        elif n == 9:
            assert headers is not None and headers["Nats-Service-Error-Code"] == "404"
            assert body["error"]["code"] == "not_found"  # type: ignore[index]
        else:
            assert headers is None and body == {"n": n, "called_before_reply": BURST - 1}
    # The undecodable request is refused before its handler runs, with a sanitized reason.
    headers, body = answers[-1]
    assert headers is not None and headers["Nats-Service-Error-Code"] == "400"
    assert body["error"]["code"] == "invalid_field"  # type: ignore[index]
    assert sorted(called) == list(range(BURST - 1))


async def test_a_reply_that_never_comes_holds_only_its_own_slot(
    server_nc: Client, nc: Client, subject: str
) -> None:
    never: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    stuck_called = asyncio.Event()

    def handler(req: Ask) -> Awaitable[Answer]:
        if req.n == 0:
            stuck_called.set()
            return never

        async def reply() -> Answer:
            return Answer(n=req.n, called_before_reply=0)

        return reply()

    endpoints = Endpoints(server_nc, "continuity-test-pipelined", "1.0.0", "test", concurrency=4)
    endpoints.add("answer", subject, Ask, handler, pipelined=True)
    await endpoints.start()
    try:
        stuck = asyncio.ensure_future(ask(nc, subject, msgspec.json.encode(Ask(0))))
        await asyncio.wait_for(stuck_called.wait(), 30)
        # The stuck request's batch waits on it; requests sent after it start batches of their
        # own and are answered, while it holds one of the four slots.
        for n in range(1, 13):
            headers, body = await ask(nc, subject, msgspec.json.encode(Ask(n)))
            assert headers is None and body["n"] == n
        assert not stuck.done()
        never.set_result(Answer(n=0, called_before_reply=0))
        headers, body = await stuck
        assert headers is None and body["n"] == 0
    finally:
        await endpoints.drain(5)


async def test_a_long_batch_lets_its_first_replies_out_before_it_answers_the_rest(
    server_nc: Client, nc: Client, subject: str
) -> None:
    """Every request of one batch is ready at once; after ANSWER_CHUNK replies the batch lets
    the connection write them before it answers the next one."""
    written_before: dict[int, int] = {}

    def handler(req: Ask) -> Awaitable[Answer]:
        async def reply() -> Answer:
            # What the server connection still holds unwritten when this reply is made.
            written_before[req.n] = server_nc._pending_data_size
            return Answer(n=req.n, called_before_reply=0)

        return reply()

    endpoints = Endpoints(server_nc, "continuity-test-pipelined", "1.0.0", "test")
    endpoints.add("answer", subject, Ask, handler, pipelined=True)
    [route] = endpoints._routes
    # The requests are collected first, then handed to the endpoint in one go: one batch.
    collected = await server_nc.subscribe(subject)
    # The server must hold the interest before the first request, or it answers "no responders".
    await server_nc.flush()
    count = ANSWER_CHUNK + 8
    asking = [asyncio.ensure_future(ask(nc, subject, msgspec.json.encode(Ask(n)))) for n in range(count)]
    msgs = [await collected.next_msg(timeout=10) for _ in range(count)]
    for msg in msgs:
        await route.dispatch(Request(msg))
    answers = await asyncio.gather(*asking)
    await endpoints.drain(5)
    await collected.unsubscribe()

    assert sorted(body["n"] for _, body in answers) == list(range(count))
    order = [msgspec.json.decode(m.data, type=Ask).n for m in msgs]
    # The replies before the chunk's end pile up unwritten; the first after it finds them sent.
    assert written_before[order[ANSWER_CHUNK - 1]] > 0
    assert written_before[order[ANSWER_CHUNK]] == 0
