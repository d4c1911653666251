"""The session's compatibility generation never reaches an archive-failed detail, against the
real session-store, archiver and reconciliation services (contract sections 1, 5 and 6): the
runner's output repeats the generation the record stores (in the compact form a commit writes),
and neither the decision, nor the archive's progress record, nor `continuity.runs.get` shows it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import replace

import msgspec
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg

from services import registry
from shared.contract import (
    ArchiveCommand,
    ArchiveResult,
    ArchiveWork,
    CommitRequest,
    Decision,
    RunView,
    SessionRef,
    subjects,
)
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.redaction import REDACTED
from shared.platform.config import Config
from shared.records import keys
from tests.support import running, wait_for

pytestmark = pytest.mark.asyncio

GENERATION = "dsh-2026.11.3-p7"


@pytest.fixture
async def services(config: Config) -> AsyncIterator[Config]:
    cfg = replace(config, archive_timeout_s=3.0)
    async with AsyncExitStack() as stack:
        for app in (
            registry.load("session-store"),
            registry.load("archiver"),
            registry.load("reconciliation"),
        ):
            await stack.enter_async_context(running(app, cfg))
        yield cfg


def _session() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="dsh")


def _commit(session: SessionRef, generation: str) -> CommitRequest:
    return CommitRequest(
        session=session,
        native_session_id="ns-1",
        adapter="deepseek-harness",
        model="dsh-pro",
        cwd="/workspaces/acme/conv/dsh",
        cursor="c-1",
        prompt_hash="ph",
        checkpoint_policy="allow_replacement_after_resume_failure",
        compatibility_generation=generation,
    )


def _work(runner_id: str, session: SessionRef) -> ArchiveWork:
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    return ArchiveWork(
        archive_id=f"{run_id}-1",
        runner_id=runner_id,
        run_id=run_id,
        attempt=1,
        session=session,
        native_session_id="ns-1",
        failure_class="unclassified",
    )


async def _archive_with_runner(
    nc: Client, client: ContinuityClient, work: ArchiveWork, answer: Callable[[], Awaitable[str]]
) -> Decision:
    """Publish the work item; the runner fails the move with `answer()`'s output. Returns the
    run's last decision as `continuity.runs.get` shows it."""

    async def on_command(msg: Msg) -> None:
        msgspec.json.decode(msg.data, type=ArchiveCommand)
        output = await answer()
        await msg.respond(msgspec.json.encode(ArchiveResult(exit_code=1, timed_out=False, output=output)))

    sub = await nc.subscribe(subjects.runner_archive(work.runner_id), cb=on_command)
    await nc.flush()
    try:
        await nc.jetstream().publish(subjects.WORK_ARCHIVE, msgspec.json.encode(work))
        views: list[RunView] = []

        async def decided() -> bool:
            try:
                view = await client.run(work.run_id)
            except RequestError as err:
                if err.code == "not_found":  # not recorded yet
                    return False
                raise
            views.append(view)
            return view.last_decision is not None

        await wait_for(decided, timeout=15, what="the archive-failed decision")
    finally:
        await sub.unsubscribe()
    decision = views[-1].last_decision
    assert decision is not None
    assert decision.reason == "runner_continuity_break_archive_failed"
    return decision


async def _stored_detail(r: aioredis.Redis, work: ArchiveWork) -> bytes:
    progress = await r.hgetall(keys.archive_progress(work.session.key, work.archive_id))  # type: ignore[misc]
    return bytes(progress[b"detail"])


async def _published(nc: Client, work: ArchiveWork) -> Decision:
    sub = await nc.jetstream().pull_subscribe(
        subjects.decisions(work.runner_id), stream=subjects.DECISIONS_STREAM
    )
    try:
        [msg] = await sub.fetch(1, timeout=5)
        await msg.ack()
        return msgspec.json.decode(msg.data, type=Decision)
    finally:
        await sub.unsubscribe()


async def test_the_stored_generation_is_hidden_in_the_detail_the_decision_and_runs_get(
    services: Config, nc: Client, client: ContinuityClient, redis_client: aioredis.Redis
) -> None:
    session = _session()
    await client.commit(_commit(session, GENERATION))
    stored = await redis_client.hget(keys.session(session.key), "g")  # type: ignore[misc]
    assert stored is not None and stored.endswith(GENERATION.encode())  # the compact form
    work = _work(f"r{uuid.uuid4().hex[:10]}", session)

    async def answer() -> str:
        return (
            f"harness generation {GENERATION} cannot move its state; "
            f"built for {GENERATION.upper()}; manifest says generation={GENERATION}; "
            f"last line cut at {GENERATION[:11]}"
        )

    decision = await _archive_with_runner(nc, client, work, answer)
    for detail in (
        decision.detail or "",
        (await _published(nc, work)).detail or "",
        (await _stored_detail(redis_client, work)).decode(),
    ):
        assert detail.startswith("runner_continuity_break_archive_failed: exit=1 timedOut=false harness")
        assert GENERATION[:8].lower() not in detail.lower()
        assert detail.count(REDACTED) == 4
    # The record itself is untouched by the failed move, its generation still stored.
    assert await redis_client.hget(keys.session(session.key), "g") == stored  # type: ignore[misc]


async def test_a_generation_committed_while_the_runner_answers_is_hidden_too(
    services: Config, nc: Client, client: ContinuityClient
) -> None:
    session = _session()
    await client.commit(_commit(session, "gen-before-move"))
    work = _work(f"r{uuid.uuid4().hex[:10]}", session)

    async def answer() -> str:
        # The runner stores a new generation, then reports both in its output.
        await client.commit(_commit(session, "gen-after-move"))
        return "was gen-before-move, now gen-after-move"

    decision = await _archive_with_runner(nc, client, work, answer)
    assert decision.detail == (
        f"runner_continuity_break_archive_failed: exit=1 timedOut=false was {REDACTED}, now {REDACTED}"
    )


async def test_without_a_session_record_the_output_is_only_redacted(
    services: Config, nc: Client, client: ContinuityClient
) -> None:
    work = _work(f"r{uuid.uuid4().hex[:10]}", _session())

    async def answer() -> str:
        return "no state for gen-unknown; token=abc123"

    decision = await _archive_with_runner(nc, client, work, answer)
    assert decision.detail == (
        f"runner_continuity_break_archive_failed: exit=1 timedOut=false no state for gen-unknown; "
        f"token={REDACTED}"
    )
