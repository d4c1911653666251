"""Services under test: their configuration, in-process (`running`, given the `Service` that
`services.registry.load` makes, as for `continuity serve`) or as processes of their own
(`ServiceProcess`), and their HTTP probes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from continuity.devstack.stack import spawn_service
from shared.platform.config import Config
from shared.platform.runtime import serve
from shared.platform.service import Service
from tests.support.waiting import wait_for


def make_config(nats_url: str, redis_url: str, **overrides: Any) -> Config:
    base = Config(
        nats_url=nats_url,
        redis_url=redis_url,
        metrics_port=0,
        metrics_host="127.0.0.1",
        nak_delay_s=0.2,
        drain_timeout_s=5.0,
        # Runners of the tests are not issued; the tenancy tests enforce it on their own.
        tenancy="open",
    )
    from dataclasses import replace

    return replace(base, **overrides)


class RunningApp:
    """A service served in this process, as `continuity serve` serves it, until `stop`."""

    def __init__(self, app: Service, config: Config) -> None:
        self.app = app
        self.config = config
        self.stop_event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(serve(self.app, self.config, self.stop_event))
        await wait_for(self.app.ready, what=f"{self.app.name} ready")

    async def stop(self) -> None:
        self.stop_event.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)


@contextlib.asynccontextmanager
async def running(app: Service, config: Config) -> AsyncIterator[RunningApp]:
    r = RunningApp(app, config)
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


class ServiceProcess:
    """A service as its own process (`continuity serve <name>`), for kill -9 and drain tests."""

    def __init__(self, name: str, nats_url: str, redis_url: str, log_path: Path, **env: str) -> None:
        self.name = name
        self.env = {
            "CONTINUITY_TENANCY": "open",
            **os.environ,
            "NATS_URL": nats_url,
            "REDIS_URL": redis_url,
            "CONTINUITY_METRICS_HOST": "127.0.0.1",
            "CONTINUITY_METRICS_PORT": "0",
            **env,
        }
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = spawn_service(self.name, self.env, self.log_path)

    def kill(self) -> None:
        """SIGKILL: no drain, no acknowledgements; what the process held is redelivered."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM and wait: the exit code of a drain (0), or None if never started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


async def http_status(port: int, path: str) -> int:
    """The status code of GET `path` on 127.0.0.1:`port`, without blocking the event loop (a
    service served in-process answers on this same loop)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 5)
        return int(status_line.split()[1])
    finally:
        writer.close()


def read_until(proc: subprocess.Popen[str], marker: str, timeout_s: float = 60.0) -> str:
    """What a process printed up to and including the first line holding `marker` (all it
    printed, if it ended or the deadline passed first: the caller's assertion names it)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            break
    return "".join(lines)
