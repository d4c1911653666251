"""A crash between recording a resolution and publishing its decision: the next service's
outbox sweeper publishes the decision, exactly once. No service runs in this module until the
test starts one, so nothing else can publish the leftover."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from services import registry
from services.reconciliation.step import member, split_member
from services.reconciliation.store import ReconciliationStore
from shared.platform.bus.streams import ensure_streams
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.names import decision_id
from tests.support import Decisions, running, wait_for
from tests.support.reconciliation import classify, new_run, reconcile_work

pytestmark = pytest.mark.asyncio


async def test_a_resolution_recorded_but_not_published_is_published_once_by_the_sweeper(
    config: Config, redis_client: aioredis.Redis, records_redis: Redis, nc: Client
) -> None:
    js = nc.jetstream()
    await ensure_streams(js)
    run = new_run()
    await redis_client.hset(
        keys.session(run.session.key), mapping={"native_session_id": "ns-1", "state": "active"}
    )  # type: ignore[misc]
    await classify(redis_client, js, run, "reconcile")
    store = ReconciliationStore(records_redis)
    await store.open(reconcile_work(run))
    found = await store.load(run.run_id)
    assert found is not None
    sk, record = found

    # What the service does before it publishes; then the process dies.
    step = await store.record_resolution(sk, record, "completed", "checked the ledger", "alice")
    assert step.code == "resolved"
    expected = decision_id(run.run_id, 1, "continue_fresh")
    assert await redis_client.hexists(keys.outbox(sk), expected)  # type: ignore[misc]
    tap = Decisions(js, run.runner_id)
    assert await tap.continued(quiet_s=0.3) == []

    app = registry.load("reconciliation", gauge_interval_s=0.2, outbox_grace_s=0.2, sweep_interval_s=0.1)
    async with running(app, config):

        async def published() -> bool:
            return bool(await tap.continued(quiet_s=0.05))

        await wait_for(published, what="the sweeper's publication")
        await wait_for(
            lambda: _absent(redis_client, keys.outbox(sk), expected), what="the outbox entry deleted"
        )
        # The open index no longer lists the delivered record: the gauge refresher pruned it.
        await wait_for(lambda: _not_open(redis_client, member(sk, run.run_id)), what="open index pruned")
        continued = await tap.continued(quiet_s=0.5)
        assert [(d.decision_id, d.reconciled_outcome) for d in continued] == [(expected, "completed")]

    # Recording again (a retried request after the crash) finds it delivered: no second step.
    again = await store.record_resolution(sk, record, "completed", "checked the ledger", "alice")
    assert again.code == "already_delivered"
    assert await redis_client.hexists(keys.outbox(sk), expected) == 0  # type: ignore[misc]


async def _absent(r: aioredis.Redis, key: str, field: str) -> bool:
    return not await r.hexists(key, field)  # type: ignore[misc]


async def _not_open(r: aioredis.Redis, name: str) -> bool:
    return (
        await r.zscore(keys.reconciliations_open(keys.reconciliation_bucket(split_member(name)[1])), name)
        is None
    )
