"""NATS routes: only the cluster's own servers join it.

The reported fault: deploy/helm/nats-values.yaml turned clustering on with neither route
authorization nor TLS, so a second nats-server without credentials that reached port 6222 joined
a server running deploy/nats/auth.conf as a route, and its client, subscribed to `>`, saw the
operator's `continuity.runs.list` request and reply.

Here the `cluster` block is the one the chart writes from the shipped values (tests/support/helm.py
renders it as the chart's template does, with only the listening address and the certificate
files moved to this machine), in two servers that also load deploy/nats/auth.conf, with the
route password and URLs in the environment as the Secret `nats-route` gives them. A rogue
server tries to join them without TLS and credentials (the reproduction), with the password but
no TLS, with a certificate of the cluster's CA but no password, and with the password and a
certificate of another CA: each is refused and its client sees nothing. The values are checked
too: the route certificate and password come from Secrets the deploy page makes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.aio.msg import Msg

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from shared.contract import subjects
from tests.deploy.conftest import DEPLOY, PASSWORDS, env_name, free_port, inbox, nats_server_binary
from tests.support import helm, wait_for
from tests.support.certs import RouteCerts, make_route_certs

ROUTE_PASSWORD = "0123456789abcdef0123456789abcdef"
"""As deploy.md makes it: hex, so that it needs no escaping in the route URLs."""
REFUSED = re.compile(r"TLS (route )?handshake error|TLS Handshake Failure|authentication error")
"""How a server logs a route it refused (nats-server 2.10 to 2.15)."""


@dataclass
class Server:
    name: str
    client_port: int
    route_port: int
    monitor_port: int
    log: Path
    proc: subprocess.Popen[bytes]

    def url(self, user: str) -> str:
        return f"nats://{user}:{PASSWORDS[user]}@127.0.0.1:{self.client_port}"

    def routez(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/routez", timeout=5) as r:
            routez: dict[str, Any] = json.load(r)
            return routez

    def peers(self) -> set[str]:
        return {r.get("remote_name", "?") for r in self.routez().get("routes") or []}

    def refusals(self) -> int:
        return len(REFUSED.findall(self.log.read_text()))


def shipped_cluster_block(certs: RouteCerts, ports: list[int], index: int) -> str:
    """The chart's `cluster` block from the shipped values for server `index`, listening on
    127.0.0.1, with the certificate files of `certs` in place of the mounted Secrets' and, when
    the chart writes the route URLs itself, the pods' names replaced by this machine's ports."""
    block = helm.cluster_block()
    assert block.pop("port") == 6222
    block["listen"] = f"127.0.0.1:{ports[index]}"
    if isinstance(block["routes"], list):
        block["routes"] = [
            re.sub(r"[^@/]+:6222$", f"localhost:{ports[i]}", url) for i, url in enumerate(block["routes"][:2])
        ]
    files = {
        "cert_file": ("/etc/nats-certs/cluster/tls.crt", certs.cert()),
        "key_file": ("/etc/nats-certs/cluster/tls.key", certs.key()),
        "ca_file": ("/etc/nats-ca-cert/ca.crt", certs.ca),
    }
    for name, (mounted, local) in files.items():
        if "tls" in block:
            assert block["tls"][name] == mounted, name
            block["tls"][name] = local
    return helm.nats_conf(block)


def start(work: Path, name: str, body: str, env: dict[str, str], route_port: int) -> Server:
    client, monitor = free_port(), free_port()
    conf = work / f"{name}.conf"
    conf.write_text(f"server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{monitor}\n{body}\n")
    log = work / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(conf)], env={**os.environ, **env}, stdout=out, stderr=out
        )
    server = Server(name, client, route_port, monitor, log, proc)
    deadline_tries = 150
    for _ in range(deadline_tries):
        if proc.poll() is not None:
            pytest.fail(f"nats-server {name} exited:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError):
            server.routez()
            return server
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.1)  # a bounded wait for the port, which also sees an early exit
    pytest.fail(f"nats-server {name} did not start:\n{log.read_text()[-2000:]}")


def stop(server: Server) -> None:
    server.proc.terminate()
    server.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server, RouteCerts, Path]]:
    work = tmp_path_factory.mktemp("bus-routes")
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(DEPLOY / "nats" / name, work / name)
    certs = make_route_certs(work / "certs")
    ports = {"a": free_port(), "b": free_port()}
    routes = ", ".join(f"tls://route:{ROUTE_PASSWORD}@localhost:{p}" for p in ports.values())
    env = {
        **{env_name(u): p for u, p in PASSWORDS.items()},
        "CONTINUITY_NATS_ROUTE_PASSWORD": ROUTE_PASSWORD,
        "CONTINUITY_NATS_ROUTES": f"[{routes}]",  # the Secret's `routes`, as deploy.md makes it
    }
    servers = []
    try:
        for index, (name, port) in enumerate(ports.items()):
            block = shipped_cluster_block(certs, list(ports.values()), index)
            servers.append(start(work, name, f"cluster: {block}\ninclude ./auth.conf\n", env, port))
        a, b = servers
        for _ in range(300):
            if "b" in a.peers() and "a" in b.peers():
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                a.proc.wait(0.1)  # a bounded wait for the routes to form
        else:
            pytest.fail(f"the shipped cluster block formed no cluster:\n{a.log.read_text()[-3000:]}")
        yield a, b, certs, work
    finally:
        for server in servers:
            stop(server)


async def test_the_shipped_cluster_block_joins_the_clusters_own_servers(
    cluster: tuple[Server, Server, RouteCerts, Path],
) -> None:
    """A publication on one server reaches the other's subscriber: the routes carry traffic."""
    a, b, _, _ = cluster
    seen: list[Msg] = []

    async def on_list(msg: Msg) -> None:
        seen.append(msg)

    reconciliation = await nats.connect(b.url("reconciliation"), inbox_prefix=inbox("reconciliation"))
    operator = await nats.connect(a.url("operator"), inbox_prefix=inbox("operator"))
    try:
        await reconciliation.subscribe(subjects.RUNS_LIST, queue=subjects.QUEUE_GROUP, cb=on_list)
        await reconciliation.flush()

        async def heard() -> bool:
            await operator.publish(subjects.RUNS_LIST, b"{}")
            await operator.flush()
            await reconciliation.flush()
            return bool(seen)

        await wait_for(heard, timeout=15, what="the operator's request across the route")
    finally:
        await operator.close()
        await reconciliation.close()


