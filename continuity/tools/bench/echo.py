"""The request/reply baseline: a NATS micro service that answers each request with its payload.

Run as its own process (`python -m continuity.tools.bench.echo NATS_URL`), like a Continuity service.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import nats
from nats.micro import add_service
from nats.micro.request import Request

from shared.platform.bus.connection import server_list


async def main(url: str) -> None:
    nc = await nats.connect(servers=server_list(url))
    service = await add_service(nc, name="continuity-bench-echo", version="1.0.0", queue_group="q")

    async def echo(request: Request) -> None:
        await request.respond(request.data)

    await service.add_endpoint(name="echo", subject="continuity.bench.echo", handler=echo)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await service.stop()
    await nc.drain()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1]))
