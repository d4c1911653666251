"""OpenTelemetry traces: off by default, turned on by the standard `OTEL_*` variables.

A runner starts or continues a trace with a W3C `traceparent` header on what it sends; each
service continues it through what it consumes and answers, through the work items and decisions
its outbox records (an entry keeps the `traceparent` of the work that recorded it, so the sweeper
publishing it after a crash still joins the trace), and the decision the runner receives
carries it back (contract 9.12).

Spans name closed codes, ids and outcomes: never a secret, a runner's free text or a
generation value. An exception is recorded by its type only (its message can quote upstream
text). When tracing is off every call here returns at once.

The spans are this module's own, lean objects (a span on the hot path costs a few
microseconds), sampled as the standard `OTEL_TRACES_SAMPLER` says and exported over OTLP/HTTP
by `trace_export`; W3C trace context is the only propagation.
"""

from __future__ import annotations

import contextvars
import os
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from shared.platform.trace_export import ExportConfig, ExportConfigError, Exporter

T = TypeVar("T")

HEADER = "traceparent"
"""The W3C trace-context header (version 00) on NATS messages, both ways."""

_TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")

ENABLED = False
"""Whether this process exports traces (`setup` found them turned on)."""

SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)

_TRACE_ID_LIMIT = (1 << 64) - 1
_random = random.Random()
_current: contextvars.ContextVar[Span | None] = contextvars.ContextVar("continuity_span", default=None)
_exporter: Exporter | None = None
_sampler: Sampler | None = None


class TracingConfigError(ValueError):
    """An `OTEL_*` setting this process cannot honour (the message names the variable)."""


class Span:
    """One unit of work in a trace. A span not sampled is still made (its ids go on to the
    next hop, whose parent-based sampler follows it) but holds no attributes and is never
    exported."""

    __slots__ = (
        "_recorded",
        "attributes",
        "end_ns",
        "error",
        "kind",
        "links",
        "name",
        "parent_id",
        "parent_sampled",
        "sampled",
        "span_id",
        "start_ns",
        "trace_id",
    )

    def __init__(
        self,
        trace_id: int,
        span_id: int,
        parent_id: int,
        parent_sampled: bool,
        sampled: bool,
        name: str,
        kind: str,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.parent_sampled = parent_sampled
        self.sampled = sampled
        self.name = name
        self.kind = kind
        self.start_ns = time.time_ns()
        self.end_ns = 0
        self.attributes: dict[str, Any] = {}
        self.links: list[tuple[int, int]] = []
        self.error = False
        self._recorded = ""

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"

    def parent_traceparent(self) -> str:
        """The context this span continues, or its own when it began its trace."""
        if not self._recorded:
            if not self.parent_id:
                self._recorded = self.traceparent()
            else:
                flags = "01" if self.parent_sampled else "00"
                self._recorded = f"00-{self.trace_id:032x}-{self.parent_id:016x}-{flags}"
        return self._recorded


class Sampler:
    """The standard samplers: `always_on`, `always_off`, `traceidratio` (by the trace id's low 64
    bits, as every OpenTelemetry SDK decides it) and their `parentbased_` forms, which follow a
    parent's decision and apply the root sampler only to a new trace."""

    def __init__(self, name: str, ratio: float) -> None:
        self.parent_based = name.startswith("parentbased_")
        root = name.removeprefix("parentbased_")
        self._bound = (
            _TRACE_ID_LIMIT + 1
            if root == "always_on"
            else 0
            if root == "always_off"
            else round(ratio * (_TRACE_ID_LIMIT + 1))
        )

    def sampled(self, trace_id: int, parent_sampled: bool | None) -> bool:
        if parent_sampled is not None and self.parent_based:
            return parent_sampled
        return (trace_id & _TRACE_ID_LIMIT) < self._bound

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Sampler:
        name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
        if name not in SAMPLERS:
            raise TracingConfigError(f"OTEL_TRACES_SAMPLER: one of {', '.join(SAMPLERS)}")
        raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        ratio = 1.0
        if raw and name.endswith("traceidratio"):
            try:
                ratio = float(raw)
            except ValueError:
                raise TracingConfigError("OTEL_TRACES_SAMPLER_ARG: not a number") from None
            if not 0.0 <= ratio <= 1.0:
                raise TracingConfigError("OTEL_TRACES_SAMPLER_ARG: between 0 and 1")
        return cls(name, ratio)


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


def _uncounted(spans: int) -> None:
    """A process without metrics (the simulator) does not count lost spans."""


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
    """`turned_on`, and every setting is one this process can honour (OTLP over HTTP/protobuf,
    a known sampler, well-formed numbers): a bad one stops the start."""
    on = turned_on(env)
    if on:
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = env.get(variable, "").strip()
            if protocol and protocol != "http/protobuf":
                raise TracingConfigError(f"{variable}: only http/protobuf is supported")
            if protocol:
                break
        Sampler.from_env(env)
        try:
            ExportConfig.from_env(env)
        except ExportConfigError as err:
            raise TracingConfigError(str(err)) from None
    return on


def resource(service: str, env: Mapping[str, str]) -> dict[str, str]:
    """The exported resource: `OTEL_RESOURCE_ATTRIBUTES`, then `service.name` (`OTEL_SERVICE_NAME`,
    else `continuity-<service>`)."""
    attributes = {}
    for item in filter(None, (part.strip() for part in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","))):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            attributes[key.strip()] = urllib.parse.unquote(value.strip())
    attributes["service.name"] = (
        env.get("OTEL_SERVICE_NAME") or attributes.get("service.name") or f"continuity-{service}"
    )
    attributes["telemetry.sdk.name"] = "continuity"
    return attributes


