"""Fixtures of the tests of finished runs' history (contract 9.14): a client of the test's
Redis, and the classifier and reconciliation services with a linger of a second, so that a run
that ends leaves Redis within the test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract.runs import RunEntry
from shared.contract.sessions import SessionRef
from shared.platform.redis import Redis
from tests.support import make_config, running
from tests.support.runner import KEYS

LINGER_S = 1.0


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis(redis_server.url)
    await client.connect()
    yield client
    await client.aclose()


@pytest.fixture(scope="module")
async def services(nats_server: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(nats_server.url, redis_server.url, runner_keys=KEYS, history_linger_s=LINGER_S)
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation", sweep_interval_s=0.2), config),
        running(registry.load("session-store"), config),  # `runs explain` reads the session
    ):
        yield nats_server.url


def listed_entry(
    run_id: str, status: str, at: str, session: SessionRef, runner_id: str = "runner-a"
) -> RunEntry:
    """A finished run as the runs index and the stream's listing hold it."""
    return RunEntry(
        run_id=run_id,
        runner_id=runner_id,
        session=session,
        attempt=1,
        status=status,  # type: ignore[arg-type]
        action="retry_same_session",
        reason="native_session_interrupted",
        decision_id=f"d-{run_id}",
        updated_at=at,
    )
