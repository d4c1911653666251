"""A NATS connection that reconnects forever with backoff, and logs its state changes.

nats-py gives a connection up for good (closes it) when the server sends it a protocol error,
such as a maximum-payload or an authorization violation; no reconnection follows. `on_closed`
is how its owner learns of that: a service stops with a failure and is restarted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client

from shared.logs import Log

log = Log("continuity.bus")


def server_list(url: str) -> list[str]:
    """The servers of a NATS_URL: one URL, or several separated by commas (a cluster)."""
    return [u.strip() for u in url.split(",") if u.strip()]


async def connect(
    url: str,
    name: str,
    *,
    connect_timeout: float = 5.0,
    on_closed: Callable[[], Awaitable[None]] | None = None,
    **options: Any,
) -> Client:
    """`options` go to `nats.connect` as they are (credentials, TLS, ...)."""

    async def disconnected() -> None:
        log.warning("nats_disconnected")

    async def reconnected() -> None:
        log.info("nats_reconnected")

    async def error(exc: Exception) -> None:
        log.warning("nats_error", error_type=type(exc).__name__)

    async def closed() -> None:
        log.info("nats_closed")
        if on_closed is not None:
            await on_closed()

    return await nats.connect(
        servers=server_list(url),
        name=name,
        connect_timeout=connect_timeout,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        allow_reconnect=True,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        error_cb=error,
        closed_cb=closed,
        # Publishes made while disconnected wait in this buffer and go out on reconnect.
        pending_size=64 * 1024 * 1024,
        **options,
    )
