"""Retention against real Redis (contract section 9.9): a finished run's records get a time to
live in the scripts that write them and vanish; a run waiting on a person, a held session and
an open reconciliation are kept; the reconciliation listing is spread over buckets, pages in
order across them, and loses a delivered entry once its record has expired."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import msgspec
import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import RedisCluster, RedisServer
from continuity.tools.memory import JOURNEYS, record_journey
from services import registry
from services.reconciliation.legacy import move_legacy
from services.reconciliation.step import DELIVERED_INDEXES, OPEN_INDEXES, member
from services.reconciliation.store import ReconciliationStore
from services.session_store.store import SessionStore
from shared.contract.decisions import ReconcileWork
from shared.contract.events import ToolCall
from shared.contract.sessions import CommitRequest, SessionRef
from shared.contract.times import now_rfc3339, rfc3339_from_epoch
from shared.contract.types import Action, DecisionReason
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.records import decisions, keys
from shared.records.names import classifier_slot, decision_id
from shared.records.retention import Retention
from shared.records.store import RunStore
from tests.support import running, wait_for
from tests.support.records import url_of

pytestmark = pytest.mark.asyncio

SHORT = Retention.of_seconds(1.0, 2.0)
REASONS: dict[Action, DecisionReason] = {
    "operator": "native_provider_state_incompatible",
    "reconcile": "native_provider_side_effect_pending",
    "retry_same_session": "native_session_interrupted",
}


@pytest.fixture
def r(own_r: aioredis.Redis) -> aioredis.Redis:
    return own_r


_CLIENTS: dict[str, Redis] = {}


def _redis(client: aioredis.Redis | Redis) -> Redis:
    """The services' client of the server a test's redis-py client talks to."""
    if isinstance(client, Redis):
        return client
    return _CLIENTS.setdefault(url_of(client), Redis(url_of(client)))


@pytest.fixture(autouse=True, scope="module")
async def _close_clients() -> AsyncIterator[None]:
    yield
    for client in _CLIENTS.values():
        await client.aclose()
    _CLIENTS.clear()


async def _ttls(client: aioredis.Redis, names: list[str]) -> dict[str, int]:
    return {name: int(await client.pttl(name)) for name in names}


async def _gone(client: aioredis.Redis, names: list[str]) -> bool:
    return not any([await client.exists(name) for name in names])


def _run_keys(sk: str, run_id: str) -> list[str]:
    return [
        keys.run(sk, run_id),
        keys.run_decisions(sk, run_id),
        keys.run_audit(sk, run_id),
        keys.run_index(run_id),
    ]


class Run:
    def __init__(self, attempt: int = 1) -> None:
        self.run_id = f"run-{uuid.uuid4().hex[:12]}"
        self.runner_id = f"r{uuid.uuid4().hex[:10]}"
        self.session = SessionRef(
            tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="a"
        )
        self.attempt = attempt
        self.opened = 0.0


async def _step(client: aioredis.Redis | Redis, run: Run, action: Action, retention: Retention) -> None:
    """Record one classifier step of `action` for `run`, holding its saved session when the
    action does; the outbox is emptied as a flush would."""
    decided = decisions.decision(run, action, REASONS[action], time.time())
    step = decisions.decision_step(
        decided, classifier_slot(run.attempt), "classifier", native_session_id="ns-1"
    )
    runs = RunStore(_redis(client), retention)
    await runs.index_run(run.run_id, run.session.key)
    assert await runs.record_step(run.session.key, run.run_id, step) is None
    await runs.redis.execute("HDEL", keys.outbox(run.session.key), *(e.msg_id for e in step.outbox))


async def _saved_session(client: aioredis.Redis, run: Run) -> None:
    await client.hset(keys.session(run.session.key), mapping={"native_session_id": "ns-1", "revision": "1"})  # type: ignore[misc]


def _work(run: Run, opened_at: str | None = None) -> ReconcileWork:
    return ReconcileWork(
        runner_id=run.runner_id,
        run_id=run.run_id,
        attempt=run.attempt,
        session=run.session,
        native_session_id="ns-1",
        tool_call=ToolCall(tool_call_id=f"call-{run.run_id}", tool_name="deploy", started_at=now_rfc3339()),
        decision_id=decision_id(run.run_id, run.attempt, "reconcile"),
        opened_at=opened_at or now_rfc3339(),
    )


# Finished runs --------------------------------------------------------------------------------


@pytest.mark.parametrize("journey", JOURNEYS)
async def test_every_record_of_a_finished_run_has_a_ttl_and_vanishes(r: aioredis.Redis, journey: str) -> None:
    sample = await record_journey(_redis(r), journey, SHORT, uuid.uuid4().hex[:8])
    written = [name for name in sample.run_keys if await r.exists(name)]
    assert len(written) >= 4, written
    # No window without a time to live: every record has one as soon as it is written.
    for name, ttl in (await _ttls(r, written)).items():
        assert 0 < ttl <= SHORT.run_ms, (name, ttl)
    for name, ttl in (await _ttls(r, sample.archive_keys)).items():
        assert SHORT.run_ms < ttl <= SHORT.archive_ms, (name, ttl)
    session_key = sample.session_keys[0]
    assert await r.pttl(session_key) == -1  # a session record never expires
    await wait_for(lambda: _gone(r, written), timeout=10, what=f"the {journey} run's records to expire")
    await wait_for(lambda: _gone(r, sample.archive_keys), timeout=10, what="the archive copy to expire")
    assert await r.exists(session_key)


async def test_a_run_stopped_for_an_operator_is_kept_until_its_retry(r: aioredis.Redis) -> None:
    run = Run()
    await _saved_session(r, run)
    await _step(r, run, "operator", SHORT)
    kept = _run_keys(run.session.key, run.run_id)
    assert set((await _ttls(r, kept)).values()) == {-1}, await _ttls(r, kept)  # never expires on its own
    assert await r.hget(keys.session(run.session.key), "state") == b"held"  # type: ignore[misc]

    recon = ReconciliationStore(_redis(r), SHORT)
    found = await recon.load_run(run.run_id)
    assert found is not None
    assert (await recon.record_retry(found[0], found[1], "alice")).code == "retried"
    assert all(0 < ttl <= SHORT.run_ms for ttl in (await _ttls(r, kept)).values())
    await wait_for(lambda: _gone(r, kept), timeout=10, what="the continued run's records to expire")
    # The held session stays, unchanged, and without a time to live.
    assert await r.hget(keys.session(run.session.key), "state") == b"held"  # type: ignore[misc]
    assert await r.pttl(keys.session(run.session.key)) == -1


async def test_a_step_in_a_waiting_run_keeps_it_and_a_later_step_gives_the_ttl_back(
    r: aioredis.Redis,
) -> None:
    run = Run()
    await _step(r, run, "retry_same_session", SHORT)
    kept = _run_keys(run.session.key, run.run_id)
    assert all(ttl > 0 for ttl in (await _ttls(r, kept)).values())
    run.attempt = 2
    await _step(r, run, "operator", SHORT)
    assert set((await _ttls(r, kept)).values()) == {-1}


async def test_an_open_reconciliation_is_kept_and_a_delivered_one_goes_with_its_entry(
    r: aioredis.Redis,
) -> None:
    run = Run()
    await _saved_session(r, run)
    await _step(r, run, "reconcile", SHORT)
    recon = ReconciliationStore(_redis(r), SHORT)
    assert await recon.open(_work(run)) == "opened"
    sk = run.session.key
    kept = [*_run_keys(sk, run.run_id), keys.reconciliation(sk, run.run_id)]
    assert set((await _ttls(r, kept)).values()) == {-1}
    # A later attempt's step while the record is open keeps everything too.
    run.attempt = 2
    await _step(r, run, "retry_same_session", SHORT)
    assert set((await _ttls(r, kept)).values()) == {-1}
    name = member(sk, run.run_id)
    assert await r.zscore(keys.reconciliations_open(keys.reconciliation_bucket(run.run_id)), name) is not None
    assert await recon.trim(time.time() + 3600) == 0  # an open entry is never trimmed
    assert await r.zscore(keys.reconciliations_open(keys.reconciliation_bucket(run.run_id)), name) is not None

    loaded = await recon.load(run.run_id)
    assert loaded is not None
    done = await recon.record_resolution(sk, loaded[1], "completed", "checked", "alice")
    assert done.code == "resolved"
    await recon.drop_from_open(sk, run.run_id)
    assert await r.zscore(keys.reconciliations_open(keys.reconciliation_bucket(run.run_id)), name) is None
    assert (
        await r.zscore(keys.reconciliations_delivered(keys.reconciliation_bucket(run.run_id)), name)
        is not None
    )
    assert all(0 < ttl <= SHORT.run_ms for ttl in (await _ttls(r, kept)).values())
    await wait_for(lambda: _gone(r, kept), timeout=10, what="the delivered reconciliation to expire")

    async def trimmed() -> bool:
        await recon.trim(time.time() + SHORT.run_s)
        return (
            await r.zscore(keys.reconciliations_delivered(keys.reconciliation_bucket(run.run_id)), name)
            is None
        )

    await wait_for(trimmed, timeout=10, what="the delivered entry to be trimmed")
    assert await r.pttl(keys.session(sk)) == -1 and await r.exists(keys.session(sk))


async def test_trim_keeps_the_entry_of_a_record_delivered_late(r: aioredis.Redis) -> None:
    """Opened long ago, delivered now: listed until its record expires, not by opening time."""
    run = Run()
    await _step(r, run, "reconcile", SHORT)
    recon = ReconciliationStore(_redis(r), Retention.of_seconds(60.0))
    await recon.open(_work(run, opened_at=rfc3339_from_epoch(time.time() - 7200)))
    loaded = await recon.load(run.run_id)
    assert loaded is not None
    await recon.record_resolution(run.session.key, loaded[1], "not_performed", "checked", "bob")
    await recon.drop_from_open(run.session.key, run.run_id)
    assert await recon.trim() == 0
    assert (
        await r.zscore(
            keys.reconciliations_delivered(keys.reconciliation_bucket(run.run_id)),
            member(run.session.key, run.run_id),
        )
        is not None
    )


async def test_a_claimed_run_index_and_an_unflushed_outbox_have_the_retention(
    r: aioredis.Redis, own_redis: RedisServer
) -> None:
    run = Run()
    fast = Redis(own_redis.url, cluster="off")
    try:
        assert await RunStore(fast, SHORT).claim_run(run.run_id, run.session.key) is None
    finally:
        await fast.aclose()
    assert 0 < await r.pttl(keys.run_index(run.run_id)) <= SHORT.run_ms
    decided = decisions.decision(run, "retry_same_session", REASONS["retry_same_session"], time.time())
    step = decisions.decision_step(decided, classifier_slot(1), "classifier")
    assert await RunStore(_redis(r), SHORT).record_step(run.session.key, run.run_id, step) is None
    assert 0 < await r.pttl(keys.outbox(run.session.key)) <= SHORT.run_ms
    await wait_for(
        lambda: _gone(r, [keys.outbox(run.session.key), keys.run_index(run.run_id)]),
        timeout=10,
        what="the outbox remnant and the index to expire",
    )


async def test_the_copy_of_a_held_record_keeps_the_archive_retention(r: aioredis.Redis) -> None:
    run = Run()
    sessions = SessionStore(_redis(r), SHORT)
    first = CommitRequest(
        session=run.session,
        native_session_id="ns-1",
        adapter="a",
        model="m",
        cwd="/w",
        checkpoint_policy="same_session_only",
    )
    assert (await sessions.commit(first)).code == "ok"
    await _step(r, run, "operator", SHORT)  # holds ns-1
    second = msgspec.structs.replace(first, native_session_id="ns-2")
    assert (await sessions.commit(second)).code == "ok"
    held_copy = keys.held_archive(run.session.key, "ns-1")
    assert SHORT.run_ms < await r.pttl(held_copy) <= SHORT.archive_ms
    assert await r.pttl(keys.session(run.session.key)) == -1
    await wait_for(lambda: _gone(r, [held_copy]), timeout=10, what="the held copy to expire")


# The bucketed listing -------------------------------------------------------------------------


async def _open_many(r: aioredis.Redis, count: int) -> tuple[ReconciliationStore, list[Run]]:
    recon = ReconciliationStore(_redis(r), Retention.of_seconds(3600.0))
    runs = [Run() for _ in range(count)]
    base = time.time() - 1000
    for i, run in enumerate(runs):
        await _step(r, run, "reconcile", recon.retention)
        # Two records share each opening time: ties are ordered by member across buckets too.
        run.opened = base + i // 2
        await recon.open(_work(run, opened_at=rfc3339_from_epoch(run.opened)))
    return recon, runs


async def _all_pages(recon: ReconciliationStore, status: str | None, limit: int) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        items, cursor = await recon.records(status, limit, cursor)
        assert len(items) <= limit
        seen += [item.run_id for item in items]
        if cursor is None:
            return seen


async def test_the_listing_pages_in_opening_order_across_buckets(r: aioredis.Redis) -> None:
    recon, runs = await _open_many(r, 45)
    buckets = {keys.reconciliation_bucket(run.run_id) for run in runs}
    assert len(buckets) > 4, buckets
    assert not await r.exists(*keys.LEGACY_RECONCILIATION_INDEXES)  # no single hot key
    expected = [run.run_id for run in sorted(runs, key=lambda x: (x.opened, member(x.session.key, x.run_id)))]
    assert await _all_pages(recon, "open", 7) == expected
    assert await _all_pages(recon, None, 1) == expected

    delivered = {run.run_id for run in runs[::3]}
    for run in runs[::3]:
        loaded = await recon.load(run.run_id)
        assert loaded is not None
        await recon.record_resolution(run.session.key, loaded[1], "completed", "ok", "alice")
        await recon.drop_from_open(run.session.key, run.run_id)
    assert await _all_pages(recon, "delivered", 4) == [x for x in expected if x in delivered]
    assert await _all_pages(recon, "open", 4) == [x for x in expected if x not in delivered]
    assert await _all_pages(recon, None, 6) == expected
    assert (await recon.open_summary())[0] == len(runs) - len(delivered)


async def test_a_page_starts_after_the_cursor_whatever_moved_meanwhile(r: aioredis.Redis) -> None:
    recon, runs = await _open_many(r, 20)
    order = [run.run_id for run in sorted(runs, key=lambda x: (x.opened, member(x.session.key, x.run_id)))]
    first, cursor = await recon.records(None, 5)
    assert [i.run_id for i in first] == order[:5] and cursor is not None
    # The page's last record is delivered (it moves to another sorted set) before the next page.
    moved = next(run for run in runs if run.run_id == order[4])
    loaded = await recon.load(moved.run_id)
    assert loaded is not None
    await recon.record_resolution(moved.session.key, loaded[1], "completed", "ok", "alice")
    await recon.drop_from_open(moved.session.key, moved.run_id)
    second, _ = await recon.records(None, 5, cursor)
    assert [i.run_id for i in second] == order[5:10]


async def test_entries_of_the_single_sets_of_an_earlier_release_move_into_the_buckets(
    r: aioredis.Redis,
) -> None:
    recon, runs = await _open_many(r, 6)
    for name in [*OPEN_INDEXES, *DELIVERED_INDEXES]:
        await r.delete(name)
    legacy_all, legacy_open = keys.LEGACY_RECONCILIATION_INDEXES
    for run in runs:
        await r.zadd(legacy_all, {member(run.session.key, run.run_id): run.opened})
        await r.zadd(legacy_open, {member(run.session.key, run.run_id): run.opened})
    await r.zadd(legacy_all, {member("acme/gone/a", "run-gone"): 1.0})  # its record expired
    assert await move_legacy(recon) == 2 * len(runs) + 1
    assert not await r.exists(legacy_all, legacy_open)
    assert {i.run_id for i in (await recon.records("open", 100))[0]} == {run.run_id for run in runs}


# Redis Cluster --------------------------------------------------------------------------------


async def test_retention_and_the_listing_on_redis_cluster(redis_cluster: RedisCluster) -> None:
    client = cast(aioredis.Redis, aioredis.RedisCluster.from_url(redis_cluster.url))
    records = Redis(redis_cluster.url, cluster="on")
    try:
        sample = await record_journey(records, "reconcile", SHORT, uuid.uuid4().hex[:8])
        written = [name for name in sample.run_keys if await client.exists(name)]
        assert all(0 < ttl <= SHORT.run_ms for ttl in (await _ttls(client, written)).values())
        recon = ReconciliationStore(records, Retention.of_seconds(3600.0))
        runs = [Run() for _ in range(12)]
        for run in runs:
            await _step(records, run, "reconcile", recon.retention)
            await recon.open(_work(run))
        listed = set(await _all_pages(recon, "open", 5))
        assert {run.run_id for run in runs} <= listed
        await wait_for(lambda: _gone(client, written), timeout=10, what="the run's records to expire")
    finally:
        await client.aclose()
        await records.aclose()


# The memory command ---------------------------------------------------------------------------


async def test_the_memory_command_prints_bytes_per_run_and_the_steady_state(
    r: aioredis.Redis, own_redis: RedisServer
) -> None:
    before = await r.dbsize()
    env = {**os.environ, "REDIS_URL": own_redis.url}
    args = ("memory", "estimate", "--runs-per-day", "10000", "--retention-days", "30", "--sample", "8")
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("continuity")),
        *args,
        "--json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0
    reply = json.loads(out)
    m, e = reply["measurement"], reply["estimate"]
    assert m["runs"] == 8 and set(m["by_journey"]) == set(JOURNEYS)
    assert 1000 < m["run_bytes"] < 20000 and m["archive_copy_bytes"] > 0
    # A finished run's own records for the linger (a day), its index entries for the retention.
    assert 0 < m["lingering_bytes"] < m["run_bytes"] and e["linger_days"] == 1
    kept, lingering = m["run_bytes"] - m["lingering_bytes"], m["lingering_bytes"]
    expected = 10000 * (30 * kept + 1 * lingering) * m["overhead"]
    assert e["run_records_bytes"] == pytest.approx(expected)
    assert e["total_bytes"] > e["run_records_bytes"] and e["maxmemory_bytes"] == pytest.approx(
        e["total_bytes"] / 0.8
    )
    assert await r.dbsize() == before  # the sample removed what it wrote

    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("continuity")), *args, env=env, stdout=asyncio.subprocess.PIPE
    )
    text, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0
    for line in ("bytes per finished run", "average", "archive copy", "steady state", "maxmemory at least"):
        assert line in text.decode(), line


# The reconciliation service's upkeep -------------------------------------------------------


async def test_the_service_trims_expired_entries_and_empties_the_legacy_sets(
    config: Config, redis_client: aioredis.Redis
) -> None:
    gone = Run()
    expired = member(gone.session.key, gone.run_id)
    await redis_client.zadd(
        keys.reconciliations_delivered(keys.reconciliation_bucket(gone.run_id)), {expired: 1.0}
    )
    legacy = Run()
    await redis_client.zadd(
        keys.LEGACY_RECONCILIATION_INDEXES[0], {member(legacy.session.key, legacy.run_id): 2.0}
    )
    short = dataclasses.replace(config, retention_days=1 / 86400)
    async with running(registry.load("reconciliation", gauge_interval_s=0.2), short):

        async def upkept() -> bool:
            return await redis_client.zscore(
                keys.reconciliations_delivered(keys.reconciliation_bucket(gone.run_id)), expired
            ) is None and not (await redis_client.exists(*keys.LEGACY_RECONCILIATION_INDEXES))

        await wait_for(upkept, timeout=15, what="the refresher to trim and move the legacy entries")
