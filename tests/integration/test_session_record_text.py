"""Every stored value of a session record is text: a client that decodes replies as UTF-8
(redis-py `decode_responses=True`) reads the whole record, the record with its owner stays within
the 512-byte listpack budget, and records in the older forms are still read and trusted
(contract 9.6)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import NatsServer, RedisServer
from continuity.tools.bench.sessions import RUNNER, TENANT, commit_request, decide_request
from services import registry
from shared.contract import GetRequest
from shared.contract.client import ContinuityClient, RunnerSessions
from shared.contract.tenancy import RunnerPutRequest
from shared.platform.config import Config
from shared.records import keys
from shared.records.session import STAMP_CHARS, V1_FIELDS, binding_stamp, generation_binding
from tests.support import RunningApp, make_config, running
from tests.support.sessions import commit_req, decide_req, new_session
from tests.support.valkey import ValkeyServer


@pytest.fixture
async def store_app(config: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), config) as app:
        yield app


@pytest.fixture
async def text_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.mark.parametrize("kind", [RedisServer, ValkeyServer], ids=["redis", "valkey"])
async def test_a_committed_record_with_its_owner_reads_as_text_and_stays_within_512_bytes(
    kind: type[RedisServer], tmp_path: Path, nats_server: NatsServer, client: ContinuityClient
) -> None:
    server = kind(tmp_path / kind.name)
    server.start()
    try:
        config = make_config(nats_server.url, server.url, tenancy="enforced", runner_cache_s=0.05)
        async with running(registry.load("session-store"), config):
            await _the_benchmarks_record(client, server)
    finally:
        server.stop()


async def _the_benchmarks_record(client: ContinuityClient, server: RedisServer) -> None:
    i = 424242
    req = commit_request(i)  # the benchmark's realistic record: a 60-character cwd
    await client.runner_put(RunnerPutRequest(runner_id=RUNNER, tenants=[TENANT], actor="ops"))
    runner = RunnerSessions(client, RUNNER)
    await runner.commit(req)
    key = keys.session(req.session.key)

    text_client = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        record: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
        v1 = {name: record[name] for name in V1_FIELDS}
        assert record["g"] == binding_stamp(v1).decode() + "dsh-2026.11.3-p7" and "generation" not in record
        assert record["revision"] == "1" and "state" not in record and "epoch" not in record
        assert record["owner"] == RUNNER
        assert (await text_client.memory_usage(key, samples=0) or 0) <= 512
        assert await text_client.object("encoding", key) == "listpack"
    finally:
        await text_client.aclose()
    assert (await runner.decide(decide_request(i))).mode == "resume"


async def test_a_held_and_replaced_record_stays_text(
    store_app: RunningApp, client: ContinuityClient, text_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await text_client.hset(keys.session(s.key), "state", "held")  # type: ignore[misc]
    await client.commit(commit_req(s, native_session_id="ns-2"))
    for key in (keys.session(s.key), keys.held_archive(s.key, "ns-1")):
        record: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
        assert record["g"].endswith("gen-1") and len(record["g"]) == STAMP_CHARS + len("gen-1"), key


def raw_stamped(record: dict[bytes, bytes], generation: bytes) -> bytes:
    """The compact form a release before the previous one wrote: 16 raw bytes of the binding's
    digest."""
    joined = b"\n".join(record.get(name.encode(), b"") for name in V1_FIELDS)
    return hashlib.sha256(joined).digest()[:16] + generation


def text_stamped(record: dict[bytes, bytes], generation: bytes) -> bytes:
    """The compact form the previous release wrote: 16 hex characters of the binding."""
    v1 = {name: record.get(name.encode(), b"").decode() for name in V1_FIELDS}
    return generation_binding(v1)[:16].encode() + generation


@pytest.mark.parametrize("stamped", [raw_stamped, text_stamped], ids=["raw bytes", "text"])
async def test_the_generation_field_of_earlier_releases_is_still_trusted_and_rewritten_as_g(
    store_app: RunningApp,
    client: ContinuityClient,
    redis_client: aioredis.Redis,
    text_client: aioredis.Redis,
    stamped: Callable[[dict[bytes, bytes], bytes], bytes],
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    key = keys.session(s.key)
    record: dict[bytes, bytes] = await redis_client.hgetall(key)  # type: ignore[misc]
    await redis_client.hdel(key, "g")  # type: ignore[misc]
    await redis_client.hset(key, "generation", stamped(record, b"gen-1"))  # type: ignore[misc]
    view = await client.get(GetRequest(session=s))
    assert (view.has_generation, view.generation_trusted) == (True, True)
    assert (await client.decide(decide_req(s))).mode == "resume"
    await redis_client.hset(key, "cwd", "/elsewhere")  # type: ignore[misc]
    assert (await client.get(GetRequest(session=s))).generation_trusted is False
    await redis_client.hset(key, "cwd", record[b"cwd"])  # type: ignore[misc]

    await client.commit(commit_req(s, cursor="c-2"))
    rewritten: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    assert rewritten["g"] == binding_stamp(rewritten).decode() + "gen-1" and "generation" not in rewritten


async def test_the_contracts_long_form_is_still_trusted_and_rewritten_compactly(
    store_app: RunningApp, client: ContinuityClient, text_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    key = keys.session(s.key)
    record: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    await text_client.hdel(key, "g")  # type: ignore[misc]
    long_form = {"compatibility_generation": "gen-1", "generation_binding": generation_binding(record)}
    await text_client.hset(key, mapping=long_form)  # type: ignore[misc]
    assert (await client.get(GetRequest(session=s))).generation_trusted is True
    assert (await client.decide(decide_req(s))).mode == "resume"

    await client.commit(commit_req(s, cursor="c-2"))
    rewritten: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    assert "compatibility_generation" not in rewritten and "generation_binding" not in rewritten
    assert rewritten["g"] == binding_stamp(rewritten).decode() + "gen-1"
