"""The quotas of contract 10.6 hold for the whole deployment: three classifier processes on one
NATS and one Redis, each event handled by whichever replica takes it, and the counts compared
with each runner's and tenant's limit (no timing: a rate of ~0 leaves the burst alone)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from continuity.devstack.servers import NatsServer, RedisServer
from shared.contract import Decision, ResumeFailed, SessionRef
from shared.contract.tenancy import Refusal
from shared.platform.bus.streams import ensure_streams
from shared.records import keys
from tests.support import KEYS_ENV, Bus, Decisions, ServiceProcess, resume_failed, seed_session, wait_for

pytestmark = pytest.mark.asyncio

REPLICAS = 3
TINY_RATE = "0.001"
"""A token every 1000 s: within a test, only the burst is there to spend."""


@pytest.fixture
def start_replicas(
    fresh_servers: tuple[NatsServer, RedisServer], tmp_path: Path
) -> Iterator[Callable[..., _Started]]:
    started: list[ServiceProcess] = []

    def start(**env: str) -> _Started:
        n, r = fresh_servers
        for i in range(REPLICAS):
            process = ServiceProcess(
                "classifier",
                n.url,
                r.url,
                tmp_path / f"classifier-{i}.log",
                CONTINUITY_RUNNER_KEYS=KEYS_ENV,
                **env,
            )
            process.start()
            started.append(process)
        return _Started(started)

    yield start
    for process in started:
        process.stop()


class _Started:
    def __init__(self, processes: list[ServiceProcess]) -> None:
        self.processes = processes

    def _lines(self, process: ServiceProcess) -> list[dict[str, object]]:
        lines = []
        for line in process.log_path.read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue  # not a log record (a warning printed by a library)
        return lines

    async def ready(self) -> None:
        def started(process: ServiceProcess) -> bool:
            return any(line.get("event") == "service_started" for line in self._lines(process))

        async def all_started() -> bool:
            return all(started(p) for p in self.processes)

        await wait_for(all_started, timeout=60, what="three classifier replicas started")

    def handled_by(self) -> Counter[int]:
        """Events each replica decided or refused over quota, by its index."""
        counts: Counter[int] = Counter()
        for i, process in enumerate(self.processes):
            counts[i] = sum(
                1
                for line in self._lines(process)
                if line.get("event") in ("event_decided", "event_over_quota")
            )
        return counts


@pytest.fixture
async def fresh_nc(fresh_servers: tuple[NatsServer, RedisServer]) -> AsyncIterator[Client]:
    client = await nats.connect(fresh_servers[0].url)
    yield client
    await client.close()


@pytest.fixture
async def r(fresh_servers: tuple[NatsServer, RedisServer]) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(fresh_servers[1].url)
    yield client
    await client.aclose()


def session_of(tenant: str) -> SessionRef:
    return SessionRef(tenant=tenant, conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


async def flood(bus: Bus, events: list[ResumeFailed]) -> None:
    """Publish every event, a few at a time, and wait until the classifier acknowledged all."""
    last = 0
    for i in range(0, len(events), 4):
        seqs = await asyncio.gather(*(bus.publish(e, msg_id=e.event_id) for e in events[i : i + 4]))
        last = max(last, *seqs)
    await bus.settled(last, timeout=60)


async def outcomes(bus: Bus, runners: list[str]) -> tuple[list[Decision], list[Refusal]]:
    decided: list[Decision] = []
    refused: list[Refusal] = []
    for runner in runners:
        reader = Decisions(bus.js, runner)
        decided += await reader.read(0.5)
        refused += reader.refusals
        await reader.close()
    return decided, refused


def spread(started: _Started) -> None:
    """The events went to more than one replica: else the test would prove nothing shared."""
    handled = started.handled_by()
    assert sum(1 for count in handled.values() if count) >= 2, handled


async def prepare(nc: Client, started: _Started) -> Bus:
    bus = Bus(nc.jetstream())
    await ensure_streams(bus.js)
    await started.ready()
    return bus


async def test_a_runners_burst_is_spent_once_across_three_replicas(
    start_replicas: Callable[..., _Started], fresh_nc: Client
) -> None:
    started = start_replicas(CONTINUITY_RUNNER_EVENT_RATE=TINY_RATE, CONTINUITY_RUNNER_EVENT_BURST="6")
    bus = await prepare(fresh_nc, started)
    runner, tenant = f"flood-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    events = [resume_failed(runner, session=session_of(tenant)) for _ in range(60)]
    await flood(bus, events)
    decided, refused = await outcomes(bus, [runner])
    # Exactly the burst is accepted by the three together; every other event is refused.
    assert len(decided) == 6, (len(decided), started.handled_by())
    assert len(refused) == 54
    assert {(x.code, x.scope, x.quota) for x in refused} == {("quota_exceeded", "runner", "event_rate")}
    assert {x.run_id for x in refused} | {d.run_id for d in decided} == {e.run_id for e in events}
    spread(started)


async def test_a_tenants_burst_is_spent_once_across_three_replicas(
    start_replicas: Callable[..., _Started], fresh_nc: Client
) -> None:
    started = start_replicas(CONTINUITY_TENANT_EVENT_RATE=TINY_RATE, CONTINUITY_TENANT_EVENT_BURST="5")
    bus = await prepare(fresh_nc, started)
    tenant = f"t-{uuid.uuid4().hex[:6]}"
    runners = [f"r{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    events = [resume_failed(runners[i % 3], session=session_of(tenant)) for i in range(45)]
    await flood(bus, events)
    decided, refused = await outcomes(bus, runners)
    assert len(decided) == 5, (len(decided), started.handled_by())
    assert len(refused) == 40
    assert {(x.code, x.scope, x.quota) for x in refused} == {("quota_exceeded", "tenant", "event_rate")}
    spread(started)


async def test_a_runners_stored_runs_are_exact_across_three_replicas(
    start_replicas: Callable[..., _Started], fresh_nc: Client, r: aioredis.Redis
) -> None:
    started = start_replicas(CONTINUITY_RUNNER_STORED_RUNS="5")
    bus = await prepare(fresh_nc, started)
    runner, tenant = f"keeper-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    events = [resume_failed(runner, session=session_of(tenant)) for _ in range(40)]
    await flood(bus, events)
    decided, refused = await outcomes(bus, [runner])
    assert len(decided) == 5, (len(decided), started.handled_by())
    assert len(refused) == 35
    assert {(x.code, x.scope, x.quota) for x in refused} == {("quota_exceeded", "runner", "stored_runs")}
    # The set holds exactly the decided runs, and nothing of a refused run was kept.
    members: list[bytes] = await r.zrange(keys.runner_runs(runner), 0, -1)  # type: ignore[assignment]
    counted = {m.decode() for m in members}
    assert counted == {d.run_id for d in decided}
    assert await r.zcard(keys.tenant_runs(tenant)) == 5
    assert not any([await r.exists(keys.run_index(x.run_id)) for x in refused])
    spread(started)


async def test_the_storm_breaker_holds_its_budget_across_three_replicas(
    start_replicas: Callable[..., _Started], fresh_nc: Client, r: aioredis.Redis
) -> None:
    started = start_replicas(
        CONTINUITY_TENANT_RECOVERY_BUDGET="3", CONTINUITY_TENANT_RECOVERY_WINDOW_S="3600"
    )
    bus = await prepare(fresh_nc, started)
    tenant = f"storm-{uuid.uuid4().hex[:6]}"
    runners = [f"r{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    sessions = [session_of(tenant) for _ in range(30)]
    for s in sessions:
        await seed_session(r, s, "same_session_only")
    events = [resume_failed(runners[i % 3], session=s) for i, s in enumerate(sessions)]
    await flood(bus, events)
    decided, refused = await outcomes(bus, runners)
    assert refused == []
    kinds = Counter((d.action, d.reason) for d in decided)
    # Exactly the budget is spent on retries; every other failure stops for an operator.
    assert sum(n for (action, _), n in kinds.items() if action == "retry_same_session") == 3, kinds
    assert kinds[("operator", "tenant_recovery_budget_exhausted")] == 27, kinds
    windows = [k async for k in r.scan_iter(match=keys.recovery_budget(tenant, "*"))]  # type: ignore[arg-type]
    assert [int(await r.get(k) or 0) for k in windows] == [3]
    # A redelivered report of a retried run (another event for the same attempt) spends nothing.
    retried = next(d for d in decided if d.action == "retry_same_session")
    again = resume_failed(retried.runner_id, session=retried.session, run_id=retried.run_id)
    await bus.settled(await bus.publish(again, msg_id=again.event_id), timeout=30)
    assert [int(await r.get(k) or 0) for k in windows] == [3]
    spread(started)


async def test_a_run_claimed_by_a_replica_that_stopped_before_counting_it_is_counted(
    start_replicas: Callable[..., _Started], fresh_nc: Client, r: aioredis.Redis
) -> None:
    started = start_replicas(CONTINUITY_RUNNER_STORED_RUNS="1")
    bus = await prepare(fresh_nc, started)
    runner, tenant = f"keeper-{uuid.uuid4().hex[:6]}", f"t-{uuid.uuid4().hex[:6]}"
    first = resume_failed(runner, session=session_of(tenant))
    # What a delivery leaves when its replica stopped after claiming the run, before counting it.
    await r.set(keys.run_index(first.run_id), first.session.key, px=86_400_000)
    await bus.settled(await bus.publish(first, msg_id=first.event_id), timeout=30)
    assert await r.zcard(keys.runner_runs(runner)) == 1
    second = resume_failed(runner, session=session_of(tenant))
    await bus.settled(await bus.publish(second, msg_id=second.event_id), timeout=30)
    decided, refused = await outcomes(bus, [runner])
    assert [d.run_id for d in decided] == [first.run_id]
    assert [(x.run_id, x.quota) for x in refused] == [(second.run_id, "stored_runs")]
