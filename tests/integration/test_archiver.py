"""The archiver against real NATS and Redis, with a fake runner answering archive commands
(contract section 5)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime

import msgspec
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client import REGISTRY

from services import registry
from services.archiver import remote
from services.archiver.step import FAILED_REASON
from shared.contract import ArchiveCommand, ArchiveResult, Decision, subjects
from shared.contract.redaction import ARCHIVE_FAILED
from shared.contract.times import now_rfc3339
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.records import keys, steps
from shared.records.outbox import OutboxEntry
from shared.records.store import RunStore
from tests.support import (
    Decisions,
    answer_with,
    never_answer,
    new_runner_id,
    new_session,
    running,
    save_session,
    wait_for,
)
from tests.support.archiver import answering_runner, publish_work, wait_idle, work_item

pytestmark = pytest.mark.asyncio

SECRET_OUTPUT = (
    "mv: cannot move /state/ns-1: Permission denied\n"
    "env: token=abc123 OPENAI_API_KEY=sk-XXXXsecretXXXX password: hunter2\n"
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.sigsigsig\n"
) + "x" * 600


@pytest.fixture
def archiver_config(config: Config) -> Config:
    return replace(config, archive_timeout_s=3.0, retry_backoff_s=5.0)


@pytest.fixture
async def archiver(archiver_config: Config) -> AsyncIterator[Config]:
    async with running(registry.load("archiver"), archiver_config):
        yield archiver_config


def _metric(result: str) -> float:
    return REGISTRY.get_sample_value("continuity_archive_total", {"result": result}) or 0.0


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def test_success_copies_archives_and_replaces_only_after_the_runner_answered(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    before = await save_session(redis_client, session, epoch=2)
    work = work_item(runner_id, session)
    seen_at_request: list[tuple[dict[bytes | str, bytes | str], int, bool]] = []

    async def answer(command: ArchiveCommand) -> ArchiveResult:
        # What the control plane holds while the runner is still moving its state.
        seen_at_request.append(
            (
                await redis_client.hgetall(keys.session(session.key)),  # type: ignore[misc]
                await redis_client.exists(keys.archive_copy(session.key, command.archive_id)),
                await redis_client.hexists(keys.run_decisions(session.key, command.run_id), "1:archive"),  # type: ignore[misc]
            )
        )
        return ArchiveResult(exit_code=0, timed_out=False, output="moved")

    async with answering_runner(nc, runner_id, answer) as (runner, decisions):
        ok_before = _metric("ok")
        await publish_work(js, work, msg_id=f"work:{work.run_id}:1:archive")

        [decision] = await decisions.wait(1)
        # When the runner was asked: record untouched, no copy, no decision recorded (so none sent).
        assert seen_at_request == [(before, 0, False)]
        assert runner.commands == [
            ArchiveCommand(
                archive_id=work.archive_id, run_id=work.run_id, session=session, native_session_id="ns-1"
            )
        ]
        assert (decision.action, decision.reason, decision.epoch) == (
            "open_replacement",
            "native_session_continuity_break",
            3,
        )
        assert decision.decision_id == f"{work.run_id}:1:open_replacement"
        assert decisions.items[0][1] == decision.decision_id  # Nats-Msg-Id
        assert (decision.failure_class, decision.detail, decision.not_before) == ("unclassified", None, None)

        copy = await redis_client.hgetall(keys.archive_copy(session.key, work.archive_id))  # type: ignore[misc]
        assert copy == before
        after = await redis_client.hgetall(keys.session(session.key))  # type: ignore[misc]
        assert (after[b"state"], after[b"epoch"], after[b"revision"]) == (b"archived", b"3", b"6")
        unchanged = {k: v for k, v in before.items() if k not in (b"state", b"epoch", b"revision")}
        assert {k: after[k] for k in unchanged} == unchanged

        run = await redis_client.hgetall(keys.run(session.key, work.run_id))  # type: ignore[misc]
        assert run[b"status"] == b"replacing"
        assert msgspec.json.decode(run[b"last_decision"], type=Decision) == decision
        [audit] = await RunStore(records_redis).audit_trail(session.key, work.run_id)
        assert (audit.actor, audit.action, audit.decision_id) == (
            "archiver",
            "open_replacement",
            decision.decision_id,
        )
        progress = await redis_client.hgetall(keys.archive_progress(session.key, work.archive_id))  # type: ignore[misc]
        assert (progress[b"state"], progress[b"exit_code"]) == (b"done", b"0")
        assert await redis_client.hlen(keys.outbox(session.key)) == 0  # type: ignore[misc]
        assert _metric("ok") == ok_before + 1


async def test_failed_move_leaves_the_record_untouched_with_a_redacted_bounded_detail(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session)
    dump_before = await redis_client.dump(keys.session(session.key))
    async with answering_runner(nc, runner_id, answer_with(1, SECRET_OUTPUT)) as (_, decisions):
        work = work_item(runner_id, session, attempt=2)
        await publish_work(js, work)

        [decision] = await decisions.wait(1)
        assert (decision.action, decision.reason) == (
            "retry_same_session",
            "runner_continuity_break_archive_failed",
        )
        assert decision.decision_id == f"{work.run_id}:2:retry_same_session"
        assert decision.failure_class == "unclassified"
        detail = decision.detail
        assert detail is not None
        assert detail.startswith(
            "runner_continuity_break_archive_failed: exit=1 timedOut=false mv: cannot move"
        )
        assert detail.split(":", 1)[0] == ARCHIVE_FAILED == FAILED_REASON
        for secret in ("abc123", "sk-XXXX", "secretXXXX", "hunter2", "eyJhbGci", "sigsigsig"):
            assert secret not in detail
        assert "token=[REDACTED]" in detail and "Bearer [REDACTED]" in detail
        assert len(detail) == 512  # the output was longer: cut to the bound
        # Backoff doubles per attempt: attempt 2 waits 2 x 5 s.
        assert decision.not_before is not None
        assert _ts(decision.not_before) - _ts(decision.decided_at) == pytest.approx(10.0, abs=0.01)

        assert await redis_client.dump(keys.session(session.key)) == dump_before
        assert not await redis_client.exists(keys.archive_copy(session.key, work.archive_id))
        run = await redis_client.hgetall(keys.run(session.key, work.run_id))  # type: ignore[misc]
        assert run[b"status"] == b"retrying"
        progress = await redis_client.hgetall(keys.archive_progress(session.key, work.archive_id))  # type: ignore[misc]
        assert progress[b"state"] == b"done" and b"hunter2" not in progress[b"detail"]


async def test_no_answer_within_the_timeout_is_timed_out(
    config: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session)
    dump_before = await redis_client.dump(keys.session(session.key))
    async with answering_runner(nc, runner_id, never_answer) as (runner, decisions):
        timed_out_before = _metric("timed_out")
        async with running(registry.load("archiver"), replace(config, archive_timeout_s=0.5)):
            started = time.monotonic()
            await publish_work(js, work_item(runner_id, session))
            [decision] = await decisions.wait(1)
        assert time.monotonic() - started >= 0.5
        assert decision.action == "retry_same_session"
        assert decision.detail == "runner_continuity_break_archive_failed: exit=null timedOut=true"
        assert await redis_client.dump(keys.session(session.key)) == dump_before
        assert len(runner.commands) == 1
        assert _metric("timed_out") == timed_out_before + 1


async def test_no_responders_is_a_failed_move(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session)
    decisions = Decisions(js, runner_id)
    await publish_work(js, work_item(runner_id, session))
    [decision] = await decisions.wait(1)
    assert decision.action == "retry_same_session"
    assert (
        decision.detail
        == f"runner_continuity_break_archive_failed: exit=null timedOut=false {remote.NO_RESPONDERS}"
    )
    await decisions.close()


async def test_a_failure_at_the_third_attempt_goes_to_an_operator(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    before = await save_session(redis_client, session)
    async with answering_runner(nc, runner_id, answer_with(1, "token=abc123 sk-XXXX")) as (_, decisions):
        work = work_item(runner_id, session, attempt=3)
        await publish_work(js, work)

        [decision] = await decisions.wait(1)
        assert (decision.action, decision.reason, decision.not_before) == (
            "operator",
            "runner_continuity_break_archive_failed",
            None,
        )
        assert decision.detail == (
            "runner_continuity_break_archive_failed: exit=1 timedOut=false token=[REDACTED] [REDACTED]"
        )
        # Held for the operator, and otherwise exactly as it was.
        after = await redis_client.hgetall(keys.session(session.key))  # type: ignore[misc]
        assert after == {**before, b"state": b"held"}
        run = await redis_client.hgetall(keys.run(session.key, work.run_id))  # type: ignore[misc]
        assert run[b"status"] == b"operator"


async def test_duplicate_work_items_make_one_move_and_one_decision(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session, epoch=0)
    async with answering_runner(nc, runner_id, answer_with(0, delay_s=0.5)) as (runner, decisions):
        work = work_item(runner_id, session)
        # Two copies at once (another publisher, or past the duplicate window): both are delivered
        # while the first move is in flight.
        await publish_work(js, work, msg_id="copy-1")
        await publish_work(js, work, msg_id="copy-2")
        await decisions.wait(1)
        await wait_idle(js)
        # And one more after the decision.
        await publish_work(js, work, msg_id="copy-3")
        await wait_idle(js)

        assert runner.per_archive == {work.archive_id: 1}
        assert [d.action for d in await decisions.all()] == ["open_replacement"]
        assert await redis_client.hget(keys.session(session.key), "epoch") == b"1"  # type: ignore[misc]
        assert await redis_client.llen(keys.run_audit(session.key, work.run_id)) == 1  # type: ignore[misc]


async def test_a_copy_of_decided_work_publishes_only_a_leftover_of_a_crash(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    """Contract 9.13 on the wire: a copy of work already decided sends nothing on the runner's
    subject while the decision's outbox entry is its recorder's (younger than the grace period,
    being published), and sends it once when a crash left it behind (older)."""
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session, epoch=0)
    wire: list[tuple[bytes, str]] = []

    async def heard(msg: Msg) -> None:
        wire.append((msg.data, (msg.headers or {}).get("Nats-Msg-Id", "")))

    sub = await nc.subscribe(subjects.decisions(runner_id), cb=heard)
    try:
        async with answering_runner(nc, runner_id, answer_with(0)) as (_, decisions):
            work = work_item(runner_id, session)
            await publish_work(js, work, msg_id="first")
            await decisions.wait(1)
            await wait_idle(js)
            await wait_for(lambda: len(wire) == 1, timeout=10, what="the decision on the core subject")
            payload, msg_id = wire[0]
            outbox = keys.outbox(session.key)

            async def left_behind(age_s: float) -> None:
                entry = OutboxEntry(
                    subject=subjects.decisions(runner_id),
                    msg_id=msg_id,
                    payload=payload,
                    recorded_at=time.time() - age_s,
                )
                await redis_client.hset(outbox, msg_id, msgspec.json.encode(entry))  # type: ignore[misc]

            # Its recorder is still publishing it (recorded a moment ago): the copy sends nothing.
            await left_behind(0.0)
            await publish_work(js, work, msg_id="copy-while-publishing")
            await wait_idle(js)
            await nc.flush()
            assert len(wire) == 1
            assert await redis_client.hexists(outbox, msg_id)  # type: ignore[misc]
            # A crash left it (recorded a minute ago): the next copy publishes it, once.
            await left_behind(60.0)
            await publish_work(js, work, msg_id="copy-after-crash")
            await wait_idle(js)
            await wait_for(lambda: len(wire) == 2, timeout=10, what="the leftover published")
            assert wire[1] == wire[0]
            assert not await redis_client.hexists(outbox, msg_id)  # type: ignore[misc]
            await publish_work(js, work, msg_id="copy-after-that")
            await wait_idle(js)
            await nc.flush()
            assert len(wire) == 2
    finally:
        await sub.unsubscribe()


async def test_a_move_sent_before_a_crash_is_not_sent_again(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    """An archiver died after sending the move and before its answer: the lease has ended."""
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session)
    dump_before = await redis_client.dump(keys.session(session.key))
    async with answering_runner(nc, runner_id, answer_with(0)) as (runner, decisions):
        work = work_item(runner_id, session)
        stale_ms = str(int((time.time() - 60) * 1000))
        await redis_client.hset(  # type: ignore[misc]
            keys.archive_progress(session.key, work.archive_id),
            mapping={"state": "remote_started", "remote_started_ms": stale_ms, "lease_until_ms": stale_ms},
        )
        await publish_work(js, work)

        [decision] = await decisions.wait(1)
        await wait_idle(js)
        assert runner.commands == []
        assert decision.action == "retry_same_session"
        assert decision.detail == (
            f"runner_continuity_break_archive_failed: exit=null timedOut=true {remote.UNKNOWN_RESULT}"
        )
        assert await redis_client.dump(keys.session(session.key)) == dump_before


async def test_a_recorded_success_resumes_with_the_local_move_only(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    """An archiver died after recording the runner's exit 0, before the local move."""
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    before = await save_session(redis_client, session, epoch=4)
    async with answering_runner(nc, runner_id, answer_with(0)) as (runner, decisions):
        work = work_item(runner_id, session)
        await redis_client.hset(  # type: ignore[misc]
            keys.archive_progress(session.key, work.archive_id),
            mapping={"state": "remote_ok", "exit_code": "0", "timed_out": "false", "detail": ""},
        )
        await publish_work(js, work)

        [decision] = await decisions.wait(1)
        assert runner.commands == []
        assert (decision.action, decision.epoch) == ("open_replacement", 5)
        assert await redis_client.hgetall(keys.archive_copy(session.key, work.archive_id)) == before  # type: ignore[misc]


