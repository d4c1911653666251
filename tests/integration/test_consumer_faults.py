"""A consuming service through a NATS restart: its consumer keeps (or binds again) its place
when NATS is back, and it decides what was published before and after."""

from __future__ import annotations

import nats
import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import subjects
from tests.support import Bus, make_config, new_runner_id, resume_failed, running, wait_for

pytestmark = pytest.mark.asyncio


async def test_classifier_rebinds_after_a_nats_restart(fresh_servers: tuple[NatsServer, RedisServer]) -> None:
    n, r = fresh_servers
    app = registry.load("classifier")
    async with running(app, make_config(n.url, r.url)):
        runner = new_runner_id()
        nc = await nats.connect(n.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        bus = Bus(nc.jetstream())
        before = resume_failed(runner)
        await bus.settled(await bus.publish(before))

        n.stop()
        n.start()  # same store: the streams and the durable consumer survive
        await wait_for(lambda: nc.is_connected, timeout=30, what="the runner reconnected")
        await wait_for(app.ready, timeout=30, what="the consumer bound")

        after = resume_failed(runner)
        seq: list[int] = []

        async def published() -> bool:  # JetStream answers again once it has recovered its streams
            try:
                seq.append(await bus.publish(after, msg_id=after.event_id))
                return True
            except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
                return False

        await wait_for(published, timeout=30, what="JetStream accepting events again")
        await bus.settled(seq[-1], timeout=20)
        decided = {d["run_id"]: d["action"] for d in await bus.decisions(runner)}
        assert decided == {before.run_id: "retry_same_session", after.run_id: "retry_same_session"}
        await nc.close()


async def test_classifier_creates_its_consumer_again_when_it_is_deleted(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, r = fresh_servers
    app = registry.load("classifier")
    async with running(app, make_config(n.url, r.url)):
        runner = new_runner_id()
        nc = await nats.connect(n.url)
        bus = Bus(nc.jetstream())
        before = resume_failed(runner)
        await bus.settled(await bus.publish(before))

        await bus.js.delete_consumer(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
        after = resume_failed(runner)
        await bus.publish(after)

        async def decided_both() -> bool:
            return {d["run_id"] for d in await bus.decisions(runner)} == {before.run_id, after.run_id}

        # Its pull request goes unanswered: it binds again, creating the consumer, which
        # delivers the stream from the start; the event decided before is not decided twice.
        await wait_for(decided_both, timeout=30, what="the event after the deletion decided")
        runs = sorted(d["run_id"] for d in await bus.decisions(runner))
        assert runs == sorted([before.run_id, after.run_id])
        await nc.close()
