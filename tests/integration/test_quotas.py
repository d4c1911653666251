"""Event quotas and the storm breaker (contract 10.6) against a real classifier, NATS and Redis."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import nats
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import SessionRef, subjects
from shared.records import keys
from tests.support import KEYS, Bus, Decisions, make_config, resume_failed, running, seed_session, wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def nats_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    server = NatsServer(tmp_path_factory.mktemp("quota-nats"))
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
async def r(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


def session_of(tenant: str) -> SessionRef:
    return SessionRef(tenant=tenant, conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


def seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def test_a_runner_past_its_rate_is_told_when_to_send_again(
    nats_url: str, redis_server: RedisServer
) -> None:
    config = make_config(nats_url, redis_server.url, runner_keys=KEYS)
    config = dataclasses.replace(config, runner_event_rate=0.5, runner_event_burst=2)
    runner, other = f"flood-{uuid.uuid4().hex[:6]}", f"quiet-{uuid.uuid4().hex[:6]}"
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(nats_url)
        bus = Bus(nc.jetstream())
        try:
            over = {"type": "resume_failed", "outcome": "quota_exceeded"}
            counted = REGISTRY.get_sample_value("continuity_events_total", over) or 0.0
            events = [resume_failed(runner, session=session_of(tenant)) for _ in range(5)]
            last = 0
            for e in events:
                last = await bus.publish(e, msg_id=e.event_id)
            quiet = resume_failed(other, session=session_of(tenant))
            last = await bus.publish(quiet, msg_id=quiet.event_id)
            await bus.settled(last)
            reader = Decisions(bus.js, runner)
            decided = await reader.read()
            refused = reader.refusals
            await reader.close()
            # The burst of 2 is decided; the rest are refused, each told when to come back.
            assert len(decided) == 2 and len(refused) == 3
            assert {r.run_id for r in refused} | {d.run_id for d in decided} == {e.run_id for e in events}
            for refusal in refused:
                assert (refusal.code, refusal.scope) == ("quota_exceeded", "runner")
                assert refusal.not_before is not None
                assert seconds(refusal.not_before) > seconds(refusal.refused_at)
            # Another runner of the tenant is not held back by the first one's quota.
            assert [d["run_id"] for d in await bus.decisions(other)] == [quiet.run_id]
            assert (REGISTRY.get_sample_value("continuity_events_total", over) or 0.0) - counted == 3
            # Over quota is not a dead letter: nothing for an operator to replay.
            assert await bus.dead(subjects.DEAD_REFUSED, refused[0].event_id) == []
        finally:
            await nc.close()


async def test_a_tenant_past_its_rate_is_refused_for_all_its_runners(
    nats_url: str, redis_server: RedisServer
) -> None:
    config = make_config(nats_url, redis_server.url, runner_keys=KEYS)
    config = dataclasses.replace(config, tenant_event_rate=0.5, tenant_event_burst=3)
    tenant, elsewhere = f"t-{uuid.uuid4().hex[:6]}", f"u-{uuid.uuid4().hex[:6]}"
    runners = [f"r{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(nats_url)
        bus = Bus(nc.jetstream())
        try:
            last = 0
            for runner in runners:
                for _ in range(2):
                    e = resume_failed(runner, session=session_of(tenant))
                    last = await bus.publish(e, msg_id=e.event_id)
            other = resume_failed(runners[0], session=session_of(elsewhere))
            last = await bus.publish(other, msg_id=other.event_id)
            await bus.settled(last)
            decided, refused = 0, []
            for runner in runners:
                reader = Decisions(bus.js, runner)
                decided += len([d for d in await reader.read() if d.session.tenant == tenant])
                refused += reader.refusals
                await reader.close()
            assert decided == 3 and len(refused) == 3
            assert {(r.code, r.scope) for r in refused} == {("quota_exceeded", "tenant")}
            # Another tenant's event of the same runner is decided.
            assert other.run_id in {d["run_id"] for d in await bus.decisions(runners[0])}
        finally:
            await nc.close()


async def test_the_storm_breaker_stops_a_tenants_recoveries_for_an_operator(
    nats_url: str, redis_server: RedisServer, r: aioredis.Redis
) -> None:
    config = make_config(nats_url, redis_server.url, runner_keys=KEYS)
    config = dataclasses.replace(config, tenant_recovery_budget=2, tenant_recovery_window_s=600.0)
    tenant, calm = f"storm-{uuid.uuid4().hex[:6]}", f"calm-{uuid.uuid4().hex[:6]}"
    runner = f"r-{uuid.uuid4().hex[:6]}"
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(nats_url)
        bus = Bus(nc.jetstream())
        try:
            sessions = [session_of(tenant) for _ in range(3)]
            for s in sessions:
                await seed_session(r, s, "same_session_only")
            for s in sessions:  # one at a time: the budget is counted as steps are recorded
                e = resume_failed(runner, session=s)
                await bus.settled(await bus.publish(e, msg_id=e.event_id))
            e = resume_failed(runner, session=session_of(calm))
            await bus.settled(await bus.publish(e, msg_id=e.event_id))
            decided = {d["session"]["conversation_id"]: d for d in await bus.decisions(runner)}
            first, second, third = (decided[s.conversation_id] for s in sessions)
            assert [first["action"], second["action"]] == ["retry_same_session", "retry_same_session"]
            assert (third["action"], third["reason"]) == ("operator", "tenant_recovery_budget_exhausted")
            # Stopped for an operator like any operator decision: the saved session is held.
            assert await r.hget(keys.session(sessions[2].key), "state") == b"held"  # type: ignore[misc]
            # Another tenant's recovery goes on.
            assert decided[e.session.conversation_id]["action"] == "retry_same_session"
        finally:
            await nc.close()


async def test_a_runner_holding_its_stored_runs_starts_no_more(
    nats_url: str, redis_server: RedisServer, r: aioredis.Redis
) -> None:
    config = make_config(nats_url, redis_server.url, runner_keys=KEYS)
    config = dataclasses.replace(config, runner_stored_runs=2)
    runner, tenant = f"keeper-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(nats_url)
        bus = Bus(nc.jetstream())
        try:
            runs = [resume_failed(runner, session=session_of(tenant)) for _ in range(3)]
            for e in runs:
                await bus.settled(await bus.publish(e, msg_id=e.event_id))
            # A later attempt of a run already stored is still decided.
            again = resume_failed(runner, session=runs[0].session, run_id=runs[0].run_id, attempt=2)
            await bus.settled(await bus.publish(again, msg_id=again.event_id))
            reader = Decisions(bus.js, runner)
            decided = await reader.read()
            refused = reader.refusals
            await reader.close()
            assert sorted((d.run_id, d.attempt) for d in decided) == sorted(
                [(runs[0].run_id, 1), (runs[1].run_id, 1), (runs[0].run_id, 2)]
            )
            [refusal] = refused
            assert (refusal.run_id, refusal.code, refusal.scope, refusal.quota) == (
                runs[2].run_id,
                "quota_exceeded",
                "runner",
                "stored_runs",
            )
            # It may come back once the oldest run leaves the retention.
            assert refusal.not_before is not None
            assert seconds(refusal.not_before) > seconds(refusal.refused_at) + 86_400
            # Nothing of the refused run was kept.
            assert await r.exists(keys.run_index(runs[2].run_id)) == 0
            # The replica writes what it counted, and the set lives a retention after its write.
            counted = keys.runner_runs(runner)

            async def written() -> bool:
                return await r.zcard(counted) == 2  # type: ignore[no-any-return]

            await wait_for(written, what="the stored runs written")
            assert 0 < await r.pttl(counted) <= config.retention_days * 86_400_000
        finally:
            await nc.close()
