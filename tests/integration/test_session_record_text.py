"""Every stored value of a session record is text: a client that decodes replies as UTF-8
(redis-py `decode_responses=True`) reads the whole record, the record stays within the 512-byte
listpack budget, and records in the older forms are still read and trusted."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import RedisServer
from continuity.tools.bench.sessions import commit_request, decide_request
from services import registry
from shared.contract import GetRequest
from shared.contract.client import ContinuityClient
from shared.platform.config import Config
from shared.records import keys
from shared.records.session import V1_FIELDS, generation_binding
from tests.support import RunningApp, running
from tests.support.sessions import commit_req, decide_req, new_session


@pytest.fixture
async def store_app(config: Config) -> AsyncIterator[RunningApp]:
    async with running(registry.load("session-store"), config) as app:
        yield app


@pytest.fixture
async def text_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


async def test_a_committed_record_reads_as_text_and_stays_within_512_bytes(
    store_app: RunningApp, client: ContinuityClient, text_client: aioredis.Redis
) -> None:
    i = 424242
    req = commit_request(i)  # the benchmark's realistic record: a 60-character cwd
    await client.commit(req)
    key = keys.session(req.session.key)

    record: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    v1 = {name: record[name] for name in V1_FIELDS}
    assert record["generation"] == generation_binding(v1)[:16] + "dsh-2026.11.3-p7"
    assert record["revision"] == "1" and "state" not in record and "epoch" not in record
    assert (await text_client.memory_usage(key, samples=0) or 0) <= 512
    assert await text_client.object("encoding", key) == "listpack"
    assert (await client.decide(decide_request(i))).mode == "resume"


async def test_a_held_and_replaced_record_stays_text(
    store_app: RunningApp, client: ContinuityClient, text_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    await text_client.hset(keys.session(s.key), "state", "held")  # type: ignore[misc]
    await client.commit(commit_req(s, native_session_id="ns-2"))
    for key in (keys.session(s.key), keys.held_archive(s.key, "ns-1")):
        record: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
        assert record["generation"].endswith("gen-1") and record["generation"][:16].isalnum(), key


def raw_stamped(record: dict[bytes, bytes], generation: bytes) -> bytes:
    """The compact form the previous release wrote: 16 raw bytes of the binding's digest."""
    joined = b"\n".join(record.get(name.encode(), b"") for name in V1_FIELDS)
    return hashlib.sha256(joined).digest()[:16] + generation


async def test_the_raw_bytes_form_of_the_previous_release_is_still_trusted_and_rewritten_as_text(
    store_app: RunningApp, client: ContinuityClient, redis_client: aioredis.Redis, text_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    key = keys.session(s.key)
    record: dict[bytes, bytes] = await redis_client.hgetall(key)  # type: ignore[misc]
    stamped = raw_stamped(record, b"gen-1")
    await redis_client.hset(key, "generation", stamped)  # type: ignore[misc]
    view = await client.get(GetRequest(session=s))
    assert (view.has_generation, view.generation_trusted) == (True, True)
    assert (await client.decide(decide_req(s))).mode == "resume"
    await redis_client.hset(key, "cwd", "/elsewhere")  # type: ignore[misc]
    assert (await client.get(GetRequest(session=s))).generation_trusted is False
    await redis_client.hset(key, "cwd", record[b"cwd"])  # type: ignore[misc]

    await client.commit(commit_req(s, cursor="c-2"))
    rewritten: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    assert rewritten["generation"] == generation_binding(rewritten)[:16] + "gen-1"


async def test_the_contracts_long_form_is_still_trusted_and_rewritten_compactly(
    store_app: RunningApp, client: ContinuityClient, text_client: aioredis.Redis
) -> None:
    s = new_session()
    await client.commit(commit_req(s))
    key = keys.session(s.key)
    record: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    await text_client.hdel(key, "generation")  # type: ignore[misc]
    long_form = {"compatibility_generation": "gen-1", "generation_binding": generation_binding(record)}
    await text_client.hset(key, mapping=long_form)  # type: ignore[misc]
    assert (await client.get(GetRequest(session=s))).generation_trusted is True
    assert (await client.decide(decide_req(s))).mode == "resume"

    await client.commit(commit_req(s, cursor="c-2"))
    rewritten: dict[str, str] = await text_client.hgetall(key)  # type: ignore[misc]
    assert "compatibility_generation" not in rewritten and "generation_binding" not in rewritten
    assert rewritten["generation"] == generation_binding(rewritten)[:16] + "gen-1"
