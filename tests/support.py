"""Helpers of the tests: configuration, waiting on conditions, services run in-process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from continuity.stack import spawn_service
from shared.config import Config
from shared.runtime import App, serve


def make_config(nats_url: str, redis_url: str, **overrides: Any) -> Config:
    base = Config(
        nats_url=nats_url,
        redis_url=redis_url,
        metrics_port=0,
        metrics_host="127.0.0.1",
        nak_delay_s=0.2,
        drain_timeout_s=5.0,
    )
    from dataclasses import replace

    return replace(base, **overrides)


async def wait_for(
    predicate: Callable[[], Awaitable[bool]] | Callable[[], bool],
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll `predicate` until it holds, failing the test at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)  # poll interval of a deadline-bounded wait


class RunningApp:
    def __init__(self, app: App, config: Config) -> None:
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
async def running(app: App, config: Config) -> AsyncIterator[RunningApp]:
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