ROGUES = {
    "no TLS, no credentials (the reported route)": ("nats://localhost:{port}", None),
    "the route password, no TLS": (f"nats://route:{ROUTE_PASSWORD}@localhost:{{port}}", None),
    "a route certificate of the cluster's CA, no password": ("tls://localhost:{port}", "spare"),
    "the password and a certificate of another CA": (
        f"tls://route:{ROUTE_PASSWORD}@localhost:{{port}}",
        "stranger",
    ),
}


@pytest.mark.parametrize("rogue", sorted(ROGUES))
async def test_a_rogue_server_is_refused_and_sees_nothing(
    rogue: str, cluster: tuple[Server, Server, RouteCerts, Path]
) -> None:
    a, b, certs, work = cluster
    url, cert = ROGUES[rogue]
    port = free_port()
    tls = ""
    if cert is not None:  # it trusts the cluster's CA, so that its own TLS check is no obstacle
        files = f'cert_file: "{certs.cert(cert)}", key_file: "{certs.key(cert)}", ca_file: "{certs.ca}"'
        tls = f", tls {{ {files} }}"
    route = url.format(port=a.route_port)
    body = (
        "accounts: { CONTINUITY: { users: [ { user: spy, password: spy } ] } }\n"
        f"cluster {{ name: {helm.RELEASE}, listen: 127.0.0.1:{port}, routes: [ {route} ]{tls} }}\n"
    )
    before = a.refusals()
    name = "rogue-" + re.sub(r"\W+", "-", rogue)[:24]
    spy_server = start(work, name, body, {}, port)
    try:
        spy = await nats.connect(f"nats://spy:spy@127.0.0.1:{spy_server.client_port}")
        operator = await nats.connect(a.url("operator"), inbox_prefix=inbox("operator"))
        try:
            seen: list[Msg] = []

            async def collect(msg: Msg) -> None:
                seen.append(msg)

            await spy.subscribe(">", cb=collect)
            await spy.flush()
            # Refused: the cluster's server logged the attempt (it retries once a second).
            await wait_for(lambda: a.refusals() > before, timeout=20, what=f"{a.name} to refuse the {rogue}")
            await operator.publish(subjects.RUNS_LIST, b'{"limit": 1}', reply=operator.new_inbox())
            await operator.flush()
            await spy.flush()
            assert seen == []
            assert a.peers() == {"b"} and b.peers() == {"a"}
            assert spy_server.peers() == set()
        finally:
            await operator.close()
            await spy.close()
    finally:
        stop(spy_server)


