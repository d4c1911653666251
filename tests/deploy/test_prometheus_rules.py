"""Alert and recording rules: promtool accepts them, every alert has unit tests that show it
firing and staying silent, and every alert links to its paragraph in the runbooks. The
dashboard's queries parse, and each recovery-outcome alert has its panel, which plots the series
the alert compares and draws the alert's threshold."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import DEPLOY, REPO, require_tool

RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
RULE_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))
RUNBOOKS = REPO / "docs" / "operations" / "runbooks.md"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "continuity.json"
OUTCOME_PANELS = {
    "ContinuityRecoverySuccessLow": "Recovery success rate by row",
    "ContinuityRunsAbandoned": "Abandoned runs by row",
    "ContinuityRecoverySlow": "Time to recovery p95 by row",
}
"""The alerts of the continuity-outcomes group and the title of each one's panel."""
_COMPARISON = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(<=|>=|<|>)\s*([0-9.]+)\s*$")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def alerts(group_name: str | None = None) -> list[dict[str, Any]]:
    found = []
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            if group_name is None or group["name"] == group_name:
                found += [r for r in group["rules"] if "alert" in r]
    return found


def panels() -> list[dict[str, Any]]:
    found = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        found += [panel, *panel.get("panels", [])]
    return found


def comparison(expr: str) -> tuple[str, float]:
    """The series and the threshold of an alert whose first line is `SERIES OP NUMBER`."""
    match = _COMPARISON.match(expr.strip().splitlines()[0])
    assert match, f"{expr!r} does not start with `series op number`"
    return match.group(1), float(match.group(3))


def test_rule_files_exist() -> None:
    assert RULES and RULE_TESTS
    assert len(alerts()) >= 9


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", *map(str, RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_config() -> None:
    result = promtool("check", "config", "--syntax-only", str(DEPLOY / "prometheus" / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_silent() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - firing == set(), "alerts never shown firing"
    assert names - silent == set(), "alerts never shown staying silent"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to dashes."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            text = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_alert_links_to_its_runbook_paragraph() -> None:
    anchors = _anchors(RUNBOOKS.read_text())
    for alert in alerts():
        url = alert["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path.endswith("docs/operations/runbooks.md"), url
        assert anchor == alert["alert"].lower(), url
        assert anchor in anchors, f"{alert['alert']}: no heading for #{anchor} in {RUNBOOKS.name}"
        assert alert["labels"]["severity"] in {"critical", "warning"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_runbooks_have_no_orphan_alert_sections() -> None:
    names = {a["alert"] for a in alerts()}
    headings = set(re.findall(r"^## (Continuity\w+)\s*$", RUNBOOKS.read_text(), re.M))
    assert headings == names


def test_dashboard_and_provisioning_files_parse() -> None:
    grafana = DEPLOY / "grafana"
    for path in (grafana / "provisioning").rglob("*.yml"):
        assert yaml.safe_load(path.read_text())["apiVersion"] == 1, path
    provider = yaml.safe_load((grafana / "provisioning" / "dashboards" / "continuity.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert Path(grafana / "dashboards" / "continuity.json").is_file()


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each panel's query, as a recording rule, with Grafana's interval
    variables replaced by a duration."""
    exprs = [t["expr"] for p in panels() for t in p.get("targets", []) if "expr" in t]
    assert exprs
    queries = [
        {"record": f"dashboard:query_{i}", "expr": re.sub(r"\$__(rate_)?interval\b", "5m", e)}
        for i, e in enumerate(exprs)
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": queries}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def recorded_rules() -> dict[str, str]:
    return {
        r["record"]: r["expr"]
        for path in RULES
        for g in yaml.safe_load(path.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }


def panel_problems(alert: dict[str, Any], panel: dict[str, Any], recorded: dict[str, str]) -> list[str]:
    """How an outcome alert's panel differs from the alert: the recorded series it compares (per
    policy row), plotted by `rule`, and its threshold drawn as a line."""
    series, threshold = comparison(alert["expr"])
    problems = []
    if not re.search(r"\bby \(rule(, le)?\)", recorded.get(series, "")):
        problems.append(f"{series} is not a recorded series per rule")
    targets = {t["expr"]: t.get("legendFormat") for t in panel.get("targets", [])}
    if targets.get(series) != "{{rule}}":
        problems.append(f"no target {series} with legend {{{{rule}}}}")
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    steps = [step["value"] for step in defaults.get("thresholds", {}).get("steps", [])]
    if threshold not in steps:
        problems.append(f"threshold {threshold:g} of {alert['alert']} not among the steps {steps}")
    if defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode", "off") == "off":
        problems.append("the threshold is not drawn")
    if alert["alert"] not in panel.get("description", ""):
        problems.append(f"the description does not name {alert['alert']}")
    return problems


def test_every_outcome_alert_has_its_panel_with_the_same_series_and_threshold() -> None:
    """Each alert of continuity-outcomes compares a recorded series per policy row with a
    number; its panel plots that series by `rule` and draws that number as a threshold line."""
    outcome_alerts = alerts("continuity-outcomes")
    assert {a["alert"] for a in outcome_alerts} == set(OUTCOME_PANELS)
    by_title = {p["title"]: p for p in panels()}
    recorded = recorded_rules()
    for alert in outcome_alerts:
        panel = by_title[OUTCOME_PANELS[alert["alert"]]]
        assert panel["type"] == "timeseries", panel["title"]
        problems = panel_problems(alert, panel, recorded)
        assert not problems, f"{panel['title']}: " + "; ".join(problems)


def test_the_panel_check_finds_a_threshold_or_series_that_drifted() -> None:
    """A panel whose line or series no longer matches its alert, as an edit of one of them
    alone would leave it."""
    (alert,) = [a for a in alerts("continuity-outcomes") if a["alert"] == "ContinuityRecoverySuccessLow"]
    panel = next(p for p in panels() if p["title"] == OUTCOME_PANELS["ContinuityRecoverySuccessLow"])
    recorded = recorded_rules()
    assert panel_problems(alert, panel, recorded) == []
    moved = {**alert, "expr": alert["expr"].replace("< 0.8", "< 0.9", 1)}
    assert panel_problems(moved, panel, recorded) == [
        "threshold 0.9 of ContinuityRecoverySuccessLow not among the steps [None, 0.8]"
    ]
    raw = {**alert, "expr": "sum(rate(continuity_run_outcomes_total[30m])) < 0.8"}
    with pytest.raises(AssertionError):
        comparison(raw["expr"])
    other = {**alert, "expr": "continuity:run_outcomes:increase30m < 0.8"}
    assert panel_problems(other, panel, recorded) == [
        "no target continuity:run_outcomes:increase30m with legend {{rule}}"
    ]
