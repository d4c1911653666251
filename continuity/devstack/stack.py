"""A local Continuity stack: NATS and Redis (the ones given by NATS_URL / REDIS_URL, or
embedded servers on free ports), and service processes. `continuity up`, the benchmarks and
the end-to-end tests all start their stack through here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continuity.devstack.servers import NatsServer, RedisServer, free_port

LOADING_TIMEOUT_S = 120.0
"""How long `up` waits for a Redis that is loading its data (LOADING) before giving up."""
LOADING_REPORT_S = 10.0
"""How often it says it still waits."""


def _no_word(_: str) -> None:
    return None


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

    def start_servers(self, *, redis_appendonly: bool = True, secured: bool = False) -> None:
        """Use NATS_URL / REDIS_URL when set; otherwise start embedded servers. `secured`
        (`continuity up`): each with a password made now, which only the URLs carry (so the
        env file only its owner reads), for a host other users share."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.nats_url = os.environ.get("NATS_URL", "")
        self.redis_url = os.environ.get("REDIS_URL", "")
        if not self.nats_url:
            credentials = ("continuity", secrets.token_hex(24)) if secured else None
            self.nats = NatsServer(self.data_dir / "nats", credentials=credentials)
            self.nats.start()
            self.nats_url = self.nats.url
        if not self.redis_url:
            password = secrets.token_hex(24) if secured else None
            self.redis = RedisServer(self.data_dir / "redis", appendonly=redis_appendonly, password=password)
            self.redis.start()
            self.redis_url = self.redis.url

    def check_servers(
        self,
        timeout_s: float = 3.0,
        loading_timeout_s: float = LOADING_TIMEOUT_S,
        say: Callable[[str], None] = _no_word,
    ) -> None:
        """Connect to NATS and Redis once each, within `timeout_s`: the services would retry
        an unreachable server for ever, so `up` says which one at once (StartError). A Redis
        still loading its data (just restarted) is waited for, up to `loading_timeout_s`, and
        `say` is told so."""
        asyncio.run(_check_servers(self.nats_url, self.redis_url, timeout_s, loading_timeout_s, say))

    def service_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        # A local stack has one NATS user for everything (or none), so no runner is issued an
        # account: tenancy is open (docs/contract-v1.md, 10.2) unless the environment says
        # otherwise. Metrics on the loopback only, where `up` says they are.
        env = {"CONTINUITY_TENANCY": "open", **os.environ}
        env.update({"NATS_URL": self.nats_url, "REDIS_URL": self.redis_url})
        env["CONTINUITY_METRICS_HOST"] = "127.0.0.1"
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
                print(
                    f"{service.name} did not stop within {wait:g}s and was killed",
                    file=sys.stderr,
                    flush=True,
                )
        self.services.clear()
        self.ready_services.clear()
        # Both servers are told at once and waited for together: their stops overlap.
        servers = [server for server in (self.nats, self.redis) if server is not None]
        for server in servers:
            with contextlib.suppress(Exception):
                server.terminate()
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop()


async def _check_servers(
    nats_url: str, redis_url: str, timeout_s: float, loading_timeout_s: float, say: Callable[[str], None]
) -> None:
    import redis.asyncio as aioredis

    from continuity.cli.connect import connect, redacted_url
    from continuity.cli.refusals import is_authentication_failure

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
        await _wait_loaded(
            client, f"Redis at {redacted_url(redis_url)} ({origin})", timeout_s, loading_timeout_s, say
        )
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


async def _wait_loaded(
    client: Any, name: str, timeout_s: float, loading_timeout_s: float, say: Callable[[str], None]
) -> None:
    """One PING, repeated while the server answers LOADING (it reads its data from disk after
    a restart, which takes a while for a large data set), up to `loading_timeout_s`."""
    from redis.exceptions import BusyLoadingError

    started = time.monotonic()
    told = 0.0
    while True:
        try:
            await asyncio.wait_for(client.ping(), timeout_s + 1)
            if told:
                say(f"{name} has loaded its data")
            return
        except BusyLoadingError:
            waited = time.monotonic() - started
            if waited > loading_timeout_s:
                raise StartError(f"{name} was still loading its data after {loading_timeout_s:g}s") from None
            if not told or time.monotonic() - told >= LOADING_REPORT_S:
                said = "is loading its data" if not told else "is still loading its data"
                say(f"{name} {said}{await _loaded(client)}; waiting up to {loading_timeout_s:g}s ...")
                told = time.monotonic()
        except Exception as err:
            raise StartError(f"{name} is not reachable ({type(err).__name__})") from None
        await asyncio.sleep(0.1)  # polling the server's loading, with a deadline


async def _loaded(client: Any) -> str:
    """` (37%)`: how much of its data a loading Redis has read, when it says."""
    try:
        info = await client.info("persistence")
        return f" ({float(info['loading_loaded_perc']):.0f}%)"
    except Exception:  # the figure is a courtesy; the wait goes on without it
        return ""
