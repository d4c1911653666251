"""Finished spans to an OTLP/HTTP collector: a bounded queue, a thread that sends it in batches,
and the protobuf encoding of `ExportTraceServiceRequest` written out by hand (a few fields of a
stable format: far cheaper per span than building the generated message classes).

Configured by the standard variables: `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`, `_HEADERS`,
`_TIMEOUT`, `_COMPRESSION` (`gzip` or `none`), `_CERTIFICATE`, `_CLIENT_CERTIFICATE` and
`_CLIENT_KEY`; batching by `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE` and
`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`. A batch the collector refuses or
that cannot be sent is dropped and counted (`continuity_trace_export_failures_total`), as is a
span that finds the queue full: tracing never holds the work back.
"""

from __future__ import annotations

import collections
import functools
import gzip
import http.client
import ssl
import struct
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Span(Protocol):
    """What is exported of a finished span (`shared.platform.tracing.Span`, which builds the
    exporter and so is not imported here)."""

    @property
    def trace_id(self) -> int: ...
    @property
    def span_id(self) -> int: ...
    @property
    def parent_id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...
    @property
    def links(self) -> Sequence[tuple[int, int]]: ...
    @property
    def error(self) -> bool: ...


class ExportConfigError(ValueError):
    """An OTLP exporter setting that cannot be used (the message names the variable)."""


