"""Runners on a running cluster, in the decentralized layout (docs/operations/nats-authorization.md,
"Runners on a running cluster"): a 3-node JetStream cluster includes the operator folder of
`continuity nats init`, the four services connect with its creds, and while a runner keeps
deciding sessions, another is issued with `continuity runners add --operator-dir`, used, moved
to another tenant and revoked with `continuity runners remove --operator-dir`: no server
restarts, no file of a server changes, and each step is in force within 5 s of its command."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import shlex
import statistics
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import nats
import nats.errors
import pytest
from continuity_runner import (
    ArchiveRequest,
    ArchiveResult,
    Decision,
    ErrorInfo,
    Runner,
    RunnerOptions,
    SessionRef,
    connect,
)
from nats.errors import Error as NatsError

from continuity.devstack.servers import NatsCluster, RedisServer
from tests.deploy.conftest import live_services, operator_cluster, operator_command
from tests.support import wait_for

pytestmark = pytest.mark.asyncio

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations" / "nats-authorization.md"
REPLACEABLE: Final = "allow_replacement_after_resume_failure"
IN_FORCE_S = 5.0
"""How soon after its command starts each step must hold (the time includes the command's
own start, a Python process)."""


def documented(**values: str) -> dict[str, list[str]]:
    """The commands of the doc's section "Runners on a running cluster", by their first two
    words (`nats init`, `runners add`, ...), with the doc's example values replaced: what the
    tests run is the documented procedure itself."""
    section = DOC.read_text().split("## Runners on a running cluster", 1)[1].split("\n## ", 1)[0]
    examples = {
        "/secure/continuity-operator": values.get("operator", ""),
        "/data/jwt": "./jwt",
        "r-01": values.get("runner", ""),
        "r-01.creds": values.get("creds", ""),
        "acme": "t1",
        "globex": "t2",
    }
    found: dict[str, list[str]] = {}
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        for line in block.splitlines():
            words = [examples.get(w, w) for w in shlex.split(line)]
            assert words[0] == "continuity", line
            found[" ".join(words[1:3])] = words[1:]
    assert sorted(found) == ["nats init", "runners add", "runners remove", "runners tenants"]
    return found


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("operator") / "op"
    done = _run_sync(*documented(operator=str(folder))["nats init"])
    assert done[0] == 0, done[2]
    assert f"every nats-server includes {folder / 'operator.conf'}" in done[1]
    assert folder.stat().st_mode & 0o777 == 0o700
    for secret in (*(folder / "keys").iterdir(), *(folder / "creds").iterdir()):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    again = _run_sync("nats", "init", str(folder))  # never over an existing folder
    assert again[0] == 1 and "[already_initialised]" in again[2]
    return folder


@pytest.fixture(scope="module")
def cluster(operator: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    with operator_cluster(tmp_path_factory.mktemp("live-cluster"), operator) as nodes:
        yield nodes


@pytest.fixture(scope="module")
async def services(operator: Path, cluster: NatsCluster, redis_server: RedisServer) -> AsyncIterator[None]:
    # A remote move is held while three commands run (each a process that pushes to three
    # servers, seconds apiece on a loaded machine): the archiver waits for it that long.
    async with live_services(operator, cluster.url, redis_server.url, archive_timeout_s=60.0):
        yield


def _run_sync(*args: str) -> tuple[int, str, str]:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "continuity", *args], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, done.stdout, done.stderr


async def _command(operator: Path, cluster: NatsCluster, *args: str) -> tuple[int, str, str]:
    return await operator_command(operator, cluster.url, *args)


def _session(tenant: str = "t1") -> SessionRef:
    return SessionRef(tenant=tenant, conversation_id=f"c-{uuid.uuid4().hex[:10]}", agent_id="agent")


async def _runner(cluster: NatsCluster, runner_id: str, creds: Path) -> Runner:
    return await connect(
        RunnerOptions(runner_id=runner_id, servers=cluster.url, creds_file=str(creds), create_consumer=False)
    )


async def _decision_of(runner: Runner, run_id: str) -> Decision:
    async for delivery in runner.decisions():
        await delivery.ack()
        if delivery.decision is not None and delivery.decision.run_id == run_id:
            return delivery.decision
    raise AssertionError("the decisions ended")


@dataclass
class Load:
    """A runner deciding sessions one after another, each decide's latency kept by phase."""

    runner: Runner
    phase: str = "before"
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        session = _session()
        await self.runner.commit(session, "ns-1", "codex", "m", "/w", "same_session_only", cursor="c1")
        while not self.stop.is_set():
            started = loop.time()
            try:
                ready = await self.runner.decide(session, "codex", "m", "/w", "c1")
                assert ready.mode == "resume"
            except Exception as exc:
                self.errors.append(f"{self.phase} at {loop.time():.3f}: {type(exc).__name__} {exc}")
                continue
            self.latencies.setdefault(self.phase, []).append(loop.time() - started)

    def p95_ms(self, phase: str) -> float:
        values = sorted(self.latencies.get(phase, []))
        return 1000 * values[int(0.95 * (len(values) - 1))] if values else float("nan")


