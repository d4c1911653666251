"""Tracing's switches and the trace context it trusts (shared/platform/tracing.py), without a
server: when the standard OTEL_* variables turn it on, what stops a start, which header values
are taken, and that it costs nothing when off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shared.platform import tracing

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        VALID.upper().replace("X", "x"),  # upper-case hex
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        "01" + VALID[2:],  # another version
        VALID + "-extra",
        VALID[:-1],
        VALID.replace("-", "_"),
        "",
        None,
        42,
        VALID + "\n",
    ],
)
def test_only_a_well_formed_version_00_traceparent_is_taken(value: object) -> None:
    assert tracing.valid(value) is None
    assert tracing.parent_of({"traceparent": value} if isinstance(value, str) else None) is None


def test_a_valid_traceparent_is_taken_from_headers() -> None:
    assert tracing.valid(VALID) == VALID
    assert tracing.parent_of({"traceparent": VALID, "Nats-Msg-Id": "x"}) == VALID


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
    ],
)
def test_the_standard_variables_turn_traces_on(env: dict[str, str], on: bool) -> None:
    assert tracing.check(env) is on


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ),
    ],
)
def test_what_cannot_be_exported_is_refused_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(tracing.TracingConfigError, match=named):
        tracing.check(env)


def test_the_traces_protocol_setting_wins_over_the_general_one() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    assert tracing.check(env) is True


def test_when_off_nothing_is_recorded_and_no_span_is_made() -> None:
    assert not tracing.ENABLED
    with tracing.span("x", parent=VALID, run_id="r") as span:
        assert span is None
        assert tracing.current() == "" and tracing.recorded() == "" and tracing.current_ids() is None
    assert tracing.start("x") is None
    assert tracing.headers("") == {} and tracing.headers(VALID, {"a": "b"}) == {
        "a": "b",
        "traceparent": VALID,
    }


def test_a_service_asked_for_an_exporter_it_lacks_stops_at_start() -> None:
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin"}
    done = subprocess.run(
        [sys.executable, "-m", "continuity", "serve", "classifier"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "OTEL_TRACES_EXPORTER" in done.stderr and "zipkin" not in done.stderr.split("OTEL_TRACES_EXPORTER")[0]
    )


# ---- sampling, the exporter's settings, and the OTLP encoding ------------------------------------

from shared.platform import metrics  # noqa: E402
from shared.platform.trace_export import ExportConfig, ExportConfigError, Exporter, encode_request  # noqa: E402


@pytest.mark.parametrize(
    ("sampler", "parent", "low_bits", "sampled"),
    [
        ("parentbased_always_on", None, 5, True),
        ("parentbased_always_on", False, 5, False),
        ("parentbased_always_off", True, 5, True),
        ("parentbased_always_off", None, 5, False),
        ("always_on", False, 5, True),
        ("always_off", True, 5, False),
        ("traceidratio", True, (1 << 63) + 1, False),  # ratio 0.5: the low 64 bits decide
        ("traceidratio", False, (1 << 63) - 1, True),
        ("parentbased_traceidratio", False, 1, False),
        ("parentbased_traceidratio", None, 1, True),
    ],
)
def test_the_standard_samplers(sampler: str, parent: bool | None, low_bits: int, sampled: bool) -> None:
    chosen = tracing.Sampler.from_env({"OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": "0.5"})
    assert chosen.sampled((7 << 64) | low_bits, parent) is sampled


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "SAMPLER_ARG"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
            "OTEL_TRACES_SAMPLER_ARG",
        ),
        ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, "OTEL_EXPORTER_OTLP_COMPRESSION"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "soon"}, "OTEL_BSP_SCHEDULE_DELAY"),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ],
)
def test_a_setting_that_cannot_be_honoured_stops_the_start(env: dict[str, str], named: str) -> None:
    with pytest.raises(tracing.TracingConfigError, match=named):
        tracing.check({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", **env})


def test_the_exporters_settings_from_the_standard_variables() -> None:
    plain = ExportConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    assert (plain.url, plain.timeout_s, plain.gzip, plain.schedule_delay_s) == (
        "http://c:4318/v1/traces",
        10.0,
        False,
        5.0,
    )
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c:443/custom",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20x, tenant=a",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_BSP_MAX_QUEUE_SIZE": "10",
    }
    chosen = ExportConfig.from_env(env)
    assert chosen.url == "https://c:443/custom" and chosen.timeout_s == 2.5 and chosen.gzip
    assert chosen.headers == (("authorization", "Bearer x"), ("tenant", "a"))
    assert (chosen.schedule_delay_s, chosen.max_queue) == (0.05, 10)
    with pytest.raises(ExportConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        ExportConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})


ATTRIBUTES = {
    "continuity.run_id": "run-1",
    "continuity.attempt": 2,
    "continuity.debt": -3,
    "x.ok": True,
    "x.f": 0.25,
}


def _finished(name: str, parent: int = 0, **attributes: object) -> tracing.Span:
    span = tracing.Span(
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, parent, True, True, name, "consumer"
    )
    span.attributes = dict(attributes)
    span.end_ns = span.start_ns + 1500
    return span


def test_the_encoding_reads_back_with_the_reference_classes() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    span = _finished(
        "continuity-classifier classifier",
        parent=0x00F067AA0BA902B7,
        **ATTRIBUTES,
    )
    span.links.append((0x11, 0x22))
    span.error = True
    request = ExportTraceServiceRequest()
    request.ParseFromString(encode_request([span], {"service.name": "continuity-classifier"}))
    (resource_spans,) = request.resource_spans
    assert resource_spans.resource.attributes[0].key == "service.name"
    assert resource_spans.resource.attributes[0].value.string_value == "continuity-classifier"
    (decoded,) = resource_spans.scope_spans[0].spans
    assert decoded.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert decoded.span_id.hex() == "b7ad6b7169203331" and decoded.parent_span_id.hex() == "00f067aa0ba902b7"
    assert decoded.name == "continuity-classifier classifier" and decoded.kind == 5
    assert decoded.end_time_unix_nano - decoded.start_time_unix_nano == 1500
    values = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in decoded.attributes}
    assert values == ATTRIBUTES
    assert [(link.trace_id.hex()[-2:], link.span_id.hex()[-2:]) for link in decoded.links] == [("11", "22")]
    assert decoded.status.code == 2


_count = metrics.TRACE_EXPORT_FAILURES.inc
"""What a service gives its exporter to count the spans it drops."""


def _failures() -> float:
    return float(metrics.TRACE_EXPORT_FAILURES._value.get())


def test_spans_a_collector_cannot_take_are_counted_and_a_full_queue_drops() -> None:
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nothing listens there once closed
    config = ExportConfig.from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_BSP_MAX_QUEUE_SIZE": "2",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
        }
    )
    exporter = Exporter(config, {"service.name": "t"}, dropped=_count)
    before = _failures()
    for i in range(3):
        exporter.add(_finished(f"s{i}"))
    assert _failures() == before + 1  # the third found the queue full
    exporter.shutdown(10)  # sends the two: refused, counted
    assert _failures() == before + 3


def test_the_light_receiver_reads_the_trace_ids_the_reference_decoder_reads() -> None:
    from continuity.devstack.otlp import decode, trace_ids

    spans = [_finished("a", **ATTRIBUTES), _finished("b", parent=7)]
    spans[1].trace_id = 0x1234
    body = encode_request(spans, {"service.name": "s"})
    assert (
        trace_ids(body)
        == [s.trace_id for s in decode(body)]
        == [f"{0x0AF7651916CD43DD8448EB211C80319C:032x}", f"{0x1234:032x}"]
    )


def test_batches_go_over_one_kept_connection_opened_again_when_the_collector_restarted() -> None:
    from continuity.devstack.otlp import Receiver

    first = Receiver().start()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": first.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
    }
    exporter = Exporter(ExportConfig.from_env(env), {"service.name": "t"}, dropped=_count)
    before = _failures()
    second = None
    try:
        for name in ("a", "b"):
            exporter.add(_finished(name))  # the second fills a batch: sent at once
        first.wait(lambda spans: len(spans) == 2, 10)
        for name in ("c", "d"):
            exporter.add(_finished(name))
        first.wait(lambda spans: len(spans) == 4, 10)
        assert first.requests == 2
        port = first.port
        first.stop()  # the kept connection is dead now
        second = Receiver(port).start()
        for name in ("e", "f"):
            exporter.add(_finished(name))
        second.wait(lambda spans: [s.name for s in spans] == ["e", "f"], 10)
        assert _failures() == before
    finally:
        exporter.shutdown(5)
        if second is not None:
            second.stop()


def test_headers_and_gzip_go_with_each_request() -> None:
    from continuity.devstack.otlp import Receiver

    receiver = Receiver().start()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t0ken,x-tenant=acme",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
    }
    exporter = Exporter(ExportConfig.from_env(env), {"service.name": "t"}, dropped=_count)
    try:
        exporter.add(_finished("zipped"))
        exporter.shutdown(5)
        assert [s.name for s in receiver.snapshot()] == ["zipped"]
        assert receiver.headers["authorization"] == "Bearer t0ken" and receiver.headers["x-tenant"] == "acme"
        assert receiver.headers["content-encoding"] == "gzip"
    finally:
        receiver.stop()


def test_the_default_endpoint_and_the_resource() -> None:
    assert ExportConfig.from_env({"OTEL_TRACES_EXPORTER": "otlp"}).url == "http://localhost:4318/v1/traces"
    assert tracing.resource("classifier", {})["service.name"] == "continuity-classifier"
    env = {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=rec%20overy,service.name=x"}
    chosen = tracing.resource("archiver", env)
    assert chosen["deployment.environment"] == "prod" and chosen["team"] == "rec overy"
    assert chosen["service.name"] == "x"
    assert tracing.resource("archiver", {**env, "OTEL_SERVICE_NAME": "y"})["service.name"] == "y"


def test_a_traced_service_loads_no_opentelemetry_package() -> None:
    code = (
        "import sys\n"
        "from shared.platform import tracing\n"
        "assert tracing.setup('classifier', {'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9'})\n"
        "with tracing.span('x', run_id='r'):\n"
        "    pass\n"
        "tracing.shutdown(1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_nats_server_a_local_server_runs_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    from continuity.devstack.servers import nats_server_binary

    monkeypatch.setenv("CONTINUITY_NATS_SERVER_BIN", "/opt/nats/nats-server-2.15")
    assert nats_server_binary() == "/opt/nats/nats-server-2.15"


@pytest.mark.parametrize(("sampler", "kept"), [("always_on", True), ("always_off", False)])
def test_a_record_keeps_the_context_of_a_sampled_trace_only(sampler: str, kept: bool) -> None:
    """`recorded` (what an outbox entry, a run or a reconciliation record keeps) is the work as
    it arrived, in a sampled trace; sampled out, nothing is exported to connect to, so records
    keep nothing, while a live publication still carries the current context."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_TRACES_SAMPLER": sampler}
    assert tracing.setup("unit", env)
    try:
        with tracing.span("handled", parent=VALID, kind="consumer") as begun:
            assert begun is not None and begun.sampled is kept
            assert tracing.current() == begun.traceparent()
            assert tracing.recorded() == (VALID if kept else "")
    finally:
        tracing.shutdown(0.1)
    assert tracing.recorded() == ""
