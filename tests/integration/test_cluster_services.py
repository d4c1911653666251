"""The four services on a Redis Cluster (3 masters, 3 replicas) and a 3-node JetStream cluster
with streams of 3 replicas: the simulated fleet finds no contradiction, the outbox sweeper
covers every master, and kill -9 of a Redis master or of a NATS node under load loses no event
and doubles no decision."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from continuity.devstack.servers import NatsCluster, RedisCluster
from continuity.tools.simulate.fleet import Fleet
from continuity.tools.simulate.keys import DEMO_KEYS
from continuity.tools.simulate.result import Settings
from services import registry
from shared.contract import SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.platform.redis.slots import key_slot
from shared.records import keys
from shared.records.outbox import OutboxEntry
from tests.support import make_config, running, wait_for
from tests.support.cluster import dead_letters_of, decisions_per_run, publish_events, read_all, wait_decided
from tests.support.sessions import commit_req, decide_req

pytestmark = pytest.mark.asyncio

ARCHIVE_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def config(nats_cluster: NatsCluster, redis_cluster: RedisCluster) -> Config:
    return make_config(
        nats_cluster.url,
        redis_cluster.url,
        runner_keys=DEMO_KEYS,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
        retry_backoff_s=0.1,
        stream_replicas=3,
        # Redeliveries span about 9 s: more than a failover (node timeout 1 s) takes.
        max_deliver=10,
    )


@pytest.fixture(scope="module")
async def services(config: Config) -> AsyncIterator[Config]:
    apps = (
        registry.load("session-store"),
        registry.load("classifier"),
        registry.load("archiver"),
        registry.load("reconciliation"),
    )
    async with contextlib.AsyncExitStack() as stack:
        for app in apps:
            await stack.enter_async_context(running(app, config))
        yield config


@pytest.fixture
async def nc(services: Config) -> AsyncIterator[Client]:
    client = await nats.connect(
        services.nats_url.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.2
    )
    yield client
    await client.close()


async def test_the_streams_have_three_replicas(services: Config, nc: Client) -> None:
    js = nc.jetstream()
    for stream in (subjects.EVENTS_STREAM, subjects.DECISIONS_STREAM, subjects.WORK_STREAM):
        info = await js.stream_info(stream)
        assert info.config.num_replicas == 3
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2


async def test_a_mixed_fleet_finds_no_contradiction(services: Config) -> None:
    settings = Settings(
        runners=3,
        events=40,
        rate=100.0,
        archive_fail_rate=0.25,
        archive_timeout_rate=0.15,
        seed=5,
        nats_url=services.nats_url.split(",")[0],  # the fleet's runners connect to one node
        deadline_s=15.0,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
        settle_s=0.3,
    )
    result = await Fleet(settings).run()
    assert [c.text for c in result.checker.contradictions] == []
    assert not result.warnings and not result.interrupted
    actions = {action for action, _ in result.checker.decisions}
    assert {"retry_same_session", "open_replacement", "operator", "reconcile"} <= actions
    assert result.operator_acts.get("resolve", 0) > 0  # the reconciliation service answered
    assert all(story.done for story in result.stories)


async def test_the_sweeper_publishes_what_is_left_in_outboxes_on_every_master(
    services: Config, redis_cluster: RedisCluster, nc: Client
) -> None:
    runner = f"r-{uuid.uuid4().hex[:12]}"
    client = Redis(services.redis_url, cluster="on")
    left: dict[str, str] = {}
    try:
        masters: set[int] = set()
        while len(masters) < 3 or len(left) < 9:
            sk = f"acme/conv-{uuid.uuid4().hex[:10]}/codex"
            masters.add(redis_cluster.master_of_slot(key_slot(keys.outbox(sk))).port)
            entry = OutboxEntry(
                subject=subjects.decisions(runner),
                msg_id=f"left-{uuid.uuid4().hex}",
                payload=b'{"left": true}',
                recorded_at=time.time() - 60,  # a crash left it long ago
            )
            await client.execute("HSET", keys.outbox(sk), entry.msg_id, msgspec.json.encode(entry))
            left[entry.msg_id] = sk

        async def published() -> bool:
            msgs = await read_all(nc.jetstream(), subjects.DECISIONS_STREAM, subjects.decisions(runner))
            return {(m.headers or {}).get("Nats-Msg-Id") for m in msgs} == set(left)

        await wait_for(published, timeout=20, interval=0.3, what="every left entry published")
        for sk in set(left.values()):
            assert not await client.exists(keys.outbox(sk))
    finally:
        await client.aclose()


async def _load_through(
    kill: asyncio.Future[None], js: JetStreamContext, runner: str, count: int
) -> list[str]:
    """Publish `count` events; the fault happens when a third of them is stored."""
    first = await publish_events(js, runner, count // 3)
    kill.set_result(None)
    return first + await publish_events(js, runner, count - count // 3)


async def _assert_each_decided_once(js: JetStreamContext, runner: str, runs: list[str]) -> None:
    await wait_decided(js, runner, runs, timeout=90)
    got = await decisions_per_run(js, runner)
    assert sorted(got) == sorted((r, 1) for r in runs)
    assert set(got.values()) == {1}, {k: v for k, v in got.items() if v != 1}
    assert await dead_letters_of(js, runner) == []


async def test_kill_9_of_a_redis_master_under_load_loses_no_event_and_doubles_no_decision(
    services: Config, redis_cluster: RedisCluster, nc: Client
) -> None:
    js = nc.jetstream()
    runner = f"r-{uuid.uuid4().hex[:12]}"
    victim = redis_cluster.masters()[0]
    # A session served by the victim: its requests during the outage answer 503, never 500.
    session = next(
        s
        for s in (
            SessionRef(tenant="acme", conversation_id=f"c-{i}", agent_id="codex") for i in range(10_000)
        )
        if redis_cluster.master_of_slot(key_slot(keys.session(s.key))).port == victim.port
    )
    requests = ContinuityClient(nc, timeout=10)
    await requests.commit(commit_req(session))
    kill: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    load = asyncio.create_task(_load_through(kill, js, runner, 200))
    await kill
    victim.kill()
    statuses: list[int] = []

    async def answers() -> bool:
        try:
            await requests.decide(decide_req(session))
            return True
        except RequestError as err:
            statuses.append(err.status)
            return False

    await wait_for(answers, timeout=30, interval=0.1, what="the session-store answers after the failover")
    runs = await load
    await _assert_each_decided_once(js, runner, runs)
    assert statuses and set(statuses) == {503}  # the outage was seen, as 503 only
    victim.start()  # back as a replica of the master that took over
    redis_cluster.wait_ok()


async def test_kill_9_of_a_nats_node_under_load_loses_no_event_and_doubles_no_decision(
    services: Config, nats_cluster: NatsCluster, nc: Client
) -> None:
    js = nc.jetstream()
    runner = f"r-{uuid.uuid4().hex[:12]}"
    kill: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    load = asyncio.create_task(_load_through(kill, js, runner, 200))
    await kill
    victim = nats_cluster.nodes[1]
    victim.kill()
    try:
        runs = await load
        await _assert_each_decided_once(js, runner, runs)
    finally:
        victim.start()
        nats_cluster.wait_healthy()
