"""The span exporter: OTLP over HTTP/protobuf (configured by the standard `OTEL_EXPORTER_OTLP_*`
variables), counting what it could not deliver. The SDK's own log lines about a failed export
can quote the endpoint's answer, so they are silenced (`logs.setup`) and counted instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from shared.platform import metrics


class CountingExporter(SpanExporter):
    """Another exporter, with `continuity_trace_export_failures_total` counting the spans it
    failed to deliver."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner

    @classmethod
    def otlp(cls) -> CountingExporter:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls(OTLPSpanExporter())

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            metrics.TRACE_EXPORT_FAILURES.inc(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        flushed: Any = self._inner.force_flush(timeout_millis)
        return bool(flushed)
