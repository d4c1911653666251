"""Random interleavings of runners acting on random sessions, against a real session-store with
claims allowed: a session record only ever changes by its owner's request, by the first commit
of a runner of its tenant when nobody owns it, or by an audited claim or transfer (contract 10)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import GetRequest, RejectRequest, SessionRef
from shared.contract.client import ContinuityClient, RequestError, RunnerSessions
from shared.contract.tenancy import ClaimRequest, RunnerPutRequest, SessionAuditRequest, TransferRequest
from shared.records import keys
from tests.support import RunningApp, commit_req, decide_req, make_config

RUNNERS = {"A": ["acme"], "B": ["acme"], "C": ["globex"], "D": None}  # D: never issued
TENANTS = ("acme", "acme", "globex")
OPS = ("commit", "commit_new", "reject", "decide", "get", "claim", "transfer")


@dataclasses.dataclass
class World:
    loop: asyncio.AbstractEventLoop
    client: ContinuityClient
    redis: aioredis.Redis
    ids: dict[str, str]


@pytest.fixture(scope="module")
def world(nats_server: NatsServer, redis_server: RedisServer) -> Iterator[World]:
    """A session-store of the module's own in a loop of its own: hypothesis calls the test
    synchronously, once per example."""
    import nats

    config = make_config(nats_server.url, redis_server.url)
    loop = asyncio.new_event_loop()
    enforced = dataclasses.replace(config, tenancy="enforced", session_claims="allow", runner_cache_s=60.0)
    app = RunningApp(registry.load("session-store"), enforced)

    async def start() -> World:
        await app.start()
        nc = await nats.connect(config.nats_url)
        client = ContinuityClient(nc)
        tag = uuid.uuid4().hex[:6]
        ids = {name: f"prop-{name.lower()}-{tag}" for name in RUNNERS}
        for name, tenants in RUNNERS.items():
            if tenants is not None:
                await client.runner_put(RunnerPutRequest(runner_id=ids[name], tenants=tenants, actor="ops"))
        return World(loop, client, aioredis.Redis.from_url(config.redis_url), ids)

    w = loop.run_until_complete(start())
    yield w

    async def stop() -> None:
        await w.client.nc.close()
        await w.redis.aclose()
        await app.stop()

    loop.run_until_complete(stop())
    loop.close()


Step = tuple[str, str, int]  # runner name, op, session index

steps = st.lists(
    st.tuples(st.sampled_from(sorted(RUNNERS)), st.sampled_from(OPS), st.integers(0, len(TENANTS) - 1)),
    min_size=10,
    max_size=40,
)


async def _act(w: World, runner: str, op: str, s: SessionRef, n: int) -> None:
    me = RunnerSessions(w.client, w.ids[runner])
    try:
        if op == "commit":
            await me.commit(commit_req(s, native_session_id=f"ns-{runner}"))
        elif op == "commit_new":
            await me.commit(commit_req(s, native_session_id=f"ns-{runner}-{n}", cursor=f"c-{n}"))
        elif op == "reject":
            await me.reject(
                RejectRequest(session=s, native_session_id=f"ns-{runner}", code="resume_target_missing")
            )
        elif op == "decide":
            await me.decide(decide_req(s))
        elif op == "get":
            await me.get(GetRequest(session=s))
        elif op == "claim":
            await me.claim(ClaimRequest(session=s))
        else:  # an operator gives the session to this runner
            await w.client.transfer(TransferRequest(session=s, runner_id=w.ids[runner], actor="operator"))
    except RequestError as err:
        assert err.status in (404, 409), err


async def _trail_length(w: World, s: SessionRef) -> int:
    return len((await w.client.ownership(SessionAuditRequest(session=s))).items)


owners = st.tuples(
    st.sampled_from(["A", "B", None]), st.sampled_from(["A", "B", None]), st.sampled_from(["C", None])
)
"""Who commits each session first, before the script (None: it starts without a record)."""


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=owners, script=steps)
def test_no_session_changes_but_by_its_owner_or_an_audited_move(
    world: World, first: tuple[str | None, ...], script: list[Step]
) -> None:
    w = world
    tag = uuid.uuid4().hex[:8]
    sessions = [
        SessionRef(tenant=t, conversation_id=f"p-{tag}-{i}", agent_id="a") for i, t in enumerate(TENANTS)
    ]
    names = {rid: name for name, rid in w.ids.items()}

    async def run() -> None:
        for s, owner in zip(sessions, first, strict=True):
            if owner is not None:
                await RunnerSessions(w.client, w.ids[owner]).commit(
                    commit_req(s, native_session_id=f"ns-{owner}")
                )
        for n, (runner, op, index) in enumerate(script):
            s = sessions[index]
            before = await w.redis.hgetall(keys.session(s.key))  # type: ignore[misc]
            trail_before = await _trail_length(w, s)
            await _act(w, runner, op, s, n)
            after = await w.redis.hgetall(keys.session(s.key))  # type: ignore[misc]
            if after == before:
                continue
            owner_before = before.get(b"owner", b"").decode()
            owner_after = after.get(b"owner", b"").decode()
            tenants = RUNNERS[runner]
            issued_here = tenants is not None and s.tenant in tenants
            moved = op in ("claim", "transfer")
            if moved:
                # Only to a runner issued for the tenant, and always written in the history.
                assert issued_here and owner_after == w.ids[runner], (op, runner)
                assert await _trail_length(w, s) == trail_before + 1
                assert int(after[b"epoch"]) == int(before.get(b"epoch", b"0")) + 1
            elif owner_before:
                assert names.get(owner_before) == runner, (op, runner, "changed another runner's session")
                assert owner_after == owner_before
            else:
                # Nobody owned it: only a commit of a runner issued for the tenant, which binds it.
                assert op.startswith("commit") and issued_here, (op, runner)
                assert owner_after == w.ids[runner]
                assert await _trail_length(w, s) == trail_before + 1

    w.loop.run_until_complete(run())
