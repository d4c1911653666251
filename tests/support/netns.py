"""Hosts of their own for the partition suite: a network namespace per host, each joined to a
bridge in the root namespace by a veth pair, and the faults applied to one host's link
(iptables in the host's namespace: a cut, one direction dropped, loss and delay).

Names carry a tag unique to the run, so a leftover of a killed run never collides with the
next; `Net.close` removes every namespace, link and process it made, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, check: bool = True) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class Host:
    """One namespace with one address on the bridge."""

    def __init__(self, net: Net, name: str, index: int) -> None:
        self.net = net
        self.name = name
        self.ns = f"ct{net.tag}-{name}"
        self.ip = f"{net.prefix}.{index}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self._delayer: subprocess.Popen[bytes] | None = None
        outside, inside = f"ct{net.tag}v{index}", f"ct{net.tag}i{index}"
        run("ip", "netns", "add", self.ns)
        net.namespaces.append(self.ns)
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        net.links.append(outside)
        run("ip", "link", "set", inside, "netns", self.ns)
        run("ip", "link", "set", outside, "master", net.bridge)
        run("ip", "link", "set", outside, "up")
        self.exec("ip", "link", "set", "lo", "up")
        self.exec("ip", "link", "set", inside, "name", "eth0")
        self.exec("ip", "addr", "add", f"{self.ip}/24", "dev", "eth0")
        self.exec("ip", "link", "set", "eth0", "up")

    def exec(self, *args: str, check: bool = True) -> str:
        return run("ip", "netns", "exec", self.ns, *args, check=check)

    def popen(
        self, args: Sequence[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """A process in this namespace, its output appended to `log`; stopped by `Net.close`."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                cwd=ROOT,
            )
        self.procs.append(proc)
        return proc

    # Faults: rules in this host's own namespace, so the far ends see nothing but the link.

    def cut(self, peers: Sequence[Host]) -> None:
        """No packet between this host and `peers`, either way."""
        for peer in peers:
            self.exec("iptables", "-A", "INPUT", "-s", peer.ip, "-j", "DROP")
            self.exec("iptables", "-A", "OUTPUT", "-d", peer.ip, "-j", "DROP")

    def drop_outgoing(self, peers: Sequence[Host]) -> None:
        """One direction only: this host's packets to `peers` are lost, theirs still arrive."""
        for peer in peers:
            self.exec("iptables", "-A", "OUTPUT", "-d", peer.ip, "-j", "DROP")

    def degrade(self, loss: float, delay_ms: int, queue: int = 7) -> None:
        """`loss` of the packets leaving this host's link dropped, the rest delayed `delay_ms`
        (what `tc qdisc add dev eth0 root netem loss 30% delay 200ms` does, see netns_delay)."""
        log = self.net.logs / f"delay-{self.name}.log"
        command = [sys.executable, "-m", "tests.support.netns_delay", str(queue), str(loss), str(delay_ms)]
        self._delayer = self.popen(command, log)
        deadline = time.monotonic() + 10
        while b"ready" not in log.read_bytes():
            if time.monotonic() > deadline or self._delayer.poll() is not None:
                raise RuntimeError(f"the delayer of {self.name} did not start: {log.read_text()}")
            time.sleep(0.05)  # polling the delayer's log with a deadline
        self.exec("iptables", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", str(queue))

    def heal(self) -> None:
        """Every rule removed, the delayer stopped: the link as it was."""
        self.exec("iptables", "-F", "INPUT")
        self.exec("iptables", "-F", "OUTPUT")
        if self._delayer is not None:
            stop(self._delayer)
            self.procs.remove(self._delayer)
            self._delayer = None


class Net:
    """A bridge in the root namespace (the test process's host, at `.1`) and the hosts on it."""

    def __init__(self, logs: Path) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the partition suite makes network namespaces: run it as root")
        self.tag = f"{random.randrange(16**4):04x}"
        self.prefix = f"10.{random.randrange(200, 250)}.{random.randrange(1, 255)}"
        self.bridge = f"ct{self.tag}br"
        self.logs = logs
        self.namespaces: list[str] = []
        self.links: list[str] = [self.bridge]
        self.hosts: list[Host] = []
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def host(self, name: str) -> Host:
        host = Host(self, name, len(self.hosts) + 10)
        self.hosts.append(host)
        return host

    def close(self) -> None:
        for host in self.hosts:
            for proc in host.procs:
                stop(proc)
        for ns in self.namespaces:
            run("ip", "netns", "del", ns, check=False)
        for link in self.links:
            run("ip", "link", "del", link, check=False)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group (`ip netns exec` execs the command, so the group is it), then
    SIGKILL after a grace."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
