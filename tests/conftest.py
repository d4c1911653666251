"""Fixtures: real NATS (JetStream) and Redis servers on free ports, and services run in-process
against them. Servers are the same launchers `continuity up` uses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from continuity.devstack.servers import NatsServer, RedisServer
from shared.contract.client import ContinuityClient
from shared.platform.config import Config
from tests.support import make_config

SYSTEM_TESTS = (
    "tests/deploy/",
    "tests/integration/console/test_console_browser.py",
    "tests/integration/test_bench_memory.py",
    "tests/integration/test_bench_pipeline.py",
    "tests/integration/test_bench_replay.py",
    "tests/integration/test_bench_scale.py",
    "tests/integration/test_bench_tenancy.py",
    "tests/integration/test_bench_tracing.py",
    "tests/integration/test_cluster_readiness.py",
    "tests/integration/test_cluster_services.py",
    "tests/integration/test_harness_package.py",
    "tests/integration/test_install.py",
    "tests/integration/test_quota_bench.py",
    "tests/integration/test_redis_cluster.py",
    "tests/integration/test_redis_durability.py",
    "tests/integration/test_runners_cli.py",
    "tests/integration/test_sdk_python_package.py",
    "tests/integration/test_session_wait.py",
    "tests/integration/test_simulate.py",
    "tests/integration/test_stream_drift.py",
    "tests/integration/test_tenancy_property.py",
    "tests/integration/test_up.py",
    "tests/integration/test_up_front_door.py",
    "tests/integration/test_wire_fuzz.py",
    "tests/security/",
)
"""The system tests: built packages in empty environments, whole stacks as processes, clustered,
replicated and authorized servers, the browser, the benches, and the longest fuzz and property
runs. `make test` leaves them to `make test-system`, so that each
stays within ten minutes here; CI runs both."""

OPERATOR_TESTS = (
    "tests/integration/console/",
    "tests/integration/test_cli_errors.py",
    "tests/integration/test_compatibility_components.py",
    "tests/integration/test_console_trace_link.py",
    "tests/integration/test_explanations.py",
    "tests/integration/test_finding_runs.py",
    "tests/integration/test_operator_cli.py",
    "tests/integration/test_server_lists.py",
    "tests/integration/test_sessions_cli.py",
)
"""The operators' tools: the `continuity` commands run as processes, and the console, against
services in-process. `make test-operators` runs them (CI too), so that `make test` stays within
ten minutes here."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        where = Path(str(item.path)).relative_to(root).as_posix()
        if where.startswith(SYSTEM_TESTS):
            item.add_marker(pytest.mark.system)
        elif where.startswith(OPERATOR_TESTS):
            item.add_marker(pytest.mark.operators)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fresh_servers(tmp_path: Path) -> Iterator[tuple[NatsServer, RedisServer]]:
    """Servers of a test's own, for tests that stop and restart them."""
    n, r = NatsServer(tmp_path / "nats"), RedisServer(tmp_path / "redis")
    n.start()
    r.start()
    yield n, r
    n.stop()
    r.stop()


@pytest.fixture
def config(nats_server: NatsServer, redis_server: RedisServer) -> Config:
    return make_config(nats_server.url, redis_server.url)


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
def client(nc: Client) -> ContinuityClient:
    return ContinuityClient(nc)
