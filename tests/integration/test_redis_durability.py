"""Session durability on real Redis and Valkey masters with real replicas (each on free ports):
the read fence of CONTINUITY_REDIS_WAIT_REPLICAS (a decide or get never shows a commit that a
failover then loses), WAITAOF (CONTINUITY_REDIS_WAIT_AOF_*), its checks at start, and a master
whose `min-replicas-to-write` is not met, answered `unavailable`."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.session_store.store import SessionStore
from shared.contract import DecideReply, GetRequest, RejectRequest, SessionRef
from shared.contract.client import ContinuityClient, RequestError
from shared.platform.config import Config, ConfigError
from shared.platform.redis import Redis
from shared.platform.redis.durability import UNCONFIRMED, Durability
from shared.platform.redis.pipeline import NotEnoughReplicas
from shared.platform.redis.store import NotReplicated
from shared.records import keys
from tests.support import ServiceProcess, commit_req, decide_req, make_config, new_session, running, wait_for
from tests.support.valkey import ValkeyServer

pytestmark = pytest.mark.asyncio


def _replica_of(
    kind: type[RedisServer], base: Path, master: RedisServer, *, appendonly: bool = False
) -> RedisServer:
    return kind(base, appendonly=appendonly, extra_args=("--replicaof", "127.0.0.1", str(master.port)))


async def _in_sync(master: RedisServer, replicas: int = 1) -> None:
    async def synced() -> bool:
        info = master.cli("INFO", "replication")
        return info.count("state=online") >= replicas

    await wait_for(synced, timeout=15, what="the replicas online")


def _running_pair(
    base: Path, kind: type[RedisServer], *, appendonly: bool
) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and its replica, of one test alone (it stops, promotes and resumes them)."""
    master = kind(base / "master", appendonly=appendonly)
    master.start()
    replica = _replica_of(kind, base / "replica", master, appendonly=appendonly)
    try:
        replica.start()
        yield master, replica
    finally:
        if replica.proc is not None and replica.proc.poll() is None:
            os.kill(replica.proc.pid, signal.SIGCONT)
        replica.stop()
        master.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A Redis master and its replica."""
    yield from _running_pair(tmp_path, RedisServer, appendonly=False)


@pytest.fixture
def valkey_pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A Valkey master and replica, both with the append-only file."""
    yield from _running_pair(tmp_path, ValkeyServer, appendonly=True)


@pytest.fixture
async def sessions_client(nats_server: NatsServer) -> AsyncIterator[ContinuityClient]:
    import nats

    nc: Client = await nats.connect(nats_server.url)
    try:
        yield ContinuityClient(nc, timeout=10)
    finally:
        await nc.close()


def _fenced_config(nats_url: str, redis_url: str) -> Config:
    # 1 s: a replica that is running confirms within it even on a loaded machine; a stopped one
    # costs each refused call that second.
    return make_config(nats_url, redis_url, redis_wait_replicas=1, redis_wait_timeout_ms=1000)


async def _unavailable(call: Awaitable[object]) -> RequestError:
    with pytest.raises(RequestError) as raised:
        await call
    assert raised.value.code == "unavailable", raised.value
    return raised.value


async def _decide(client: ContinuityClient, session: SessionRef) -> DecideReply:
    return await client.decide(decide_req(session))


async def test_a_read_never_shows_a_commit_the_replica_does_not_hold_and_a_failover_agrees(
    pair: tuple[RedisServer, RedisServer], nats_server: NatsServer, sessions_client: ContinuityClient
) -> None:
    master, replica = pair
    assert replica.proc is not None
    await _in_sync(master)
    client, session = sessions_client, new_session()
    config = _fenced_config(nats_server.url, master.url)
    async with running(registry.load("session-store"), config):
        assert (await client.commit(commit_req(session, native_session_id="ns-1"))).revision == 1
        # The replica stops acknowledging: the commit stays on the master, unconfirmed.
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            await _unavailable(client.commit(commit_req(session, native_session_id="ns-2")))
            assert master.cli("HGET", keys.session(session.key), "revision").strip() == "2"
            # Neither a decide nor a get shows it while no replica holds it.
            await _unavailable(_decide(client, session))
            await _unavailable(client.get(GetRequest(session=session)))
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        await _in_sync(master)
        # Held now: the next read confirms it, answers it and clears the token.
        resumed = await _decide(client, session)
        assert (resumed.mode, resumed.resume_session_id, resumed.revision) == ("resume", "ns-2", 2)
        assert master.cli("HEXISTS", keys.session(session.key), UNCONFIRMED).strip() == "0"

        # The failover: the replica promoted while the old master still takes its clients.
        replica.cli("REPLICAOF", "NO", "ONE")
        await _unavailable(client.commit(commit_req(session, native_session_id="ns-3")))
        assert master.cli("HGET", keys.session(session.key), "revision").strip() == "3"
        await _unavailable(_decide(client, session))
        await _unavailable(client.get(GetRequest(session=session)))
    # The services now reach the promoted replica: the record before the lost commit.
    async with running(registry.load("session-store"), _fenced_config(nats_server.url, replica.url)):
        view = await client.get(GetRequest(session=session))
        assert (view.native_session_id, view.revision) == ("ns-2", 2)
        decided = await _decide(client, session)
        assert (decided.mode, decided.resume_session_id, decided.revision) == ("resume", "ns-2", 2)


