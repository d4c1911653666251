"""Every metric that the dashboard and the rules query is one the services export
(shared/platform/metrics.py, read from prometheus_client's registry), or a series our own recording rules
produce, or Prometheus's `up`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

import shared.platform.metrics  # noqa: F401  (registers every metric)
from tests.deploy.conftest import DEPLOY
from tests.support.metrics import exported_series

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "continuity.json"
RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))

# Names that PromQL uses in our expressions but that are not metric names.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PROMQL_WORDS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "abs",
    "clamp_min",
    "clamp_max",
    "absent",
    "e",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    expr = _STRING.sub("", expr)
    expr = _MATCHERS.sub("", expr)
    expr = _GROUPING.sub("", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = set()
    for match in _NAME.finditer(expr):
        word = match.group(0)
        rest = expr[match.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _PROMQL_WORDS or word.startswith("$"):
            continue
        if expr[max(0, match.start() - 1)] == "$":
            continue
        names.add(word)
    return names


def label_names(expr: str) -> set[str]:
    labels = set()
    for matcher in _MATCHERS.findall(_STRING.sub('""', expr)):
        labels |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matcher))
    for grouping in _GROUPING.findall(expr):
        inner = grouping[grouping.index("(") + 1 : -1]
        labels |= {w.strip() for w in inner.split(",") if w.strip()}
    return labels


def dashboard_exprs() -> Iterator[str]:
    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                yield node["expr"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    yield from walk(json.loads(DASHBOARD.read_text()))


def rules() -> list[dict[str, Any]]:
    return [r for path in RULES for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def recorded() -> set[str]:
    return {r["record"] for r in rules() if "record" in r}


def all_exprs() -> list[str]:
    return [*dashboard_exprs(), *(r["expr"] for r in rules())]


def test_registry_lists_the_contract_metrics() -> None:
    series = exported_series()
    for name in (
        "continuity_events_total",
        "continuity_failure_class_total",
        "continuity_decisions_total",
        "continuity_decision_latency_seconds_bucket",
        "continuity_session_decisions_total",
        "continuity_session_commits_total",
        "continuity_archive_total",
        "continuity_archive_duration_seconds_bucket",
        "continuity_reconciliations_open",
        "continuity_dead_letters_total",
        "continuity_redis_errors_total",
        "continuity_consumer_pending",
    ):
        assert name in series, name


EXTERNAL_SERIES = {"redis_memory_used_bytes", "redis_memory_max_bytes"}
"""Series that the rules use but Continuity does not export: the Redis exporter's
(deploy/helm/redis-values.yaml, metrics.enabled)."""


def test_every_referenced_metric_is_exported() -> None:
    exported = set(exported_series()) | recorded() | {"up"} | EXTERNAL_SERIES
    for expr in all_exprs():
        unknown = metric_names(expr) - exported
        assert not unknown, f"{sorted(unknown)} in {expr!r} is not exported by shared/platform/metrics.py"


def test_every_referenced_label_exists_on_some_referenced_metric() -> None:
    series = exported_series()
    for expr in all_exprs():
        names = metric_names(expr) & set(series)
        if not names:
            continue
        known = set().union(*(series[n]["labels"] for n in names)) | {"job", "instance", "le"}
        unknown = label_names(expr) - known
        assert not unknown, f"labels {sorted(unknown)} in {expr!r} are not labels of {sorted(names)}"


def test_dashboard_covers_the_operational_questions() -> None:
    used = set().union(*(metric_names(e) for e in dashboard_exprs()))
    for name in (
        "continuity_decisions_total",
        "continuity_decision_latency_seconds_bucket",
        "continuity_archive_total",
        "continuity_reconciliations_open",
        "continuity_dead_letters_total",
        "continuity_consumer_pending",
    ):
        assert name in used, name


def test_the_reference_check_catches_an_unknown_metric() -> None:
    assert metric_names('sum by (action) (rate(continuity_decisionz_total{x="y"}[5m]))') == {
        "continuity_decisionz_total"
    }
    assert label_names('sum by (action) (rate(continuity_decisions_total{reason=~"a|b"}[5m]))') == {
        "action",
        "reason",
    }
