"""One trace from a runner's report to its decision: the four services as processes with the
standard OTEL_* variables pointing at a real OTLP/HTTP receiver, and simulated runners (the
Python SDK) playing every scenario of sdk/scenarios.json, each run in a span of its own.

For every run: the services' spans are in the run's trace and connected to its span (each
span's parent was received), archive and reconciliation steps included; the decision the runner
receives carries that trace back; and no span holds a secret, a runner's free text or a
generation value. A classifier killed between recording a decision and publishing it leaves it
to another service's outbox sweeper, whose publication still joins the run's trace.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from continuity_runner import RunnerOptions, SessionRef, connect
from continuity_runner.tracing import is_traceparent, new_traceparent, trace_id_of

from continuity.devstack.otlp import ReceivedSpan, Receiver
from continuity.devstack.servers import NatsServer, RedisServer
from continuity.devstack.stack import Stack
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from continuity.tools.simulate.runner import GENERATION
from continuity.tools.simulate.scenarios import SCENARIOS
from shared.contract import subjects
from shared.records import keys
from tests.support import make_config
from tests.support.waiting import wait_for

pytestmark = pytest.mark.asyncio

SCENARIO_NAMES = [
    s["name"]
    for s in json.loads((Path(__file__).parents[2] / "sdk" / "scenarios.json").read_text())["scenarios"]
]
RUN_SPAN = "continuity-sim runner run"
RUNNERS_FREE_TEXT = (
    "websocket closed by peer",
    "connection reset by peer",
    "provider_attach_refused; native_runner",  # the disguised scenario's message
    "FAKE",  # every fake secret of the simulated archive output
    "env dump",
    "Permission denied",
)


def traced_env(receiver: Receiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "CONTINUITY_RUNNER_KEYS": DEMO_KEYS_ENV,
        "CONTINUITY_ARCHIVE_TIMEOUT_S": "3",
    }


class Traced:
    def __init__(self, root: Path) -> None:
        self.nats = NatsServer(root / "nats")
        self.redis = RedisServer(root / "redis")
        self.receiver = Receiver()
        self.root = root
        self.stack: Stack | None = None

    def start(self) -> None:
        self.nats.start()
        self.redis.start()
        self.receiver.start()
        self.stack = Stack(self.root, nats_url=self.nats.url, redis_url=self.redis.url)
        for name in ("session-store", "classifier", "archiver", "reconciliation"):
            self.stack.start_service(name, traced_env(self.receiver), log_path=self.root / f"{name}.log")
        assert self.stack.wait_ready(60)

    def stop(self) -> None:
        if self.stack is not None:
            self.stack.stop()
        self.receiver.stop()
        self.nats.stop()
        self.redis.stop()


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    lab = Traced(tmp_path_factory.mktemp("traces"))
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


async def simulate(lab: Traced, *args: str) -> None:
    """`continuity simulate`, traced as the services are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(traced_env(lab.receiver))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "continuity",
        "simulate",
        "--nats-url",
        lab.nats.url,
        "--keys",
        DEMO_KEYS_ENV,
        "-q",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, out.decode()[-3000:]


