"""The four services, running, against messages near and over the server's `max_payload`
(1 MiB): every service stays connected and ready, nothing is retried forever, and every dead
letter fits under the limit."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import ResumeFailed, SessionRef, ToolCall, subjects
from shared.contract.times import now_rfc3339
from shared.platform.bus.publish import (
    DEAD_COPY_MAX,
    DEAD_REASON_HEADER,
    DEAD_SIZE_HEADER,
    DEAD_SUBJECT_HEADER,
    DEAD_TRUNCATED_HEADER,
    header_size,
)
from shared.platform.service import Service
from shared.records import keys
from shared.records.outbox import OutboxEntry
from tests.support import RunningApp, make_config, read_stream, running, wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def limits_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own: the work-queue consumers of its services cannot clash."""
    server = NatsServer(tmp_path_factory.mktemp("limits-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def stack(limits_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[list[RunningApp]]:
    config = make_config(limits_nats.url, redis_server.url)
    apps: list[Service] = [
        registry.load("session-store"),
        registry.load("classifier"),
        registry.load("archiver"),
        registry.load("reconciliation", outbox_grace_s=5.0, sweep_interval_s=0.2),
    ]
    async with (
        running(apps[0], config) as a,
        running(apps[1], config) as b,
        running(apps[2], config) as c,
        running(apps[3], config) as d,
    ):
        yield [a, b, c, d]


@pytest.fixture
async def runner(limits_nats: NatsServer) -> AsyncIterator[Client]:
    nc = await nats.connect(limits_nats.url)
    yield nc
    await nc.close()


@pytest.fixture
async def r(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


def _session() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


def _event(runner_id: str, session: SessionRef, tool_name: str) -> ResumeFailed:
    """A run_id as long as a token may be: the work item repeats it (in its decision id and
    its message id), so a work item carrying this event's tool call is larger than the event."""
    return ResumeFailed(
        type="resume_failed",
        event_id="ev-1",
        runner_id=runner_id,
        run_id=f"run-{uuid.uuid4().hex}".ljust(128, "0"),
        attempt=1,
        session=session,
        native_session_id="ns-1",
        occurred_at=now_rfc3339(),
        pending_tool_call=ToolCall(tool_call_id="call-1", tool_name=tool_name, started_at=now_rfc3339()),
    )


def _set_aside_total() -> float:
    return REGISTRY.get_sample_value("continuity_outbox_set_aside_total") or 0.0


async def _dead_letters(js_nc: Client) -> list[Msg]:
    return await read_stream(js_nc.jetstream(), subjects.DEAD_STREAM, subjects.DEAD_ALL)


def _assert_fits(msgs: list[Msg], limit: int) -> None:
    for m in msgs:
        assert len(m.data) <= DEAD_COPY_MAX
        assert len(m.data) + header_size(m.headers) <= limit


def _assert_each_once(msgs: list[Msg]) -> None:
    ids = [(m.headers or {}).get("Nats-Msg-Id") for m in msgs]
    assert len(ids) == len(set(ids)), ids


async def _all_well(stack: list[RunningApp], runner: Client) -> None:
    """Every service connected and ready, and no message of the events or work streams left
    pending or waiting for another delivery."""
    for running_app in stack:
        assert running_app.app.ready(), running_app.app.name
        assert running_app.task is not None and not running_app.task.done(), running_app.app.name
    js = runner.jetstream()

    async def settled() -> bool:
        for stream, durable in (
            (subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER),
            (subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER),
            (subjects.WORK_STREAM, subjects.RECONCILIATION_CONSUMER),
        ):
            info = await js.consumer_info(stream, durable)
            if info.num_pending or info.num_ack_pending:
                return False
        return True

    await wait_for(settled, timeout=20, what="every consumer settled")


async def _published_event(runner: Client, event: ResumeFailed, target: int) -> bytes:
    """`event` with its tool name grown until the encoded event is `target` bytes."""
    base = len(msgspec.json.encode(event))
    event.pending_tool_call = ToolCall(
        tool_call_id="call-1", tool_name="t" * (target - base + 1), started_at=now_rfc3339()
    )
    data = msgspec.json.encode(event)
    assert len(data) == target
    await runner.jetstream().publish(subjects.event(event.runner_id, "resume_failed"), data)
    return data


async def test_a_1mb_invalid_event_is_dead_lettered_once_and_everyone_stays_connected(
    stack: list[RunningApp], runner: Client
) -> None:
    runner_id = f"r-{uuid.uuid4().hex[:12]}"
    subject = subjects.event(runner_id, "resume_failed")
    data = b'{"type": "resume_failed", "junk": "' + b"j" * (runner.max_payload - 64) + b'"}'
    assert runner.max_payload - 64 < len(data) <= runner.max_payload
    await runner.jetstream().publish(subject, data)

    async def parked() -> list[Msg]:
        return [
            m for m in await _dead_letters(runner) if (m.headers or {}).get(DEAD_SUBJECT_HEADER) == subject
        ]

    async def dead_lettered() -> bool:
        return bool(await parked())

    await wait_for(dead_lettered, timeout=20, what="the event's dead letter")
    await _all_well(stack, runner)
    [dead] = await parked()
    assert dead.headers is not None
    assert dead.headers[DEAD_TRUNCATED_HEADER] == "true"
    assert dead.headers[DEAD_SIZE_HEADER] == str(len(data))
    assert dead.data == data[:DEAD_COPY_MAX]
    all_dead = await _dead_letters(runner)
    _assert_fits(all_dead, runner.max_payload)
    _assert_each_once(all_dead)


async def test_a_1mb_event_with_a_huge_tool_name_leaves_everyone_connected(
    stack: list[RunningApp], runner: Client, r: aioredis.Redis
) -> None:
    """Valid under a contract without field limits: its reconcile work item (the tool call and
    more) is then larger than the limit and set aside; with field limits, the event itself is
    invalid. Either way, nothing is retried and no connection is lost."""
    session = _session()
    runner_id = f"r-{uuid.uuid4().hex[:12]}"
    event = _event(runner_id, session, "t")
    data = await _published_event(runner, event, runner.max_payload)

    async def handled() -> bool:
        info = await runner.jetstream().consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
        return info.num_pending == 0 and info.num_ack_pending == 0

    await wait_for(handled, timeout=20, what="the event handled")
    await _all_well(stack, runner)
    assert not await r.exists(keys.outbox(session.key))  # nothing left for a sweeper to retry
    all_dead = await _dead_letters(runner)
    _assert_fits(all_dead, runner.max_payload)
    _assert_each_once(all_dead)
    ours = [m for m in all_dead if event.run_id.encode() in m.data]
    assert ours, "the event or what it caused is dead-lettered"
    for m in ours:  # the event, or its work item: the copy of either is the bounded one
        assert m.headers is not None
        assert int(m.headers[DEAD_SIZE_HEADER]) >= len(data) > DEAD_COPY_MAX
        assert m.headers[DEAD_TRUNCATED_HEADER] == "true"


async def test_outbox_entries_near_and_over_the_limit_are_published_or_set_aside_once(
    stack: list[RunningApp], runner: Client, r: aioredis.Redis
) -> None:
    """Written straight into a session's outbox, as a crash would leave them: the three sweepers
    publish what fits (to the byte) and set aside what never will, without blocking the rest."""
    session = _session()
    runner_id = f"r-{uuid.uuid4().hex[:12]}"
    limit = runner.max_payload
    old = time.time() - 60

    def entry(tag: str, size: int) -> OutboxEntry:
        msg_id = f"{tag}-{uuid.uuid4().hex}"
        room = size - header_size({"Nats-Msg-Id": msg_id})
        return OutboxEntry(
            subject=subjects.decisions(runner_id), msg_id=msg_id, payload=b"p" * room, recorded_at=old
        )

    small = entry("small", 512)
    at_limit = entry("at-limit", limit)
    over_by_one = entry("over-by-one", limit + 1)
    huge = entry("huge", 3 * limit)
    before = _set_aside_total()
    await r.hset(  # type: ignore[misc]
        keys.outbox(session.key),
        mapping={e.msg_id: msgspec.json.encode(e) for e in (over_by_one, small, huge, at_limit)},
    )

    async def emptied() -> bool:
        return not await r.exists(keys.outbox(session.key))

    await wait_for(emptied, timeout=20, what="the outbox emptied by the sweepers")
    published = await read_stream(
        runner.jetstream(), subjects.DECISIONS_STREAM, subjects.decisions(runner_id)
    )
    assert sorted(len(m.data) + header_size(m.headers) for m in published) == [512, limit]

    dead = {
        m.headers["Nats-Msg-Id"]: m
        for m in await _dead_letters(runner)
        if m.headers is not None and m.headers.get(DEAD_SUBJECT_HEADER) == subjects.decisions(runner_id)
    }
    assert set(dead) == {f"dead:outbox:{over_by_one.msg_id}", f"dead:outbox:{huge.msg_id}"}
    for original, m in (
        (over_by_one, dead[f"dead:outbox:{over_by_one.msg_id}"]),
        (huge, dead[f"dead:outbox:{huge.msg_id}"]),
    ):
        assert m.headers is not None
        assert m.headers[DEAD_REASON_HEADER] == "payload_too_large"
        assert m.headers[DEAD_SIZE_HEADER] == str(len(original.payload))
        assert m.headers[DEAD_TRUNCATED_HEADER] == "true"
        assert m.data == original.payload[:DEAD_COPY_MAX]
    all_dead = await _dead_letters(runner)
    _assert_fits(all_dead, limit)
    _assert_each_once(all_dead)
    assert _set_aside_total() >= before + 2
    await _all_well(stack, runner)
