"""Run steps and the outbox against real Redis and JetStream."""

from __future__ import annotations

import time
import uuid

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from shared.contract import Decision, SessionRef, subjects
from shared.contract.times import now_rfc3339
from shared.platform.bus.streams import ensure_streams
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.decisions import decision_audit
from shared.records.outbox import Outbox, OutboxEntry
from shared.records.steps import RunStep, run_fields
from shared.records.store import RunStore

pytestmark = pytest.mark.asyncio


def _decision(run_id: str, session: SessionRef, runner: str) -> Decision:
    return Decision(
        decision_id=f"{run_id}:1:operator",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=session,
        action="operator",
        reason="native_provider_state_incompatible",
        failure_class="provider_attach_refused",
        decided_at=now_rfc3339(),
    )


def _step(decision: Decision, recorded_at: float | None = None) -> RunStep:
    payload = Decision.__struct_config__ and __import__("msgspec").json.encode(decision)
    entry = OutboxEntry(
        subject=subjects.decisions(decision.runner_id), msg_id=decision.decision_id, payload=payload
    )
    if recorded_at is not None:
        entry.recorded_at = recorded_at
    return RunStep(
        slot="1",
        slot_value=payload,
        run_fields=run_fields(decision.run_id, decision.runner_id, decision.session, 1, "operator", decision),
        outbox=[entry],
        audit=decision_audit(decision, "classifier"),
        hold="ns",
    )


async def test_a_slot_is_recorded_once_and_holds_the_session(
    redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    await redis_client.hset(keys.session(session.key), mapping={"native_session_id": "ns", "state": "active"})  # type: ignore[misc]
    run_id = f"run-{uuid.uuid4().hex}"
    decision = _decision(run_id, session, "r1")
    await RunStore(records_redis).index_run(run_id, session.key)
    assert await RunStore(records_redis).record_step(session.key, run_id, _step(decision)) is None
    again = await RunStore(records_redis).record_step(session.key, run_id, _step(decision))
    assert again is not None and b"native_provider_state_incompatible" in again
    assert await redis_client.hget(keys.session(session.key), "state") == b"held"  # type: ignore[misc]
    assert await redis_client.llen(keys.run_audit(session.key, run_id)) == 1  # type: ignore[misc]
    assert await redis_client.hlen(keys.outbox(session.key)) == 1  # type: ignore[misc]
    assert await RunStore(records_redis).session_of_run(run_id) == session.key


async def test_sweeper_publishes_what_a_crash_left_once(
    redis_client: aioredis.Redis, records_redis: Redis, nc: Client
) -> None:
    js = nc.jetstream()
    await ensure_streams(js)
    runner = f"r{uuid.uuid4().hex[:8]}"
    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    run_id = f"run-{uuid.uuid4().hex}"
    decision = _decision(run_id, session, runner)
    # Recorded, then the process died before publishing: the entry is old enough to sweep.
    await RunStore(records_redis).record_step(
        session.key, run_id, _step(decision, recorded_at=time.time() - 60)
    )
    outbox = Outbox(records_redis, js, grace_s=5)
    assert await outbox.sweep() >= 1
    assert await redis_client.hlen(keys.outbox(session.key)) == 0  # type: ignore[misc]
    # A second publication of the same id (another replica's sweep) is dropped by JetStream.
    await outbox.flush(session.key, _step(decision).outbox)
    sub = await js.pull_subscribe(subjects.decisions(runner), stream=subjects.DECISIONS_STREAM)
    msgs = await sub.fetch(10, timeout=2)
    assert [m.headers.get("Nats-Msg-Id") for m in msgs if m.headers] == [decision.decision_id]
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.5)


