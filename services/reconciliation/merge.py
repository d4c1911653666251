"""Merging sorted sets: the reconciliation listing is spread over buckets (one slot each on
Redis Cluster), and a list reads them as one, in (score, member) order."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator

from shared.platform.redis import Redis


class _Source:
    """One sorted set of a merge: a buffer of its next entries after the cursor."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.offset = 0
        self.rows: list[tuple[float, bytes]] = []
        self.done = False


async def merge_indexes(
    client: Redis, index_keys: list[str], after: tuple[float, bytes] | None, chunk: int
) -> AsyncIterator[tuple[float, bytes]]:
    """The entries of every sorted set in `index_keys` after `after`, in one (score, member)
    order (a sorted set's own order), reading each set `chunk` entries at a time."""
    low: float | str = after[0] if after is not None else "-inf"

    async def fill(source: _Source) -> None:
        while not source.rows and not source.done:
            rows = await client.zrangebyscore_scored(source.key, low, "+inf", source.offset, chunk)
            source.offset += len(rows)
            source.done = len(rows) < chunk
            source.rows = [(score, m) for m, score in rows if after is None or (score, m) > after]
            source.rows.reverse()  # popped from the end

    sources = [_Source(key) for key in index_keys]
    await asyncio.gather(*(fill(source) for source in sources))
    heap = [(source.rows[-1], i) for i, source in enumerate(sources) if source.rows]
    heapq.heapify(heap)
    while heap:
        row, i = heapq.heappop(heap)
        yield row
        source = sources[i]
        source.rows.pop()
        await fill(source)
        if source.rows:
            heapq.heappush(heap, (source.rows[-1], i))


async def take(rows: AsyncIterator[tuple[float, bytes]], n: int) -> AsyncIterator[tuple[float, bytes]]:
    """At most `n` more entries of `rows`."""
    for _ in range(n):
        try:
            yield await anext(rows)
        except StopAsyncIteration:
            return
