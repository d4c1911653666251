"""`Runner.recover` against the four services on real NATS and Redis: an outcome of the shared
corpus goes in, and exactly one thing happens: nothing (not a failure), a rejection of the saved
handle with nothing reported (the probe finds no file of the session), or a `resume_failed` whose
command result is signed with the harness class, decided by that class's row of contract 4.4.
The sessions' files are laid out, as the shipped table says, in a home of each test's own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from continuity_runner import (
    Decision,
    InvalidRequest,
    Runner,
    RunnerOptions,
    SessionRef,
    ToolCall,
    connect,
    harness,
)
from continuity_runner.signing import now_rfc3339

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import subjects
from tests.support import make_config, read_stream, running

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
CASES = {c["id"]: c for c in json.loads((ROOT / "sdk" / "harness-corpus.json").read_text())["cases"]}
KEY_ID, KEY = "recover-k1", b"the runner key of the recover tests"
MODEL, CWD = "model-1", "/workspaces/acme/app"


@pytest.fixture(scope="module")
def recover_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own: its runners' consumers clash with no other module's."""
    server = NatsServer(tmp_path_factory.mktemp("recover-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def stack(recover_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(recover_nats.url, redis_server.url, runner_keys={KEY_ID: KEY}, retry_backoff_s=1.0)
    apps = [registry.load(name) for name in ("session-store", "classifier", "archiver", "reconciliation")]
    async with contextlib.AsyncExitStack() as services:
        for app in apps:
            await services.enter_async_context(running(app, config))
        yield recover_nats.url


@pytest.fixture
async def runner(stack: str) -> AsyncIterator[Runner]:
    r = await connect(
        RunnerOptions(runner_id=f"recover-{uuid.uuid4().hex[:10]}", servers=stack, signing_keys={KEY_ID: KEY})
    )
    yield r
    await r.close()


def slot() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="agent-1")


def native_id(name: str) -> str:
    return f"conv-{uuid.uuid4().hex[:8]}" if name == "openai-agents" else str(uuid.uuid4())


def home(tmp_path: Path, name: str, session_id: str, present: bool) -> dict[str, str]:
    """A home for the probe: the session's file where the table's first path puts it (`present`),
    else the harness's root alone."""
    env = {"HOME": str(tmp_path / "home")}
    sessions = harness.adapter(name).spec.sessions
    if sessions is None:
        return env
    root = Path(harness.sessions_root(sessions, env) or "")
    root.mkdir(parents=True)
    if present:
        key = harness.cwd_key(sessions.cwd_key, CWD, env) if sessions.cwd_key else ""
        relative = (
            sessions.paths[0]
            .replace("{session_id}", session_id)
            .replace("{session_id_8}", session_id[:8])
            .replace("{cwd_key}", key)
            .replace("*", "x")
        )
        path = root / relative
        path.parent.mkdir(parents=True)
        path.write_text("{}\n")
    return env


async def saved(runner: Runner, name: str, session_id: str) -> SessionRef:
    session = slot()
    await runner.commit(session, session_id, name, MODEL, CWD, "same_session_only", cursor="c-1")
    return session


async def decision_of(runner: Runner, run_id: str) -> Decision:
    async def first() -> Decision:
        async for delivery in runner.decisions():
            await delivery.ack()
            message = delivery.message
            if isinstance(message, Decision) and message.run_id == run_id:
                return message
            assert isinstance(message, Decision), message  # a refusal would end the test here
        raise AssertionError("the decisions ended")

    return await asyncio.wait_for(first(), 30)


async def events_of(stack: str, runner: Runner) -> list[dict[str, Any]]:
    nc = await nats.connect(stack)
    try:
        stored = await read_stream(
            nc.jetstream(), subjects.EVENTS_STREAM, subjects.event(runner.runner_id, ">")
        )
        return [msgspec.json.decode(m.data) for m in stored]
    finally:
        await nc.close()


ROWS = [
    # (corpus case, action, reason, row)
    ("claude-code.real.missing-exit1", "continue_fresh", "native_session_missing", "4.4.10"),
    ("codex.real.active-writer", "retry_same_session", "native_session_busy", "4.4.13"),
    ("claude-code.prompt-too-long-as-success", "operator", "native_context_overflow", "4.4.11"),
    ("claude-code.orphan-tool-use", "operator", "native_transcript_corrupt", "4.4.12"),
    ("gemini-cli.real.no-auth-json", "retry_same_session", "native_session_interrupted", "4.4.9"),
]


@pytest.mark.parametrize(("case_id", "action", "reason", "row"), ROWS, ids=[r[0] for r in ROWS])
async def test_a_failure_is_reported_with_its_class_signed_and_decided_by_its_row(
    stack: str, runner: Runner, tmp_path: Path, case_id: str, action: str, reason: str, row: str
) -> None:
    case = CASES[case_id]
    name, expected = case["harness"], case["expect"]
    session_id = native_id(name)
    session = await saved(runner, name, session_id)
    run_id = f"run-{uuid.uuid4().hex}"
    verdict = await runner.recover(
        harness.adapter(name),
        case["outcome"],
        session=session,
        run_id=run_id,
        attempt=1,
        native_session_id=session_id,
        cwd=CWD,
        env=home(tmp_path, name, session_id, present=True),
    )
    assert isinstance(verdict, harness.Reported), verdict
    assert (verdict.failure_class, verdict.rule, verdict.presence) == (
        expected["failure_class"],
        expected["rule"],
        "present",
    )
    decision = await decision_of(runner, run_id)
    assert (decision.action, decision.reason, decision.rule) == (action, reason, row), decision
    assert decision.failure_class == expected["failure_class"]
    [event] = await events_of(stack, runner)
    result = event["command_result"]
    assert event["event_id"] == verdict.event_id and event["native_session_id"] == session_id
    assert (result["command"], result["status"], result["key_id"]) == (f"{name}.resume", "failed", KEY_ID)
    # `unclassified` is no class of a command result: null, and the classifier's own rows decide.
    signed = None if expected["failure_class"] == "unclassified" else expected["failure_class"]
    assert result["classification"] == signed
    record = await runner.get(session)
    if action == "continue_fresh":
        assert record.state == "rejected"
        reply = await runner.decide(session, name, MODEL, CWD, latest_cursor="c-1")
        assert (reply.mode, reply.reason, reply.transcript) == ("fresh", "resume_target_rejected", "full")
    elif action == "operator":
        assert record.state == "held"
    else:
        assert record.state == "active" and decision.not_before is not None


async def test_an_absent_session_is_rejected_and_nothing_is_reported(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    case = CASES["claude-code.real.missing-exit1"]
    session_id = str(uuid.uuid4())
    session = await saved(runner, "claude-code", session_id)
    before = await runner.get(session)
    env = home(tmp_path, "claude-code", session_id, present=False)
    adapter = harness.adapter("claude-code")
    assert adapter.probe(session_id, cwd=CWD, env=env) == "absent"
    verdict = await runner.recover(
        adapter,
        case["outcome"],
        session=session,
        run_id=f"run-{uuid.uuid4().hex}",
        attempt=1,
        native_session_id=session_id,
        cwd=CWD,
        env=env,
    )
    assert verdict == harness.Rejected("native_session_missing", "claude-code.missing.stderr", cleared=True)
    assert (verdict.kind, verdict.code) == ("rejected", "resume_target_missing")
    after = await runner.get(session)
    assert (after.state, after.revision) == ("rejected", before.revision + 1)
    reply = await runner.decide(session, "claude-code", MODEL, CWD, latest_cursor="c-1")
    assert (reply.mode, reply.reason, reply.transcript) == ("fresh", "resume_target_rejected", "full")
    assert await events_of(stack, runner) == []


async def test_an_unclassified_failure_of_an_absent_session_is_rejected_too(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    """What no rule types (paperclip#9012: output nobody could read, retried 212 times) is still
    no session to resume when the probe finds no file of it."""
    session_id = str(uuid.uuid4())
    session = await saved(runner, "codex", session_id)
    verdict = await runner.recover(
        harness.adapter("codex"),
        harness.Outcome(exit_code=1, stderr="Error: something nobody wrote a rule for\n"),
        session=session,
        run_id=f"run-{uuid.uuid4().hex}",
        attempt=1,
        native_session_id=session_id,
        env=home(tmp_path, "codex", session_id, present=False),
    )
    assert verdict == harness.Rejected("unclassified", "codex.failure", cleared=True)
    assert (await runner.get(session)).state == "rejected"
    assert await events_of(stack, runner) == []


async def test_a_rejection_of_a_handle_no_longer_saved_changes_nothing(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    session_id, newer = str(uuid.uuid4()), str(uuid.uuid4())
    session = await saved(runner, "claude-code", session_id)
    await runner.commit(session, newer, "claude-code", MODEL, CWD, "same_session_only", cursor="c-2")
    before = await runner.get(session)
    verdict = await runner.recover(
        harness.adapter("claude-code"),
        CASES["claude-code.real.missing-exit1"]["outcome"],
        session=session,
        run_id=f"run-{uuid.uuid4().hex}",
        attempt=1,
        native_session_id=session_id,
        cwd=CWD,
        env=home(tmp_path, "claude-code", session_id, present=False),
    )
    assert isinstance(verdict, harness.Rejected) and verdict.cleared is False
    after = await runner.get(session)
    assert (after.state, after.revision, after.native_session_id) == ("active", before.revision, newer)
    assert await events_of(stack, runner) == []


async def test_without_the_probe_or_its_knowledge_the_failure_is_reported(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    # Asked not to probe: an absent session is reported, and the classifier's row 4.4.10 rejects it.
    session_id = str(uuid.uuid4())
    session = await saved(runner, "claude-code", session_id)
    run_id = f"run-{uuid.uuid4().hex}"
    verdict = await runner.recover(
        harness.adapter("claude-code"),
        CASES["claude-code.real.missing-exit1"]["outcome"],
        session=session,
        run_id=run_id,
        attempt=1,
        native_session_id=session_id,
        cwd=CWD,
        env=home(tmp_path, "claude-code", session_id, present=False),
        probe_first=False,
    )
    assert isinstance(verdict, harness.Reported) and verdict.presence is None
    assert (await decision_of(runner, run_id)).rule == "4.4.10"
    assert (await runner.get(session)).state == "rejected"

    # A harness that keeps nothing on this host: the probe cannot tell, the failure is reported.
    case = CASES["openai-agents.previous-response-not-found"]
    session_id = native_id("openai-agents")
    session = await saved(runner, "openai-agents", session_id)
    run_id = f"run-{uuid.uuid4().hex}"
    verdict = await runner.recover(
        harness.adapter("openai-agents"),
        case["outcome"],
        session=session,
        run_id=run_id,
        attempt=2,
        native_session_id=session_id,
        env={},
        command="agents.run",
    )
    assert isinstance(verdict, harness.Reported) and verdict.presence == "unknown"
    decision = await decision_of(runner, run_id)
    assert (decision.action, decision.rule, decision.attempt) == ("continue_fresh", "4.4.10", 2)
    assert [e["command_result"]["command"] for e in await events_of(stack, runner)] == [
        "claude-code.resume",
        "agents.run",
    ]


async def test_a_corrupt_transcript_with_a_pending_tool_call_is_reconciled_first(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    session_id = str(uuid.uuid4())
    session = await saved(runner, "claude-code", session_id)
    run_id = f"run-{uuid.uuid4().hex}"
    pending = ToolCall(
        tool_call_id="toolu_019MgEXFFrY5MHhv9PqJDRQe", tool_name="Bash", started_at=now_rfc3339()
    )
    verdict = await runner.recover(
        harness.adapter("claude-code"),
        CASES["claude-code.orphan-tool-use"]["outcome"],
        session=session,
        run_id=run_id,
        attempt=1,
        native_session_id=session_id,
        cwd=CWD,
        env=home(tmp_path, "claude-code", session_id, present=True),
        pending_tool_call=pending,
    )
    assert isinstance(verdict, harness.Reported) and verdict.failure_class == "transcript_corrupt"
    decision = await decision_of(runner, run_id)
    assert (decision.action, decision.rule) == ("reconcile", "4.4.1")


async def test_an_outcome_that_is_no_failure_sends_nothing(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    for case_id in ("claude-code.fp.answer-quotes-missing", "codex-app-server.real.new-thread-preflight"):
        case = CASES[case_id]
        session_id = str(uuid.uuid4())
        session = await saved(runner, case["harness"], session_id)
        verdict = await runner.recover(
            harness.adapter(case["harness"]),
            case["outcome"],
            session=session,
            run_id=f"run-{uuid.uuid4().hex}",
            attempt=1,
            native_session_id=session_id,
            cwd=CWD,
            env=home(tmp_path / case_id, case["harness"], session_id, present=False),
        )
        assert verdict == harness.NotAFailure(case["expect"]["rule"]) and verdict.kind == "not_a_failure"
        assert (await runner.get(session)).state == "active"  # absent, yet nothing was rejected
    assert await events_of(stack, runner) == []


async def test_bad_input_is_refused_before_anything_is_probed_or_sent(
    stack: str, runner: Runner, tmp_path: Path
) -> None:
    session_id = str(uuid.uuid4())
    session = await saved(runner, "claude-code", session_id)
    before = await runner.get(session)
    env = home(tmp_path, "claude-code", session_id, present=False)  # a probe would reject
    good: dict[str, Any] = {
        "session": session,
        "run_id": f"run-{uuid.uuid4().hex}",
        "attempt": 1,
        "native_session_id": session_id,
        "cwd": CWD,
        "env": env,
    }
    adapter = harness.adapter("claude-code")
    missing = CASES["claude-code.real.missing-exit1"]["outcome"]
    cases: list[tuple[Any, dict[str, Any], str]] = [
        ({"exit_code": 1, "stdout": "x" * (4 * 1024 * 1024), "stderr": "y"}, {}, "payload_too_large"),
        ({"exit_code": "1", "stdout": "", "stderr": ""}, {}, "invalid_field"),
        (missing, {"run_id": "run id with spaces"}, "invalid_field"),
        (missing, {"attempt": 0}, "invalid_field"),
        (missing, {"native_session_id": "a/b"}, "invalid_field"),
    ]
    for outcome, changes, code in cases:
        with pytest.raises(InvalidRequest) as refused:
            await runner.recover(adapter, outcome, **(good | changes))
        assert refused.value.code == code
    after = await runner.get(session)
    assert (after.state, after.revision) == ("active", before.revision)
    assert await events_of(stack, runner) == []
