"""Connections to a nats-server that runs the shipped authorization, as one of its users (a
service's, `operator`, `console`) or as an issued runner, each with the errors the server sent
it, so that a test can count the permission violations it caused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client


class Conn:
    """A client and the errors the server sent it."""

    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    async def violations(self) -> list[str]:
        """The permission violations so far. The server answers in order: a violation's -ERR
        comes before the PONG of the first flush; the second round trip lets the client's error
        callback run first."""
        await self.nc.flush()
        await self.nc.flush()
        return [e for e in self.errors if "permissions violation" in e.lower()]


Opener = Callable[..., Awaitable[Conn]]
"""`open(url, inbox_prefix=..., nkeys_seed=...)`: a connection that is closed with the block."""


@asynccontextmanager
async def connections() -> AsyncIterator[Opener]:
    """Opens connections that never reconnect, and closes every one of them at the end."""
    opened: list[Client] = []

    async def open_(url: str, *, inbox_prefix: str, nkeys_seed: Path | None = None) -> Conn:
        errors: list[str] = []

        async def on_error(err: Exception) -> None:
            errors.append(str(err))

        options: dict[str, Any] = {"inbox_prefix": inbox_prefix}
        if nkeys_seed is not None:
            options["nkeys_seed"] = str(nkeys_seed)
        nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False, connect_timeout=5, **options)
        opened.append(nc)
        return Conn(nc, errors)

    try:
        yield open_
    finally:
        for nc in opened:
            await nc.close()