def _files(cluster: NatsCluster) -> dict[Path, str]:
    """Every server's configuration file, by content: a step must leave them as they are."""
    return {
        n.data_dir / "nats.conf": hashlib.sha256((n.data_dir / "nats.conf").read_bytes()).hexdigest()
        for n in cluster.nodes
    }


async def test_a_runner_is_issued_used_moved_and_revoked_on_a_running_cluster_under_load(
    services: None, operator: Path, cluster: NatsCluster, tmp_path: Path
) -> None:
    loop = asyncio.get_running_loop()
    files, pids = _files(cluster), [n.proc.pid for n in cluster.nodes if n.proc is not None]
    live = ("--operator-dir", str(operator), "--servers", "3")

    # The load: runner live-a, issued the same way, deciding all along.
    code, _, err = await _command(
        operator, cluster, "runners", "add", "live-a", "--tenant", "t1",
        "--creds-file", str(tmp_path / "live-a.creds"), *live, "--create-consumer",
    )  # fmt: skip
    assert code == 0, err
    load = Load(await _runner(cluster, "live-a", tmp_path / "live-a.creds"))
    loading = asyncio.create_task(load.run())
    await wait_for(lambda: len(load.latencies.get("before", [])) >= 50, timeout=30, what="the load's decides")

    # 1. Issued while everything runs, and used: a decide answered, an event decided.
    load.phase = "issue"
    started = loop.time()
    procedure = documented(operator=str(operator), runner="live-b", creds=str(tmp_path / "live-b.creds"))
    code, out, err = await _command(operator, cluster, *procedure["runners add"])
    assert code == 0, err
    assert "no restart needed" in out and "stored by 3 server(s)" in out
    runner = await _runner(cluster, "live-b", tmp_path / "live-b.creds")
    moves: list[str] = []

    async def move(request: ArchiveRequest) -> ArchiveResult:
        moves.append(request.run_id)
        return ArchiveResult(exit_code=0, output="moved")

    await runner.serve_archive(move)  # the archiver's request reaches it through ARCHIVE
    archived, session = _session("t1"), _session("t1")
    for s in (archived, session):
        await runner.commit(s, "ns-1", "codex", "m", "/w", REPLACEABLE, cursor="c1")
    assert (await runner.decide(session, "codex", "m", "/w", "c1")).mode == "resume"
    run_id = f"run-{uuid.uuid4().hex}"
    drop = ErrorInfo(type="transport", code="stream_closed")
    await runner.report_resume_failure(run_id, 1, archived, "ns-1", error=drop)
    assert (await asyncio.wait_for(_decision_of(runner, run_id), IN_FORCE_S)).action == "open_replacement"
    assert moves == [run_id]
    issued_in = loop.time() - started

    # 2. Moved to another tenant: t1 refused, t2 served.
    load.phase = "tenants"
    started = loop.time()
    code, _, err = await _command(operator, cluster, *procedure["runners tenants"])
    assert code == 0, err

    async def moved() -> bool:
        # Refused as if the session did not exist (contract 10.2): its own t1 session reads fresh.
        return (await runner.decide(session, "codex", "m", "/w", "c1")).mode == "fresh"

    await wait_for(moved, timeout=IN_FORCE_S, what="live-b refused for t1")
    other = _session("t2")
    await runner.commit(other, "ns-2", "codex", "m", "/w", "same_session_only", cursor="c1")
    assert (await runner.decide(other, "codex", "m", "/w", "c1")).mode == "resume"
    moved_in = loop.time() - started

    # 3. Revoked mid-load: its connection closed, its creds refused, its reports undecided.
    watcher_closed = asyncio.Event()

    async def on_closed() -> None:
        watcher_closed.set()

    watcher = await nats.connect(
        servers=cluster.url.split(","), user_credentials=str(tmp_path / "live-b.creds"),
        inbox_prefix="_INBOX.live-b", allow_reconnect=False, closed_cb=on_closed,
    )  # fmt: skip
    load.phase = "revoke"
    started = loop.time()
    code, out, err = await _command(operator, cluster, *procedure["runners remove"])
    assert code == 0, err
    assert "its connections are closed and its creds refused" in out
    await asyncio.wait_for(watcher_closed.wait(), IN_FORCE_S)
    assert watcher.is_closed
    for url in cluster.url.split(","):
        with pytest.raises(NatsError, match="Authorization Violation"):
            await nats.connect(url, user_credentials=str(tmp_path / "live-b.creds"), allow_reconnect=False)
    revoked_in = loop.time() - started
    print(f"revoked at {loop.time():.3f}")
    with pytest.raises(Exception):  # noqa: B017 - whichever way the SDK says it cannot send
        await asyncio.wait_for(runner.report_resume_failure(f"run-{uuid.uuid4().hex}", 1, session, "ns-1"), 5)
    await runner.close()

    load.phase = "after"
    await wait_for(lambda: len(load.latencies.get("after", [])) >= 50, timeout=30, what="the load after")
    load.stop.set()
    await loading
    await load.runner.close()

    print(
        f"\nin force after issue {issued_in:.2f} s, tenants {moved_in:.2f} s, revoke {revoked_in:.2f} s; "
        + ", ".join(f"live-a p95 {p} {load.p95_ms(p):.1f} ms" for p in ("before", "issue", "revoke", "after"))
        + f" (median before {1000 * statistics.median(load.latencies['before']):.1f} ms)"
    )
    assert max(issued_in, moved_in, revoked_in) <= IN_FORCE_S
    assert load.errors == []  # the other runner was never refused nor timed out
    assert _files(cluster) == files  # no file of a server edited
    assert [n.proc.pid for n in cluster.nodes if n.proc is not None] == pids  # no server restarted


