"""A NATS connection that reconnects forever with backoff, and logs its state changes.

nats-py gives a connection up for good (closes it) when the server sends it a protocol error,
such as a maximum-payload or an authorization violation; no reconnection follows. `on_closed`
is how its owner learns of that: a service stops with a failure and is restarted.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client

from shared.platform.config import server_list
from shared.platform.logs import Log

__all__ = ["connect", "server_list"]

log = Log("continuity.bus")


async def connect(
    url: str,
    name: str,
    *,
    connect_timeout: float = 5.0,
    on_closed: Callable[[], Awaitable[None]] | None = None,
    tls: ssl.SSLContext | None = None,
    **options: Any,
) -> Client:
    """`options` go to `nats.connect` as they are (credentials, ...). `tls` (from `shared.platform.tls`;
    always given with `tls://` URLs) turns on TLS, started before any NATS protocol byte:
    nats-py upgrades a plain connection only when the server's plaintext INFO asks for it, so
    an on-path attacker could strip that and read the credentials. The servers need
    `handshake_first` in their `tls` block (NATS 2.10.4 or later)."""

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
        tls=tls,
        tls_handshake_first=tls is not None,
        **options,
    )
