"""The production Redis values bound memory: a maxmemory well below the container limit (room
for a fork's copy-on-write pages and replication buffers), no eviction, and the memory alert
reading the exporter those values turn on."""

from __future__ import annotations

import re

import yaml

from tests.deploy.conftest import DEPLOY

# redis.conf's units: k, m, g are powers of 1000; kb, mb, gb powers of 1024.
UNITS = {"": 1, "b": 1, "k": 1000, "kb": 2**10, "m": 1000**2, "mb": 2**20, "g": 1000**3, "gb": 2**30}
K8S_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _redis_bytes(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", text.strip()).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit.lower()]


def _directives(config: str) -> dict[str, str]:
    pairs = (
        line.split(None, 1)
        for line in config.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}


def test_maxmemory_is_set_well_below_the_container_limit_without_eviction() -> None:
    values = yaml.safe_load((DEPLOY / "helm" / "redis-values.yaml").read_text())
    config = _directives(values["commonConfiguration"])
    assert config["maxmemory-policy"] == "noeviction"
    limit_text = values["replica"]["resources"]["limits"]["memory"]
    number, unit = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", limit_text).groups()  # type: ignore[union-attr]
    limit = int(number) * K8S_UNITS[unit]
    maxmemory = _redis_bytes(config["maxmemory"])
    assert 0.4 * limit <= maxmemory <= 0.75 * limit, (maxmemory, limit)
    assert values["metrics"]["enabled"], "the memory alert reads the Redis exporter"


def test_the_memory_alert_compares_used_with_maxmemory() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules" / "continuity-alerts.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    expr = alerts["ContinuityRedisMemoryHigh"]["expr"]
    assert "redis_memory_used_bytes" in expr and "redis_memory_max_bytes" in expr and "0.8" in expr
