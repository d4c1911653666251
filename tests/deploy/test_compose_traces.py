"""Traces in the compose stack, checked statically (no container engine here): a Jaeger of a
pinned version receives OTLP over HTTP, every Continuity service exports to it by default,
Grafana has it as a data source and links the Prometheus exemplars' trace ids to it, Prometheus
keeps exemplars, and the console's link to a run's traces is a template the console accepts
that opens that Jaeger's search for the run. And the Kubernetes overlay that
docs/operations/tracing.md shows renders, turns every service's traces on and lets them out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from services.console.config import TRACE_URL_VARIABLE, ConsoleConfig, parse_trace_url, trace_link
from tests.deploy.conftest import DEPLOY, KUSTOMIZE_DIR, REPO, SERVICES, by_kind, kustomize_command

DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "continuity.json"
TRACING_DOC = REPO / "docs" / "operations" / "tracing.md"
OTLP_HTTP_PORT = 4318
JAEGER_UI_PORT = 16686
_DEFAULTED = re.compile(r"^\$\{([A-Z0-9_]+):-([^}]*)\}\Z")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text())
    return loaded


def interpolated(value: object, shell: dict[str, str] | None = None) -> str:
    """A compose value as `docker compose up` passes it on from a shell with `shell` set:
    `${NAME:-default}` is NAME's value when set and not empty, else the default."""
    text = str(value)
    if "$" not in text:
        return text
    match = _DEFAULTED.match(text)
    assert match, f"{text!r}: only ${{NAME:-default}} is interpolated here"
    return (shell or {}).get(match.group(1)) or match.group(2)


def environment(service: dict[str, Any], shell: dict[str, str] | None = None) -> dict[str, str]:
    return {k: interpolated(v, shell) for k, v in service["environment"].items()}


def published(service: dict[str, Any]) -> dict[int, int]:
    """Container port -> host port of a compose service's `ports` ("[address:]host:container")."""
    out = {}
    for entry in service.get("ports", []):
        host, _, container = str(entry).rpartition(":")
        out[int(container.split("/")[0])] = int(host.rpartition(":")[2])
    return out


