"""The Python runner SDK's outcomes (contract 4.6) on a real NATS server with the contract's
streams: `report_turn_completed` publishes on `continuity.events.<runner_id>.turn_completed` an
event the services decode as their own `TurnCompleted`, whose result verifies under the runner's
key; a bad argument is refused before anything is sent; `report_resume_failure` and
`Runner.recover` name the harness; and `recover` sends a `turn_completed` for an outcome that is
not a failure only when told the attempt of the decision the resume followed. Last, with the
services running on real NATS and Redis: the run of a decision the SDK reports on is recovered."""

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
    HarnessInfo,
    InvalidRequest,
    Runner,
    RunnerOptions,
    SessionRef,
    connect,
    harness,
)
from nats.aio.client import Client
from nats.aio.msg import Msg

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import ResumeFailed, TurnCompleted, subjects
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.events import TURN_COMMAND, TURN_STATUS
from shared.contract.signing import Verdict, verify
from shared.platform.bus.streams import ensure_streams
from tests.support import make_config, read_stream, running, wait_for

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
CASES = {c["id"]: c for c in json.loads((ROOT / "sdk" / "harness-corpus.json").read_text())["cases"]}
KEY_ID, KEY = "outcomes-k1", b"the runner key of the outcome tests"
KEYS = {KEY_ID: KEY}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CLAUDE = HarnessInfo(name="claude-code", version="2.1.332")
SUCCESS = CASES["claude-code.fp.answer-quotes-missing"]  # a successful turn whose answer quotes an error
FAILURE = CASES["claude-code.background-agent"]  # session_busy


@pytest.fixture(scope="module")
def outcomes_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own, with the contract's streams and no service: what a runner
    publishes stays in CONTINUITY_EVENTS exactly as it was sent."""
    server = NatsServer(tmp_path_factory.mktemp("outcomes-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def streams(outcomes_nats: NatsServer) -> AsyncIterator[str]:
    nc = await nats.connect(outcomes_nats.url)
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()
    yield outcomes_nats.url


@pytest.fixture
async def observer(streams: str) -> AsyncIterator[Client]:
    nc = await nats.connect(streams)
    yield nc
    await nc.close()


@pytest.fixture
async def runner(streams: str) -> AsyncIterator[Runner]:
    r = await connect(
        RunnerOptions(
            runner_id=f"outcomes-{uuid.uuid4().hex[:10]}",
            servers=streams,
            signing_keys=KEYS,
            publish_attempts=1,
        )
    )
    yield r
    await r.close()


def slot() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="claude")


def new_run() -> str:
    return f"run-{uuid.uuid4().hex}"


async def stored(observer: Client, runner: Runner, event_type: str = ">") -> list[Msg]:
    """Every event of `runner` the events stream holds on `event_type`'s subject (all with `>`)."""
    return await read_stream(
        observer.jetstream(), subjects.EVENTS_STREAM, subjects.event(runner.runner_id, event_type)
    )


def turn_of(msg: Msg) -> TurnCompleted:
    """The stored event as the services decode it."""
    return msgspec.json.decode(msg.data, type=TurnCompleted)


async def test_a_turn_completed_lands_on_its_subject_decodes_as_the_servers_and_verifies(
    runner: Runner, observer: Client
) -> None:
    session, run_id = slot(), new_run()
    event_id = await runner.report_turn_completed(
        run_id, 2, session, "ns-1", harness=CLAUDE, traceparent=TRACEPARENT
    )
    [msg] = await stored(observer, runner)
    assert msg.subject == f"continuity.events.{runner.runner_id}.turn_completed"
    assert msg.subject == subjects.event(runner.runner_id, subjects.TURN_COMPLETED)
    assert msg.headers is not None
    assert (msg.headers["Nats-Msg-Id"], msg.headers["traceparent"]) == (event_id, TRACEPARENT)
    event = turn_of(msg)
    assert (event.type, event.event_id, event.runner_id) == ("turn_completed", event_id, runner.runner_id)
    assert (event.run_id, event.attempt, event.native_session_id) == (run_id, 2, "ns-1")
    assert msgspec.to_builtins(event.session) == msgspec.to_builtins(session)
    assert event.harness is not None and (event.harness.name, event.harness.version) == (
        "claude-code",
        "2.1.332",
    )
    result = event.result
    assert (result.command, result.status, result.classification) == (TURN_COMMAND, TURN_STATUS, None)
    assert (result.command, result.status) == ("turn", "completed")
    assert result.key_id == KEY_ID
    assert verify(KEYS, runner.runner_id, run_id, 2, result) is Verdict.VALID
    # Signed for this run and attempt: under any other, it does not verify.
    assert verify(KEYS, runner.runner_id, run_id, 1, result) is Verdict.SIGNATURE_INVALID
    assert verify(KEYS, runner.runner_id, new_run(), 2, result) is Verdict.SIGNATURE_INVALID
    assert verify({"other": KEY}, runner.runner_id, run_id, 2, result) is Verdict.UNKNOWN_KEY


