"""Cluster fixtures: a Redis Cluster of 3 masters and 3 replicas and a 3-node JetStream
cluster, on free ports, shared by the whole session; tests that kill a node restart it and
wait until the cluster has settled again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from continuity.servers import NatsCluster, RedisCluster


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
