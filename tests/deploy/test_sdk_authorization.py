"""The Python runner SDK under the shipped NATS authorization (deploy/nats/auth.conf, runners
issued by `continuity runners add`, the four services under their own users): a runner signs in
with its NKey seed and does its whole part of the contract through the SDK, and a runner that
claims another's id cannot read that runner's decisions."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from continuity_runner import (
    ArchiveRequest,
    ArchiveResult,
    Decision,
    ErrorInfo,
    PermissionDenied,
    Runner,
    RunnerOptions,
    SessionRef,
    connect,
)

from continuity.devstack.servers import RedisServer
from shared.contract import subjects
from tests.deploy.conftest import Stack, authorized_services, inbox, issued_stack
from tests.support import wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with issued_stack(tmp_path_factory.mktemp("sdk-auth")) as issued:
        yield issued


@pytest.fixture(scope="module")
async def services(stack: Stack, redis_server: RedisServer) -> AsyncIterator[None]:
    async with authorized_services(stack, redis_server.url):
        yield


async def _runner(stack: Stack, runner_id: str, seed_of: str | None = None, **options: object) -> Runner:
    return await connect(
        RunnerOptions(
            runner_id=runner_id,
            servers=stack.url(),
            nkey_seed_file=str(stack.seeds[seed_of or runner_id]),
            **options,  # type: ignore[arg-type]
        )
    )


def _session() -> SessionRef:
    return SessionRef(tenant="t1", conversation_id=f"c-{uuid.uuid4().hex[:10]}", agent_id="agent")


async def _first_decision(runner: Runner, run_id: str) -> Decision:
    async for delivery in runner.decisions():
        await delivery.ack()
        if delivery.decision.run_id == run_id:
            return delivery.decision
    raise AssertionError("the decisions ended")


async def test_a_runner_does_its_whole_part_through_the_sdk(
    services: None, stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="continuity_runner")
    runner = await _runner(stack, "runner-a", create_consumer=False)
    moves: list[ArchiveRequest] = []

    async def move(request: ArchiveRequest) -> ArchiveResult:
        moves.append(request)
        return ArchiveResult(exit_code=0, output="moved")

    try:
        await runner.serve_archive(move)
        session = _session()
        await runner.commit(
            session, "ns-1", "codex", "m", "/w", "allow_replacement_after_resume_failure", cursor="c1"
        )
        ready = await runner.decide(session, "codex", "m", "/w", "c1")
        assert (ready.mode, ready.resume_session_id) == ("resume", "ns-1")
        run_id = f"run-{uuid.uuid4().hex}"
        drop = ErrorInfo(type="transport", code="stream_closed")
        await runner.report_resume_failure(run_id, 1, session, "ns-1", error=drop)
        d = await asyncio.wait_for(_first_decision(runner, run_id), 30)
        assert (d.action, d.epoch) == ("open_replacement", 1)
        assert [m.run_id for m in moves] == [run_id]
        assert (await runner.get(session)).state == "archived"
        # Nothing it did was refused by the server.
        assert [r.getMessage() for r in caplog.records if "nats_error" in r.getMessage()] == []
    finally:
        await runner.close()


async def test_the_default_binds_a_consumer_it_may_not_look_up(services: None, stack: Stack) -> None:
    """With `create_consumer` left on, the lookup is refused at once and the operator's
    consumer is bound as it is."""
    runner = await _runner(stack, "runner-a")
    try:
        session = _session()
        await runner.commit(session, "ns-1", "codex", "m", "/w", "same_session_only", cursor="c1")
        run_id = f"run-{uuid.uuid4().hex}"
        await runner.report_resume_failure(run_id, 1, session, "ns-1")
        d = await asyncio.wait_for(_first_decision(runner, run_id), 30)
        assert d.action == "retry_same_session"
    finally:
        await runner.close()


async def test_a_runner_cannot_read_another_runners_decisions(services: None, stack: Stack) -> None:
    owner = await _runner(stack, "runner-b", create_consumer=False)
    # runner-a's own key and inbox, claiming runner-b's id.
    impostor = await _runner(
        stack, "runner-b", seed_of="runner-a", inbox_prefix="_INBOX.runner-a", create_consumer=False
    )
    operator = await nats.connect(stack.url("operator"), inbox_prefix=inbox("operator"))
    try:
        session = _session()
        await owner.commit(session, "ns-1", "codex", "m", "/w", "same_session_only", cursor="c1")
        run_id = f"run-{uuid.uuid4().hex}"
        await owner.report_resume_failure(run_id, 1, session, "ns-1")
        ojs = operator.jetstream()

        async def pending() -> bool:
            info = await ojs.consumer_info(subjects.DECISIONS_STREAM, "runner-b")
            return (info.num_pending or 0) >= 1

        await wait_for(pending, timeout=20, what="runner-b's decision waiting in its consumer")
        with pytest.raises(PermissionDenied):
            async for _ in impostor.decisions():
                raise AssertionError("a decision of runner-b reached runner-a")
        # Its own events are out of reach too.
        with pytest.raises(PermissionDenied):
            await impostor.report_resume_failure(f"run-{uuid.uuid4().hex}", 1, session, "ns-1")
        info = await ojs.consumer_info(subjects.DECISIONS_STREAM, "runner-b")
        assert (info.num_ack_pending, info.num_redelivered) == (0, 0)
        # The owner still gets it.
        d = await asyncio.wait_for(_first_decision(owner, run_id), 30)
        assert d.runner_id == "runner-b"
    finally:
        await operator.close()
        await impostor.close()
        await owner.close()
