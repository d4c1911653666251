"""A NATS connection that reconnects forever with backoff, and logs its state changes."""

from __future__ import annotations

import nats
from nats.aio.client import Client

from shared.logs import Log

log = Log("continuity.bus")


async def connect(
    url: str, name: str, *, connect_timeout: float = 5.0, nkeys_seed: str | None = None
) -> Client:
    async def disconnected() -> None:
        log.warning("nats_disconnected")

    async def reconnected() -> None:
        log.info("nats_reconnected")

    async def error(exc: Exception) -> None:
        log.warning("nats_error", error_type=type(exc).__name__)

    return await nats.connect(
        servers=[u.strip() for u in url.split(",") if u.strip()],
        name=name,
        connect_timeout=connect_timeout,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        allow_reconnect=True,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        error_cb=error,
        # Publishes made while disconnected wait in this buffer and go out on reconnect.
        pending_size=64 * 1024 * 1024,
        # An NKEY seed file authenticates this connection (user and password come in the URL).
        nkeys_seed=nkeys_seed,
    )