async def test_a_reject_and_a_change_of_owner_no_replica_holds_are_fenced_as_a_commit_is(
    pair: tuple[RedisServer, RedisServer], nats_server: NatsServer, sessions_client: ContinuityClient
) -> None:
    """Every write of the record that raises its revision waits as a commit does: unconfirmed,
    it is answered `unavailable` and leaves its token, which the reads, and the refusals read
    off the record, then confirm."""
    master, replica = pair
    assert replica.proc is not None
    await _in_sync(master)
    client, session = sessions_client, new_session()
    record = keys.session(session.key)
    reject = RejectRequest(session=session, native_session_id="ns-1", code="resume_target_missing")
    async with running(registry.load("session-store"), _fenced_config(nats_server.url, master.url)):
        assert (await client.commit(commit_req(session, native_session_id="ns-1"))).revision == 1
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            await _unavailable(client.reject(reject))
            assert master.cli("HMGET", record, "state", "revision").split() == ["rejected", "2"]
            assert master.cli("HEXISTS", record, UNCONFIRMED).strip() == "1"
            await _unavailable(_decide(client, session))
            await _unavailable(client.get(GetRequest(session=session)))
            # A refusal read off the unconfirmed record is not answered either: the commit's
            # conflict (revision 2 is unconfirmed) and a reject that would clear nothing.
            conflict = commit_req(session, native_session_id="ns-9", expected_revision=1)
            await _unavailable(client.commit(conflict))
            other = RejectRequest(session=session, native_session_id="ns-0", code="resume_target_missing")
            await _unavailable(client.reject(other))
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        await _in_sync(master)
        view = await client.get(GetRequest(session=session))
        assert (view.state, view.revision) == ("rejected", 2)
        assert master.cli("HEXISTS", record, UNCONFIRMED).strip() == "0"

        redis = Redis(master.url)
        store = SessionStore(redis, durability=Durability(replicas=1, timeout_ms=100))
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(NotReplicated):
                await store.give(session.key, "runner-b", actor="ops", kind="transferred", held_refuses=False)
            assert master.cli("HMGET", record, "owner", "revision").split() == ["runner-b", "3"]
            await _unavailable(client.get(GetRequest(session=session)))
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
            await redis.aclose()
        await _in_sync(master)
        assert (await client.get(GetRequest(session=session))).revision == 3


