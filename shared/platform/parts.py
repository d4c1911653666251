"""The parts a service is made of, and the generic ones.

A running service (shared/platform/service.py) is a list of parts, each started in order and
drained in the same order: its endpoints, each of its consumers, then what its spec's `build`
adds (the outbox sweeper, background tasks, a connection of its own to close, a web server).
A part only has to `start`, `drain` within a timeout, and say whether it is `ready`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from shared.platform.logs import Log

log = Log("continuity.service")

Background = Callable[[asyncio.Event], Coroutine[Any, Any, None]]
"""A loop that runs until the event is set (at the drain)."""


class Part(Protocol):
    """One piece of a running service."""

    async def start(self) -> None: ...

    async def drain(self, timeout: float) -> None:
        """Stop taking work and finish what is in hand, within `timeout` seconds."""
        ...

    def ready(self) -> bool: ...


class Task:
    """A background loop as a part: started with the service, told to stop at the drain, and
    cancelled if it has not stopped within the drain's timeout."""

    def __init__(self, run: Background, name: str | None = None) -> None:
        self._run = run
        self._name = name
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(self._stop), name=self._name)

    async def drain(self, timeout: float) -> None:
        self._stop.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        except Exception as exc:  # the loop ended on an error: nothing is left to stop
            log.warning("background_failed", task=self._name, error_type=type(exc).__name__)

    def ready(self) -> bool:
        # A loop answers for its own failures: it never holds readiness back.
        return self._task is not None


class Closer:
    """A connection of the service's own, closed at the drain (placed last, after everything
    that used it)."""

    def __init__(self, close: Callable[[], Awaitable[None]]) -> None:
        self._close = close

    async def start(self) -> None:
        return None

    async def drain(self, timeout: float) -> None:
        await self._close()

    def ready(self) -> bool:
        return True
