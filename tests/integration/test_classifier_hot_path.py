"""What the classifier reads of a run before deciding it, against a real classifier, NATS and
Redis: a later attempt reads the run's previous decision (its failure is what followed that
decision, counted `failed`, contract 4.6); a first report reads it only for a run already
indexed, and counts nothing as having followed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import nats
import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import ErrorInfo, HarnessInfo, ResumeFailed
from shared.platform import metrics
from tests.support import KEYS, Bus, make_config, resume_failed, running

pytestmark = pytest.mark.asyncio

TRANSPORT = ErrorInfo(type="transport", code="socket_closed")
HARNESS = HarnessInfo(name="claude-code", version="2.1.332")
FAILED = ("4.4.9", "unclassified", "claude-code", "failed")


@pytest.fixture
async def nats_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    server = NatsServer(tmp_path_factory.mktemp("classifier-hot-nats"))
    server.start()
    yield server.url
    server.stop()


def failed_count() -> float:
    return float(metrics.RUN_OUTCOMES.labels(*FAILED)._value.get())


def report(runner: str, attempt: int, first: ResumeFailed | None = None) -> ResumeFailed:
    ev = resume_failed(
        runner,
        session=first.session if first is not None else None,
        run_id=first.run_id if first is not None else None,
        attempt=attempt,
        error=TRANSPORT,
    )
    ev.harness = HARNESS
    return ev


async def test_a_later_attempt_counts_the_decision_before_it_as_failed(
    nats_url: str, redis_server: RedisServer
) -> None:
    config = make_config(nats_url, redis_server.url, runner_keys=KEYS)
    runner = f"r{uuid.uuid4().hex[:10]}"
    async with running(registry.load("classifier"), config):
        nc = await nats.connect(nats_url)
        bus = Bus(nc.jetstream())
        try:
            first = report(runner, 1)
            await bus.settled(await bus.publish(first, msg_id=first.event_id))
            before = failed_count()
            # A copy of the first report (another event id): a duplicate, nothing followed.
            copy = report(runner, 1, first)
            await bus.settled(await bus.publish(copy, msg_id=copy.event_id))
            assert failed_count() == before
            # The second attempt's failure is what followed the first decision.
            second = report(runner, 2, first)
            await bus.settled(await bus.publish(second, msg_id=second.event_id))
            assert failed_count() == before + 1
        finally:
            await nc.close()
