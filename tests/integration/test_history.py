"""Finished runs' history (contract 9.14) on real NATS and Redis: a run that ends moves to
CONTINUITY_HISTORY, its Redis records get the linger, and once Redis no longer holds them every
read path (`runs show|explain|list|audit`, `runs stats`, the replay, reconciliations) answers
from the stream; a move made twice, or cut between its copy and its linger, keeps one copy; and
`continuity history migrate` moves what an earlier release left in Redis."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.reconciliation.history import History
from shared.contract import ResolveRequest, RunsListRequest, RunsStatsRequest, subjects
from shared.contract.client import ContinuityClient
from shared.contract.policy import ReplayRequest
from shared.contract.reconciliation import ListRequest
from shared.platform.redis import Redis
from shared.records import history, keys
from shared.records.names import archive_id
from tests.support import make_config, running, wait_for
from tests.support.history import LINGER_S, redis, services
from tests.support.outcomes import (
    TRANSPORT,
    cli,
    failure,
    history_copies,
    moved_to_history,
    reaches,
    recovered_run,
    send,
    turn,
    uid,
)
from tests.support.runner import KEYS, tool_call

pytestmark = pytest.mark.asyncio

__all__ = ["redis", "services"]  # fixtures


async def test_a_finished_run_is_read_from_the_stream_once_redis_no_longer_holds_it(
    services: str, nc: Client, client: ContinuityClient, redis: Redis
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ev = await recovered_run(js, client, runner)
    audit_before = [e.kind for e in (await client.audit(ev.run_id)).items]

    await moved_to_history(js, redis, ev)
    view = await client.run(ev.run_id)
    assert (view.status, view.attempt, view.runner_id) == ("recovered", 1, runner)
    assert [e.kind for e in (await client.audit(ev.run_id)).items] == audit_before
    assert "outcome" in audit_before
    listed = (await client.runs_upto(RunsListRequest(runner_id=runner, limit=100))).items
    assert [(r.run_id, r.status) for r in listed] == [(ev.run_id, "recovered")]
    stats = await client.runs_stats(RunsStatsRequest(runner_id=runner, since_s=3600))
    assert stats.statuses == {"recovered": 1}
    assert sum(row.recovered for row in stats.rows) == 1
    replayed = await client.replay(ReplayRequest(runner_id=runner, since_s=3600))
    assert replayed.replayed == 1
    for command in ("show", "explain"):
        code, out, err = await cli(services, "runs", command, ev.run_id, "--json")
        assert code == 0, (command, err)
        assert ev.run_id in out
    code, out, _ = await cli(services, "runs", "list", "--runner", runner, "--json")
    assert code == 0 and ev.run_id in out


async def test_a_resolved_reconciliation_is_read_from_the_stream_once_redis_no_longer_holds_it(
    services: str, nc: Client, client: ContinuityClient, redis: Redis
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ev = await failure(js, runner, pending=tool_call())
    await reaches(client, ev.run_id, "reconciling")
    await client.resolve(
        ResolveRequest(run_id=ev.run_id, action_outcome="not_performed", evidence="no ticket", actor="ops")
    )
    await reaches(client, ev.run_id, "continued")
    await send(js, turn(runner, ev.run_id, ev.session))
    await reaches(client, ev.run_id, "recovered_fresh")
    before = await client.reconciliation(ev.run_id)
    assert before.status == "delivered" and before.resolution is not None
    assert (before.resolution.action_outcome, before.resolution.actor) == ("not_performed", "ops")

    await moved_to_history(js, redis, ev)
    assert await redis.execute("EXISTS", keys.reconciliation(ev.session.key, ev.run_id)) == 0
    after = await client.reconciliation(ev.run_id)
    assert after == before
    listed = (await client.reconciliations_upto(ListRequest(status="delivered", limit=500))).items
    assert [r for r in listed if r.run_id == ev.run_id] == [before]
    assert (await client.run(ev.run_id)).status == "recovered_fresh"


async def test_a_run_that_has_not_ended_stays_whole_redis_holds(
    services: str, nc: Client, client: ContinuityClient, redis: Redis
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ended = await failure(js, runner, error=TRANSPORT)
    waiting = await failure(js, runner, error=TRANSPORT)
    await reaches(client, waiting.run_id, "retrying")
    await reaches(client, ended.run_id, "retrying")
    await send(js, turn(runner, ended.run_id, ended.session))

    async def ended_moved() -> bool:
        return await history_copies(js, ended.run_id) == 1

    # The run that ended is the one moved; the other one, its report handled before, is not.
    await wait_for(ended_moved, timeout=30, what="the ended run copied")
    assert await history_copies(js, waiting.run_id) == 0
    assert await redis.execute("PTTL", keys.run(waiting.session.key, waiting.run_id)) > LINGER_S * 1000 * 60
    assert (await client.run(waiting.run_id)).status == "retrying"


async def test_a_move_made_twice_or_cut_before_its_linger_keeps_one_copy(
    services: str, nc: Client, client: ContinuityClient, redis: Redis, redis_server: RedisServer
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ev = await failure(js, runner, error=TRANSPORT)
    await reaches(client, ev.run_id, "retrying")
    config = make_config(services, redis_server.url, history_linger_s=600.0)
    mover = History(redis, js, config)
    # Not ended: nothing is copied.
    assert (await mover.move(ev.session.key, ev.run_id)).code == "not_finished"
    await send(js, turn(runner, ev.run_id, ev.session))

    async def copied() -> bool:
        return await history_copies(js, ev.run_id) == 1

    await wait_for(copied, timeout=30, what="the service's move")
    # A crash after the copy, before the linger: the copy made again, as a retry would.
    again = await history.read_records(redis, ev.session.key, ev.run_id)
    if again is not None:
        await js.publish(history.subject(ev.run_id), history.encode(again), stream=subjects.HISTORY_STREAM)
        assert (await mover.move(ev.session.key, ev.run_id)).code == "moved"
        assert (await mover.move(ev.session.key, ev.run_id)).code == "moved"
    assert await history_copies(js, ev.run_id) == 1
    kept = await history.HistoryReader(js).load(ev.run_id)
    assert kept is not None and kept.status == "recovered" and kept.session_key == ev.session.key


async def test_migrate_moves_the_finished_runs_an_earlier_release_left_redis_holds(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, r = fresh_servers
    config = make_config(n.url, r.url, runner_keys=KEYS, history_linger_s=LINGER_S)
    runner = f"r{uid()}"
    import nats

    nc = await nats.connect(n.url)
    redis = Redis(r.url)
    await redis.connect()
    try:
        js = nc.jetstream()
        # The records as a release without the history leaves them: the classifier alone.
        async with running(registry.load("classifier"), config):
            finished = [await failure(js, runner, error=TRANSPORT) for _ in range(12)]
            open_run = await failure(js, runner, error=TRANSPORT)
            for ev in [*finished, open_run]:
                await _status_in_redis(redis, ev.session.key, ev.run_id, "retrying")
            for ev in finished:
                await send(js, turn(runner, ev.run_id, ev.session))
            for ev in finished:
                await _status_in_redis(redis, ev.session.key, ev.run_id, "recovered")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")},
            "NATS_URL": n.url,
            "REDIS_URL": r.url,
            "CONTINUITY_HISTORY_LINGER_S": "600",
        }
        # An archive's progress, as the archiver leaves it for a replaced session's run.
        progress = keys.archive_progress(finished[0].session.key, archive_id(finished[0].run_id, 1))
        await redis.execute("HSET", progress, "state", "done")
        await redis.execute("PEXPIRE", progress, 30 * 86_400_000)
        dry = await _migrate(env, "--dry-run")
        assert (dry["runs"], dry["moved"], dry["not_finished"]) == (13, 12, 1)
        assert await history_copies(js, finished[0].run_id) == 0
        first = await _migrate(env)
        assert (first["moved"], first["not_finished"], first["changed"]) == (12, 1, 0)
        for ev in finished:
            assert await history_copies(js, ev.run_id) == 1
            assert 0 < await redis.execute("PTTL", keys.run(ev.session.key, ev.run_id)) <= 600_000
        assert 0 < await redis.execute("PTTL", progress) <= 600_000
        assert await redis.execute("PTTL", keys.run(open_run.session.key, open_run.run_id)) > 600_000
        second = await _migrate(env)
        assert (second["moved"], second["already_moved"], second["not_finished"]) == (0, 12, 1)
        # The linger over (their keys expired), the reconciliation service answers from the
        # stream: each run, and the stats and the replay over all of them at once.
        for ev in finished:
            sk = ev.session.key
            await redis.execute(
                "DEL",
                keys.run(sk, ev.run_id),
                keys.run_decisions(sk, ev.run_id),
                keys.run_audit(sk, ev.run_id),
                keys.run_index(ev.run_id),
            )
        last = finished[-1]
        async with running(registry.load("reconciliation", sweep_interval_s=0.2), config):
            client = ContinuityClient(nc)
            assert (await client.run(last.run_id)).status == "recovered"
            assert any(e.kind == "outcome" for e in (await client.audit(last.run_id)).items)
            assert (await client.run(open_run.run_id)).status == "retrying"

            async def all_indexed() -> bool:
                listed = (await client.runs_upto(RunsListRequest(runner_id=runner, limit=100))).items
                return len(listed) == 13

            await wait_for(all_indexed, timeout=30, what="the 13 runs indexed from the decisions")
            stats = await client.runs_stats(RunsStatsRequest(runner_id=runner, since_s=3600))
            assert stats.statuses == {"recovered": 12, "retrying": 1}
            assert sum(row.recovered for row in stats.rows) == 12
            replayed = await client.replay(ReplayRequest(runner_id=runner, since_s=3600))
            assert replayed.replayed == 13
    finally:
        await redis.aclose()
        await nc.drain()


async def _status_in_redis(redis: Redis, sk: str, run_id: str, status: str) -> None:
    async def reached() -> bool:
        return await redis.hget(keys.run(sk, run_id), "status") == status.encode()

    await wait_for(reached, timeout=30, what=f"run {run_id} {status} in Redis")


async def _migrate(env: dict[str, str], *args: str) -> dict[str, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "continuity",
        "history",
        "migrate",
        "--json",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    counts: dict[str, int] = json.loads(out)
    return counts


async def test_a_move_that_cannot_reach_the_stream_keeps_the_run_whole_and_migrate_moves_it_later(
    fresh_servers: tuple[NatsServer, RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    n, r = fresh_servers
    config = make_config(n.url, r.url, runner_keys=KEYS, history_linger_s=LINGER_S)
    import nats

    nc = await nats.connect(n.url)
    redis = Redis(r.url)
    await redis.connect()
    try:
        js = nc.jetstream()
        # A stream of that name that takes none of the history's subjects: every copy is refused.
        await js.add_stream(StreamConfig(name=subjects.HISTORY_STREAM, subjects=["elsewhere.>"]))
        async with (
            running(registry.load("classifier"), config),
            running(registry.load("reconciliation", sweep_interval_s=0.2), config),
        ):
            client = ContinuityClient(nc)
            runner = f"r{uid()}"
            ev = await recovered_run(js, client, runner)

            async def deferred() -> bool:
                return "history_move_deferred" in caplog.text

            await wait_for(deferred, timeout=30, what="the move deferred")
            # Whole, for the retention, and still listed and read.
            assert await redis.execute("PTTL", keys.run(ev.session.key, ev.run_id)) > LINGER_S * 1000 * 60
            assert await redis.hget(keys.run(ev.session.key, ev.run_id), "history") is None
            listed = (await client.runs_upto(RunsListRequest(runner_id=runner, limit=10))).items
            assert [x.run_id for x in listed] == [ev.run_id]
        await js.delete_stream(subjects.HISTORY_STREAM)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CONTINUITY_")},
            "NATS_URL": n.url,
            "REDIS_URL": r.url,
            "CONTINUITY_HISTORY_LINGER_S": "600",
        }
        assert (await _migrate(env))["moved"] == 1
        assert await history_copies(js, ev.run_id) == 1
    finally:
        await redis.aclose()
        await nc.drain()
