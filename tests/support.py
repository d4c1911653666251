"""Helpers of the tests: configuration, waiting on conditions, services run in-process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from continuity.servers import NatsServer, nats_server_binary
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


class ConfiguredNatsServer(NatsServer):
    """A NATS server (JetStream) started from a configuration file, which a test can rewrite
    and have the running server reload (SIGHUP), as an operator would."""

    def __init__(self, data_dir: Path, settings: str = "") -> None:
        super().__init__(data_dir)
        self.config_path = data_dir / "nats.conf"
        self._write(settings)

    def _write(self, settings: str) -> None:
        store = self.data_dir / "jetstream"
        self.config_path.write_text(
            f'host: "127.0.0.1"\nport: {self.port}\njetstream {{ store_dir: "{store}" }}\n{settings}\n'
        )

    def command(self) -> list[str]:
        return [nats_server_binary(), "-c", str(self.config_path)]

    def reload(self, settings: str) -> None:
        assert self.proc is not None
        self._write(settings)
        self.proc.send_signal(signal.SIGHUP)


async def read_stream(js: JetStreamContext, stream: str, subject: str) -> list[Msg]:
    """Every message stored in `stream` on `subject` (wildcards allowed), through an ephemeral
    consumer of its own that leaves the stream as it was."""
    sub = await js.pull_subscribe(subject, stream=stream)
    try:
        pending = (await sub.consumer_info()).num_pending or 0
        msgs: list[Msg] = []
        while len(msgs) < pending:
            msgs.extend(await sub.fetch(pending - len(msgs), timeout=5))
        return msgs
    finally:
        await sub.unsubscribe()
