"""kill -9 of a `continuity serve archiver` process in the middle of a stream of work items,
then a restart: no archive_id is moved twice and every work item gets exactly one decision."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import NatsServer, RedisServer
from shared.contract import ArchiveCommand, ArchiveResult
from shared.platform.bus.streams import ensure_streams
from shared.records import keys
from tests.support import (
    Decisions,
    FakeRunner,
    ServiceProcess,
    new_runner_id,
    new_session,
    save_session,
    wait_for,
)
from tests.support.archiver import publish_work, wait_idle, work_item

pytestmark = pytest.mark.asyncio

ITEMS = 30


@pytest.fixture
def archiver_process(
    fresh_servers: tuple[NatsServer, RedisServer], tmp_path: Path
) -> Iterator[ServiceProcess]:
    n, r = fresh_servers
    proc = ServiceProcess(
        "archiver",
        n.url,
        r.url,
        tmp_path / "archiver.log",
        CONTINUITY_ARCHIVE_TIMEOUT_S="2",
        CONTINUITY_ACK_WAIT_S="1",
        CONTINUITY_NAK_DELAY_S="0.2",
    )
    yield proc
    proc.stop()


async def test_kill_9_mid_stream_moves_each_archive_at_most_once_and_decides_each_item_once(
    fresh_servers: tuple[NatsServer, RedisServer], archiver_process: ServiceProcess
) -> None:
    n, r = fresh_servers
    nc = await nats.connect(n.url)
    redis_client = aioredis.Redis.from_url(r.url)
    js = nc.jetstream()
    await ensure_streams(js)
    runner_id = new_runner_id()

    held = asyncio.Event()

    async def answer(command: ArchiveCommand) -> ArchiveResult:
        if command.archive_id == held_id:
            await held.wait()  # this move is in flight until the archiver has been killed
        else:
            await asyncio.sleep(0.4)  # a slow runner: more moves are in flight at the kill
        if command.archive_id in failing:
            return ArchiveResult(exit_code=1, output="token=abc123 sk-XXXX disk full")
        return ArchiveResult(exit_code=0, output="moved")

    runner = await FakeRunner(nc, runner_id, answer).start()
    decisions = Decisions(js, runner_id)
    works = []
    for i in range(ITEMS):
        session = new_session()
        await save_session(redis_client, session)
        works.append(work_item(runner_id, session, run_id=f"run-{i:03d}-{runner_id}"))

    failing = {w.archive_id for i, w in enumerate(works) if i % 3 == 0}
    held_id = works[ITEMS // 3 + 1].archive_id

    async def publish_all() -> None:
        for work in works:
            await publish_work(js, work, msg_id=f"work:{work.run_id}:1:archive")
            await asyncio.sleep(0.04)  # a steady stream, so the kill lands in its middle

    archiver_process.start()
    publisher = asyncio.create_task(publish_all())
    # Kill once some items are decided, while a later one waits on the runner (received less
    # than half its answer time ago, so it cannot be decided before the kill lands).
    await decisions.wait(3, timeout=20)

    # The held move is received and cannot be answered before the kill lands.
    await wait_for(lambda: held_id in runner.received_at, timeout=20, what="the held move in flight")
    archiver_process.kill()
    held.set()
    sent_before_kill = {c.archive_id for c in runner.commands}
    decided_before_kill = {d.run_id for d in await decisions.all()}
    await publisher

    archiver_process.start()
    await decisions.wait(ITEMS, timeout=40)
    await wait_idle(js, timeout=20)
    final = await decisions.all()

    # At most one remote move per archive_id, whatever the kill interrupted.
    assert runner.per_archive and max(runner.per_archive.values()) == 1
    # Exactly one decision per work item.
    assert Counter(d.run_id for d in final) == Counter(w.run_id for w in works)
    # The kill really interrupted moves: some were sent and not decided before it.
    assert sent_before_kill - {f"{run_id}-1" for run_id in decided_before_kill}

    by_run = {d.run_id: d for d in final}
    for work in works:
        decision = by_run[work.run_id]
        state = await redis_client.hget(keys.session(work.session.key), "state")  # type: ignore[misc]
        if decision.action == "open_replacement":
            assert work.archive_id in runner.answered
            assert (state, decision.epoch) == (b"archived", 3)
            assert await redis_client.exists(keys.archive_copy(work.session.key, work.archive_id))
        else:
            assert decision.action == "retry_same_session"
            assert decision.detail is not None and "abc123" not in decision.detail
            assert state == b"active"

    await runner.stop()
    await decisions.close()
    await redis_client.aclose()
    await nc.close()
