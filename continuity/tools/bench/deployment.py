"""The servers and service replicas of a benchmark run, and the facts printed with its figures.

Default: one embedded NATS server and one Redis without persistence (or NATS_URL / REDIS_URL
when set), streams with one replica. `--production`: a 3-node JetStream cluster with every
stream on 3 replicas, and Redis with AOF (`appendonly yes`, `appendfsync everysec`), as
docs/operations/deploy.md runs them; NATS_URL / REDIS_URL are not used then. The cluster's
JetStream `sync_interval` is the server's default unless one is given (`--sync-interval` of
`bench pipeline`).

Replicas are `continuity serve <name>` processes (`continuity.devstack.stack.spawn_service`), added one
at a time; the load generator, the baseline process and the servers share the same cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import redis

from continuity.devstack.servers import NatsCluster, RedisServer
from continuity.devstack.stack import Stack, StackService

PRODUCTION_STREAM_REPLICAS = 3
MEANING = (
    "replicas, the load generator, the baseline process and the servers share these cores: "
    "the scaling shows what a replica adds here, not on a machine with a core per replica"
)


SYNC_DEFAULT = "default"
"""The `--sync-interval` value that leaves nats-server's own (two minutes)."""
_SYNC_VALUE = re.compile(r"always|default|(\d+(\.\d+)?(ns|us|ms|s|m|h))+")


def sync_interval_value(text: str) -> str:
    """An argparse type: `always`, `default`, or a duration in nats-server's form (`2m`, `10s`,
    `1m30s`); anything else is refused before it reaches a server's configuration."""
    if not _SYNC_VALUE.fullmatch(text):
        raise argparse.ArgumentTypeError("expected always, default or a duration such as 2m, 10s or 500ms")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", type=int, default=1, help="measure 1..N service replicas (default 1)")
    add_production_argument(p)


def add_production_argument(p: argparse.ArgumentParser) -> None:
    """`--production`: the deployment `deployment()` starts (for a bench without replicas)."""
    p.add_argument(
        "--production",
        action="store_true",
        help="embedded 3-node JetStream cluster (streams on 3 replicas) and Redis with AOF everysec; "
        "NATS_URL and REDIS_URL are not used",
    )


@dataclass
class Deployment:
    stack: Stack
    production: bool
    cluster: NatsCluster | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def stream_replicas(self) -> int:
        return PRODUCTION_STREAM_REPLICAS if self.production else 1

    def service_env(self, extra: dict[str, str]) -> dict[str, str]:
        return {"CONTINUITY_STREAM_REPLICAS": str(self.stream_replicas), **extra}

    def replicas(self, name: str) -> list[StackService]:
        return [s for s in self.stack.services if s.name == name]

    def pids(self, name: str) -> list[int]:
        return [s.proc.pid for s in self.replicas(name)]

    def scale(self, name: str, count: int, env: dict[str, str]) -> None:
        """Start replicas of `name` until there are `count`, and wait until all are ready."""
        while len(self.replicas(name)) < count:
            index = len(self.replicas(name)) + 1
            log = self.stack.data_dir / f"{name}-{index}.log"
            self.stack.start_service(name, self.service_env(env), log_path=log)
        self.stack.wait_ready()

    def replace(self, name: str, env: dict[str, str], timeout_s: float = 15.0) -> None:
        """Stop every replica of `name` (SIGTERM, then wait while it drains; killed after
        `timeout_s`, and said so) and start as many anew under `env`, waiting until they are
        ready: the same service under other settings."""
        old = self.replicas(name)
        for service in old:
            if service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
        for service in old:
            try:
                service.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()
                said = f"{name} did not stop within {timeout_s:g}s and was killed"
                print(said, file=sys.stderr, flush=True)
        stopped = {id(service) for service in old}
        self.stack.services[:] = [s for s in self.stack.services if id(s) not in stopped]
        self.scale(name, len(old), env)

    async def replace_async(self, name: str, env: dict[str, str]) -> None:
        await asyncio.to_thread(self.replace, name, env)

    def around(self) -> dict[str, list[int]]:
        """The other processes every measured round shares: the servers started here (none
        for NATS_URL / REDIS_URL given) and the load generator, this process."""
        nats_servers = self.cluster.nodes if self.cluster is not None else [self.stack.nats]
        groups = {
            "nats": [n.proc.pid for n in nats_servers if n is not None and n.proc is not None],
            "redis": [self.stack.redis.proc.pid] if self.stack.redis and self.stack.redis.proc else [],
            "load generator": [os.getpid()],
        }
        return {name: pids for name, pids in groups.items() if pids}

    async def scale_async(self, name: str, count: int, env: dict[str, str]) -> None:
        await asyncio.to_thread(self.scale, name, count, env)


