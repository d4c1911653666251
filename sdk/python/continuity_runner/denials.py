"""Permission violations reported by the NATS server, matched to what is waiting on them.

A publication the server's authorization refuses gets no reply at all, only an asynchronous
`-ERR 'Permissions Violation for Publish to "<subject>"'`. Waiting for a reply would last
until the timeout; `Denials.guard` ends the wait as soon as that notice arrives.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from typing import Any, TypeVar

from continuity_runner.errors import PermissionDenied

T = TypeVar("T")

# nats-py passes the server's text on, lowercased.
_PUBLISH_DENIED = re.compile(r"permissions violation for publish to \"?([^\"\s']+)", re.IGNORECASE)


class Denials:
    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    def report(self, text: str) -> None:
        """Called with the text of every error the connection reports."""
        match = _PUBLISH_DENIED.search(text)
        if match is None:
            return
        for future in self._waiting.get(match.group(1).lower(), set()):
            if not future.done():
                future.set_result(None)

    async def guard(self, subject: str, work: Awaitable[T]) -> T:
        """The result of `work`, which publishes to `subject`; `PermissionDenied` as soon as the
        server refuses that publication."""
        key = subject.lower()
        denied: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, set()).add(denied)
        task = asyncio.ensure_future(work)
        pending: list[asyncio.Future[Any]] = [task, denied]
        try:
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            task.cancel()
            raise PermissionDenied(f"not permitted to publish to {subject}")
        finally:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.discard(denied)
                if not waiting:
                    del self._waiting[key]
            if not task.done():
                task.cancel()
