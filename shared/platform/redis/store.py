"""The one client of the store: commands, server-side scripts, scans and readiness, on one server
or a Redis Cluster, with one reply shape.

`Redis` sends every command over auto-pipelined connections (`pipeline.PipelinedRedis`): one to
a single server, one per master of a Redis Cluster. Replies are RESP as hiredis reads it: bytes
for strings (None when absent), int for integers, lists for arrays, and an error reply raises
the redis-py exception of its kind. The few helpers below (`hgetall`, `zrange_scored`, ...)
turn the flat arrays some commands answer into the mapping or pairs every caller wants, so no
caller tells two shapes apart.

Every write that must be atomic is one Lua script (`Script`); scripts run by EVALSHA and send
their source again after a server restart or on a node that has not seen them yet (NOSCRIPT).
Every key one script touches shares a hash tag, so on Redis Cluster each script runs on the
master of one slot.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlparse

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.platform import metrics, tls
from shared.platform.config import Config, ConfigError
from shared.platform.redis.durability import NONE, Durability
from shared.platform.redis.pipeline import NotEnoughReplicas, PipelinedRedis
from shared.platform.redis.slots import SLOTS

T = TypeVar("T")


class NotReplicated(RedisError):
    """A write fewer replicas (or append-only files) acknowledged than asked
    (`Redis.script_durable`): it may be lost in a failover, so its caller is told to try again,
    as for an outage."""


TRANSIENT_REDIS_ERRORS = (
    NotReplicated,
    NotEnoughReplicas,  # NOREPLICAS: `min-replicas-to-write` not met
    RedisConnectionError,  # also LOADING (BusyLoadingError)
    RedisTimeoutError,
    OSError,
    AskError,  # and MovedError: redirects past the client's own retries
    TryAgainError,
    ClusterDownError,  # and MASTERDOWN
    ClusterError,
    RedisClusterException,
)
"""Errors that mean "not now": a consumer redelivers after a delay, a request answers 503."""

Command = tuple[Any, ...]


class Script:
    """A Lua script run with EVALSHA; `source` is the whole text the server runs."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


