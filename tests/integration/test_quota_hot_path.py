"""The hot path's stored-runs count on a single Redis server (shared/records/quotas.py,
`count_runs(together=True)`): one script counts a new run against all its owners, or against
none when one of them refuses it, with the same answers per owner as one call each; and the
classifier's count sent with its first reads of a run's first report."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import nats
import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import SessionRef
from shared.platform.redis import Redis
from shared.records import keys, quotas
from shared.records.quotas import Counted
from tests.support import KEYS, Bus, Decisions, make_config, resume_failed, running

pytestmark = pytest.mark.asyncio

DAY_MS = 86_400_000
NOW = 1_800_000_000_000


def owners(runner_limit: int, tenant_limit: int) -> list[tuple[str, int]]:
    tag = uuid.uuid4().hex[:8]
    return [(keys.runner_runs(f"r-{tag}"), runner_limit), (keys.tenant_runs(f"t-{tag}"), tenant_limit)]


async def members(redis: Redis, key: str) -> list[bytes]:
    reply: list[bytes] = await redis.execute("ZRANGE", key, 0, -1)
    return reply


async def test_one_script_counts_a_run_against_every_owner_once(records_redis: Redis) -> None:
    both = owners(5, 5)
    assert await quotas.count_runs(records_redis, both, "run-a", NOW, DAY_MS, together=True) == [
        (Counted.NOW, 0),
        (Counted.NOW, 0),
    ]
    assert await quotas.count_runs(records_redis, both, "run-a", NOW + 1, DAY_MS, together=True) == [
        (Counted.BEFORE, 0),
        (Counted.BEFORE, 0),
    ]
    for key, _ in both:
        assert await members(records_redis, key) == [b"run-a"]
        assert 0 < int(await records_redis.execute("PTTL", key)) <= DAY_MS


async def test_a_run_one_owner_refuses_is_counted_by_none(records_redis: Redis) -> None:
    (runner, _), (tenant, _) = both = owners(5, 1)
    assert (await quotas.count_runs(records_redis, both, "run-a", NOW, DAY_MS, together=True))[1] == (
        Counted.NOW,
        0,
    )
    # The tenant holds its one run: the runner, which has room, counts nothing either.
    assert await quotas.count_runs(records_redis, both, "run-b", NOW + 7, DAY_MS, together=True) == [
        (Counted.NOT_COUNTED, 0),
        (Counted.REFUSED, NOW + DAY_MS),
    ]
    assert await members(records_redis, runner) == [b"run-a"]
    assert await members(records_redis, tenant) == [b"run-a"]
    # Once the tenant's run leaves the retention, the run is counted by both.
    later = NOW + DAY_MS + 1
    assert await quotas.count_runs(records_redis, both, "run-b", later, DAY_MS, together=True) == [
        (Counted.NOW, 0),
        (Counted.NOW, 0),
    ]
    assert await members(records_redis, runner) == [b"run-b"]


async def test_together_answers_as_one_call_per_owner_does(records_redis: Redis) -> None:
    """The same sequence of runs, counted per owner and together, gets the same answers except
    where a refusal leaves the other owner's count out instead of taking it back."""
    apart, together = owners(2, 3), owners(2, 3)
    for i, run_id in enumerate(["a", "b", "a", "c", "d", "b"]):
        one = await quotas.count_runs(records_redis, apart, run_id, NOW + i, DAY_MS)
        all_ = await quotas.count_runs(records_redis, together, run_id, NOW + i, DAY_MS, together=True)
        refused = any(isinstance(a, tuple) and a[0] is Counted.REFUSED for a in one)
        if refused:  # the per-owner caller takes back what the others counted now
            for (key, _), answer in zip(apart, one, strict=True):
                if isinstance(answer, tuple) and answer[0] is Counted.NOW:
                    await records_redis.execute("ZREM", key, run_id)
            one = [
                (Counted.NOT_COUNTED, 0) if isinstance(a, tuple) and a[0] is Counted.NOW else a for a in one
            ]
        assert all_ == one, run_id
    for (a, _), (t, _) in zip(apart, together, strict=True):
        assert await members(records_redis, a) == await members(records_redis, t)


@pytest.fixture
async def nats_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    server = NatsServer(tmp_path_factory.mktemp("quota-hot-nats"))
    server.start()
    yield server.url
    server.stop()


async def test_a_first_report_of_a_run_already_stored_counts_nothing_more(
    nats_url: str, redis_server: RedisServer, records_redis: Redis
) -> None:
    """A run's first report has its count sent with the classifier's first reads; when the run
    turns out not to be new, the count is as if it had not been sent: a copy of the report at the
    limit is a duplicate, not refused, and a report naming another runner's run under another
    session leaves that run counted by its own runner only."""
    config = dataclasses.replace(
        make_config(nats_url, redis_server.url, runner_keys=KEYS), runner_stored_runs=1
    )
    tag = uuid.uuid4().hex[:6]
    owner, other, tenant = f"owner-{tag}", f"other-{tag}", f"t-{tag}"
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(nats_url)
        bus = Bus(nc.jetstream())
        try:
            first = resume_failed(owner, session=session_of(tenant))
            copy = resume_failed(owner, session=first.session, run_id=first.run_id)
            borrowed = resume_failed(other, session=session_of(tenant), run_id=first.run_id)
            for e in (first, copy, borrowed):
                await bus.settled(await bus.publish(e, msg_id=e.event_id))
            reader = Decisions(bus.js, owner)
            decided = await reader.read()
            refused = reader.refusals
            await reader.close()
            assert [(d.run_id, d.attempt) for d in decided] == [(first.run_id, 1)]
            assert refused == []
            assert await members(records_redis, keys.runner_runs(owner)) == [first.run_id.encode()]
            assert await members(records_redis, keys.runner_runs(other)) == []
            assert await members(records_redis, keys.tenant_runs(tenant)) == [first.run_id.encode()]
        finally:
            await nc.close()


def session_of(tenant: str) -> SessionRef:
    return SessionRef(tenant=tenant, conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")
