"""A small OTLP/HTTP trace receiver: what the services export, decoded and kept in memory (and,
from the command line, appended to a file as JSON lines), for the tests, the benchmarks and a
local look at traces without a tracing backend.

    python -m continuity.devstack.otlp --port 4318 --out spans.jsonl

It takes `POST /v1/traces` with an `ExportTraceServiceRequest` in protobuf (gzip or not), as the
OpenTelemetry exporters send it, and answers 200 with an empty response.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import socket
import ssl
import sys
import threading
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()
    """(trace id, span id) of each linked span."""
    status: int = 0
    """0 unset, 1 ok, 2 error."""
    status_message: str = ""
    events: tuple[str, ...] = ()


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one OTLP/HTTP protobuf export request (decoded with the reference classes
    of `opentelemetry-proto`, a development dependency: an independent check of what the
    services encode)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        service=service,
                        kind=span.kind,
                        attributes=_attributes(span.attributes),
                        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                        status=span.status.code,
                        status_message=span.status.message,
                        events=tuple(event.name for event in span.events),
                    )
                )
    return spans


def trace_ids(body: bytes) -> list[str]:
    """The trace id of each span of an export request, read by walking the protobuf's framing
    only (resource_spans 1 > scope_spans 2 > spans 2 > trace_id 1): a receiver for benchmarks
    that must cost far less than the services it measures."""
    found: list[str] = []
    for resource_spans in _fields(body, 1):
        for scope_spans in _fields(resource_spans, 2):
            for span in _fields(scope_spans, 2):
                found.extend(value.hex() for value in _fields(span, 1))
    return found


def _fields(data: bytes, wanted: int) -> list[bytes]:
    """The length-delimited fields numbered `wanted` of one message."""
    out = []
    i, end = 0, len(data)
    while i < end:
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 2:
            size, i = _read_varint(data, i)
            if number == wanted:
                out.append(data[i : i + size])
            i += size
        elif wire == 0:
            _, i = _read_varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire} not expected")
    return out


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        which = item.value.WhichOneof("value")
        value = getattr(item.value, which) if which else None
        if which == "array_value":
            value = [getattr(v, v.WhichOneof("value")) for v in item.value.array_value.values]
        out[item.key] = value
    return out


def _handler(receiver: Receiver, light: bool) -> type[BaseHTTPRequestHandler]:
    """The request handler of `receiver`: spans POSTed to /v1/traces, decoded (or, `light`,
    only their trace ids) into it."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps the exporter's connection, as collectors do

        def setup(self) -> None:
            super().setup()
            receiver._open.add(self.connection)

        def finish(self) -> None:
            receiver._open.discard(self.connection)
            super().finish()

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/traces":
                self.send_error(404)
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.send_error(413)
                return
            receiver.headers = {k.lower(): v for k, v in self.headers.items()}
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            try:
                if light:
                    receiver._add_ids(trace_ids(body), len(body))
                else:
                    receiver._add(decode(body), len(body))
            except Exception:
                self.send_error(400)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1, in a thread of this process."""

    def __init__(
        self,
        port: int = 0,
        out: IO[str] | None = None,
        *,
        light: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.spans: list[ReceivedSpan] = []
        self.headers: dict[str, str] = {}
        """The headers of the last request."""
        self.trace_ids: list[str] = []
        """Light mode's record: the trace id of each span received."""
        self.requests = 0
        self.bodies = 0
        """Bytes received, decompressed."""
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._out = out
        self._open: set[socket.socket] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self, light))
        if tls is not None:  # an https:// collector
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """The value of `OTEL_EXPORTER_OTLP_ENDPOINT` that sends here."""
        return (
            f"{self.scheme}://localhost:{self.port}"
            if self.scheme == "https"
            else f"http://127.0.0.1:{self.port}"
        )

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop the connections kept open, as a stopped collector does."""
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self._open):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def _add(self, spans: list[ReceivedSpan], size: int) -> None:
        with self._changed:
            self.spans.extend(spans)
            self.requests += 1
            self.bodies += size
            if self._out is not None:
                for span in spans:
                    self._out.write(json.dumps(asdict(span)) + "\n")
                self._out.flush()
            self._changed.notify_all()

    def _add_ids(self, ids: list[str], size: int) -> None:
        """Light mode: only each span's trace id is kept (and written, one per line)."""
        with self._changed:
            self.trace_ids.extend(ids)
            self.requests += 1
            self.bodies += size
            if self._out is not None:
                self._out.write("".join(f"{trace_id}\n" for trace_id in ids))
                self._out.flush()
            self._changed.notify_all()

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait(self, until: Any, timeout: float) -> list[ReceivedSpan]:
        """Block until `until(spans)` holds (then the spans), or raise TimeoutError."""
        with self._changed:
            if self._changed.wait_for(lambda: until(self.spans), timeout):
                return list(self.spans)
        raise TimeoutError(f"spans not received within {timeout}s ({len(self.spans)} so far)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m continuity.devstack.otlp", description=__doc__)
    parser.add_argument("--port", type=int, default=4318)
    parser.add_argument("--out", type=Path, help="append each span as a JSON line to this file")
    parser.add_argument(
        "--light",
        action="store_true",
        help="keep only each span's trace id (one per line in --out), read without decoding the rest",
    )
    args = parser.parse_args(argv)
    try:
        if not args.light:
            import opentelemetry.proto  # noqa: F401
    except ImportError:
        print(
            "the receiver decodes spans with the opentelemetry-proto package: install it, or give --light",
            file=sys.stderr,
        )
        return 2
    out = args.out.open("a", encoding="utf-8") if args.out else None
    receiver = Receiver(args.port, out, light=args.light).start()
    print(f"listening on {receiver.endpoint}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
