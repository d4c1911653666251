"""The partition suite's system, built once for the module: hosts in network namespaces of their
own (tests/support/netns.py) for three NATS nodes, six Redis Cluster nodes and the four
services, torn down, namespaces and processes, however the tests end.

Run by `make chaos` (`pytest tests/chaos -m chaos`), as root; `make test` and `make
test-system` never collect it (pyproject's testpaths leave tests/chaos out)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from shared.contract import subjects
from tests.support.netns import Net
from tests.support.netns_lab import Lab
from tests.support.netns_load import Measured
from tests.support.waiting import wait_for


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.chaos)
            # Each test holds a fault and waits out its recovery; the first also builds the lab.
            item.add_marker(pytest.mark.timeout(600))


@pytest.fixture(scope="session")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Lab]:
    data = tmp_path_factory.mktemp("chaos")
    net = Net(data)
    try:
        system = Lab(net, data)
        system.start_nats()
        system.start_redis()
        await system.create_redis_cluster()
        await system.wait_nats_healthy()
        for name in ("session-store", "classifier", "archiver", "reconciliation"):
            system.start_service(name)
        await system.wait_ready()
        nc = await system.connect()
        try:
            await _streams_replicated(nc)
        finally:
            await nc.close()
        yield system
    finally:
        print(f"\nlogs of the partition suite: {data}")
        net.close()


async def _streams_replicated(nc: Client) -> None:
    js = nc.jetstream()

    async def replicated() -> bool:
        for stream in (subjects.EVENTS_STREAM, subjects.DECISIONS_STREAM, subjects.WORK_STREAM):
            try:
                info = await js.stream_info(stream)
            except Exception:
                return False
            replicas = (info.cluster.replicas or []) if info.cluster else []
            if len(replicas) != 2 or not all(r.current for r in replicas):
                return False
        return True

    await wait_for(replicated, timeout=60, interval=0.5, what="the streams at three current replicas")


@pytest.fixture(scope="session")
def table() -> Iterator[list[Measured]]:
    """Each fault's figures, printed as one table when the suite ends."""
    rows: list[Measured] = []
    yield rows
    if rows:
        print("\n\nPartition suite: per fault, under load, then healed")
        print(Measured.HEADER)
        for m in rows:
            print(m.row())