def tracing_on(env: dict[str, str]) -> bool:
    """Whether these variables turn a service's traces on (the standard OTEL_* variables, as
    docs/operations/tracing.md says the services read them)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if exporters:
        return "otlp" in exporters
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def datasources() -> list[dict[str, Any]]:
    found = []
    for path in sorted(DATASOURCES.glob("*.y*ml")):
        found += yaml.safe_load(path.read_text()).get("datasources", [])
    return found


def jaeger() -> tuple[str, dict[str, Any]]:
    """The compose service that runs Jaeger, and its definition."""
    services = compose()["services"]
    named = [(n, s) for n, s in services.items() if str(s.get("image", "")).startswith("jaegertracing/")]
    assert len(named) == 1, f"one Jaeger service in compose.yaml, not {[n for n, _ in named]}"
    return named[0]


def test_compose_runs_a_pinned_jaeger_that_receives_otlp_over_http() -> None:
    _, service = jaeger()
    image = service["image"]
    assert re.fullmatch(r"jaegertracing/all-in-one:\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", image), (
        f"{image}: pin a release, by its digest"
    )
    assert interpolated(service["environment"]["COLLECTOR_OTLP_ENABLED"]) == "true"
    ports = published(service)
    assert ports[OTLP_HTTP_PORT] == OTLP_HTTP_PORT and ports[JAEGER_UI_PORT] == JAEGER_UI_PORT


def test_every_continuity_service_exports_its_traces_to_jaeger_by_default() -> None:
    name, _ = jaeger()
    services = compose()["services"]
    for service in SERVICES:
        env = environment(services[service])
        assert tracing_on(env), service
        endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert (endpoint.scheme, endpoint.hostname, endpoint.port) == ("http", name, OTLP_HTTP_PORT), service
        assert endpoint.path in ("", "/"), "the exporter adds /v1/traces to the base endpoint"
        assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" not in env  # no second, diverging endpoint
        # OTLP over HTTP/protobuf, the one protocol the services export (its default).
        for variable in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
            assert env.get(variable, "http/protobuf") == "http/protobuf", service
        # Each service under its own name, continuity-<service>, which the console link searches.
        assert "OTEL_SERVICE_NAME" not in env, service
        # `OTEL_SDK_DISABLED=true docker compose up` turns them off (docs/operations/tracing.md).
        assert not tracing_on(environment(services[service], {"OTEL_SDK_DISABLED": "true"})), service


def test_grafana_has_jaeger_and_links_the_exemplars_trace_ids_to_it() -> None:
    name, service = jaeger()
    sources = datasources()
    by_uid = {s["uid"]: s for s in sources}
    assert len(by_uid) == len(sources), "data source uids are unique"
    [traces] = [s for s in sources if s["type"] == "jaeger"]
    url = urlsplit(traces["url"])
    assert (url.hostname, url.port) == (name, JAEGER_UI_PORT) and JAEGER_UI_PORT in published(service)
    [prometheus] = [s for s in sources if s["type"] == "prometheus"]
    destinations = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert [d["name"] for d in destinations] == ["trace_id"]  # the exemplars' label
    for destination in destinations:
        assert destination["datasourceUid"] in by_uid, "names a provisioned data source"
        assert by_uid[destination["datasourceUid"]]["type"] == "jaeger"
    grafana = compose()["services"]["grafana"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert name in grafana["depends_on"]


def test_the_dashboards_latency_panels_ask_for_exemplars() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    asking = {
        metric
        for panel in panels
        for target in panel.get("targets", [])
        if target.get("exemplar") is True
        for metric in re.findall(r"continuity_\w+_seconds_bucket", target["expr"])
    }
    assert asking == {
        "continuity_decision_latency_seconds_bucket",
        "continuity_request_duration_seconds_bucket",
        "continuity_archive_duration_seconds_bucket",
    }


def test_prometheus_keeps_exemplars() -> None:
    command = compose()["services"]["prometheus"]["command"]
    features = {
        feature.strip()
        for option in command
        if option.startswith("--enable-feature=")
        for feature in option.removeprefix("--enable-feature=").split(",")
    }
    assert "exemplar-storage" in features
    # The services are scraped with Prometheus's default Accept header, which asks for
    # OpenMetrics (the format that carries exemplars): no job narrows it.
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert "scrape_protocols" not in scrape.get("global", {})
    assert all("scrape_protocols" not in job for job in scrape["scrape_configs"])


def test_the_consoles_trace_link_opens_jaegers_search_for_the_run(tmp_path: Path) -> None:
    _, service = jaeger()
    env = environment(compose()["services"]["console"])
    # The sign-in token the `secrets` service writes into the console's volume.
    token = tmp_path / "console-token"
    token.write_text("t" * 48 + "\n")
    env["CONTINUITY_CONSOLE_DEV_TOKEN_FILE"] = str(token)
    config = ConsoleConfig.from_env(env)  # the console's own check: it would not start otherwise
    assert config.trace_url == env[TRACE_URL_VARIABLE]
    run_id = "run-7:a.b_c"
    link = urlsplit(trace_link(config.trace_url, run_id))
    # The browser's way to the UI compose publishes, its search page.
    assert (link.scheme, link.hostname) == ("http", "localhost")
    assert link.port == published(service)[JAEGER_UI_PORT] and link.path == "/search"
    query = parse_qs(link.query)
    # A service that exports spans with the run id, under its name in Jaeger.
    [searched] = query["service"]
    assert searched.removeprefix("continuity-") in SERVICES and searched.startswith("continuity-")
    assert json.loads(query["tags"][0]) == {"continuity.run_id": run_id}


def _doc_blocks(language: str) -> list[str]:
    """The fenced blocks of docs/operations/tracing.md in `language` ("" for no language)."""
    blocks: list[str] = []
    fence: str | None = None  # the language of the block being read
    body: list[str] = []
    for line in TRACING_DOC.read_text().splitlines():
        if not line.startswith("```"):
            body.append(line)
        elif fence is None:
            fence, body = line[3:].strip(), []
        else:
            if fence == language:
                blocks.append("\n".join(body) + "\n")
            fence = None
    return blocks


def test_the_tracing_docs_overlay_turns_tracing_on_and_lets_the_spans_out(tmp_path: Path) -> None:
    """docs/operations/tracing.md's overlay, as written there, on a copy of the manifests."""
    kustomization, policy, patch = _doc_blocks("yaml")
    tree = tmp_path / "kubernetes"
    shutil.copytree(KUSTOMIZE_DIR, tree)
    overlay = tree / "overlays" / "traced"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(kustomization + patch)
    (overlay / "networkpolicy-otlp.yaml").write_text(policy)
    rendered = subprocess.run(
        [*kustomize_command(), str(overlay)], capture_output=True, text=True, timeout=60, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    config_maps = by_kind(docs, "ConfigMap")
    deployments = by_kind(docs, "Deployment")
    assert {f"continuity-{name}" for name in SERVICES} <= deployments.keys()
    for name, deployment in deployments.items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]  # the service
        env: dict[str, str] = {}
        for source in container["envFrom"]:
            if "configMapRef" in source:
                env |= config_maps[source["configMapRef"]["name"]]["data"]
        assert tracing_on(env), name
        assert env["CONTINUITY_STREAM_REPLICAS"] == "3", name  # production's settings kept
        endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert endpoint.scheme == "http" and endpoint.port == OTLP_HTTP_PORT, name
        assert "OTEL_SERVICE_NAME" not in env, name  # each keeps its own name
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        # A policy selecting its pods lets them reach the collector's port (the base denies it).
        allowed = [
            rule
            for p in by_kind(docs, "NetworkPolicy").values()
            if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
            for rule in p["spec"].get("egress", [])
            if any(port["port"] == OTLP_HTTP_PORT for port in rule.get("ports", []))
        ]
        assert allowed, f"{name}: no egress to port {OTLP_HTTP_PORT}"
    console = deployments["continuity-console"]["spec"]["template"]["spec"]["containers"][0]
    [url] = [e["value"] for e in console["env"] if e["name"] == TRACE_URL_VARIABLE]
    assert parse_trace_url(url) == url  # the console would start with it


def test_the_tracing_docs_jaeger_link_is_the_one_compose_sets() -> None:
    env = environment(compose()["services"]["console"])
    [setting] = [b for b in _doc_blocks("") if b.startswith(f"{TRACE_URL_VARIABLE}=")]
    assert setting.strip() == f"{TRACE_URL_VARIABLE}={env[TRACE_URL_VARIABLE]}"
