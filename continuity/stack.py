"""A local Continuity stack: NATS and Redis (the ones given by NATS_URL / REDIS_URL, or
embedded servers on free ports), and service processes. `continuity up`, the benchmarks and
the end-to-end tests all start their stack through here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from continuity.servers import NatsServer, RedisServer, free_port


@dataclass
class ServiceProcess:
    name: str
    metrics_port: int
    proc: subprocess.Popen[bytes]

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
    services: list[ServiceProcess] = field(default_factory=list)

    def start_servers(self, *, redis_appendonly: bool = True) -> None:
        """Use NATS_URL / REDIS_URL when set; otherwise start embedded servers."""
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

    def service_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"NATS_URL": self.nats_url, "REDIS_URL": self.redis_url})
        env.update(extra or {})
        return env

    def start_service(
        self, name: str, extra_env: dict[str, str] | None = None, log_path: Path | None = None
    ) -> ServiceProcess:
        port = free_port()
        env = self.service_env({"CONTINUITY_METRICS_PORT": str(port), **(extra_env or {})})
        service = ServiceProcess(name, port, spawn_service(name, env, log_path))
        self.services.append(service)
        return service

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        for service in self.services:
            while not service.ready():
                if service.proc.poll() is not None:
                    raise RuntimeError(f"{service.name} exited with code {service.proc.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{service.name} was not ready within {timeout_s}s")
                time.sleep(0.05)  # polling readiness with a deadline

    def stop(self, timeout_s: float = 15.0) -> None:
        for service in self.services:
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
        for service in self.services:
            try:
                service.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()
        self.services.clear()
        for server in (self.nats, self.redis):
            if server is not None:
                with contextlib.suppress(Exception):
                    server.stop()