def setup(
    service: str, env: Mapping[str, str] | None = None, *, dropped: Callable[[int], object] = _uncounted
) -> bool:
    """Export this process's spans when the variables ask for it; returns whether they do.
    `dropped(n)` counts the spans the exporter could not deliver: a service's metric."""
    global ENABLED, _exporter, _sampler
    env = os.environ if env is None else env
    if not check(env):
        return False
    _sampler = Sampler.from_env(env)
    _exporter = Exporter(ExportConfig.from_env(env), resource(service, env), dropped=dropped)
    ENABLED = True
    return True


def shutdown(timeout_s: float = 5.0) -> None:
    """Export what is queued (bounded by `timeout_s`), then stop; part of the drain."""
    global ENABLED
    ENABLED = False
    if _exporter is not None:
        _exporter.shutdown(timeout_s)


def _parse(traceparent: str) -> tuple[int, int, bool]:
    """(trace id, span id, sampled) of a traceparent `valid` accepted."""
    return int(traceparent[3:35], 16), int(traceparent[36:52], 16), bool(int(traceparent[53:55], 16) & 1)


def _new_id(bits: int) -> int:
    while True:
        value = _random.getrandbits(bits)
        if value:
            return value


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
    if not ENABLED or _sampler is None:
        return None
    here = _current.get()
    parent_sampled: bool | None
    if parent is not None:
        trace_id, parent_id, parent_sampled = _parse(parent)
    elif here is not None:
        trace_id, parent_id, parent_sampled = here.trace_id, here.span_id, here.sampled
    else:
        trace_id, parent_id, parent_sampled = _new_id(128), 0, None
    sampled = _sampler.sampled(trace_id, parent_sampled)
    span = Span(trace_id, _new_id(64), parent_id, bool(parent_sampled), sampled, name, kind)
    if sampled:
        span.attributes = _clean(attributes)
        if named:
            span.attributes.update(named)
        if link_current and here is not None:
            span.links.append((here.trace_id, here.span_id))
    return span


def end(span: Span | None, *, outcome: str | None = None, error: BaseException | None = None) -> None:
    """End `span`, naming its outcome (a closed code) and, on failure, the error's type only."""
    if span is None:
        return
    span.end_ns = time.time_ns()
    if not span.sampled:
        return
    if outcome is not None:
        span.attributes["continuity.outcome"] = outcome
    if error is not None:
        span.attributes["error.type"] = type(error).__name__
        span.error = True
    if _exporter is not None:
        _exporter.add(span)


