"""Streams and consumers are never weakened by a service: on a 3-node JetStream cluster a
service started with the default replica count leaves R3 streams and consumers R3, reports the
difference (log line, metric, `continuity streams check`), and only `continuity streams apply`
changes them. Limits are checked the same way on a single server, and every service's consumers
(the reconciliation service's runs index among them) are checked and applied."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError
from prometheus_client import REGISTRY

from continuity.devstack.servers import NatsServer, RedisServer, free_port
from services import registry
from shared.contract import subjects
from shared.platform.bus import streams
from shared.platform.config import Config
from tests.support import make_config, running, wait_for

STREAMS = [subjects.EVENTS_STREAM, subjects.DECISIONS_STREAM, subjects.WORK_STREAM, subjects.DEAD_STREAM]


class ClusterNode(NatsServer):
    """One nats-server of a JetStream cluster whose routes are known before any starts."""

    def __init__(self, data_dir: Path, index: int, cluster_ports: list[int]) -> None:
        super().__init__(data_dir)
        self.index = index
        self.cluster_ports = cluster_ports

    def command(self) -> list[str]:
        routes = ",".join(
            f"nats://127.0.0.1:{p}" for i, p in enumerate(self.cluster_ports) if i != self.index
        )
        return [
            *super().command(),
            "--server_name", f"n{self.index}",
            "--cluster_name", "continuity-test",
            "--cluster", f"nats://127.0.0.1:{self.cluster_ports[self.index]}",
            "--routes", routes,
        ]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    base = tmp_path_factory.mktemp("cluster")
    ports = [free_port() for _ in range(3)]
    nodes = [ClusterNode(base / f"n{i}", i, ports) for i in range(3)]
    for node in nodes:
        node.start()
    yield nodes
    for node in nodes:
        node.stop()


def urls(nodes: list[ClusterNode]) -> str:
    return ",".join(node.url for node in nodes)


@pytest.fixture
async def cjs(cluster: list[ClusterNode]) -> AsyncIterator[JetStreamContext]:
    """JetStream of the cluster, once it has a meta leader, with none of the four streams nor
    CONTINUITY_HISTORY."""
    nc: Client = await nats.connect(servers=[node.url for node in cluster])
    js = nc.jetstream(timeout=5)

    async def usable() -> bool:
        try:
            await js.account_info()
            for name in [*STREAMS, subjects.HISTORY_STREAM]:
                try:
                    await js.delete_stream(name)
                except NotFoundError:
                    pass
            return True
        except Exception:
            return False

    await wait_for(usable, timeout=30, interval=0.2, what="a JetStream meta leader")
    yield js
    await nc.close()


def drift_metric(stream: str, field: str, consumer: str | None = None) -> float | None:
    if consumer is None:
        return REGISTRY.get_sample_value("continuity_stream_drift", {"stream": stream, "field": field})
    labels = {"stream": stream, "consumer": consumer, "field": field}
    return REGISTRY.get_sample_value("continuity_consumer_drift", labels)


async def replicas(js: JetStreamContext, stream: str, durable: str | None = None) -> int:
    if durable is None:
        return (await js.stream_info(stream)).config.num_replicas or 1
    return streams.consumer_replicas(await js.consumer_info(stream, durable))


async def cli(*args: str, nats_url: str, stdin: bytes = b"", **env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuity", "streams", *args,
        env={**os.environ, "NATS_URL": nats_url, **env},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_service_with_the_default_replicas_leaves_r3_streams_and_consumers_r3(
    cjs: JetStreamContext,
    cluster: list[ClusterNode],
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert await streams.ensure_streams(cjs, replicas=3) == []
    for spec in registry.durable_consumers(3, 30.0):
        if spec.stream == subjects.EVENTS_STREAM:
            await streams.ensure_consumer(cjs, spec)

    config = make_config(urls(cluster), redis_server.url)  # CONTINUITY_STREAM_REPLICAS unset: 1
    assert config.stream_replicas == 1
    async with running(registry.load("classifier"), config):
        for name in STREAMS:
            assert await replicas(cjs, name) == 3, name
            assert drift_metric(name, "num_replicas") == 1, name
            assert drift_metric(name, "max_age") == 0, name
        assert await replicas(cjs, subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER) == 3
        assert drift_metric(subjects.EVENTS_STREAM, "num_replicas", subjects.CLASSIFIER_CONSUMER) == 1
    for name in STREAMS:
        assert await replicas(cjs, name) == 3, name
    logged = [getattr(r, "fields", {}) for r in caplog.records if r.getMessage() == "stream_drift"]
    # The setting's name, never its values.
    assert {(f["stream"], f["field"]) for f in logged} == {(name, "num_replicas") for name in STREAMS}
    assert all(set(f) == {"stream", "consumer", "field"} for f in logged)


async def test_a_service_creating_missing_streams_uses_its_configuration(
    cjs: JetStreamContext, cluster: list[ClusterNode], redis_server: RedisServer
) -> None:
    config = make_config(urls(cluster), redis_server.url, stream_replicas=3)
    async with running(registry.load("classifier"), config):
        for name in STREAMS:
            assert await replicas(cjs, name) == 3, name
            assert drift_metric(name, "num_replicas") == 0, name
        with pytest.raises(NotFoundError):  # the reconciliation service's own stream
            await cjs.stream_info(subjects.HISTORY_STREAM)
    async with running(registry.load("reconciliation"), config):
        assert await replicas(cjs, subjects.HISTORY_STREAM) == 3
        info = await cjs.stream_info(subjects.HISTORY_STREAM)
        assert (info.config.max_age, info.config.max_msgs_per_subject) == (30 * 86400.0, 1)
        # The consumer it created has its stream's replicas.
        assert await replicas(cjs, subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER) == 3
        assert drift_metric(subjects.EVENTS_STREAM, "num_replicas", subjects.CLASSIFIER_CONSUMER) == 0


async def test_streams_check_reports_r1_streams_and_apply_makes_them_r3(
    cjs: JetStreamContext, cluster: list[ClusterNode]
) -> None:
    await streams.ensure_streams(cjs, replicas=1)
    await streams.ensure_stream(cjs, streams.history_stream_config(Config()))
    for spec in registry.durable_consumers(1, 30.0):
        await streams.ensure_consumer(cjs, spec)
    url = urls(cluster)  # the CLI takes the same comma-separated list as the services

    code, out, err = await cli("check", nats_url=url, CONTINUITY_STREAM_REPLICAS="3")
    assert code == 1, err
    lines = [line.split() for line in out.splitlines()[1:]]
    assert sorted(line[0] for line in lines) == sorted(
        [
            *STREAMS,
            subjects.HISTORY_STREAM,
            "CONTINUITY_EVENTS/classifier",
            "CONTINUITY_WORK/archiver",
            "CONTINUITY_WORK/reconciliation",
            "CONTINUITY_DECISIONS/continuity:runs-index",
        ]
    )
    assert all(line[1:] == ["num_replicas", "1", "3"] for line in lines), out

    code, out, err = await cli("apply", nats_url=url, stdin=b"n\n", CONTINUITY_STREAM_REPLICAS="3")
    assert code == 1 and "not_confirmed" in err
    assert await replicas(cjs, subjects.EVENTS_STREAM) == 1

    code, out, err = await cli("apply", "--yes", "--replicas", "3", nats_url=url)
    assert code == 0, err
    assert "updated stream CONTINUITY_EVENTS" in out and "updated consumer CONTINUITY_WORK/archiver" in out
    for name in [*STREAMS, subjects.HISTORY_STREAM]:
        assert await replicas(cjs, name) == 3, name

    async def consumers_r3() -> bool:
        return all([await replicas(cjs, s.stream, s.durable) == 3 for s in registry.durable_consumers(3, 30)])

    # A consumer moves to R3 by its own Raft group, a moment after the update is accepted.
    await wait_for(consumers_r3, timeout=20, what="consumers at 3 replicas")
    code, out, err = await cli("check", "--json", nats_url=url, CONTINUITY_STREAM_REPLICAS="3")
    assert code == 0, out + err
    assert json.loads(out) == {"missing": [], "drift": []}


@pytest.fixture
async def single(tmp_path: Path) -> AsyncIterator[tuple[NatsServer, JetStreamContext]]:
    server = NatsServer(tmp_path / "nats")
    server.start()
    nc = await nats.connect(server.url)
    yield server, nc.jetstream()
    await nc.close()
    server.stop()


async def test_limits_of_an_existing_stream_are_kept_reported_and_applied_on_request(
    single: tuple[NatsServer, JetStreamContext],
) -> None:
    server, js = single
    await js.add_stream(
        StreamConfig(
            name=subjects.EVENTS_STREAM,
            subjects=[subjects.EVENTS_ALL],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            max_age=3600.0,
            max_msgs=1000,
            duplicate_window=60.0,
        )
    )
    await js.add_consumer(
        subjects.EVENTS_STREAM,
        ConsumerConfig(
            durable_name=subjects.CLASSIFIER_CONSUMER, ack_wait=5.0, filter_subject=subjects.EVENTS_ALL
        ),
    )

    drifts = await streams.ensure_streams(js, replicas=1, duplicate_window_s=120)
    limits = streams.StreamLimits()
    assert {(d.stream, d.field, d.stored, d.configured) for d in drifts} == {
        (subjects.EVENTS_STREAM, "max_age", "3600", "604800"),
        (subjects.EVENTS_STREAM, "max_msgs", "1000", "-1"),
        (subjects.EVENTS_STREAM, "duplicate_window", "60", "120"),
        # A stream made before the streams had a size and a share per runner.
        (subjects.EVENTS_STREAM, "max_bytes", "-1", str(limits.events_max_bytes)),
        (
            subjects.EVENTS_STREAM,
            "max_msgs_per_subject",
            "-1",
            str(limits.per_runner_messages),
        ),
    }
    spec = next(c for c in registry.durable_consumers(1, 30.0) if c.durable == subjects.CLASSIFIER_CONSUMER)
    consumer_drifts = await streams.ensure_consumer(js, spec)
    assert {(d.field, d.stored, d.configured) for d in consumer_drifts} == {
        ("ack_wait", "5", "30"),
        ("max_ack_pending", "1000", "4096"),
    }
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert (info.config.max_age, info.config.max_msgs, info.config.duplicate_window) == (3600.0, 1000, 60.0)
    assert (
        await js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
    ).config.ack_wait == 5.0
    assert drift_metric(subjects.EVENTS_STREAM, "max_age") == 1
    assert drift_metric(subjects.EVENTS_STREAM, "num_replicas") == 0
    assert drift_metric(subjects.EVENTS_STREAM, "ack_wait", subjects.CLASSIFIER_CONSUMER) == 1

    code, out, err = await cli("check", "--json", nats_url=server.url)
    assert code == 1, err
    shown = json.loads(out)
    assert {(d["stream"], d["consumer"], d["field"]) for d in shown["drift"]} == {
        (subjects.EVENTS_STREAM, None, "max_age"),
        (subjects.EVENTS_STREAM, None, "max_msgs"),
        (subjects.EVENTS_STREAM, None, "duplicate_window"),
        (subjects.EVENTS_STREAM, None, "max_bytes"),
        (subjects.EVENTS_STREAM, None, "max_msgs_per_subject"),
        (subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER, "ack_wait"),
        (subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER, "max_ack_pending"),
    }
    assert shown["missing"] == [
        subjects.HISTORY_STREAM,
        "CONTINUITY_WORK/archiver",
        "CONTINUITY_WORK/reconciliation",
        "CONTINUITY_DECISIONS/continuity:runs-index",
    ]

    code, out, err = await cli("apply", "--yes", nats_url=server.url)
    assert code == 0, err
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert (info.config.max_age, info.config.max_msgs, info.config.duplicate_window) == (604800.0, -1, 120.0)
    assert (info.config.max_bytes, info.config.max_msgs_per_subject) == (
        limits.events_max_bytes,
        limits.per_runner_messages,
    )
    assert (
        await js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
    ).config.ack_wait == 30.0
    code, out, err = await cli("check", nats_url=server.url)
    assert code == 0 and "match the configuration" in out, out + err


async def test_the_runs_index_consumer_is_checked_and_applied_like_every_service_consumer(
    single: tuple[NatsServer, JetStreamContext], redis_server: RedisServer
) -> None:
    server, js = single
    runs_index = f"{subjects.DECISIONS_STREAM}/{subjects.RUNS_INDEX_CONSUMER}"
    # As the reconciliation service creates it, it matches what check and apply expect.
    async with running(registry.load("reconciliation"), make_config(server.url, redis_server.url)):
        configs = streams.stream_configs(1, 120.0)
        missing, drifts = await streams.check(js, configs, registry.durable_consumers(1, 30.0))
        assert runs_index not in missing
        assert [d for d in drifts if d.consumer == subjects.RUNS_INDEX_CONSUMER] == []

    await js.delete_consumer(subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER)
    await js.add_consumer(
        subjects.DECISIONS_STREAM,
        ConsumerConfig(
            durable_name=subjects.RUNS_INDEX_CONSUMER, ack_wait=5.0, filter_subject=subjects.DECISIONS_ALL
        ),
    )
    code, out, err = await cli("check", "--json", nats_url=server.url)
    assert code == 1, err
    shown = json.loads(out)
    assert {d["field"] for d in shown["drift"] if d["consumer"] == subjects.RUNS_INDEX_CONSUMER} == {
        "ack_wait",
        "max_ack_pending",
    }
    code, out, err = await cli("apply", "--yes", nats_url=server.url)
    assert code == 0 and f"updated consumer {runs_index}" in out, out + err
    info = await js.consumer_info(subjects.DECISIONS_STREAM, subjects.RUNS_INDEX_CONSUMER)
    assert info.config.ack_wait == 30.0
