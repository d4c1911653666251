"""The pipelined Redis connection against a real server: order, errors, outages, timeouts."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from continuity.devstack.servers import NatsServer, RedisServer
from shared.platform.redis.pipeline import FLUSH_COMMANDS, PipelinedRedis
from tests.support import wait_for

pytestmark = pytest.mark.asyncio


async def test_concurrent_commands_get_their_own_replies(redis_server: RedisServer) -> None:
    r = PipelinedRedis(redis_server.url)
    await asyncio.gather(*(r.execute_command("SET", f"pipe:{i}", i) for i in range(500)))
    values = await asyncio.gather(*(r.execute_command("GET", f"pipe:{i}") for i in range(500)))
    assert values == [str(i).encode() for i in range(500)]
    await r.aclose()


async def test_a_long_burst_is_written_in_chunks_and_answered_in_order(redis_server: RedisServer) -> None:
    r = PipelinedRedis(redis_server.url)
    await r.execute_command("DEL", "pipe:burst")
    # Sent in one loop iteration: every FLUSH_COMMANDS of them are written at once, the rest
    # at the end of the iteration; each reply still reaches its own command.
    burst = [r.send("INCR", "pipe:burst") for _ in range(FLUSH_COMMANDS * 3 + 5)]
    conn = r._single  # one server: one connection, connected by the DEL
    assert conn is not None and len(conn._buffer) == 5
    assert await asyncio.gather(*burst) == list(range(1, FLUSH_COMMANDS * 3 + 6))
    await r.aclose()


async def test_error_replies_raise_and_the_connection_stays_usable(redis_server: RedisServer) -> None:
    r = PipelinedRedis(redis_server.url)
    with pytest.raises(NoScriptError):
        await r.execute_command("EVALSHA", "0" * 40, 0)
    with pytest.raises(ResponseError):
        await r.execute_command("HGETALL")
    assert await r.execute_command("PING") == b"PONG"
    await r.aclose()


async def test_selects_the_database_of_the_url(
    redis_server: RedisServer, redis_client: aioredis.Redis
) -> None:
    r = PipelinedRedis(redis_server.url.rsplit("/", 1)[0] + "/3")
    await r.execute_command("SET", "pipe:db", "three")
    assert await redis_client.get("pipe:db") is None
    assert await r.execute_command("GET", "pipe:db") == b"three"
    await r.aclose()


async def test_fails_cleanly_while_redis_is_down_and_reconnects(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    _, server = fresh_servers
    r = PipelinedRedis(server.url, connect_timeout=0.5)
    assert await r.execute_command("PING") == b"PONG"
    server.stop()
    with pytest.raises(RedisConnectionError):
        await r.execute_command("PING")
    # Two commands queued before either is awaited: the first failure leaves no stray error.
    first, second = r.send("PING"), r.send("PING")
    with pytest.raises(RedisConnectionError):
        await first
    with pytest.raises(RedisConnectionError):
        await second
    server.start()

    async def pings() -> bool:
        try:
            return bool(await r.execute_command("PING") == b"PONG")
        except RedisConnectionError:
            return False

    await wait_for(pings, timeout=10, what="PING after the restart")
    await r.aclose()


async def test_a_server_that_stops_answering_times_out(
    redis_server: RedisServer, redis_client: aioredis.Redis
) -> None:
    r = PipelinedRedis(redis_server.url, reply_timeout=0.5)
    assert await r.execute_command("PING") == b"PONG"
    await redis_client.execute_command("CLIENT", "PAUSE", 3000, "ALL")
    try:
        with pytest.raises(RedisTimeoutError):
            await r.execute_command("PING")
    finally:
        await redis_client.execute_command("CLIENT", "UNPAUSE")
    await wait_for(lambda: _ping(r), timeout=10, what="PING after the pause")
    await r.aclose()


async def _ping(r: PipelinedRedis) -> bool:
    try:
        return bool(await r.execute_command("PING") == b"PONG")
    except (RedisConnectionError, RedisTimeoutError):
        return False
