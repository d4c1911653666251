"""Finished runs listed from CONTINUITY_HISTORY (contract 9.14) on real NATS and Redis: once a
run's records have left Redis, the runs index's trim lists the run in the stream and then
removes its Redis entry; `runs list` (every filter, pages, cursors), `runs stats` and the replay
find it there, exactly once, in the same order as the runs Redis still holds; a run_id used
again keeps one listing."""

from __future__ import annotations

import time

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from continuity.devstack.servers import NatsServer, RedisCluster, RedisServer
from services.reconciliation.history import History
from services.reconciliation.listed_runs import COUNTED_AHEAD_MAX, ListedRuns
from services.reconciliation.runs_index import STATUSES, RunsIndex
from services.reconciliation.step import version_of
from shared.contract import RunsListRequest, RunsStatsRequest, subjects
from shared.contract.client import ContinuityClient
from shared.contract.policy import ReplayRequest
from shared.contract.runs import RunEntry
from shared.contract.sessions import SessionRef
from shared.contract.times import epoch_of, rfc3339_from_epoch
from shared.platform.redis import Redis
from shared.records import history, keys
from shared.records.history_listing import DAY_S, Filters, HistoryListing, listing_subject
from shared.records.retention import Retention
from tests.support import make_config, wait_for
from tests.support.history import LINGER_S, listed_entry, redis, services
from tests.support.outcomes import TRANSPORT, cli, failure, moved_to_history, reaches, recovered_run, uid

pytestmark = pytest.mark.asyncio

__all__ = ["redis", "services"]  # fixtures


def _index(redis: Redis, js: JetStreamContext, url: str, redis_url: str) -> RunsIndex:
    """The runs index as the service keeps it, its listings standing no grace, so the test
    drives the trim's two rounds (list, then remove) itself."""
    config = make_config(url, redis_url, history_linger_s=LINGER_S)
    history = History(redis, js, config)
    history.listing.grace_s = 0.0
    return RunsIndex(redis, Retention.from_config(config), history)


async def _indexed_in_redis(redis: Redis, run_id: str) -> bool:
    return bool(
        await redis.execute("HEXISTS", keys.runs_index_versions(keys.runs_index_bucket(run_id)), run_id)
    )


async def _listed_in_stream(js: JetStreamContext, entry_subject: str) -> int:
    try:
        info = await js.stream_info(subjects.HISTORY_STREAM, subjects_filter=entry_subject)
    except NotFoundError:
        return 0
    return sum((info.state.subjects or {}).values())


async def _trimmed(index: RunsIndex, redis: Redis, run_ids: list[str]) -> None:
    """Trim rounds until no run of `run_ids` has a Redis entry."""

    async def gone() -> bool:
        await index.trim()
        return not any([await _indexed_in_redis(redis, r) for r in run_ids])

    await wait_for(gone, timeout=30, what="the runs' entries listed in the stream and gone from Redis")


