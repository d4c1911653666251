"""CONTINUITY_REDIS_WAIT_REPLICAS on a real Redis primary and replica: a session commit is
acknowledged once the replica holds it, and answered as an outage (retryable) when the replica
does not acknowledge it within CONTINUITY_REDIS_WAIT_TIMEOUT_MS; off, the default, it is
acknowledged whatever the replica does."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from continuity.devstack.servers import RedisServer
from services.session_store.store import SessionStore
from shared.contract import SessionRef
from shared.platform.config import Config
from shared.platform.redis import TRANSIENT_REDIS_ERRORS, Redis
from shared.platform.redis.store import NotReplicated
from shared.records import keys
from tests.support import commit_req, wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def primary_and_replica(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RedisServer, RedisServer]]:
    base: Path = tmp_path_factory.mktemp("wait")
    primary = RedisServer(base / "primary")
    primary.start()
    replica = RedisServer(base / "replica", extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    try:
        replica.start()
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


async def _in_sync(primary: RedisServer) -> None:
    async def synced() -> bool:
        return "slave0:" in primary.cli("INFO", "replication") and "state=online" in primary.cli(
            "INFO", "replication"
        )

    await wait_for(synced, timeout=15, what="the replica online")


async def test_the_setting_is_read_and_off_by_default() -> None:
    assert Config.from_env({}).redis_wait_replicas == 0
    config = Config.from_env(
        {"CONTINUITY_REDIS_WAIT_REPLICAS": "1", "CONTINUITY_REDIS_WAIT_TIMEOUT_MS": "50"}
    )
    assert (config.redis_wait_replicas, config.redis_wait_timeout_ms) == (1, 50)
    assert issubclass(NotReplicated, TRANSIENT_REDIS_ERRORS)  # answered `unavailable`


async def test_a_commit_waits_for_the_replica_and_is_refused_as_an_outage_without_it(
    primary_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = primary_and_replica
    await _in_sync(primary)
    client = Redis(primary.url)
    waiting = SessionStore(client, wait_replicas=1, wait_timeout_ms=1000)
    plain = SessionStore(client)
    session = SessionRef(tenant="acme", conversation_id=uuid.uuid4().hex, agent_id="codex")
    try:
        first = await waiting.commit(commit_req(session, native_session_id="ns-1"))
        assert (first.code, first.revision) == ("ok", 1)
        assert replica.proc is not None
        os.kill(replica.proc.pid, signal.SIGSTOP)  # the replica stops acknowledging
        try:
            with pytest.raises(NotReplicated):
                await waiting.commit(commit_req(session, native_session_id="ns-2"))
            # Written on the primary all the same: the runner must treat it as unknown.
            assert await client.hget(keys.session(session.key), "revision") == b"2"
            # Off, the commit is acknowledged though no replica holds it.
            third = await plain.commit(commit_req(session, native_session_id="ns-3"))
            assert (third.code, third.revision) == ("ok", 3)
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        await _in_sync(primary)
        fourth = await waiting.commit(commit_req(session, native_session_id="ns-4"))
        assert (fourth.code, fourth.revision) == ("ok", 4)
        # A refusal writes nothing and is answered as such, whatever the replicas.
        stale = await waiting.commit(commit_req(session, native_session_id="ns-5", expected_revision=1))
        assert stale.code == "revision_conflict"
    finally:
        await client.aclose()
