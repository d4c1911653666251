"""Services built from their specs (shared/platform/service.py) through the one registry: micro's
`$SRV.INFO` lists the spec's endpoints under the contract's subjects, and `$SRV.STATS` counts
the errors the endpoints answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from nats.aio.client import Client

from services import registry
from shared.contract import subjects
from shared.platform.config import Config
from tests.support import RunningApp, running

SESSION_REQUEST = (
    b'{"session": {"tenant": "t", "conversation_id": "c", "agent_id": "a"}, "adapter": "a",'
    b' "model": "m", "cwd": "/", "latest_cursor": null, "compatibility": "none", "ready_generation": null}'
)


@pytest.fixture
async def store_app(config: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), config) as app:
        yield app


async def endpoint_stats(nc: Client, service: str) -> dict[str, dict[str, object]]:
    msg = await nc.request(f"$SRV.STATS.{service}", b"", timeout=5)
    return {e["name"]: e for e in msgspec.json.decode(msg.data)["endpoints"]}


async def test_srv_stats_counts_an_endpoint_error(store_app: RunningApp, nc: Client) -> None:
    before = await endpoint_stats(nc, "continuity-session-store")
    assert before["decide"]["num_errors"] == 0

    bad = await nc.request(subjects.SESSIONS_DECIDE, b'{"session": {}}', timeout=5)
    assert bad.headers is not None and bad.headers["Nats-Service-Error-Code"] == "400"
    assert msgspec.json.decode(bad.data)["error"]["code"] == "missing_field"
    good = await nc.request(subjects.SESSIONS_DECIDE, SESSION_REQUEST, timeout=5)
    assert not good.headers and msgspec.json.decode(good.data)["reason"] == "no_session"

    after = await endpoint_stats(nc, "continuity-session-store")
    assert after["decide"]["num_requests"] == 2
    assert after["decide"]["num_errors"] == 1  # the 400, not the answer
    assert after["decide"]["last_error"] == "400:missing_field"  # a closed code, no text
    assert after["get"]["num_errors"] == 0


async def test_srv_info_lists_each_endpoint_under_its_contract_subject(
    store_app: RunningApp, config: Config, nc: Client
) -> None:
    async with running(registry.load("reconciliation"), config):
        found = {}
        for service in ("continuity-session-store", "continuity-reconciliation"):
            msg = await nc.request(f"$SRV.INFO.{service}", b"", timeout=5)
            info = msgspec.json.decode(msg.data)
            found |= {e["name"]: (e["subject"], e["queue_group"]) for e in info["endpoints"]}
    assert found == {
        "decide": (subjects.SESSIONS_DECIDE, subjects.QUEUE_GROUP),
        "commit": (subjects.SESSIONS_COMMIT, subjects.QUEUE_GROUP),
        "get": (subjects.SESSIONS_GET, subjects.QUEUE_GROUP),
        "reject": (subjects.SESSIONS_REJECT, subjects.QUEUE_GROUP),
        "reconciliations-list": (subjects.RECONCILIATIONS_LIST, subjects.QUEUE_GROUP),
        "reconciliations-get": (subjects.RECONCILIATIONS_GET, subjects.QUEUE_GROUP),
        "reconciliations-resolve": (subjects.RECONCILIATIONS_RESOLVE, subjects.QUEUE_GROUP),
        "runs-get": (subjects.RUNS_GET, subjects.QUEUE_GROUP),
        "runs-audit": (subjects.RUNS_AUDIT, subjects.QUEUE_GROUP),
        "runs-list": (subjects.RUNS_LIST, subjects.QUEUE_GROUP),
        "runs-stats": (subjects.RUNS_STATS, subjects.QUEUE_GROUP),
        "operator-retry": (subjects.OPERATOR_RETRY, subjects.QUEUE_GROUP),
        # Ownership and the runner directory (contract section 10).
        "transfer": (subjects.SESSIONS_TRANSFER, subjects.QUEUE_GROUP),
        "ownership": (subjects.SESSIONS_AUDIT, subjects.QUEUE_GROUP),
        "runners-put": (subjects.RUNNERS_PUT, subjects.QUEUE_GROUP),
        "runners-revoke": (subjects.RUNNERS_REVOKE, subjects.QUEUE_GROUP),
        "runners-get": (subjects.RUNNERS_GET, subjects.QUEUE_GROUP),
        "runners-list": (subjects.RUNNERS_LIST, subjects.QUEUE_GROUP),
        "runners-consumer": (subjects.RUNNERS_CONSUMER, subjects.QUEUE_GROUP),
        # Declared compatibility, the rollout preview and the replay (9.11).
        "declare": (subjects.COMPATIBILITY_DECLARE, subjects.QUEUE_GROUP),
        "revoke-declaration": (subjects.COMPATIBILITY_REVOKE, subjects.QUEUE_GROUP),
        "declarations": (subjects.COMPATIBILITY_LIST, subjects.QUEUE_GROUP),
        "preview": (subjects.SESSIONS_PREVIEW, subjects.QUEUE_GROUP),
        "policy-replay": (subjects.POLICY_REPLAY, subjects.QUEUE_GROUP),
        **{
            f"runner-{op}": (subjects.runner_sessions_pattern(op), subjects.QUEUE_GROUP)
            for op in subjects.SESSION_OPS
        },
    }


@pytest.mark.parametrize("name", ["classifier", "archiver", "session-store", "reconciliation"])
async def test_every_service_answers_the_micro_protocol(name: str, config: Config, nc: Client) -> None:
    # Contract section 1: every service registers, those without endpoints too.
    async with running(registry.load(name), config):
        for verb in ("PING", "INFO", "STATS"):
            msg = await nc.request(f"$SRV.{verb}.continuity-{name}", b"", timeout=5)
            assert msgspec.json.decode(msg.data)["name"] == f"continuity-{name}"