async def test_a_finished_run_is_listed_from_the_stream_once_its_redis_entry_is_gone(
    services: str, nc: Client, client: ContinuityClient, redis: Redis, redis_server: RedisServer
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ev = await recovered_run(js, client, runner)
    await moved_to_history(js, redis, ev)
    before = (await client.runs_upto(RunsListRequest(runner_id=runner, limit=10))).items
    assert [r.run_id for r in before] == [ev.run_id]
    index = _index(redis, js, services, redis_server.url)

    # First round: listed in the stream, the Redis entry kept; the list shows the run once.
    await index.trim()
    assert await _indexed_in_redis(redis, ev.run_id)
    assert await _listed_in_stream(js, listing_subject(before[0])) == 1
    assert (await client.runs_upto(RunsListRequest(runner_id=runner, limit=10))).items == before
    assert (await client.runs_stats(RunsStatsRequest(runner_id=runner, since_s=3600))).statuses == {
        "recovered": 1
    }
    assert (await client.replay(ReplayRequest(runner_id=runner, since_s=3600))).replayed == 1

    await _trimmed(index, redis, [ev.run_id])
    entry = before[0]
    t = entry.updated_at
    matching = [
        RunsListRequest(runner_id=runner),
        RunsListRequest(runner_id=runner, status="recovered"),
        RunsListRequest(runner_id=runner, tenant=entry.session.tenant, reason=entry.reason),
        RunsListRequest(runner_id=runner, updated_after=t, updated_before=rfc3339_from_epoch(_epoch(t) + 1)),
    ]
    for req in matching:
        assert (await client.runs_upto(req)).items == before, req
    missing = [
        RunsListRequest(runner_id=runner, status="recovered_fresh"),
        RunsListRequest(runner_id=runner, status="retrying"),
        RunsListRequest(runner_id=runner, tenant=entry.session.tenant + "x"),
        RunsListRequest(runner_id=runner, updated_before=t),
        RunsListRequest(runner_id=runner, updated_after=rfc3339_from_epoch(_epoch(t) + 1)),
    ]
    for req in missing:
        assert (await client.runs_upto(req)).items == [], req
    stats = await client.runs_stats(RunsStatsRequest(runner_id=runner, since_s=3600))
    assert stats.statuses == {"recovered": 1}
    assert (await client.replay(ReplayRequest(runner_id=runner, since_s=3600))).replayed == 1
    code, out, err = await cli(services, "runs", "list", "--runner", runner, "--json")
    assert code == 0 and ev.run_id in out, err


async def test_pages_merge_the_runs_redis_holds_with_those_the_stream_lists(
    services: str, nc: Client, client: ContinuityClient, redis: Redis, redis_server: RedisServer
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    finished = [await recovered_run(js, client, runner) for _ in range(4)]
    for ev in finished:
        await moved_to_history(js, redis, ev)
    live = [await failure(js, runner, error=TRANSPORT) for _ in range(3)]
    for ev in live:
        await reaches(client, ev.run_id, "retrying")
    whole = (await client.runs_upto(RunsListRequest(runner_id=runner, limit=100))).items
    assert len(whole) == 7
    await _trimmed(_index(redis, js, services, redis_server.url), redis, [ev.run_id for ev in finished])
    assert all([await _indexed_in_redis(redis, ev.run_id) for ev in live])

    for size in (1, 2, 3):
        paged: list[RunEntry] = []
        cursor = None
        while True:
            page = await client.runs(RunsListRequest(runner_id=runner, limit=size, cursor=cursor))
            assert len(page.items) <= size
            paged += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
        assert paged == whole, size
    only_finished = (await client.runs_upto(RunsListRequest(runner_id=runner, status="recovered"))).items
    assert [r.run_id for r in only_finished] == [r.run_id for r in whole if r.status == "recovered"]
    assert len(only_finished) == 4


async def test_a_run_id_used_again_keeps_one_listing(nc: Client, redis: Redis) -> None:
    """A run_id's earlier run, listed, then a new run of the same id listed under another
    status and hour: the earlier listing is purged, one stays."""
    js = nc.jetstream()
    listing = HistoryListing(js)
    await History(redis, js, make_config("nats://unused", "redis://unused")).mover.ensure()
    run_id = f"run.{uid()}"
    first = _entry(run_id, "recovered", "2026-12-01T10:00:00.000Z")
    again = _entry(run_id, "recovered_fresh", "2026-12-03T18:30:00.000Z")
    state, pointer = await listing.state(first)
    assert state.code == "missing"
    await listing.publish(first, pointer)
    assert (await listing.state(first))[0].code in ("standing", "settled")
    state, pointer = await listing.state(again)
    assert state.code == "missing" and pointer is not None
    await listing.publish(again, pointer)
    assert await _listed_in_stream(js, listing_subject(first)) == 0
    assert await _listed_in_stream(js, listing_subject(again)) == 1


def _epoch(t: str) -> float:
    return epoch_of(t)


def _entry(run_id: str, status: str, at: str) -> RunEntry:
    return listed_entry(run_id, status, at, SessionRef(tenant="t.one", conversation_id="c", agent_id="a"))


async def test_a_listing_stands_30_s_and_a_run_with_no_copy_is_not_listed(nc: Client, redis: Redis) -> None:
    """Contract 9.14: the trim removes a run's Redis entry at least 30 s after listing it, and
    lists no run whose copy the stream does not hold."""
    js = nc.jetstream()
    await History(redis, js, make_config("nats://unused", "redis://unused")).mover.ensure()
    listing = HistoryListing(js)
    entry = _entry(f"run.{uid()}", "recovered", "2026-12-02T10:00:00.000Z")
    assert await listing.list_moved(entry) is True  # no copy: nothing to list, the entry may go
    assert await _listed_in_stream(js, listing_subject(entry)) == 0
    copy = history.RunHistory(run_id=entry.run_id, session_key=entry.session.key, moved_at=0.0, run={})
    await js.publish(history.subject(entry.run_id), history.encode(copy), stream=subjects.HISTORY_STREAM)
    assert await listing.list_moved(entry) is False  # listed now, its entry kept
    assert await _listed_in_stream(js, listing_subject(entry)) == 1
    pointer = await listing.pointer(entry.run_id)
    assert pointer is not None
    assert (await listing.state(entry, now=pointer.at + 29.9))[0].code == "standing"
    assert (await listing.state(entry, now=pointer.at + 30.0))[0].code == "settled"


async def test_a_page_on_redis_cluster_merges_the_runs_listed_in_the_stream(
    redis_cluster: RedisCluster, nats_server: NatsServer, nc: Client
) -> None:
    """The merge's reads of the runs index and its check of each listed run span the cluster's
    slots: a run Redis holds, runs only the stream lists, and one in both (its entry within
    the grace), listed once each, in order."""
    js = nc.jetstream()
    cluster = Redis(redis_cluster.url, cluster="on")
    await cluster.connect()
    try:
        config = make_config(nats_server.url, redis_cluster.url, history_linger_s=LINGER_S)
        history = History(cluster, js, config)
        await history.mover.ensure()
        index = RunsIndex(cluster, Retention.from_config(config), history)
        runner = f"r{uid()}"
        now = time.time()
        times = [rfc3339_from_epoch(now - (5 - k) * 5000) for k in range(5)]
        entries = [_entry(f"run-{uid()}", "recovered", t) for t in times]
        entries = [msgspec.structs.replace(e, runner_id=runner) for e in entries]
        in_redis, both = entries[1], entries[3]
        for e in (in_redis, both):
            encoded = msgspec.json.encode(e)
            status = 1 + STATUSES.index(e.status)
            await index.runs.runs_index_apply(
                e.run_id, version_of(e), encoded, epoch_of(e.updated_at), status
            )
            await cluster.execute("HSET", keys.run(e.session.key, e.run_id), "status", e.status)
        for e in entries:
            if e is not in_redis:
                await history.listing.publish(e, None)
        for size in (1, 2, 3, 10):
            listed: list[RunEntry] = []
            cursor = None
            while True:
                items, cursor = await index.page(RunsListRequest(runner_id=runner, limit=size, cursor=cursor))
                listed += items
                if cursor is None:
                    break
            assert [e.run_id for e in listed] == [e.run_id for e in entries], size
    finally:
        await cluster.aclose()


async def test_a_list_over_days_with_gaps_counts_them_ahead_and_keeps_the_order(
    nc: Client, redis: Redis
) -> None:
    """Listings of one runner on days far apart, most days between them empty: every slice size
    reads them all, once, in (time, run_id) order, while the days are counted ahead of the read
    (one day, then more after each empty one)."""
    js = nc.jetstream()
    await History(redis, js, make_config("nats://unused", "redis://unused")).mover.ensure()
    listing = _CountsWatched(js)
    runner, now = f"r{uid()}", time.time()
    entries = []
    for n, days_ago in enumerate((50, 33, 20, 19, 19, 5, 1, 0)):
        at = rfc3339_from_epoch(now - days_ago * DAY_S - n)
        session = SessionRef(tenant="t", conversation_id="c", agent_id="a")
        entry = listed_entry(f"run.{uid()}", "recovered", at, session, runner)
        state, pointer = await listing.state(entry)
        assert state.code == "missing"
        await listing.publish(entry, pointer)
        entries.append(entry)
    expected = sorted(entries, key=lambda e: (epoch_of(e.updated_at), e.run_id))
    for size in (1, 2, 3, 100):
        listed = ListedRuns(listing, Filters(runner_id=runner), 0.0, None, now, 30 * DAY_S)
        read: list[RunEntry] = []
        while rows := await listed.slice(size):
            assert len(rows) <= size
            read += [row[2] for row in rows]
        assert read == expected, size
    assert listing.most_at_once > 1  # the empty days between were counted several at a time


async def test_days_counted_ahead_are_never_more_than_the_bound_at_once(nc: Client, redis: Redis) -> None:
    """Two listings 58 empty days apart: the counts ahead double up to the bound and stay there,
    and the list still finds both."""
    js = nc.jetstream()
    await History(redis, js, make_config("nats://unused", "redis://unused")).mover.ensure()
    listing = _CountsWatched(js)
    runner, now = f"r{uid()}", time.time()
    entries = []
    for n, days_ago in enumerate((59, 0)):
        session = SessionRef(tenant="t", conversation_id="c", agent_id="a")
        entry = listed_entry(
            f"run.{uid()}", "recovered", rfc3339_from_epoch(now - days_ago * DAY_S - n), session, runner
        )
        await listing.publish(entry, (await listing.state(entry))[1])
        entries.append(entry)
    listed = ListedRuns(listing, Filters(runner_id=runner), 0.0, None, now, 30 * DAY_S)
    read: list[RunEntry] = []
    while rows := await listed.slice(100):
        read += [row[2] for row in rows]
    assert read == sorted(entries, key=lambda e: (epoch_of(e.updated_at), e.run_id))
    assert listing.most_at_once == COUNTED_AHEAD_MAX


class _CountsWatched(HistoryListing):
    """The real listing, noting how many counts it had in flight at most."""

    in_flight = 0
    most_at_once = 0

    async def count(self, filter_subject: str) -> int:
        self.in_flight += 1
        self.most_at_once = max(self.most_at_once, self.in_flight)
        try:
            return await super().count(filter_subject)
        finally:
            self.in_flight -= 1
