"""W3C trace context (`traceparent`, version 00) on what a runner sends and receives.

The SDK depends on no tracing library: it carries plain strings. Every report and request it
sends has a `traceparent` header, chosen in this order: the call's own `traceparent`, else the
`trace_context` hook of `RunnerOptions` (wire it to your tracer; `from_opentelemetry` does that
for OpenTelemetry), else a new trace. Decisions and archive requests carry back a
`traceparent` of the trace they belong to (`Delivery.traceparent`, `incoming()` inside an
archive handler), so that the runner's own work can continue it.
"""

from __future__ import annotations

import contextvars
import re
import secrets

HEADER = "traceparent"

_SHAPE = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")

_incoming: contextvars.ContextVar[str | None] = contextvars.ContextVar("continuity_traceparent", default=None)


def is_traceparent(value: object) -> bool:
    """Whether `value` is a version-00 traceparent: lower-case hex, neither id all zeros."""
    return isinstance(value, str) and len(value) == 55 and _SHAPE.match(value) is not None


def new_traceparent() -> str:
    """The root of a new trace, sampled."""
    return f"00-{_nonzero(16)}-{_nonzero(8)}-01"


def child_traceparent(parent: str) -> str:
    """A new span of `parent`'s trace (same trace id and flags)."""
    if not is_traceparent(parent):
        raise ValueError("not a traceparent")
    return f"{parent[:36]}{_nonzero(8)}{parent[52:]}"


def trace_id_of(traceparent: str) -> str:
    """The 32-hex trace id of a traceparent."""
    if not is_traceparent(traceparent):
        raise ValueError("not a traceparent")
    return traceparent[3:35]


def from_opentelemetry() -> str | None:
    """The current OpenTelemetry span's traceparent (None without one, or without the
    `opentelemetry-api` package): pass it as `RunnerOptions(trace_context=from_opentelemetry)`."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    value = carrier.get(HEADER)
    return value if is_traceparent(value) else None


def incoming() -> str | None:
    """Inside an archive handler: the traceparent the archiver's request carried (None when it
    carried none, or a malformed one)."""
    return _incoming.get()


def header_value(headers: dict[str, str] | None) -> str | None:
    """The valid `traceparent` among received headers; a malformed one is None, never an error."""
    value = (headers or {}).get(HEADER)
    return value if is_traceparent(value) else None


def _nonzero(size: int) -> str:
    while True:
        value = secrets.token_hex(size)
        if value.strip("0"):
            return value
