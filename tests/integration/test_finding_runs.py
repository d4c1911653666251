"""Finding and fixing stuck runs against real NATS and Redis with the classifier and the
reconciliation service running: `continuity.runs.list` (every filter, paging), the runs index
(ordering, stale entries), `continuity runs retry` in bulk, `continuity watch`, and
`continuity dead list|show|replay` (a quarantined event replayed once its key is configured).

Runs are made the way runners make them: `resume_failed` events that the classifier decides.
Each test uses tenants and runners of its own, so other tests' runs never match its filters.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.js import JetStreamContext

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.reconciliation.runs_index import RunsIndex, bucket_keys, bucket_of
from shared.contract import (
    CommandResult,
    Decision,
    ErrorInfo,
    ResumeFailed,
    RunsListRequest,
    SessionRef,
    ToolCall,
    subjects,
)
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.signing import sign
from shared.contract.times import now_rfc3339
from shared.platform.bus.publish import DEAD_MSG_ID_HEADER, dead_letter
from shared.platform.redis import Redis
from shared.records import keys
from tests.support import make_config, read_stream, running, wait_for

pytestmark = pytest.mark.asyncio

CLI = str(Path(sys.executable).parent / "continuity")

# What each kind of run's event carries, and the status and reason the classifier gives it.
KINDS: dict[str, tuple[dict[str, Any], str, str]] = {
    "conflict": (
        {"error": ErrorInfo(type="native", code="native_event_replay_conflict")},
        "operator",
        "native_event_replay_conflict",
    ),
    "incompatible": (
        {"error": ErrorInfo(type="native", code="runner_remote_provider_artifact_incompatible")},
        "operator",
        "native_provider_state_incompatible",
    ),
    "interrupted": (
        {"error": ErrorInfo(type="transport", code="socket_closed")},
        "retrying",
        "native_session_interrupted",
    ),
    "pending": (
        {
            "pending_tool_call": ToolCall(
                tool_call_id="call-1", tool_name="create_ticket", started_at="2026-11-30T12:00:00.000Z"
            )
        },
        "reconciling",
        "native_provider_side_effect_pending",
    ),
}


@dataclass(frozen=True)
class Made:
    run_id: str
    runner_id: str
    tenant: str
    status: str
    reason: str


def uid() -> str:
    return uuid.uuid4().hex[:10]


def event(runner_id: str, tenant: str, run_id: str, **fields: Any) -> ResumeFailed:
    return ResumeFailed(
        type="resume_failed",
        event_id=f"ev-{run_id}",
        runner_id=runner_id,
        run_id=run_id,
        attempt=1,
        session=SessionRef(tenant=tenant, conversation_id=f"conv-{run_id}", agent_id="codex"),
        native_session_id="ns-1",
        occurred_at=now_rfc3339(),
        **fields,
    )


async def publish_event(js: JetStreamContext, ev: ResumeFailed) -> None:
    await js.publish(
        subjects.event(ev.runner_id, "resume_failed"),
        msgspec.json.encode(ev),
        headers={"Nats-Msg-Id": ev.event_id},
    )


async def make_runs(js: JetStreamContext, plan: list[tuple[str, str, str]]) -> list[Made]:
    """One run per (runner_id, tenant, kind), decided by the classifier."""
    made = []
    for runner_id, tenant, kind in plan:
        fields, status, reason = KINDS[kind]
        run_id = f"run-{uid()}"
        await publish_event(js, event(runner_id, tenant, run_id, **fields))
        made.append(Made(run_id, runner_id, tenant, status, reason))
    return made


async def indexed(client: ContinuityClient, made: list[Made]) -> None:
    """Wait until every run is listed with the status its decision gave it."""
    tenants = sorted({m.tenant for m in made})

    async def done() -> bool:
        seen: dict[str, str] = {}
        for tenant in tenants:
            reply = await client.runs_upto(RunsListRequest(tenant=tenant, limit=1000))
            seen.update({r.run_id: r.status for r in reply.items})
        return all(seen.get(m.run_id) == m.status for m in made)

    await wait_for(done, timeout=30, what="runs indexed")


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


async def cli(nats_url: str, *args: str, stdin: bytes = b"") -> Result:
    proc = await asyncio.create_subprocess_exec(
        CLI,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NATS_URL": nats_url},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


@pytest.fixture(scope="module")
async def services(nats_server: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(nats_server.url, redis_server.url)
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation", sweep_interval_s=0.2), config),
    ):
        yield nats_server.url


# runs list -----------------------------------------------------------------------------------


async def test_runs_list_filters_by_status_runner_tenant_reason_and_age_and_pages_without_gaps(
    services: str, nc: Client, client: ContinuityClient
) -> None:
    js = nc.jetstream()
    runners = [f"r{uid()}", f"r{uid()}"]
    tenants = [f"t-{uid()}", f"t-{uid()}"]
    kinds = list(KINDS)
    plan = [(runners[(i // 2) % 2], tenants[(i // 4) % 2], kinds[i % 4]) for i in range(24)]
    first = await make_runs(js, plan[:12])
    await indexed(client, first)
    newest_first = ""
    for t in tenants:
        items = (await client.runs_upto(RunsListRequest(tenant=t, limit=1000))).items
        newest_first = max([newest_first, *(r.updated_at for r in items)])
    await wait_for(lambda: now_rfc3339() > newest_first, what="the clock past the first runs")
    split = now_rfc3339()
    await wait_for(lambda: now_rfc3339() > split, what="the clock past the split")
    second = await make_runs(js, plan[12:])
    made = first + second
    await indexed(client, made)

    async def listed(**filters: Any) -> list[str]:
        reply = await client.runs_upto(RunsListRequest(limit=1000, **filters))
        return [r.run_id for r in reply.items]

    for tenant in tenants:
        mine = [m for m in made if m.tenant == tenant]
        assert sorted(await listed(tenant=tenant)) == sorted(m.run_id for m in mine)
        for status in ("operator", "retrying", "reconciling"):
            expected = sorted(m.run_id for m in mine if m.status == status)
            assert expected and sorted(await listed(tenant=tenant, status=status)) == expected
        for reason in {m.reason for m in mine}:
            expected = sorted(m.run_id for m in mine if m.reason == reason)
            assert sorted(await listed(tenant=tenant, reason=reason)) == expected
    for runner in runners:
        expected = sorted(m.run_id for m in made if m.runner_id == runner and m.status == "operator")
        assert sorted(await listed(runner_id=runner, status="operator")) == expected
        both = sorted(m.run_id for m in made if m.runner_id == runner and m.tenant == tenants[0])
        assert sorted(await listed(runner_id=runner, tenant=tenants[0])) == both
    # Age: the split lies between the two batches.
    for tenant in tenants:
        older = sorted(m.run_id for m in first if m.tenant == tenant)
        newer = sorted(m.run_id for m in second if m.tenant == tenant)
        assert sorted(await listed(tenant=tenant, updated_before=split)) == older
        assert sorted(await listed(tenant=tenant, updated_after=split)) == newer

    # Pages of 5 over one runner: every run once, oldest decision first, then the end.
    runner = runners[0]
    whole = (await client.runs(RunsListRequest(runner_id=runner, limit=1000))).items
    pages: list[str] = []
    times: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        page = await client.runs(RunsListRequest(runner_id=runner, limit=5, cursor=cursor))
        assert len(page.items) <= 5
        pages += [r.run_id for r in page.items]
        times += [r.updated_at for r in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert cursor is None
    assert pages == [r.run_id for r in whole]
    assert sorted(pages) == sorted(m.run_id for m in made if m.runner_id == runner)
    assert len(set(pages)) == len(pages) == 12
    assert times == sorted(times, key=lambda t: t)  # same width: text order is time order

    with pytest.raises(RequestError) as err:
        await client.runs(RunsListRequest(runner_id=runner, cursor="not-a-cursor"))
    assert (err.value.status, err.value.code) == (400, "invalid_field")

    # The command: JSON, a table, the age options, and a cursor printed for the next page.
    as_json, as_table, old, recent, paged = await asyncio.gather(
        cli(services, "runs", "list", "--tenant", tenants[0], "--status", "operator", "--json"),
        cli(services, "runs", "list", "--runner", runner, "--reason", "native_event_replay_conflict"),
        cli(services, "runs", "list", "--tenant", tenants[0], "--older-than", "1d", "--json"),
        cli(services, "runs", "list", "--tenant", tenants[0], "--newer-than", "1d", "--json"),
        cli(services, "runs", "list", "--runner", runner, "--limit", "5"),
    )
    assert as_json.code == 0, as_json.err
    expected = sorted(m.run_id for m in made if m.tenant == tenants[0] and m.status == "operator")
    assert sorted(r["run_id"] for r in as_json.json()["items"]) == expected
    assert as_table.code == 0 and as_table.out.startswith("RUN ID")
    conflict = [
        m.run_id for m in made if m.runner_id == runner and m.reason == "native_event_replay_conflict"
    ]
    assert conflict and all(run_id in as_table.out for run_id in conflict)
    assert old.json()["items"] == []
    assert len(recent.json()["items"]) == len([m for m in made if m.tenant == tenants[0]])
    assert paged.code == 0 and "More after these: --cursor " in paged.out
    next_cursor = paged.out.rsplit("--cursor ", 1)[1].strip()
    rest = await cli(
        services, "runs", "list", "--runner", runner, "--limit", "1000", "--cursor", next_cursor, "--json"
    )
    assert [r["run_id"] for r in rest.json()["items"]] == pages[5:]
    bad = await cli(services, "runs", "list", "--older-than", "ten minutes")
    assert bad.code == 2


async def test_the_index_keeps_the_newest_decision_and_drops_runs_whose_record_is_gone(
    services: str, nc: Client, client: ContinuityClient, redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    tenant = f"t-{uid()}"
    (run,) = await make_runs(nc.jetstream(), [(f"r{uid()}", tenant, "conflict")])
    await indexed(client, [run])
    (entry,) = (await client.runs(RunsListRequest(tenant=tenant))).items
    index = RunsIndex(records_redis)
    # A redelivered older decision, or one of the same time, changes nothing.
    older = Decision(
        decision_id=f"{run.run_id}:1:retry_same_session",
        runner_id=run.runner_id,
        run_id=run.run_id,
        attempt=1,
        session=entry.session,
        action="retry_same_session",
        reason="native_session_interrupted",
        decided_at="2026-01-01T00:00:00.000Z",
    )
    assert await index.apply(older) is False
    same = msgspec.structs.replace(older, decided_at=entry.updated_at)
    assert await index.apply(same) is False
    (again,) = (await client.runs(RunsListRequest(tenant=tenant))).items
    assert again == entry
    # What is not a decision is skipped: no dead letter, and the index goes on.
    js = nc.jetstream()
    junk = await js.publish(
        subjects.decisions(run.runner_id), b"not a decision", headers={"Nats-Msg-Id": uid()}
    )

    async def consumed() -> bool:
        info = await js.consumer_info(subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER)
        return info.ack_floor.stream_seq >= junk.seq

    await wait_for(consumed, what="the junk consumed")
    dead = await read_stream(js, subjects.DEAD_STREAM, subjects.DEAD_INVALID)
    assert not [
        m
        for m in dead
        if m.headers and m.headers.get("Nats-Msg-Id") == f"dead:CONTINUITY_DECISIONS:{junk.seq}"
    ]

    # A run whose record says otherwise than its indexed decision is left out, entry kept.
    record_key = keys.run(entry.session.key, run.run_id)
    await redis_client.hset(record_key, "status", "continued")
    assert (await client.runs(RunsListRequest(tenant=tenant))).items == []
    await redis_client.hset(record_key, "status", "operator")
    assert (await client.runs(RunsListRequest(tenant=tenant))).items == [entry]

    # A run decided again while an operator pages moves on: listed once more, never skipped.
    (other,) = await make_runs(nc.jetstream(), [(run.runner_id, tenant, "conflict")])
    await indexed(client, [other])
    first_page = await client.runs(RunsListRequest(tenant=tenant, limit=1))
    assert [r.run_id for r in first_page.items] == [run.run_id] and first_page.next_cursor
    newer = msgspec.structs.replace(
        older, decision_id=f"{run.run_id}:2:operator", attempt=2, action="operator", decided_at=now_rfc3339()
    )
    assert await index.apply(newer) is True
    rest = await client.runs(RunsListRequest(tenant=tenant, cursor=first_page.next_cursor))
    assert [r.run_id for r in rest.items] == [other.run_id, run.run_id]
    assert rest.items[1].attempt == 2 and rest.next_cursor is None

    # A run whose record expired is left out, and its entry removed.
    await redis_client.delete(keys.run(entry.session.key, run.run_id))
    assert [r.run_id for r in (await client.runs(RunsListRequest(tenant=tenant))).items] == [other.run_id]
    entries_key = bucket_keys(bucket_of(run.run_id))[1]
    assert not await redis_client.hexists(entries_key, run.run_id)


# runs retry in bulk --------------------------------------------------------------------------


async def test_bulk_retry_lists_with_dry_run_needs_a_bound_and_a_confirmation_and_counts(
    services: str, nc: Client, client: ContinuityClient
) -> None:
    tenant = f"t-{uid()}"
    runner = f"r{uid()}"
    made = await make_runs(
        nc.jetstream(), [(runner, tenant, "conflict")] * 11 + [(runner, tenant, "pending")] * 2
    )
    await indexed(client, made)
    stopped = sorted(m.run_id for m in made if m.status == "operator")

    dry = await cli(
        services,
        "runs",
        "retry",
        "--tenant",
        tenant,
        "--actor",
        "alice",
        "--dry-run",
        "--max",
        "20",
        "--json",
    )
    assert dry.code == 0, dry.err
    assert dry.json()["matched"] == 11
    assert sorted(r["run_id"] for r in dry.json()["items"]) == stopped
    dry_table = await cli(
        services, "runs", "retry", "--tenant", tenant, "--actor", "a", "--dry-run", "--max", "11"
    )
    assert dry_table.code == 0 and dry_table.out.startswith("Would retry 11 run(s)")

    unbounded = await cli(services, "runs", "retry", "--tenant", tenant, "--actor", "alice", "--yes")
    assert unbounded.code == 2 and "[too_many_runs]" in unbounded.err and "--max" in unbounded.err
    bounded_low = await cli(
        services, "runs", "retry", "--tenant", tenant, "--actor", "alice", "--max", "5", "--yes"
    )
    assert bounded_low.code == 2 and "[too_many_runs]" in bounded_low.err
    declined = await cli(
        services, "runs", "retry", "--tenant", tenant, "--actor", "alice", "--max", "11", stdin=b"n\n"
    )
    assert declined.code == 2 and "[not_confirmed]" in declined.err
    for run_id in stopped:  # nothing was retried so far
        assert (await client.run(run_id)).status == "operator"

    done = await cli(
        services,
        "runs",
        "retry",
        "--tenant",
        tenant,
        "--actor",
        "alice",
        "--max",
        "11",
        "--json",
        stdin=b"y\n",
    )
    assert done.code == 0, done.err
    assert (done.json()["matched"], done.json()["retried"], done.json()["refused"]) == (11, 11, {})
    for run_id in stopped:
        assert (await client.run(run_id)).status == "continued"
    # Retried runs no longer match (their records say so before the index hears of it).
    again = await cli(services, "runs", "retry", "--tenant", tenant, "--actor", "alice", "--yes", "--json")
    assert again.code == 0 and again.json()["matched"] == 0

    refused = await cli(
        services, "runs", "retry", "--tenant", tenant, "--status", "reconciling", "--actor", "bob", "--yes"
    )
    assert refused.code == 1
    assert "Retried 0 of 2; refused 2 (reconciliation_required: 2)" in refused.out

    # One run by its id, as before.
    (single,) = await make_runs(nc.jetstream(), [(runner, tenant, "incompatible")])
    await indexed(client, [single])
    one = await cli(services, "runs", "retry", single.run_id, "--actor", "carol")
    assert one.code == 0, one.err
    assert (await client.run(single.run_id)).status == "continued"
    mixed = await cli(services, "runs", "retry", single.run_id, "--tenant", tenant, "--actor", "carol")
    assert mixed.code == 2


# watch ---------------------------------------------------------------------------------------


async def _line(stream: asyncio.StreamReader, timeout: float = 20.0) -> str:
    return (await asyncio.wait_for(stream.readline(), timeout)).decode()


async def test_watch_shows_a_decision_as_it_is_made(services: str, nc: Client) -> None:
    tenant = f"t-{uid()}"
    runner = f"r{uid()}"
    proc = await asyncio.create_subprocess_exec(
        CLI,
        "watch",
        "--tenant",
        tenant,
        "--status",
        "operator",
        "--json",
        "--count",
        "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NATS_URL": services},
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        assert "Watching" in await _line(proc.stderr)
        # A decision that does not match first (another status), then one that does.
        await make_runs(nc.jetstream(), [(runner, tenant, "interrupted")])
        (run,) = await make_runs(nc.jetstream(), [(runner, tenant, "conflict")])
        shown = json.loads(await _line(proc.stdout))
        assert (shown["run_id"], shown["action"], shown["session"]["tenant"]) == (
            run.run_id,
            "operator",
            tenant,
        )
        assert shown["rule"] == "4.4.4"  # the row of an event replay conflict
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    # `--since` shows what was decided before it started, as a table.
    since = await cli(services, "watch", "--since", "5m", "--runner", runner, "--count", "2")
    assert since.code == 0, since.err
    lines = since.out.splitlines()
    assert lines[0].startswith("DECIDED AT") and len(lines) == 3
    # In the order they were decided: the classifier decides the two events concurrently.
    rows = lines[1:]
    assert any(run.run_id in row and "operator" in row for row in rows), rows
    assert any("retry_same_session" in row and run.run_id not in row for row in rows), rows


# dead letters --------------------------------------------------------------------------------


def signed_event(runner_id: str, run_id: str, key: bytes) -> ResumeFailed:
    result = CommandResult(
        command="provider.attach",
        status="refused",
        classification="provider_attach_refused",
        issued_at=now_rfc3339(),
        key_id="k-new",
        signature="",
    )
    result.signature = sign(key, runner_id, run_id, 1, result)
    return event(runner_id, f"t-{uid()}", run_id, command_result=result)


async def test_a_quarantined_event_is_listed_shown_and_replayed_into_one_decision(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    n, r = fresh_servers
    key = os.urandom(32)
    # A short duplicate window, so that the test can wait for it to pass.
    config = make_config(n.url, r.url, duplicate_window_s=3.0)
    nc = await nats.connect(n.url)
    try:
        js = nc.jetstream()
        runner, run_id = f"r{uid()}", f"run-{uid()}"
        ev = signed_event(runner, run_id, key)
        async with running(registry.load("classifier"), config):  # the key is not configured yet
            await publish_event(js, ev)
            oversized = event(runner, "t-big", f"run-{uid()}", error=ErrorInfo(type="x", code="y"))
            await js.publish(
                subjects.event(runner, "resume_failed"),
                msgspec.json.encode(oversized)[:-1] + b', "pad": "' + b"x" * 70000 + b'"}',
                headers={"Nats-Msg-Id": "ev-big"},
            )

            async def both_dead() -> bool:
                listed = await cli(n.url, "dead", "list", "--json")
                return listed.code == 0 and len(listed.json()["items"]) == 2

            await wait_for(both_dead, timeout=30, what="two dead letters")

        listed = await cli(n.url, "dead", "list", "--reason", "unknown_key", "--json")
        (row,) = listed.json()["items"]
        assert row["subject"] == subjects.DEAD_QUARANTINE
        assert row["original_subject"] == subjects.event(runner, "resume_failed")
        assert (row["service"], row["truncated"]) == ("classifier", False)
        by_service = await cli(n.url, "dead", "list", "--service", "classifier", "--since", "1h", "--json")
        assert len(by_service.json()["items"]) == 2
        assert (await cli(n.url, "dead", "list", "--service", "archiver", "--json")).json()["items"] == []
        latest = await cli(n.url, "dead", "list", "--limit", "1", "--json")
        assert latest.json()["items"] == by_service.json()["items"][-1:]
        table = await cli(n.url, "dead", "list", "--kind", "invalid")
        assert table.code == 0 and "payload_too_large" in table.out and "unknown_key" not in table.out

        shown = await cli(n.url, "dead", "show", str(row["seq"]), "--json")
        assert shown.code == 0, shown.err
        assert shown.json()["body_text"] == msgspec.json.encode(ev).decode()
        assert shown.json()["headers"]["Continuity-Original-Msg-Id"] == ev.event_id
        missing = await cli(n.url, "dead", "show", "999999")
        assert missing.code == 3

        (big,) = (await cli(n.url, "dead", "list", "--reason", "payload_too_large", "--json")).json()["items"]
        assert big["truncated"] is True
        cut = await cli(n.url, "dead", "replay", str(big["seq"]))
        assert cut.code == 1 and "[truncated]" in cut.err

        # The cause fixed: the classifier restarted with the key. A replay within the original's
        # duplicate window is dropped (and says so); once it has passed, the event is decided.
        keyed = make_config(n.url, r.url, duplicate_window_s=3.0, runner_keys={"k-new": key})
        async with running(registry.load("classifier"), keyed):
            outcomes: list[int] = []

            async def replayed() -> bool:
                result = await cli(n.url, "dead", "replay", str(row["seq"]))
                outcomes.append(result.code)
                if result.code == 1:
                    assert "[duplicate_dropped]" in result.err and "duplicate window (3s)" in result.err
                return result.code == 0

            await wait_for(replayed, timeout=30, interval=0.5, what="a replay past the duplicate window")
            again = await cli(n.url, "dead", "replay", str(row["seq"]))
            assert again.code == 1 and "[duplicate_dropped]" in again.err

            async def decided() -> list[Any]:
                return await read_stream(js, subjects.DECISIONS_STREAM, subjects.decisions(runner))

            async def settled() -> bool:
                info = await js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
                return info.num_pending == 0 and info.num_ack_pending == 0 and len(await decided()) >= 1

            await wait_for(settled, timeout=30, what="the replayed event decided")
            (decision,) = await decided()
            assert json.loads(decision.data)["run_id"] == run_id
            assert json.loads(decision.data)["action"] == "operator"
    finally:
        await nc.close()


async def test_a_dead_letter_keeps_the_original_message_id_only_as_a_plain_header(
    services: str, nc: Client
) -> None:
    js = nc.jetstream()
    ids = {"plain": "ev-1:x", "spaced": "ev 1", "long": "e" * 1025, "control": "ev\x01"}
    for name, original in ids.items():
        await dead_letter(
            js,
            subjects.DEAD_INVALID,
            reason="malformed_json",
            original_subject=f"continuity.events.r-{name}.resume_failed",
            payload=b"{}",
            msg_id=f"dead:test:{uid()}",
            service="test",
            original_msg_id=original,
        )
    stored = {
        m.headers["Continuity-Original-Subject"]: m.headers
        for m in await read_stream(js, subjects.DEAD_STREAM, subjects.DEAD_INVALID)
        if m.headers and m.headers.get("Continuity-Service") == "test"
    }
    kept = {name: stored[f"continuity.events.r-{name}.resume_failed"].get(DEAD_MSG_ID_HEADER) for name in ids}
    assert kept == {"plain": "ev-1:x", "spaced": None, "long": None, "control": None}
