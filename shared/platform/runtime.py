"""The life of a service process: connect, serve, report readiness, drain on SIGTERM.

`serve` runs a `shared.platform.service.Service` (made from the spec its package describes):
it gives it connected NATS and Redis clients (no Redis for a service whose spec says it keeps
nothing there: `ServiceSpec.stores`), streams that exist, `/metrics`, `/healthz`,
`/readyz`, JSON logs, and a graceful drain on SIGTERM or SIGINT.

A NATS connection that nats-py closed for good (a protocol error from the server) is never
left behind: `/healthz` answers 503 from then on, the service drains what it can, and the
process exits with `EXIT_CONNECTION_LOST`, so that the orchestrator starts a new one. Redis
needs no such care: the store's client connects again on the next command after a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from shared.platform import logs, metrics, tls, tracing
from shared.platform.bus.connection import Login, Stopped, connect
from shared.platform.bus.streams import StreamLimits, ensure_stream, ensure_streams
from shared.platform.config import Config, ConfigError
from shared.platform.redis import Redis
from shared.platform.service import Context as Context  # a service's `build` takes it from here too
from shared.platform.service import Service

log = logs.Log("continuity.runtime")
T = TypeVar("T")

EXIT_CONFIGURATION = 2
"""The exit code of a service stopped before NATS accepted its credentials, as of a bad configuration."""
EXIT_CONNECTION_LOST = 3
"""The exit code of a service whose NATS connection was closed under it (2 is a bad configuration)."""
CLOSED_POLL_S = 0.5
"""How often the connection's state is looked at, for a close that ran no callback."""


class _RedisHealth:
    """Checks Redis in the background (every slot answers, `Redis.ready`), so readiness
    reflects the store without a request."""

    def __init__(self, client: Redis) -> None:
        self._client = client
        self.ok = False

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                self.ok = await asyncio.wait_for(self._client.ready(), 2)
            except Exception:
                self.ok = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 2)


class _ConnectionWatch:
    """Turns a NATS connection closed under a running service into a failed stop."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self.lost = False

    async def closed(self) -> None:
        """nats-py's `closed_cb`; it also fires for the close that ends a drain, which is no loss."""
        if not self._stop.is_set():
            self.lose()

    def lose(self) -> None:
        if not self.lost:
            log.error("nats_connection_lost")
        self.lost = True
        metrics.READY.set(0)
        self._stop.set()

    async def run(self, nc: Client) -> None:
        # The callback is the last step of nats-py's close, and nats-py has paths that close
        # without callbacks (an error while it is connecting): the state itself is watched too.
        while not self._stop.is_set():
            if nc.is_closed:
                self.lose()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), CLOSED_POLL_S)


async def _retrying(
    attempt: Callable[[], Awaitable[T]],
    stop: asyncio.Event,
    failed: str,
    *,
    fatal: tuple[type[Exception], ...] = (),
) -> T | None:
    """`attempt()` again after each failure (logged as `failed`), waiting 0.2 s, then twice as
    long each time up to 5 s, until it succeeds (its result) or `stop` is set (None). A
    `fatal` error is raised at once: no retry can mend it."""
    delay = 0.2
    while not stop.is_set():
        try:
            return await attempt()
        except fatal:
            raise
        except Exception as exc:
            log.warning(failed, error_type=type(exc).__name__, retry_in_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 5.0)
    return None


async def _connect_nats(
    config: Config, service: str, stop: asyncio.Event, watch: _ConnectionWatch, login: Login
) -> Client | None:
    """The connection, or None when `stop` came first: nats-py tries the servers until one
    accepts, and only `stop` ends that wait (a SIGTERM must not wait for a server that keeps
    refusing the credentials)."""
    nats_tls = tls.nats_context(config)

    async def attempt() -> Client:
        return await connect(
            config.nats_url,
            f"continuity-{service}",
            on_closed=watch.closed,
            nkeys_seed=config.nats_nkey_seed_file,
            user_credentials=config.nats_creds_file,
            inbox_prefix=config.inbox_prefix(service),
            tls=nats_tls,
            stop=stop,
            login=login,
        )

    try:
        return await _retrying(attempt, stop, "nats_connect_failed", fatal=(Stopped,))
    except Stopped:
        return None


async def _connect_redis(config: Config, stop: asyncio.Event, waits: bool) -> Redis | None:
    """The store's client, once the server has said whether it is a Redis Cluster (and, when the
    service `waits`, that it can do what CONTINUITY_REDIS_WAIT_* asks)."""
    client = Redis.from_config(config, waits=waits)

    async def attempt() -> Redis:
        await client.connect()
        return client

    try:
        connected = await _retrying(attempt, stop, "redis_connect_failed", fatal=(ConfigError,))
    except ConfigError:
        await client.aclose()
        raise
    if connected is None:  # stopped before it connected
        await client.aclose()
    return connected


