"""Every Prometheus metric Continuity exports, and the HTTP server that serves them.

One module so that dashboards, alert rules and their tests have a single list to check against.
Label values are always closed codes (actions, reasons, classes, results): never a secret, a raw
upstream message or a compatibility generation.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from shared.platform import tracing

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

EVENTS = Counter(
    "continuity_events_total", "Runner events consumed, by event type and outcome.", ["type", "outcome"]
)
FAILURE_CLASSES = Counter(
    "continuity_failure_class_total", "Resume failures by closed failure class.", ["class"]
)
DECISIONS = Counter(
    "continuity_decisions_total", "Recovery decisions published, by action and reason.", ["action", "reason"]
)
DECISION_LATENCY = Histogram(
    "continuity_decision_latency_seconds",
    "Time from the event's publication in JetStream to the decision's publication.",
    buckets=_LATENCY_BUCKETS,
)
SESSION_DECISIONS = Counter(
    "continuity_session_decisions_total", "Resume decisions answered, by mode and reason.", ["mode", "reason"]
)
SESSION_COMMITS = Counter("continuity_session_commits_total", "Session commits, by result code.", ["result"])
ARCHIVES = Counter("continuity_archive_total", "Archive operations, by result.", ["result"])
ARCHIVE_DURATION = Histogram(
    "continuity_archive_duration_seconds",
    "Duration of an archive: remote move, local move and decision.",
    buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
RECONCILIATIONS_OPEN = Gauge(
    "continuity_reconciliations_open", "Reconciliation records waiting for an operator."
)
RECONCILIATION_OLDEST_OPEN = Gauge(
    "continuity_reconciliation_oldest_open_seconds",
    "Age of the oldest reconciliation record still waiting for an operator (0 when none).",
)
DEAD_LETTERS = Counter(
    "continuity_dead_letters_total", "Messages moved to a dead-letter subject, by reason.", ["reason"]
)
TENANCY_REFUSALS = Counter(
    "continuity_tenancy_refusals_total",
    "Requests and events refused because the runner may not act on the session or run, by runner"
    " (an issued runner's id, else `unregistered`) and closed reason.",
    ["runner", "reason"],
)
RUNNER_AUTH_FAILURES = Counter(
    "continuity_runner_auth_failures_total",
    "Connections the NATS servers refused (authentication failures they report on $SYS), by"
    " runner (an issued runner's id when the refused credentials are its, else `unregistered`).",
    ["runner"],
)
RECOVERY_DECISIONS = Counter(
    "continuity_recovery_decisions_total",
    "Decisions the recovery table made, by row, failure class and harness (4.6).",
    ["rule", "class", "harness"],
)
RUN_OUTCOMES = Counter(
    "continuity_run_outcomes_total",
    "Decided attempts that ended, by the row of their decision, its class, the harness and the "
    "final status (recovered, recovered_replaced, recovered_fresh, abandoned).",
    ["rule", "class", "harness", "status"],
)
RECOVERY_SECONDS = Histogram(
    "continuity_recovery_seconds",
    "From a run's first failure to its completed turn, by the row that recovered it.",
    ["rule", "class", "harness"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400),
)
RECOVERY_ATTEMPTS = Histogram(
    "continuity_recovery_attempts",
    "Attempts a recovered run used, by the row that recovered it.",
    ["rule", "class", "harness"],
    buckets=(1, 2, 3, 4, 5, 8),
)
REDIS_ERRORS = Counter("continuity_redis_errors_total", "Redis commands that failed.")
CONSUMER_PENDING = Gauge(
    "continuity_consumer_pending",
    "Messages not yet delivered plus delivered but unacknowledged, per durable consumer.",
    ["consumer"],
)
REQUESTS = Counter(
    "continuity_requests_total", "Requests answered, by endpoint and result code.", ["endpoint", "code"]
)
REQUEST_DURATION = Histogram(
    "continuity_request_duration_seconds",
    "Request handling time, by endpoint.",
    ["endpoint"],
    buckets=_LATENCY_BUCKETS,
)
OUTBOX_PENDING = Gauge(
    "continuity_outbox_pending", "Recorded messages not yet confirmed published by JetStream."
)
OUTBOX_SET_ASIDE = Counter(
    "continuity_outbox_set_aside_total",
    "Outbox entries too large ever to publish: moved to a dead letter and removed from the outbox.",
)
# The operator console (services/console): its HTTP pages. `page` is the route's name and
# `status` the HTTP status code: closed sets, never a run id or an operator's name.
CONSOLE_REQUESTS = Counter(
    "continuity_console_requests_total", "Console HTTP requests, by page and status.", ["page", "status"]
)
CONSOLE_REQUEST_DURATION = Histogram(
    "continuity_console_request_duration_seconds",
    "Console request handling time, by page.",
    ["page"],
    buckets=_LATENCY_BUCKETS,
)
CONSOLE_REFUSED = Counter(
    "continuity_console_refused_total",
    "Console requests refused for their identity, anti-forgery token or origin, by reason.",
    ["reason"],
)
CONSOLE_LIVE_STREAMS = Gauge("continuity_console_live_streams", "Pages receiving live decisions.")
TRACE_EXPORT_FAILURES = Counter(
    "continuity_trace_export_failures_total",
    "Spans the OTLP exporter could not deliver (tracing on: docs/operations/tracing.md).",
)
READY = Gauge("continuity_ready", "1 while the service is connected and consuming, else 0.")

# Streams and consumers left as they are because they differ from this service's configuration
# (shared/platform/bus/streams.py): 1 per differing setting, until `continuity streams apply`.
STREAM_DRIFT = Gauge(
    "continuity_stream_drift",
    "1 when a stored stream setting differs from the configured one, else 0.",
    ["stream", "field"],
)
CONSUMER_DRIFT = Gauge(
    "continuity_consumer_drift",
    "1 when a stored durable consumer setting differs from the configured one, else 0.",
    ["stream", "consumer", "field"],
)


@functools.lru_cache(maxsize=4096)
def labelled(metric: Any, *values: str) -> Any:
    """The child of `metric` for these label values, cached: `.labels()` locks and hashes on
    every call, which shows on hot paths. Label values are closed codes, so the cache is small."""
    return metric.labels(*values)


# prometheus_client checks and dispatches on every `inc` and `observe` (and walks a histogram's
# buckets in Python); the request path calls them several times per request. These bind, once,
# the value objects a child itself updates (its `_value`, or its `_sum` and `_buckets`), so the
# figures are the same: tests/unit/test_metric_writers.py compares them with `inc`/`observe`.


@functools.lru_cache(maxsize=4096)
def adder(metric: Any, *values: str) -> Callable[[], None]:
    """Adds one to the counter child of `metric` for these label values (or to `metric`)."""
    child = labelled(metric, *values) if values else metric
    inc = child._value.inc

    def add() -> None:
        inc(1)

    return add


@functools.lru_cache(maxsize=4096)
def observer(metric: Any, *values: str) -> Callable[..., None]:
    """Observes an amount into the histogram child of `metric` for these label values (or
    into `metric`); with tracing on, with the current (or a given) sampled trace id as its
    exemplar."""
    child = labelled(metric, *values) if values else metric
    add_sum = child._sum.inc
    bounds = tuple(child._upper_bounds)  # ascending, the last +Inf
    buckets = tuple(value.inc for value in child._buckets)
    last = len(buckets) - 1

    exemplified = [0.0] * len(buckets)
    """When each bucket last took an exemplar: Prometheus keeps one per bucket and scrape, so
    one a second per bucket is plenty, and spares the others `observe`'s slow path."""

    def observe(amount: float, trace_id: str | None = None) -> None:
        if amount != amount:  # NaN: counted in the sum only, as `observe` does
            add_sum(amount)
            return
        index = min(bisect.bisect_left(bounds, amount), last)
        if tracing.ENABLED:  # an exemplar: the slow bucket leads to an example trace
            now = time.monotonic()
            if now - exemplified[index] >= 1.0:
                trace_id = trace_id if trace_id is not None else tracing.sampled_trace_id()
                if trace_id:
                    exemplified[index] = now
                    child.observe(amount, {"trace_id": trace_id})
                    return
        add_sum(amount)
        # The first bucket whose bound is at least `amount`, as `observe` picks it.
        buckets[index](1)

    return observe