async def test_without_a_harness_the_event_says_none_and_a_given_event_id_is_kept(
    runner: Runner, observer: Client
) -> None:
    run_id = new_run()
    assert (
        await runner.report_turn_completed(run_id, 1, slot(), "ns-2", event_id="evt-given-1") == "evt-given-1"
    )
    # Sent again with its id (a retry after a lost acknowledgement): the stream keeps one copy.
    assert (
        await runner.report_turn_completed(run_id, 1, slot(), "ns-2", event_id="evt-given-1") == "evt-given-1"
    )
    [msg] = await stored(observer, runner, "turn_completed")
    event = turn_of(msg)
    assert (event.event_id, event.harness) == ("evt-given-1", None)
    assert msgspec.json.decode(msg.data)["harness"] is None
    assert verify(KEYS, runner.runner_id, run_id, 1, event.result) is Verdict.VALID


async def test_a_turn_completed_sent_again_keeps_its_signed_result_under_a_new_id(
    runner: Runner, observer: Client
) -> None:
    run_id = new_run()
    first = await runner.report_turn_completed(run_id, 3, slot(), "ns-3", harness=CLAUDE)
    again = await runner.resend(first)
    assert again != first
    msgs = await stored(observer, runner)
    assert [m.subject for m in msgs] == [subjects.event(runner.runner_id, "turn_completed")] * 2
    one, two = (turn_of(m) for m in msgs)
    assert (one.event_id, two.event_id) == (first, again)
    assert two.result == one.result and two.occurred_at == one.occurred_at
    assert verify(KEYS, runner.runner_id, run_id, 3, two.result) is Verdict.VALID


BAD_TURNS: list[tuple[str, dict[str, Any], str]] = [
    ("run id", {"run_id": "a run id with spaces"}, "run_id"),
    ("attempt 0", {"attempt": 0}, "attempt"),
    ("attempt over the limit", {"attempt": 1001}, "attempt"),
    ("attempt not an integer", {"attempt": "2"}, "attempt"),
    ("native session id", {"native_session_id": "a/b"}, "native_session_id"),
    (
        "tenant",
        {"session": SessionRef(tenant="a tenant", conversation_id="c", agent_id="a")},
        "session.tenant",
    ),
    ("harness name", {"harness": HarnessInfo(name="Claude Code")}, "harness.name"),
    ("harness version", {"harness": HarnessInfo(name="claude-code", version="-1")}, "harness.version"),
    ("harness not a HarnessInfo", {"harness": "claude-code"}, "harness"),
    ("event id", {"event_id": "evt/1"}, "event_id"),
    ("traceparent", {"traceparent": "00-not-a-trace"}, "traceparent"),
]


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in BAD_TURNS], ids=[c[0] for c in BAD_TURNS])
async def test_a_bad_argument_is_refused_before_anything_is_sent(
    runner: Runner, observer: Client, changes: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"run_id": new_run(), "attempt": 1, "session": slot(), "native_session_id": "ns-1"}
    args |= changes
    with pytest.raises(InvalidRequest) as refused:
        await runner.report_turn_completed(**args)
    assert (refused.value.status, refused.value.field) == (400, field)
    assert await stored(observer, runner) == []


async def test_without_a_signing_key_a_turn_is_refused_before_anything_is_sent(
    streams: str, observer: Client
) -> None:
    keyless = await connect(RunnerOptions(runner_id=f"outcomes-{uuid.uuid4().hex[:10]}", servers=streams))
    try:
        with pytest.raises(InvalidRequest):
            await keyless.report_turn_completed(new_run(), 1, slot(), "ns-1")
        assert await stored(observer, keyless) == []
    finally:
        await keyless.close()


