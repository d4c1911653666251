"""TLS in deploy/, checked offline: compose, the production overlay and the Helm values turn on
TLS with client certificates everywhere, and the variables they set are accepted by the
services' own configuration with certificates from deploy/tls/make-dev-certs.sh."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from shared.platform.config import Config
from shared.platform.tls import nats_context, redis_context
from tests.deploy.conftest import DEPLOY, KUSTOMIZE_DIR, REPO, SERVICES, by_kind, render

TLS_VARIABLES = {
    f"CONTINUITY_{system}_TLS_{part}" for system in ("NATS", "REDIS") for part in ("CA", "CERT", "KEY")
}


def compose() -> dict:
    return yaml.safe_load((REPO / "compose.yaml").read_text())


def expected_tls(service: str) -> set[str]:
    """The TLS variables a service gets: the console, which has no Redis, the NATS ones only."""
    return {v for v in TLS_VARIABLES if service != "console" or "_NATS_" in v}


@pytest.fixture(scope="module")
def compose_secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What compose's `secrets` service writes (deploy/compose/secrets.sh), in a folder."""
    out = tmp_path_factory.mktemp("secrets")
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "SECRETS_ROOT": str(out), "SECRETS_SCRIPTS": str(DEPLOY)}
    subprocess.run(
        ["sh", str(DEPLOY / "compose" / "secrets.sh")], check=True, capture_output=True, timeout=120, env=env
    )
    return out


def test_compose_services_start_with_the_certificates_the_secrets_service_makes(
    compose_secrets: Path,
) -> None:
    services = compose()["services"]
    assert services["secrets"]["command"] == ["sh", "/scripts/compose/secrets.sh"]
    assert "./deploy/tls:/scripts/tls:ro" in services["secrets"]["volumes"]
    for name in SERVICES:
        svc = services[name]
        assert svc["volumes"] == [f"secrets-{name}:/run/continuity:ro"]
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy"
        env = {k: str(v) for k, v in svc["environment"].items()}
        assert expected_tls(name) <= env.keys() and not (TLS_VARIABLES - expected_tls(name)) & env.keys()
        # The paths the service reads, pointed at its volume as the same script filled it.
        local = {k: v.replace("/run/continuity/", f"{compose_secrets / name}/") for k, v in env.items()}
        config = Config.from_env(local)
        assert nats_context(config) is not None
        assert (redis_context(config) is not None) == (name != "console")
    for server in ("nats", "redis"):
        condition = services[server]["depends_on"]["secrets"]["condition"]
        assert condition == "service_completed_successfully"


def test_compose_redis_and_nats_serve_only_tls_and_require_client_certificates(compose_secrets: Path) -> None:
    services = compose()["services"]
    command = services["redis"]["command"]
    option = {command[i]: command[i + 1] for i in range(1, len(command) - 1) if command[i].startswith("--")}
    assert (option["--port"], option["--tls-port"], option["--tls-auth-clients"]) == ("0", "6379", "yes")
    assert "secrets-redis:/run/redis:ro" in services["redis"]["volumes"]
    for flag in ("--tls-cert-file", "--tls-key-file", "--tls-ca-cert-file", "--aclfile"):
        assert (compose_secrets / "redis" / Path(option[flag]).name).is_file(), flag
    assert "--tls" in services["redis"]["healthcheck"]["test"][1]

    assert "secrets-nats:/etc/nats-tls:ro" in services["nats"]["volumes"]
    certs = compose_secrets / "nats"
    conf = (DEPLOY / "nats" / "nats-server.conf").read_text()
    block = re.search(r"^tls \{(.*?)^\}", conf, re.MULTILINE | re.DOTALL)
    assert block, "nats-server.conf has no tls block"
    settings = dict(re.findall(r"^\s*(\w+):\s*(\S+)", block.group(1), re.MULTILINE))
    assert settings["verify"] == "true" and settings["handshake_first"]
    for key in ("cert_file", "key_file", "ca_file"):
        assert settings[key].startswith("/etc/nats-tls/")
        assert (certs / Path(settings[key]).name).is_file(), key


def test_production_pods_mount_the_tls_secret_and_dev_stays_plain() -> None:
    for name, dep in by_kind(render("production"), "Deployment").items():
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]  # the service (the console's proxy is beside it)
        [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
        assert volume["secret"]["secretName"] == "continuity-tls", name
        [mount] = [m for m in container["volumeMounts"] if m["name"] == "tls"]
        assert mount["readOnly"] is True
        env = {e["name"]: e.get("value") for e in container["env"]}
        service = name.removeprefix("continuity-")
        assert (
            expected_tls(service) <= env.keys() and not (TLS_VARIABLES - expected_tls(service)) & env.keys()
        )
        files = {Path(env[v]).name for v in expected_tls(service)}
        assert files == {"ca.crt", "tls.crt", "tls.key"}  # cert-manager's Secret layout
        assert all(Path(env[v]).parent == Path(mount["mountPath"]) for v in expected_tls(service))
    for dep in by_kind(render("dev"), "Deployment").values():
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert not TLS_VARIABLES & {e["name"] for e in container["env"]}, "dev's servers are plain"


def test_production_urls_and_helm_values_use_tls() -> None:
    text = (KUSTOMIZE_DIR / "examples" / "secrets.example.yaml").read_text()
    secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}
    nats_urls = dict(secrets["continuity-nats"]["stringData"])
    assert "://" not in nats_urls.pop("monitor")  # the session-store's monitor password, no URL
    assert all(url.startswith("tls://") for url in nats_urls.values())
    assert all(url.startswith("rediss://") for url in secrets["continuity-redis"]["stringData"].values())
    redis = yaml.safe_load((DEPLOY / "helm" / "redis-values.yaml").read_text())["tls"]
    assert redis["enabled"] and redis["authClients"] and not redis["autoGenerated"]
    nats = yaml.safe_load((DEPLOY / "helm" / "nats-values.yaml").read_text())
    assert nats["config"]["nats"]["tls"]["enabled"] and nats["tlsCA"]["enabled"]
    assert nats["config"]["nats"]["tls"]["merge"]["verify"] is True
    assert nats["config"]["nats"]["tls"]["merge"]["handshake_first"]