async def test_a_commit_confirmed_clears_its_token_and_reads_pay_nothing(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    master, _replica = pair
    await _in_sync(master)
    client = Redis(master.url)
    store = SessionStore(client, durability=Durability(replicas=1, timeout_ms=1000))
    session = new_session()
    try:
        assert (await store.commit(commit_req(session))).code == "ok"
        assert await client.hget(keys.session(session.key), UNCONFIRMED) is None
        waits, scripts_run = _calls(master, "wait"), _calls(master, "evalsha")
        read = await store.read(session.key)
        assert read is not None and read.revision == 1
        # A confirmed record is read with its HMGET alone: no fence script, no WAIT.
        assert (_calls(master, "wait"), _calls(master, "evalsha")) == (waits, scripts_run)
    finally:
        await client.aclose()


def _calls_in(stats: str, command: str) -> int:
    for line in stats.splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


def _calls(server: RedisServer, command: str) -> int:
    return _calls_in(server.cli("INFO", "commandstats"), command)


async def test_waitaof_on_valkey_counts_the_append_only_files(
    valkey_pair: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = valkey_pair
    assert replica.proc is not None
    await _in_sync(master)
    # With `appendfsync everysec` (the shipped setting) a file is fsynced up to a second later.
    durability = Durability(aof_local=1, aof_replicas=1, timeout_ms=2500)
    client = Redis(master.url, durability=durability)
    await client.connect()  # the server has WAITAOF and its append-only file: no refusal
    store = SessionStore(client, durability=durability)
    session = new_session()
    try:
        before = _calls(master, "waitaof")
        assert (await store.commit(commit_req(session, native_session_id="ns-1"))).revision == 1
        assert _calls(master, "waitaof") > before  # WAITAOF, not WAIT, confirmed it
        os.kill(replica.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(NotReplicated):
                await store.commit(commit_req(session, native_session_id="ns-2"))
            with pytest.raises(NotReplicated):
                await store.read(session.key)
            # The master's own file alone is met without the replica.
            local = SessionStore(client, durability=Durability(aof_local=1, timeout_ms=1000))
            assert (await local.commit(commit_req(session, native_session_id="ns-3"))).revision == 3
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        await _in_sync(master)
        read = await store.read(session.key)
        assert read is not None and (read.handle, read.revision) == ("ns-3", 3)
        assert await client.hget(keys.session(session.key), UNCONFIRMED) is None
    finally:
        await client.aclose()


async def test_waitaof_asked_of_a_server_that_cannot_is_refused_at_start(tmp_path: Path) -> None:
    old = RedisServer(tmp_path / "redis-7.0", appendonly=True)  # Debian's 7.0: no WAITAOF
    plain = ValkeyServer(tmp_path / "valkey-no-aof")
    acl = ValkeyServer(
        tmp_path / "valkey-acl",
        appendonly=True,
        extra_args=("--user", "sessions", "on", ">pw", "~*", "+@all", "-waitaof"),
    )
    for server in (old, plain, acl):
        server.start()
    try:
        version = old.cli("INFO", "server")
        assert "redis_version:7.0." in version and "valkey_version" not in version, version
        cases = (
            (old.url, Durability(aof_replicas=1), "Redis 7.2 or later, or Valkey"),
            (plain.url, Durability(aof_local=1), "append-only file"),
            (f"redis://sessions:pw@127.0.0.1:{acl.port}/0", Durability(aof_local=1), r"\+waitaof"),
        )
        for url, durability, reason in cases:
            client = Redis(url, durability=durability)
            try:
                with pytest.raises(ConfigError, match=reason):
                    await client.connect()
            finally:
                await client.aclose()
        # WAIT alone asks nothing of the server's release; and only the session-store's client
        # (`waits`) checks: no other service sends WAITAOF, and their Redis users may not.
        config = make_config("nats://127.0.0.1:1", old.url, redis_wait_replicas=1, redis_wait_aof_local=1)
        for fine in (Redis(old.url, durability=Durability(replicas=1)), Redis.from_config(config)):
            await fine.connect()
            await fine.aclose()
        with pytest.raises(ConfigError, match="WAITAOF"):
            await Redis.from_config(config, waits=True).connect()
    finally:
        for server in (old, plain, acl):
            server.stop()


async def test_the_session_store_stops_at_start_with_a_clear_error(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    old = RedisServer(tmp_path / "redis-7.0")
    old.start()
    log = tmp_path / "session-store.log"
    process = ServiceProcess(
        "session-store", nats_server.url, old.url, log, CONTINUITY_REDIS_WAIT_AOF_LOCAL="1"
    )
    try:
        process.start()
        assert process.proc is not None

        async def exited() -> bool:
            return process.proc is not None and process.proc.poll() is not None

        await wait_for(exited, timeout=30, what="the session-store to stop")
        assert process.proc.returncode == 2
        text = log.read_text()
        assert '"cause": "redis"' in text or '"cause":"redis"' in text, text
        assert "WAITAOF" in text and "Traceback" not in text
    finally:
        process.stop()
        old.stop()


async def test_a_master_without_its_replicas_refuses_commits_answered_unavailable(
    tmp_path: Path, nats_server: NatsServer, sessions_client: ContinuityClient
) -> None:
    lonely = RedisServer(
        tmp_path / "lonely", extra_args=("--min-replicas-to-write", "1", "--min-replicas-max-lag", "5")
    )
    lonely.start()
    session = new_session()
    try:
        store = SessionStore(Redis(lonely.url))
        with pytest.raises(NotEnoughReplicas):
            await store.commit(commit_req(session))
        await store.redis.aclose()
        async with running(registry.load("session-store"), make_config(nats_server.url, lonely.url)):
            refused = await _unavailable(sessions_client.commit(commit_req(session)))
            assert "NOREPLICAS" not in refused.message and "Traceback" not in refused.message
            # Still serving: reads are not refused, and nothing was written.
            with pytest.raises(RequestError) as missing:
                await sessions_client.get(GetRequest(session=session))
            assert missing.value.code == "not_found"
        assert lonely.cli("EXISTS", keys.session(session.key)).strip() == "0"
    finally:
        lonely.stop()
