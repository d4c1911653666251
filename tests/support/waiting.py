"""Waiting on a condition with a deadline: the tests' one way to synchronise with services."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def wait_for(
    predicate: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll `predicate` until it holds, failing the test at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)  # poll interval of a deadline-bounded wait
