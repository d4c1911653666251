"""`continuity simulate` and `continuity bench` take NATS_URL as the services do: a
comma-separated list of servers. Here the list names a server twice (by address and by name)
and a port where nothing listens, so a URL passed unsplit cannot connect at all."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from continuity.devstack.servers import NatsServer, RedisServer, free_port
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from services import registry
from tests.support import make_config, running


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, RedisServer]]:
    """Servers of this module's own: the benchmarks' records and consumers clash with no other."""
    base = tmp_path_factory.mktemp("server-lists")
    n, r = NatsServer(base / "nats"), RedisServer(base / "redis")
    n.start()
    r.start()
    yield n, r
    n.stop()
    r.stop()


def server_list(n: NatsServer) -> str:
    return f"nats://127.0.0.1:{n.port}, nats://localhost:{n.port},nats://127.0.0.1:{free_port()}"


async def run(*args: str, env: dict[str, str], timeout: float = 120) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuity", *args,
        env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out, err


@pytest.fixture(scope="module")
async def services(servers: tuple[NatsServer, RedisServer]) -> AsyncIterator[None]:
    n, r = servers
    config = make_config(n.url, r.url, runner_keys=DEMO_KEYS, archive_timeout_s=1.0, retry_backoff_s=0.1)
    async with contextlib.AsyncExitStack() as stack:
        for app in (
            registry.load("session-store"),
            registry.load("classifier"),
            registry.load("archiver"),
            registry.load("reconciliation"),
        ):
            await stack.enter_async_context(running(app, config))
        yield


async def test_simulate_takes_a_list_of_nats_servers(
    servers: tuple[NatsServer, RedisServer], services: None
) -> None:
    n, _ = servers
    code, out, err = await run(
        "simulate", "--events", "20", "--rate", "100", "--runners", "2", "--archive-timeout", "1",
        "--deadline", "10", "--keys", DEMO_KEYS_ENV, "--seed", "5", "--json", "--quiet",
        env={"NATS_URL": server_list(n)},
    )  # fmt: skip
    assert code == 0, err.decode()[-2000:]
    report = json.loads(out)
    assert report["ok"] is True and report["runs"] == 20


async def test_bench_sessions_takes_a_list_of_nats_servers(servers: tuple[NatsServer, RedisServer]) -> None:
    n, r = servers
    code, out, err = await run(
        "bench", "sessions", "--requests", "200", "--sessions", "50", "--rounds", "1", "--concurrency", "8",
        "--json", env={"NATS_URL": server_list(n), "REDIS_URL": r.url},
    )  # fmt: skip
    assert code == 0, err.decode()[-2000:]
    result = json.loads(out)
    assert result["decide_per_s"] > 0 and result["echo_per_s"] > 0 and result["bytes_per_session"] > 0


async def test_bench_pipeline_takes_a_list_of_nats_servers(servers: tuple[NatsServer, RedisServer]) -> None:
    n, r = servers
    code, out, err = await run(
        "bench", "pipeline", "--events", "100", "--rounds", "1", "--concurrency", "8", "--json",
        env={"NATS_URL": server_list(n), "REDIS_URL": r.url},
    )  # fmt: skip
    assert code == 0, err.decode()[-2000:]
    result = json.loads(out)
    assert result["events_per_s"] > 0 and sum(result["decisions"].values()) == 100
