"""The Python runner SDK against the four services with tenancy enforced (contract section 10),
on real NATS and Redis: runners issued for their tenants by the operators' request
`continuity.runners.put`. An issued runner's session requests work; another runner's commit over
its session is `SessionNotOwned`, and a runner outside the tenant sees nothing; a claim (allowed
here) moves the session and fences its previous owner (`ClaimRefused` under the default policy
is in test_sdk_python.py); an event on another runner's session, or
outside the runner's tenants, comes back to its runner as a `Refusal`, acknowledged; and a
report over the runner's quota is sent again at `not_before` by `report_again`, then decided."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

import nats
import nats.js.errors
import pytest
from continuity_runner import (
    Decision,
    ErrorInfo,
    InvalidRequest,
    NotFound,
    Refusal,
    Runner,
    RunnerOptions,
    SessionNotOwned,
    SessionRef,
    connect,
)
from continuity_runner.types import CheckpointPolicy
from nats.aio.client import Client

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import subjects
from shared.contract.client import ContinuityClient
from shared.contract.tenancy import RunnerPutRequest
from tests.support import make_config, running, wait_for

pytestmark = pytest.mark.asyncio

KEY_ID, KEY = "sdk-k1", b"the runner key of the sdk tenancy tests"
MODEL, CWD = "gpt-5-codex", "/workspaces/acme/conv"
EVENT_RATE = 1.0
"""Each runner's events a second here, with a burst of 1: a second report at once is refused."""


