"""Readiness on Redis Cluster: false while a slot has no master, true again once it has one
(a cluster of this module's own: its nodes are killed)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from continuity.devstack.servers import RedisCluster
from shared.platform.redis import Redis
from tests.support import wait_for

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path_factory.mktemp("readiness-cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def client(own_cluster: RedisCluster) -> AsyncIterator[Redis]:
    c = Redis(own_cluster.url)
    await c.connect()
    yield c
    await c.aclose()


async def test_not_ready_while_a_slot_has_no_master(own_cluster: RedisCluster, client: Redis) -> None:
    assert await client.ready()
    master = own_cluster.masters()[-1]
    group = [master, *own_cluster.replicas_of(master)]
    assert len(group) == 2
    for node in group:
        node.kill()  # the master and its replica: nobody can take its slots over
    assert not await client.ready()

    async def reports_fail() -> bool:
        return own_cluster.state(own_cluster.running()[0]) == "fail"

    await wait_for(reports_fail, timeout=15, what="the cluster noticing the lost slots")
    assert not await client.ready()
    for node in group:
        node.start()
    own_cluster.wait_ok()
    await wait_for(lambda: client.ready(), timeout=15, what="ready again")


async def test_not_ready_between_a_master_loss_and_its_failover(
    own_cluster: RedisCluster, client: Redis
) -> None:
    await wait_for(lambda: client.ready(), timeout=15, what="ready")
    master = own_cluster.masters()[0]
    master.kill()
    assert not await client.ready()
    # its replica takes over: every slot has a master again, and the client finds it
    await wait_for(lambda: client.ready(), timeout=20, what="ready after the failover")
    assert master.port not in {m.port for m in own_cluster.masters()}
    master.start()
    own_cluster.wait_ok()