async def test_a_recorded_but_unpublished_decision_is_published_without_a_move(
    archiver: Config, nc: Client, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    """An archiver died between recording its decision and publishing it."""
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session)
    async with answering_runner(nc, runner_id, answer_with(0)) as (runner, decisions):
        work = work_item(runner_id, session)
        decision = Decision(
            decision_id=f"{work.run_id}:1:retry_same_session",
            runner_id=runner_id,
            run_id=work.run_id,
            attempt=1,
            session=session,
            action="retry_same_session",
            reason="runner_continuity_break_archive_failed",
            detail="runner_continuity_break_archive_failed: exit=1 timedOut=false",
            decided_at=now_rfc3339(),
        )
        payload = msgspec.json.encode(decision)
        step = steps.RunStep(
            slot="1:archive",
            slot_value=payload,
            run_fields=steps.run_fields(work.run_id, runner_id, session, 1, "retrying", decision),
            outbox=[
                OutboxEntry(
                    subject=subjects.decisions(runner_id), msg_id=decision.decision_id, payload=payload
                )
            ],
        )
        assert await RunStore(records_redis).record_step(session.key, work.run_id, step) is None
        await publish_work(js, work)

        [published] = await decisions.wait(1)
        await wait_idle(js)
        assert published == decision
        assert runner.commands == []
        assert await redis_client.hlen(keys.outbox(session.key)) == 0  # type: ignore[misc]


