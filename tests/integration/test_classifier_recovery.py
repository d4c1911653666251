"""The classifier through failures: Redis away, and a process killed mid-stream and restarted."""

from __future__ import annotations

import collections
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import ResumeFailed, subjects
from shared.platform.bus.publish import DEAD_REASON_HEADER
from shared.platform.bus.streams import ensure_streams
from shared.records import keys
from tests.support import (
    KEYS,
    KEYS_ENV,
    Bus,
    ServiceProcess,
    header,
    make_config,
    new_runner_id,
    new_session,
    resume_failed,
    running,
    seed_session,
    tool_call,
    wait_for,
)

pytestmark = pytest.mark.asyncio

Servers = tuple[NatsServer, RedisServer]


@pytest.fixture
async def nc(fresh_servers: Servers) -> AsyncIterator[Client]:
    client = await nats.connect(fresh_servers[0].url)
    yield client
    await client.close()


@pytest.fixture
async def r(fresh_servers: Servers) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(fresh_servers[1].url)
    yield client
    await client.aclose()


async def redelivered(nc: Client) -> bool:
    info = await nc.jetstream().consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
    return (info.num_redelivered or 0) >= 1


async def test_an_event_waits_out_a_redis_outage_and_is_decided_once(
    fresh_servers: Servers, nc: Client, r: aioredis.Redis
) -> None:
    nats_server, redis_server = fresh_servers
    config = make_config(
        nats_server.url, redis_server.url, runner_keys=KEYS, max_deliver=1000, nak_delay_s=0.1
    )
    bus = Bus(nc.jetstream())
    async with running(registry.load("classifier"), config):
        runner, session = new_runner_id(), new_session()
        event = resume_failed(runner, session=session, classification="provider_attach_refused")
        redis_server.stop()
        seq = await bus.publish(event)

        await wait_for(lambda: redelivered(nc), what="the event negatively acknowledged and redelivered")
        assert await bus.decisions(runner) == []

        redis_server.start()
        await bus.settled(seq, timeout=20)
        [decision] = await bus.decisions(runner)
        assert (decision["run_id"], decision["action"]) == (event.run_id, "operator")
        slot = await r.hget(keys.run_decisions(session.key, event.run_id), "1")  # type: ignore[misc]
        assert isinstance(slot, bytes)
        assert msgspec.json.decode(slot)["decision_id"] == decision["decision_id"]


async def test_an_event_that_outlasts_its_deliveries_moves_to_exhausted(
    fresh_servers: Servers, nc: Client
) -> None:
    nats_server, redis_server = fresh_servers
    config = make_config(nats_server.url, redis_server.url, runner_keys=KEYS, max_deliver=2, nak_delay_s=0.05)
    bus = Bus(nc.jetstream())
    async with running(registry.load("classifier"), config):
        runner = new_runner_id()
        event = resume_failed(runner)
        redis_server.stop()
        await bus.settled(await bus.publish(event))
        [dead] = await bus.dead(subjects.DEAD_EXHAUSTED, event.event_id)
        assert header(dead, DEAD_REASON_HEADER) == "exhausted"
        assert await bus.decisions(runner) == []


# ---- kill -9 ------------------------------------------------------------------------------


@pytest.fixture
def classifier_process(fresh_servers: Servers, tmp_path: Path) -> Iterator[ServiceProcess]:
    n, r = fresh_servers
    # What the killed process held comes back after the ack wait.
    process = ServiceProcess(
        "classifier",
        n.url,
        r.url,
        tmp_path / "classifier.log",
        CONTINUITY_RUNNER_KEYS=KEYS_ENV,
        CONTINUITY_ACK_WAIT_S="2",
        CONTINUITY_NAK_DELAY_S="0.2",
    )
    yield process
    process.stop()


async def stream_events(r: aioredis.Redis, count: int) -> list[tuple[ResumeFailed, str]]:
    """Events of every kind, with the output each one should produce exactly once."""
    runners = [new_runner_id() for _ in range(4)]
    events: list[tuple[ResumeFailed, str]] = []
    for i in range(count):
        runner, session = runners[i % 4], new_session()
        kind = ("retry", "operator", "reconcile", "archive")[i % 4]
        if kind == "retry":
            event = resume_failed(runner, session=session)
        elif kind == "operator":
            event = resume_failed(runner, session=session, classification="provider_attach_refused")
        elif kind == "reconcile":
            event = resume_failed(runner, session=session, pending=tool_call())
        else:
            await seed_session(r, session, "allow_replacement_after_resume_failure")
            event = resume_failed(runner, session=session, error=None)
        events.append((event, kind))
    return events


