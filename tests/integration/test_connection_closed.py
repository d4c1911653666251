"""A service whose NATS connection the server closed for good: `/healthz` answers 503 from then
on, the service drains, and its process exits non-zero so that the orchestrator restarts it.

The server closes a connection that publishes more than its `max_payload`; nats-py does not
reconnect after that. Two real ways are used: a publish on the service's own connection that
counts headers the client does not check, and a server whose limit an operator lowered (a
configuration reload) under a running service, which still knows the old one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from continuity.devstack.servers import NatsServer, RedisServer, free_port
from services import registry
from shared.contract import subjects
from shared.platform.runtime import EXIT_CONNECTION_LOST, serve
from shared.platform.service import Service
from shared.records import keys
from shared.records.outbox import OutboxEntry
from tests.support import ConfiguredNatsServer, ServiceProcess, http_status, make_config, wait_for

pytestmark = pytest.mark.asyncio


class HeldDrain:
    """A part added to the classifier whose drain waits for the test: what the service serves
    meanwhile can be observed."""

    def __init__(self) -> None:
        self.draining = asyncio.Event()
        self.release = asyncio.Event()

    async def start(self) -> None:
        return None

    async def drain(self, timeout: float) -> None:
        self.draining.set()
        await self.release.wait()

    def ready(self) -> bool:
        return True


def held_classifier() -> tuple[Service, HeldDrain]:
    service = registry.load("classifier")
    held = HeldDrain()
    service.add(held)
    return service, held


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def test_a_closed_connection_fails_healthz_and_the_service_returns_a_failure(
    nats_server: NatsServer, redis_server: RedisServer
) -> None:
    port = free_port()
    app, held = held_classifier()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(app, make_config(nats_server.url, redis_server.url, metrics_port=port), stop)
    )
    try:
        await wait_for(app.ready, what="classifier ready")
        assert await http_status(port, "/healthz") == 200
        assert app.ctx is not None
        nc = app.ctx.nc
        # nats-py checks the body against the limit, not the headers: the server refuses it
        # and closes the connection, and nats-py gives that connection up.
        await nc.publish("continuity.test.refused", b"x" * nc.max_payload, headers={"Pad": "1"})
        await wait_for(held.draining.is_set, what="the service to stop on the closed connection")
        assert nc.is_closed
        assert await http_status(port, "/healthz") == 503
        assert await http_status(port, "/readyz") == 503
        held.release.set()
        assert await asyncio.wait_for(task, 30) == EXIT_CONNECTION_LOST
    finally:
        held.release.set()
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_a_close_that_runs_no_callback_is_noticed(
    nats_server: NatsServer, redis_server: RedisServer
) -> None:
    """nats-py closes without callbacks on an error while it is connecting; the service watches
    the connection's state as well, so it stops all the same."""
    app, held = held_classifier()
    held.release.set()
    task = asyncio.create_task(serve(app, make_config(nats_server.url, redis_server.url), asyncio.Event()))
    await wait_for(app.ready, what="classifier ready")
    assert app.ctx is not None
    await app.ctx.nc._close(Client.CLOSED, do_cbs=False)
    assert await asyncio.wait_for(task, 30) == EXIT_CONNECTION_LOST


async def test_a_requested_stop_still_exits_zero(nats_server: NatsServer, redis_server: RedisServer) -> None:
    """The close that ends a drain is not a lost connection."""
    app, held = held_classifier()
    held.release.set()
    stop = asyncio.Event()
    task = asyncio.create_task(serve(app, make_config(nats_server.url, redis_server.url), stop))
    await wait_for(app.ready, what="classifier ready")
    stop.set()
    assert await asyncio.wait_for(task, 30) == 0


async def test_the_process_exits_non_zero_when_the_server_closes_its_connection(
    tmp_path: Path, redis_server: RedisServer, redis: aioredis.Redis
) -> None:
    server = ConfiguredNatsServer(tmp_path / "nats", "max_payload: 1048576")
    server.start()
    log_path = tmp_path / "classifier.log"
    port = free_port()
    process = ServiceProcess(
        "classifier", server.url, redis_server.url, log_path, CONTINUITY_METRICS_PORT=str(port)
    )
    outbox = keys.outbox(f"acme/conv-{uuid.uuid4().hex[:12]}/codex")
    try:
        process.start()
        await wait_for(lambda: _status(port, "/readyz", 200), timeout=30, what="classifier ready")
        assert await _status(port, "/healthz", 200)

        server.reload("max_payload: 65536")

        async def lowered() -> bool:
            nc = await nats.connect(server.url)
            try:
                return nc.max_payload == 65536
            finally:
                await nc.close()

        await wait_for(lowered, what="the lowered limit in force")
        # An entry the service's sweeper publishes: within the limit its connection was given,
        # over the one the server now enforces.
        entry = OutboxEntry(
            subject=subjects.decisions("r-closed"),
            msg_id=f"closed-{uuid.uuid4().hex}",
            payload=b"p" * 100_000,
            recorded_at=time.time() - 60,
        )
        await redis.hset(outbox, entry.msg_id, msgspec.json.encode(entry))  # type: ignore[misc]

        proc = process.proc
        assert proc is not None
        await wait_for(lambda: proc.poll() is not None, timeout=30, what="the process to exit")
        assert proc.returncode == EXIT_CONNECTION_LOST
        assert '"event":"nats_connection_lost"' in log_path.read_text()
    finally:
        process.stop()
        server.stop()
        await redis.delete(outbox)


async def _status(port: int, path: str, expected: int) -> bool:
    try:
        return await http_status(port, path) == expected
    except OSError:
        return False
