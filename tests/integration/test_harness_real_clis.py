"""The real agent harness CLIs, pinned by tests/harnesses (`make harnesses`, run by `make test`),
offline, each asked to resume a session that does not exist: what each one really prints and
exits with; the Python harness adapter and `continuity harness classify` reading that as
`native_session_missing`; and, against NATS, Redis and the four services, the runner's two ways
on from it — the failure reported with a signed command result (the classifier's row 4.4.10,
`continue_fresh`, then `fresh` with `resume_target_rejected`), or, when the presence probe finds
no session file, the handle rejected with nothing reported. The presence probe is checked against
the files the real CLIs write when they start a fresh session offline. The binaries run once per
module, at once (each start takes seconds); the example runner around Claude Code runs with the
real binary too."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import nats
import pytest
from continuity_runner import Decision, Runner, RunnerOptions, SessionRef, connect, harness
from continuity_runner.harness import NotAFailure, Outcome, Rejected, Reported

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from shared.contract import subjects
from tests.support import make_config, read_stream, running
from tests.support.harness_clis import (
    BIN,
    CLIS,
    ROOT,
    TIMEOUT_S,
    Captured,
    Started,
    binary,
    offline_env,
    resume_missing,
    start_session,
)

KEY_ID, KEY = "real-cli-k1", b"the runner key of the real harness CLI tests"
CLI = str(Path(sys.executable).parent / "continuity")
EXAMPLE = ROOT / "sdk" / "python" / "examples" / "claude_code_runner.py"
MODEL = "model-1"

EXPECTED: dict[str, tuple[int, str]] = {
    # harness: (exit code, a line of stderr; {id} is the session id asked for)
    "claude-code": (1, "No conversation found with session ID: {id}"),
    "codex": (
        1,
        "Error: thread/resume: thread/resume failed: no rollout found for thread id {id} (code -32600)",
    ),
    "gemini-cli": (42, "Error resuming session: No previous sessions found for this project."),
    "opencode": (1, "\x1b[91m\x1b[1mError: \x1b[0mSession not found"),
}
"""What each pinned CLI really does, seen offline with a fresh home (sdk/harness-corpus.json keeps
these outcomes as its `real:` cases)."""

# ---- the binaries, run once per module -------------------------------------------------------------


WRITES = ["claude-code", "codex", "gemini-cli"]
"""The CLIs that write a fresh session's file offline (opencode keeps its sessions in a database:
its table entry has no probe)."""


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Captured], dict[str, Started]]:
    """Each CLI asked to resume a session that exists nowhere, and the three that can, starting a
    fresh session until its file is written: all at once, once per module."""
    for cli in CLIS.values():
        binary(cli.binary)  # fails, naming `make harnesses`, when one is missing
    folder = tmp_path_factory.mktemp("harness-clis")
    with ThreadPoolExecutor(4) as pool:
        missing = {
            name: pool.submit(resume_missing, cli, folder / f"missing-{name}") for name, cli in CLIS.items()
        }
        started = {
            name: pool.submit(start_session, CLIS[name], folder / f"started-{name}") for name in WRITES
        }
        return {n: f.result() for n, f in missing.items()}, {n: f.result() for n, f in started.items()}


@pytest.fixture(scope="module")
def captured(real: tuple[dict[str, Captured], dict[str, Started]]) -> dict[str, Captured]:
    return real[0]


@pytest.fixture(scope="module")
def written(real: tuple[dict[str, Captured], dict[str, Started]]) -> dict[str, Started]:
    return real[1]


def outcome_of(run: Captured) -> Outcome:
    return Outcome(exit_code=run.exit_code, stdout=run.stdout, stderr=run.stderr)


def test_the_installed_clis_are_the_pinned_versions() -> None:
    lock = json.loads((ROOT / "tests" / "harnesses" / "package-lock.json").read_text())
    for cli in CLIS.values():
        binary(cli.binary)
        installed = json.loads((BIN.parent / cli.package / "package.json").read_text())
        assert (
            installed["version"] == cli.version == lock["packages"][f"node_modules/{cli.package}"]["version"]
        )


@pytest.mark.parametrize("name", list(CLIS))
def test_each_cli_fails_to_resume_a_missing_session_before_any_model_call(
    captured: dict[str, Captured], name: str
) -> None:
    run = captured[name]
    code, line = EXPECTED[name]
    said = f"exit {run.exit_code} after {run.seconds:.1f}s\nstdout: {run.stdout!r}\nstderr: {run.stderr!r}"
    assert run.exit_code == code, said
    assert run.seconds < TIMEOUT_S, said  # it failed by itself: no wait for the network
    assert line.format(id=run.session_id) in run.stderr.splitlines(), said
    assert run.stdout == "", said  # nothing on stdout, not even with --json / --output-format json


@pytest.mark.parametrize("name", list(CLIS))
def test_the_adapter_reads_each_real_outcome_as_a_missing_native_session(
    captured: dict[str, Captured], name: str
) -> None:
    assessed = harness.adapter(name).assess(outcome_of(captured[name]))
    assert assessed.failure_class == "native_session_missing", assessed
    assert assessed.rule.startswith(f"{name}."), assessed
    # The shared corpus keeps the same real outcome, with the same rule.
    corpus = json.loads((ROOT / "sdk" / "harness-corpus.json").read_text())
    real = [c for c in corpus["cases"] if c["harness"] == name and c["source"].startswith("real:")]
    assert any(
        c["expect"] == {"failure_class": "native_session_missing", "rule": assessed.rule} for c in real
    ), f"no real case of {name} in sdk/harness-corpus.json expects {assessed}"


@pytest.mark.parametrize("name", list(CLIS))
def test_continuity_harness_classify_reads_each_real_outcome(
    captured: dict[str, Captured], name: str
) -> None:
    run = captured[name]
    done = subprocess.run(
        [CLI, "harness", "classify", "--harness", name],
        input=json.dumps(run.outcome()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assessed = harness.adapter(name).assess(outcome_of(run))
    assert said["failure_class"] == "native_session_missing", said
    assert said["rule"] == assessed.rule, said


@pytest.mark.parametrize("name", WRITES)
def test_the_probe_finds_the_session_files_the_real_clis_write(
    written: dict[str, Started], captured: dict[str, Captured], name: str
) -> None:
    """The table's `sessions` of each harness against the files its real CLI wrote: present for
    the session it started (also asked from another working directory), absent for another id."""
    started, adapter = written[name], harness.adapter(name)
    assert adapter.probe(started.session_id, cwd=str(started.cwd), env=started.env) == "present", (
        started.files
    )
    assert adapter.probe(started.session_id, cwd="/elsewhere", env=started.env) == "present", started.files
    other = CLIS[name].new_session_id()
    assert adapter.probe(other, cwd=str(started.cwd), env=started.env) == "absent"
    # The run that failed to resume left no file of its session either.
    run = captured[name]
    assert adapter.probe(run.session_id, cwd=str(run.cwd), env=run.env) == "absent"


# ---- end to end, on NATS, Redis and the four services ---------------------------------------------


@pytest.fixture(scope="module")
def real_cli_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A server of this module's own: its runners' consumers clash with no other module's."""
    server = NatsServer(tmp_path_factory.mktemp("real-cli-nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def stack(real_cli_nats: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    config = make_config(real_cli_nats.url, redis_server.url, runner_keys={KEY_ID: KEY})
    apps = [registry.load(name) for name in ("session-store", "classifier", "archiver", "reconciliation")]
    async with contextlib.AsyncExitStack() as services:
        for app in apps:
            await services.enter_async_context(running(app, config))
        yield real_cli_nats.url


@pytest.fixture
async def runner(stack: str) -> AsyncIterator[Runner]:
    r = await connect(
        RunnerOptions(
            runner_id=f"real-cli-{uuid.uuid4().hex[:10]}", servers=stack, signing_keys={KEY_ID: KEY}
        )
    )
    yield r
    await r.close()


def slot() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="agent-1")


async def saved(runner: Runner, run: Captured) -> SessionRef:
    """The session the CLI was asked to resume, committed as an earlier turn left it."""
    session = slot()
    await runner.commit(
        session, run.session_id, run.harness, MODEL, str(run.cwd), "same_session_only", cursor="c-1"
    )
    return session


async def decision_of(runner: Runner, run_id: str) -> Decision:
    async def first() -> Decision:
        async for delivery in runner.decisions():
            await delivery.ack()
            if delivery.decision is not None and delivery.decision.run_id == run_id:
                return delivery.decision
            assert delivery.refusal is None, delivery.refusal
        raise AssertionError("the decisions ended")

    return await asyncio.wait_for(first(), 30)


async def events_of(stack: str, runner: Runner) -> list[dict[str, object]]:
    nc = await nats.connect(stack)
    try:
        stored = await read_stream(
            nc.jetstream(), subjects.EVENTS_STREAM, subjects.event(runner.runner_id, ">")
        )
        return [msgspec.json.decode(m.data) for m in stored]
    finally:
        await nc.close()


@pytest.mark.parametrize("name", list(CLIS))
async def test_a_reported_missing_session_continues_fresh_through_row_4_4_10(
    captured: dict[str, Captured], stack: str, runner: Runner, name: str
) -> None:
    run = captured[name]
    session = await saved(runner, run)
    run_id = f"run-{uuid.uuid4().hex}"
    # The runner does not look for the session on this host (the harness may keep it where the
    # runner cannot see): the failure is reported for the classifier to decide.
    verdict = await runner.recover(
        harness.adapter(name),
        outcome_of(run),
        run_id=run_id,
        attempt=1,
        session=session,
        native_session_id=run.session_id,
        cwd=str(run.cwd),
        env=run.env,
        probe_first=False,
    )
    assert isinstance(verdict, Reported), verdict
    assert verdict.failure_class == "native_session_missing"

    decision = await decision_of(runner, run_id)
    assert (decision.action, decision.reason, decision.rule) == (
        "continue_fresh",
        "native_session_missing",
        "4.4.10",
    ), decision
    assert decision.failure_class == "native_session_missing"
    [event] = await events_of(stack, runner)
    assert event["event_id"] == verdict.event_id
    result = event["command_result"]
    assert isinstance(result, dict)
    assert result["classification"] == "native_session_missing" and result["key_id"] == KEY_ID
    assert result["signature"]

    reply = await runner.decide(session, name, MODEL, str(run.cwd), latest_cursor="c-1")
    assert (reply.mode, reply.reason, reply.transcript) == ("fresh", "resume_target_rejected", "full"), reply
    assert reply.resume_session_id is None


@pytest.mark.parametrize("name", WRITES)
async def test_a_probed_absent_session_is_rejected_without_any_event(
    captured: dict[str, Captured], stack: str, runner: Runner, name: str
) -> None:
    run = captured[name]
    adapter = harness.adapter(name)
    # The runner sees the harness's own home: the probe finds no file of the session.
    assert adapter.probe(run.session_id, cwd=str(run.cwd), env=run.env) == "absent"
    session = await saved(runner, run)
    verdict = await runner.recover(
        adapter,
        outcome_of(run),
        run_id=f"run-{uuid.uuid4().hex}",
        attempt=1,
        session=session,
        native_session_id=run.session_id,
        cwd=str(run.cwd),
        env=run.env,
    )
    assert isinstance(verdict, Rejected), verdict
    assert verdict.failure_class == "native_session_missing"
    reply = await runner.decide(session, name, MODEL, str(run.cwd), latest_cursor="c-1")
    assert (reply.mode, reply.reason, reply.transcript) == ("fresh", "resume_target_rejected", "full"), reply
    assert await events_of(stack, runner) == []


async def test_opencode_whose_sessions_no_probe_sees_is_reported_and_continues_fresh(
    captured: dict[str, Captured], stack: str, runner: Runner
) -> None:
    """opencode keeps its sessions in a database (no file to probe): the probe cannot tell, so
    even when asked first the failure is reported, and row 4.4.10 decides."""
    run, adapter = captured["opencode"], harness.adapter("opencode")
    assert adapter.probe(run.session_id, cwd=str(run.cwd), env=run.env) == "unknown"
    session = await saved(runner, run)
    run_id = f"run-{uuid.uuid4().hex}"
    verdict = await runner.recover(
        adapter,
        outcome_of(run),
        run_id=run_id,
        attempt=1,
        session=session,
        native_session_id=run.session_id,
        cwd=str(run.cwd),
        env=run.env,
    )
    assert isinstance(verdict, Reported) and verdict.presence == "unknown", verdict
    decision = await decision_of(runner, run_id)
    assert (decision.action, decision.reason) == ("continue_fresh", "native_session_missing"), decision
    reply = await runner.decide(session, "opencode", MODEL, str(run.cwd), latest_cursor="c-1")
    assert (reply.mode, reply.reason) == ("fresh", "resume_target_rejected"), reply


async def test_a_successful_outcome_is_no_failure_and_sends_nothing(
    captured: dict[str, Captured], stack: str, runner: Runner
) -> None:
    run = captured["claude-code"]
    session = await saved(runner, run)
    verdict = await runner.recover(
        harness.adapter("claude-code"),
        Outcome(exit_code=0, stdout='{"type": "result", "is_error": false, "result": "done"}', stderr=""),
        run_id=f"run-{uuid.uuid4().hex}",
        attempt=1,
        session=session,
        native_session_id=run.session_id,
        cwd=str(run.cwd),
        env=run.env,
    )
    assert isinstance(verdict, NotAFailure), verdict
    assert await events_of(stack, runner) == []


# ---- the example runner around Claude Code ---------------------------------------------------------


async def run_example(stack: str, tmp: Path, *extra: str) -> tuple[int, list[str], str, str]:
    """examples/claude_code_runner.py for one turn of a session whose claude session is gone:
    its exit code, its lines, the session id saved before, and the runner id."""
    runner_id = f"real-cli-example-{uuid.uuid4().hex[:8]}"
    home, work = tmp / "home", tmp / "work"
    work.mkdir(parents=True)
    env = offline_env(home)
    saved_id = str(uuid.uuid4())  # a claude session this host never had
    session = slot()
    r = await connect(RunnerOptions(runner_id=runner_id, servers=stack, signing_keys={KEY_ID: KEY}))
    try:
        await r.commit(
            session, saved_id, "claude-code", MODEL, str(work), "same_session_only", cursor="turn-1"
        )
    finally:
        await r.close()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        "--tenant",
        session.tenant,
        "--conversation",
        session.conversation_id,
        "--agent",
        session.agent_id,
        "--model",
        MODEL,
        "--claude",
        str(binary("claude")),
        "--cwd",
        str(work),
        *extra,
        "hi",
        env={
            **env,
            "NATS_URL": stack,
            "RUNNER_ID": runner_id,
            "CONTINUITY_RUNNER_KEYS": f"{KEY_ID}={base64.b64encode(KEY).decode()}",
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines(), saved_id, out.decode() + err.decode()


async def test_the_claude_code_example_reaches_native_session_missing_and_starts_fresh(
    stack: str, tmp_path: Path
) -> None:
    code, lines, saved_id, text = await run_example(stack, tmp_path, "--remote-sessions")
    assert code == 2, text  # the fresh turn cannot complete offline: claude is not logged in
    assert lines[0] == f"decide: resume {saved_id}, incremental turn", text
    reported = r"recover: native_session_missing \(claude-code\.missing\.[a-z-]+\); reported \S+"
    assert re.fullmatch(reported, lines[1]), text
    assert lines[2] == "decision: continue_fresh (native_session_missing, rule 4.4.10)", text
    assert lines[3] == "decide: fresh (resume_target_rejected), full transcript", text
    fresh = lines[4].removeprefix("claude: fresh session ").split(",")[0]
    assert lines[4] == f"claude: fresh session {fresh}, exit code 1" and fresh != saved_id, text
    assert (
        lines[5].startswith("claude: the fresh turn failed (claude-code.") and "Not logged in" in lines[5]
    ), text
    # claude really started the fresh session: its file is where the probe looks.
    assert harness.adapter("claude-code").probe(
        fresh, cwd=str(tmp_path / "work"), env=offline_env(tmp_path / "home")
    ) == ("present")


async def test_the_claude_code_example_rejects_a_session_the_probe_does_not_find(
    stack: str, tmp_path: Path
) -> None:
    code, lines, saved_id, text = await run_example(stack, tmp_path)
    assert code == 2, text
    assert lines[0] == f"decide: resume {saved_id}, incremental turn", text
    assert lines[1].startswith("recover: native_session_missing (claude-code.") and lines[1].endswith(
        "not on this host: rejected"
    ), text
    assert lines[2] == "decide: fresh (resume_target_rejected), full transcript", text
    assert lines[3].startswith("claude: fresh session "), text