def _redis_facts(url: str, production: bool) -> dict[str, Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        if production:
            client.config_set("appendfsync", "everysec")  # Redis's default, made explicit
        config = {**client.config_get("appendonly"), **client.config_get("appendfsync")}
        version = client.info("server").get("redis_version", "?")
    finally:
        client.close()
    return {
        "redis_version": str(version),
        "redis_appendonly": str(config.get("appendonly", "?")),
        "redis_appendfsync": str(config.get("appendfsync", "?")),
    }


@contextlib.contextmanager
def deployment(data_dir: Path, production: bool, sync_interval: str = SYNC_DEFAULT) -> Iterator[Deployment]:
    """The servers; `sync_interval` (`always`, a duration, or SYNC_DEFAULT) goes to the cluster's
    JetStream, with `production` only."""
    stack = Stack(data_dir=data_dir)
    d = Deployment(stack, production)
    try:
        if production:
            sync = None if sync_interval == SYNC_DEFAULT else sync_interval
            d.cluster = NatsCluster(data_dir / "nats-cluster", PRODUCTION_STREAM_REPLICAS, sync_interval=sync)
            d.cluster.start()
            stack.nats_url = d.cluster.url
            stack.redis = RedisServer(data_dir / "redis", appendonly=True)
            stack.redis.start()
            stack.redis_url = stack.redis.url
        else:
            stack.start_servers(redis_appendonly=False)
        d.facts = {
            "nats": f"{PRODUCTION_STREAM_REPLICAS}-node JetStream cluster" if production else "1 server",
            "stream_replicas": d.stream_replicas,
            "nats_sync_interval": sync_interval if production else SYNC_DEFAULT,
            **_redis_facts(stack.redis_url, production),
        }
        yield d
    finally:
        stack.stop()
        if d.cluster is not None:
            d.cluster.stop()


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count() or 0, "load_average": [round(x, 2) for x in os.getloadavg()]}


def printed(
    result: dict[str, Any], started: dict[str, Any], as_json: bool, report: Callable[[dict[str, Any]], str]
) -> int:
    """Print a benchmark's result (its JSON, or its report) with the machine's cores and its load
    average at the start and now; the command's exit code."""
    ended = machine()
    result.update(
        cores=started["cores"],
        load_average_start=started["load_average"],
        load_average_end=ended["load_average"],
    )
    print(msgspec.json.encode(result).decode() if as_json else report(result))
    return 0


def describe(result: dict[str, Any]) -> list[str]:
    """The lines that say what ran where, printed under every report."""
    f = result["servers"]
    return [
        f"  servers: NATS {result['nats_version']} {f['nats']} "
        f"(streams on {f['stream_replicas']} replica(s), "
        f"sync_interval {f.get('nats_sync_interval', SYNC_DEFAULT)}), "
        f"Redis {f['redis_version']} appendonly {f['redis_appendonly']} "
        f"appendfsync {f['redis_appendfsync']}",
        f"  machine: {result['cores']} cores, load average {result['load_average_start']} at start, "
        f"{result['load_average_end']} at end",
        f"  {MEANING}",
    ]
