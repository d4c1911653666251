"""Every shipped NATS configuration writes JetStream messages to disk before acknowledging them
(`sync_interval: always`; docs/operations/deploy.md, "JetStream durability"): compose's
deploy/nats/nats-server.conf, the dev overlay's nats/nats.conf and the Helm values'
`config.jetstream.merge`. Each is read as written, then given to the nats-server release the
tests run, which must accept the whole file and report `sync_always` for its JetStream settings;
the same settings without the line report the default, so the check can tell them apart."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from continuity.devstack.servers import NatsCluster, free_port
from tests.deploy.conftest import DEPLOY, PASSWORDS, env_name, nats_server_binary
from tests.support.certs import make_certs
from tests.support.waiting import wait_for

SHIPPED_SETTING = "always"
CONF_FILES = ("deploy/nats/nats-server.conf", "deploy/kubernetes/overlays/dev/nats/nats.conf")
HELM_VALUES = "deploy/helm/nats-values.yaml"
REPO = DEPLOY.parent

_JETSTREAM_BLOCK = re.compile(r"^jetstream\s*\{(?P<body>.*?)^\}", re.MULTILINE | re.DOTALL)
_SETTING = re.compile(r"^\s*(?P<key>[A-Za-z_]+)\s*[:=]?\s*(?P<value>\S+?)\s*$")


def conf_jetstream(path: str) -> dict[str, str]:
    """The `jetstream { ... }` block of a shipped NATS configuration file: its settings by key,
    comments dropped (the files write one setting a line)."""
    blocks = list(_JETSTREAM_BLOCK.finditer((REPO / path).read_text()))
    assert len(blocks) == 1, f"{path}: expected one jetstream block, found {len(blocks)}"
    settings: dict[str, str] = {}
    for line in blocks[0].group("body").splitlines():
        line = line.split("#", 1)[0]
        found = _SETTING.match(line)
        if found:
            assert found["key"] not in settings, f"{path}: {found['key']} set twice"
            settings[found["key"]] = found["value"]
    return settings


def helm_jetstream() -> dict[str, Any]:
    """`config.jetstream` of the Helm values: the chart writes `merge` into the server's
    jetstream block as it stands (nats-io/k8s, files/config/config.yaml)."""
    values = yaml.safe_load((REPO / HELM_VALUES).read_text())
    jetstream: dict[str, Any] = values["config"]["jetstream"]
    return jetstream


def shipped_settings(source: str) -> dict[str, str]:
    if source == HELM_VALUES:
        return {str(k): str(v) for k, v in (helm_jetstream().get("merge") or {}).items()}
    return conf_jetstream(source)


@pytest.mark.parametrize("path", CONF_FILES)
def test_the_conf_files_sync_before_acknowledging(path: str) -> None:
    assert conf_jetstream(path).get("sync_interval") == SHIPPED_SETTING, (
        f"{path}: jetstream {{ sync_interval: {SHIPPED_SETTING} }} is missing or differs"
    )


def test_the_helm_values_sync_before_acknowledging() -> None:
    jetstream = helm_jetstream()
    assert jetstream.get("enabled") is True and jetstream["fileStore"]["enabled"] is True
    assert (jetstream.get("merge") or {}).get("sync_interval") == SHIPPED_SETTING, (
        f"{HELM_VALUES}: config.jetstream.merge.sync_interval: {SHIPPED_SETTING} is missing or differs"
    )


def _validate(conf: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **{env_name(u): p for u, p in PASSWORDS.items()}}
    return subprocess.run(
        [nats_server_binary(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30, env=env
    )


@pytest.mark.parametrize("path", CONF_FILES)
def test_the_tested_release_accepts_each_whole_conf_file(path: str, tmp_path: Path) -> None:
    """No key of the file is unknown to, or refused by, the release the project tests on
    (compose's certificate paths point at throwaway certificates here)."""
    source = REPO / path
    for file in source.parent.glob("*.conf"):
        (tmp_path / file.name).write_text(file.read_text())
    certs = make_certs(tmp_path / "tls")
    conf = tmp_path / source.name
    conf.write_text(source.read_text().replace("/etc/nats-tls/", f"{certs.dir}/"))
    done = _validate(conf)
    assert done.returncode == 0, done.stdout + done.stderr


async def _sync_reported(settings: dict[str, str], work: Path) -> dict[str, Any]:
    """A nats-server with these JetStream settings (the store in `work`): what /varz reports of
    its JetStream configuration."""
    port, monitor = free_port(), free_port()
    kept = {k: v for k, v in settings.items() if k not in ("store_dir", "max_file_store", "max_memory_store")}
    lines = "".join(f"  {k}: {v}\n" for k, v in kept.items())
    conf = work / "server.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{port}\nhttp: 127.0.0.1:{monitor}\n"
        f"jetstream {{\n  store_dir: {json.dumps(str(work / 'js'))}\n{lines}}}\n"
    )
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=log, stderr=log)
    varz: dict[str, Any] = {}

    def answered() -> bool:
        assert proc.poll() is None, (work / "server.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=1) as reply:
                varz.update(json.load(reply))
            return True
        except OSError:
            return False

    try:
        await wait_for(answered, timeout=15, what="nats-server's /varz")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
    config: dict[str, Any] = varz["jetstream"]["config"]
    return config


@pytest.mark.parametrize("source", [*CONF_FILES, HELM_VALUES])
async def test_the_server_syncs_always_with_the_shipped_settings(source: str, tmp_path: Path) -> None:
    settings = shipped_settings(source)
    (tmp_path / "shipped").mkdir()
    (tmp_path / "without").mkdir()
    shipped = await _sync_reported(settings, tmp_path / "shipped")
    assert shipped.get("sync_always") is True, f"{source}: the server does not sync always: {shipped}"
    # The same settings without the line: the server's default, which the check must tell apart.
    without = await _sync_reported(
        {k: v for k, v in settings.items() if k != "sync_interval"}, tmp_path / "without"
    )
    assert not without.get("sync_always"), without


def _cluster_sync(sync_interval: str | None, work: Path) -> list[Any]:
    cluster = NatsCluster(work, 3, sync_interval=sync_interval)
    cluster.start()
    try:
        reported = []
        for port in cluster.http_ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/varz", timeout=5) as reply:
                reported.append(json.load(reply)["jetstream"]["config"].get("sync_always"))
        return reported
    finally:
        cluster.stop()


def test_the_bench_cluster_runs_the_sync_interval_it_is_given(tmp_path: Path) -> None:
    """`bench pipeline --production --sync-interval always` measures what it says: every node of
    the embedded cluster syncs always; without a value, none does."""
    assert _cluster_sync("always", tmp_path / "always") == [True, True, True]
    assert not any(_cluster_sync(None, tmp_path / "default"))