async def test_a_remote_move_in_flight_keeps_its_answer_while_runners_are_issued_and_revoked(
    services: None, operator: Path, cluster: NatsCluster, tmp_path: Path
) -> None:
    """A server rebuilding an account drops the replies in flight through its exports; issuing
    and revoking runners changes ARCHIVE, which exports nothing, so the archiver's move waiting
    on a slow runner gets its answer."""
    live = ("--operator-dir", str(operator), "--servers", "3")
    creds = tmp_path / "slow.creds"
    code, _, err = await _command(
        operator, cluster, "runners", "add", "live-slow", "--tenant", "t1", "--creds-file", str(creds),
        *live, "--create-consumer",
    )  # fmt: skip
    assert code == 0, err
    runner = await _runner(cluster, "live-slow", creds)
    asked, answer = asyncio.Event(), asyncio.Event()

    async def slow_move(request: ArchiveRequest) -> ArchiveResult:
        asked.set()
        await answer.wait()  # held until other runners were issued and revoked
        return ArchiveResult(exit_code=0, output="moved")

    try:
        await runner.serve_archive(slow_move)
        session = _session("t1")
        await runner.commit(session, "ns-1", "codex", "m", "/w", REPLACEABLE, cursor="c1")
        run_id = f"run-{uuid.uuid4().hex}"
        drop = ErrorInfo(type="transport", code="stream_closed")
        await runner.report_resume_failure(run_id, 1, session, "ns-1", error=drop)
        await asyncio.wait_for(asked.wait(), 30)
        for other in ("live-other-1", "live-other-2"):
            code, _, err = await _command(
                operator, cluster, "runners", "add", other, "--tenant", "t1",
                "--creds-file", str(tmp_path / f"{other}.creds"), *live,
            )  # fmt: skip
            assert code == 0, err
        code, _, err = await _command(operator, cluster, "runners", "remove", "live-other-1", "--yes", *live)
        assert code == 0, err
        answer.set()
        decision = await asyncio.wait_for(_decision_of(runner, run_id), 30)
        assert (decision.action, decision.epoch) == ("open_replacement", 1)  # the move's answer came back
    finally:
        await runner.close()


