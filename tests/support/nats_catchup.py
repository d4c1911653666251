"""A minimal reproduction, with no Continuity in it, of how long a stream's old leader takes to be
current again after a partition: a 3-node JetStream cluster on hosts of its own (netns.py), one
R3 stream, publications at a steady rate over three connections (one preferring each node, each
with a `Nats-Msg-Id`, as runners publish) and a pull consumer acknowledging; the stream's leader
cut off from the other two nodes, healed, and every node's `/healthz` polled until all are
current again.

Run as root (docs/protocol.md, "NATS releases"):

    python -m tests.support.nats_catchup [--runs 3] [--hold 10] [--server BIN]

It prints, per run: the release, the seconds from the heal until every node is current (or
`>` the bound), how many entries of its own term the old leader truncated from its log
(`Truncating and repairing WAL` in its debug log) and how many catch-up rounds it retried
(`Expected first catchup entry to be a snapshot and peerstate, will retry`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from continuity.devstack.servers import nats_server_binary
from tests.support.netns import Host, Net

STREAM = "CATCHUP"
RATE = 20.0
"""Publications a second over the three connections (the partition suite's rate)."""
TRUNCATED = "Truncating and repairing WAL"
RETRIED = "Expected first catchup entry to be a snapshot and peerstate, will retry"


@dataclass
class Run:
    release: str
    current_s: float | None
    """From the heal until every node answered /healthz 200 for 5 s; None: not within the bound."""
    truncated: int
    retried: int

    def row(self, bound_s: float) -> str:
        current = f"{self.current_s:.1f}" if self.current_s is not None else f">{bound_s:.0f}"
        return f"{self.release:<10} {current:>10} {self.truncated:>10} {self.retried:>8}"


HEADER = f"{'release':<10} {'current s':>10} {'truncated':>10} {'retried':>8}"


def start_nodes(net: Net, data: Path, binary: str) -> list[Host]:
    hosts = [net.host(f"n{i}") for i in range(3)]
    routes = ", ".join(f"nats-route://{h.ip}:6222" for h in hosts)
    for i, host in enumerate(hosts):
        store = data / f"nats-{i}"
        store.mkdir(parents=True)
        conf = store / "nats.conf"
        conf.write_text(
            f"server_name: n{i}\nlisten: {host.ip}:4222\nhttp: {host.ip}:8222\ndebug: true\n"
            f"ping_interval: 1s\nping_max: 3\n"
            f"jetstream {{ store_dir: {json.dumps(str(store / 'js'))} }}\n"
            f"cluster {{ name: catchup, listen: {host.ip}:6222, routes: [{routes}] }}\n"
        )
        host.popen([binary, "-c", str(conf)], data / f"nats-{i}.log")
    return hosts


def unhealthy(hosts: list[Host]) -> list[str]:
    bad = []
    for host in hosts:
        try:
            with urllib.request.urlopen(f"http://{host.ip}:8222/healthz", timeout=1):
                pass
        except (urllib.error.URLError, OSError):
            bad.append(host.name)
    return bad


async def wait_current(hosts: list[Host], bound_s: float, steady_s: float = 5.0) -> float | None:
    """Seconds until every node answered healthy for `steady_s` in a row (a node can answer
    healthy between two catch-up rounds), or None after `bound_s`."""
    start = time.monotonic()
    healthy_since: float | None = None
    while (now := time.monotonic()) - start < bound_s:
        if unhealthy(hosts):
            healthy_since = None
        elif healthy_since is None:
            healthy_since = now
        elif now - healthy_since >= steady_s:
            return healthy_since - start
        await asyncio.sleep(0.5)  # polling the servers' health endpoints
    return None


async def connect(urls: list[str], first: int) -> Client:
    return await nats.connect(
        urls[first:] + urls[:first],
        dont_randomize=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        ping_interval=1,
        max_outstanding_pings=3,
    )


async def publish(conns: list[Client], stop: asyncio.Event) -> None:
    """At RATE, round robin over the connections, each publication on its own (a runner does
    not wait for one report's acknowledgement before the next)."""
    sent: set[asyncio.Future[Any]] = set()
    n = 0
    while not stop.is_set():
        js = conns[n % len(conns)].jetstream()
        n += 1
        headers = {"Nats-Msg-Id": str(n)}
        one = asyncio.ensure_future(js.publish(f"{STREAM.lower()}.x", b"r" * 200, timeout=2, headers=headers))
        sent.add(one)
        one.add_done_callback(sent.discard)
        one.add_done_callback(_settled)
        await asyncio.sleep(1 / RATE)
    await asyncio.gather(*sent, return_exceptions=True)


def _settled(publication: asyncio.Future[Any]) -> None:
    """A publication the cut left unacknowledged is a runner's to send again; here it is only
    load, so its failure is read and dropped."""
    if not publication.cancelled():
        publication.exception()


async def consume(nc: Client, stop: asyncio.Event) -> None:
    sub = await nc.jetstream().pull_subscribe_bind("c", STREAM)
    while not stop.is_set():
        with contextlib.suppress(Exception):  # a fetch that times out or fails during the cut
            for msg in await sub.fetch(10, timeout=1):
                await msg.ack()


async def one_run(binary: str, hold_s: float, bound_s: float) -> Run:
    data = Path(tempfile.mkdtemp(prefix="nats-catchup-"))
    net = Net(data)
    try:
        hosts = start_nodes(net, data, binary)
        urls = [f"nats://{h.ip}:4222" for h in hosts]
        assert await wait_current(hosts, 60, steady_s=0) is not None, "the cluster did not form"
        conns = [await connect(urls, i) for i in range(3)]
        js = conns[0].jetstream()
        await js.add_stream(StreamConfig(name=STREAM, subjects=[f"{STREAM.lower()}.>"], num_replicas=3))
        await js.add_consumer(STREAM, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT))
        info = await js.stream_info(STREAM)
        assert info.cluster is not None and info.cluster.leader is not None
        leader = next(h for h in hosts if h.name == info.cluster.leader)
        stop = asyncio.Event()
        load = asyncio.gather(publish(conns, stop), consume(conns[0], stop))
        await asyncio.sleep(3)  # a steady flow before the cut (deliberate)
        leader.cut([h for h in hosts if h is not leader])
        await asyncio.sleep(hold_s)  # the partition held (deliberate)
        leader.heal()
        await asyncio.sleep(3)  # the load goes on a little after the heal (deliberate)
        stop.set()
        await load
        current = await wait_current(hosts, bound_s)
        for nc in conns:
            await nc.close()
        log = (data / f"nats-{hosts.index(leader)}.log").read_text(errors="replace")
        release = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()[-1]
        return Run(release, current, log.count(TRUNCATED), log.count(RETRIED))
    finally:
        net.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the leader is cut off")
    parser.add_argument("--bound", type=float, default=240.0, help="seconds to wait for every node current")
    parser.add_argument("--server", default=None, help="a nats-server binary (default: the tests')")
    args = parser.parse_args()
    binary = args.server or nats_server_binary()
    print(HEADER, flush=True)
    for _ in range(args.runs):
        print((await one_run(binary, args.hold, args.bound)).row(args.bound), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