async def test_a_resume_failure_names_its_harness(runner: Runner, observer: Client) -> None:
    run_id = new_run()
    event_id = await runner.report_resume_failure(run_id, 1, slot(), "ns-1", harness=CLAUDE)
    [msg] = await stored(observer, runner, "resume_failed")
    event = msgspec.json.decode(msg.data, type=ResumeFailed)
    assert event.event_id == event_id
    assert event.harness is not None and (event.harness.name, event.harness.version) == (
        "claude-code",
        "2.1.332",
    )
    with pytest.raises(InvalidRequest) as refused:
        await runner.report_resume_failure(run_id, 2, slot(), "ns-1", harness=HarnessInfo(name="x y"))
    assert refused.value.field == "harness.name"
    assert len(await stored(observer, runner)) == 1


# ---- Runner.recover -----------------------------------------------------------------------------


async def test_a_successful_resume_sends_nothing_unless_told_its_decided_attempt(
    runner: Runner, observer: Client
) -> None:
    adapter, session_id = harness.adapter("claude-code"), str(uuid.uuid4())
    args: dict[str, Any] = {
        "session": slot(),
        "run_id": new_run(),
        "attempt": 2,
        "native_session_id": session_id,
    }
    rule = SUCCESS["expect"]["rule"]

    untold = await runner.recover(adapter, SUCCESS["outcome"], **args)
    assert untold == harness.NotAFailure(rule) and untold.reported_event_id is None
    assert await stored(observer, runner) == []

    told = await runner.recover(
        adapter,
        SUCCESS["outcome"],
        **args,
        decided_attempt=1,
        harness_version="2.1.332",
        traceparent=TRACEPARENT,
    )
    assert isinstance(told, harness.NotAFailure) and told.kind == "not_a_failure"
    assert told.rule == rule and told.reported_event_id is not None
    [msg] = await stored(observer, runner)
    assert msg.subject == subjects.event(runner.runner_id, "turn_completed")
    assert msg.headers is not None and msg.headers["traceparent"] == TRACEPARENT
    event = turn_of(msg)
    assert (event.event_id, event.run_id, event.attempt) == (told.reported_event_id, args["run_id"], 1)
    assert event.native_session_id == session_id
    assert event.harness is not None and (event.harness.name, event.harness.version) == (
        "claude-code",
        "2.1.332",
    )
    assert verify(KEYS, runner.runner_id, args["run_id"], 1, event.result) is Verdict.VALID


async def test_a_failed_resume_names_the_harness_and_sends_no_turn(runner: Runner, observer: Client) -> None:
    run_id, session_id = new_run(), str(uuid.uuid4())
    verdict = await runner.recover(
        harness.adapter("claude-code"),
        FAILURE["outcome"],
        session=slot(),
        run_id=run_id,
        attempt=2,
        native_session_id=session_id,
        probe_first=False,
        decided_attempt=1,
        harness_version="2.1.332",
    )
    assert isinstance(verdict, harness.Reported) and verdict.failure_class == "session_busy"
    [msg] = await stored(observer, runner)
    assert msg.subject == subjects.event(runner.runner_id, "resume_failed")
    event = msgspec.json.decode(msg.data, type=ResumeFailed)
    assert (event.event_id, event.attempt) == (verdict.event_id, 2)
    assert event.harness is not None and (event.harness.name, event.harness.version) == (
        "claude-code",
        "2.1.332",
    )

    # Without a version, the harness is named alone.
    again = await runner.recover(
        harness.adapter("codex"),
        harness.Outcome(exit_code=1, stderr="Error: something nobody wrote a rule for\n"),
        session=slot(),
        run_id=new_run(),
        attempt=1,
        native_session_id=str(uuid.uuid4()),
        probe_first=False,
    )
    assert isinstance(again, harness.Reported)
    last = msgspec.json.decode((await stored(observer, runner, "resume_failed"))[-1].data, type=ResumeFailed)
    assert last.harness is not None and (last.harness.name, last.harness.version) == ("codex", None)
    assert await stored(observer, runner, "turn_completed") == []


BAD_RECOVERIES: list[tuple[str, dict[str, Any], str]] = [
    ("decided attempt 0", {"decided_attempt": 0}, "decided_attempt"),
    ("decided attempt over the limit", {"decided_attempt": 1001}, "decided_attempt"),
    ("harness version", {"harness_version": "v 2"}, "harness.version"),
    ("event id", {"event_id": "evt/1", "decided_attempt": 1}, "event_id"),
]