class Redis:
    """The store's client (see the module). `cluster` is `on`, `off` or `auto` (the server is
    asked, `INFO cluster`); `ssl_context` comes from `shared.platform.tls`, and a `rediss://`
    URL without one verifies the server against the system's trust store."""

    def __init__(
        self,
        url: str,
        *,
        cluster: str = "auto",
        connect_timeout: float = 2.0,
        reply_timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
        durability: Durability = NONE,
    ) -> None:
        parsed = urlparse(url)
        self.durability = durability
        """What must hold a session write (CONTINUITY_REDIS_WAIT_*), checked by `connect`."""
        self._db = int((parsed.path or "/0").lstrip("/") or 0)
        self._tls = ssl_context is not None or parsed.scheme == "rediss"
        if cluster == "on":
            self._check_cluster_url()
        self._pipe = PipelinedRedis(
            url,
            cluster=cluster,
            connect_timeout=connect_timeout,
            reply_timeout=reply_timeout,
            ssl_context=ssl_context,
        )
        self.send = self._pipe.send
        """Queue a command now and return its reply's future: commands sent one after the
        other, before any is awaited, go out in one write (the hot paths' way)."""

    @classmethod
    def from_config(cls, config: Config, *, waits: bool = False) -> Redis:
        """The client of `REDIS_URL`, `REDIS_CLUSTER` and the Redis TLS settings; with `waits`,
        of CONTINUITY_REDIS_WAIT_* too (the session-store's: no other service waits, and its
        Redis user may lack WAITAOF)."""
        return cls(
            config.redis_url,
            cluster=config.redis_cluster,
            ssl_context=tls.redis_context(config),
            durability=Durability.from_config(config) if waits else NONE,
        )

    def _check_cluster_url(self) -> None:
        if self._tls:
            raise ConfigError("REDIS_URL: TLS to a Redis Cluster is not supported by this release")
        if self._db:
            raise ConfigError("REDIS_URL: Redis Cluster has database 0 only")

    async def connect(self) -> None:
        """Learn whether the server is a Redis Cluster and check that the URL suits it: raises a
        transient error while the server is away, `ConfigError` for a URL a cluster refuses."""
        if await self._pipe.is_cluster():
            self._check_cluster_url()
        if self.durability.uses_waitaof:
            await self._check_waitaof()

    async def _check_waitaof(self) -> None:
        """WAITAOF asked of a server without it would fail every commit: `ConfigError` at start,
        for a server too old, without its append-only file, or a user not allowed the command."""
        server, persistence = await self.batch([("INFO", "server"), ("INFO", "persistence")])
        self.durability.check(_text(server), _text(persistence))
        try:
            await self.execute("WAITAOF", 0, 0, 1)  # counts of 0: answered at once
        except ResponseError as err:
            raise ConfigError(
                "CONTINUITY_REDIS_WAIT_AOF_*: the Redis server refused WAITAOF "
                f"({str(err).split(' ', 1)[0]}): the user of REDIS_URL needs +waitaof"
            ) from None

    async def is_cluster(self) -> bool:
        return await self._pipe.is_cluster()

    async def aclose(self) -> None:
        await self._pipe.aclose()

    # Commands ------------------------------------------------------------------------------

    async def execute(self, *args: Any) -> Any:
        """One command's reply, counting a transient failure."""
        try:
            return await self._pipe.send(*args)
        except TRANSIENT_REDIS_ERRORS:
            metrics.REDIS_ERRORS.inc()
            raise

    async def reply(self, sent: Awaitable[Any]) -> Any:
        """The reply of a command queued with `send`, counting a transient failure."""
        try:
            return await sent
        except TRANSIENT_REDIS_ERRORS:
            metrics.REDIS_ERRORS.inc()
            raise

    async def batch(self, commands: Sequence[Command]) -> list[Any]:
        """The replies of `commands`, all sent before the first is awaited (one write on a
        single server, one per master on a cluster)."""
        sent = [self._pipe.send(*command) for command in commands]
        try:
            return list(await asyncio.gather(*sent))
        except TRANSIENT_REDIS_ERRORS:
            metrics.REDIS_ERRORS.inc()
            raise

    async def get(self, key: str) -> bytes | None:
        reply: bytes | None = await self.execute("GET", key)
        return reply

    async def hget(self, key: str, field: str) -> bytes | None:
        reply: bytes | None = await self.execute("HGET", key, field)
        return reply

    async def hmget(self, key: str, *fields: str) -> list[bytes | None]:
        reply: list[bytes | None] = await self.execute("HMGET", key, *fields)
        return reply

    async def hgetall(self, key: str | bytes) -> dict[bytes, bytes]:
        return pairs(await self.execute("HGETALL", key))

    async def exists(self, key: str) -> bool:
        return bool(await self.execute("EXISTS", key))

    async def lrange(self, key: str, start: int = 0, stop: int = -1) -> list[bytes]:
        reply: list[bytes] = await self.execute("LRANGE", key, start, stop)
        return reply

    async def zrange_scored(self, key: str, start: int, stop: int) -> list[tuple[bytes, float]]:
        """Members from rank `start` to `stop`, with their scores."""
        return scored(await self.execute("ZRANGE", key, start, stop, "WITHSCORES"))

    async def zrangebyscore(
        self, key: str, low: float | str, high: float | str, offset: int, count: int
    ) -> list[bytes]:
        reply: list[bytes] = await self.execute(
            "ZRANGEBYSCORE", key, _score(low), _score(high), "LIMIT", offset, count
        )
        return reply

    async def zrangebyscore_scored(
        self, key: str, low: float | str, high: float | str, offset: int, count: int
    ) -> list[tuple[bytes, float]]:
        """As `zrangebyscore`, with each member's score."""
        reply = await self.execute(
            "ZRANGEBYSCORE", key, _score(low), _score(high), "WITHSCORES", "LIMIT", offset, count
        )
        return scored(reply)

    async def zrem(self, key: str, *members: bytes | str) -> int:
        return int(await self.execute("ZREM", key, *members))

    # Scripts --------------------------------------------------------------------------------

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run `script` on `keys` (all of one hash tag) with `args`."""
        return await self._evaluate(script, keys, args, lambda command: self._pipe.send(*command))

    async def script_durable(
        self, script: Script, keys: Sequence[str], args: Sequence[Any], durability: Durability
    ) -> tuple[Any, str | None]:
        """`script`, then `durability`'s WAIT / WAITAOF on its connection: its reply, and None
        when every count was met, else what fell short (`Durability.shortfall`)."""
        follow = durability.commands()
        reply, counts = await self._evaluate(
            script, keys, args, lambda command: self._pipe.send_followed(command, follow)
        )
        return reply, durability.shortfall(counts)

    @staticmethod
    async def _evaluate(
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        send: Callable[[tuple[Any, ...]], Awaitable[T]],
    ) -> T:
        """EVALSHA through `send`, EVAL when a restarted server forgot the script."""
        try:
            try:
                return await send(("EVALSHA", script.sha, len(keys), *keys, *args))
            except NoScriptError:
                return await send(("EVAL", script.source, len(keys), *keys, *args))
        except TRANSIENT_REDIS_ERRORS:
            metrics.REDIS_ERRORS.inc()
            raise

    # Scans and readiness ----------------------------------------------------------------------

    async def scan(self, match: str, count: int = 500) -> AsyncIterator[bytes]:
        """Every key matching `match`: one SCAN on a single server, a SCAN of every master on
        Redis Cluster (each holds only its own slots)."""
        if not await self._pipe.is_cluster():
            async for key in self._scan_with(self._pipe.send, match, count):
                yield key
            return
        masters = {address for address in await self._pipe.slot_masters() if address is not None}
        for address in sorted(masters):
            async for key in self._scan_with(functools.partial(self._pipe.send_to, address), match, count):
                yield key

    @staticmethod
    async def _scan_with(send: Any, match: str, count: int) -> AsyncIterator[bytes]:
        cursor = b"0"
        while True:
            try:
                cursor, batch = await send("SCAN", cursor, "MATCH", match, "COUNT", count)
            except TRANSIENT_REDIS_ERRORS:
                metrics.REDIS_ERRORS.inc()
                raise
            for key in batch:
                yield key
            if cursor == b"0":
                return

    async def ready(self) -> bool:
        """Readiness of the store: PING on a single server; on Redis Cluster, every slot has a
        master that answers and reports `cluster_state:ok`. False while the store cannot answer."""
        try:
            if not await self._pipe.is_cluster():
                return bool(await self._pipe.send("PING") == b"PONG")
            table = await self._pipe.slot_masters()
            if len(table) != SLOTS or any(address is None for address in table):
                return False
            for address in {address for address in table if address is not None}:
                info = await self._pipe.send_to(address, "CLUSTER", "INFO")
                if b"cluster_state:ok" not in info:
                    return False
            return True
        except (*TRANSIENT_REDIS_ERRORS, RedisError):  # an error reply is no readiness either
            return False


def _text(reply: Any) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)


def pairs(flat: list[Any]) -> dict[bytes, bytes]:
    """A flat `[name, value, ...]` reply (HGETALL) as a mapping."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def scored(flat: list[Any]) -> list[tuple[bytes, float]]:
    """A flat `[member, score, ...]` reply (WITHSCORES) as (member, score) pairs."""
    return [(member, float(score)) for member, score in zip(flat[::2], flat[1::2], strict=True)]


def _score(value: float | str) -> str:
    return value if isinstance(value, str) else repr(value)
