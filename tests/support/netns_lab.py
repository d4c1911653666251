"""The partition suite's system, every process on a host (network namespace) of its own: a
3-node JetStream cluster, a Redis Cluster of 3 masters with a replica each, and the four
services (`continuity serve <name>`), all reached from the test process at the bridge."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import nats
from nats.aio.client import Client

from continuity.devstack.servers import nats_server_binary, redis_cli_binary, redis_server_binary
from shared.contract import subjects
from tests.support.netns import Host, Net, run, stop
from tests.support.runner import KEYS_ENV
from tests.support.waiting import wait_for

NODE_TIMEOUT_MS = 1500
"""Redis Cluster's node timeout: a master unreachable this long is failed over."""

SERVICES = ("session-store", "classifier", "archiver", "reconciliation")
METRICS_PORT = 9464


class Lab:
    def __init__(self, net: Net, data: Path) -> None:
        self.net = net
        self.data = data
        self.nats = [net.host(f"n{i}") for i in range(3)]
        self.redis = [net.host(f"r{i}") for i in range(6)]
        self.services = {name: net.host(name.split("-")[0][:8]) for name in SERVICES}
        self.nats_url = ",".join(f"nats://{h.ip}:4222" for h in self.nats)
        self.redis_url = f"redis://{self.redis[0].ip}:6379/0"
        self.service_env: dict[str, str] = {}

    # Servers --------------------------------------------------------------------------------

    def start_nats(self) -> None:
        routes = ", ".join(f"nats-route://{h.ip}:6222" for h in self.nats)
        for i, host in enumerate(self.nats):
            store = self.data / f"nats-{i}"
            store.mkdir(parents=True, exist_ok=True)
            conf = store / "nats.conf"
            # Short pings: a route whose packets vanish (no reset) is found dead within seconds.
            conf.write_text(
                f"server_name: n{i}\nlisten: {host.ip}:4222\nhttp: {host.ip}:8222\n"
                f"ping_interval: 1s\nping_max: 3\n"
                f"jetstream {{ store_dir: {json.dumps(str(store / 'js'))} }}\n"
                f"cluster {{ name: chaos, listen: {host.ip}:6222, routes: [{routes}] }}\n"
            )
            host.popen([nats_server_binary(), "-c", str(conf)], self.data / f"nats-{i}.log")

    def start_redis(self) -> None:
        for i, host in enumerate(self.redis):
            folder = self.data / f"redis-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            host.popen(
                [
                    redis_server_binary(), "--bind", host.ip, "--port", "6379", "--save", "",
                    "--appendonly", "no", "--dir", str(folder), "--protected-mode", "no",
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                    # A replica takes over however long it was cut off from its master.
                    "--cluster-replica-validity-factor", "0",
                ],
                self.data / f"redis-{i}.log",
            )  # fmt: skip

    async def create_redis_cluster(self) -> None:
        async def answers() -> bool:
            return all(self.cli(h, "PING", check=False).strip() == "PONG" for h in self.redis)

        await wait_for(answers, timeout=20, interval=0.2, what="every Redis node up")
        addresses = [f"{h.ip}:6379" for h in self.redis]
        run(redis_cli_binary(), "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes")
        await self.wait_redis_ok()

    async def wait_redis_ok(self, timeout: float = 60) -> None:
        """Every node says `cluster_state:ok` and every replica's link to its master is up."""

        def settled() -> bool:
            for host in self.redis:
                if "cluster_state:ok" not in self.cli(host, "CLUSTER", "INFO", check=False):
                    return False
                info = self.cli(host, "INFO", "replication", check=False)
                if "role:slave" in info and "master_link_status:up" not in info:
                    return False
            return True

        await wait_for(settled, timeout=timeout, interval=0.3, what="the Redis Cluster settled")

    def cli(self, host: Host, *args: str, check: bool = True) -> str:
        return run(redis_cli_binary(), "-h", host.ip, "-p", "6379", *args, check=check)

    def redis_host(self, ip: str) -> Host:
        return next(h for h in self.redis if h.ip == ip)

    def master_of_slot(self, slot: int) -> Host:
        """The master serving `slot`, as a master that answers sees it (`CLUSTER NODES`)."""
        for host in self.redis:
            if self.role(host) != "master":
                continue
            for line in self.cli(host, "CLUSTER", "NODES", check=False).splitlines():
                fields = line.split()
                if len(fields) < 8 or "master" not in fields[2] or "fail" in fields[2]:
                    continue
                for spec in fields[8:]:
                    start, _, end = spec.partition("-")
                    if start.isdigit() and int(start) <= slot <= int(end or start):
                        return self.redis_host(fields[1].split(":")[0])
        raise AssertionError(f"no master serves slot {slot}")

    def replicas_of(self, master: Host) -> list[Host]:
        return [
            h
            for h in self.redis
            if f"master_host:{master.ip}" in self.cli(h, "INFO", "replication", check=False)
        ]

    def role(self, host: Host) -> str:
        return self.cli(host, "ROLE", check=False).split("\n", 1)[0].strip()

    async def wait_nats_healthy(self, timeout: float = 60) -> None:
        def healthy() -> bool:
            for host in self.nats:
                try:
                    with urllib.request.urlopen(f"http://{host.ip}:8222/healthz", timeout=1) as reply:
                        if reply.status != 200:
                            return False
                except OSError:
                    return False
            return True

        await wait_for(healthy, timeout=timeout, interval=0.3, what="every NATS node healthy")

    # Services ---------------------------------------------------------------------------------

    def start_service(self, name: str, **env: str) -> None:
        host = self.services[name]
        full = {
            **os.environ,
            "NATS_URL": self.nats_url,
            "REDIS_URL": self.redis_url,
            "CONTINUITY_REDIS_CLUSTER": "on",
            "CONTINUITY_TENANCY": "open",
            "CONTINUITY_RUNNER_KEYS": KEYS_ENV,
            "CONTINUITY_STREAM_REPLICAS": "3",
            # Redeliveries go on through the longest fault the suite holds.
            "CONTINUITY_MAX_DELIVER": "200",
            "CONTINUITY_ACK_WAIT_S": "5",
            "CONTINUITY_NAK_DELAY_S": "0.3",
            "CONTINUITY_RETRY_BACKOFF_S": "0.1",
            "CONTINUITY_ARCHIVE_TIMEOUT_S": "1",
            "CONTINUITY_METRICS_HOST": host.ip,
            "CONTINUITY_METRICS_PORT": str(METRICS_PORT),
            "CONTINUITY_LOG_LEVEL": "WARNING",
            **self.service_env,
            **env,
        }
        host.popen([sys.executable, "-m", "continuity", "serve", name], self.data / f"{name}.log", full)

    def stop_service(self, name: str) -> None:
        host = self.services[name]
        for proc in [p for p in host.procs if p.poll() is None]:
            stop(proc)
            host.procs.remove(proc)

    async def wait_ready(self, names: tuple[str, ...] = SERVICES, timeout: float = 90) -> None:
        def ready() -> bool:
            for name in names:
                url = f"http://{self.services[name].ip}:{METRICS_PORT}/readyz"
                try:
                    with urllib.request.urlopen(url, timeout=1) as reply:
                        if reply.status != 200:
                            return False
                except OSError:
                    return False
            return True

        await wait_for(ready, timeout=timeout, interval=0.3, what=f"{', '.join(names)} ready")

    async def connect(self) -> Client:
        """The runners' connection: every node, reconnecting for ever."""
        return await nats.connect(
            self.nats_url.split(","),
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            ping_interval=1,
            max_outstanding_pings=3,
        )

    async def stream_leader(self, nc: Client, stream: str = subjects.EVENTS_STREAM) -> Host:
        info = await nc.jetstream().stream_info(stream)
        assert info.cluster is not None and info.cluster.leader is not None
        return self.nats[int(info.cluster.leader.removeprefix("n"))]