@pytest.mark.parametrize(
    ("changes", "field"), [c[1:] for c in BAD_RECOVERIES], ids=[c[0] for c in BAD_RECOVERIES]
)
@pytest.mark.parametrize("case", [SUCCESS, FAILURE], ids=["success", "failure"])
async def test_a_bad_recover_argument_is_refused_before_anything_is_sent(
    runner: Runner, observer: Client, case: dict[str, Any], changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await runner.recover(
            harness.adapter("claude-code"),
            case["outcome"],
            session=slot(),
            run_id=new_run(),
            attempt=2,
            native_session_id=str(uuid.uuid4()),
            probe_first=False,
            **changes,
        )
    assert refused.value.field == field
    assert await stored(observer, runner) == []


# ---- with the services: the outcome recorded ---------------------------------------------------

MISSING = CASES["claude-code.real.missing-exit1"]  # native_session_missing: continue_fresh
MODEL, CWD = "model-1", "/workspaces/acme/app"


@pytest.fixture(scope="module")
async def services(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> AsyncIterator[tuple[str, ContinuityClient]]:
    """The session-store, the classifier and the reconciliation service on a NATS server of
    their own, with the runner's key."""
    server = NatsServer(tmp_path_factory.mktemp("outcomes-services-nats"))
    server.start()
    config = make_config(server.url, redis_server.url, runner_keys=KEYS, retry_backoff_s=0.2)
    apps = [registry.load(name) for name in ("session-store", "classifier", "reconciliation")]
    try:
        async with contextlib.AsyncExitStack() as stack:
            for app in apps:
                await stack.enter_async_context(running(app, config))
            nc = await nats.connect(server.url)
            stack.push_async_callback(nc.close)
            yield server.url, ContinuityClient(nc)
    finally:
        server.stop()


async def decision_of(runner: Runner, run_id: str) -> Decision:
    async def first() -> Decision:
        async for delivery in runner.decisions():
            await delivery.ack()
            message = delivery.message
            assert isinstance(message, Decision), message  # a refusal would end the test here
            if message.run_id == run_id:
                return message
        raise AssertionError("the decisions ended")

    return await asyncio.wait_for(first(), 30)


async def reaches(client: ContinuityClient, run_id: str, status: str) -> None:
    async def done() -> bool:
        try:
            return (await client.run(run_id)).status == status
        except RequestError:
            return False

    await wait_for(done, timeout=30, what=f"run {run_id} {status}")


async def test_the_services_recover_the_run_the_sdk_reports_on(
    services: tuple[str, ContinuityClient],
) -> None:
    url, client = services
    runner = await connect(
        RunnerOptions(runner_id=f"outcomes-{uuid.uuid4().hex[:10]}", servers=url, signing_keys=KEYS)
    )
    try:
        adapter = harness.adapter("claude-code")
        # A resume that failed (busy), retried by the decision; the retry completes its turn.
        session, session_id, run_id = slot(), str(uuid.uuid4()), new_run()
        await runner.commit(session, session_id, "claude-code", MODEL, CWD, "same_session_only", cursor="c-1")
        common: dict[str, Any] = {"session": session, "run_id": run_id, "native_session_id": session_id}
        failed = await runner.recover(adapter, FAILURE["outcome"], **common, attempt=1, probe_first=False)
        assert isinstance(failed, harness.Reported)
        decision = await decision_of(runner, run_id)
        assert (decision.action, decision.attempt) == ("retry_same_session", 1)
        await reaches(client, run_id, "retrying")
        done = await runner.recover(
            adapter,
            SUCCESS["outcome"],
            **common,
            attempt=2,
            decided_attempt=decision.attempt,
            harness_version="2.1.332",
        )
        assert isinstance(done, harness.NotAFailure) and done.reported_event_id is not None
        await reaches(client, run_id, "recovered")

        # A missing session, continued fresh; the fresh session's first turn is reported.
        session, session_id, run_id = slot(), str(uuid.uuid4()), new_run()
        await runner.commit(session, session_id, "claude-code", MODEL, CWD, "same_session_only", cursor="c-1")
        missing = await runner.recover(
            adapter,
            MISSING["outcome"],
            session=session,
            run_id=run_id,
            attempt=1,
            native_session_id=session_id,
            probe_first=False,
        )
        assert isinstance(missing, harness.Reported) and missing.failure_class == "native_session_missing"
        decision = await decision_of(runner, run_id)
        assert (decision.action, decision.attempt) == ("continue_fresh", 1)
        await runner.report_turn_completed(
            run_id, decision.attempt, session, str(uuid.uuid4()), harness=CLAUDE
        )
        await reaches(client, run_id, "recovered_fresh")
    finally:
        await runner.close()
