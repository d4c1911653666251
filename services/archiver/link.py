"""The connection the remote moves go out on.

In the config-file layout it is the service's own connection. In the decentralized layout
(`CONTINUITY_NATS_ARCHIVE_CREDS_FILE`) it is a second connection, as the one user of the
`ARCHIVE` account, which imports each runner's archive subject: issuing or revoking a runner
changes that account's JWT, and a server rebuilding an account drops the replies in flight
through the account's own exports. `ARCHIVE` exports nothing, so a move in flight keeps its
answer whatever runner is issued meanwhile (continuity.natsauth.layout).
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.client import Client

from shared.platform import tls
from shared.platform.bus.connection import connect
from shared.platform.config import Config
from shared.platform.logs import Log

log = Log("continuity.archiver")

NAME = "continuity-archiver-remote"


class ArchiveLink:
    """A part of the archiver: ready once the connection for remote moves is open."""

    def __init__(self, main: Client, config: Config) -> None:
        self._main = main
        self._config = config
        self._own: Client | None = None
        self._open = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._config.nats_archive_creds_file is None:
            self._open.set()
            return
        self._task = asyncio.create_task(self._connect(), name="archive-link")

    async def _connect(self) -> None:
        delay = 0.5
        while True:
            try:
                self._own = await connect(
                    self._config.nats_url,
                    NAME,
                    user_credentials=self._config.nats_archive_creds_file,
                    inbox_prefix=self._config.inbox_prefix("archiver"),
                    tls=tls.nats_context(self._config),
                )
            except Exception as exc:  # tried again; readiness says the archiver cannot move yet
                log.warning("archive_link_failed", error_type=type(exc).__name__, retry_in_s=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self._open.set()
            return

    async def client(self) -> Client:
        """The connection to send a remote move on, once it is open."""
        await self._open.wait()
        return self._own or self._main

    async def drain(self, timeout: float) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._own is not None and not self._own.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._own.drain(), timeout)

    def ready(self) -> bool:
        return self._open.is_set()
