"""The run index of a fresh run whose first step waits on a person (shared/records/store.py,
`RunStore.record_step(index_fresh=True)`): kept without a time to live, in the same write as the
step; and, when the step is not recorded, left with the claim's time to live, as before."""

from __future__ import annotations

import time
import uuid

import msgspec
import pytest

from shared.contract.sessions import SessionRef
from shared.contract.types import Action, DecisionReason
from shared.platform.redis import Redis
from shared.records import decisions, keys
from shared.records.names import classifier_slot
from shared.records.retention import Retention
from shared.records.steps import RunStep, SessionChanged
from shared.records.store import RunStore

pytestmark = pytest.mark.asyncio

RETENTION = Retention.of_seconds(600.0, 1200.0)
REASONS: dict[Action, DecisionReason] = {
    "operator": "native_provider_state_incompatible",
    "retry_same_session": "native_session_interrupted",
}


class Run:
    def __init__(self) -> None:
        self.run_id = f"run-{uuid.uuid4().hex[:12]}"
        self.runner_id = f"r{uuid.uuid4().hex[:10]}"
        self.session = SessionRef(
            tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="a"
        )
        self.attempt = 1


def step_of(run: Run, action: Action) -> RunStep:
    decided = decisions.decision(run, action, REASONS[action], time.time())
    return decisions.decision_step(
        decided, classifier_slot(run.attempt), "classifier", native_session_id="ns-1"
    )


async def index_ttl(redis: Redis, run: Run) -> int:
    return int(await redis.execute("PTTL", keys.run_index(run.run_id)))


async def claimed(store: RunStore, run: Run) -> None:
    assert await store.claim_run(run.run_id, run.session.key) is None
    assert 0 < await index_ttl(store.redis, run) <= RETENTION.run_ms


async def test_a_fresh_run_stopped_for_an_operator_keeps_its_index(records_redis: Redis) -> None:
    store, run = RunStore(records_redis, RETENTION), Run()
    await claimed(store, run)
    assert (
        await store.record_step(run.session.key, run.run_id, step_of(run, "operator"), index_fresh=True)
        is None
    )
    assert await index_ttl(records_redis, run) == -1
    assert int(await records_redis.execute("PTTL", keys.run(run.session.key, run.run_id))) == -1
    # A copy of the step finds its slot taken; the index stays as the run is.
    again = await store.record_step(run.session.key, run.run_id, step_of(run, "operator"), index_fresh=True)
    assert again is not None
    assert await index_ttl(records_redis, run) == -1


async def test_a_fresh_run_retried_keeps_the_retention_on_its_index(records_redis: Redis) -> None:
    store, run = RunStore(records_redis, RETENTION), Run()
    await claimed(store, run)
    step = step_of(run, "retry_same_session")
    assert await store.record_step(run.session.key, run.run_id, step, index_fresh=True) is None
    assert 0 < await index_ttl(records_redis, run) <= RETENTION.run_ms


async def test_a_waiting_step_not_recorded_leaves_the_claims_time_to_live(records_redis: Redis) -> None:
    store, run = RunStore(records_redis, RETENTION), Run()
    await claimed(store, run)
    # Decided on a session record that is not the stored one: nothing is recorded.
    step = msgspec.structs.replace(step_of(run, "operator"), read=("same_session_only", 7))
    with pytest.raises(SessionChanged):
        await store.record_step(run.session.key, run.run_id, step, index_fresh=True)
    assert 0 < await index_ttl(records_redis, run) <= RETENTION.run_ms
    assert not await records_redis.execute("EXISTS", keys.run(run.session.key, run.run_id))