async def test_a_newer_session_is_not_held_for_an_older_failure(
    redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    """The runner committed a new session before the old one's failure was decided: the
    decision is recorded, the newer session stays active."""
    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    await redis_client.hset(keys.session(session.key), mapping={"native_session_id": "ns-new"})  # type: ignore[misc]
    run_id = f"run-{uuid.uuid4().hex}"
    step = _step(_decision(run_id, session, "r1"))  # holds "ns", the session that failed
    assert await RunStore(records_redis).record_step(session.key, run_id, step) is None
    assert await redis_client.hget(keys.session(session.key), "state") is None  # type: ignore[misc]
    assert await redis_client.hlen(keys.run_decisions(session.key, run_id)) == 1  # type: ignore[misc]


async def test_a_step_decided_on_a_stale_read_writes_nothing(
    redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    """A commit changed the policy between the classifier's read and its recording."""
    from shared.records.steps import SessionChanged

    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    await redis_client.hset(  # type: ignore[misc]
        keys.session(session.key),
        mapping={"native_session_id": "ns", "checkpoint_policy": "allow_replacement_after_resume_failure"},
    )
    run_id = f"run-{uuid.uuid4().hex}"
    step = _step(_decision(run_id, session, "r1"))
    step.read = ("same_session_only", 0)
    with pytest.raises(SessionChanged):
        await RunStore(records_redis).record_step(session.key, run_id, step)
    assert await redis_client.exists(keys.run_decisions(session.key, run_id), keys.outbox(session.key)) == 0
    step.read = ("allow_replacement_after_resume_failure", 0)
    assert await RunStore(records_redis).record_step(session.key, run_id, step) is None


def _rejecting_step(run_id: str, session: SessionRef) -> RunStep:
    """A table's `continue_fresh` for the failed handle "ns", which rejects it (contract 4.4)."""
    from shared.records.decisions import decision, decision_step

    run = _decision(run_id, session, "r1")
    fresh = decision(run, "continue_fresh", "native_session_missing", time.time())
    return decision_step(fresh, "1", "classifier", native_session_id="ns", rejects_session=True)


@pytest.mark.parametrize(
    ("stored", "after"),
    [
        ({"native_session_id": "ns", "revision": "4"}, {"state": b"rejected", "revision": b"5"}),
        ({"native_session_id": "ns", "state": "active"}, {"state": b"rejected", "revision": b"1"}),
        ({"native_session_id": "ns", "state": "held", "revision": "4"}, None),
        ({"native_session_id": "ns", "state": "archived", "revision": "4"}, None),
        ({"native_session_id": "ns", "state": "rejected", "revision": "4"}, None),
        ({"native_session_id": "ns-newer", "revision": "4"}, None),
    ],
    ids=["active", "active-no-revision", "held", "archived", "already-rejected", "newer-handle"],
)
async def test_a_rejecting_step_rejects_only_the_failed_handle_of_a_resumable_record(
    redis_client: aioredis.Redis, records_redis: Redis, stored: dict[str, str], after: dict[str, bytes] | None
) -> None:
    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    key = keys.session(session.key)
    await redis_client.hset(key, mapping=stored)  # type: ignore[misc]
    before: dict[bytes, bytes] = await redis_client.hgetall(key)  # type: ignore[misc]
    run_id = f"run-{uuid.uuid4().hex}"
    step = _rejecting_step(run_id, session)
    assert step.hold is None and step.reject == "ns"
    assert await RunStore(records_redis).record_step(session.key, run_id, step) is None
    expected = {**before, **{k.encode(): v for k, v in (after or {}).items()}}
    assert await redis_client.hgetall(key) == expected  # type: ignore[misc]
    # The same step again finds its slot taken: nothing is rejected twice.
    assert await RunStore(records_redis).record_step(session.key, run_id, step) is not None
    assert await redis_client.hgetall(key) == expected  # type: ignore[misc]


async def test_a_rejecting_step_decided_on_a_stale_read_rejects_nothing(
    redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    from shared.records.steps import SessionChanged

    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    key = keys.session(session.key)
    await redis_client.hset(key, mapping={"native_session_id": "ns", "epoch": "3"})  # type: ignore[misc]
    run_id = f"run-{uuid.uuid4().hex}"
    step = _rejecting_step(run_id, session)
    step.read = ("", 2)  # decided before a replacement raised the epoch
    with pytest.raises(SessionChanged):
        await RunStore(records_redis).record_step(session.key, run_id, step)
    assert await redis_client.hgetall(key) == {b"native_session_id": b"ns", b"epoch": b"3"}  # type: ignore[misc]
