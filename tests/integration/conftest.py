"""Cluster fixtures: a Redis Cluster of 3 masters and 3 replicas and a 3-node JetStream
cluster, on free ports, shared by the whole session; tests that kill a node restart it and
wait until the cluster has settled again. And a Redis of a module's own, for tests that read
every key of a kind (every bucket of an index)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from continuity.devstack.servers import NatsCluster, RedisCluster, RedisServer
from shared.platform.redis import Redis


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of the module's own, so that what other modules wrote is not in the way."""
    server = RedisServer(tmp_path_factory.mktemp("own-redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def own_r(own_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A client of `own_redis`, emptied for each test."""
    client = aioredis.Redis.from_url(own_redis.url)
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture
async def records_redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """The services' own client (`shared.platform.redis.Redis`) of `redis_server`."""
    client = Redis(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def own_records(own_redis: RedisServer, own_r: aioredis.Redis) -> AsyncIterator[Redis]:
    """The services' own client of `own_redis`, emptied for each test (by `own_r`)."""
    client = Redis(own_redis.url)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    cluster = NatsCluster(tmp_path_factory.mktemp("nats-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()
