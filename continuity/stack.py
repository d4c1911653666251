"""A local Continuity stack: NATS and Redis (the ones given by NATS_URL / REDIS_URL, or
embedded servers on free ports), and service processes. `continuity up`, the benchmarks and
the end-to-end tests all start their stack through here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from continuity.servers import NatsServer, RedisServer, free_port


class StartError(Exception):
    """The stack cannot start: one line for the terminal, and the exit code to leave with."""

    def __init__(self, message: str, exit_code: int = 4) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class StackService:
    """A service process `continuity up` started: its metrics port and its log."""

    name: str
    metrics_port: int
    proc: subprocess.Popen[bytes]
    log_path: Path | None = None

    @property
    def last_line(self) -> str:
        """The last line of its log, where a service that stops at start says why."""
        if self.log_path is None:
            return ""
        with contextlib.suppress(OSError):
            lines = self.log_path.read_bytes()[-4096:].decode("utf-8", "replace").splitlines()
            return next((line.strip() for line in reversed(lines) if line.strip()), "")
        return ""

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def spawn_service(name: str, env: dict[str, str], log_path: Path | None = None) -> subprocess.Popen[bytes]:
    """`continuity serve <name>` as its own process, as production runs it; its JSON log goes to
    `log_path` (appended), or to this process's stderr."""
    command = [sys.executable, "-m", "continuity", "serve", name]
    if log_path is None:
        return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


@dataclass
class Stack:
    data_dir: Path
    nats_url: str = ""
    redis_url: str = ""
    nats: NatsServer | None = None
    redis: RedisServer | None = None
    services: list[StackService] = field(default_factory=list)
    ready_services: set[str] = field(default_factory=set)

    def start_servers(self, *, redis_appendonly: bool = True) -> None:
        """Use NATS_URL / REDIS_URL when set; otherwise start embedded servers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.nats_url = os.environ.get("NATS_URL", "")
        self.redis_url = os.environ.get("REDIS_URL", "")
        if not self.nats_url:
            self.nats = NatsServer(self.data_dir / "nats")
            self.nats.start()
            self.nats_url = self.nats.url
        if not self.redis_url:
            self.redis = RedisServer(self.data_dir / "redis", appendonly=redis_appendonly)
            self.redis.start()
            self.redis_url = self.redis.url

    def check_servers(self, timeout_s: float = 3.0) -> None:
        """Connect to NATS and Redis once each, within `timeout_s`: the services would retry
        an unreachable server for ever, so `up` says which one at once (StartError)."""
        asyncio.run(_check_servers(self.nats_url, self.redis_url, timeout_s))

    def service_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"NATS_URL": self.nats_url, "REDIS_URL": self.redis_url})
        env.update(extra or {})
        return env

    def start_service(
        self, name: str, extra_env: dict[str, str] | None = None, log_path: Path | None = None
    ) -> StackService:
        port = free_port()
        env = self.service_env({"CONTINUITY_METRICS_PORT": str(port), **(extra_env or {})})
        service = StackService(name, port, spawn_service(name, env, log_path), log_path)
        self.services.append(service)
        return service

    def wait_ready(self, timeout_s: float = 30.0, stop: threading.Event | None = None) -> bool:
        """True once every service is ready; False if `stop` was set first. A service that
        exits meanwhile raises RuntimeError with the last line it wrote (its own message)."""
        deadline = time.monotonic() + timeout_s
        for service in self.services:
            while not service.ready():
                if stop is not None and stop.is_set():
                    return False
                if service.proc.poll() is not None:
                    said = f": {service.last_line}" if service.last_line else ""
                    raise RuntimeError(f"{service.name} exited with code {service.proc.returncode}{said}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{service.name} was not ready within {timeout_s}s")
                time.sleep(0.05)  # polling readiness with a deadline
            self.ready_services.add(service.name)
        return True

    def stop(self, timeout_s: float = 15.0, starting_timeout_s: float = 2.0) -> None:
        """SIGTERM every service; a ready one may drain for `timeout_s`, one still starting
        (it holds no work yet, and may be stuck connecting) for `starting_timeout_s`."""
        for service in self.services:
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic()
        for service in self.services:
            wait = timeout_s if service.name in self.ready_services else starting_timeout_s
            try:
                service.proc.wait(max(deadline + wait - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()
        self.services.clear()
        self.ready_services.clear()
        for server in (self.nats, self.redis):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()


async def _check_servers(nats_url: str, redis_url: str, timeout_s: float) -> None:
    import redis.asyncio as aioredis

    from continuity.clitools import connect, is_authentication_failure, redacted_url

    origin = "NATS_URL" if os.environ.get("NATS_URL") else "embedded"
    try:
        nc = await connect(nats_url, timeout_s)
    except Exception as err:
        why = "refused the credentials" if is_authentication_failure(err) else "is not reachable"
        raise StartError(
            f"NATS at {redacted_url(nats_url)} ({origin}) {why} ({type(err).__name__})"
        ) from None
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), 2)
    origin = "REDIS_URL" if os.environ.get("REDIS_URL") else "embedded"
    try:
        client = aioredis.Redis.from_url(
            redis_url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
        )
    except ValueError:
        raise StartError(f"REDIS_URL is not a Redis URL ({redacted_url(redis_url)})", 2) from None
    try:
        await asyncio.wait_for(client.ping(), timeout_s + 1)
    except Exception as err:
        raise StartError(
            f"Redis at {redacted_url(redis_url)} ({origin}) is not reachable ({type(err).__name__})"
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()