# ---- the values that give the routes their credentials -----------------------------------------


def env_source(values: dict[str, Any], name: str) -> dict[str, Any]:
    ref: dict[str, Any] = values["container"]["env"][name]["valueFrom"]["secretKeyRef"]
    return ref


def test_the_routes_credentials_come_from_secrets_and_certificates_the_docs_make() -> None:
    values = helm.values()
    cluster = values["config"]["cluster"]
    assert cluster["enabled"] and cluster["tls"]["enabled"]
    assert not cluster.get("routeURLs", {}).get("password")  # never in the ConfigMap
    block = helm.cluster_block(values)
    assert block["authorization"] == {"user": "route", "password": "<< $CONTINUITY_NATS_ROUTE_PASSWORD >>"}
    assert block["routes"] == "<< $CONTINUITY_NATS_ROUTES >>"
    assert block["tls"]["verify"] is True
    assert env_source(values, "CONTINUITY_NATS_ROUTE_PASSWORD") == {"name": "nats-route", "key": "password"}
    assert env_source(values, "CONTINUITY_NATS_ROUTES") == {"name": "nats-route", "key": "routes"}

    examples = DEPLOY / "kubernetes" / "examples" / "certificates.example.yaml"
    issued = {
        d["spec"]["secretName"]: d
        for d in yaml.safe_load_all(examples.read_text())
        if d and d["kind"] == "Certificate"
    }
    route = issued[cluster["tls"]["secretName"]]
    assert route["metadata"]["namespace"] == helm.NAMESPACE
    assert {"server auth", "client auth"} <= set(route["spec"]["usages"])
    assert f"*.{helm.RELEASE}-headless.{helm.NAMESPACE}.svc.cluster.local" in route["spec"]["dnsNames"]
    ca = values["tlsCA"]["secretName"]
    assert route["spec"]["issuerRef"] == issued[ca]["spec"]["issuerRef"]  # the CA routes trust

    # deploy.md's Secret: the password, and the URLs built from it, as the chart's routes would be.
    deploy_md = (DEPLOY.parent / "docs" / "operations" / "deploy.md").read_text()
    assert 'route_password="$(openssl rand -hex 32 | tr 0-9 g-p)"' in deploy_md
    assert '--from-literal=password="$route_password"' in deploy_md
    function = re.search(r"^route\(\) \{.*\}$", deploy_md, re.MULTILINE)
    value = re.search(r'--from-literal=routes=("\[.*\]")$', deploy_md, re.MULTILINE)
    assert function and value, "deploy.md makes the Secret nats-route"
    made = subprocess.run(
        ["sh", "-c", f"route_password=PW\n{function.group(0)}\nprintf %s {value.group(1)}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    chart = dict(values, config={**values["config"], "cluster": {**cluster, "merge": {}, "patch": []}})
    assert (
        made
        == "["
        + ", ".join(url.replace("tls://", "tls://route:PW@") for url in helm.cluster_block(chart)["routes"])
        + "]"
    )
