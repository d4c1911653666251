"""The runner boundary under the shipped authorization (deploy/nats/auth.conf) with tenancy
enforced: five runners over two tenants, issued with `continuity runners add`, recorded in the
runner directory with `continuity runners tenants`, the four services under their own users.

A runner reaches only the subjects that carry its own runner_id; over another runner's session
its requests on its own subjects change nothing and learn nothing; its events naming another
runner's session are refused and told to it; an operator moves a session with `continuity
sessions transfer`, which fences the previous owner; `continuity runners remove` revokes a
runner at once and removes it from the conf files and JetStream.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client

from continuity.cli.runner_accounts import account_block
from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from continuity.devstack.servers import RedisServer
from shared.contract import GetRequest, RejectRequest, SessionRef, subjects
from shared.contract.client import ContinuityClient, RequestError, RunnerSessions
from shared.contract.tenancy import ClaimRequest
from shared.records import keys
from tests.deploy.conftest import (
    SERVICE_USERS,
    Stack,
    acontinuity,
    authorized_services,
    inbox,
    issued_stack,
    live_stack,
    start_server,
)
from tests.support import commit_req, decide_req, resume_failed, wait_for

pytestmark = pytest.mark.asyncio

A, B, C, D, OPEN = "acme-a", "acme-b", "globex-c", "acme-d", "acme-open"
TENANTS = {A: ("acme",), B: ("acme",), C: ("globex",), D: ("acme", "globex"), OPEN: ("acme",)}
"""A and B share tenant acme; C acts for globex only; D, for both, is removed at the end; OPEN's
account has no user permissions, to show what its imports alone allow."""

RUNS_INDEX_DELETE = f"$JS.API.CONSUMER.DELETE.{subjects.DECISIONS_STREAM}.{subjects.RUNS_INDEX_CONSUMER}"


def without_permissions(runner_id: str) -> Callable[[Path], None]:
    """A change of runners.conf: the runner's user keeps its key and loses its permissions."""

    def edit(conf_dir: Path) -> None:
        path = conf_dir / ACCOUNTS_FILE
        text = path.read_text()
        block = re.search(rf"^RUNNER_{runner_id}: \{{\n.*?^\}}\n", text, re.MULTILINE | re.DOTALL)
        assert block
        stripped = re.sub(r"^      permissions: \{\n.*?^      \}\n", "", block.group(0), flags=re.M | re.S)
        assert "permissions" not in stripped and "imports" in stripped
        path.write_text(text.replace(block.group(0), stripped))

    return edit


