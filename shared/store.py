"""Redis connection and server-side scripts.

Every write that must be atomic is one Lua script kept as a file under `shared/scripts/`;
scripts run by EVALSHA and reload themselves after a server restart (NOSCRIPT).
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Mapping
from importlib import resources
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared import metrics

TRANSIENT_REDIS_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


class Commands(Protocol):
    """What scripts need of a client: redis-py's `Redis` and `PipelinedRedis` both serve."""

    async def execute_command(self, *args: Any) -> Any: ...


def connect(
    url: str, *, max_connections: int = 512, ssl_context: ssl.SSLContext | None = None
) -> aioredis.Redis:
    """A client of `url`; with `ssl_context` (from `shared.tls`, for `rediss://` URLs) every
    connection uses that context."""
    options: dict[str, Any] = {
        "max_connections": max_connections,
        "socket_connect_timeout": 2,
        "socket_timeout": 5,
        "health_check_interval": 10,
        "decode_responses": False,
    }
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


def _script_source(name: str) -> str:
    return resources.files("shared.scripts").joinpath(f"{name}.lua").read_text()


class Script:
    """A Lua script from `shared/scripts/<name>.lua`, run with EVALSHA.

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