async def test_issuing_refuses_what_would_overwrite_or_duplicate(
    services: None, operator: Path, cluster: NatsCluster, tmp_path: Path
) -> None:
    live = ("--operator-dir", str(operator), "--servers", "3")
    creds = tmp_path / "dup.creds"
    add = ("runners", "add", "live-dup", "--tenant", "t1", "--creds-file")
    code, _, err = await _command(operator, cluster, *add, str(creds), *live)
    assert code == 0, err
    first = creds.read_text()
    other = ("runners", "add", "live-dup-2", "--tenant", "t1", "--creds-file", str(creds), *live)
    code, _, err = await _command(operator, cluster, *other)
    assert code == 1 and "[creds_exists]" in err, err
    assert creds.read_text() == first  # never overwritten, and nothing issued
    code, _, err = await _command(operator, cluster, "runners", "remove", "live-dup-2", "--yes", *live)
    assert code == 3 and "[not_found]" in err, err
    code, _, err = await _command(operator, cluster, *add, str(tmp_path / "other.creds"), *live)
    assert code == 1 and "[runner_exists]" in err and "live-dup has an active account" in err, err
    assert not (tmp_path / "other.creds").exists()
    code, _, err = await _command(
        operator, cluster, *add, str(tmp_path / "x.creds"), "--operator-dir", str(tmp_path)
    )
    assert code == 2 and "[invalid_operator_dir]" in err, err
    code, _, err = await _command(
        operator, cluster, *add, str(tmp_path / "y.creds"), *live, "--conf-dir", str(tmp_path)
    )
    assert code == 2 and "two layouts" in err, err
    # Revoked, the runner may be issued again: a new account, the old one's creds still refused.
    code, out, err = await _command(operator, cluster, "runners", "remove", "live-dup", "--yes", *live)
    assert code == 0 and "its creds refused" in out, err
    code, _, err = await _command(operator, cluster, *add, str(tmp_path / "again.creds"), *live)
    assert code == 0, err
    again = await nats.connect(cluster.url.split(",")[0], user_credentials=str(tmp_path / "again.creds"))
    await again.close()
    with pytest.raises(NatsError, match="Authorization Violation"):
        await nats.connect(cluster.url.split(",")[0], user_credentials=str(creds), allow_reconnect=False)


async def test_a_restarted_server_keeps_what_its_resolver_learned(
    services: None, operator: Path, cluster: NatsCluster, tmp_path: Path
) -> None:
    """The accounts pushed while it ran are in the resolver's folder: a node restarted alone
    (the others running) still admits an issued runner, with its archive import, and still
    refuses a revoked one."""
    live = ("--operator-dir", str(operator), "--servers", "3")
    for runner in ("live-kept", "live-gone"):
        code, _, err = await _command(
            operator, cluster, "runners", "add", runner, "--tenant", "t1",
            "--creds-file", str(tmp_path / f"{runner}.creds"), *live,
        )  # fmt: skip
        assert code == 0, err
    code, _, err = await _command(operator, cluster, "runners", "remove", "live-gone", "--yes", *live)
    assert code == 0, err
    node = cluster.nodes[2]
    node.restart()
    cluster.wait_healthy()
    kept = await nats.connect(
        node.url, user_credentials=str(tmp_path / "live-kept.creds"), inbox_prefix="_INBOX.live-kept"
    )
    answers: list[bytes] = []

    async def answered() -> bool:
        # The routes carry the services' interest to the restarted node a moment after it is
        # healthy; until then its requests find no responders.
        with contextlib.suppress(nats.errors.NoRespondersError, nats.errors.TimeoutError):
            answers.append((await kept.request("continuity.sessions.live-kept.get", b"{}", timeout=2)).data)
        return bool(answers)

    try:
        await wait_for(answered, timeout=20, what="the restarted node to route the runner's request")
        assert answers[0]  # answered by the session-store, through the account's import
    finally:
        await kept.close()
    with pytest.raises(NatsError, match="Authorization Violation"):
        await nats.connect(
            node.url, user_credentials=str(tmp_path / "live-gone.creds"), allow_reconnect=False
        )
