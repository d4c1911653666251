"""OpenTelemetry traces: off by default, turned on by the standard `OTEL_*` variables.

A runner starts or continues a trace with a W3C `traceparent` header on what it sends; each
service continues it through what it consumes and answers, through the work items and decisions
its outbox records (an entry keeps the `traceparent` of the work that recorded it, so the sweeper
publishing it after a crash still joins the trace), and the decision the runner receives
carries it back (contract 9.12).

Spans name closed codes, ids and outcomes: never a secret, a runner's free text or a
generation value. An exception is recorded by its type only (its message can quote upstream
text). When tracing is off every call here returns at once and nothing is imported from the SDK.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Awaitable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from opentelemetry.trace import Span

T = TypeVar("T")

HEADER = "traceparent"
"""The W3C trace-context header (version 00) on NATS messages, both ways."""

_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")

ENABLED = False
"""Whether this process exports traces (`setup` found them turned on)."""

_tracer: Any = None
_provider: Any = None


class TracingConfigError(ValueError):
    """An `OTEL_*` setting this process cannot honour (the message names the variable)."""


def valid(value: object) -> str | None:
    """`value` when it is a well-formed version-00 traceparent, else None: a header a runner
    controls is never trusted further than its shape."""
    if isinstance(value, str) and len(value) == 55 and _TRACEPARENT.match(value):
        return value
    return None


def parent_of(headers: Mapping[str, str] | None) -> str | None:
    """The valid traceparent among a message's headers, if any."""
    if not headers:
        return None
    return valid(headers.get(HEADER))


def turned_on(env: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for OTLP traces: `OTEL_TRACES_EXPORTER` names `otlp`,
    or it is unset and an OTLP endpoint is given; `OTEL_SDK_DISABLED=true` wins over both."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if exporters:
        unknown = [e for e in exporters if e not in ("otlp", "none")]
        if unknown:
            raise TracingConfigError("OTEL_TRACES_EXPORTER: only otlp (or none) is supported")
        return "otlp" in exporters
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def check(env: Mapping[str, str]) -> bool:
    """`turned_on`, and the protocol is one this process exports (OTLP over HTTP/protobuf)."""
    on = turned_on(env)
    if on:
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = env.get(variable, "").strip()
            if protocol and protocol != "http/protobuf":
                raise TracingConfigError(f"{variable}: only http/protobuf is supported")
            if protocol:
                break
    return on


def setup(service: str, env: Mapping[str, str] | None = None) -> bool:
    """Export this process's spans when the variables ask for it; returns whether they do.
    The service name is `OTEL_SERVICE_NAME`, else `continuity-<service>`; sampling follows
    `OTEL_TRACES_SAMPLER` (default: parent-based, always on); batching `OTEL_BSP_*`."""
    global ENABLED, _tracer, _provider
    env = os.environ if env is None else env
    if not check(env):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from shared.platform.trace_export import CountingExporter

    name = env.get("OTEL_SERVICE_NAME") or f"continuity-{service}"
    _provider = TracerProvider(resource=Resource.create({"service.name": name}))
    _provider.add_span_processor(BatchSpanProcessor(CountingExporter.otlp()))
    _tracer = _provider.get_tracer("continuity")
    ENABLED = True
    return True


def shutdown(timeout_s: float = 5.0) -> None:
    """Export what is buffered (bounded by `timeout_s`), then stop; part of the drain."""
    global ENABLED
    if _provider is None:
        return
    with contextlib.suppress(Exception):
        _provider.force_flush(int(timeout_s * 1000))
    with contextlib.suppress(Exception):
        _provider.shutdown()
    ENABLED = False


def _context_of(parent: str | None) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({HEADER: parent}) if parent else None


def start(
    name: str,
    *,
    parent: str | None = None,
    kind: str = "internal",
    link_current: bool = False,
    named: Mapping[str, Any] | None = None,
    **attributes: Any,
) -> Span | None:
    """A span begun now, child of `parent` (a traceparent) or of the current span, linked to the
    current span with `link_current`; None when tracing is off. The caller ends it with `end`."""
    if not ENABLED:
        return None
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind

    links = None
    if link_current and (here := trace.get_current_span().get_span_context()).is_valid:
        links = [Link(here)]
    span: Span = _tracer.start_span(
        name,
        context=_context_of(parent),
        kind=SpanKind[kind.upper()],
        links=links,
        attributes={**_clean(attributes), **(named or {})},
        record_exception=False,
        set_status_on_exception=False,
    )
    return span


def end(span: Span | None, *, outcome: str | None = None, error: BaseException | None = None) -> None:
    """End `span`, naming its outcome (a closed code) and, on failure, the error's type only."""
    if span is None:
        return
    if outcome is not None:
        span.set_attribute("continuity.outcome", outcome)
    if error is not None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", type(error).__name__)
        span.set_status(Status(StatusCode.ERROR))
    span.end()


@contextlib.contextmanager
def span(
    name: str,
    *,
    parent: str | None = None,
    kind: str = "internal",
    link_current: bool = False,
    **attributes: Any,
) -> Iterator[Span | None]:
    """`start` as the current span for the block, ended after it: an exception ends it as an
    error (by type) and goes on."""
    begun = start(name, parent=parent, kind=kind, link_current=link_current, **attributes)
    if begun is None:
        yield None
        return
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(begun))
    try:
        yield begun
    except BaseException as exc:
        end(begun, error=exc)
        raise
    else:
        end(begun)
    finally:
        context.detach(token)


