"""Events and runs have owners (contract section 10): the four services, real NATS and Redis,
tenancy enforced. Runners A and B are issued for `acme`, C for `globex`; each attack of one on
another's session or run is dead-lettered `continuity.dead.refused`, and the victim's record and
next decision are exactly as before."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import GetRequest, ResumeFailed, RetryRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError, RunnerSessions
from shared.contract.tenancy import RunnerPutRequest
from shared.platform.bus.publish import DEAD_REASON_HEADER
from shared.records import keys
from tests.support import (
    KEYS,
    Bus,
    Decisions,
    FakeRunner,
    answer_with,
    commit_req,
    decide_req,
    header,
    make_config,
    resume_failed,
    running,
    tool_call,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.asyncio


@dataclasses.dataclass
class Fleet:
    nc: Client
    bus: Bus
    client: ContinuityClient
    redis: aioredis.Redis
    ids: dict[str, str]

    def sessions(self, name: str) -> RunnerSessions:
        return RunnerSessions(self.client, self.ids[name])


@pytest.fixture(scope="module")
def own_nats(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("tenancy-nats"))
    server.start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.fixture(scope="module")
async def fleet(own_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[Fleet]:
    config = make_config(
        own_nats.url, redis_server.url, runner_keys=KEYS, tenancy="enforced", runner_cache_s=0.05
    )
    async with AsyncExitStack() as stack:
        for name in ("session-store", "classifier", "archiver", "reconciliation"):
            await stack.enter_async_context(running(registry.load(name), config))
        nc = await nats.connect(own_nats.url)
        stack.push_async_callback(nc.close)
        r = aioredis.Redis.from_url(redis_server.url)
        stack.push_async_callback(r.aclose)
        client = ContinuityClient(nc)
        tag = uuid.uuid4().hex[:6]
        ids = {name: f"runner-{name.lower()}-{tag}" for name in "ABCD"}
        await client.runner_put(RunnerPutRequest(runner_id=ids["A"], tenants=["acme"], actor="ops"))
        await client.runner_put(RunnerPutRequest(runner_id=ids["B"], tenants=["acme"], actor="ops"))
        await client.runner_put(RunnerPutRequest(runner_id=ids["C"], tenants=["globex"], actor="ops"))
        yield Fleet(nc, Bus(nc.jetstream()), client, r, ids)


def acme() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


async def owned_by_b(fleet: Fleet, policy: str = "allow_replacement_after_resume_failure") -> SessionRef:
    s = acme()
    await fleet.sessions("B").commit(commit_req(s, checkpoint_policy=policy))
    return s


async def snapshot(fleet: Fleet, s: SessionRef) -> dict[bytes, bytes]:
    return await fleet.redis.hgetall(keys.session(s.key))  # type: ignore[misc,no-any-return]


async def refused_with(fleet: Fleet, event: ResumeFailed) -> str:
    """The reason of the one refused dead letter of `event`, which its runner was told too."""
    found: list[Any] = []

    async def dead() -> bool:
        found.extend(await fleet.bus.dead(subjects.DEAD_REFUSED, event.event_id))
        return bool(found)

    await wait_for(dead, what=f"the refusal of {event.event_id}")
    reason = header(found[0], DEAD_REASON_HEADER) or ""
    told = [r for r in await fleet.bus.refusals(event.runner_id) if r["event_id"] == event.event_id]
    assert [(r["code"], r["run_id"], r["attempt"]) for r in told] == [(reason, event.run_id, event.attempt)]
    return reason


async def test_an_event_naming_another_runners_session_archives_nothing(fleet: Fleet) -> None:
    s = await owned_by_b(fleet)
    before = await snapshot(fleet, s)
    b_decide = await fleet.sessions("B").decide(decide_req(s))
    archive_answers = FakeRunner(fleet.nc, fleet.ids["A"], answer_with(0))
    await archive_answers.start()
    try:
        drop = resume_failed(fleet.ids["A"], session=s)  # unclassified: a transport drop
        await fleet.bus.settled(await fleet.bus.publish(drop, msg_id=drop.event_id))
        assert await refused_with(fleet, drop) == "session_not_owned"
    finally:
        await archive_answers.stop()
    assert archive_answers.per_archive == {}
    assert await snapshot(fleet, s) == before
    assert await fleet.sessions("B").decide(decide_req(s)) == b_decide
    # B's next commit is not fenced: no epoch was bumped.
    await fleet.sessions("B").commit(commit_req(s, native_session_id="ns-2", epoch=b_decide.epoch))
    # Nothing of the refused run was kept: no run record, no index, no decision for A.
    assert await fleet.redis.exists(keys.run_index(drop.run_id)) == 0
    assert await fleet.bus.decisions(fleet.ids["A"]) == []


async def test_a_pending_tool_call_on_another_runners_session_holds_nothing(fleet: Fleet) -> None:
    s = await owned_by_b(fleet)
    before = await snapshot(fleet, s)
    pending = resume_failed(fleet.ids["A"], session=s, pending=tool_call())
    await fleet.bus.settled(await fleet.bus.publish(pending, msg_id=pending.event_id))
    assert await refused_with(fleet, pending) == "session_not_owned"
    assert await snapshot(fleet, s) == before
    with pytest.raises(RequestError) as missing:
        await fleet.client.reconciliation(pending.run_id)
    assert missing.value.code == "not_found"
    # B commits on as before: the session was never held.
    await fleet.sessions("B").commit(commit_req(s, native_session_id="ns-2"))


async def test_another_runner_cannot_take_over_a_run(fleet: Fleet) -> None:
    s = await owned_by_b(fleet, policy="same_session_only")
    b, a = fleet.ids["B"], fleet.ids["A"]
    first = resume_failed(b, session=s)
    await fleet.bus.settled(await fleet.bus.publish(first, msg_id=first.event_id))
    hijack = resume_failed(
        a, session=s, run_id=first.run_id, attempt=2, classification="provider_attach_refused"
    )
    await fleet.bus.settled(await fleet.bus.publish(hijack, msg_id=hijack.event_id))
    assert await refused_with(fleet, hijack) == "run_not_owned"
    assert (await fleet.client.run(first.run_id)).runner_id == b

    # B's own attempt 2 gets its decision, and only B receives the run's decisions.
    own = resume_failed(
        b, session=s, run_id=first.run_id, attempt=2, classification="provider_attach_refused"
    )
    await fleet.bus.settled(await fleet.bus.publish(own, msg_id=own.event_id))
    decided = Decisions(fleet.bus.js, b)
    [_, second] = await decided.wait(2)
    assert (second.attempt, second.action) == (2, "operator")
    retried = await fleet.client.retry(RetryRequest(run_id=first.run_id, actor="alice"))
    continued = await decided.wait(3)
    assert continued[-1].decision_id == retried.decision_id and continued[-1].runner_id == b
    await decided.close()
    assert await fleet.bus.decisions(a) == []


@pytest.mark.parametrize(("name", "reason"), [("C", "tenant_not_allowed"), ("D", "runner_not_registered")])
async def test_events_outside_a_runners_tenants_are_refused(fleet: Fleet, name: str, reason: str) -> None:
    s = await owned_by_b(fleet)
    before = await snapshot(fleet, s)
    event = resume_failed(fleet.ids[name], session=s, classification="provider_attach_refused")
    await fleet.bus.settled(await fleet.bus.publish(event, msg_id=event.event_id))
    assert await refused_with(fleet, event) == reason
    assert await snapshot(fleet, s) == before
    assert await fleet.bus.decisions(fleet.ids[name]) == []
    # And their own sessions in that tenant: none can be made.
    with pytest.raises(RequestError):
        await fleet.sessions(name).commit(commit_req(acme()))
    with pytest.raises(RequestError):
        await fleet.sessions(name).get(GetRequest(session=s))


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_refusals_are_counted_per_issued_runner_and_by_outcome(fleet: Fleet) -> None:
    a, d = fleet.ids["A"], fleet.ids["D"]
    events = ("continuity_events_total", {"type": "resume_failed", "outcome": "refused"})
    before = (
        _count(events[0], **events[1]),
        _count("continuity_tenancy_refusals_total", runner=a, reason="session_not_owned"),
        _count("continuity_tenancy_refusals_total", runner="unregistered", reason="runner_not_registered"),
    )
    s = await owned_by_b(fleet)
    for runner in (a, d):
        event = resume_failed(runner, session=s)
        await fleet.bus.settled(await fleet.bus.publish(event, msg_id=event.event_id))
    after = (
        _count(events[0], **events[1]),
        _count("continuity_tenancy_refusals_total", runner=a, reason="session_not_owned"),
        _count("continuity_tenancy_refusals_total", runner="unregistered", reason="runner_not_registered"),
    )
    # An issued runner under its own id, any other under one label: no runner mints labels.
    assert [x - y for x, y in zip(after, before, strict=True)] == [2, 1, 1]
    assert _count("continuity_tenancy_refusals_total", runner=d, reason="runner_not_registered") == 0
