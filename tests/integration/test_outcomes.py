"""Outcomes (contract 4.6) against real NATS and Redis with the classifier and the reconciliation
service running: a completed turn gives a run its final status once; a run nobody reports on is
abandoned; bad, forged and foreign outcomes are dead-lettered and change nothing; the policy is
judged by what followed its decisions (`runs.stats`, a replay's `results`, the metrics)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import (
    RunOutcome,
    RunsListRequest,
    RunsStatsRequest,
    SessionRef,
    subjects,
)
from shared.contract.client import ContinuityClient
from shared.contract.policy import ReplayRequest
from shared.contract.reconciliation import RetryRequest
from shared.platform import metrics
from shared.platform.bus.publish import DEAD_REASON_HEADER
from shared.policy import SHIPPED, dump
from tests.support import make_config, read_stream, running, wait_for
from tests.support.outcomes import TRANSPORT, cli, failure, reaches, send, status_of, turn, uid
from tests.support.runner import KEYS, new_run_id, resume_failed
from tests.support.sessions import new_session

pytestmark = pytest.mark.asyncio


async def listed(c: ContinuityClient, runner: str, run_id: str, status: str) -> None:
    async def done() -> bool:
        items = (await c.runs_upto(RunsListRequest(runner_id=runner, limit=1000))).items
        return any(r.run_id == run_id and r.status == status for r in items)

    await wait_for(done, timeout=30, what=f"run {run_id} listed {status}")


async def dead_reasons(js: JetStreamContext, dead_subject: str, run_id: str) -> list[str]:
    """The reasons of the dead letters on `dead_subject` whose payload names `run_id`."""
    found = []
    for msg in await read_stream(js, subjects.DEAD_STREAM, dead_subject):
        if run_id.encode() in msg.data:
            found.append((msg.headers or {}).get(DEAD_REASON_HEADER, ""))
    return found


def count(counter: object, *labels: str) -> float:
    value = counter.labels(*labels)._value.get()  # type: ignore[attr-defined]
    return float(value)


@pytest.fixture(scope="module")
async def services(nats_server: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(nats_server.url, redis_server.url, runner_keys=KEYS)
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation", sweep_interval_s=0.2), config),
    ):
        yield nats_server.url


async def test_a_completed_turn_recovers_the_run_once_and_is_listed(
    services: str, nc: Client, client: ContinuityClient
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    before = count(metrics.RUN_OUTCOMES, "4.4.9", "unclassified", "claude-code", "recovered")
    ev = await failure(js, runner, error=TRANSPORT)
    await reaches(client, ev.run_id, "retrying")
    done = turn(runner, ev.run_id, ev.session)
    await send(js, done)
    await reaches(client, ev.run_id, "recovered")
    await listed(client, runner, ev.run_id, "recovered")
    # Sent again (another event id, so JetStream keeps it): a duplicate, nothing changes.
    duplicates = count(metrics.EVENTS, "turn_completed", "duplicate")
    await send(js, turn(runner, ev.run_id, ev.session))
    await wait_for(
        lambda: count(metrics.EVENTS, "turn_completed", "duplicate") > duplicates,
        what="the second turn handled as a duplicate",
    )
    audit = await client.audit(ev.run_id)
    outcomes = [e for e in audit.items if e.kind == "outcome"]

    async def one_outcome_published() -> bool:
        msgs = await read_stream(js, subjects.DECISIONS_STREAM, subjects.outcomes(runner))
        return len(msgs) == 1

    await wait_for(one_outcome_published, timeout=10, what="the outcome published")
    (msg,) = await read_stream(js, subjects.DECISIONS_STREAM, subjects.outcomes(runner))
    published = msgspec.json.decode(msg.data, type=RunOutcome)
    assert (published.status, published.rule, published.action) == (
        "recovered",
        "4.4.9",
        "retry_same_session",
    )
    assert published.harness == "claude-code" and published.harness_version == "2.1.332"
    assert published.recovery_ms is not None and published.recovery_ms >= 0
    assert len(outcomes) == 1 and outcomes[0].status == "recovered"
    assert outcomes[0].recovery_ms == published.recovery_ms
    # The time to recovery is what JetStream's own clock says: from the stored failure to the
    # stored turn that was recorded.
    stored = {
        json.loads(m.data)["event_id"]: m.metadata.timestamp
        for m in await read_stream(js, subjects.EVENTS_STREAM, f"continuity.events.{runner}.*")
    }
    truth_ms = (stored[done.event_id] - stored[ev.event_id]).total_seconds() * 1000
    assert abs(published.recovery_ms - truth_ms) <= 1, (published.recovery_ms, truth_ms)
    assert count(metrics.RUN_OUTCOMES, "4.4.9", "unclassified", "claude-code", "recovered") == before + 1
    # The runner's own decisions consumer takes `continuity.decisions.<runner_id>` alone.
    runner_msgs = await read_stream(js, subjects.DECISIONS_STREAM, subjects.decisions(runner))
    assert [json.loads(m.data)["type"] for m in runner_msgs] == ["decision"]
    assert await status_of(client, ev.run_id) == "recovered"


async def test_a_fresh_continuation_completed_is_recovered_fresh(
    services: str, nc: Client, client: ContinuityClient
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ev = await failure(js, runner, classification="native_session_missing")
    await reaches(client, ev.run_id, "continued")
    await send(js, turn(runner, ev.run_id, ev.session))
    await reaches(client, ev.run_id, "recovered_fresh")


async def test_bad_forged_and_foreign_outcomes_are_dead_lettered_and_change_nothing(
    services: str, nc: Client, client: ContinuityClient
) -> None:
    js = nc.jetstream()
    owner, intruder = f"r{uid()}", f"r{uid()}"
    ev = await failure(js, owner, error=TRANSPORT)
    await reaches(client, ev.run_id, "retrying")
    forged = turn(owner, ev.run_id, ev.session, key=b"not-the-runner-key-0123456789abc")
    foreign = turn(owner, ev.run_id, ev.session, as_runner=intruder)
    wrong_attempt = turn(owner, ev.run_id, ev.session, attempt=2)
    not_completed = turn(owner, ev.run_id, ev.session, status="failed")
    no_decision = turn(owner, new_run_id(), new_session())
    malformed = turn(owner, ev.run_id, ev.session)
    for bad in (forged, foreign, wrong_attempt, not_completed, no_decision):
        await send(js, bad)
    await send(js, malformed, raw=b'{"type": "turn_completed", "run_id": "' + ev.run_id.encode() + b'"')

    async def all_dead() -> bool:
        quarantined = await dead_reasons(js, subjects.DEAD_QUARANTINE, ev.run_id)
        refused = await dead_reasons(js, subjects.DEAD_REFUSED, ev.run_id)
        invalid = await dead_reasons(js, subjects.DEAD_INVALID, ev.run_id)
        invalid += await dead_reasons(js, subjects.DEAD_INVALID, no_decision.run_id)
        return (
            quarantined == ["signature_invalid"]
            and refused == ["run_not_owned"]
            and sorted(invalid)
            == sorted(
                ["outcome_without_decision", "invalid_field", "outcome_without_decision", "malformed_json"]
            )
        )

    await wait_for(all_dead, timeout=30, what="every bad outcome dead-lettered with its reason")
    assert await status_of(client, ev.run_id) == "retrying"
    assert not [e for e in (await client.audit(ev.run_id)).items if e.kind == "outcome"]
    # The owner's own, signed outcome is still recorded after all that.
    await send(js, turn(owner, ev.run_id, ev.session))
    await reaches(client, ev.run_id, "recovered")


async def test_a_run_nobody_reports_on_is_abandoned_and_a_late_turn_still_recovers_it(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, r = fresh_servers
    config = make_config(n.url, r.url, runner_keys=KEYS, outcome_wait_s=2.0)
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation", sweep_interval_s=0.2), config),
    ):
        nc = await nats.connect(n.url)
        try:
            await _abandoned_then_recovered(nc, ContinuityClient(nc, timeout=5))
        finally:
            await nc.close()


async def _abandoned_then_recovered(nc: Client, client: ContinuityClient) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    abandoned = ("4.4.9", "unclassified", "claude-code", "abandoned")
    before = count(metrics.RUN_OUTCOMES, *abandoned)
    ev = await failure(js, runner, error=TRANSPORT)
    await reaches(client, ev.run_id, "retrying")
    await reaches(client, ev.run_id, "abandoned")  # CONTINUITY_OUTCOME_WAIT_S is 2 s here
    # The sweeper counts the outcome once its script has recorded it, which a read may see first.
    await wait_for(
        lambda: count(metrics.RUN_OUTCOMES, *abandoned) == before + 1, what="the abandoned outcome counted"
    )
    await listed(client, runner, ev.run_id, "abandoned")
    kinds = [e.kind for e in (await client.audit(ev.run_id)).items]
    assert kinds == ["decision", "abandoned"]
    await send(js, turn(runner, ev.run_id, ev.session))
    await reaches(client, ev.run_id, "recovered")
    await listed(client, runner, ev.run_id, "recovered")


async def test_stats_and_replay_judge_each_decision_by_what_followed_it(
    services: str, nc: Client, client: ContinuityClient, tmp_path: Path
) -> None:
    js = nc.jetstream()
    tenant = f"t-{uid()}"
    runner = f"r{uid()}"
    recovered, failed_again = [], []
    for i in range(6):
        ev = await failure(
            js,
            runner,
            session=SessionRef(tenant=tenant, conversation_id=f"conv-{uid()}", agent_id="codex"),
            error=TRANSPORT,
        )
        await reaches(client, ev.run_id, "retrying")
        if i < 4:
            await send(js, turn(runner, ev.run_id, ev.session))
            recovered.append(ev)
        else:
            # The retry failed again: the next attempt's failure judges the first decision.
            again = resume_failed(runner, session=ev.session, run_id=ev.run_id, attempt=2, error=TRANSPORT)
            await send(js, again)
            failed_again.append(ev)
    for ev in recovered:
        await reaches(client, ev.run_id, "recovered")
    for ev in failed_again:

        async def second_decided(run_id: str = ev.run_id) -> bool:
            return (await client.run(run_id)).attempt == 2

        await wait_for(second_decided, timeout=30, what="the second attempt decided")

    async def stats_ready() -> bool:
        reply = await client.runs_stats(RunsStatsRequest(tenant=tenant))
        return reply.statuses.get("recovered") == 4 and reply.runs == 6

    await wait_for(stats_ready, timeout=30, what="the runs indexed with their outcomes")
    reply = await client.runs_stats(RunsStatsRequest(tenant=tenant))
    # The run keeps the harness its first event named: the second attempts' events name none.
    rows = {(r.rule, r.harness, r.harness_version): r for r in reply.rows}
    row = rows[("4.4.9", "claude-code", "2.1.332")]
    assert (row.decisions, row.recovered, row.failed, row.pending) == (8, 4, 2, 2), row
    assert row.success_rate == pytest.approx(4 / 6)
    # The time to recovery against each recovered run's own outcome (nearest rank of four).
    times = []
    for ev in recovered:
        (entry,) = [e for e in (await client.audit(ev.run_id)).items if e.kind == "outcome"]
        assert entry.recovery_ms is not None
        times.append(entry.recovery_ms)
    times.sort()
    assert (row.recovery_p50_s, row.recovery_p95_s) == (times[1] / 1000, times[3] / 1000)
    assert row.attempts_mean == 1.0
    (series,) = [s for s in reply.series if s.rule == "4.4.9"]
    assert sum(p.recovered for p in series.points) == 4 and sum(p.judged for p in series.points) == 6

    doc = json.loads(dump(SHIPPED))
    doc["version"] = "candidate-no-retries"
    next(r for r in doc["recovery"] if r["id"] == "4.4.9").update(
        action="operator", reason="native_session_retry_exhausted"
    )
    replayed = await client.replay(ReplayRequest(policy=json.dumps(doc), tenant=tenant, examples=100))
    (change,) = replayed.changes
    assert change.count == 8  # six first attempts and the two second ones
    assert change.results == {"recovered": 4, "failed": 2, "pending": 2}, change.results
    # The same evidence as people read it: a column beside each change and a sentence.
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(doc))
    code, out, err = await cli(services, "replay", "--policy", str(candidate), "--tenant", tenant)
    assert code == 0, err
    assert "WHAT FOLLOWED" in out and "recovered 4, failed 2, pending 2" in out
    assert "8 retry_same_session would become operator (row 4.4.9 to 4.4.9); 4 of them recovered" in out
    code, out, err = await cli(services, "runs", "stats", "--tenant", tenant, "--json")
    assert code == 0, err
    (shown,) = [r for r in json.loads(out)["rows"] if r["harness"] == "claude-code"]
    assert (shown["recovered"], shown["failed"], shown["pending"]) == (4, 2, 2)
    code, out, err = await cli(services, "runs", "stats", "--tenant", tenant)
    assert code == 0 and "66.7%" in out and "4.4.9" in out, out + err


async def test_an_operators_fresh_continuation_is_judged_under_the_operator_row(
    services: str, nc: Client, client: ContinuityClient
) -> None:
    js = nc.jetstream()
    tenant = f"t-{uid()}"
    runner = f"r{uid()}"
    session = SessionRef(tenant=tenant, conversation_id=f"conv-{uid()}", agent_id="codex")
    ev = await failure(js, runner, session=session, classification="provider_attach_refused")
    await reaches(client, ev.run_id, "operator")
    await client.retry(RetryRequest(run_id=ev.run_id, actor="alice"))
    await reaches(client, ev.run_id, "continued")
    await send(js, turn(runner, ev.run_id, ev.session))
    await reaches(client, ev.run_id, "recovered_fresh")

    async def judged() -> bool:
        reply = await client.runs_stats(RunsStatsRequest(tenant=tenant))
        return reply.statuses == {"recovered_fresh": 1}

    await wait_for(judged, timeout=30, what="the run indexed recovered_fresh")
    rows = {(r.rule, r.action): r for r in (await client.runs_stats(RunsStatsRequest(tenant=tenant))).rows}
    held, continued = rows[("4.4.2", "operator")], rows[("operator", "continue_fresh")]
    assert (held.held, held.success_rate) == (1, None)
    assert (continued.recovered, continued.success_rate, continued.harness) == (1, 1.0, "claude-code")
