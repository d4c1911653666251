"""The simulator's fleet against the four real services (in-process, real NATS and Redis): every
decision held against the contract, and every outcome the runners drew (a turn completed after a
decision, or another failure) held against how `continuity.runs.stats` and `continuity.runs.list`
judge it. Its checker alone is tested in tests/unit/test_simulate_checker.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from continuity.devstack.stack import Stack
from continuity.tools.simulate import run_demo
from continuity.tools.simulate.fleet import Fleet
from continuity.tools.simulate.keys import DEMO_KEYS, DEMO_KEYS_ENV
from continuity.tools.simulate.result import Result, Settings
from continuity.tools.simulate.runner import TENANT
from continuity.tools.simulate.scenarios import RECOVERED_STATUS, SCENARIOS
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
    # Turns are under the same quota: each one refused was sent again, and recorded.
    assert result.checker.turns > 0 and sum(result.checker.outcomes.values()) == result.checker.turns
    assert result.checker.turns_resent > 0
    assert result.judgement is not None and result.judgement.unsettled == []


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
    judged = report["judgement"]
    assert report["turns"] > 0 and sum(report["outcomes"].values()) == report["turns"]
    assert judged["unsettled"] == [] and judged["rows"] and all(row["agrees"] for row in judged["rows"])
    assert {s["scenario"] for s in judged["scenarios"]} <= set(SCENARIOS)
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
    assert "What Continuity did with each kind of failure" in out
    assert "turns completed after a decision:" in out and "runs stats rows:" in out
    assert code == 0 and "contradictions: 0" in out, out


# ---- outcomes: the runners' truth against the services' judgment -----------------------------


@pytest.fixture(scope="module")
def outcome_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("simulate-outcome-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def outcome_services(outcome_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    """The services with a tenant recovery budget no fleet of these tests reaches (the storm
    breaker would stop runs for an operator instead of retrying them)."""
    config = make_config(
        outcome_nats.url,
        redis_server.url,
        runner_keys=DEMO_KEYS,
        archive_timeout_s=ARCHIVE_TIMEOUT_S,
        retry_backoff_s=0.1,
        tenant_recovery_budget=10**6,
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
        yield outcome_nats.url


FINAL = {"recovered", "recovered_replaced", "recovered_fresh"}
STOPPED = {"operator", "reconciling"}


async def listed_statuses(url: str, prefix: str) -> dict[str, str]:
    """The simulation's runs in `continuity.runs.list`, asked here and not through the fleet."""
    nc = await nats.connect(url)
    shown: dict[str, str] = {}
    try:
        c = ContinuityClient(nc, timeout=30)
        req = RunsListRequest(tenant=TENANT, limit=1000)
        while True:
            page = await c.runs(req)
            shown |= {e.run_id: e.status for e in page.items if e.run_id.startswith(f"{prefix}-")}
            if page.next_cursor is None:
                return shown
            req.cursor = page.next_cursor
    finally:
        await nc.close()


def assert_final_statuses(result: Result, shown: dict[str, str]) -> None:
    """Every run whose turn was recorded shows the final status of the decision it followed, and
    no run of the simulation is left waiting (`retrying`, `replacing`, `continued`): each one
    ended with its turn, or stopped for an operator."""
    turned = {
        run_id: RECOVERED_STATUS[turn.action]
        for run_id, run in result.checker.runs.items()
        for turn in run.turns.values()
    }
    assert turned and {r: shown.get(r) for r in turned} == turned
    assert set(shown.values()) <= FINAL | STOPPED, sorted(set(shown.values()))
    assert sum(1 for s in shown.values() if s in FINAL) == result.checker.turns == len(turned)


async def test_runs_stats_judges_every_decision_as_the_runners_drew_its_outcome(
    outcome_services: str,
) -> None:
    """2200 runs of the unclassified scenarios, no operator acting (an operator stop stays a
    stop). The services must judge every decision exactly as its runner knows what followed it,
    and the simulation's success rates must be its scenarios' configured probabilities, up to
    sampling.

    With n judged decisions of a scenario whose probability is p, the standard error of its rate
    is s = sqrt(p(1-p)/n). Claiming 2 points is fair where 2 points is at least 3 s, that is
    n >= 9 p(1-p) / 0.02^2: 2025 decisions at p = 0.9, which `drop` gets here (2133, s = 0.65
    points); elsewhere (`disguised`, `duplicate`: 168 and 140, s near 3 points) the bound is
    4 s. Each run draws from a generator of its own, seeded from the fleet's seed, so the draws
    are the same at every run of this test, whatever order the runs interleave in: a failure
    here is a change, not chance. The exact agreement with the runners' tally is the check of
    the services; the bound on the probability checks the simulator's draws."""
    settings = fleet_settings(
        outcome_services,
        runners=4,
        events=2200,
        rate=100.0,  # about what the four services in this one process decide in a second
        mix={"drop": 16, "disguised": 1, "duplicate": 1},
        operator=False,
        deadline_s=60.0,
        seed=20261206,
    )
    result = await Fleet(settings).run()

    assert [c.text for c in result.checker.contradictions] == []
    assert not result.warnings and not result.interrupted
    judgement = result.judgement
    assert judgement is not None and judgement.comparison is not None and judgement.unsettled == []
    comparison = judgement.comparison
    # Exact: every row of runs stats (rule, action, class, harness) is what the runners saw.
    assert comparison.rows and comparison.disagreements == []
    assert {row.key[0] for row in comparison.rows} >= {"4.4.6", "4.4.7", "4.4.8", "4.4.9"}
    for rate in comparison.scenarios:
        assert (rate.server_judged, rate.server_recovered) == (rate.judged, rate.recovered)
        p, n = rate.probability, rate.judged
        se = math.sqrt(p * (1 - p) / n)
        bound = 0.02 if 0.02 >= 3 * se else 4 * se
        assert abs(rate.recovered / n - p) <= bound, (rate.scenario, rate.recovered, n, p, bound)
    drop = next(r for r in comparison.scenarios if r.scenario == "drop")
    assert 0.02 >= 3 * math.sqrt(0.9 * 0.1 / drop.judged)  # the 2-point claim is made for drop
    assert_final_statuses(result, await listed_statuses(outcome_services, result.prefix))


def operator_settings(url: str) -> Settings:
    """Closed classes, each stopped for an operator who continues the run fresh: the fresh
    session's turn or its next failure judges the operator's decision (row `operator`)."""
    return fleet_settings(
        url, events=40, mix={"refusal": 1, "pending": 1, "source": 1, "incompatible": 1}, seed=7
    )


async def test_runs_continued_fresh_by_the_operator_end_recovered_fresh_and_are_judged(
    outcome_services: str,
) -> None:
    result = await Fleet(operator_settings(outcome_services)).run()

    assert [c.text for c in result.checker.contradictions] == []
    assert result.operator_acts.get("resolve", 0) > 0 and result.operator_acts.get("retry", 0) > 0
    assert result.checker.outcomes["recovered_fresh"] == result.checker.turns > 0
    assert_final_statuses(result, await listed_statuses(outcome_services, result.prefix))
    # The operator's continue_fresh is judged under the row `operator`, as the runners saw it.
    assert result.judgement is not None and result.judgement.comparison is not None
    operator_rows = [
        r for r in result.judgement.comparison.rows if r.key[:3] == ("operator", "continue_fresh", "none")
    ]
    assert operator_rows and all(r.agrees for r in operator_rows)
    assert sum(r.runners["recovered"] for r in operator_rows) == result.checker.turns
    assert sum(r.runners["failed"] for r in operator_rows) > 0
