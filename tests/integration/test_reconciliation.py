"""reconciliation against real NATS and Redis: contract section 6.

Runs are seeded the way the classifier records them (`shared.records`: the run index, one run
step with the decision, its outbox entry and audit entry, the session held), and reconcile work
items are published on `continuity.work.reconcile`, so these tests do not need the classifier.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
import nats.errors
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.js import JetStreamContext
from prometheus_client import REGISTRY

from services import registry
from services.reconciliation import wire
from services.reconciliation.step import member
from shared.contract import (
    ListRequest,
    ResolveRequest,
    RetryRequest,
    RunRequest,
    subjects,
)
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.times import epoch_of, rfc3339_from_epoch
from shared.contract.types import ActionOutcome
from shared.records import keys
from tests.support import Decisions, make_config, running, wait_for
from tests.support.reconciliation import (
    Run,
    classify,
    new_run,
    publish_work,
    reconcile_work,
    seed_reconcile,
    wait_until_opened,
)
from tests.support.sessions import commit_req, decide_req

pytestmark = pytest.mark.asyncio


async def expect_error(call: object, status: int, code: str) -> None:
    with pytest.raises(RequestError) as info:
        await call  # type: ignore[misc]
    assert (info.value.status, info.value.code) == (status, code), info.value


def gauge(name: str) -> float:
    value = REGISTRY.get_sample_value(name)
    assert value is not None
    return value


# Fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def services(nats_server: object, redis_server: object) -> AsyncIterator[None]:
    config = make_config(nats_server.url, redis_server.url)  # type: ignore[attr-defined]
    app = registry.load("reconciliation", gauge_interval_s=0.2, outbox_grace_s=1.0, sweep_interval_s=0.2)
    async with running(registry.load("session-store"), config), running(app, config):
        yield


@pytest.fixture
def js(nc: Client) -> JetStreamContext:
    return nc.jetstream()


# Opening -----------------------------------------------------------------------------------


async def test_a_work_item_opens_one_record_with_the_pending_call(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = await seed_reconcile(redis_client, js, client, recorded="completed")
    record = await client.reconciliation(run.run_id)
    assert (record.run_id, record.runner_id, record.session, record.attempt) == (
        run.run_id,
        run.runner_id,
        run.session,
        1,
    )
    assert record.status == "open" and record.resolution is None
    assert record.tool_call is not None and record.tool_call.tool_name == "paperclip_call_assigned_tool"
    assert record.recorded_outcome == "completed"
    assert (await client.run(run.run_id)).status == "reconciling"

    # The same work item again (a redelivery after a lost ack): no second record or audit line.
    await publish_work(js, reconcile_work(run, recorded="completed"), msg_id=f"again-{run.run_id}")

    async def consumed() -> bool:
        info = await js.consumer_info(subjects.WORK_STREAM, subjects.RECONCILIATION_CONSUMER)
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    await wait_for(consumed, what="work consumed")
    trail = (await client.call(wire.RUNS_AUDIT, RunRequest(run_id=run.run_id), wire.AuditReply)).items
    assert [(e.kind, e.actor) for e in trail] == [
        ("decision", "classifier"),
        ("reconciliation_opened", "reconciliation"),
    ]
    listed = (await client.reconciliations(ListRequest(status="open", limit=1000))).items
    assert [r.run_id for r in listed].count(run.run_id) == 1


async def test_list_is_oldest_first_and_filters_by_status(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    # Opened "in the past", so these two are older than anything else open in this Redis.
    older = await seed_reconcile(redis_client, js, client, opened_at=rfc3339_from_epoch(1_000_000))
    newer = await seed_reconcile(redis_client, js, client, opened_at=rfc3339_from_epoch(1_000_060))
    first_two = (await client.reconciliations(ListRequest(status="open", limit=2))).items
    assert [r.run_id for r in first_two] == [older.run_id, newer.run_id]
    await client.resolve(
        ResolveRequest(run_id=older.run_id, action_outcome="not_performed", evidence="e", actor="ops")
    )
    opened = [r.run_id for r in (await client.reconciliations(ListRequest(status="open", limit=1000))).items]
    delivered = (await client.reconciliations(ListRequest(status="delivered", limit=1000))).items
    assert older.run_id not in opened and newer.run_id in opened
    assert older.run_id in [r.run_id for r in delivered]
    assert all(r.status == "delivered" for r in delivered)
    everything = (await client.reconciliations(ListRequest(limit=1000))).items
    openings = [epoch_of(r.opened_at) for r in everything]
    assert openings == sorted(openings)


async def test_an_invalid_work_item_is_dead_lettered(
    services: None, js: JetStreamContext, nc: Client
) -> None:
    marker = uuid.uuid4().hex
    sub = await js.pull_subscribe(subjects.DEAD_INVALID, stream=subjects.DEAD_STREAM)
    await js.publish(subjects.WORK_RECONCILE, f'{{"type": "reconcile", "run_id": "{marker}"}}'.encode())

    found: list[str] = []

    async def dead_lettered() -> bool:
        try:
            msgs = await sub.fetch(100, timeout=0.2)
        except (nats.errors.TimeoutError, TimeoutError):
            return False
        for m in msgs:
            if marker.encode() in m.data and m.headers:
                found.append(m.headers.get("Continuity-Dead-Reason", ""))
        return bool(found)

    await wait_for(dead_lettered, what="invalid work item dead-lettered")
    assert found == ["missing_field"]
    await sub.unsubscribe()


# Resolving ---------------------------------------------------------------------------------


async def test_resolve_continues_fresh_and_leaves_the_saved_session_held_and_unchanged(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = await seed_reconcile(redis_client, js, client)
    session_key = keys.session(run.session.key)
    before = await redis_client.hgetall(session_key)  # type: ignore[misc]
    assert before[b"state"] == b"held"

    reply = await client.resolve(
        ResolveRequest(
            run_id=run.run_id, action_outcome="completed", evidence="ticket PC-42 exists", actor="alice"
        )
    )
    assert (reply.status, reply.decision_id) == ("delivered", f"{run.run_id}:1:continue_fresh")

    tap = Decisions(js, run.runner_id)
    await wait_for(lambda: _has_continue(tap), what="continue_fresh published")
    continued = await tap.continued()
    assert len(continued) == 1
    d = continued[0]
    assert (d.action, d.reason, d.reconciled_outcome, d.attempt, d.session) == (
        "continue_fresh",
        "execution_reconciled",
        "completed",
        1,
        run.session,
    )

    record = await client.reconciliation(run.run_id)
    assert record.status == "delivered" and record.resolution is not None
    assert (record.resolution.action_outcome, record.resolution.actor, record.resolution.evidence) == (
        "completed",
        "alice",
        "ticket PC-42 exists",
    )
    view = await client.run(run.run_id)
    assert view.status == "continued"
    assert view.last_decision is not None and view.last_decision.decision_id == reply.decision_id

    # The saved session: byte for byte what it was, still held, so it is never resumed.
    assert await redis_client.hgetall(session_key) == before  # type: ignore[misc]
    decided = await client.decide(decide_req(run.session))
    assert (decided.mode, decided.reason) == ("fresh", "session_held")

    trail = (await client.call(wire.RUNS_AUDIT, RunRequest(run_id=run.run_id), wire.AuditReply)).items
    assert [(e.kind, e.actor, e.action) for e in trail] == [
        ("decision", "classifier", "reconcile"),
        ("reconciliation_opened", "reconciliation", "reconcile"),
        ("operator_resolve", "alice", "continue_fresh"),
    ]
    assert trail[-1].outcome == "completed" and trail[-1].decision_id == reply.decision_id
    assert trail[-1].at == record.resolution.resolved_at


async def _has_continue(tap: Decisions) -> bool:
    return bool(await tap.continued(quiet_s=0.05))


async def test_resolve_again_is_already_delivered_or_a_conflict(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = await seed_reconcile(redis_client, js, client)
    req = ResolveRequest(run_id=run.run_id, action_outcome="not_performed", evidence="no row", actor="bob")
    await client.resolve(req)
    await expect_error(client.resolve(req), 409, "execution_reconciliation_already_delivered")
    other = ResolveRequest(run_id=run.run_id, action_outcome="mixed", evidence="half", actor="carol")
    await expect_error(client.resolve(other), 409, "execution_reconciliation_conflict")
    record = await client.reconciliation(run.run_id)
    assert record.resolution is not None and record.resolution.actor == "bob"
    tap = Decisions(js, run.runner_id)
    assert len(await tap.continued(quiet_s=0.5)) == 1


async def test_unknown_runs_are_not_found_on_every_endpoint(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    unknown = f"run-{uuid.uuid4().hex}"
    await expect_error(client.reconciliation(unknown), 404, "not_found")
    await expect_error(client.run(unknown), 404, "not_found")
    await expect_error(
        client.call(wire.RUNS_AUDIT, RunRequest(run_id=unknown), wire.AuditReply), 404, "not_found"
    )
    await expect_error(
        client.resolve(ResolveRequest(run_id=unknown, action_outcome="completed", evidence="", actor="a")),
        404,
        "not_found",
    )
    await expect_error(client.retry(RetryRequest(run_id=unknown, actor="a")), 404, "not_found")

    # A known run that has no reconciliation (stopped for an operator) has nothing to resolve.
    run = new_run()
    await classify(redis_client, js, run, "operator")
    await expect_error(client.reconciliation(run.run_id), 404, "not_found")
    await expect_error(
        client.resolve(ResolveRequest(run_id=run.run_id, action_outcome="completed", evidence="", actor="a")),
        404,
        "not_found",
    )


async def test_bad_requests_are_rejected(services: None, nc: Client) -> None:
    cases = [
        (
            subjects.RECONCILIATIONS_RESOLVE,
            {"run_id": "r", "action_outcome": "done", "evidence": "", "actor": "a"},
        ),
        (
            subjects.RECONCILIATIONS_RESOLVE,
            {"run_id": "r", "action_outcome": "completed", "evidence": "x" * 2001, "actor": "a"},
        ),
        (subjects.RECONCILIATIONS_RESOLVE, {"run_id": "r", "action_outcome": "completed", "evidence": ""}),
        (subjects.OPERATOR_RETRY, {"run_id": "r", "actor": "not a token"}),
        (subjects.RECONCILIATIONS_LIST, {"limit": 0}),
    ]
    client = ContinuityClient(nc)
    for subject, body in cases:
        with pytest.raises(RequestError) as info:
            await client.call(subject, msgspec.json.encode(body), wire.AuditReply)
        assert info.value.status == 400 and info.value.code in ("invalid_field", "missing_field"), body


async def test_twenty_concurrent_resolves_have_exactly_one_winner(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = await seed_reconcile(redis_client, js, client)
    outcomes: list[ActionOutcome] = ["completed", "not_performed", "mixed"]
    requests = [
        ResolveRequest(
            run_id=run.run_id,
            action_outcome=outcomes[i % 3],
            evidence=f"check {i}",
            actor=f"op{i}",
        )
        for i in range(20)
    ]
    results = await asyncio.gather(*(client.resolve(req) for req in requests), return_exceptions=True)
    winners = [i for i, res in enumerate(results) if not isinstance(res, BaseException)]
    assert len(winners) == 1
    winner = requests[winners[0]]
    for i, res in enumerate(results):
        if i in winners:
            continue
        assert isinstance(res, RequestError) and res.status == 409
        expected = (
            "execution_reconciliation_already_delivered"
            if requests[i].action_outcome == winner.action_outcome
            else "execution_reconciliation_conflict"
        )
        assert res.code == expected
    record = await client.reconciliation(run.run_id)
    assert record.resolution is not None and record.resolution.actor == winner.actor
    tap = Decisions(js, run.runner_id)
    await wait_for(lambda: _has_continue(tap), what="continue_fresh published")
    continued = await tap.continued(quiet_s=0.5)
    assert len(continued) == 1 and continued[0].reconciled_outcome == winner.action_outcome
    trail = (await client.call(wire.RUNS_AUDIT, RunRequest(run_id=run.run_id), wire.AuditReply)).items
    assert [e.kind for e in trail].count("operator_resolve") == 1


async def test_a_later_attempt_reopens_and_keeps_the_earlier_record(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = await seed_reconcile(redis_client, js, client)
    await client.resolve(
        ResolveRequest(run_id=run.run_id, action_outcome="completed", evidence="first", actor="ops")
    )
    # The fresh session fails again on a pending call: attempt 2 of the same run.
    second = Run(run.run_id, run.runner_id, run.session, 2)
    await classify(redis_client, js, second, "reconcile")
    await publish_work(js, reconcile_work(second))

    async def reopened() -> bool:
        return (await client.reconciliation(run.run_id)).attempt == 2

    await wait_for(reopened, what="reconciliation reopened for attempt 2")
    record = await client.reconciliation(run.run_id)
    assert record.status == "open" and record.resolution is None
    history = await redis_client.lrange(keys.reconciliation(run.session.key, run.run_id) + ":history", 0, -1)  # type: ignore[misc]
    assert (
        len(history) == 1 and b'"evidence":"first"' in msgspec.json.decode(history[0])["resolution"].encode()
    )
    assert (
        await redis_client.zscore(
            keys.reconciliations_open(keys.reconciliation_bucket(run.run_id)),
            member(run.session.key, run.run_id),
        )
        is not None
    )
    reply = await client.resolve(
        ResolveRequest(run_id=run.run_id, action_outcome="not_performed", evidence="second", actor="ops")
    )
    assert reply.decision_id == f"{run.run_id}:2:continue_fresh"


# Operator retry ----------------------------------------------------------------------------


async def test_operator_retry_continues_fresh_once(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = new_run(attempt=2)
    await client.commit(commit_req(run.session))
    await classify(redis_client, js, run, "operator")
    before = await redis_client.hgetall(keys.session(run.session.key))  # type: ignore[misc]
    assert before[b"state"] == b"held"

    reply = await client.retry(RetryRequest(run_id=run.run_id, actor="dana"))
    assert (reply.status, reply.decision_id) == ("delivered", f"{run.run_id}:2:continue_fresh")
    await expect_error(
        client.retry(RetryRequest(run_id=run.run_id, actor="erin")), 409, "operator_retry_already_delivered"
    )

    tap = Decisions(js, run.runner_id)
    await wait_for(lambda: _has_continue(tap), what="continue_fresh published")
    continued = await tap.continued(quiet_s=0.5)
    assert len(continued) == 1
    assert (continued[0].reason, continued[0].reconciled_outcome) == ("operator_retry", None)
    assert (await client.run(run.run_id)).status == "continued"
    assert await redis_client.hgetall(keys.session(run.session.key)) == before  # type: ignore[misc]
    assert (await client.decide(decide_req(run.session))).reason == "session_held"
    trail = (await client.call(wire.RUNS_AUDIT, RunRequest(run_id=run.run_id), wire.AuditReply)).items
    assert [(e.kind, e.actor) for e in trail] == [("decision", "classifier"), ("operator_retry", "dana")]


async def test_retry_is_refused_while_a_reconciliation_is_pending(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    # Decided, but the work item not yet consumed: the run's status alone refuses the retry.
    run = new_run()
    await classify(redis_client, js, run, "reconcile")
    await expect_error(
        client.retry(RetryRequest(run_id=run.run_id, actor="a")), 409, "reconciliation_required"
    )
    # Opened: still refused.
    await publish_work(js, reconcile_work(run))
    await wait_until_opened(client, run.run_id)
    await expect_error(
        client.retry(RetryRequest(run_id=run.run_id, actor="a")), 409, "reconciliation_required"
    )
    # Resolved: the continuation went out, a retry has nothing left to do.
    await client.resolve(
        ResolveRequest(run_id=run.run_id, action_outcome="completed", evidence="", actor="a")
    )
    await expect_error(
        client.retry(RetryRequest(run_id=run.run_id, actor="a")), 409, "operator_retry_already_delivered"
    )
    tap = Decisions(js, run.runner_id)
    assert [d.reason for d in await tap.continued(quiet_s=0.5)] == ["execution_reconciled"]


async def test_retry_of_a_run_not_stopped_for_an_operator_is_refused(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    run = new_run()
    await classify(redis_client, js, run, "retry_same_session")
    await expect_error(client.retry(RetryRequest(run_id=run.run_id, actor="a")), 409, "run_not_stopped")
    assert (await client.run(run.run_id)).status == "retrying"


# Gauges ------------------------------------------------------------------------------------


async def test_gauges_follow_the_open_records(
    services: None, redis_client: aioredis.Redis, js: JetStreamContext, client: ContinuityClient
) -> None:
    async def open_now() -> int:
        return len((await client.reconciliations(ListRequest(status="open", limit=1000))).items)

    # An hour old: the oldest open record is at least that old.
    run = await seed_reconcile(redis_client, js, client, opened_at=rfc3339_from_epoch(time.time() - 3600))
    expected = await open_now()

    async def counted(n: int) -> bool:
        return gauge("continuity_reconciliations_open") == n

    await wait_for(lambda: counted(expected), what="open gauge")
    assert gauge("continuity_reconciliation_oldest_open_seconds") >= 3600
    await client.resolve(
        ResolveRequest(run_id=run.run_id, action_outcome="completed", evidence="", actor="a")
    )
    await wait_for(lambda: counted(expected - 1), what="open gauge after resolve")
