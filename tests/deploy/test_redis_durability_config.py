"""The shipped production settings of session durability, read from the files themselves: the
services wait for a Redis replica (the production overlay's ConfigMap), and the Redis primary of
the Helm values refuses writes without one in sync, with counts its replicas can meet."""

from __future__ import annotations

import re

import yaml

from shared.platform.config import Config
from shared.platform.redis.durability import Durability
from tests.deploy.conftest import DEPLOY, render

HELM_VALUES = DEPLOY / "helm" / "redis-values.yaml"


def unhashed(name: str) -> str:
    """A generated ConfigMap's name without kustomize's content-hash suffix."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def _services_config(overlay: str) -> dict[str, str]:
    (config,) = [
        d
        for d in render(overlay)
        if d["kind"] == "ConfigMap" and unhashed(d["metadata"]["name"]) == "continuity-config"
    ]
    data: dict[str, str] = config["data"]
    return data


def _redis_settings() -> tuple[dict[str, str], int]:
    """`commonConfiguration`'s directives, and how many replicas each primary has."""
    values = yaml.safe_load(HELM_VALUES.read_text())
    directives = {}
    for line in values["commonConfiguration"].splitlines():
        found = re.match(r"^\s*([a-z-]+)\s+(.+?)\s*$", line)
        if found and not line.lstrip().startswith("#"):
            directives[found[1]] = found[2]
    # With Sentinel the chart runs replica.replicaCount pods, one of them the primary.
    assert values["sentinel"]["enabled"]
    return directives, int(values["replica"]["replicaCount"]) - 1


def test_production_services_wait_for_a_replica_that_exists() -> None:
    env = _services_config("production")
    durability = Durability.from_config(Config.from_env(env))  # the values parse as the services parse them
    _, replicas = _redis_settings()
    assert durability.replicas == 1
    assert durability.replicas <= replicas, "WAIT for more replicas than the chart runs fails every commit"
    assert 50 <= durability.timeout_ms <= 1000
    # WAITAOF needs a grant the shipped ACL file does not give: not turned on here.
    assert not durability.uses_waitaof


def test_the_dev_overlay_waits_for_nothing() -> None:
    """Its one Redis has no replica: a wait there would refuse every commit."""
    assert not Durability.from_config(Config.from_env(_services_config("dev"))).waits


def test_the_primary_refuses_writes_without_a_replica_in_sync() -> None:
    directives, replicas = _redis_settings()
    to_write = int(directives["min-replicas-to-write"])
    lag = int(directives["min-replicas-max-lag"])
    assert to_write == 1, "at least one replica in sync, and one may be down without stopping writes"
    assert to_write < replicas, "a primary needing every replica stops writes at the first restart"
    assert 1 < lag <= 10, "replicas acknowledge every second; the lag bounds writes a cut-off primary takes"
    assert directives["appendonly"] == "yes"
