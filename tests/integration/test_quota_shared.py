"""The shared quotas' scripts and reads against a real Redis (shared/records/quotas.py, contract
10.6): the event-rate bucket replicas lease from, the stored-runs count, the recovery budget,
a runner's usage, and what a replica does when Redis cannot be reached for a lease."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsServer, RedisCluster, RedisServer
from services import registry
from shared.contract import SessionRef
from shared.platform.config import Config
from shared.platform.quotas import LeasedBuckets
from shared.platform.redis import TRANSIENT_REDIS_ERRORS, Redis
from shared.records import keys, quotas
from shared.records.quotas import Counted
from shared.records.retention import Retention
from tests.support import KEYS, Bus, make_config, resume_failed, running, wait_for

pytestmark = pytest.mark.asyncio

DAY_MS = 86_400_000


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_a_bucket_grants_whole_tokens_up_to_its_burst_then_says_when(records_redis: Redis) -> None:
    bucket = keys.runner_event_rate(name("r"))
    # A token every 1000 s: only the burst of 5 is there.
    assert await quotas.lease(records_redis, bucket, 0.001, 5, 3) == (3, 0.0)
    assert await quotas.lease(records_redis, bucket, 0.001, 5, 3) == (2, 0.0)
    granted, wait_s = await quotas.lease(records_redis, bucket, 0.001, 5, 1)
    assert granted == 0 and 990 <= wait_s <= 1000
    # Gone once it would be full again; until then it lives.
    assert 0 < int(await records_redis.execute("PTTL", bucket)) <= 5_001_000


async def test_a_bucket_refills_at_its_rate_on_the_servers_clock(records_redis: Redis) -> None:
    bucket = keys.tenant_event_rate(name("t"))
    assert await quotas.lease(records_redis, bucket, 1000.0, 10, 10) == (10, 0.0)
    granted, wait_s = await quotas.lease(records_redis, bucket, 1000.0, 10, 10)
    assert granted < 10  # not refilled within the round trip
    # A token a millisecond: what one lease finds missing comes back within a few.
    assert wait_s <= 0.001


async def test_stored_runs_are_checked_and_counted_in_one_step(records_redis: Redis) -> None:
    owner = keys.runner_runs(name("r"))
    now = 1_800_000_000_000
    assert await quotas.count_run(records_redis, owner, "run-a", now, DAY_MS, 2) == (Counted.NOW, 0)
    assert await quotas.count_run(records_redis, owner, "run-b", now + 5, DAY_MS, 2) == (Counted.NOW, 0)
    # Counted once: another event of a run already counted passes at the limit.
    assert await quotas.count_run(records_redis, owner, "run-a", now + 9, DAY_MS, 2) == (Counted.BEFORE, 0)
    # A third is refused, told when the oldest leaves the retention; nothing is counted.
    assert await quotas.count_run(records_redis, owner, "run-c", now + 9, DAY_MS, 2) == (
        Counted.REFUSED,
        now + DAY_MS,
    )
    assert int(await records_redis.execute("ZCARD", owner)) == 2
    # A run that left the retention no longer counts.
    later = now + DAY_MS + 1
    assert await quotas.count_run(records_redis, owner, "run-c", later, DAY_MS, 2) == (Counted.NOW, 0)
    assert await records_redis.execute("ZRANGE", owner, 0, -1) == [b"run-b", b"run-c"]


async def test_the_recovery_budget_gives_no_unit_past_it(records_redis: Redis) -> None:
    counter = keys.recovery_budget(name("t"), 1)
    taken = [await quotas.recovery(records_redis, counter, "take", 2, 60_000) for _ in range(3)]
    assert taken == [(True, 1), (True, 2), (False, 2)]
    assert await quotas.recovery(records_redis, counter, "give_back", 2, 60_000) == (True, 1)
    assert await quotas.recovery(records_redis, counter, "take", 2, 60_000) == (True, 2)
    # A row that spends with the budget spent is counted all the same.
    assert await quotas.recovery(records_redis, counter, "force", 2, 60_000) == (True, 3)
    # Nothing given back below zero (a counter that expired meanwhile).
    empty = keys.recovery_budget(name("t"), 1)
    assert await quotas.recovery(records_redis, empty, "give_back", 2, 60_000) == (True, 0)


async def test_usage_reads_a_runners_and_its_tenants_quotas(records_redis: Redis) -> None:
    runner, tenant = name("r"), name("t")
    config = dataclasses.replace(
        Config(),
        runner_event_rate=0.001,
        runner_event_burst=10,
        tenant_event_rate=0.001,
        tenant_event_burst=100,
        runner_stored_runs=7,
    )
    fresh = await quotas.usage(records_redis, config, runner, tenant)
    assert [(u.scope, u.owner, u.tokens_left, u.stored_runs) for u in fresh] == [
        ("runner", runner, 10.0, 0),
        ("tenant", tenant, 100.0, 0),
    ]
    await quotas.lease(records_redis, keys.runner_event_rate(runner), 0.001, 10, 4)
    await quotas.lease(records_redis, keys.tenant_event_rate(tenant), 0.001, 100, 1)
    run_ms = Retention.from_config(config).run_ms
    for run_id in ("run-a", "run-b", "run-c"):
        for owner in (keys.runner_runs(runner), keys.tenant_runs(tenant)):
            await quotas.count_run(records_redis, owner, run_id, _now_ms(), run_ms, 7)
    runner_usage, tenant_usage = await quotas.usage(records_redis, config, runner, tenant)
    assert runner_usage.tokens_left == pytest.approx(6.0, abs=0.01)
    assert runner_usage.events_spent == pytest.approx(4.0, abs=0.01)
    assert (runner_usage.stored_runs, runner_usage.stored_runs_limit) == (3, 7)
    assert tenant_usage.tokens_left == pytest.approx(99.0, abs=0.01)
    assert tenant_usage.stored_runs == 3
    # Without a tenant: the runner's alone.
    assert [u.scope for u in await quotas.usage(records_redis, config, runner)] == ["runner"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
async def away(tmp_path: Path) -> AsyncIterator[tuple[RedisServer, Redis]]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    client = Redis(server.url, connect_timeout=0.5, reply_timeout=0.5)
    yield server, client
    await client.aclose()
    server.stop()


async def test_without_redis_a_lease_fails_and_the_event_is_neither_admitted_nor_refused(
    away: tuple[RedisServer, Redis],
) -> None:
    server, client = away

    async def lease(bucket: str, wanted: int) -> tuple[int, float]:
        return await quotas.lease(client, bucket, 200.0, 1000, wanted)

    buckets = LeasedBuckets(200.0, 1000, lease)
    bucket = keys.runner_event_rate(name("r"))
    assert buckets.size == 4
    assert await buckets.take(bucket) == 0.0  # leased 4, spent 1
    server.stop()
    # The tokens already leased are spent while Redis is away ...
    assert [await buckets.take(bucket) for _ in range(3)] == [0.0, 0.0, 0.0]
    # ... then no guess: the failure propagates (the classifier redelivers the event later).
    for _ in range(2):  # every time, not a refusal remembered from the first
        with pytest.raises(TRANSIENT_REDIS_ERRORS):
            await buckets.take(bucket)


async def test_the_shared_quotas_run_on_redis_cluster(redis_cluster: RedisCluster) -> None:
    client = Redis(redis_cluster.url)
    try:
        runner, tenant = name("r"), name("t")
        # Each key is its own slot: every script runs where its key lives.
        assert await quotas.lease(client, keys.runner_event_rate(runner), 0.001, 3, 2) == (2, 0.0)
        now = _now_ms()
        assert await quotas.count_run(client, keys.runner_runs(runner), "run-a", now, DAY_MS, 1) == (
            Counted.NOW,
            0,
        )
        assert (await quotas.count_run(client, keys.runner_runs(runner), "run-b", now, DAY_MS, 1))[
            0
        ] is Counted.REFUSED
        assert await quotas.recovery(client, keys.recovery_budget(tenant, 1), "take", 1, 60_000) == (True, 1)
        config = dataclasses.replace(Config(), runner_event_rate=0.001, runner_event_burst=3)
        runner_usage, tenant_usage = await quotas.usage(client, config, runner, tenant)
        assert (round(runner_usage.tokens_left), runner_usage.stored_runs) == (1, 1)
        assert tenant_usage.stored_runs == 0
    finally:
        await client.aclose()


async def test_an_event_whose_lease_finds_redis_away_is_decided_once_redis_is_back(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, redis_server = fresh_servers
    # A burst of 2 leased a token at a time; the directory's answer kept, so that only the lease
    # needs Redis before the step.
    config = make_config(
        n.url,
        redis_server.url,
        runner_keys=KEYS,
        runner_event_rate=0.001,
        runner_event_burst=2,
        runner_cache_s=600,
    )
    runner = name("r")
    tenant = name("t")
    outcomes = [{"type": "resume_failed", "outcome": o} for o in ("transient", "quota_exceeded", "decided")]
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(n.url)
        try:
            bus = Bus(nc.jetstream())
            first = resume_failed(
                runner, session=SessionRef(tenant=tenant, conversation_id=name("c"), agent_id="x")
            )
            await bus.settled(await bus.publish(first, msg_id=first.event_id))
            before = [REGISTRY.get_sample_value("continuity_events_total", o) or 0.0 for o in outcomes]
            redis_server.stop()
            second = resume_failed(
                runner, session=SessionRef(tenant=tenant, conversation_id=name("c"), agent_id="x")
            )
            seq = await bus.publish(second, msg_id=second.event_id)

            def counted() -> list[float]:
                return [
                    (REGISTRY.get_sample_value("continuity_events_total", o) or 0.0) - b
                    for o, b in zip(outcomes, before, strict=True)
                ]

            async def handled() -> bool:
                return any(counted())

            await wait_for(handled, timeout=20, what="the event handled while Redis is away")
            # Neither accepted nor refused: a transient failure, and the runner is told nothing.
            transient, refused, decided = counted()
            assert transient >= 1 and refused == decided == 0
            assert await bus.refusals(runner) == []
            redis_server.start()  # empty: the bucket is full again
            await bus.settled(seq, timeout=60)
            decided_runs = {d["run_id"] for d in await bus.decisions(runner)}
            assert decided_runs == {first.run_id, second.run_id}
            assert await bus.refusals(runner) == []
        finally:
            await nc.close()
