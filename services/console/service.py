"""The console as a Continuity process: `shared.platform.runtime.serve` gives it NATS (and the
shared `/metrics`, `/healthz`, `/readyz`); its one part (`WebConsole`) serves its pages on a port
of its own and holds no state besides the signed cookies its browsers carry, and, with the
development login, the ids of signed-out sessions in a JetStream key-value bucket every replica
reads."""

from __future__ import annotations

import contextlib
from typing import Any

from aiohttp import web

from services.console.config import ConsoleConfig, variables
from services.console.revocations import Revocations
from services.console.streams import DecisionFeed
from services.console.web import Console
from shared.contract.client import ContinuityClient
from shared.platform.logs import Log
from shared.platform.runtime import Context
from shared.platform.service import ServiceSpec, Wiring

log = Log("continuity.console")

NAME = "console"
VARIABLES = variables()
"""The console's own settings, beside the shared `Config`'s (services/registry.py)."""


SPEC = ServiceSpec(
    name=NAME,
    version="1.0.0",
    description="The operators' web console",
    # A web server for people, not a service of the contract: nothing to announce with micro.
    registers=False,
    # It reads and acts through the services over NATS: no Redis, no REDIS_URL.
    stores=False,
)


def prepare(config: ConsoleConfig | None = None) -> dict[str, Any]:
    """The options of `build`, read when the service is loaded: a bad variable stops
    `continuity serve console` before it connects."""
    return {"config": (config or ConsoleConfig.from_env()).with_key()}


def build(ctx: Context, *, config: ConsoleConfig) -> Wiring:
    return Wiring(handlers={}, parts=(WebConsole(ctx, config),))


class WebConsole:
    """The console's pages on a port of its own, and the live feed of decisions they show."""

    def __init__(self, ctx: Context, config: ConsoleConfig) -> None:
        self._ctx = ctx
        self.config = config
        self._runner: web.AppRunner | None = None
        self._feed: DecisionFeed | None = None
        self.port = 0
        """The port it listens on: the configured one, or the one the system chose for 0."""

    async def start(self) -> None:
        ctx = self._ctx
        js: Any = ctx.js
        self._feed = DecisionFeed(js)
        await self._feed.start()
        client = ContinuityClient(ctx.nc, timeout=self.config.request_timeout_s)
        revocations = None
        if self.config.dev_token:  # only the development login signs sessions in
            revocations = await Revocations.open(js, self.config.session_ttl_s, ctx.config.stream_replicas)
        console = Console(self.config, client, js, self._feed, revocations)
        runner = web.AppRunner(console.app(), access_log=None, shutdown_timeout=5)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port)
        await site.start()
        addresses = runner.addresses
        self.port = int(addresses[0][1]) if addresses else self.config.port
        self._runner = runner  # last: ready only once the port is known
        log.info("console_listening", port=self.port)

    def ready(self) -> bool:
        return self._runner is not None and self._feed is not None and self._feed.ready

    async def drain(self, timeout: float) -> None:
        if self._feed is not None:
            await self._feed.stop()  # ends the live streams, so the server can close
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()
            self._runner = None