async def within(begun: Span | None, pending: Awaitable[T]) -> T:
    """Await `pending` with `begun` as the current span (a handler's coroutine made earlier, so
    that what it records joins the span's trace)."""
    if begun is None:
        return await pending
    from opentelemetry import context, trace

    token = context.attach(trace.set_span_in_context(begun))
    try:
        return await pending
    finally:
        context.detach(token)


def annotate(**attributes: Any) -> None:
    """Add closed codes and ids to the current span (nothing when tracing is off)."""
    if not ENABLED:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(_clean(attributes))


def current() -> str:
    """The current span's traceparent, or "" (tracing off, or no span): what an outbox entry
    keeps so that its publication joins the trace of the work that recorded it."""
    if not ENABLED:
        return ""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def recorded() -> str:
    """The traceparent a record keeps (an outbox entry, a reconciliation or run record): the
    work as it arrived here, i.e. the parent of the current span, which lives in a process that
    already finished its part. A publication after this process died (the sweeper) then hangs
    from a span that was exported, and the trace stays connected. "" when tracing is off."""
    if not ENABLED:
        return ""
    from opentelemetry import trace

    span = trace.get_current_span()
    parent = getattr(span, "parent", None)  # the SDK's spans keep the context they continue
    ctx = parent if parent is not None and parent.is_valid else span.get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_ids() -> tuple[str, str] | None:
    """The current (trace id, span id) in hex, for log lines and exemplars; None without one."""
    if not ENABLED:
        return None
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def sampled_trace_id() -> str:
    """The current span's trace id when its trace is sampled (exported), else ""."""
    if not ENABLED:
        return ""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid and ctx.trace_flags.sampled else ""


def trace_id_of(begun: Span | None) -> str:
    """`begun`'s trace id in hex, or "" (for an exemplar observed outside the span's block)."""
    if begun is None:
        return ""
    ctx = begun.get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid and ctx.trace_flags.sampled else ""


def headers(traceparent: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` plus the `traceparent` header when there is one to send."""
    out = dict(base or {})
    if traceparent:
        out[HEADER] = traceparent
    return out


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes with a value (None left out), under the `continuity.` prefix unless named."""
    return {
        (key if "." in key else f"continuity.{key}"): value
        for key, value in attributes.items()
        if value is not None
    }