@pytest.fixture(scope="module")
def tenancy_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own: its work-queue consumers cannot clash with other modules'."""
    server = NatsServer(tmp_path_factory.mktemp("sdk-tenancy-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def stack(tenancy_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(
        tenancy_nats.url,
        redis_server.url,
        runner_keys={KEY_ID: KEY},
        tenancy="enforced",
        runner_cache_s=0.05,
        session_claims="allow",
        runner_event_rate=EVENT_RATE,
        runner_event_burst=1,
    )
    apps = (
        registry.load("session-store"),
        registry.load("classifier"),
        registry.load("archiver"),
        registry.load("reconciliation", sweep_interval_s=0.2),
    )
    async with contextlib.AsyncExitStack() as services:
        for app in apps:
            await services.enter_async_context(running(app, config))
        yield tenancy_nats.url


@pytest.fixture
async def operator(stack: str) -> AsyncIterator[Client]:
    """A connection of the services' own account (no authorization here): the operators'."""
    nc = await nats.connect(stack)
    yield nc
    await nc.close()


class Fleet:
    """Runners of one test, issued (or not) by the operator, closed at its end."""

    def __init__(self, url: str, operator: Client) -> None:
        self.url = url
        self.client = ContinuityClient(operator)
        self.runners: list[Runner] = []

    async def runner(self, *tenants: str) -> Runner:
        """A connected runner issued for `tenants` (none: not in the directory at all)."""
        runner_id = f"sdk-t-{uuid.uuid4().hex[:10]}"
        if tenants:
            put = RunnerPutRequest(runner_id=runner_id, tenants=list(tenants), actor="sdk-tests")
            await self.client.runner_put(put)  # `continuity.runners.put`
        runner = await connect(
            RunnerOptions(runner_id=runner_id, servers=self.url, signing_keys={KEY_ID: KEY})
        )
        self.runners.append(runner)
        return runner

    async def close(self) -> None:
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await runner.close()


@pytest.fixture
async def fleet(stack: str, operator: Client) -> AsyncIterator[Fleet]:
    f = Fleet(stack, operator)
    yield f
    await f.close()


class Inbox:
    """What one runner's `handle_decisions` hands over: decisions, and refusals through
    `on_refusal` (or nothing, to see the default)."""

    def __init__(
        self,
        runner: Runner,
        with_refusals: bool = True,
        then: Callable[[Refusal], Awaitable[None]] | None = None,
    ) -> None:
        self.decisions: list[Decision] = []
        self.refusals: list[Refusal] = []
        self._then = then
        self.task = asyncio.create_task(
            runner.handle_decisions(self._decision, on_refusal=self._refusal if with_refusals else None)
        )

    async def _decision(self, decision: Decision) -> None:
        self.decisions.append(decision)

    async def _refusal(self, refusal: Refusal) -> None:
        self.refusals.append(refusal)
        if self._then is not None:
            await self._then(refusal)

    def decided(self, run_id: str) -> list[Decision]:
        return [d for d in self.decisions if d.run_id == run_id]


def acme() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


async def _commit(
    runner: Runner,
    session: SessionRef,
    handle: str = "ns-1",
    policy: CheckpointPolicy = "same_session_only",
    epoch: int | None = None,
) -> Any:
    return await runner.commit(session, handle, "codex", MODEL, CWD, policy, cursor="turn-1", epoch=epoch)


async def _settled(operator: Client, runner_id: str) -> bool:
    """Everything on the runner's decisions subject was delivered and acknowledged."""
    try:
        info = await operator.jetstream().consumer_info(subjects.DECISIONS_STREAM, runner_id)
    except nats.js.errors.NotFoundError:
        return False  # the runner has not made its consumer yet
    return bool(info.num_pending == 0 and info.num_ack_pending == 0 and info.delivered.stream_seq > 0)


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def test_an_issued_runners_session_is_its_own(fleet: Fleet) -> None:
    a, b = await fleet.runner("acme"), await fleet.runner("acme", "initech")
    c, d = await fleet.runner("globex"), await fleet.runner()
    s = acme()
    fresh = await a.decide(s, "codex", MODEL, CWD, "turn-1")
    assert (fresh.mode, fresh.reason) == ("fresh", "no_session")
    assert (fresh.rule, fresh.policy, fresh.generation) == ("3.3.1a", "shipped-1", "not_compared")
    saved = await _commit(a, s)
    ready = await a.decide(s, "codex", MODEL, CWD, "turn-1")
    assert (ready.mode, ready.resume_session_id, ready.revision) == ("resume", "ns-1", saved.revision)
    view = await a.get(s)
    assert (view.owner, view.native_session_id, view.state) == (a.runner_id, "ns-1", "active")

    # B, of the same tenant, meets an owner; C (another tenant) and D (not issued) see nothing.
    with pytest.raises(SessionNotOwned) as taken:
        await _commit(b, s, "ns-evil")
    assert (taken.value.status, taken.value.code) == (409, "session_not_owned")
    for other in (c, d):
        with pytest.raises(NotFound) as outside:
            await _commit(other, s, "ns-evil")
        assert (outside.value.status, outside.value.code) == (404, "not_found")
    for other in (b, c, d):
        with pytest.raises(NotFound):
            await other.get(s)
        seen = await other.decide(s, "codex", MODEL, CWD, "turn-1")
        assert (seen.mode, seen.reason, seen.resume_session_id) == ("fresh", "no_session", None)
        # Explained as a missing session is: nothing tells that a record exists.
        assert (seen.rule, seen.policy, seen.generation) == (fresh.rule, fresh.policy, fresh.generation)
        assert (await other.reject(s, "ns-1", "resume_target_missing")).cleared is False
    for other in (c, d):
        with pytest.raises(NotFound):
            await other.claim(s)

    assert await a.get(s) == view  # nothing of it changed
    assert (await a.reject(s, "ns-1", "resume_target_corrupt")).cleared is True


async def test_a_claim_moves_the_session_and_fences_its_previous_owner(fleet: Fleet) -> None:
    a, b, c = await fleet.runner("acme"), await fleet.runner("acme"), await fleet.runner("globex")
    s = acme()
    saved = await _commit(a, s)
    with pytest.raises(NotFound):
        await c.claim(s)  # outside its tenants: as if there were no session
    moved = await b.claim(s)
    assert (moved.owner, moved.previous_owner, moved.epoch) == (b.runner_id, a.runner_id, saved.epoch + 1)
    assert moved.revision == saved.revision + 1
    again = await b.claim(s)  # the owner's claim changes nothing
    assert (again.owner, again.epoch, again.revision) == (b.runner_id, moved.epoch, moved.revision)
    with pytest.raises(SessionNotOwned):
        await _commit(a, s, "ns-old", epoch=saved.epoch)
    assert (await _commit(b, s, "ns-2", epoch=moved.epoch)).epoch == moved.epoch
    assert (await b.get(s)).owner == b.runner_id


async def test_an_event_on_another_runners_session_comes_back_as_a_refusal(
    fleet: Fleet, operator: Client
) -> None:
    a, b = await fleet.runner("acme"), await fleet.runner("acme")
    s = acme()
    await _commit(a, s, policy="allow_replacement_after_resume_failure")
    before = await a.get(s)
    inbox = Inbox(b)
    run_id = f"run-{uuid.uuid4().hex}"
    transport = ErrorInfo(type="transport", code="stream_closed")
    event_id = await b.report_resume_failure(run_id, 1, s, "ns-1", error=transport)

    await wait_for(lambda: bool(inbox.refusals), timeout=20, what="the refusal of B's event")
    refusal = inbox.refusals[0]
    assert (refusal.type, refusal.runner_id, refusal.run_id, refusal.attempt, refusal.event_id) == (
        "refusal",
        b.runner_id,
        run_id,
        1,
        event_id,
    )
    assert (refusal.code, refusal.scope, refusal.quota, refusal.not_before) == (
        "session_not_owned",
        None,
        None,
        None,
    )
    await wait_for(lambda: _settled(operator, b.runner_id), what="the refusal acknowledged")
    assert inbox.decisions == [] and len(inbox.refusals) == 1
    assert await a.get(s) == before  # nothing archived, held or fenced
    with pytest.raises(InvalidRequest) as final:
        await b.report_again(refusal)
    assert final.value.field == "code"  # only a quota refusal is sent again


async def test_without_a_refusal_handler_a_refusal_is_logged_and_acknowledged(
    fleet: Fleet, operator: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="continuity_runner")
    a, c = await fleet.runner("acme"), await fleet.runner("globex")
    s = acme()
    await _commit(a, s)
    inbox = Inbox(c, with_refusals=False)
    run_id = f"run-{uuid.uuid4().hex}"
    event_id = await c.report_resume_failure(run_id, 1, s, "ns-1")
    await wait_for(lambda: _settled(operator, c.runner_id), timeout=20, what="the refusal acknowledged")
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event_refused ")]
    assert logged == [f"event_refused run_id={run_id} attempt=1 event_id={event_id} code=tenant_not_allowed"]
    assert inbox.decisions == []


async def test_a_report_over_the_quota_is_sent_again_at_not_before_and_decided(fleet: Fleet) -> None:
    a = await fleet.runner("acme")
    sent_again: list[tuple[Refusal, str, float]] = []

    async def again(refusal: Refusal) -> None:
        new_id = await a.report_again(refusal)
        sent_again.append((refusal, new_id, time.time()))

    inbox = Inbox(a, then=again)
    first, second = acme(), acme()
    await _commit(a, first)
    await _commit(a, second)
    runs = {f"run-{n}-{uuid.uuid4().hex}": s for n, s in enumerate((first, second))}
    reported = {await a.report_resume_failure(run_id, 1, s, "ns-1"): run_id for run_id, s in runs.items()}

    for run_id in runs:
        await wait_for(lambda r=run_id: bool(inbox.decided(r)), timeout=30, what=f"the decision of {run_id}")
    # One of the two arrived over the burst of 1: refused with when to send it, then sent again
    # (more than once if a resend came a hair early) and decided once, at or after not_before.
    assert sent_again
    assert all(
        (r.code, r.scope, r.quota) == ("quota_exceeded", "runner", "event_rate") for r, _, _ in sent_again
    )
    refused = sent_again[0][0]
    assert refused.event_id in reported and refused.not_before is not None
    assert all(at >= _time(r.not_before or "") for r, _, at in sent_again)
    resent_run = reported[refused.event_id]
    assert {d.run_id for d in inbox.decisions} == set(runs)
    assert len(inbox.decided(resent_run)) == 1
    assert _time(inbox.decided(resent_run)[0].decided_at) >= _time(refused.not_before)
    assert all(new_id not in reported for _, new_id, _ in sent_again)

    # A refusal of a report this runner does not hold cannot be sent again.
    unknown = Refusal(
        runner_id=a.runner_id,
        run_id="run-x",
        attempt=1,
        event_id="never-sent",
        code="quota_exceeded",
        scope="runner",
        not_before=refused.not_before,
        refused_at=refused.refused_at,
    )
    with pytest.raises(NotFound):
        await a.report_again(unknown)
