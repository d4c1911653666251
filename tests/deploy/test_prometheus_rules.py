"""Alert and recording rules: promtool accepts them, every alert has unit tests that show it
firing and staying silent, and every alert links to its paragraph in the runbooks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import DEPLOY, REPO, require_tool

RULES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
RULE_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yml"))
RUNBOOKS = REPO / "docs" / "operations" / "runbooks.md"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def alerts() -> list[dict[str, Any]]:
    found = []
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            found += [r for r in group["rules"] if "alert" in r]
    return found


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