@pytest.fixture(scope="module", params=["conf", "live"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Each test runs on both layouts: the config files, and the decentralized layout with every
    runner issued on the running server (docs/operations/nats-authorization.md)."""
    work = tmp_path_factory.mktemp(f"tenancy-{request.param}")
    if request.param == "live":
        with live_stack(work, TENANTS, unpermitted=(OPEN,)) as s:
            yield s
        return
    with issued_stack(work, TENANTS, edit=without_permissions(OPEN)) as s:
        yield s


@pytest.fixture(autouse=True)
def _layout_of_the_test(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("conf_files") and request.getfixturevalue("stack").layout != "conf":
        pytest.skip("the config-file layout's own files; the decentralized layout's: test_runners_live.py")


@pytest.fixture(scope="module")
async def services(stack: Stack, redis_server: RedisServer) -> AsyncIterator[None]:
    # A runner's record is read again at once (not after the default 2 s): a revocation is in
    # force for the next event, so the test needs no wait for the cache to expire.
    async with authorized_services(stack, redis_server.url, runner_cache_s=0.001):
        yield


class Conn:
    def __init__(self, nc: Client, errors: list[str], runner_id: str | None) -> None:
        self.nc, self.errors = nc, errors
        self.client = ContinuityClient(nc)
        self.sessions = RunnerSessions(self.client, runner_id) if runner_id else None

    @property
    def own(self) -> RunnerSessions:
        assert self.sessions is not None
        return self.sessions

    async def violations(self) -> list[str]:
        # A violation's -ERR comes before the PONG of the first flush; the second round trip
        # lets the client's error callback run first.
        await self.nc.flush()
        await self.nc.flush()
        return [e for e in self.errors if "permissions violation" in e.lower()]


@pytest.fixture
async def connect(stack: Stack) -> AsyncIterator[Callable[[str], Awaitable[Conn]]]:
    opened: list[Client] = []

    async def _connect(who: str) -> Conn:
        errors: list[str] = []

        async def on_error(err: Exception) -> None:
            errors.append(str(err))

        runner = who in TENANTS
        options: dict[str, Any] = {"inbox_prefix": inbox(who), **stack.auth(who)}
        nc = await nats.connect(
            stack.url(None if runner else who),
            error_cb=on_error,
            allow_reconnect=False,
            connect_timeout=5,
            **options,
        )
        opened.append(nc)
        return Conn(nc, errors, who if runner else None)

    yield _connect
    for nc in opened:
        await nc.close()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


def acme_session() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:10]}", agent_id="codex")


async def record_of(redis: aioredis.Redis, session: SessionRef) -> dict[str, str]:
    """The session hash as stored (section 9.6: no `epoch` while 0, no `state` while active)."""
    raw = await redis.hgetall(keys.session(session.key))  # type: ignore[misc]
    return {str(k): str(v) for k, v in raw.items()}


async def operator_cli(
    stack: Stack, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return await acontinuity(
        *args, "--nats-url", stack.url("operator"), stdin=stdin, env=stack.env("operator")
    )


async def published(conn: Conn, runner_id: str, event: Any) -> None:
    ack = await conn.nc.jetstream().publish(
        subjects.event(runner_id, "resume_failed"), msgspec.json.encode(event)
    )
    assert ack.stream == subjects.EVENTS_STREAM


async def next_message(conn: Conn, runner_id: str) -> dict[str, Any]:
    """The next message on the runner's decisions (a decision or a refusal), acknowledged."""
    sub = await conn.nc.jetstream().pull_subscribe_bind(runner_id, subjects.DECISIONS_STREAM)
    (msg,) = await sub.fetch(1, timeout=15)
    await msg.ack()
    await sub.unsubscribe()
    found: dict[str, Any] = msgspec.json.decode(msg.data)
    return found


async def dead_letters(stack: Stack, *filters: str) -> list[dict[str, Any]]:
    done = await operator_cli(stack, "dead", "list", *filters, "--json")
    assert done.returncode == 0, done.stderr
    items: list[dict[str, Any]] = msgspec.json.decode(done.stdout)["items"]
    return items


@pytest.mark.filterwarnings("ignore:The test <Function")  # the module's asyncio mark
def test_a_runner_account_imports_exactly_what_its_user_may_publish() -> None:
    """The permission refuses at once what the missing import would leave without a responder:
    both name the same subjects, each carrying the runner's id."""
    block = account_block("r-1", "UKEY")
    publish = set(re.findall(r'^\s+"([^"]+)"$', block.split("subscribe:")[0], re.MULTILINE))
    imported = set(re.findall(r'account: CONTINUITY, subject: "([^"]+)"', block))
    assert publish == imported
    assert {s for s in imported if s.startswith("continuity.sessions.")} == {
        subjects.runner_sessions("r-1", op) for op in subjects.SESSION_OPS
    }
    assert all("r-1" in s for s in imported)


async def test_another_runners_subjects_have_no_responder_in_a_runners_account(
    services: None, connect: Callable[[str], Awaitable[Conn]]
) -> None:
    """OPEN has no user permissions: only its account's imports stand between it and the rest."""
    runner = await connect(OPEN)
    with pytest.raises(RequestError) as own:
        await runner.own.get(GetRequest(session=acme_session()))
    assert own.value.code == "not_found"  # its own subject reaches the session-store
    elsewhere = [
        *(subjects.runner_sessions(B, op) for op in subjects.SESSION_OPS),
        *(f"continuity.sessions.{op}" for op in ("decide", "commit", "get", "reject")),
        subjects.SESSIONS_TRANSFER,
        subjects.RUNNERS_PUT,
        subjects.RUNNERS_REVOKE,
        subjects.event(B, "resume_failed"),
        subjects.decisions(B),
        f"$JS.API.CONSUMER.MSG.NEXT.{subjects.DECISIONS_STREAM}.{B}",
    ]
    for subject in elsewhere:
        with pytest.raises(nats.errors.NoRespondersError):
            answer = await runner.nc.request(subject, b"{}", timeout=5)
            raise AssertionError(f"{subject} answered: {answer.data[:200]!r}")
    # The JetStream API it did not import is its own account's, which has no JetStream.
    answer = await runner.nc.request(
        f"$JS.API.CONSUMER.DELETE.{subjects.DECISIONS_STREAM}.{B}", b"", timeout=5
    )
    assert b"JetStream not enabled for account" in answer.data
    operator = await connect("operator")
    info = await operator.nc.jetstream().consumer_info(subjects.DECISIONS_STREAM, B)
    assert info.name == B
    assert await runner.violations() == []


async def test_a_runner_may_not_send_on_another_runners_subjects(
    services: None, connect: Callable[[str], Awaitable[Conn]]
) -> None:
    a = await connect(A)
    refused = [
        *(subjects.runner_sessions(B, op) for op in subjects.SESSION_OPS),
        *(subjects.runner_sessions(C, op) for op in subjects.SESSION_OPS),
        subjects.event(B, "resume_failed"),
        f"$JS.API.CONSUMER.MSG.NEXT.{subjects.DECISIONS_STREAM}.{B}",
        f"$JS.ACK.{subjects.DECISIONS_STREAM}.{B}.1.1.1.0.0",
    ]
    for subject in refused:
        await a.nc.publish(subject, b"{}", reply=f"_INBOX.{A}.x")
    await a.nc.subscribe(subjects.decisions(B))
    assert len(await a.violations()) == len(refused) + 1


async def test_requests_over_another_runners_session_change_nothing(
    services: None, connect: Callable[[str], Awaitable[Conn]], redis: aioredis.Redis
) -> None:
    a, b, c = await connect(A), await connect(B), await connect(C)
    session = acme_session()
    committed = await b.own.commit(commit_req(session, native_session_id="ns-b"))
    before = await record_of(redis, session)
    assert before["owner"] == B and before["native_session_id"] == "ns-b"
    assert (int(before["revision"]), int(before.get("epoch", 0))) == (committed.revision, committed.epoch)
    assert before.get("state", "active") == "active"

    # A runner of the same tenant, then one of another: as if the session did not exist, but
    # for A's commit, refused as another runner's so that a pool knows to ask for a transfer.
    for other, commit_refusal, claim_refusal in (
        (a, "session_not_owned", "claim_refused"),
        (c, "not_found", "not_found"),
    ):
        decided = await other.own.decide(decide_req(session))
        assert (decided.mode, decided.reason, decided.resume_session_id) == ("fresh", "no_session", None)
        with pytest.raises(RequestError) as got:
            await other.own.get(GetRequest(session=session))
        assert got.value.code == "not_found"
        rejected = await other.own.reject(
            RejectRequest(session=session, native_session_id="ns-b", code="resume_target_missing")
        )
        assert rejected.cleared is False
        for overwrite in (
            commit_req(session, native_session_id="ns-evil"),
            commit_req(session, native_session_id="ns-evil", expected_revision=committed.revision),
            commit_req(session, native_session_id="ns-evil", epoch=committed.epoch),
        ):
            with pytest.raises(RequestError) as refused:
                await other.own.commit(overwrite)
            assert refused.value.code == commit_refusal
        with pytest.raises(RequestError) as claimed:
            await other.own.claim(ClaimRequest(session=session))
        assert claimed.value.code == claim_refusal

    after = await record_of(redis, session)
    assert after == before  # handle, revision, epoch, state, owner: nothing written
    nxt = await b.own.decide(decide_req(session))
    assert (nxt.mode, nxt.resume_session_id, nxt.revision, nxt.epoch) == (
        "resume",
        "ns-b",
        committed.revision,
        committed.epoch,
    )


async def test_an_event_naming_another_runners_session_is_refused_and_told_to_its_sender(
    services: None, connect: Callable[[str], Awaitable[Conn]], redis: aioredis.Redis, stack: Stack
) -> None:
    a, b, c = await connect(A), await connect(B), await connect(C)
    session = acme_session()
    await b.own.commit(commit_req(session, native_session_id="ns-b"))
    before = await record_of(redis, session)

    for conn, runner_id, code in ((a, A, "session_not_owned"), (c, C, "tenant_not_allowed")):
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        await published(conn, runner_id, resume_failed(runner_id, session=session, run_id=run_id))
        refusal = await next_message(conn, runner_id)
        assert (refusal["type"], refusal["code"], refusal["run_id"]) == ("refusal", code, run_id)
        assert refusal["runner_id"] == runner_id and refusal["not_before"] is None

        async def dead_lettered(runner_id: str = runner_id, code: str = code) -> bool:
            items = await dead_letters(
                stack, "--kind", "refused", "--original-subject", subjects.event(runner_id, "")
            )
            return any(i["reason"] == code and i["subject"] == subjects.DEAD_REFUSED for i in items)

        await wait_for(dead_lettered, timeout=20, what=f"{runner_id}'s refused event in the dead letters")
        assert not await redis.exists(keys.run(session.key, run_id))  # no run recorded

    # An event whose body names another runner than its subject: dead-lettered, never decided.
    await published(a, A, resume_failed(B, session=session))

    async def mismatched() -> bool:
        items = await dead_letters(stack, "--kind", "invalid", "--reason", "runner_mismatch")
        return any(i["original_subject"] == subjects.event(A, "resume_failed") for i in items)

    await wait_for(mismatched, timeout=20, what="the runner_mismatch dead letter")
    assert await record_of(redis, session) == before
    operator = await connect("operator")
    info = await operator.nc.jetstream().consumer_info(subjects.DECISIONS_STREAM, B)
    assert (info.num_pending, info.num_ack_pending) == (0, 0)  # nothing reached the owner


async def test_an_operator_transfer_moves_a_session_and_fences_its_previous_owner(
    services: None, connect: Callable[[str], Awaitable[Conn]], stack: Stack, redis: aioredis.Redis
) -> None:
    a, b = await connect(A), await connect(B)
    session = acme_session()
    names = ("acme", session.conversation_id, session.agent_id)
    first = await b.own.commit(commit_req(session, native_session_id="ns-b"))

    moved = await operator_cli(stack, "sessions", "transfer", *names, "--to", A, "--actor", "alice", "--json")
    assert moved.returncode == 0, moved.stderr
    reply = msgspec.json.decode(moved.stdout)
    assert reply == {
        "owner": A,
        "previous_owner": B,
        "epoch": first.epoch + 1,
        "revision": first.revision + 1,
    }

    # The previous owner: no longer the owner, whatever epoch it gives.
    for epoch in (None, first.epoch, first.epoch + 1):
        with pytest.raises(RequestError) as refused:
            await b.own.commit(commit_req(session, native_session_id="ns-b2", epoch=epoch))
        assert refused.value.code == "session_not_owned"
    with pytest.raises(RequestError) as hidden:
        await b.own.get(GetRequest(session=session))
    assert hidden.value.code == "not_found"
    # The new owner sees it and writes with the new epoch.
    seen = await a.own.get(GetRequest(session=session))
    assert (seen.owner, seen.epoch, seen.native_session_id) == (A, first.epoch + 1, "ns-b")
    written = await a.own.commit(commit_req(session, native_session_id="ns-a", epoch=seen.epoch))
    assert written.epoch == seen.epoch

    # Given back to B, the epochs fence what B held before: a commit carrying one is stale.
    back = await operator_cli(stack, "sessions", "transfer", *names, "--to", B, "--actor", "alice")
    assert back.returncode == 0, back.stderr
    assert f"Owned by {B} from epoch {first.epoch + 2}: commits of {A} are refused" in back.stdout
    for stale in (first.epoch, first.epoch + 1):
        with pytest.raises(RequestError) as fenced:
            await b.own.commit(commit_req(session, native_session_id="ns-b3", epoch=stale))
        assert fenced.value.code == "stale_epoch"
    again = await b.own.commit(commit_req(session, native_session_id="ns-b3", epoch=first.epoch + 2))
    assert again.epoch == first.epoch + 2

    audit = await operator_cli(stack, "sessions", "ownership", *names, "--json")
    assert audit.returncode == 0, audit.stderr
    entries = msgspec.json.decode(audit.stdout)["items"]
    assert [(e["kind"], e["actor"], e["previous_owner"], e["owner"], e["epoch"]) for e in entries] == [
        ("bound", B, None, B, first.epoch),
        ("transferred", "alice", B, A, first.epoch + 1),
        ("transferred", "alice", A, B, first.epoch + 2),
    ]
    table = await operator_cli(stack, "sessions", "ownership", *names)
    assert table.returncode == 0 and re.search(r"transferred\s+alice\s+acme-b\s+acme-a", table.stdout)

    # A held session may be transferred, and stays held.
    held = acme_session()
    await b.own.commit(commit_req(held, native_session_id="ns-held"))
    await redis.hset(keys.session(held.key), "state", "held")  # type: ignore[misc]
    given = await operator_cli(
        stack, "sessions", "transfer", "acme", held.conversation_id, "codex", "--to", A
    )
    assert given.returncode == 0, given.stderr
    assert (await record_of(redis, held))["state"] == "held"
    assert (await a.own.get(GetRequest(session=held))).owner == A

    # Only to a runner of the session's tenant; only a session that exists.
    outside = await operator_cli(stack, "sessions", "transfer", *names, "--to", C)
    assert outside.returncode == 1 and "[runner_not_issued]" in outside.stderr
    assert "continuity runners tenants" in outside.stderr
    missing = await operator_cli(stack, "sessions", "transfer", "acme", "nobody", "codex", "--to", A)
    assert missing.returncode == 3 and "session acme/nobody/codex is not known here" in missing.stderr
    assert (await b.own.get(GetRequest(session=session))).owner == B


@pytest.mark.conf_files
async def test_runners_list_joins_the_directory_the_conf_files_and_the_consumers(
    services: None, stack: Stack
) -> None:
    done = await operator_cli(stack, "runners", "list", "--conf-dir", str(stack.conf_dir), "--json")
    assert done.returncode == 0, done.stderr
    listed = {r["runner_id"]: r for r in msgspec.json.decode(done.stdout)["items"]}
    for runner_id, tenants in TENANTS.items():
        r = listed[runner_id]
        assert (r["tenants"], r["status"], r["in_conf"], r["consumer"]) == (
            sorted(tenants),
            "active",
            True,
            True,
        )
    text = await operator_cli(stack, "runners", "list", "--conf-dir", str(stack.conf_dir))
    assert text.stdout.splitlines()[0].split() == ["RUNNER", "TENANTS", "STATUS", "IN", "CONF", "CONSUMER"]
    assert re.search(rf"^{D}\s+acme,globex\s+active\s+yes\s+yes$", text.stdout, re.MULTILINE)


@pytest.mark.conf_files
async def test_removing_a_runner_revokes_it_and_takes_it_out_of_nats(
    services: None, connect: Callable[[str], Awaitable[Conn]], stack: Stack, tmp_path: Path
) -> None:
    d = await connect(D)
    session = acme_session()
    await d.own.commit(commit_req(session, native_session_id="ns-d"))
    conf = ("--conf-dir", str(stack.conf_dir))

    declined = await operator_cli(stack, "runners", "remove", D, *conf, stdin=b"n\n")
    assert declined.returncode == 1 and "[not_confirmed]" in declined.stderr
    assert f"RUNNER_{D}:" in (stack.conf_dir / ACCOUNTS_FILE).read_text()
    assert (await d.own.get(GetRequest(session=session))).owner == D  # still issued

    removed = await operator_cli(stack, "runners", "remove", D, *conf, "--actor", "alice", stdin=b"y\n")
    assert removed.returncode == 0, removed.stderr
    assert f"Runner {D} revoked in the runner directory" in removed.stdout
    assert "restart the NATS servers one at a time" in removed.stdout

    # Its session requests: as for a session that does not exist.
    with pytest.raises(RequestError) as hidden:
        await d.own.get(GetRequest(session=session))
    assert hidden.value.code == "not_found"
    assert (await d.own.decide(decide_req(session))).reason == "no_session"
    with pytest.raises(RequestError) as refused:
        await d.own.commit(commit_req(session, native_session_id="ns-d2"))
    assert refused.value.code == "not_found"
    # Its events: refused, for operators to see (it has no consumer left to be told on).
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await published(d, D, resume_failed(D, session=session, run_id=run_id))

    async def refused_revoked() -> bool:
        items = await dead_letters(stack, "--kind", "refused", "--reason", "runner_revoked")
        return any(i["original_subject"] == subjects.event(D, "resume_failed") for i in items)

    await wait_for(refused_revoked, timeout=20, what="the revoked runner's event refused")

    names = ("acme", session.conversation_id, session.agent_id)
    orphan = await operator_cli(stack, "sessions", "transfer", *names, "--to", D)
    assert orphan.returncode == 1 and "[runner_not_issued]" in orphan.stderr  # revoked
    listed = await operator_cli(stack, "runners", "list", *conf, "--json")
    row = next(r for r in msgspec.json.decode(listed.stdout)["items"] if r["runner_id"] == D)
    assert (row["status"], row["in_conf"], row["consumer"], row["actor"]) == (
        "revoked",
        False,
        False,
        "alice",
    )
    assert row["revoked_at"]

    # The conf files without it, the others intact: a server started on them refuses its key.
    accounts = (stack.conf_dir / ACCOUNTS_FILE).read_text()
    imports = (stack.conf_dir / IMPORTS_FILE).read_text()
    assert D not in accounts and D not in imports
    for other in (A, B, C, OPEN):
        assert f"RUNNER_{other}: {{" in accounts and f"account: RUNNER_{other}," in imports
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(stack.conf_dir / name, tmp_path / name)
    proc, port = start_server(tmp_path, tmp_path / "server.log")
    try:
        with pytest.raises(Exception):  # noqa: B017  (nats-py raises a generic error on auth failure)
            await nats.connect(
                f"nats://127.0.0.1:{port}",
                nkeys_seed=str(stack.seeds[D]),
                allow_reconnect=False,
                connect_timeout=2,
            )
        still = await nats.connect(
            f"nats://127.0.0.1:{port}", nkeys_seed=str(stack.seeds[A]), allow_reconnect=False
        )
        await still.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    # Again: nothing left to remove but the revocation, which stands.
    again = await operator_cli(stack, "runners", "remove", D, *conf, "--yes", "--json")
    assert again.returncode == 0, again.stderr
    out = msgspec.json.decode(again.stdout)
    assert out.pop("directory")["status"] == "revoked"
    assert out == {"runner_id": D, "consumer": "absent", "conf": "absent", "restart_required": False}
    unknown = await operator_cli(stack, "runners", "remove", "never-issued", *conf, "--yes")
    assert unknown.returncode == 3 and "runner never-issued is not known" in unknown.stderr


async def test_the_operator_and_the_console_may_not_delete_the_runs_index_consumer(
    services: None, connect: Callable[[str], Awaitable[Conn]]
) -> None:
    """Runners' decisions consumers are deleted by the session-store (`runners remove` asks it);
    neither the operator nor the console may delete any, the runs index least of all."""
    operator, console = await connect("operator"), await connect("console")
    for user in (operator, console):
        await user.nc.publish(RUNS_INDEX_DELETE, b"", reply=user.nc.new_inbox())
        assert len(await user.violations()) == 1
    info = await operator.nc.jetstream().consumer_info(
        subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER
    )
    assert info.name == subjects.RUNS_INDEX_CONSUMER


async def test_no_service_or_operator_was_refused_anything(services: None, stack: Stack) -> None:
    # Last in this module: every command above ran as the operator.
    assert stack.violations_of((*SERVICE_USERS, "operator", "console"), deliberate=(RUNS_INDEX_DELETE,)) == []
