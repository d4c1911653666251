"""Redis connections, server-side scripts, scans and readiness, on one server or a Redis Cluster.

Every write that must be atomic is one Lua script kept as a file under `shared/records/scripts/`;
scripts run by EVALSHA and reload themselves after a server restart or on a node that has not
seen them yet (NOSCRIPT). Every key one script touches shares a hash tag, so on Redis Cluster
each script runs on the master of one slot.
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import AsyncIterator, Mapping
from importlib import resources
from typing import Any, Protocol, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.platform import metrics
from shared.platform.config import ConfigError
from shared.platform.redis import slots

TRANSIENT_REDIS_ERRORS = (
    RedisConnectionError,  # also LOADING (BusyLoadingError)
    RedisTimeoutError,
    OSError,
    AskError,  # and MovedError: redirects past the client's own retries
    TryAgainError,
    ClusterDownError,  # and MASTERDOWN
    ClusterError,  # redis-py's "TTL exhausted" after repeated redirects
    RedisClusterException,  # redis-py: no node reachable, or a slot without a node
)
"""Errors that mean "not now": a consumer redelivers after a delay, a request answers 503."""


class Commands(Protocol):
    """What scripts need of a client: redis-py's `Redis` and `PipelinedRedis` both serve."""

    async def execute_command(self, *args: Any) -> Any: ...


def connect(
    url: str,
    *,
    cluster: bool = False,
    max_connections: int = 512,
    ssl_context: ssl.SSLContext | None = None,
    **options: Any,
) -> aioredis.Redis:
    """redis-py's client of `url`: `RedisCluster` (with `url` as its seed node) when `cluster`.
    With `ssl_context` (from `shared.platform.tls`, for `rediss://` URLs) every connection uses that
    context.

    The cluster client answers every command the services send (each names keys of one slot),
    so it is typed as the single-server client they are written against.
    """
    options = {"socket_connect_timeout": 2, "socket_timeout": 5, "decode_responses": False, **options}
    if cluster:
        if ssl_context is not None:
            raise ConfigError("REDIS_URL: TLS to a Redis Cluster is not supported by this release")
        return cast(aioredis.Redis, RedisCluster.from_url(url, max_connections=max_connections, **options))
    options = {"max_connections": max_connections, "health_check_interval": 10, **options}
    if ssl_context is None:
        return aioredis.Redis.from_url(url, **options)
    # from_url would pick redis-py's own SSL connection class, which builds its own context.
    pool_options = {
        **parse_url(url),
        **options,
        "connection_class": _ContextSSLConnection,
        "ssl_context": ssl_context,
    }
    return aioredis.Redis.from_pool(aioredis.ConnectionPool(**pool_options))


