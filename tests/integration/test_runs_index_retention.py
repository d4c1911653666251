"""The runs index follows retention (contract section 9.9) against real Redis: an entry goes once
its run's record has expired, never by time alone (a run stopped for an operator stays listed),
a round looks at a bounded slice of each bucket and the next goes on after it, and the
reconciliation service's refresher does it on its own."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
import redis.asyncio as aioredis

from services import registry
from services.reconciliation.runs_index import RunsIndex, bucket_keys, bucket_of
from shared.contract import RunsListRequest, SessionRef
from shared.contract.types import Action, DecisionReason
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.records import decisions, keys
from shared.records.names import classifier_slot
from shared.records.retention import Retention
from shared.records.store import RunStore
from tests.support import running, wait_for

pytestmark = pytest.mark.asyncio

SHORT = Retention.of_seconds(1.0)
REASONS: dict[Action, DecisionReason] = {
    "operator": "native_provider_state_incompatible",
    "retry_same_session": "native_session_interrupted",
}


@pytest.fixture
def r(own_r: aioredis.Redis) -> aioredis.Redis:
    return own_r


@dataclasses.dataclass(frozen=True)
class Run:
    run_id: str
    runner_id: str
    session: SessionRef
    attempt: int = 1


def new_run(run_id: str | None = None) -> Run:
    tag = uuid.uuid4().hex[:10]
    return Run(
        run_id=run_id or f"run-{tag}",
        runner_id=f"r{tag}",
        session=SessionRef(tenant=f"t{tag}", conversation_id=f"conv-{tag}", agent_id="a"),
    )


async def decide(
    client: aioredis.Redis,
    index: RunsIndex,
    run: Run,
    action: Action,
    *,
    at: float | None = None,
    record: bool = True,
) -> None:
    """Decide `action` for `run` at `at`: its run record written with the short retention (a
    run stopped for an operator is kept without one), then its entry indexed."""
    decided = decisions.decision(run, action, REASONS[action], time.time() if at is None else at)
    if record:
        step = decisions.decision_step(
            decided, classifier_slot(run.attempt), "classifier", native_session_id="ns-1"
        )
        assert await RunStore(index.redis, SHORT).record_step(run.session.key, run.run_id, step) is None
    assert await index.apply(decided)


async def indexed(client: aioredis.Redis, run_id: str) -> bool:
    versions, _, every, *_ = bucket_keys(bucket_of(run_id))
    return bool(await client.hexists(versions, run_id)) and await client.zscore(every, run_id) is not None  # type: ignore[misc]


def one_bucket(count: int) -> list[str]:
    """`count` run ids that share one bucket of the index."""
    ids: list[str] = []
    while len(ids) < count:
        candidate = f"run-{uuid.uuid4().hex[:12]}"
        if bucket_of(candidate) == 0:
            ids.append(candidate)
    return ids


async def test_an_expired_run_leaves_the_index_and_a_run_stopped_for_an_operator_stays(
    r: aioredis.Redis, own_records: Redis
) -> None:
    index = RunsIndex(own_records, SHORT)
    finished, stopped = new_run(), new_run()
    await decide(r, index, finished, "retry_same_session")
    await decide(r, index, stopped, "operator")
    assert await r.pttl(keys.run(stopped.session.key, stopped.run_id)) == -1  # waits on a person
    # Within the retention, nothing goes: both records are there.
    assert await index.trim() == 0
    assert await indexed(r, finished.run_id) and await indexed(r, stopped.run_id)

    await wait_for(
        lambda: _absent(r, keys.run(finished.session.key, finished.run_id)),
        timeout=10,
        what="the finished run's record to expire",
    )

    async def trimmed() -> bool:
        await index.trim()
        return not await indexed(r, finished.run_id)

    await wait_for(trimmed, timeout=10, what="the expired run to leave the index")
    entries = bucket_keys(bucket_of(finished.run_id))[1]
    assert not await r.hexists(entries, finished.run_id)  # type: ignore[misc]
    # However old its decision, the stopped run stays: its record has no expiry.
    assert await index.trim(time.time() + 365 * 86400) == 0
    assert await indexed(r, stopped.run_id)
    page, _ = await index.page(RunsListRequest(status="operator", limit=10))
    assert [e.run_id for e in page] == [stopped.run_id]


async def _absent(client: aioredis.Redis, name: str) -> bool:
    return not await client.exists(name)


async def test_a_round_is_bounded_and_the_next_goes_on_past_runs_that_are_kept(
    r: aioredis.Redis, own_records: Redis
) -> None:
    index = RunsIndex(own_records, SHORT)
    old = time.time() - 3600
    *kept_ids, gone_id = one_bucket(6)
    for i, run_id in enumerate(kept_ids):  # decided first, kept: stopped for an operator
        await decide(r, index, new_run(run_id), "operator", at=old + i)
    await decide(r, index, new_run(gone_id), "retry_same_session", at=old + 10, record=False)

    # Two entries per bucket a round: the kept ones come first, then the expired one.
    removed = [await index.trim(batch=2) for _ in range(3)]
    assert removed == [0, 0, 1]
    assert not await indexed(r, gone_id)
    assert all([await indexed(r, run_id) for run_id in kept_ids])
    # Once through, the next round starts over at the bucket's oldest entry.
    later = new_run(one_bucket(1)[0])
    await decide(r, index, later, "retry_same_session", at=old - 10, record=False)
    assert [await index.trim(batch=2) for _ in range(2)] == [0, 1]  # the end, then the start
    assert not await indexed(r, later.run_id)


async def test_the_service_refresher_trims_the_runs_index(
    config: Config, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    index = RunsIndex(records_redis, SHORT)
    gone, stopped = new_run(), new_run()
    await decide(redis_client, index, gone, "retry_same_session", at=time.time() - 3600, record=False)
    await decide(redis_client, index, stopped, "operator", at=time.time() - 3600)
    short = dataclasses.replace(config, retention_days=1 / 86400)
    async with running(registry.load("reconciliation", gauge_interval_s=0.2), short):

        async def trimmed() -> bool:
            return not await indexed(redis_client, gone.run_id)

        await wait_for(trimmed, timeout=15, what="the refresher to trim the runs index")
        assert await indexed(redis_client, stopped.run_id)
