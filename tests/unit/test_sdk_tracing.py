"""The Python SDK's trace context helpers (continuity_runner.tracing), without a server."""

from __future__ import annotations

import pytest
from continuity_runner import tracing
from opentelemetry.sdk.trace import TracerProvider

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        VALID.upper(),
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
        "ff" + VALID[2:],
        VALID + "-00",
        VALID[:-1],
        "",
        None,
        b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        VALID + "\n",
    ],
)
def test_only_a_version_00_traceparent_passes(value: object) -> None:
    assert tracing.is_traceparent(value) is False
    assert tracing.header_value({"traceparent": value} if isinstance(value, str) else None) is None


def test_new_and_child_traceparents() -> None:
    root = tracing.new_traceparent()
    assert tracing.is_traceparent(root) and root.endswith("-01")
    assert root != tracing.new_traceparent()
    child = tracing.child_traceparent(root)
    assert tracing.is_traceparent(child) and child != root
    assert tracing.trace_id_of(child) == tracing.trace_id_of(root) == root[3:35]
    with pytest.raises(ValueError):
        tracing.child_traceparent("nope")
    with pytest.raises(ValueError):
        tracing.trace_id_of(VALID.upper())


def test_from_opentelemetry_reads_the_current_span() -> None:
    assert tracing.from_opentelemetry() is None  # no span
    tracer = TracerProvider().get_tracer("runner")
    with tracer.start_as_current_span("turn") as span:
        ctx = span.get_span_context()
        flags = int(ctx.trace_flags)
        assert tracing.from_opentelemetry() == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"
    assert tracing.from_opentelemetry() is None