async def test_kill_9_mid_stream_then_restart_leaves_exactly_one_decision_per_event(
    classifier_process: ServiceProcess, nc: Client, r: aioredis.Redis
) -> None:
    bus = Bus(nc.jetstream())
    await ensure_streams(bus.js)  # runners publish before the first classifier starts
    # Enough that the process cannot have decided them all by the time the kill arrives: it
    # holds and handles hundreds at once.
    events = await stream_events(r, 800)
    outputs: set[str] = set()
    at_kill: list[int] = []

    async def watch(msg: Msg) -> None:
        outputs.add((msg.headers or {}).get("Nats-Msg-Id", ""))
        if len(outputs) >= 40 and not at_kill:
            classifier_process.kill()  # in the callback: the process dies with a batch in hand
            at_kill.append(len(outputs))

    await nc.subscribe("continuity.decisions.>", cb=watch)
    await nc.subscribe("continuity.work.archive", cb=watch)
    await nc.flush()

    first, rest = events[:640], events[640:]
    for event, _ in first:
        await bus.publish(event, msg_id=event.event_id)
    classifier_process.start()
    await wait_for(lambda: bool(at_kill), timeout=20, what="the classifier killed mid-stream")
    assert classifier_process.proc is not None
    assert classifier_process.proc.wait(5) == -signal.SIGKILL
    assert len(outputs) < len(first)  # it died with work left, some of it in hand

    for event, _ in rest:  # the stream goes on while no classifier runs
        await bus.publish(event, msg_id=event.event_id)
    classifier_process.start()
    last_seq = await bus.publish(rest[-1][0], msg_id=rest[-1][0].event_id)  # deduplicated re-send
    expected = len(events)
    await wait_for(lambda: len(outputs) >= expected, timeout=30, what="an output for every event")
    await bus.settled(last_seq, timeout=15)

    async def outboxes_empty() -> bool:
        return not [k async for k in r.scan_iter(match=keys.OUTBOX_PATTERN)]

    # What the killed process recorded and left is published by the first taker once the grace
    # period has passed: a redelivery, or the sweeper, which no acknowledgement waits for.
    await wait_for(outboxes_empty, timeout=15, what="every recorded message published")

    decisions = [
        msgspec.json.decode(m.data)
        for m in await bus.read_all(subjects.DECISIONS_STREAM, subjects.DECISIONS_ALL)
    ]
    per_attempt = collections.Counter((d["run_id"], d["attempt"]) for d in decisions)
    archives = [
        msgspec.json.decode(m.data) for m in await bus.read_all(subjects.WORK_STREAM, subjects.WORK_ARCHIVE)
    ]
    per_archive = collections.Counter(a["archive_id"] for a in archives)
    reconciles = collections.Counter(
        msgspec.json.decode(m.data)["run_id"]
        for m in await bus.read_all(subjects.WORK_STREAM, subjects.WORK_RECONCILE)
    )

    for event, kind in events:
        sk = event.session.key
        if kind == "archive":
            assert per_archive[f"{event.run_id}-1"] == 1, event.run_id
            assert per_attempt[(event.run_id, 1)] == 0, event.run_id
        else:
            assert per_attempt[(event.run_id, 1)] == 1, event.run_id
        assert reconciles[event.run_id] == (1 if kind == "reconcile" else 0), event.run_id
        assert await r.hlen(keys.run_decisions(sk, event.run_id)) == 1  # type: ignore[misc]
        assert await r.llen(keys.run_audit(sk, event.run_id)) == 1  # type: ignore[misc]
    assert sum(per_attempt.values()) == sum(1 for _, kind in events if kind != "archive")
    assert sum(per_archive.values()) == sum(1 for _, kind in events if kind == "archive")
    assert classifier_process.stop() == 0  # SIGTERM drains cleanly