async def test_an_undecodable_work_item_is_dead_lettered(archiver: Config, nc: Client) -> None:
    js = nc.jetstream()
    sub = await js.pull_subscribe(subjects.DEAD_INVALID, stream=subjects.DEAD_STREAM)
    await js.publish(subjects.WORK_ARCHIVE, b'{"type": "archive", "archive_id": "bad id with spaces"}')

    async def dead() -> bool:
        try:
            msgs = await sub.fetch(10, timeout=0.2)
        except TimeoutError:
            return False
        return any(b"bad id with spaces" in m.data for m in msgs)

    await wait_for(dead, what="the work item in continuity.dead.invalid")
    await sub.unsubscribe()


async def test_a_held_record_is_never_archived_and_the_run_stops_for_an_operator(
    archiver: Config, nc: Client, redis_client: aioredis.Redis
) -> None:
    """Another run's decision held the saved session after this run's archive was asked for: the
    runner's move is answered, the record stays exactly as it is, and this run stops too."""
    js = nc.jetstream()
    runner_id, session = new_runner_id(), new_session()
    await save_session(redis_client, session, epoch=2)
    await redis_client.hset(keys.session(session.key), "state", "held")  # type: ignore[misc]
    before = await redis_client.hgetall(keys.session(session.key))  # type: ignore[misc]
    work = work_item(runner_id, session)

    async def answer(command: ArchiveCommand) -> ArchiveResult:
        return ArchiveResult(exit_code=0, timed_out=False, output="moved")

    async with answering_runner(nc, runner_id, answer) as (runner, decisions):
        await publish_work(js, work, msg_id=f"work:{work.run_id}:1:archive")
        [decision] = await decisions.wait(1)
        assert len(runner.commands) == 1
        assert (decision.action, decision.reason, decision.epoch) == ("operator", FAILED_REASON, 2)
        assert decision.detail is not None and "held for an operator" in decision.detail
        assert await redis_client.hgetall(keys.session(session.key)) == before  # type: ignore[misc]
        assert not await redis_client.exists(keys.archive_copy(session.key, work.archive_id))
        await wait_idle(js)