async def _ensure_streams(
    js: JetStreamContext,
    config: Config,
    stop: asyncio.Event,
    own: tuple[Callable[[Config], StreamConfig], ...],
) -> None:
    async def attempt() -> None:
        await ensure_streams(js, config.stream_replicas, config.duplicate_window_s, StreamLimits.of(config))
        for make in own:  # the service's own streams (its spec's `streams`)
            await ensure_stream(js, make(config))

    await _retrying(attempt, stop, "streams_unavailable")


def _stopped_by_signals() -> asyncio.Event:
    """The stop of a process of its own: SIGTERM and SIGINT start the drain."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop


def _never_connected(login: Login) -> int:
    """The exit code of a process stopped before NATS accepted its connection."""
    if login.refused:
        # One line that says why this process never served, for whoever reads its end.
        log.error(
            "service_stopped",
            exit_code=EXIT_CONFIGURATION,
            cause="nats_authorization_violation",
            detail="stopped before NATS accepted the credentials of NATS_URL "
            "(and CONTINUITY_NATS_PASSWORD_FILE, or CONTINUITY_NATS_NKEY_SEED_FILE or _CREDS_FILE)",
        )
        return EXIT_CONFIGURATION
    log.info("service_stopped", before="connected")
    return 0


async def _drain(
    service: Service,
    config: Config,
    nc: Client,
    client: Redis | None,
    server: metrics.MetricsServer,
    tasks: tuple[asyncio.Task[None] | None, ...],
) -> None:
    """The service's parts, then the connection, the background tasks, Redis, the metrics
    server and the traces still buffered."""
    log.info("service_draining")
    metrics.READY.set(0)
    # CONTINUITY_DRAIN_TIMEOUT_S bounds the whole drain: the parts share it, and the
    # connection's own drain gets what they left (at least a second to flush and close).
    deadline = time.monotonic() + config.drain_timeout_s
    with contextlib.suppress(Exception):
        await service.drain(config.drain_timeout_s)
    if not nc.is_closed:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.drain(), max(deadline - time.monotonic(), 1.0))
    for task in tasks:
        if task is None:
            continue
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if client is not None:
        await client.aclose()
    await server.stop()
    tracing.shutdown(max(deadline - time.monotonic(), 1.0))  # what is buffered goes out


async def serve(
    service: Service, config: Config, stop: asyncio.Event | None = None, *, own_process: bool = False
) -> int:
    """Serve until `stop` (or SIGTERM); returns the process's exit code: 0 after a requested
    stop, `EXIT_CONNECTION_LOST` when the NATS connection was closed under the service."""
    if stop is None:
        stop = _stopped_by_signals()
    watch = _ConnectionWatch(stop)
    login = Login()
    nc = await _connect_nats(config, service.name, stop, watch, login)
    if nc is None:
        return _never_connected(login)
    watch_task = asyncio.create_task(watch.run(nc))
    js = nc.jetstream()
    await _ensure_streams(js, config, stop, service.spec.streams)
    # A service that keeps nothing in Redis (the console) neither connects nor needs REDIS_URL.
    try:
        client = (
            await _connect_redis(config, stop, service.spec.waits_for_redis) if service.spec.stores else None
        )
    except ConfigError as err:  # the server cannot do what is asked (the message names no secret)
        await nc.close()
        log.error("service_stopped", exit_code=EXIT_CONFIGURATION, cause="redis", detail=str(err))
        return EXIT_CONFIGURATION
    if client is None and service.spec.stores:
        await nc.close()
        return 0
    health = _RedisHealth(client) if client is not None else None
    health_task = asyncio.create_task(health.run(stop)) if health is not None else None

    def ready() -> bool:
        store_ok = health is None or health.ok
        ok = nc.is_connected and store_ok and service.ready() and not stop.is_set()
        metrics.READY.set(1 if ok else 0)
        return ok

    def alive() -> bool:
        return not watch.lost and not (nc.is_closed and not stop.is_set())

    server = metrics.MetricsServer(config.metrics_host, config.metrics_port, ready, alive)
    await server.start()
    ctx = Context(config=config, nc=nc, js=js, store=client)
    if not stop.is_set():
        await service.start(ctx)
        if own_process:
            # Long-lived objects made at start need no more collection, and a service allocates
            # many short-lived ones per request: fewer, cheaper collections cut tail latency.
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 100)
        log.info("service_started", metrics_port=server.port)
        await stop.wait()

    await _drain(service, config, nc, client, server, (health_task, watch_task))
    if watch.lost:
        log.error("service_stopped", exit_code=EXIT_CONNECTION_LOST)
        return EXIT_CONNECTION_LOST
    log.info("service_stopped")
    return 0


def run(service: Service, config: Config | None = None) -> None:
    """Run a service until SIGTERM; the entry point of `continuity serve <name>`."""
    config = config or Config.from_env()
    logs.setup(service.name, config.log_level)
    # Off unless the OTEL_* variables turn it on.
    tracing.setup(service.name, dropped=metrics.TRACE_EXPORT_FAILURES.inc)
    try:
        import uvloop
    except ImportError:  # a platform without uvloop runs on the standard loop
        code = asyncio.run(serve(service, config, own_process=True))
    else:
        code = uvloop.run(serve(service, config, own_process=True))
    if code:
        raise SystemExit(code)