class _ContextSSLConnection(aioredis.Connection):
    """A TCP connection wrapped in TLS with the given context (and its verification)."""

    def __init__(self, *, ssl_context: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ssl_context = ssl_context

    def _connection_arguments(self) -> Mapping[str, Any]:
        return {**super()._connection_arguments(), "ssl": self._ssl_context}


async def cluster_enabled(
    url: str, mode: str, *, ssl_context: ssl.SSLContext | None = None, **options: Any
) -> bool:
    """Whether `url` names a node of a Redis Cluster: `on`, `off`, or `auto` (`INFO cluster`)."""
    if mode != "auto":
        return mode == "on"
    # Database 0 whatever the URL selects: a cluster node refuses SELECT, and says so later.
    settings = {**parse_url(url), "socket_connect_timeout": 2, "socket_timeout": 5, **options, "db": 0}
    if ssl_context is not None:
        settings.update(connection_class=_ContextSSLConnection, ssl_context=ssl_context)
    probe = aioredis.Redis(connection_pool=aioredis.ConnectionPool(**settings))
    try:
        info = await probe.info("cluster")
    finally:
        await probe.aclose(close_connection_pool=True)
    return bool(int(info.get("cluster_enabled", 0)))


async def open_client(
    url: str, mode: str, *, ssl_context: ssl.SSLContext | None = None, **options: Any
) -> aioredis.Redis:
    """`connect` after `cluster_enabled`: raises a transient error while the server is away,
    `ConfigError` for a cluster URL that selects a database other than 0."""
    cluster = await cluster_enabled(url, mode, ssl_context=ssl_context, **options)
    if cluster and parse_url(url).get("db", 0) not in (0, "0", None):
        raise ConfigError("REDIS_URL: Redis Cluster has database 0 only")
    return connect(url, cluster=cluster, ssl_context=ssl_context, **options)


def is_cluster(client: aioredis.Redis) -> bool:
    return isinstance(client, RedisCluster)


async def scan_all(client: aioredis.Redis, match: str, count: int = 500) -> AsyncIterator[bytes]:
    """Every key matching `match`: one SCAN on a single server, a SCAN of every master on Redis
    Cluster (each holds only its own slots)."""
    if not isinstance(client, RedisCluster):
        async for key in client.scan_iter(match=match, count=count):
            yield key
        return
    cluster = cast(RedisCluster, client)
    await cluster.initialize()
    for node in cluster.get_primaries():
        cursor = 0
        while True:
            cursor, batch = await _scan_node(cluster, node, cursor, match, count)
            for key in batch:
                yield key
            if cursor == 0:
                break


async def _scan_node(
    cluster: RedisCluster, node: ClusterNode, cursor: int, match: str, count: int
) -> tuple[int, list[bytes]]:
    reply = await cluster.execute_command("SCAN", cursor, "MATCH", match, "COUNT", count, target_nodes=node)
    next_cursor, batch = reply
    if isinstance(next_cursor, dict):  # redis-py names the cursor by its node: {name: cursor}
        next_cursor = next(iter(next_cursor.values()))
    return int(next_cursor), list(batch)


async def answers_every_slot(client: aioredis.Redis) -> bool:
    """Readiness of the store: PING on a single server; on Redis Cluster, every slot range has a
    master that answers and reports `cluster_state:ok`. False while the store cannot answer."""
    try:
        if not isinstance(client, RedisCluster):
            return bool(await client.ping())  # type: ignore[misc]
        return await _cluster_answers(cast(RedisCluster, client))
    except TRANSIENT_REDIS_ERRORS:
        return False


async def _cluster_answers(cluster: RedisCluster) -> bool:
    await cluster.initialize()
    ranges: dict[tuple[int, int], dict[str, Any]] | None = None
    for node in cluster.get_primaries():
        try:
            ranges = await cluster.execute_command("CLUSTER SLOTS", target_nodes=node)
            break
        except TRANSIENT_REDIS_ERRORS:
            continue
    if not ranges or sum(end - start + 1 for start, end in ranges) != slots.SLOTS:
        return False
    for host, port in {tuple(r["primary"]) for r in ranges.values()}:
        master = cluster.get_node(host=host, port=port)
        if master is None:  # a master this client does not know yet (a failover): learn the layout
            await cluster.nodes_manager.initialize()
            return False
        info = await cluster.execute_command("CLUSTER INFO", target_nodes=master)
        if info.get("cluster_state") != "ok":
            return False
    return True


def _script_source(name: str) -> str:
    return resources.files("shared.records.scripts").joinpath(f"{name}.lua").read_text()


class Script:
    """A Lua script from `shared/records/scripts/<name>.lua`, run with EVALSHA.

    With `with_lib`, the helpers of `lib.lua` are prepended: scripts that record run steps
    share them without a second round trip.
    """

    def __init__(self, name: str, *, with_lib: bool = False) -> None:
        self.name = name
        self.source = (_script_source("lib") + "\n" if with_lib else "") + _script_source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def __call__(self, client: Commands, keys: list[str], args: list[Any]) -> Any:
        try:
            try:
                return await client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
            except NoScriptError:  # a restarted server forgot its scripts
                return await client.execute_command("EVAL", self.source, len(keys), *keys, *args)
        except TRANSIENT_REDIS_ERRORS:
            metrics.REDIS_ERRORS.inc()
            raise


async def call(awaitable: Any) -> Any:
    """Await a plain Redis command, counting transient failures."""
    try:
        return await awaitable
    except TRANSIENT_REDIS_ERRORS:
        metrics.REDIS_ERRORS.inc()
        raise