@dataclass(frozen=True)
class ExportConfig:
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 10.0
    gzip: bool = False
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    schedule_delay_s: float = 5.0
    max_queue: int = 2048
    max_batch: int = 512

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ExportConfig:
        def pick(name: str) -> str:
            return (
                env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}") or ""
            ).strip()

        url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if not url:
            base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
            url = base.rstrip("/") + "/v1/traces"
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ExportConfigError("OTEL_EXPORTER_OTLP_ENDPOINT: not an http:// or https:// URL")
        compression = pick("COMPRESSION").lower()
        if compression not in ("", "none", "gzip"):
            raise ExportConfigError("OTEL_EXPORTER_OTLP_COMPRESSION: gzip or none")
        return cls(
            url=url,
            headers=_headers(pick("HEADERS")),
            timeout_s=_millis(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 10_000, pick("TIMEOUT")) / 1000,
            gzip=compression == "gzip",
            ca_file=pick("CERTIFICATE") or None,
            client_cert=pick("CLIENT_CERTIFICATE") or None,
            client_key=pick("CLIENT_KEY") or None,
            schedule_delay_s=_millis(env, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
            max_queue=int(_millis(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)),
            max_batch=int(_millis(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
        )


def _millis(env: Mapping[str, str], name: str, default: int, given: str | None = None) -> float:
    raw = (given if given is not None else env.get(name, "")).strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ExportConfigError(f"{name}: not a number") from None
    if not value > 0:
        raise ExportConfigError(f"{name}: must be above 0")
    return value


def _headers(raw: str) -> tuple[tuple[str, str], ...]:
    """`key=value,key2=value2`, values URL-encoded (the variables' format)."""
    pairs = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ExportConfigError("OTEL_EXPORTER_OTLP_HEADERS: not key=value pairs")
        pairs.append((key.strip(), urllib.parse.unquote(value.strip())))
    return tuple(pairs)


class Exporter:
    """The queue of finished spans and the thread that sends it; `dropped(n)` counts the spans
    that never reach the collector (the caller's metric, `continuity_trace_export_failures_total`)."""

    def __init__(
        self, config: ExportConfig, resource: Mapping[str, str], *, dropped: Callable[[int], object]
    ) -> None:
        self._config = config
        self._dropped = dropped
        self._queue: collections.deque[Span] = collections.deque()
        self._wake = threading.Event()
        self._stopping = False
        self._prefix = _resource_prefix(resource)
        self._path = urllib.parse.urlsplit(config.url).path or "/"
        self._connection: http.client.HTTPConnection | None = None
        self._reused: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name="trace-export", daemon=True)
        self._thread.start()

    def add(self, span: Span) -> None:
        """Queue a finished span (from the event loop's thread: a deque append is atomic)."""
        queue = self._queue
        if len(queue) >= self._config.max_queue:
            self._dropped(1)
            return
        queue.append(span)
        if len(queue) == self._config.max_batch:
            self._wake.set()

    def shutdown(self, timeout_s: float) -> None:
        """Send what is queued, within `timeout_s`, and stop the thread."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._config.schedule_delay_s)
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._config.max_batch))]
                self._send(batch)
            if self._stopping:
                self._close()
                return

    def _send(self, batch: list[Span]) -> None:
        body = _field(1, self._prefix + _scope_spans(batch))  # resource_spans { resource, scope_spans }
        try:
            status = self._post(gzip.compress(body) if self._config.gzip else body)
        except (OSError, http.client.HTTPException):
            status = 0
        self._reused = self._connection  # a failure on it next time may be its age: retried once
        if not 200 <= status < 300:
            self._dropped(len(batch))

    def _post(self, body: bytes) -> int:
        """POST one batch over the connection kept from the last one (opened again after a
        failure: the collector may have closed it)."""
        headers = {"Content-Type": "application/x-protobuf", **dict(self._config.headers)}
        if self._config.gzip:
            headers["Content-Encoding"] = "gzip"
        for attempt in (1, 2):
            connection = self._connection or self._connect()
            kept = connection is self._reused
            try:
                connection.request("POST", self._path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                if response.will_close:
                    self._close()
                return response.status
            except (OSError, http.client.HTTPException):
                self._close()
                if attempt == 2 or not kept:
                    raise
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        url = urllib.parse.urlsplit(self._config.url)
        timeout = self._config.timeout_s
        connection: http.client.HTTPConnection
        if url.scheme == "https":
            context = ssl.create_default_context(cafile=self._config.ca_file)
            if self._config.client_cert:
                context.load_cert_chain(self._config.client_cert, self._config.client_key)
            connection = http.client.HTTPSConnection(
                url.hostname or "", url.port, timeout=timeout, context=context
            )
        else:
            connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout)
        self._connection = connection
        self._reused = None
        return connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = self._reused = None


# ---- OTLP protobuf, by hand ---------------------------------------------------------------------
# opentelemetry/proto/trace/v1/trace.proto and common/v1/common.proto: field numbers below.

_KIND = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack


_SMALL = tuple(bytes((i,)) for i in range(128))


def _varint(value: int) -> bytes:
    if value < 128:
        return _SMALL[value]
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _any_value(value: Any) -> bytes:
    if isinstance(value, bool):
        return _varint(2 << 3) + _varint(int(value))
    if isinstance(value, int):
        return _varint(3 << 3) + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return _varint(4 << 3 | 1) + _pack_double(value)
    return _field(1, str(value).encode())


_PAIRS: dict[tuple[int, str, str], bytes] = {}
"""Recent string attributes as encoded: closed codes and names repeat from span to span."""
_PAIRS_KEPT = 4096


def _pair(number: int, key: str, value: Any) -> bytes:
    return _field(number, _field(1, key.encode()) + _field(2, _any_value(value)))


def _attributes(number: int, attributes: Mapping[str, Any]) -> bytes:
    parts = []
    for key, value in attributes.items():
        if type(value) is str:
            cached = _PAIRS.get((number, key, value))
            if cached is None:
                if len(_PAIRS) >= _PAIRS_KEPT:
                    _PAIRS.clear()  # ids never repeat: start again rather than grow
                cached = _PAIRS[(number, key, value)] = _pair(number, key, value)
            parts.append(cached)
        else:
            parts.append(_pair(number, key, value))
    return b"".join(parts)


_TRACE_ID_TAG = _varint(1 << 3 | 2) + _varint(16)
_SPAN_ID_TAG = _varint(2 << 3 | 2) + _varint(8)
_PARENT_ID_TAG = _varint(4 << 3 | 2) + _varint(8)
_KIND_FIELDS = {kind: _varint(6 << 3) + _varint(number) for kind, number in _KIND.items()}
_START_TAG = _varint(7 << 3 | 1)
_END_TAG = _varint(8 << 3 | 1)
_ERROR_STATUS = _field(15, _varint(3 << 3) + _varint(2))  # status { code: ERROR }


@functools.lru_cache(maxsize=256)
def _name(name: str) -> bytes:
    return _field(5, name.encode())


def encode_span(span: Span) -> bytes:
    parts = [
        _TRACE_ID_TAG,
        span.trace_id.to_bytes(16, "big"),
        _SPAN_ID_TAG,
        span.span_id.to_bytes(8, "big"),
    ]
    if span.parent_id:
        parts += (_PARENT_ID_TAG, span.parent_id.to_bytes(8, "big"))
    parts += (
        _name(span.name),
        _KIND_FIELDS[span.kind],
        _START_TAG,
        _pack_fixed64(span.start_ns),
        _END_TAG,
        _pack_fixed64(span.end_ns),
    )
    if span.attributes:
        parts.append(_attributes(9, span.attributes))
    for trace_id, span_id in span.links:
        link = _field(1, trace_id.to_bytes(16, "big")) + _field(2, span_id.to_bytes(8, "big"))
        parts.append(_field(13, link))
    if span.error:
        parts.append(_ERROR_STATUS)
    return b"".join(parts)


def _scope_spans(spans: Sequence[Span]) -> bytes:
    scope = _field(1, _field(1, b"continuity"))  # scope { name }
    return _field(2, scope + b"".join(_field(2, encode_span(s)) for s in spans))


def _resource_prefix(resource: Mapping[str, str]) -> bytes:
    """`resource { attributes }`, the same for every batch of this process."""
    return _field(1, _attributes(1, resource))


def encode_request(spans: Sequence[Span], resource: Mapping[str, str]) -> bytes:
    """An `ExportTraceServiceRequest` of `spans` (one resource, one scope)."""
    return _field(1, _resource_prefix(resource) + _scope_spans(spans))
