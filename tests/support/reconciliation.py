"""Reconciliation tests' runs, seeded the way the classifier records them (`shared.records`: the run
index, one run step with the decision, its outbox entry and audit entry, the session held), and
reconcile work items published on `continuity.work.reconcile`."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import msgspec
import redis.asyncio as aioredis
from nats.js import JetStreamContext

from services.reconciliation.step import member
from shared.contract import Decision, ReconcileWork, SessionRef, ToolCall, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.times import now_rfc3339
from shared.contract.types import Action, DecisionReason, FailureClass, RecordedOutcome
from shared.records import decisions, keys
from shared.records.names import classifier_slot, decision_id
from shared.records.outbox import Outbox
from shared.records.store import RunStore
from tests.support.records import store_of
from tests.support.runner import new_runner_id
from tests.support.sessions import commit_req, new_session
from tests.support.waiting import wait_for

REASONS: dict[Action, DecisionReason] = {
    "reconcile": "native_provider_side_effect_pending",
    "operator": "native_provider_state_incompatible",
    "retry_same_session": "native_session_interrupted",
}


@dataclass
class Run:
    run_id: str
    runner_id: str
    session: SessionRef
    attempt: int


def new_run(attempt: int = 1) -> Run:
    return Run(
        run_id=f"run-{uuid.uuid4().hex[:12]}",
        runner_id=new_runner_id(),
        session=new_session(),
        attempt=attempt,
    )


async def classify(r: aioredis.Redis, js: JetStreamContext, run: Run, action: Action) -> Decision:
    """Record and publish one classifier decision for `run`."""
    failure_class: FailureClass | None = "provider_side_effect_pending" if action == "reconcile" else None
    decision = decisions.decision(run, action, REASONS[action], time.time(), failure_class=failure_class)
    step = decisions.decision_step(
        decision, classifier_slot(run.attempt), "classifier", native_session_id="ns-1"
    )
    async with store_of(r) as redis:
        runs = RunStore(redis)
        await runs.index_run(run.run_id, run.session.key)
        assert await runs.record_step(run.session.key, run.run_id, step) is None
        await Outbox(redis, js).flush(run.session.key, step.outbox)
    return decision


def reconcile_work(
    run: Run, *, recorded: RecordedOutcome | None = None, opened_at: str | None = None
) -> ReconcileWork:
    return ReconcileWork(
        runner_id=run.runner_id,
        run_id=run.run_id,
        attempt=run.attempt,
        session=run.session,
        native_session_id="ns-1",
        tool_call=ToolCall(
            tool_call_id=f"call-{run.run_id}",
            tool_name="paperclip_call_assigned_tool",
            started_at="2026-11-30T12:00:00.000Z",
            recorded_outcome=recorded,
        ),
        recorded_outcome=recorded,
        decision_id=decision_id(run.run_id, run.attempt, "reconcile"),
        opened_at=opened_at or now_rfc3339(),
    )


async def publish_work(js: JetStreamContext, work: ReconcileWork, msg_id: str | None = None) -> None:
    await js.publish(
        subjects.WORK_RECONCILE,
        msgspec.json.encode(work),
        headers={"Nats-Msg-Id": msg_id or f"work:{work.run_id}:{work.attempt}:reconcile"},
    )


async def seed_reconcile(
    r: aioredis.Redis,
    js: JetStreamContext,
    client: ContinuityClient,
    run: Run | None = None,
    **work_kw: object,
) -> Run:
    """A run stopped on a pending side effect, its saved session committed and then held, and
    its reconciliation record opened by the service."""
    run = run or new_run()
    await client.commit(commit_req(run.session))
    await classify(r, js, run, "reconcile")
    await publish_work(js, reconcile_work(run, **work_kw))  # type: ignore[arg-type]
    await wait_until_opened(client, run.run_id)
    # The record is readable a moment before the index lists it: wait for both, as the ack does.
    name = member(run.session.key, run.run_id)

    async def listed() -> bool:
        return (
            await r.zscore(keys.reconciliations_open(keys.reconciliation_bucket(run.run_id)), name)
            is not None
        )

    await wait_for(listed, what=f"reconciliation of {run.run_id} listed")
    return run


async def wait_until_opened(client: ContinuityClient, run_id: str) -> None:
    async def opened() -> bool:
        try:
            await client.reconciliation(run_id)
        except RequestError as err:
            assert err.code == "not_found"
            return False
        return True

    await wait_for(opened, what=f"reconciliation of {run_id} opened")