async def stream_headers(url: str, stream: str, subject: str | None = None) -> list[tuple[str, str | None]]:
    """(run_id, traceparent header) of every message of `stream` (on `subject`, if given)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        found = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            if subject is not None and msg.subject != subject:
                continue
            body = msgspec.json.decode(msg.data or b"{}")
            found.append((str(body.get("run_id")), (msg.headers or {}).get("traceparent")))
        return found
    finally:
        await nc.close()


async def decision_headers(url: str) -> list[tuple[str, str | None]]:
    """(run_id, traceparent header) of every message on the decisions stream."""
    return await stream_headers(url, subjects.DECISIONS_STREAM)


def scrape_exemplars(port: int, metric: str, *, openmetrics: bool = True) -> set[str]:
    """The trace ids of the exemplars on `metric`'s lines of a service's /metrics."""
    accept = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=5) as reply:
        text = reply.read().decode()
    found = re.findall(rf'^{metric}\{{[^}}]*\}} \S+ # \{{trace_id="([0-9a-f]{{32}})"\}}', text, re.M)
    return set(found)


def by_trace(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    traces: dict[str, list[ReceivedSpan]] = defaultdict(list)
    for span in spans:
        traces[span.trace_id].append(span)
    return traces


def disconnected(trace: list[ReceivedSpan]) -> list[str]:
    """The spans of `trace` whose parent is not in it, but for its one root."""
    ids = {s.span_id for s in trace}
    roots = [s for s in trace if not s.parent_span_id]
    loose = [f"{s.service}: {s.name}" for s in trace if s.parent_span_id and s.parent_span_id not in ids]
    return loose + ([f"{len(roots)} roots"] if len(roots) != 1 else [])


def forbidden_in(spans: list[ReceivedSpan], values: tuple[str, ...]) -> list[str]:
    found = []
    for span in spans:
        texts = [span.name, span.status_message, *span.events, *map(str, span.attributes.values())]
        for value in values:
            if any(value in text for text in texts):
                found.append(f"{span.service} {span.name}: {value!r}")
    return found


def secrets_of_the_lab() -> tuple[str, ...]:
    import base64

    return (
        GENERATION,
        *RUNNERS_FREE_TEXT,
        *(base64.b64encode(key).decode() for key in DEMO_KEYS.values()),
        *(key.hex() for key in DEMO_KEYS.values()),
    )


async def test_every_scenario_gives_one_connected_trace_from_report_to_decision(traced: Traced) -> None:
    # Each scenario at least once: the draws of seed 2 cover them all (asserted below).
    weights = ",".join(f"{name}=1" for name in SCENARIO_NAMES)
    await simulate(
        traced, "--mix", weights, "--events", "33", "--runners", "2", "--seed", "2", "--rate", "20"
    )
    headers = await decision_headers(traced.nats.url)
    decided_runs = {run for run, _ in headers}

    def complete(spans: list[ReceivedSpan]) -> bool:
        published = [
            s
            for s in spans
            if "outbox publish" in s.name
            and str(s.attributes.get("messaging.destination.name", "")).startswith("continuity.decisions.")
        ]
        return len(published) >= len(headers)

    spans = traced.receiver.wait(complete, 60)
    runs = {str(s.attributes["continuity.run_id"]): s for s in spans if s.name == RUN_SPAN}
    assert {str(s.attributes["continuity.scenario"]) for s in runs.values()} == set(SCENARIO_NAMES)
    traces = by_trace(spans)
    for run_id, root in runs.items():
        trace = traces[root.trace_id]
        assert not disconnected(trace), (run_id, disconnected(trace))
        elsewhere = [
            s.name
            for s in spans
            if s.attributes.get("continuity.run_id") == run_id and s.trace_id != root.trace_id
        ]
        assert not elsewhere, (run_id, elsewhere)
        services = {s.service for s in trace}
        assert "continuity-classifier" in services, (run_id, services)
        scenario = SCENARIOS[str(root.attributes["continuity.scenario"])]
        if scenario.dead is not None:
            dead = [s for s in trace if s.attributes.get("continuity.outcome") == "dead_letter"]
            assert dead and run_id not in decided_runs, (run_id, [s.name for s in trace])
        elif run_id in decided_runs:
            assert any("outbox publish" in s.name for s in trace), run_id
    # The decision each runner received carries its run's trace back.
    for run_id, traceparent in headers:
        assert traceparent is not None and is_traceparent(traceparent), (run_id, traceparent)
        assert trace_id_of(traceparent) == runs[run_id].trace_id, (
            run_id,
            [(x.service, x.name, x.attributes) for x in traces[trace_id_of(traceparent)]],
        )
    # A quarantined event's dead letter carries the trace of the work that set it aside.
    quarantined = await stream_headers(traced.nats.url, subjects.DEAD_STREAM, subjects.DEAD_QUARANTINE)
    assert quarantined, "the forged and unknown-key scenarios were quarantined"
    for run_id, traceparent in quarantined:
        assert traceparent is not None and trace_id_of(traceparent) == runs[run_id].trace_id, run_id
    # Archive and reconciliation steps are in the runs' traces.
    names = {(s.service, s.name) for t in (traces[r.trace_id] for r in runs.values()) for s in t}
    assert ("continuity-archiver", "continuity-archiver runner archive") in names
    assert ("continuity-archiver", f"continuity-archiver {subjects.ARCHIVER_CONSUMER}") in names
    assert ("continuity-reconciliation", "continuity-reconciliation deliver") in names
    reconcile = f"continuity-reconciliation {subjects.RECONCILIATION_CONSUMER}"
    assert ("continuity-reconciliation", reconcile) in names
    assert ("continuity-sim", RUN_SPAN) in names
    assert forbidden_in(spans, secrets_of_the_lab()) == []
    # The classifier's log line of each decision names its trace.
    assert traced.stack is not None
    logged = [
        json.loads(line)
        for line in (traced.root / "classifier.log").read_text().splitlines()
        if line.startswith("{")
    ]
    decided = [e for e in logged if e.get("event") == "event_decided" and e.get("run_id") in runs]
    assert decided and all(e["trace_id"] == runs[e["run_id"]].trace_id for e in decided), decided[:3]
    # The latency histogram's buckets lead to example traces (OpenMetrics exemplars).
    classifier = next(s for s in traced.stack.services if s.name == "classifier")
    exemplars = scrape_exemplars(classifier.metrics_port, "continuity_decision_latency_seconds_bucket")
    assert exemplars and exemplars <= set(traces), exemplars
    plain = scrape_exemplars(
        classifier.metrics_port, "continuity_decision_latency_seconds_bucket", openmetrics=False
    )
    assert plain == set()  # the text format carries none
    for name, metric in (
        ("session-store", "continuity_request_duration_seconds_bucket"),
        ("archiver", "continuity_archive_duration_seconds_bucket"),
    ):
        service = next(s for s in traced.stack.services if s.name == name)
        found = scrape_exemplars(service.metrics_port, metric)
        assert found and found <= set(traces), (name, found)
    # The reconciliation's spans of a run name it, as the classifier's and the archiver's do.
    for svc in ("continuity-classifier", "continuity-archiver", "continuity-reconciliation"):
        assert any(s.service == svc and s.attributes.get("continuity.run_id") in runs for s in spans), svc


async def test_the_check_for_forbidden_values_can_fail(traced: Traced) -> None:
    """Planted: a span attribute holding a generation value is found."""
    planted = ReceivedSpan("a" * 32, "b" * 16, "", "x", "svc", 1, {"continuity.detail": f"gen {GENERATION}"})
    assert forbidden_in([planted], secrets_of_the_lab()) == [f"svc x: {GENERATION!r}"]
    loose = ReceivedSpan("a" * 32, "c" * 16, "d" * 16, "y", "svc", 1)
    assert disconnected([planted, loose]) == ["svc: y"]


async def test_a_decision_left_by_a_crash_is_published_by_a_sweeper_in_the_runs_trace(traced: Traced) -> None:
    """The classifier records the decision, cannot publish it (the decisions stream is gone), and
    is killed; the archiver's sweeper publishes it once the stream is back, in the run's trace."""
    assert traced.stack is not None
    classifier = next(s for s in traced.stack.services if s.name == "classifier")
    nc = await nats.connect(traced.nats.url)
    r = aioredis.Redis.from_url(traced.redis.url)
    try:
        js = nc.jetstream()
        stream = await js.stream_info(subjects.DECISIONS_STREAM)
        await js.delete_stream(subjects.DECISIONS_STREAM)
        runner = await connect(
            RunnerOptions(runner_id="trace-crash", servers=traced.nats.url, create_consumer=False)
        )
        session = SessionRef(tenant="acme", conversation_id="trace-crash-1", agent_id="codex")
        traceparent = new_traceparent()
        try:
            await runner.report_resume_failure("trace-crash-run", 1, session, "ns-1", traceparent=traceparent)
        finally:
            await runner.close()

        async def recorded() -> bool:
            return bool(await r.hlen(keys.outbox(session.key)))

        await wait_for(recorded, timeout=30)
        classifier.proc.kill()
        classifier.proc.wait()
        await js.add_stream(stream.config)  # back, as a restarted service would make it

        def swept(spans: list[ReceivedSpan]) -> bool:
            return any(
                "outbox publish" in s.name
                and s.trace_id == trace_id_of(traceparent)
                and s.attributes.get("continuity.published_by") == "sweeper"
                for s in spans
            )

        spans = traced.receiver.wait(swept, 60)
        trace = [s for s in spans if s.trace_id == trace_id_of(traceparent)]
        sweeper = next(s for s in trace if s.attributes.get("continuity.published_by") == "sweeper")
        assert sweeper.service != "continuity-classifier"
        # The classifier's own span died with it; the publication hangs from the report.
        assert sweeper.parent_span_id == traceparent[36:52]
        headers = [h for run, h in await decision_headers(traced.nats.url) if run == "trace-crash-run"]
        assert (
            len(headers) == 1
            and headers[0] is not None
            and trace_id_of(headers[0]) == trace_id_of(traceparent)
        )
    finally:
        await r.aclose()
        await nc.close()
        # The classifier is started again for the tests after this one.
        name = classifier.name
        traced.stack.services.remove(classifier)
        traced.stack.start_service(name, traced_env(traced.receiver), log_path=traced.root / f"{name}.log")
        traced.stack.ready_services.discard(name)
        assert traced.stack.wait_ready(60)


async def test_with_tracing_off_a_recorded_traceparent_is_passed_on(traced: Traced) -> None:
    """A service not tracing still publishes an entry another one recorded with its trace."""
    from shared.platform import tracing
    from shared.platform.redis import Redis
    from shared.records.outbox import Outbox, OutboxEntry

    assert not tracing.ENABLED  # this process does not trace
    nc = await nats.connect(traced.nats.url)
    redis = Redis.from_config(make_config(traced.nats.url, traced.redis.url))
    try:
        recorded = new_traceparent()
        entry = OutboxEntry(
            subject=subjects.decisions("trace-off"),
            msg_id=f"off-{recorded[3:11]}",
            payload=b"{}",
            trace=recorded,
        )
        await Outbox(redis, nc.jetstream(), service="test").flush("acme/trace-off/codex", [entry])
        stored = await nc.jetstream().get_last_msg(subjects.DECISIONS_STREAM, subjects.decisions("trace-off"))
        assert (stored.headers or {}).get("traceparent") == recorded
    finally:
        await redis.aclose()
        await nc.close()


async def test_spans_reach_an_https_collector_that_wants_a_client_certificate(tmp_path: Path) -> None:
    """OTEL_EXPORTER_OTLP_CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY, with the throwaway CA
    of deploy/tls/make-dev-certs.sh."""
    import ssl

    from shared.platform.trace_export import ExportConfig, Exporter
    from shared.platform.tracing import Span
    from tests.support.certs import make_certs

    certs = make_certs(tmp_path / "certs")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=certs.ca)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    receiver = Receiver(tls=context).start()
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "60000"}
    try:
        dropped: list[int] = []
        span = Span(0xABC, 0xDEF, 0, False, True, "over tls", "internal")
        span.end_ns = span.start_ns + 1
        without_client = Exporter(
            ExportConfig.from_env({**base, "OTEL_EXPORTER_OTLP_CERTIFICATE": certs.ca}),
            {},
            dropped=dropped.append,
        )
        without_client.add(span)
        without_client.shutdown(10)
        assert receiver.snapshot() == [] and dropped == [1]  # refused at the handshake
        env = {
            **base,
            "OTEL_EXPORTER_OTLP_CERTIFICATE": certs.ca,
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": certs.client_cert,
            "OTEL_EXPORTER_OTLP_CLIENT_KEY": certs.client_key,
        }
        exporter = Exporter(ExportConfig.from_env(env), {"service.name": "t"}, dropped=dropped.append)
        exporter.add(span)
        exporter.shutdown(10)
        assert [s.name for s in receiver.snapshot()] == ["over tls"]
    finally:
        receiver.stop()
