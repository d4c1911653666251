"""The harness classes (contract 4.3) and their rows (4.4.10 to 4.4.13) on real NATS and Redis:
a signed command result through the classifier, the saved session as the session-store then
answers for it, and each decision's explanation as the reconciliation service and `runs explain`
show it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis

from continuity.cli.runs import render_explanations
from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import ErrorInfo, GetRequest, ResumeFailed, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.records import keys
from tests.support import (
    KEYS,
    Bus,
    RunningApp,
    commit_req,
    decide_req,
    make_config,
    new_runner_id,
    new_session,
    resume_failed,
    running,
    tool_call,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.asyncio

BACKOFF_S = 5.0
HANDLE = "ns-saved-1"
"""The handle `resume_failed` reports as the one that failed to resume."""


@pytest.fixture(scope="module")
def own_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("harness-classes-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def services(own_nats: NatsServer, own_redis: RedisServer) -> AsyncIterator[list[RunningApp]]:
    config = make_config(
        own_nats.url,
        own_redis.url,
        runner_keys=KEYS,
        retry_backoff_s=BACKOFF_S,
        tenant_recovery_budget=1_000_000,
    )
    async with (
        running(registry.load("classifier"), config) as classifier,
        running(registry.load("session-store"), config) as sessions,
        running(registry.load("reconciliation"), config) as reconciliation,
    ):
        yield [classifier, sessions, reconciliation]


@pytest.fixture
async def c(services: list[RunningApp], own_nats: NatsServer) -> AsyncIterator[ContinuityClient]:
    nc = await nats.connect(own_nats.url)
    yield ContinuityClient(nc, timeout=30)
    await nc.close()


@pytest.fixture(scope="module")
async def bus(services: list[RunningApp], own_nats: NatsServer) -> AsyncIterator[Bus]:
    """One for the module: it keeps one work-queue consumer per subject."""
    nc = await nats.connect(own_nats.url)
    yield Bus(nc.jetstream())
    await nc.close()


@pytest.fixture
async def r(own_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(own_redis.url)
    yield client
    await client.aclose()


async def saved(c: ContinuityClient, policy: str = "allow_replacement_after_resume_failure") -> SessionRef:
    """A session the session-store saved (under a policy that would replace an unclassified
    failure, so that a row that does not replace shows it), which resumes before the failure."""
    session = new_session()
    await c.commit(commit_req(session, native_session_id=HANDLE, checkpoint_policy=policy))
    before = await c.decide(decide_req(session))
    assert (before.mode, before.resume_session_id) == ("resume", HANDLE)
    return session


async def record(r: aioredis.Redis, session: SessionRef) -> dict[bytes, bytes]:
    stored: dict[bytes, bytes] = await r.hgetall(keys.session(session.key))  # type: ignore[misc]
    return stored


async def decided(bus: Bus, event: ResumeFailed) -> dict[str, Any]:
    """The decision the runner receives for `event`, once the classifier has handled it."""
    await bus.settled(await bus.publish(event))
    found = [
        d
        for d in await bus.decisions(event.runner_id)
        if (d["run_id"], d["attempt"]) == (event.run_id, event.attempt)
    ]
    assert len(found) == 1, found
    return found[0]


async def explained(c: ContinuityClient, run_id: str, attempt: int) -> Any:
    audit = await c.audit(run_id)
    (entry,) = [e for e in audit.items if e.attempt == attempt and e.explanation is not None]
    return entry, render_explanations(audit)


def seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


# ---- native_session_missing: continue fresh, the saved handle rejected -------------------------


async def test_a_missing_session_continues_fresh_and_the_next_decide_is_fresh(
    c: ContinuityClient, bus: Bus, r: aioredis.Redis
) -> None:
    session, runner = await saved(c), new_runner_id()
    before = await record(r, session)
    event = resume_failed(runner, session=session, attempt=2, classification="native_session_missing")

    decision = await decided(bus, event)

    assert (decision["action"], decision["reason"], decision["failure_class"], decision["rule"]) == (
        "continue_fresh",
        "native_session_missing",
        "native_session_missing",
        "4.4.10",
    )
    assert decision["decision_id"] == f"{event.run_id}:2:continue_fresh"
    assert (decision["not_before"], decision["epoch"]) == (None, int(before.get(b"epoch", b"0")))
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    # Rejected as `continuity.sessions.reject` does: the state and the revision, nothing else.
    after = await record(r, session)
    revision = int(before[b"revision"]) + 1
    assert after == {**before, b"state": b"rejected", b"revision": str(revision).encode()}
    view = await c.get(GetRequest(session=session))
    assert (view.state, view.revision, view.generation_trusted) == ("rejected", revision, True)
    # The next decide: fresh, with the whole transcript, once.
    fresh = await c.decide(decide_req(session))
    assert (fresh.mode, fresh.reason, fresh.rule, fresh.transcript, fresh.resume_session_id) == (
        "fresh",
        "resume_target_rejected",
        "3.3.1d",
        "full",
        None,
    )
    assert fresh.revision == revision
    # The fresh session's commit makes the record active: its next turn resumes it.
    await c.commit(commit_req(session, native_session_id="ns-fresh-2", expected_revision=revision))
    again = await c.decide(decide_req(session))
    assert (again.mode, again.resume_session_id) == ("resume", "ns-fresh-2")
    # The run continued; its explanation names the row and the signed source.
    assert (await c.run(event.run_id)).status == "continued"
    entry, text = await explained(c, event.run_id, 2)
    why = entry.explanation
    assert (entry.action, entry.reason) == ("continue_fresh", "native_session_missing")
    assert (why.rule, why.failure_class, why.class_source) == (
        "4.4.10",
        "native_session_missing",
        "command_result",
    )
    assert "4.4.10 of policy shipped-1" in text
    assert "native_session_missing (from the signed command result)" in text


async def test_a_missing_session_leaves_a_newer_or_a_held_record_as_it_is(
    c: ContinuityClient, bus: Bus, r: aioredis.Redis
) -> None:
    # The runner committed a newer handle meanwhile: only the failed handle is ever rejected.
    newer = await saved(c)
    await c.commit(commit_req(newer, native_session_id="ns-newer"))
    before = await record(r, newer)
    runner = new_runner_id()
    decision = await decided(
        bus, resume_failed(runner, session=newer, classification="native_session_missing")
    )
    assert decision["action"] == "continue_fresh"
    assert await record(r, newer) == before
    # A record held for an operator stays held: it is evidence, never rejected.
    held = await saved(c)
    await r.hset(keys.session(held.key), "state", "held")  # type: ignore[misc]
    before = await record(r, held)
    decision = await decided(
        bus, resume_failed(runner, session=held, classification="native_session_missing")
    )
    assert decision["action"] == "continue_fresh"
    assert await record(r, held) == before


async def test_the_same_words_unsigned_or_in_a_message_stay_unclassified(
    c: ContinuityClient, bus: Bus, r: aioredis.Redis
) -> None:
    session, runner = await saved(c, "same_session_only"), new_runner_id()
    before = await record(r, session)
    error = ErrorInfo(type="native_session_missing", code="native_session_missing", message="session_busy")
    decision = await decided(bus, resume_failed(runner, session=session, error=error))
    assert (decision["action"], decision["reason"], decision["failure_class"], decision["rule"]) == (
        "retry_same_session",
        "native_session_interrupted",
        "unclassified",
        "4.4.9",
    )
    assert await record(r, session) == before
    # A command result signed with another key is never trusted: quarantined, no decision.
    forged = resume_failed(
        runner, session=session, attempt=2, classification="native_session_missing", key=b"k" * 32
    )
    await bus.settled(await bus.publish(forged))
    assert [d for d in await bus.decisions(runner) if d["attempt"] == 2] == []
    assert await bus.dead(subjects.DEAD_QUARANTINE, forged.event_id)
    assert await record(r, session) == before


# ---- session_busy: retried after the backoff, never a second writer -----------------------------


async def test_a_busy_session_is_retried_with_backoff_then_stops_at_the_third_attempt(
    c: ContinuityClient, bus: Bus, r: aioredis.Redis
) -> None:
    session, runner = await saved(c), new_runner_id()
    before = await record(r, session)
    run_id = f"run-busy-{session.conversation_id}"
    for attempt in (1, 2):
        event = resume_failed(
            runner, session=session, run_id=run_id, attempt=attempt, classification="session_busy"
        )
        decision = await decided(bus, event)
        assert (decision["action"], decision["reason"], decision["failure_class"], decision["rule"]) == (
            "retry_same_session",
            "native_session_busy",
            "session_busy",
            "4.4.13",
        )
        wait = seconds(decision["not_before"]) - seconds(decision["decided_at"])
        assert wait == pytest.approx(BACKOFF_S * 2 ** (attempt - 1), abs=0.01)
        assert await record(r, session) == before  # neither held nor rejected
    assert await bus.work(subjects.WORK_ARCHIVE, run_id) == []

    last = await decided(
        bus, resume_failed(runner, session=session, run_id=run_id, attempt=3, classification="session_busy")
    )
    assert (last["action"], last["reason"], last["failure_class"], last["rule"]) == (
        "operator",
        "native_session_retry_exhausted",
        "session_busy",
        "4.4.6",
    )
    assert last["not_before"] is None
    assert await record(r, session) == {**before, b"state": b"held"}
    assert (await c.run(run_id)).status == "operator"
    entry, text = await explained(c, run_id, 3)
    assert (entry.explanation.rule, entry.explanation.attempt) == ("4.4.6", 3)
    assert "session_busy (from the signed command result)" in text


# ---- context_overflow, transcript_corrupt: an operator, the session held ------------------------


@pytest.mark.parametrize(
    ("failure_class", "reason", "rule"),
    [
        ("context_overflow", "native_context_overflow", "4.4.11"),
        ("transcript_corrupt", "native_transcript_corrupt", "4.4.12"),
    ],
)
async def test_an_overflow_or_a_corrupt_transcript_stops_for_an_operator_with_the_session_held(
    c: ContinuityClient, bus: Bus, r: aioredis.Redis, failure_class: str, reason: str, rule: str
) -> None:
    session, runner = await saved(c), new_runner_id()
    before = await record(r, session)
    event = resume_failed(runner, session=session, classification=failure_class)

    decision = await decided(bus, event)

    assert (decision["action"], decision["reason"], decision["failure_class"], decision["rule"]) == (
        "operator",
        reason,
        failure_class,
        rule,
    )
    assert decision["not_before"] is None
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    assert await record(r, session) == {**before, b"state": b"held"}
    held = await c.decide(decide_req(session))
    assert (held.mode, held.reason) == ("fresh", "session_held")
    assert (await c.run(event.run_id)).status == "operator"
    entry, text = await explained(c, event.run_id, 1)
    assert (entry.explanation.rule, entry.explanation.class_source) == (rule, "command_result")
    assert f"{rule} of policy shipped-1" in text


async def test_a_corrupt_transcript_with_a_pending_tool_call_reconciles(
    c: ContinuityClient, bus: Bus, r: aioredis.Redis
) -> None:
    session, runner = await saved(c), new_runner_id()
    before = await record(r, session)
    call = tool_call()
    event = resume_failed(runner, session=session, classification="transcript_corrupt", pending=call)

    decision = await decided(bus, event)

    assert (decision["action"], decision["reason"], decision["failure_class"], decision["rule"]) == (
        "reconcile",
        "native_provider_side_effect_pending",
        "transcript_corrupt",
        "4.4.1",
    )
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    assert await record(r, session) == {**before, b"state": b"held"}

    async def opened() -> bool:
        try:
            return (await c.reconciliation(event.run_id)).status == "open"
        except RequestError as error:  # until the reconciliation service read its work item
            assert error.code == "not_found"
            return False

    await wait_for(opened, timeout=30, what="the reconciliation record opened")
    opened_record = await c.reconciliation(event.run_id)
    assert opened_record.tool_call is not None
    assert opened_record.tool_call.tool_call_id == call.tool_call_id
    assert (await c.run(event.run_id)).status == "reconciling"
    entry, _ = await explained(c, event.run_id, 1)
    assert (entry.explanation.rule, entry.explanation.failure_class, entry.explanation.pending_tool_call) == (
        "4.4.1",
        "transcript_corrupt",
        True,
    )
