"""The whole journey of a pending side effect, through the real classifier: a `resume_failed`
event with a pending tool call → `reconcile` and a held session → a reconciliation record → an
operator's resolution → `continue_fresh`, the saved session untouched."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import msgspec
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from shared.contract import ResolveRequest, ResumeFailed, RetryRequest, ToolCall, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.times import now_rfc3339
from shared.platform.config import Config
from shared.records import keys
from tests.support import Decisions, running, wait_for
from tests.support.reconciliation import new_run, wait_until_opened
from tests.support.sessions import commit_req, decide_req

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.skipif(
        importlib.util.find_spec("services.classifier") is None, reason="the classifier is not in this build"
    ),
]


@pytest.fixture
async def stack(config: Config) -> AsyncIterator[None]:
    from services import registry

    with_keys = replace(config, runner_keys={"k1": b"k" * 32})
    async with (
        running(registry.load("session-store"), with_keys),
        running(registry.load("classifier"), with_keys),
        running(
            registry.load("reconciliation", gauge_interval_s=0.5, outbox_grace_s=1.0, sweep_interval_s=0.2),
            with_keys,
        ),
    ):
        yield


async def test_a_pending_tool_call_is_reconciled_then_continued_fresh(
    stack: None, nc: Client, redis_client: aioredis.Redis, client: ContinuityClient
) -> None:
    js = nc.jetstream()
    run = new_run()
    # A saved session whose policy would allow a replacement: a pending call must still stop it.
    await client.commit(commit_req(run.session, checkpoint_policy="allow_replacement_after_resume_failure"))
    event = ResumeFailed(
        type="resume_failed",
        event_id=f"ev-{uuid.uuid4().hex}",
        runner_id=run.runner_id,
        run_id=run.run_id,
        attempt=1,
        session=run.session,
        native_session_id="ns-1",
        occurred_at=now_rfc3339(),
        pending_tool_call=ToolCall(
            tool_call_id="call-1", tool_name="paperclip_call_assigned_tool", started_at=now_rfc3339()
        ),
    )
    await js.publish(
        subjects.event(run.runner_id, "resume_failed"),
        msgspec.json.encode(event),
        headers={"Nats-Msg-Id": event.event_id},
    )

    await wait_until_opened(client, run.run_id)
    record = await client.reconciliation(run.run_id)
    assert record.tool_call is not None and record.tool_call.tool_call_id == "call-1"
    assert record.recorded_outcome is None and record.status == "open"
    session_key = keys.session(run.session.key)
    before = await redis_client.hgetall(session_key)  # type: ignore[misc]
    assert before[b"state"] == b"held"
    assert (await client.run(run.run_id)).status == "reconciling"
    with pytest.raises(RequestError) as refused:
        await client.retry(RetryRequest(run_id=run.run_id, actor="ops"))
    assert refused.value.code == "reconciliation_required"

    reply = await client.resolve(
        ResolveRequest(run_id=run.run_id, action_outcome="not_performed", evidence="no ticket", actor="ops")
    )
    tap = Decisions(js, run.runner_id)

    async def continued() -> bool:
        return any(d.action == "continue_fresh" for d in await tap.read(quiet_s=0.05))

    await wait_for(continued, what="continue_fresh published")
    decisions = await tap.read(quiet_s=0.5)
    assert [(d.action, d.reason) for d in decisions] == [
        ("reconcile", "native_provider_side_effect_pending"),
        ("continue_fresh", "execution_reconciled"),
    ]
    assert (
        decisions[1].decision_id == reply.decision_id and decisions[1].reconciled_outcome == "not_performed"
    )
    assert await redis_client.hgetall(session_key) == before  # type: ignore[misc]
    assert (await client.decide(decide_req(run.session))).reason == "session_held"
