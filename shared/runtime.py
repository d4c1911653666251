"""The life of a service process: connect, serve, report readiness, drain on SIGTERM.

A service is an object with `name`, `start(ctx)`, `drain(timeout)` and `ready()`; `serve`
gives it connected NATS and Redis clients, streams that exist, `/metrics`, `/healthz`,
`/readyz`, JSON logs, and a graceful drain on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import ssl
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.js import JetStreamContext

from shared import logs, metrics, store, tls
from shared.bus.connection import connect
from shared.bus.streams import ensure_streams
from shared.config import Config

log = logs.Log("continuity.runtime")


@dataclass
class Context:
    config: Config
    nc: Client
    js: JetStreamContext
    redis: aioredis.Redis
    redis_tls: ssl.SSLContext | None = None
    """For a service's own Redis connections (`PipelinedRedis`): the context `redis` uses."""


class App(Protocol):
    name: str

    async def start(self, ctx: Context) -> None: ...

    async def drain(self, timeout: float) -> None: ...

    def ready(self) -> bool: ...


class _RedisHealth:
    """Pings Redis in the background, so readiness reflects the store without a request."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self.ok = False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(self._client.ping(), 2)  # type: ignore[misc]
                self.ok = True
            except Exception:
                self.ok = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2)


async def _connect_nats(config: Config, name: str, stop: asyncio.Event) -> Client | None:
    delay = 0.2
    nats_tls = tls.nats_context(config)
    while not stop.is_set():
        try:
            return await connect(config.nats_url, name, tls=nats_tls)
        except Exception as exc:
            log.warning("nats_connect_failed", error_type=type(exc).__name__, retry_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 5.0)
    return None


async def _ensure_streams(js: JetStreamContext, config: Config, stop: asyncio.Event) -> None:
    delay = 0.2
    while not stop.is_set():
        try:
            await ensure_streams(js, config.stream_replicas, config.duplicate_window_s)
            return
        except Exception as exc:
            log.warning("streams_unavailable", error_type=type(exc).__name__, retry_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 5.0)


async def serve(
    app: App, config: Config, stop: asyncio.Event | None = None, *, own_process: bool = False
) -> None:
    if stop is None:  # a process of its own: SIGTERM and SIGINT start the drain
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

    nc = await _connect_nats(config, f"continuity-{app.name}", stop)
    if nc is None:
        return
    js = nc.jetstream()
    await _ensure_streams(js, config, stop)
    redis_tls = tls.redis_context(config)
    client = store.connect(config.redis_url, ssl_context=redis_tls)
    health = _RedisHealth(client)
    health_task = asyncio.create_task(health.run(stop))

    def ready() -> bool:
        ok = nc.is_connected and health.ok and app.ready() and not stop.is_set()
        metrics.READY.set(1 if ok else 0)
        return ok

    server = metrics.MetricsServer(config.metrics_host, config.metrics_port, ready)
    await server.start()
    ctx = Context(config=config, nc=nc, js=js, redis=client, redis_tls=redis_tls)
    if not stop.is_set():
        await app.start(ctx)
        if own_process:
            # Long-lived objects made at start need no more collection, and a service allocates
            # many short-lived ones per request: fewer, cheaper collections cut tail latency.
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 100)
        log.info("service_started", metrics_port=server.port)
        await stop.wait()

    log.info("service_draining")
    metrics.READY.set(0)
    with contextlib.suppress(Exception):
        await app.drain(config.drain_timeout_s)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.drain(), config.drain_timeout_s)
    health_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await health_task
    await client.aclose()
    await server.stop()
    log.info("service_stopped")


def run(app: App, config: Config | None = None) -> None:
    """Run a service until SIGTERM; the entry point of `continuity serve <name>`."""
    config = config or Config.from_env()
    logs.setup(app.name, config.log_level)
    try:
        import uvloop
    except ImportError:  # a platform without uvloop runs on the standard loop
        asyncio.run(serve(app, config, own_process=True))
    else:
        uvloop.run(serve(app, config, own_process=True))
