"""The classifier against real NATS and Redis: contract sections 4 and 7, end to end."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import Decision, ErrorInfo, SessionRef, subjects
from shared.contract.times import now_rfc3339
from shared.platform.bus.publish import DEAD_REASON_HEADER, DEAD_SUBJECT_HEADER
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.decisions import decision_audit
from shared.records.outbox import OutboxEntry
from shared.records.steps import RunStep, run_fields
from shared.records.store import RunStore
from tests.support import (
    KEYS,
    Bus,
    RunningApp,
    header,
    make_config,
    new_runner_id,
    new_session,
    resume_failed,
    running,
    seed_session,
    tool_call,
)

pytestmark = pytest.mark.asyncio

BACKOFF_S = 5.0


@pytest.fixture(scope="module")
def classifier_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A NATS server of this module's own: its work-queue consumers cannot clash with others'."""
    server = NatsServer(tmp_path_factory.mktemp("classifier-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def classifier(classifier_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[RunningApp]:
    config = make_config(classifier_nats.url, redis_server.url, runner_keys=KEYS, retry_backoff_s=BACKOFF_S)
    async with running(registry.load("classifier"), config) as app:
        yield app


@pytest.fixture(scope="module")
async def bus(classifier: RunningApp, classifier_nats: NatsServer) -> AsyncIterator[Bus]:
    nc = await nats.connect(classifier_nats.url)
    yield Bus(nc.jetstream())
    await nc.close()


@pytest.fixture
async def r(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def run_hash(r: aioredis.Redis, session: SessionRef, run_id: str) -> dict[str, str]:
    raw: dict[bytes, bytes] = await r.hgetall(keys.run(session.key, run_id))  # type: ignore[assignment,misc]
    return {k.decode(): v.decode() for k, v in raw.items()}


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


# ---- deterministic refusals: never a replacement ----------------------------------------------


async def test_attach_refusal_stops_for_an_operator_and_leaves_the_session_as_it_was(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner, session = new_runner_id(), new_session()
    before = await seed_session(r, session, "allow_replacement_after_resume_failure", epoch=4)
    event = resume_failed(runner, session=session, classification="provider_attach_refused")
    decided = counter(
        "continuity_decisions_total", action="operator", reason="native_provider_state_incompatible"
    )

    await bus.settled(await bus.publish(event, msg_id=event.event_id))

    [decision] = await bus.decisions(runner)
    assert decision["decision_id"] == f"{event.run_id}:1:operator"
    assert (decision["action"], decision["reason"], decision["failure_class"]) == (
        "operator",
        "native_provider_state_incompatible",
        "provider_attach_refused",
    )
    assert (decision["epoch"], decision["not_before"], decision["runner_id"]) == (4, None, runner)
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    after = await r.hgetall(keys.session(session.key))  # type: ignore[misc]
    assert after == {**before, b"state": b"held"}
    run = await run_hash(r, session, event.run_id)
    assert run["status"] == "operator"
    assert msgspec.json.decode(run["last_decision"]) == decision
    [audit] = await RunStore(records_redis).audit_trail(session.key, event.run_id)
    assert (audit.actor, audit.action, audit.decision_id) == (
        "classifier",
        "operator",
        decision["decision_id"],
    )
    assert await RunStore(records_redis).session_of_run(event.run_id) == session.key
    assert (
        counter("continuity_decisions_total", action="operator", reason="native_provider_state_incompatible")
        == decided + 1
    )


@pytest.mark.parametrize("source", ["classification", "pending_tool_call"])
async def test_a_pending_side_effect_opens_a_reconciliation_never_a_replacement(
    bus: Bus, r: aioredis.Redis, records_redis: Redis, source: str
) -> None:
    runner, session = new_runner_id(), new_session()
    before = await seed_session(r, session, "allow_replacement_after_resume_failure")
    if source == "classification":
        call = None
        event = resume_failed(runner, session=session, classification="provider_side_effect_pending")
    else:  # no class at all, and a policy that would replace: the pending call decides
        call = tool_call(recorded_outcome="completed")
        event = resume_failed(runner, session=session, pending=call)

    await bus.settled(await bus.publish(event))

    [decision] = await bus.decisions(runner)
    assert (decision["action"], decision["reason"]) == ("reconcile", "native_provider_side_effect_pending")
    [work] = await bus.work(subjects.WORK_RECONCILE, event.run_id)
    assert work["decision_id"] == decision["decision_id"] == f"{event.run_id}:1:reconcile"
    assert (work["runner_id"], work["attempt"], work["native_session_id"]) == (runner, 1, "ns-saved-1")
    if call is None:
        assert (work["tool_call"], work["recorded_outcome"]) == (None, None)
    else:
        assert work["tool_call"] == msgspec.to_builtins(call)
        assert work["recorded_outcome"] == "completed"
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    assert await r.hgetall(keys.session(session.key)) == {**before, b"state": b"held"}  # type: ignore[misc]
    assert (await run_hash(r, session, event.run_id))["status"] == "reconciling"


async def test_a_typed_source_reconciliation_error_stops_for_an_operator(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner, session = new_runner_id(), new_session()
    await seed_session(r, session, "allow_replacement_after_resume_failure")
    error = ErrorInfo(
        type="NativeRunnerSourceReconciliationRequiredError",
        code="native_runner_source_semantic_reconciliation_required",
        message="predecessor paperclip_call_assigned_tool call still pending",
    )
    event = resume_failed(runner, session=session, error=error)

    await bus.settled(await bus.publish(event))

    [decision] = await bus.decisions(runner)
    assert (decision["action"], decision["reason"], decision["failure_class"]) == (
        "operator",
        "native_runner_source_reconciliation_required",
        "source_reconciliation_required",
    )
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []


async def test_the_same_words_in_a_message_without_the_type_stay_unclassified(bus: Bus) -> None:
    runner = new_runner_id()
    error = ErrorInfo(
        type="Error",
        code="runner_resume_failed",
        message="native_runner_source_semantic_reconciliation_required; provider_attach_refused",
    )
    event = resume_failed(runner, error=error)

    await bus.settled(await bus.publish(event))

    [decision] = await bus.decisions(runner)
    assert (decision["action"], decision["failure_class"]) == ("retry_same_session", "unclassified")


# ---- unclassified failures: retry, replace, or give up ----------------------------------------


async def test_a_transport_drop_with_a_replacement_policy_asks_for_an_archive(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner, session = new_runner_id(), new_session()
    before = await seed_session(r, session, "allow_replacement_after_resume_failure")
    event = resume_failed(runner, session=session, attempt=2, error=ErrorInfo(type="Error", code="eof"))

    seq = await bus.publish(event)
    await bus.settled(seq)

    [work] = await bus.work(subjects.WORK_ARCHIVE, event.run_id)
    assert work["archive_id"] == f"{event.run_id}-2"
    assert (work["type"], work["runner_id"], work["attempt"]) == ("archive", runner, 2)
    assert (work["native_session_id"], work["failure_class"]) == ("ns-saved-1", "unclassified")
    assert work["session"] == msgspec.to_builtins(session)
    assert abs(work["event_published_at"] - datetime.now().timestamp()) < 60
    assert await bus.decisions(runner) == []  # the archiver decides after its remote move
    assert await r.hgetall(keys.session(session.key)) == before  # type: ignore[misc]
    run = await run_hash(r, session, event.run_id)
    assert run["status"] == "replacing" and "last_decision" not in run
    [audit] = await RunStore(records_redis).audit_trail(session.key, event.run_id)
    assert (audit.kind, audit.actor, audit.action, audit.reason) == (
        "decision",
        "classifier",
        "archive",
        "native_session_continuity_break",
    )
    slot = await r.hget(keys.run_decisions(session.key, event.run_id), "2")  # type: ignore[misc]
    assert isinstance(slot, bytes)
    assert msgspec.json.decode(slot)["archive_id"] == f"{event.run_id}-2"


@pytest.mark.parametrize("with_record", [False, True])
async def test_same_session_only_retries_with_backoff(
    bus: Bus, r: aioredis.Redis, records_redis: Redis, with_record: bool
) -> None:
    runner, session = new_runner_id(), new_session()
    if with_record:
        await seed_session(r, session, "same_session_only", epoch=2)
    event = resume_failed(runner, session=session, attempt=2)

    await bus.settled(await bus.publish(event))

    [decision] = await bus.decisions(runner)
    assert (decision["action"], decision["reason"], decision["failure_class"]) == (
        "retry_same_session",
        "native_session_interrupted",
        "unclassified",
    )
    assert decision["epoch"] == (2 if with_record else None)
    # attempt 2: the base backoff doubled once
    assert seconds(decision["not_before"]) - seconds(decision["decided_at"]) == pytest.approx(
        2 * BACKOFF_S, abs=0.002
    )
    assert (await run_hash(r, session, event.run_id))["status"] == "retrying"
    if with_record:
        assert await r.hget(keys.session(session.key), "state") == b"active"  # type: ignore[misc]


async def test_the_third_attempt_is_exhausted_whatever_the_policy(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner, session = new_runner_id(), new_session()
    await seed_session(r, session, "allow_replacement_after_resume_failure")
    event = resume_failed(runner, session=session, attempt=3)

    await bus.settled(await bus.publish(event))

    [decision] = await bus.decisions(runner)
    assert (decision["action"], decision["reason"]) == ("operator", "native_session_retry_exhausted")
    assert decision["decision_id"] == f"{event.run_id}:3:operator"
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    assert await r.hget(keys.session(session.key), "state") == b"held"  # type: ignore[misc]


@pytest.mark.parametrize("elapsed", [True, False])
async def test_governed_wait_policy(bus: Bus, r: aioredis.Redis, records_redis: Redis, elapsed: bool) -> None:
    runner, session = new_runner_id(), new_session()
    await seed_session(r, session, "allow_replacement_after_governed_wait")
    event = resume_failed(runner, session=session, governed_wait_elapsed=elapsed)

    await bus.settled(await bus.publish(event))

    archive = await bus.work(subjects.WORK_ARCHIVE, event.run_id)
    decisions = await bus.decisions(runner)
    if elapsed:
        assert len(archive) == 1 and decisions == []
    else:
        assert archive == []
        assert [d["action"] for d in decisions] == ["retry_same_session"]


async def test_an_unknown_policy_value_is_treated_as_same_session_only(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner, session = new_runner_id(), new_session()
    await seed_session(r, session, "allow_replacement_always")
    event = resume_failed(runner, session=session)

    await bus.settled(await bus.publish(event))

    assert [d["action"] for d in await bus.decisions(runner)] == ["retry_same_session"]
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []


# ---- authentication -------------------------------------------------------------------------


async def test_every_live_key_is_accepted(bus: Bus) -> None:
    runner = new_runner_id()
    first = resume_failed(runner, classification="provider_attach_refused", key_id="k1")
    second = resume_failed(runner, classification="provider_attach_refused", key_id="k2")
    await bus.publish(first)
    await bus.settled(await bus.publish(second))
    decisions = await bus.decisions(runner)
    assert sorted(d["run_id"] for d in decisions) == sorted([first.run_id, second.run_id])
    assert {d["failure_class"] for d in decisions} == {"provider_attach_refused"}


@pytest.mark.parametrize(
    ("key_id", "key", "reason"),
    [
        ("k1", b"not-the-runner-key-0123456789abcdef", "signature_invalid"),
        ("k9", b"a-key-nobody-configured-0123456789", "unknown_key"),
    ],
)
async def test_an_unverifiable_command_result_is_quarantined_without_a_decision(
    bus: Bus, r: aioredis.Redis, records_redis: Redis, key_id: str, key: bytes, reason: str
) -> None:
    runner, session = new_runner_id(), new_session()
    await seed_session(r, session, "allow_replacement_after_resume_failure")
    event = resume_failed(
        runner, session=session, classification="provider_attach_refused", key_id=key_id, key=key
    )
    dead_before = counter("continuity_dead_letters_total", reason=reason)
    quarantined_before = counter("continuity_events_total", type="resume_failed", outcome="quarantined")

    await bus.settled(await bus.publish(event))

    [dead] = await bus.dead(subjects.DEAD_QUARANTINE, event.event_id)
    assert header(dead, DEAD_REASON_HEADER) == reason
    assert header(dead, DEAD_SUBJECT_HEADER) == subjects.event(runner, "resume_failed")
    assert counter("continuity_dead_letters_total", reason=reason) == dead_before + 1
    assert (
        counter("continuity_events_total", type="resume_failed", outcome="quarantined")
        == quarantined_before + 1
    )
    assert await bus.decisions(runner) == []
    assert await bus.work(subjects.WORK_ARCHIVE, event.run_id) == []
    assert await r.exists(keys.run_decisions(session.key, event.run_id)) == 0
    assert await r.hget(keys.session(session.key), "state") == b"active"  # type: ignore[misc]


async def test_a_signature_over_another_attempt_does_not_verify(bus: Bus) -> None:
    runner = new_runner_id()
    event = resume_failed(runner, classification="provider_attach_refused", attempt=1)
    replayed = msgspec.structs.replace(event, attempt=2, event_id=f"ev-{uuid.uuid4().hex}")
    await bus.settled(await bus.publish(replayed))
    [dead] = await bus.dead(subjects.DEAD_QUARANTINE, replayed.event_id)
    assert header(dead, DEAD_REASON_HEADER) == "signature_invalid"
    assert await bus.decisions(runner) == []


# ---- exactly one decision per (run_id, attempt) ----------------------------------------------


async def test_redelivered_resent_and_competing_events_make_one_decision(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner, session = new_runner_id(), new_session()
    await seed_session(r, session, "same_session_only")
    first = resume_failed(runner, session=session, pending=tool_call())
    duplicates_before = counter("continuity_events_total", type="resume_failed", outcome="duplicate")
    await bus.settled(await bus.publish(first, msg_id=first.event_id))

    # The same bytes again (as a redelivery), the same event_id re-sent outside the duplicate
    # window (no Nats-Msg-Id here), and another event for the same run and attempt.
    competing = msgspec.structs.replace(
        first,
        event_id=f"ev-{uuid.uuid4().hex}",
        pending_tool_call=None,
        command_result=None,
        error=ErrorInfo(type="Error", code="native_event_replay_conflict"),
    )
    await bus.publish(msgspec.json.encode(first), subject=subjects.event(runner, "resume_failed"))
    await bus.publish(first)
    await bus.settled(await bus.publish(competing))

    [decision] = await bus.decisions(runner)
    assert decision["action"] == "reconcile"
    assert len(await bus.work(subjects.WORK_RECONCILE, first.run_id)) == 1
    assert len(await RunStore(records_redis).audit_trail(session.key, first.run_id)) == 1
    assert await r.hlen(keys.outbox(session.key)) == 0  # type: ignore[misc]
    assert counter("continuity_events_total", type="resume_failed", outcome="duplicate") == (
        duplicates_before + 3
    )


async def test_an_event_moving_a_run_to_another_session_is_invalid(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    runner = new_runner_id()
    first = resume_failed(runner)
    await bus.settled(await bus.publish(first))
    elsewhere = msgspec.structs.replace(first, event_id=f"ev-{uuid.uuid4().hex}", session=new_session())
    await bus.settled(await bus.publish(elsewhere))
    [dead] = await bus.dead(subjects.DEAD_INVALID, elsewhere.event_id)
    assert header(dead, DEAD_REASON_HEADER) == "run_session_mismatch"
    assert len(await bus.decisions(runner)) == 1
    assert await RunStore(records_redis).session_of_run(first.run_id) == first.session.key


async def test_a_burst_of_copies_in_one_batch_makes_one_decision(bus: Bus) -> None:
    runner = new_runner_id()
    event = resume_failed(runner, classification="provider_attach_refused")
    seq = 0
    for _ in range(8):
        seq = await bus.publish(event)
    await bus.settled(seq)
    assert [d["decision_id"] for d in await bus.decisions(runner)] == [f"{event.run_id}:1:operator"]


@pytest.mark.parametrize("status", ["408", "409", "503", "100"])
async def test_a_runners_status_header_never_passes_for_the_servers(bus: Bus, status: str) -> None:
    """A runner's event carrying the header the server uses for its status messages is still
    an event: decided, acknowledged, and the consumer goes on with the next one."""
    runner = new_runner_id()
    forged = resume_failed(runner, classification="provider_attach_refused")
    data = msgspec.json.encode(forged)
    headers = {"Nats-Msg-Id": forged.event_id, "Status": status, "Description": "Request Timeout"}
    await bus.js.publish(subjects.event(runner, "resume_failed"), data, headers=headers)
    after = resume_failed(runner, classification="provider_attach_refused")
    await bus.settled(await bus.publish(after))
    decided = sorted(d["run_id"] for d in await bus.decisions(runner))
    assert decided == sorted([forged.run_id, after.run_id])


async def test_a_crash_between_record_and_publish_is_repaired_on_redelivery(
    bus: Bus, r: aioredis.Redis, records_redis: Redis
) -> None:
    """A delivery recorded its step and died before publishing; the redelivery finds the slot
    taken, makes no second decision, and publishes what was recorded (once the outbox's grace
    period has passed: before that, the entry is its recorder's to publish)."""
    runner, session = new_runner_id(), new_session()
    event = resume_failed(runner, session=session, classification="provider_attach_refused")
    decision = Decision(
        decision_id=f"{event.run_id}:1:operator",
        runner_id=runner,
        run_id=event.run_id,
        attempt=1,
        session=session,
        action="operator",
        reason="native_provider_state_incompatible",
        failure_class="provider_attach_refused",
        decided_at=now_rfc3339(),
    )
    payload = msgspec.json.encode(decision)
    await RunStore(records_redis).record_step(
        session.key,
        event.run_id,
        RunStep(
            slot="1",
            slot_value=payload,
            run_fields=run_fields(event.run_id, runner, session, 1, "operator", decision),
            outbox=[
                OutboxEntry(
                    subject=subjects.decisions(runner),
                    msg_id=decision.decision_id,
                    payload=payload,
                    recorded_at=time.time() - 60,  # the delivery died a minute ago
                )
            ],
            audit=decision_audit(decision, "classifier"),
            hold=event.native_session_id,
        ),
    )

    await bus.settled(await bus.publish(event))

    assert await bus.decisions(runner) == [msgspec.to_builtins(decision)]
    assert await r.hlen(keys.outbox(session.key)) == 0  # type: ignore[misc]
    assert len(await RunStore(records_redis).audit_trail(session.key, event.run_id)) == 1


# ---- bad input ------------------------------------------------------------------------------


async def test_bad_input_is_dead_lettered_and_the_service_keeps_deciding(bus: Bus) -> None:
    runner = new_runner_id()
    subject = subjects.event(runner, "resume_failed")
    valid = resume_failed(runner)
    as_dict = msgspec.to_builtins(valid)
    mismatch = msgspec.json.encode({**as_dict, "runner_id": new_runner_id(), "event_id": "ev-mismatch"})
    missing = msgspec.json.encode(
        {k: v for k, v in as_dict.items() if k != "run_id"} | {"event_id": "ev-miss"}
    )
    bad_token = msgspec.json.encode({**as_dict, "run_id": "run with spaces", "event_id": "ev-token"})
    bad_message = msgspec.json.encode(
        {**as_dict, "event_id": "ev-msgtype", "error": {"type": "Error", "code": "x", "message": 42}}
    )
    invalid_before = counter("continuity_events_total", type="resume_failed", outcome="invalid")

    await bus.publish(b"\xff\xfe not json at all \x00", subject=subject)
    await bus.publish(mismatch, subject=subject)
    await bus.publish(missing, subject=subject)
    await bus.publish(bad_token, subject=subject)
    await bus.publish(bad_message, subject=subject)
    await bus.publish(msgspec.json.encode(as_dict), subject=subjects.event(runner, "heartbeat"))
    await bus.settled(await bus.publish(valid))

    reasons = {
        "not json": "malformed_json",
        "ev-mismatch": "runner_mismatch",
        "ev-miss": "missing_field",
        "ev-token": "invalid_field",
        "ev-msgtype": "invalid_field",
    }
    for needle, reason in reasons.items():
        [dead] = await bus.dead(subjects.DEAD_INVALID, needle)
        assert header(dead, DEAD_REASON_HEADER) == reason, needle
        assert header(dead, DEAD_SUBJECT_HEADER) == subject
    [unsupported] = [
        m
        for m in await bus.dead(subjects.DEAD_INVALID, valid.event_id)
        if header(m, DEAD_SUBJECT_HEADER) == subjects.event(runner, "heartbeat")
    ]
    assert header(unsupported, DEAD_REASON_HEADER) == "unsupported_event_type"
    assert counter("continuity_events_total", type="resume_failed", outcome="invalid") == invalid_before + 5
    [decision] = await bus.decisions(runner)
    assert decision["run_id"] == valid.run_id


async def test_a_subject_without_a_runner_and_type_is_dead_lettered(bus: Bus) -> None:
    runner = new_runner_id()
    event = resume_failed(runner)
    await bus.settled(
        await bus.publish(msgspec.json.encode(event), subject=f"continuity.events.{runner}.resume_failed.x")
    )
    [dead] = await bus.dead(subjects.DEAD_INVALID, event.event_id)
    assert header(dead, DEAD_REASON_HEADER) == "invalid_subject"
    assert await bus.decisions(runner) == []


async def test_the_service_is_ready_once_bound(classifier: RunningApp) -> None:
    assert classifier.app.ready()