class span:
    """`start` as the current span for the block, ended after it: an exception ends it as an
    error (by type) and goes on. `named` attributes keep their names (`messaging.destination.name`);
    keyword ones are put under `continuity.`."""

    __slots__ = ("_span", "_token")

    def __init__(
        self,
        name: str,
        *,
        parent: str | None = None,
        kind: str = "internal",
        link_current: bool = False,
        named: Mapping[str, Any] | None = None,
        **attributes: Any,
    ) -> None:
        self._span = start(
            name, parent=parent, kind=kind, link_current=link_current, named=named, **attributes
        )
        self._token: contextvars.Token[Span | None] | None = None

    def __enter__(self) -> Span | None:
        if self._span is not None:
            self._token = _current.set(self._span)
        return self._span

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._span is None:
            return
        if self._token is not None:
            _current.reset(self._token)
        end(self._span, error=error)


async def within(begun: Span | None, pending: Awaitable[T]) -> T:
    """Await `pending` with `begun` as the current span (a handler's coroutine made earlier, so
    that what it records joins the span's trace)."""
    if begun is None:
        return await pending
    token = _current.set(begun)
    try:
        return await pending
    finally:
        _current.reset(token)


def annotate(**attributes: Any) -> None:
    """Add closed codes and ids to the current span (nothing when tracing is off)."""
    if not ENABLED:
        return
    here = _current.get()
    if here is not None and here.sampled:
        kept = here.attributes
        for key, value in attributes.items():
            if value is not None:
                kept[_name(key)] = value


def current() -> str:
    """The current span's traceparent, or "" (tracing off, or no span)."""
    if not ENABLED:
        return ""
    here = _current.get()
    return here.traceparent() if here is not None else ""


def current_sampled() -> bool:
    """Whether there is a current span and its trace is sampled (its spans exported)."""
    if not ENABLED:
        return False
    here = _current.get()
    return here is not None and here.sampled


def recorded() -> str:
    """The traceparent a record keeps (an outbox entry, a reconciliation or run record): the
    work as it arrived here, i.e. the parent of the current span, which lives in a process that
    already finished its part. A publication after this process died (the sweeper) then hangs
    from a span that was exported, and the trace stays connected. "" when tracing is off, and
    in a trace sampled out: none of its spans is exported, so there is nothing to connect, and
    the context would cost every record of every event its bytes (a live publication still
    carries the current context, `current`)."""
    if not ENABLED:
        return ""
    here = _current.get()
    return here.parent_traceparent() if here is not None and here.sampled else ""


def current_ids() -> tuple[str, str] | None:
    """The current (trace id, span id) in hex, for log lines; None without one."""
    if not ENABLED:
        return None
    here = _current.get()
    return (f"{here.trace_id:032x}", f"{here.span_id:016x}") if here is not None else None


def sampled_trace_id() -> str:
    """The current span's trace id when its trace is sampled (exported), else ""."""
    if not ENABLED:
        return ""
    here = _current.get()
    return f"{here.trace_id:032x}" if here is not None and here.sampled else ""


def trace_id_of(begun: Span | None) -> str:
    """`begun`'s trace id in hex when it is sampled, or "" (for an exemplar observed outside
    the span's block)."""
    return f"{begun.trace_id:032x}" if begun is not None and begun.sampled else ""


def headers(traceparent: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` plus the `traceparent` header when there is one to send."""
    out = dict(base or {})
    if traceparent:
        out[HEADER] = traceparent
    return out


_NAMES: dict[str, str] = {}
"""Attribute names as exported, by the keyword they are given as (a fixed set in the code)."""


def _name(key: str) -> str:
    name = _NAMES.get(key)
    if name is None:
        name = _NAMES[key] = key if "." in key else f"continuity.{key}"
    return name


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes with a value (None left out), under the `continuity.` prefix unless named."""
    return {_name(key): value for key, value in attributes.items() if value is not None}