def _always() -> bool:
    return True


class MetricsServer:
    """Serves `/metrics`, `/healthz` (the process can still recover by itself: 503 once it
    cannot, so that the orchestrator restarts it) and `/readyz` (it can do work now)."""

    def __init__(
        self, host: str, port: int, ready: Callable[[], bool], alive: Callable[[], bool] = _always
    ) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._alive = alive
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            openmetrics_asked = False
            while (line := await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"accept" and b"application/openmetrics-text" in value:
                    openmetrics_asked = True
            parts = request_line.decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else "/"
            status, ctype, body = self._route(path, openmetrics_asked)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _route(self, path: str, openmetrics_asked: bool = False) -> tuple[str, str, bytes]:
        if path.startswith("/metrics"):
            if openmetrics_asked:  # the format that carries exemplars
                return "200 OK", openmetrics.CONTENT_TYPE_LATEST, openmetrics.generate_latest(REGISTRY)  # type: ignore[no-untyped-call]
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest()
        if path.startswith("/healthz"):
            if self._alive():
                return "200 OK", "text/plain", b"ok\n"
            return "503 Service Unavailable", "text/plain", b"not alive\n"
        if path.startswith("/readyz"):
            if self._ready():
                return "200 OK", "text/plain", b"ready\n"
            return "503 Service Unavailable", "text/plain", b"not ready\n"
        return "404 Not Found", "text/plain", b"not found\n"
