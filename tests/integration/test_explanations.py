"""Explained decisions, replays, declared compatibility and the rollout preview, against the
classifier, the session-store and the reconciliation service on real NATS and Redis."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import DecideRequest, ErrorInfo, GetRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import POLICY_MAX_BYTES
from shared.contract.policy import (
    DeclarationsRequest,
    DeclareRequest,
    PreviewRequest,
    ReplayRequest,
    RevokeRequest,
)
from shared.contract.runs import RunsListRequest
from shared.platform.redis import Redis
from shared.policy import SHIPPED, PolicyRefused, dump
from shared.policy.configured import configured_policy
from shared.records import decisions, names
from shared.records.compatibility import Declarations, declaration_id
from shared.records.store import COMPATIBILITY_AUDIT_KEPT, RunStore
from tests.support import (
    KEYS,
    Bus,
    RunningApp,
    make_config,
    new_runner_id,
    resume_failed,
    running,
    seed_session,
    tool_call,
)
from tests.support.cli import run_cli
from tests.support.sessions import commit_req
from tests.support.waiting import wait_for

pytestmark = pytest.mark.asyncio

SCENARIOS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[2] / "sdk" / "scenarios.json").read_text()
)["scenarios"]


@pytest.fixture(scope="module")
def own_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("explain-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def services(own_nats: NatsServer, own_redis: RedisServer) -> AsyncIterator[list[RunningApp]]:
    config = make_config(own_nats.url, own_redis.url, runner_keys=KEYS, tenant_recovery_budget=1_000_000)
    async with (
        running(registry.load("classifier"), config) as classifier,
        running(registry.load("session-store"), config) as sessions,
        running(registry.load("reconciliation"), config) as reconciliation,
    ):
        yield [classifier, sessions, reconciliation]


@pytest.fixture(scope="module")
async def flushed(own_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(own_redis.url)
    await client.flushdb()
    await client.aclose()


@pytest.fixture
async def c(services: list[RunningApp], own_nats: NatsServer) -> AsyncIterator[ContinuityClient]:
    nc = await nats.connect(own_nats.url)
    yield ContinuityClient(nc, timeout=30)
    await nc.close()


@pytest.fixture
async def r(own_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(own_redis.url)
    yield client
    await client.aclose()


def scenario_event(
    runner: str, scenario: dict[str, Any], session: SessionRef, attempt: int, governed: bool
) -> Any:
    fields = scenario["event"]
    result = fields.get("command_result")
    error = fields.get("error")
    return resume_failed(
        runner,
        session=session,
        attempt=attempt,
        classification=result["classification"] if result else None,
        error=ErrorInfo(**error) if error else None,
        pending=tool_call() if "pending_tool_call" in fields else None,
        governed_wait_elapsed=governed,
    )


RECORDED: dict[str, tuple[str, str]] = {}
"""run_id -> (row, action as recorded) of the events below, for the replays after them."""


async def test_every_scenario_row_is_explained_by_the_row_the_contract_says(
    flushed: None, services: list[RunningApp], own_nats: NatsServer, r: aioredis.Redis, c: ContinuityClient
) -> None:
    nc = await nats.connect(own_nats.url)
    bus = Bus(nc.jetstream())
    runner = new_runner_id()
    cases = []
    for scenario in SCENARIOS:
        if scenario["dead"] is not None or not scenario["expect"]:
            continue
        for n, row in enumerate(scenario["expect"]):
            session = SessionRef(
                tenant="acme", conversation_id=f"conv-{scenario['name']}-{n}", agent_id="codex"
            )
            await seed_session(r, session, row["policy"])
            event = scenario_event(runner, scenario, session, row["attempt"], row["governed_wait_elapsed"])
            cases.append((event, row))
            last = await bus.publish(event)
    await bus.settled(last, timeout=60)
    await nc.close()
    assert len(cases) > 50
    for event, row in cases:
        audit = await c.audit(event.run_id)
        (entry,) = [e for e in audit.items if e.explanation is not None]
        why = entry.explanation
        assert why is not None
        action = "archive" if row["archive_first"] else row["action"]
        assert (entry.action, entry.reason, why.rule) == (action, row["reason"], row["rule"]), row
        assert (why.attempt, why.checkpoint_policy, why.policy) == (
            row["attempt"],
            row["policy"],
            "shipped-1",
        )
        assert why.governed_wait_elapsed == row["governed_wait_elapsed"]
        RECORDED[event.run_id] = (why.rule, action)


async def indexed(c: ContinuityClient, count: int) -> None:
    async def done() -> bool:
        return len((await c.runs_upto(RunsListRequest(limit=1000))).items) >= count

    await wait_for(done, timeout=30, what=f"{count} runs indexed")


async def test_replaying_the_running_policy_reproduces_every_recorded_decision(c: ContinuityClient) -> None:
    # The index follows published decisions: an archive request is not one (the archiver's is).
    decided = {run for run, (_, action) in RECORDED.items() if action != "archive"}
    assert decided
    await indexed(c, len(decided))
    reply = await c.replay(ReplayRequest())
    assert (reply.policy, reply.running_policy) == ("shipped-1", "shipped-1")
    assert reply.replayed == len(decided) and reply.unchanged == reply.replayed, reply
    assert reply.changes == [] and reply.skipped == 0 and not reply.truncated


async def test_a_replay_reads_at_most_max_runs_and_says_so(c: ContinuityClient) -> None:
    reply = await c.replay(ReplayRequest(max_runs=3))
    assert reply.truncated and 1 <= reply.replayed <= 3
    everything = await c.replay(ReplayRequest())
    assert not everything.truncated and everything.replayed > 3


async def test_a_candidate_changing_one_row_reports_exactly_its_runs(c: ContinuityClient) -> None:
    doc = json.loads(dump(SHIPPED))
    doc["version"] = "candidate-operator-first"
    next(row for row in doc["recovery"] if row["id"] == "4.4.9").update(
        action="operator", reason="native_session_retry_exhausted"
    )
    reply = await c.replay(ReplayRequest(policy=json.dumps(doc), examples=100))
    (change,) = reply.changes
    expected = {run for run, (rule, _) in RECORDED.items() if rule == "4.4.9"}
    assert set(change.runs) == expected and change.count == len(expected)
    assert (change.rule, change.candidate_rule, change.candidate_action) == ("4.4.9", "4.4.9", "operator")
    assert reply.policy == "candidate-operator-first" and reply.running_policy == "shipped-1"


async def test_a_replay_of_a_policy_breaking_an_invariant_is_refused_naming_it(c: ContinuityClient) -> None:
    doc = json.loads(dump(SHIPPED))
    next(row for row in doc["recovery"] if row["id"] == "4.4.2").update(
        action="archive", reason="native_session_continuity_break"
    )
    with pytest.raises(RequestError) as refused:
        await c.replay(ReplayRequest(policy=json.dumps(doc)))
    assert refused.value.code == "policy_refused"
    assert "closed_refusal_never_replaced" in refused.value.message


async def test_a_service_given_a_policy_that_breaks_an_invariant_does_not_start(tmp_path: Path) -> None:
    doc = json.loads(dump(SHIPPED))
    doc["resume"] = [c for c in doc["resume"] if c["id"] != "3.3.3b"]
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps(doc))
    config = make_config("nats://127.0.0.1:1", "redis://127.0.0.1:1/0", policy_file=str(bad))
    with pytest.raises(PolicyRefused) as refused:
        configured_policy(config)
    assert refused.value.invariant == "no_resume_across_generation"


# ---- declared compatibility --------------------------------------------------------------------


def decide_req(session: SessionRef, generation: str | None, **kw: Any) -> DecideRequest:
    base: dict[str, Any] = dict(
        session=session,
        adapter="deepseek-harness",
        model="dsh-pro",
        cwd=commit_req(session).cwd,
        latest_cursor="c-1",
        compatibility="profile-ready",
        ready_generation=generation,
    )
    return DecideRequest(**{**base, **kw})


async def test_a_declared_compatibility_resumes_across_a_changed_generation_and_is_audited(
    c: ContinuityClient, own_nats: NatsServer
) -> None:
    session = SessionRef(tenant="acme", conversation_id="conv-declared", agent_id="codex")
    old, new = "gen-secret-4100", "gen-secret-4200"
    await c.commit(commit_req(session, compatibility_generation=old))
    before = await c.decide(decide_req(session, new))
    assert (before.mode, before.reason, before.rule, before.generation) == (
        "fresh",
        "compatibility_generation_changed",
        "3.3.3b",
        "changed",
    )
    declared = await c.declare(
        DeclareRequest(
            adapter="deepseek-harness", saved_generation=old, ready_generation=new, actor="release-bot"
        )
    )
    after = await c.decide(decide_req(session, new))
    assert after.declaration == declared.id and before.declaration is None  # the explanation names it
    assert (after.mode, after.resume_session_id, after.rule, after.generation) == (
        "resume",
        "ns-1",
        "3.3.4",
        "declared",
    )
    # Only that pair: another new generation is still a change.
    other = await c.decide(decide_req(session, "gen-secret-4300"))
    assert (other.mode, other.generation) == ("fresh", "changed")
    listed = await c.declarations(DeclarationsRequest(adapter="deepseek-harness"))
    assert [d.id for d in listed.items] == [declared.id]
    assert [(a.kind, a.actor, a.id) for a in listed.audit] == [("declared", "release-bot", declared.id)]
    # Neither generation value is kept or shown, anywhere the declaration is.
    raw = msgspec.json.encode(listed) + msgspec.json.encode(declared) + msgspec.json.encode(after)
    assert b"gen-secret" not in raw
    # The same pair declared again changes nothing and answers the first declaration.
    again = await c.declare(
        DeclareRequest(adapter="deepseek-harness", saved_generation=old, ready_generation=new, actor="bob")
    )
    assert again == declared
    assert len((await c.declarations(DeclarationsRequest(adapter="deepseek-harness"))).audit) == 1
    await c.revoke_declaration(RevokeRequest(id=declared.id, actor="alice"))
    with pytest.raises(RequestError) as unknown:
        await c.revoke_declaration(RevokeRequest(id=declared.id, actor="alice"))
    assert unknown.value.code == "not_found"
    revoked = await c.decide(decide_req(session, new))
    assert (revoked.mode, revoked.reason) == ("fresh", "compatibility_generation_changed")
    trail = (await c.declarations(DeclarationsRequest())).audit
    assert [a.kind for a in trail if a.id == declared.id] == ["revoked", "declared"]


# ---- the rollout preview ----------------------------------------------------------------------


async def test_the_preview_counts_what_the_next_decides_do(c: ContinuityClient, r: aioredis.Redis) -> None:
    adapter, new = "preview-harness", "gen-p-2"
    made: list[SessionRef] = []

    async def saved(tenant: str, n: int, generation: str | None, **kw: Any) -> SessionRef:
        session = SessionRef(tenant=tenant, conversation_id=f"conv-preview-{n}", agent_id="codex")
        await c.commit(commit_req(session, adapter=adapter, compatibility_generation=generation, **kw))
        made.append(session)
        return session

    await saved("acme", 1, "gen-p-1")  # changed: fresh
    await saved("acme", 2, new)  # matched: resume
    await saved("acme", 3, None)  # missing: fresh
    await saved("globex", 4, "gen-p-0")  # declared below: resume
    await saved("globex", 5, "gen-p-1", cursor="")  # no cursor: fresh
    held = await saved("globex", 6, new)
    await r.hset(f"continuity:session:{{{held.key}}}", "state", "held")  # held: fresh
    await c.commit(
        commit_req(
            SessionRef(tenant="acme", conversation_id="conv-other", agent_id="x"),
            compatibility_generation="gen-p-1",
        )
    )
    declared = await c.declare(
        DeclareRequest(adapter=adapter, saved_generation="gen-p-0", ready_generation=new, actor="alice")
    )

    preview = await c.preview(PreviewRequest(adapter=adapter, generation=new))
    assert preview.scanned == len(made) and preview.declarations == [declared.id]
    assert msgspec.json.encode(preview).count(b"gen-p-") == 0

    # The next turn of each: the same model, cwd and cursor, the new generation.
    actual: dict[str, Counter[str]] = {}
    for session in made:
        stored = await c.get(GetRequest(session=session))
        reply = await c.decide(
            DecideRequest(
                session=session,
                adapter=adapter,
                model=stored.model,
                cwd=stored.cwd,
                latest_cursor=stored.cursor or None,
                compatibility="profile-ready",
                ready_generation=new,
            )
        )
        actual.setdefault(session.tenant, Counter())[reply.reason or "resume"] += 1
    shown = {t.tenant: Counter({**t.reasons, "resume": t.resume}) for t in preview.by_tenant}
    assert {t: +counts for t, counts in shown.items()} == {t: +counts for t, counts in actual.items()}
    assert (preview.resume, preview.fresh) == (2, 4)
    only = await c.preview(PreviewRequest(adapter=adapter, generation=new, tenant="globex"))
    assert [t.tenant for t in only.by_tenant] == ["globex"] and only.scanned == 3


# ---- the command ------------------------------------------------------------------------------


async def cli(url: str, *args: str) -> tuple[int, str, str]:
    return await run_cli(url, *args)


async def test_the_command_explains_replays_declares_and_previews(
    own_nats: NatsServer, tmp_path: Path
) -> None:
    run_id = next(run for run, (rule, _) in RECORDED.items() if rule == "4.4.2")
    code, out, err = await cli(own_nats.url, "runs", "explain", run_id)
    assert code == 0, err
    assert "Row                    4.4.2 of policy shipped-1" in out
    assert "(from the signed command result)" in out or "(from the typed error code)" in out
    code, out, err = await cli(own_nats.url, "runs", "show", run_id)
    assert code == 0 and "ROW" in out and " 4.4.2 " in out, err

    doc = json.loads(dump(SHIPPED))
    doc["version"] = "cli-candidate"
    next(row for row in doc["recovery"] if row["id"] == "4.4.9").update(
        action="operator", reason="native_session_retry_exhausted"
    )
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(doc))
    code, out, err = await cli(own_nats.url, "replay", "--policy", str(candidate), "--json")
    assert code == 0, err
    changes = json.loads(out)["changes"]
    assert [(c["rule"], c["candidate_action"]) for c in changes] == [("4.4.9", "operator")]
    code, out, err = await cli(own_nats.url, "replay")
    assert code == 0 and "0 changed" in out, err

    code, out, err = await cli(
        own_nats.url,
        "compatibility", "declare", "--adapter", "cli-harness", "--saved-generation", "g-a",
        "--ready-generation", "g-b", "--actor", "alice", "--json",
    )  # fmt: skip
    assert code == 0, err
    declared = json.loads(out)["id"]
    code, out, err = await cli(own_nats.url, "compatibility", "list", "--adapter", "cli-harness")
    assert code == 0 and declared in out and "declared" in out, err
    code, out, err = await cli(
        own_nats.url, "sessions", "preview", "--adapter", "preview-harness", "--generation", "gen-p-2"
    )
    assert code == 0 and "would resume" in out, err
    code, out, err = await cli(own_nats.url, "compatibility", "revoke", declared, "--actor", "alice")
    assert code == 0 and f"Revoked {declared}" in out, err


async def test_the_declarations_audit_keeps_its_last_entries(own_redis: RedisServer) -> None:
    client = Redis(own_redis.url)
    declarations = Declarations(client, RunStore(client))
    for n in range(COMPATIBILITY_AUDIT_KEPT + 5):
        await declarations.declare("audit-harness", f"g-{n}", f"g-{n + 1}", "alice", None)
    trail = await declarations.audit()
    await client.aclose()
    assert len(trail) == COMPATIBILITY_AUDIT_KEPT
    # Newest first: the five oldest were let go.
    assert trail[0].id == declaration_id(
        "audit-harness", f"g-{COMPATIBILITY_AUDIT_KEPT + 4}", f"g-{COMPATIBILITY_AUDIT_KEPT + 5}"
    )
    assert trail[-1].id == declaration_id("audit-harness", "g-5", "g-6")


async def test_a_replay_counts_decisions_recorded_without_an_explanation(
    c: ContinuityClient, own_redis: RedisServer, own_nats: NatsServer
) -> None:
    """A decision of an earlier release has no explanation: it is skipped, and counted."""
    client = Redis(own_redis.url)
    session = SessionRef(tenant="acme", conversation_id="conv-unexplained", agent_id="codex")
    run = resume_failed("r-old", session=session)
    decided = decisions.decision(run, "operator", "native_event_replay_conflict", time.time())
    step = decisions.decision_step(decided, names.classifier_slot(1), "classifier")
    await RunStore(client).record_step(session.key, run.run_id, msgspec.structs.replace(step, outbox=[]))
    await client.aclose()
    before = (await c.replay(ReplayRequest())).skipped
    nc = await nats.connect(own_nats.url)
    await nc.jetstream().publish(
        subjects.decisions(decided.runner_id),
        msgspec.json.encode(decided),
        headers={"Nats-Msg-Id": decided.decision_id},
    )
    await nc.close()

    async def skipped() -> bool:
        return (await c.replay(ReplayRequest())).skipped == before + 1

    await wait_for(skipped, timeout=30, what="the unexplained decision indexed and skipped")
    assert (await c.replay(ReplayRequest())).changes == []


async def test_a_policy_file_at_its_size_bound_is_replayed(c: ContinuityClient) -> None:
    """A policy file of up to 64 KiB travels in a replay request, escaped, whatever its layout:
    the replay endpoint reads more than an ordinary request for it."""
    doc = json.loads(dump(SHIPPED))
    doc["version"] = "padded"
    text = json.dumps(doc, indent=2)
    # Line breaks and quotes are escaped in the request: the most expensive padding there is.
    text += "\n" * (POLICY_MAX_BYTES - len(text.encode()))
    assert len(text.encode()) == POLICY_MAX_BYTES
    reply = await c.replay(ReplayRequest(policy=text))
    assert reply.policy == "padded" and reply.changes == []
