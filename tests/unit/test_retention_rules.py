"""The retention settings and the per-status rule, and the contract's table of it (9.9)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from shared.contract.types import RunStatus
from shared.platform.config import Config, ConfigError
from shared.records.decisions import STATUS_BY_ACTION
from shared.records.retention import DAY_MS, Retention, waits

DOC = (Path(__file__).resolve().parents[2] / "docs" / "contract-v1.md").read_text()


def test_the_defaults_are_30_days_and_90_for_archives() -> None:
    config = Config.from_env({})
    assert (config.retention_days, config.archive_retention_days) == (30.0, 90.0)
    assert Retention.from_config(config) == Retention(run_ms=30 * DAY_MS, archive_ms=90 * DAY_MS)


def test_a_fraction_of_a_day_is_allowed_so_tests_can_use_seconds() -> None:
    config = Config.from_env(
        {"CONTINUITY_RETENTION_DAYS": str(2 / 86400), "CONTINUITY_ARCHIVE_RETENTION_DAYS": "0.5"}
    )
    assert Retention.from_config(config) == Retention(run_ms=2000, archive_ms=DAY_MS // 2)


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "inf", "thirty", "3651"])
def test_a_bad_retention_stops_the_start_naming_the_variable(raw: str) -> None:
    for name in ("CONTINUITY_RETENTION_DAYS", "CONTINUITY_ARCHIVE_RETENTION_DAYS"):
        with pytest.raises(ConfigError, match=name):
            Config.from_env({name: raw})


def test_only_statuses_that_wait_on_a_person_keep_their_records() -> None:
    assert {status for status in get_args(RunStatus) if waits(status)} == {"operator", "reconciling"}
    # Every status a decision records has a rule.
    assert set(STATUS_BY_ACTION.values()) <= set(get_args(RunStatus))


def test_the_contract_table_states_the_rule_of_every_status() -> None:
    section = DOC.split("### 9.9 Retention", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", section, flags=re.MULTILINE))
    assert set(rows) == set(get_args(RunStatus))
    for status, rule in rows.items():
        assert rule.startswith("kept") == waits(status), (status, rule)
        assert ("expire" in rule) != waits(status), (status, rule)
