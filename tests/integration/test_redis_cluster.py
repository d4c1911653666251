"""The store's clients against a real Redis Cluster (3 masters, 3 replicas): routing by slot,
redirects during a real slot migration, scripts on every master, scans and readiness."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import RedisCluster, RedisServer
from shared.platform.config import ConfigError
from shared.platform.redis import Redis
from shared.platform.redis.pipeline import PipelinedRedis
from shared.platform.redis.slots import key_slot
from shared.records import keys, scripts

pytestmark = pytest.mark.asyncio

_PROBE = scripts.SESSION_REJECT


@pytest.fixture
async def pipelined(redis_cluster: RedisCluster) -> AsyncIterator[PipelinedRedis]:
    r = PipelinedRedis(redis_cluster.url)
    yield r
    await r.aclose()


@pytest.fixture
async def client(redis_cluster: RedisCluster) -> AsyncIterator[Redis]:
    c = Redis(redis_cluster.url)
    await c.connect()
    yield c
    await c.aclose()


def _key_on(cluster: RedisCluster, master: RedisServer, prefix: str = "k") -> str:
    """A fresh key whose slot the given master serves."""
    while True:
        key = f"{prefix}:{{{uuid.uuid4().hex[:10]}}}"
        if cluster.master_of_slot(key_slot(key)).port == master.port:
            return key


async def test_slots_agree_with_the_server(redis_cluster: RedisCluster) -> None:
    node = redis_cluster.nodes[0]
    for key in ("somekey", keys.session("acme/c/a"), keys.run_index("run-1"), "x{}{y}"):
        assert int(node.cli("CLUSTER", "KEYSLOT", key)) == key_slot(key)


async def test_the_pipeline_sends_each_command_to_the_master_of_its_slot(
    redis_cluster: RedisCluster, pipelined: PipelinedRedis
) -> None:
    names = [f"pipe:{{{i}}}" for i in range(300)]
    await asyncio.gather(*(pipelined.execute_command("SET", k, k) for k in names))
    values = await asyncio.gather(*(pipelined.execute_command("GET", k) for k in names))
    assert values == [k.encode() for k in names]
    masters = redis_cluster.masters()
    assert len(masters) == 3
    # every master holds some of the keys, and each one only those of its own slots
    held = [int(m.cli("DBSIZE")) for m in masters]
    assert all(n > 0 for n in held)
    for m in masters:
        for k in names[:30]:
            owner = redis_cluster.master_of_slot(key_slot(k))
            assert (m.cli("EXISTS", k).strip() == "1") == (owner.port == m.port)


async def test_scripts_load_on_the_master_where_they_run(redis_cluster: RedisCluster, client: Redis) -> None:
    for master in redis_cluster.masters():
        master.cli("SCRIPT", "FLUSH")
    for master in redis_cluster.masters():
        # NOSCRIPT on this master: the script is loaded there and run
        assert await client.script(_PROBE, [_key_on(redis_cluster, master)], ["ns-x"]) == 0
    assert all(m.cli("SCRIPT", "EXISTS", _PROBE.sha).strip() == "1" for m in redis_cluster.masters())


async def test_ask_and_moved_are_followed_during_a_slot_migration(
    redis_cluster: RedisCluster, pipelined: PipelinedRedis, client: Redis
) -> None:
    source, target = redis_cluster.masters()[:2]
    key = _key_on(redis_cluster, source, "mig")
    slot = key_slot(key)
    sibling = key.replace("mig:", "mig2:")  # same tag, same slot, not stored yet
    await pipelined.execute_command("SET", key, "before")
    source_id, target_id = source.cli("CLUSTER", "MYID").strip(), target.cli("CLUSTER", "MYID").strip()
    target.cli("CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    source.cli("CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    try:
        # a key the source no longer has answers ASK: the command goes to the target after ASKING
        assert await pipelined.execute_command("SET", sibling, "asked") == b"OK"
        assert await pipelined.execute_command("GET", sibling) == b"asked"
        assert await client.get(sibling) == b"asked"
        assert target.cli("ASKING") and await pipelined.execute_command("GET", key) == b"before"
        source.cli("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", key)
    finally:
        for node in redis_cluster.masters():
            node.cli("CLUSTER", "SETSLOT", str(slot), "NODE", target_id)
    # the slot moved: the source answers MOVED and the pipeline follows it to the target
    assert await pipelined.execute_command("GET", key) == b"before"
    assert await pipelined.execute_command("SET", key, "after") == b"OK"
    assert await client.get(key) == b"after"
    assert target.cli("ASKING") is not None and redis_cluster.master_of_slot(slot).port == target.port


async def test_scan_all_covers_every_master(redis_cluster: RedisCluster, client: Redis) -> None:
    tag = uuid.uuid4().hex[:8]
    names = {f"scan-{tag}:{{{i}}}".encode() for i in range(60)}
    for name in names:
        await client.execute("SET", name, 1)
    found = {k async for k in client.scan(f"scan-{tag}:*")}
    assert found == names
    one_node = aioredis.Redis.from_url(redis_cluster.masters()[0].url)
    try:
        seen_by_one = {k async for k in one_node.scan_iter(match=f"scan-{tag}:*")}
    finally:
        await one_node.aclose()
    assert seen_by_one < names  # one node's SCAN alone would miss the others' keys


async def test_scan_all_on_a_single_server(redis_server: RedisServer) -> None:
    c = Redis(redis_server.url)
    try:
        await c.connect()
        assert not await c.is_cluster()
        tag = uuid.uuid4().hex[:8]
        await c.execute("SET", f"scan1-{tag}:a", 1)
        assert [k async for k in c.scan(f"scan1-{tag}:*")] == [f"scan1-{tag}:a".encode()]
        assert await c.ready()
    finally:
        await c.aclose()


async def test_cluster_mode_is_detected_from_any_node(
    redis_cluster: RedisCluster, redis_server: RedisServer
) -> None:
    for node in redis_cluster.nodes:
        assert await _cluster_enabled(node.url, "auto")
    assert not await _cluster_enabled(redis_server.url, "auto")
    assert await _cluster_enabled(redis_server.url, "on")
    assert not await _cluster_enabled(redis_cluster.url, "off")
    replica = next(n for n in redis_cluster.running() if n not in redis_cluster.masters())
    seeded = Redis(replica.url)  # a replica as the seed finds the masters
    try:
        await seeded.connect()
        assert await seeded.is_cluster() and await seeded.ready()
        await seeded.execute("SET", "seeded:{x}", "1")
    finally:
        await seeded.aclose()
    other_db = Redis(redis_cluster.url.rsplit("/", 1)[0] + "/3")
    with pytest.raises(ConfigError, match="database 0"):
        await other_db.connect()
    await other_db.aclose()


async def _cluster_enabled(url: str, mode: str) -> bool:
    c = Redis(url, cluster=mode)
    try:
        return await c.is_cluster()
    finally:
        await c.aclose()


async def test_a_healthy_cluster_answers_every_slot(client: Redis) -> None:
    assert await client.ready()
