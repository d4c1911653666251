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
