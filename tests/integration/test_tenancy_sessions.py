"""Sessions have tenants and an owner (contract section 10), against a real session-store.

Runners A and B are issued for tenant `acme`, C for `globex`; D is issued for nothing. Each
attack of one runner on another's session is refused, and afterwards the victim's record
(handle, revision, epoch, state) and its next decide are exactly as before.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from services import registry
from shared.contract import GetRequest, RejectRequest, SessionRef
from shared.contract.client import ContinuityClient, RequestError, RunnerSessions
from shared.contract.tenancy import (
    ClaimRequest,
    RunnerPutRequest,
    RunnerRevokeRequest,
    SessionAuditRequest,
    TransferRequest,
)
from shared.platform.config import Config
from shared.records import keys
from tests.support import RunningApp, running
from tests.support.sessions import commit_req, decide_req
from tests.support.waiting import wait_for


def _ids() -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    return {name: f"runner-{name.lower()}-{tag}" for name in "ABCD"}


@pytest.fixture
def enforced(config: Config) -> Config:
    return dataclasses.replace(config, tenancy="enforced", runner_cache_s=0.05)


@pytest.fixture
async def store_app(enforced: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), enforced) as app:
        yield app


@pytest.fixture
async def runners(store_app: RunningApp, client: ContinuityClient) -> dict[str, RunnerSessions]:
    ids = _ids()
    await client.runner_put(RunnerPutRequest(runner_id=ids["A"], tenants=["acme"], actor="ops"))
    await client.runner_put(RunnerPutRequest(runner_id=ids["B"], tenants=["acme", "initech"], actor="ops"))
    await client.runner_put(RunnerPutRequest(runner_id=ids["C"], tenants=["globex"], actor="ops"))
    return {name: RunnerSessions(client, rid) for name, rid in ids.items()}


def acme() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


async def _snapshot(redis_client: aioredis.Redis, s: SessionRef) -> dict[bytes, bytes]:
    return await redis_client.hgetall(keys.session(s.key))  # type: ignore[misc,no-any-return]


async def test_the_first_commit_binds_the_session_to_its_runner(
    runners: dict[str, RunnerSessions], client: ContinuityClient
) -> None:
    s = acme()
    await runners["B"].commit(commit_req(s))
    view = await runners["B"].get(GetRequest(session=s))
    assert view.owner == runners["B"].runner_id
    assert (await runners["B"].decide(decide_req(s))).resume_session_id == "ns-1"
    trail = (await client.ownership(SessionAuditRequest(session=s))).items
    assert [(e.kind, e.owner, e.previous_owner) for e in trail] == [("bound", runners["B"].runner_id, None)]


@pytest.mark.parametrize("attacker", ["A", "C", "D"])
async def test_another_runner_cannot_read_rewrite_or_reject_the_session(
    runners: dict[str, RunnerSessions], redis_client: aioredis.Redis, attacker: str
) -> None:
    s = acme()
    victim = runners["B"]
    await victim.commit(commit_req(s))
    before = await _snapshot(redis_client, s)
    before_decide = await victim.decide(decide_req(s))
    a = runners[attacker]

    # Reading: answered exactly as for a session that does not exist.
    with pytest.raises(RequestError) as missing:
        await a.get(GetRequest(session=s))
    with pytest.raises(RequestError) as nothing:
        await a.get(GetRequest(session=acme()))
    assert (missing.value.status, missing.value.code, missing.value.message) == (
        nothing.value.status,
        nothing.value.code,
        nothing.value.message,
    )
    assert await a.decide(decide_req(s)) == await a.decide(decide_req(acme()))
    assert (await a.decide(decide_req(s, cwd="/elsewhere"))).reason == "no_session"

    # Writing: a commit of the attacker's handle and a reject both change nothing.
    with pytest.raises(RequestError) as refused:
        await a.commit(commit_req(s, native_session_id="evil-handle"))
    expected = ("session_not_owned", 409) if attacker == "A" else ("not_found", 404)
    assert (refused.value.code, refused.value.status) == expected
    assert (
        await a.reject(RejectRequest(session=s, native_session_id="ns-1", code="resume_target_missing"))
    ).cleared is False

    assert await _snapshot(redis_client, s) == before
    assert await victim.decide(decide_req(s)) == before_decide


async def test_a_runner_outside_the_tenant_cannot_create_sessions_there(
    runners: dict[str, RunnerSessions], redis_client: aioredis.Redis
) -> None:
    s = acme()
    for name in ("C", "D"):
        with pytest.raises(RequestError) as refused:
            await runners[name].commit(commit_req(s))
        assert refused.value.code == "not_found"
    assert await _snapshot(redis_client, s) == {}


async def test_an_operator_transfer_fences_the_previous_owner(
    runners: dict[str, RunnerSessions], client: ContinuityClient
) -> None:
    s = acme()
    a, b = runners["A"], runners["B"]
    first = await b.commit(commit_req(s))
    moved = await client.transfer(TransferRequest(session=s, runner_id=a.runner_id, actor="alice"))
    assert (moved.owner, moved.previous_owner, moved.epoch) == (a.runner_id, b.runner_id, first.epoch + 1)

    # The previous owner is out: its commit, with or without the old epoch, is refused.
    for epoch in (None, first.epoch):
        with pytest.raises(RequestError) as refused:
            await b.commit(commit_req(s, native_session_id="ns-old", epoch=epoch))
        assert refused.value.code == "session_not_owned"
    assert (await b.decide(decide_req(s))).reason == "no_session"
    # The new owner resumes the same saved session and commits under the new epoch.
    assert (await a.decide(decide_req(s))).resume_session_id == "ns-1"
    assert (await a.commit(commit_req(s, native_session_id="ns-2", epoch=moved.epoch))).epoch == moved.epoch

    trail = (await client.ownership(SessionAuditRequest(session=s))).items
    assert [(e.kind, e.actor, e.previous_owner, e.owner) for e in trail] == [
        ("bound", b.runner_id, None, b.runner_id),
        ("transferred", "alice", b.runner_id, a.runner_id),
    ]
    assert trail[1].epoch == moved.epoch


async def test_a_transfer_goes_only_to_a_runner_issued_for_the_tenant(
    runners: dict[str, RunnerSessions], client: ContinuityClient
) -> None:
    s = acme()
    await runners["B"].commit(commit_req(s))
    for name in ("C", "D"):
        with pytest.raises(RequestError) as refused:
            await client.transfer(
                TransferRequest(session=s, runner_id=runners[name].runner_id, actor="alice")
            )
        assert refused.value.code == "runner_not_issued"
    assert (await runners["B"].get(GetRequest(session=s))).owner == runners["B"].runner_id


async def test_claims_are_refused_by_default(runners: dict[str, RunnerSessions]) -> None:
    s = acme()
    await runners["B"].commit(commit_req(s))
    with pytest.raises(RequestError) as refused:
        await runners["A"].claim(ClaimRequest(session=s))
    assert refused.value.code == "claim_refused"
    assert (await runners["B"].get(GetRequest(session=s))).owner == runners["B"].runner_id


async def test_a_claim_the_policy_allows_moves_the_session_but_not_a_held_one(
    enforced: Config, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    allowing = dataclasses.replace(enforced, session_claims="allow")
    async with running(registry.load("session-store"), allowing):
        ids = _ids()
        for rid in (ids["A"], ids["B"]):
            await client.runner_put(RunnerPutRequest(runner_id=rid, tenants=["acme"], actor="ops"))
        await client.runner_put(RunnerPutRequest(runner_id=ids["C"], tenants=["globex"], actor="ops"))
        a, b, c = (RunnerSessions(client, ids[n]) for n in "ABC")
        s = acme()
        first = await b.commit(commit_req(s))
        with pytest.raises(RequestError) as outside:
            await c.claim(ClaimRequest(session=s))
        assert outside.value.code == "not_found"
        claimed = await a.claim(ClaimRequest(session=s))
        assert (claimed.owner, claimed.previous_owner, claimed.epoch) == (
            a.runner_id,
            b.runner_id,
            first.epoch + 1,
        )
        with pytest.raises(RequestError) as fenced:
            await b.commit(commit_req(s, native_session_id="ns-b"))
        assert fenced.value.code == "session_not_owned"

        held = acme()
        await b.commit(commit_req(held))
        await redis_client.hset(keys.session(held.key), "state", "held")  # type: ignore[misc]
        with pytest.raises(RequestError) as refused:
            await a.claim(ClaimRequest(session=held))
        assert refused.value.code == "session_held"
        assert (await b.get(GetRequest(session=held))).owner == b.runner_id


async def test_a_revoked_runner_acts_on_nothing(
    runners: dict[str, RunnerSessions], client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    s = acme()
    b = runners["B"]
    await b.commit(commit_req(s))
    before = await _snapshot(redis_client, s)
    revoked = await client.runner_revoke(RunnerRevokeRequest(runner_id=b.runner_id, actor="ops"))
    assert revoked.status == "revoked" and revoked.revoked_at is not None

    async def refused() -> bool:
        try:
            await b.get(GetRequest(session=s))
        except RequestError as err:
            return err.code == "not_found"
        return False

    await wait_for(refused, what="the revocation to reach the session-store")  # within runner_cache_s
    with pytest.raises(RequestError):
        await b.commit(commit_req(s, native_session_id="ns-9"))
    assert await _snapshot(redis_client, s) == before
    listed = {r.runner_id: r.status for r in (await client.runners()).items}
    assert listed[b.runner_id] == "revoked"


async def test_without_enforcement_an_unknown_runner_still_cannot_touch_an_owned_session(
    config: Config, client: ContinuityClient, redis_client: aioredis.Redis, nc: Client
) -> None:
    open_config = dataclasses.replace(config, tenancy="open")
    async with running(registry.load("session-store"), open_config):
        owner, other = (
            RunnerSessions(client, f"dev-{uuid.uuid4().hex[:6]}"),
            RunnerSessions(client, "dev-other"),
        )
        s = acme()
        await owner.commit(commit_req(s))
        before = await _snapshot(redis_client, s)
        with pytest.raises(RequestError) as refused:
            await other.commit(commit_req(s, native_session_id="evil"))
        assert refused.value.code == "session_not_owned"
        assert (await other.decide(decide_req(s))).reason == "no_session"
        assert await _snapshot(redis_client, s) == before


async def test_a_runner_token_outside_the_runner_id_pattern_reaches_no_handler(
    runners: dict[str, RunnerSessions], client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    # Without authorization any client can name any token; the subject's runner_id is held to
    # the contract's pattern like a runner_id in a body.
    s = acme()
    for token in ("x" * 65, "r~1", "é"):
        with pytest.raises(RequestError) as refused:
            await RunnerSessions(client, token).commit(commit_req(s))
        assert (refused.value.status, refused.value.code) == (400, "invalid_field")
    assert await _snapshot(redis_client, s) == {}


async def test_another_runners_commit_learns_nothing_of_the_revision_or_epoch(
    runners: dict[str, RunnerSessions],
) -> None:
    # The owner check comes first: a stale revision or epoch would otherwise say they exist.
    s = acme()
    await runners["B"].commit(commit_req(s))
    for probe in ({"expected_revision": 999}, {"epoch": 0}, {"expected_revision": 1, "epoch": 5}):
        with pytest.raises(RequestError) as refused:
            await runners["A"].commit(commit_req(s, native_session_id="evil", **probe))
        assert refused.value.code == "session_not_owned", probe
