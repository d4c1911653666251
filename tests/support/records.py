"""The services' Redis client beside a test's redis-py client of the same server, for tests that
call the records' code (`RunStore`, the services' stores) and inspect keys with redis-py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from shared.platform.redis import Redis


def url_of(r: aioredis.Redis) -> str:
    kw = r.connection_pool.connection_kwargs
    return f"redis://{kw.get('host', '127.0.0.1')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


@contextlib.asynccontextmanager
async def store_of(r: aioredis.Redis) -> AsyncIterator[Redis]:
    """A `Redis` of the server `r` talks to, closed at the end."""
    client = Redis(url_of(r))
    try:
        yield client
    finally:
        await client.aclose()
