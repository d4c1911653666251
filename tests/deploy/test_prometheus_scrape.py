"""A real Prometheus server (the Debian `prometheus` binary), started on a free port with the
project's rule files, scrapes a running Continuity stack: the four services against embedded
NATS and Redis, after a simulated runner fleet and operator drove traffic through every path.
Queries prove that the metrics the rules and the dashboard use exist with the right labels.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from continuity.devstack.stack import Stack
from continuity.devstack.up import console_env
from continuity.tools.simulate import demo_environment
from continuity.tools.simulate.runner import GENERATION
from tests.deploy.conftest import DEPLOY, REPO, SERVICES, free_port, require_tool
from tests.support.metrics import exported_series

DEADLINE_S = 30.0
JOB = "continuity"


def wait_until(what: str, check: Callable[[], Any], timeout: float = DEADLINE_S) -> Any:
    """Poll `check` until it returns a truthy value; fail at the deadline with the last error."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (OSError, ValueError, KeyError) as err:
            last = err
        time.sleep(0.2)  # poll interval of a deadline-bounded wait
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The four services, after a short fleet has sent every kind of event through them."""
    data = tmp_path_factory.mktemp("stack")
    stack = Stack(data_dir=data)
    try:
        stack.start_servers(redis_appendonly=False)
        for name in SERVICES:
            env = {**demo_environment(), **(console_env(data) if name == "console" else {})}
            stack.start_service(name, env, log_path=data / f"{name}.log")
        stack.wait_ready()
        fleet = subprocess.run(
            [
                sys.executable,
                "-m",
                "continuity",
                "simulate",
                "--nats-url",
                stack.nats_url,
                "--events",
                "60",
                "--rate",
                "60",
                "--runners",
                "3",
                "--seed",
                "7",
                "--archive-fail-rate",
                "0.3",
                "--archive-timeout",
                "2",
                "--quiet",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert fleet.returncode == 0, fleet.stdout + fleet.stderr
        # The fleet's archive outputs carry fake secrets and its sessions a generation: no log
        # line of any service may repeat them.
        logs = "".join((data / f"{name}.log").read_text() for name in SERVICES)
        assert '"event":"service_started"' in logs
        for leak in ("FAKE", "sk-", "Bearer", GENERATION):
            assert leak not in logs, leak
        yield [f"127.0.0.1:{s.metrics_port}" for s in stack.services]
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def prometheus(targets: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = require_tool("prometheus")
    work: Path = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("Prometheus ready", lambda: _get(f"{url}/-/ready", raw=True) is not None)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _get(url: str, raw: bool = False) -> Any:
    with urllib.request.urlopen(url, timeout=2) as response:
        body = response.read()
    return body if raw else json.loads(body)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    data = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    assert data["status"] == "success", data
    return list(data["data"]["result"])


def test_target_is_scraped(prometheus: str, targets: list[str]) -> None:
    up = wait_until(
        "every target up",
        lambda: (r := query(prometheus, f'up{{job="{JOB}"}} == 1')) and len(r) == len(targets) and r,
    )
    assert {s["metric"]["instance"] for s in up} == set(targets)


def test_metrics_exist_with_their_labels(prometheus: str) -> None:
    wait_until("first scrape", lambda: query(prometheus, f'up{{job="{JOB}"}} == 1'))
    # Labelled families: the label names that dashboards and rules group by must be present.
    expectations = {
        "continuity_decisions_total": {"action", "reason"},
        "continuity_events_total": {"type", "outcome"},
        "continuity_failure_class_total": {"class"},
        "continuity_session_decisions_total": {"mode", "reason"},
        "continuity_session_commits_total": {"result"},
        "continuity_archive_total": {"result"},
        "continuity_dead_letters_total": {"reason"},
        "continuity_consumer_pending": {"consumer"},
        "continuity_requests_total": {"endpoint", "code"},
        "continuity_decision_latency_seconds_bucket": {"le"},
        "continuity_archive_duration_seconds_bucket": {"le"},
        "continuity_request_duration_seconds_bucket": {"endpoint", "le"},
    }
    # The fleet drove every path, so every family the rules and the dashboard use has series.
    for name in expectations:
        wait_until(name, lambda n=name: query(prometheus, f'{n}{{job="{JOB}"}}'))
    exposed = query(prometheus, f'{{__name__=~"continuity_.+", job="{JOB}"}}')
    assert exposed
    families = {s["metric"]["__name__"] for s in exposed} - {
        n for n in (s["metric"]["__name__"] for s in exposed) if n.endswith("_created")
    }
    for name, labels in expectations.items():
        series = [s for s in exposed if s["metric"]["__name__"] == name]
        assert name in families, name
        assert any(labels <= s["metric"].keys() for s in series), (name, series)
    known = set(exported_series())
    assert families <= known, sorted(families - known)
    for name in (
        "continuity_redis_errors_total",
        "continuity_ready",
        "continuity_reconciliations_open",
        "continuity_reconciliation_oldest_open_seconds",
        "continuity_outbox_pending",
    ):
        assert query(prometheus, f'{name}{{job="{JOB}"}}'), name


def test_the_traffic_is_counted_and_the_rules_load(prometheus: str) -> None:
    wait_until("first scrape", lambda: query(prometheus, f'up{{job="{JOB}"}} == 1'))
    # Refusals stop for an operator; forged signatures are quarantined; drops are archived.
    wait_until(
        "operator decisions",
        lambda: query(
            prometheus,
            'continuity_decisions_total{action="operator",reason="native_provider_state_incompatible"} > 0',
        ),
    )
    wait_until(
        "quarantines",
        lambda: query(
            prometheus, 'sum(continuity_dead_letters_total{reason=~"signature_invalid|unknown_key"}) > 0'
        ),
    )
    wait_until("archives", lambda: query(prometheus, "sum(continuity_archive_total) > 0"))
    (ready,) = query(prometheus, f'sum(continuity_ready{{job="{JOB}"}})')
    assert float(ready["value"][1]) == len(SERVICES)
    # The project's rule files load into a real server without errors.
    groups = _get(f"{prometheus}/api/v1/rules")["data"]["groups"]
    names = {g["name"] for g in groups}
    assert {"continuity-recording", "continuity-slo", "continuity-availability"} <= names
    assert all(r.get("health") != "err" for g in groups for r in g["rules"]), groups
