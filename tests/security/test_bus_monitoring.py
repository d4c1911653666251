"""Who reaches the NATS servers, and how they run: the monitoring endpoint (which lists users,
runner keys and client addresses: /connz?auth=true, /accountz, /jsz), the client and route
ports, the servers' privileges, and the dev overlay's server.

The reported faults: Helm enabled the monitoring port with no NetworkPolicy for the namespace
`nats`, compose published 8222, the NATS Helm values set no securityContext, and the dev
overlay's NATS had neither authorization nor a NetworkPolicy. The Helm values and the kustomize
overlays are checked by parsing them (tests/support/helm.py evaluates NetworkPolicies as
Kubernetes does); the servers' configurations by running them: compose's, which listens for
monitoring on the loopback only, and the dev overlay's, which takes exactly its users."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from continuity.cli.runner_files import ACCOUNTS_FILE, IMPORTS_FILE
from tests.deploy.conftest import DEPLOY, KUSTOMIZE_DIR, by_kind, free_port, nats_server_binary, render
from tests.support import helm
from tests.support.certs import make_certs
from tests.support.helm import Pod, admits

NATS = Pod("nats", {"app.kubernetes.io/name": "nats", "app.kubernetes.io/component": "nats"})
NATS_BOX = Pod("nats", {"app.kubernetes.io/name": "nats", "app.kubernetes.io/component": "nats-box"})
SERVICE = Pod(
    "continuity", {"app.kubernetes.io/name": "continuity", "app.kubernetes.io/part-of": "continuity"}
)
RUNNER = Pod("ci", {"app": "runner"}, {"continuity-runners": "true"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
KEDA = Pod("keda", {"app": "keda-operator"})
STRANGERS = (
    Pod("default", {"app": "anything"}),
    Pod("continuity", {"app": "not-continuity"}),  # the right namespace, another workload
    Pod("nats", {"app": "debug"}),  # the right namespace, not a NATS pod
    Pod("ci", {"app": "runner"}),  # a namespace not labelled for runners
    Pod("kube-system", {"k8s-app": "kube-dns"}),
)
PORTS = {"client": 4222, "route": 6222, "monitoring": 8222, "exporter": 7777}
ADMITTED = {
    "client": {"service", "nats-box", "runner"},
    "route": {"nats"},
    "monitoring": {"keda"},
    "exporter": {"prometheus"},
}
"""Who may reach each port of a NATS server in production."""
KNOWN = {
    "service": SERVICE,
    "nats-box": NATS_BOX,
    "runner": RUNNER,
    "nats": NATS,
    "keda": KEDA,
    "prometheus": PROMETHEUS,
}


def helm_policies() -> list[dict[str, Any]]:
    return [r for r in helm.values()["extraResources"] if r["kind"] == "NetworkPolicy"]


def test_the_nats_namespace_admits_each_port_to_its_own_peers_only() -> None:
    policies = helm_policies()
    for port_name, port in PORTS.items():
        reached = {name for name, pod in KNOWN.items() if admits(policies, NATS, port, pod)}
        assert reached == ADMITTED[port_name], port_name
        for stranger in STRANGERS:
            assert not admits(policies, NATS, port, stranger), (port_name, stranger)
    # Nothing else of the namespace is open: nats-box accepts nobody, no other port of a server.
    for source in (*KNOWN.values(), *STRANGERS):
        assert not admits(policies, NATS_BOX, 4222, source)
        assert not admits(policies, NATS, 65432, source)  # the profiling port, were it on


def test_prometheus_scrapes_the_exporter_and_keda_reads_the_monitoring_port() -> None:
    values = helm.values()
    assert values["promExporter"]["enabled"] and values["promExporter"]["podMonitor"]["enabled"]
    assert values["promExporter"].get("port", 7777) == PORTS["exporter"]
    assert values["config"]["monitor"]["port"] == PORTS["monitoring"]
    scaler = yaml.safe_load((KUSTOMIZE_DIR / "overlays/production/scaledobject-classifier.yaml").read_text())
    endpoint = scaler["spec"]["triggers"][0]["metadata"]["natsServerMonitoringEndpoint"]
    assert endpoint.endswith(f":{PORTS['monitoring']}")


def test_the_nats_servers_run_without_privileges() -> None:
    values = helm.values()
    pod = values["podTemplate"]["merge"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for part in ("container", "reloader", "promExporter"):
        context = values[part]["merge"]["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, part
        assert context["readOnlyRootFilesystem"] is True, part
        assert context["capabilities"]["drop"] == ["ALL"], part
    box = values["natsBox"]
    assert box["container"]["merge"]["securityContext"]["allowPrivilegeEscalation"] is False
    assert box["container"]["merge"]["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert box["podTemplate"]["merge"]["spec"]["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    # The operator's inboxes, which it alone may read (deploy/nats/auth.conf).
    assert box["contexts"]["default"]["merge"]["inbox_prefix"] == "_INBOX.operator"


# ---- the dev overlay -------------------------------------------------------------------------------

DEV = KUSTOMIZE_DIR / "overlays" / "dev"


def dev_secret(docs: list[dict[str, Any]], name: str) -> dict[str, str]:
    (secret,) = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].startswith(f"{name}-")]
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_the_dev_overlays_nats_has_productions_authorization_and_a_policy() -> None:
    # A copy of production's, kept equal; the runner files are the overlay's own (runners are
    # issued into them with --conf-dir), and valid as the server reads them (below).
    assert (DEV / "nats" / "auth.conf").read_text() == (DEPLOY / "nats" / "auth.conf").read_text()
    for name in (ACCOUNTS_FILE, IMPORTS_FILE):
        assert (DEV / "nats" / name).exists(), name
    docs = render("dev")
    config = by_kind(docs, "ConfigMap")["nats-config"]["data"]
    assert "include ./auth.conf" in config["nats.conf"]
    assert config["auth.conf"] == (DEPLOY / "nats" / "auth.conf").read_text()
    (service,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "nats"]
    assert [p["port"] for p in service["spec"]["ports"]] == [PORTS["client"]]  # no monitoring
    server = by_kind(docs, "StatefulSet")["nats"]["spec"]["template"]
    assert server["spec"]["securityContext"]["runAsNonRoot"] is True
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    dev_nats = Pod("continuity-dev", server["metadata"]["labels"])
    service_pod = Pod("continuity-dev", {"app.kubernetes.io/part-of": "continuity"})
    runner_pod = Pod("continuity-dev", {"app": "runner"})
    assert admits(policies, dev_nats, PORTS["client"], service_pod)
    assert admits(policies, dev_nats, PORTS["client"], runner_pod)
    for source in (service_pod, runner_pod, *STRANGERS):
        assert not admits(policies, dev_nats, PORTS["monitoring"], source)
    for stranger in STRANGERS:
        assert not admits(policies, dev_nats, PORTS["client"], stranger)


def wait_healthy(proc: subprocess.Popen[bytes], monitor: int, log: Path) -> None:
    """Until the monitoring port answers (a bounded wait that also sees the server exit)."""
    for _ in range(150):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        try:
            proc.wait(0.1)
            pytest.fail(f"nats-server exited:\n{log.read_text()[-2000:]}")
        except subprocess.TimeoutExpired:
            pass
    pytest.fail("the monitoring port never answered")


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """The dev overlay's rendered nats.conf and auth files, run on this machine with the
    passwords of its Secret nats-dev-users; yields the client port and the services' URLs."""
    docs = render("dev")
    files = by_kind(docs, "ConfigMap")["nats-config"]["data"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    port, monitor = free_port(), free_port()
    conf = files["nats.conf"]
    conf = re.sub(r"^port: 4222$", f"host: 127.0.0.1\nport: {port}", conf, flags=re.MULTILINE)
    conf = re.sub(r"^http_port: 8222$", f"http: 127.0.0.1:{monitor}", conf, flags=re.MULTILINE)
    conf = conf.replace("store_dir: /data", f'store_dir: "{tmp_path / "js"}"')
    assert f"port: {port}" in conf and f":{monitor}" in conf and "/data" not in conf
    (tmp_path / "nats.conf").write_text(conf)
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(tmp_path / "nats.conf")],
            env=dev_secret(docs, "nats-dev-users"),
            stdout=log,
            stderr=log,
        )
    try:
        wait_healthy(proc, monitor, log_path)
        local = f"@127.0.0.1:{port}"
        yield (
            port,
            {k: v.replace("@nats:4222", local) for k, v in dev_secret(docs, "continuity-nats").items()},
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_the_dev_overlays_nats_configuration_takes_its_users_and_no_one_else(
    dev_server: tuple[int, dict[str, str]],
) -> None:
    port, urls = dev_server
    # The session-store's second login, as `monitor` of SYS: a password, no URL.
    monitor = urls.pop("monitor")
    assert "://" not in monitor
    urls["monitor"] = f"nats://monitor:{monitor}@127.0.0.1:{port}"
    assert set(urls) == {"classifier", "session-store", "archiver", "reconciliation", "console", "monitor"}
    for user, url in urls.items():
        assert url.startswith(f"nats://{user}:")
        nc = await nats.connect(url, inbox_prefix=f"_INBOX.{user}", allow_reconnect=False, connect_timeout=5)
        await nc.close()
    for url in (f"nats://127.0.0.1:{port}", f"nats://classifier:wrong@127.0.0.1:{port}"):
        with pytest.raises(Exception):  # noqa: B017  (nats-py raises a generic error on auth failure)
            await nats.connect(url, allow_reconnect=False, connect_timeout=2)


# ---- compose's server ----------------------------------------------------------------------------------


def listening(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on for `port` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


def test_the_compose_servers_monitoring_listens_on_the_loopback_only(tmp_path: Path) -> None:
    """deploy/nats/nats-server.conf run as it is, but for its ports (free ones instead of 4222 and
    8222), its store and its certificates (made here in place of compose's)."""
    for name in ("auth.conf", ACCOUNTS_FILE, IMPORTS_FILE):
        shutil.copy(DEPLOY / "nats" / name, tmp_path / name)
    certs = make_certs(tmp_path / "tls")
    client, monitor = free_port(), free_port()
    conf = (DEPLOY / "nats" / "nats-server.conf").read_text()
    assert re.search(r"\b8222\b", conf) and re.search(r"\b4222\b", conf)
    conf = re.sub(r"\b4222\b", str(client), re.sub(r"\b8222\b", str(monitor), conf))
    for field, path in (
        ("cert_file", certs.server_cert),
        ("key_file", certs.server_key),
        ("ca_file", certs.ca),
    ):
        conf, count = re.subn(rf"^(\s*{field}:\s*).*$", rf'\g<1>"{path}"', conf, flags=re.MULTILINE)
        assert count == 1, field
    conf = re.sub(r"store_dir:\s*\S+", f'store_dir: "{tmp_path / "js"}"', conf)
    (tmp_path / "nats-server.conf").write_text(conf)
    env = {
        name: f"pw-{name.lower()}"
        for name in re.findall(
            r"\$(CONTINUITY_NATS_\w+_PASSWORD)", conf + (DEPLOY / "nats" / "auth.conf").read_text()
        )
    }
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(tmp_path / "nats-server.conf")], env=env, stdout=log, stderr=log
        )
    try:
        wait_healthy(proc, monitor, log_path)
        assert listening(monitor) == {"127.0.0.1"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
