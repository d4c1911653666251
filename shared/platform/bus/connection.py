"""A NATS connection that reconnects forever with backoff, and logs its state changes.

nats-py gives a connection up for good (closes it) when the server sends it a protocol error,
such as a maximum-payload or an authorization violation; no reconnection follows. `on_closed`
is how its owner learns of that: a service stops with a failure and is restarted.

Before the first connection succeeds, nats-py tries the servers again and again inside
`connect` and does not return: a `stop` event ends that wait (a SIGTERM while the server
refuses the credentials), and a refusal of the credentials is logged once, as what it is,
instead of one line per try.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

from shared.platform.environment import server_list
from shared.platform.logs import Log

__all__ = ["Login", "Stopped", "connect", "is_authorization_error", "server_list"]

log = Log("continuity.bus")


class Stopped(Exception):
    """`stop` was set before the first connection succeeded."""


@dataclass
class Login:
    """What the servers said of this client's credentials while it connected."""

    refused: bool = False
    """The last attempt was refused: an authorization violation (wrong user or password,
    unknown NKEY), not an unreachable server."""


def is_authorization_error(exc: BaseException) -> bool:
    """Whether a nats-py error is the server refusing the credentials."""
    return "authorization violation" in str(exc).lower() or type(exc).__name__ == "AuthorizationError"


def redacted(url: str) -> str:
    """A server URL without its user information, for logs."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url.rpartition("@")[2]


async def connect(
    url: str,
    name: str,
    *,
    connect_timeout: float = 5.0,
    on_closed: Callable[[], Awaitable[None]] | None = None,
    tls: ssl.SSLContext | None = None,
    stop: asyncio.Event | None = None,
    login: Login | None = None,
    **options: Any,
) -> Client:
    """`options` go to nats-py's `connect` as they are (credentials, `inbox_prefix`, ...). `tls`
    (from `shared.platform.tls`; always given with `tls://` URLs) turns on TLS, started before any
    NATS protocol byte: nats-py upgrades a plain connection only when the server's plaintext
    INFO asks for it, so an on-path attacker could strip that and read the credentials. The
    servers need `handshake_first` in their `tls` block (NATS 2.10.4 or later).

    With `stop`, raises `Stopped` (the client closed) when it is set before the first
    connection succeeds. `login` is kept up to date with the servers' answer to the
    credentials."""
    login = login if login is not None else Login()
    events = _Events(url, login, on_closed)
    settings: dict[str, Any] = {
        "servers": server_list(url),
        "name": name,
        "connect_timeout": connect_timeout,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
        "disconnected_cb": events.disconnected,
        "reconnected_cb": events.reconnected,
        "error_cb": events.error,
        "closed_cb": events.closed,
        # Publishes made while disconnected wait in this buffer and go out on reconnect.
        "pending_size": 64 * 1024 * 1024,
        "tls": tls,
        "tls_handshake_first": tls is not None,
    }
    nc = Client()
    await _connected(nc, nc.connect(**settings, **options), stop)
    events.connected()
    return nc


class _Events:
    """nats-py's callbacks of one connection: each kind of error is logged once until the next
    successful connection, and `login` follows the servers' answer to the credentials."""

    def __init__(self, url: str, login: Login, on_closed: Callable[[], Awaitable[None]] | None) -> None:
        self._url = url
        self._login = login
        self._on_closed = on_closed
        self._seen: set[str] = set()
        """The kinds of error logged since the last successful connection: one line each."""

    def connected(self) -> None:
        """A connection succeeded: each kind of error is news again."""
        self._seen.clear()
        self._login.refused = False

    async def disconnected(self) -> None:
        log.warning("nats_disconnected")

    async def reconnected(self) -> None:
        self.connected()
        log.info("nats_reconnected")

    async def error(self, exc: Exception) -> None:
        seen, login = self._seen, self._login
        if is_authorization_error(exc):
            login.refused = True
            if "authorization" not in seen:
                seen.add("authorization")
                log.error(
                    "nats_authorization_violation",
                    server=", ".join(redacted(u) for u in server_list(self._url)),
                    detail="the NATS server refused this process's credentials (the user and "
                    "password of NATS_URL and CONTINUITY_NATS_PASSWORD_FILE, or "
                    "CONTINUITY_NATS_NKEY_SEED_FILE or _CREDS_FILE); trying again",
                )
            return
        if login.refused and isinstance(exc, OSError):
            return  # the server closing the refused connection: the refusal was the news
        kind = type(exc).__name__
        if kind not in seen:
            seen.add(kind)
            log.warning("nats_error", error_type=kind)

    async def closed(self) -> None:
        log.info("nats_closed")
        if self._on_closed is not None:
            await self._on_closed()


async def _connected(nc: Client, connecting: Awaitable[None], stop: asyncio.Event | None) -> None:
    """Await the first connection; with `stop`, raise `Stopped` (the client closed) when it is
    set first."""
    attempt = asyncio.ensure_future(connecting)
    if stop is None:
        await attempt
        return
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((attempt, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not attempt.done():
        attempt.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await attempt
        with contextlib.suppress(Exception):
            await nc.close()
        raise Stopped
    attempt.result()
