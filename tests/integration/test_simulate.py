"""The simulator's fleet against the four real services (in-process, real NATS and Redis); its
checker alone is tested in tests/unit/test_simulate_checker.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from continuity.devstack.stack import Stack
from continuity.tools.simulate import run_demo
from continuity.tools.simulate.fleet import Fleet, Settings
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from services import registry
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.policy import ReplayRequest
from shared.contract.runs import RunsListRequest
from tests.support import make_config, running, wait_for

ARCHIVE_TIMEOUT_S = 1.0

# ---- the fleet against the real services -----------------------------------------------------


@pytest.fixture(scope="module")
def sim_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A NATS server of this module's own: its work-queue consumers cannot clash with others'."""
    server = NatsServer(tmp_path_factory.mktemp("simulate-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def services(sim_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(
        sim_nats.url,
        redis_server.url,
        runner_keys=DEMO_KEYS,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
        retry_backoff_s=0.1,
    )
    apps = (
        registry.load("session-store"),
        registry.load("classifier"),
        registry.load("archiver"),
        registry.load("reconciliation"),
    )
    async with contextlib.AsyncExitStack() as stack:
        for app in apps:
            await stack.enter_async_context(running(app, config))
        yield sim_nats.url


def fleet_settings(url: str, **overrides: object) -> Settings:
    base = Settings(
        runners=3,
        events=70,
        rate=200.0,
        archive_fail_rate=0.25,
        archive_timeout_rate=0.15,
        seed=11,
        nats_url=url,
        deadline_s=10.0,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
        settle_s=0.3,
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


async def test_a_mixed_fleet_finds_no_contradiction_against_the_services(services: str) -> None:
    result = await Fleet(fleet_settings(services)).run()

    assert [c.text for c in result.checker.contradictions] == []
    assert not result.warnings and not result.interrupted
    actions = {action for action, _ in result.checker.decisions}
    assert {"retry_same_session", "open_replacement", "operator", "reconcile", "continue_fresh"} <= actions
    assert ("retry_same_session", "runner_continuity_break_archive_failed") in result.checker.decisions
    assert result.operator_acts.get("resolve", 0) > 0 and result.operator_acts.get("retry", 0) > 0
    dead = {subject for subject, _ in result.checker.dead_letters}
    assert dead == {"continuity.dead.quarantine", "continuity.dead.invalid"}
    assert all(story.done for story in result.stories) and len(result.stories) == 70
    await replay_reproduces_the_fleets_decisions(services, {story.run_id for story in result.stories})


async def replay_reproduces_the_fleets_decisions(url: str, runs: set[str]) -> None:
    """The running (shipped) policy, replayed over what the fleet recorded, changes nothing."""
    nc = await nats.connect(url)
    c = ContinuityClient(nc, timeout=60)
    explained = 0
    for run_id in set(runs):
        try:
            trail = await c.audit(run_id)
        except RequestError:  # a dead-lettered event's run: never recorded
            runs.discard(run_id)
            continue
        explained += sum(1 for e in trail.items if e.explanation is not None)

    async def indexed() -> bool:
        return runs <= {r.run_id for r in (await c.runs_upto(RunsListRequest(limit=1000))).items}

    await wait_for(indexed, timeout=30, what="the fleet's runs indexed")
    reply = await c.replay(ReplayRequest())
    await nc.close()
    assert explained > 0 and reply.replayed >= explained
    assert reply.changes == [] and reply.unchanged == reply.replayed


@pytest.fixture(scope="module")
def quota_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("simulate-quota-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def narrow_services(quota_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    """The services with a runner event quota a fleet at 200 runs a second exceeds at once."""
    config = make_config(
        quota_nats.url,
        redis_server.url,
        runner_keys=DEMO_KEYS,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
        retry_backoff_s=0.1,
        runner_event_rate=20.0,
        runner_event_burst=2,
    )
    apps = (
        registry.load("session-store"),
        registry.load("classifier"),
        registry.load("archiver"),
        registry.load("reconciliation"),
    )
    async with contextlib.AsyncExitStack() as stack:
        for app in apps:
            await stack.enter_async_context(running(app, config))
        yield quota_nats.url


async def test_events_refused_for_the_quota_are_sent_again_and_decided(narrow_services: str) -> None:
    settings = fleet_settings(
        narrow_services,
        runners=1,
        events=12,
        mix={"drop": 1},
        archive_fail_rate=0.0,
        archive_timeout_rate=0.0,
    )
    result = await Fleet(settings).run()

    assert [c.text for c in result.checker.contradictions] == []
    assert result.checker.refusals["quota_exceeded"] > 0 and set(result.checker.refusals) == {
        "quota_exceeded"
    }
    resent = [s for s in result.stories if "quota exceeded: sent again at not_before" in s.steps]
    assert resent and all(story.done for story in result.stories) and len(result.stories) == 12
    assert "no decision" not in {step for story in result.stories for step in story.steps}


async def test_the_fleet_reports_services_that_do_not_share_its_keys(services: str) -> None:
    other = {"sim-k1": b"another-key-the-services-never-saw!!"}
    settings = fleet_settings(services, events=3, mix={"refusal": 1}, keys=other, deadline_s=2.0)
    result = await Fleet(settings).run()

    texts = [c.text for c in result.checker.contradictions]
    assert len(texts) == 3 and all("services started with the simulator's keys" in t for t in texts), texts


async def test_simulate_command_prints_one_json_object_and_exits_0(services: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuity", "simulate",
        "--nats-url", services, "--events", "25", "--rate", "100", "--runners", "2",
        "--archive-timeout", str(ARCHIVE_TIMEOUT_S), "--deadline", "10", "--keys", DEMO_KEYS_ENV,
        "--seed", "3", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    report = json.loads(out)
    assert report["ok"] is True and report["contradictions"] == []
    assert report["runs"] == 25 and report["events"] >= 25
    assert b"decisions" in err  # live progress on stderr
    # Its last line holds the final counts, also for a run shorter than the line's period.
    decided = sum(sum(reasons.values()) for reasons in report["decisions"].values())
    last = err.decode().strip().splitlines()[-1]
    assert f"events {report['events']} " in last and f"decisions {decided}" in last, last


async def test_run_demo_narrates_and_returns_0(
    services: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = Stack(data_dir=tmp_path, nats_url=services)
    code = await asyncio.to_thread(run_demo, stack, 2.0, threading.Event())
    out = capsys.readouterr().out
    assert code == 0, out
    assert "What Continuity did with each kind of failure" in out
    assert "contradictions: 0" in out
