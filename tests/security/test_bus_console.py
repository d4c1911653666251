"""The console's NATS user under deploy/nats/auth.conf: the requests of its pages and reads by
sequence, and no consumer API at all.

Replayed against a nats-server running the shipped authorization, with the four services and
two runners issued by `continuity runners add`: the console cannot delete a runner's durable
decisions consumer, nor create a consumer of any kind (the reported push consumer whose deliver
subject put decisions into CONTINUITY_WORK); its live view of the decisions still shows them,
without a consumer, and the server logs no violation of the console's while it serves."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator

import aiohttp
import msgspec

from continuity.devstack.servers import RedisServer
from services import registry
from services.console.config import ConsoleConfig
from services.console.service import WebConsole
from shared.contract import ResumeFailed, SessionRef, subjects
from shared.contract.times import now_rfc3339
from tests.deploy.conftest import Stack, inbox
from tests.security.conftest import as_user
from tests.support import RunningApp, make_config, wait_for
from tests.support.bus import Conn, Opener


async def as_runner(open_: Opener, stack: Stack, runner: str) -> Conn:
    return await open_(stack.url(), inbox_prefix=inbox(runner), nkeys_seed=stack.seeds[runner])


def resume_failed(runner: str, run_id: str) -> bytes:
    event = ResumeFailed(
        type="resume_failed",
        event_id=f"{run_id}.1",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=SessionRef(tenant="t1", conversation_id=f"c-{run_id}", agent_id="agent"),
        native_session_id="native-1",
        occurred_at=now_rfc3339(),
    )
    return msgspec.json.encode(event)


async def consumer_names(operator: Conn) -> set[str]:
    reply = await operator.nc.request(f"$JS.API.CONSUMER.NAMES.{subjects.DECISIONS_STREAM}", b"{}", timeout=5)
    return set(json.loads(reply.data)["consumers"] or [])


@contextlib.asynccontextmanager
async def console_as_its_user(stack: Stack, redis_server: RedisServer) -> AsyncIterator[str]:
    """The console connected as its user of the shipped rules, behind a trusted proxy's
    identity header; yields its base URL."""
    console = registry.load(
        "console",
        config=ConsoleConfig(
            port=0,
            identity_header="X-User",
            trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
            session_key=b"l" * 32,
        ),
    )
    app = RunningApp(console, make_config(stack.url("console"), redis_server.url))
    await app.start()
    try:
        yield f"http://127.0.0.1:{console.part(WebConsole).port}"
    finally:
        await app.stop()


async def test_the_console_can_neither_delete_nor_create_a_consumer(
    services: None, stack: Stack, open_: Opener
) -> None:
    operator = await as_user(open_, stack, "operator")
    console = await as_user(open_, stack, "console")
    ojs = operator.nc.jetstream()
    work_before = (await ojs.stream_info(subjects.WORK_STREAM)).state.last_seq
    consumers_before = await consumer_names(operator)
    assert "runner-a" in consumers_before

    push_into_work = json.dumps(
        {
            "stream_name": subjects.DECISIONS_STREAM,
            "config": {
                "deliver_subject": subjects.WORK_ARCHIVE,
                "deliver_policy": "all",
                "ack_policy": "none",
                "filter_subject": subjects.DECISIONS_ALL,
            },
        }
    ).encode()
    stream = subjects.DECISIONS_STREAM
    attempts = [
        # a runner's durable decisions consumer, and the runs index's
        (f"$JS.API.CONSUMER.DELETE.{stream}.runner-a", b""),
        (f"$JS.API.CONSUMER.DELETE.{stream}.{subjects.RUNS_INDEX_CONSUMER}", b""),
        # a push consumer whose deliver subject is a stream's subject, under every create subject
        (f"$JS.API.CONSUMER.CREATE.{stream}", push_into_work),
        (f"$JS.API.CONSUMER.CREATE.{stream}.spy", push_into_work),
        (f"$JS.API.CONSUMER.CREATE.{stream}.spy.continuity.decisions.>", push_into_work),
        (f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.spy", push_into_work),
        (f"$JS.API.CONSUMER.CREATE.{subjects.DEAD_STREAM}", push_into_work),
        (f"$JS.API.CONSUMER.CREATE.{subjects.EVENTS_STREAM}", push_into_work),
        # nor another's fetch or acknowledgement
        (f"$JS.API.CONSUMER.MSG.NEXT.{stream}.runner-a", b'{"batch": 1}'),
        (f"$JS.ACK.{stream}.runner-a.1.1.1.0.0", b"+ACK"),
    ]
    for subject, body in attempts:
        await console.nc.publish(subject, body, reply=console.nc.new_inbox())
    assert len(await console.violations()) == len(attempts)

    # A decision published after the attempts: it reaches its runner's consumer, and nothing else.
    runner = await open_(stack.url(), inbox_prefix=inbox("runner-a"), nkeys_seed=stack.seeds["runner-a"])
    await runner.nc.jetstream().publish(
        subjects.event("runner-a", "resume_failed"), resume_failed("runner-a", "run-c1")
    )

    async def decided() -> bool:
        info = await ojs.consumer_info(stream, "runner-a")
        return (info.num_pending or 0) >= 1

    await wait_for(decided, timeout=20, what="runner-a's decision in its consumer")
    assert await consumer_names(operator) == consumers_before
    assert (await ojs.stream_info(subjects.WORK_STREAM)).state.last_seq == work_before


async def test_the_console_shows_live_decisions_without_a_consumer(
    services: None, stack: Stack, open_: Opener, redis_server: RedisServer
) -> None:
    operator = await as_user(open_, stack, "operator")
    before = await consumer_names(operator)
    refused_before = stack.violations_of(("console",))  # the other test's deliberate attempts
    async with (
        console_as_its_user(stack, redis_server) as base,
        aiohttp.ClientSession(headers={"X-User": "ops"}) as http,
        http.get(f"{base}/events") as live,
    ):
        assert live.status == 200
        assert await live.content.readline() == b": connected\n"
        runner = await open_(stack.url(), inbox_prefix=inbox("runner-b"), nkeys_seed=stack.seeds["runner-b"])
        await runner.nc.jetstream().publish(
            subjects.event("runner-b", "resume_failed"), resume_failed("runner-b", "run-live-1")
        )
        async with asyncio.timeout(20):
            async for raw in live.content:
                if raw.startswith(b"data: ") and json.loads(raw[6:])["run_id"] == "run-live-1":
                    break
        assert await consumer_names(operator) == before  # the console made none
    assert stack.violations_of(("console",)) == refused_before


async def test_the_console_serves_the_runners_page_and_may_ask_for_a_transfer(
    services: None, stack: Stack, open_: Opener, redis_server: RedisServer
) -> None:
    """The pages that ask the session-store (a session's ownership history and the runners it
    may go to, its transfer, the runners page) are the console's under the shipped rules."""
    console_user = await as_user(open_, stack, "console")
    for subject in (subjects.SESSIONS_AUDIT, subjects.SESSIONS_TRANSFER, subjects.RUNNERS_LIST):
        await console_user.nc.publish(subject, b"{}", reply=console_user.nc.new_inbox())
    assert await console_user.violations() == []
    refused_before = stack.violations_of(("console",))
    async with (
        console_as_its_user(stack, redis_server) as base,
        aiohttp.ClientSession(headers={"X-User": "ops"}) as http,
        http.get(f"{base}/runners") as page,
    ):
        text = await page.text()
        assert page.status == 200, text[:500]
        assert "runner-a" in text and "runner-b" in text
    assert stack.violations_of(("console",)) == refused_before
