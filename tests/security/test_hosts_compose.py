"""compose.yaml as shipped, parsed (no container engine here), and what its `secrets` service
writes (deploy/compose/secrets.sh, run for real into a folder) served by real servers: every
published port on 127.0.0.1; no password or token in the file, each made at the first start
into the volume of the one container that reads it, readable by that container's user alone;
a client key per process; Prometheus without its HTTP lifecycle; NATS, Redis and the monitoring
containers hardened and bounded; Redis refusing anyone but the services' users, each limited to
its part, and NATS the users' generated passwords only.

The reproduction was the console on 0.0.0.0:8080 with the token `dev-only-console-token`,
Grafana with its default admin password, Prometheus with --web.enable-lifecycle, Jaeger's UI and
OTLP intake and NATS monitoring on every interface, and one client key (0644) for every
container."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import stat
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.errors import Error as NatsError

from continuity.devstack.servers import free_port, redis_server_binary
from continuity.tools import redis_acl
from services import registry
from services.session_store.presence import CONNZ, monitor_login
from shared.platform.bus.monitor import MONITOR_INBOX, MONITOR_USER
from shared.platform.config import Config, ConfigError
from shared.platform.redis import Redis
from shared.platform.tls import nats_context, redis_context
from tests.deploy.conftest import nats_server_binary

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SERVICES = tuple(registry.SERVICES)
STORING = tuple(s for s in SERVICES if s != "console")
HARDENED = ("nats", "redis", "prometheus", "grafana", "jaeger")
USERS = {"continuity": 10001, "redis": 999, "grafana": 472, "root": 0}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text())
    return loaded


def test_every_published_port_is_on_the_loopback() -> None:
    published = {
        name: [str(p) for p in service.get("ports", [])] for name, service in compose()["services"].items()
    }
    assert {n for n, p in published.items() if p} >= {
        "nats",
        "redis",
        "console",
        "prometheus",
        "grafana",
        "jaeger",
    }
    for name, ports in published.items():
        for port in ports:
            assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+", port), f"{name}: {port}"


def test_no_password_or_token_is_written_in_compose() -> None:
    text = (REPO / "compose.yaml").read_text()
    for fixed in (
        "dev-only-console-token",
        "dev-classifier",
        "dev-session-store",
        "dev-console",
        "dev-system",
    ):
        assert fixed not in text, fixed
    for name, service in compose()["services"].items():
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        for key, value in env.items():
            if key.endswith(("_FILE", "__FILE")) or key.startswith(
                ("CONTINUITY_NATS_TLS", "CONTINUITY_REDIS_TLS")
            ):
                assert value.startswith("/run/"), f"{name}: {key}"  # a file of its volume
                continue
            if key in ("NATS_URL", "REDIS_URL"):
                assert "@" in value and ":" not in value.split("@")[0].split("//")[1], f"{name}: {key}"
                continue  # a user, never a password
            if key == "CONTINUITY_RUNNER_KEYS":
                continue  # the placeholder runners under test sign with (docs/operations/security.md)
            assert not re.search(r"PASSWORD|TOKEN|SECRET", key), f"{name}: {key} is written in compose.yaml"
    grafana = compose()["services"]["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/grafana/admin-password"
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana  # never Grafana's default `admin`
    console = compose()["services"]["console"]["environment"]
    assert console["CONTINUITY_CONSOLE_DEV_TOKEN_FILE"] == "/run/continuity/console-token"
    assert "CONTINUITY_CONSOLE_DEV_TOKEN" not in console


def test_prometheus_has_no_http_lifecycle() -> None:
    command = compose()["services"]["prometheus"]["command"]
    assert not any("enable-lifecycle" in option for option in command), command


def test_the_servers_and_monitoring_are_hardened_and_bounded() -> None:
    services = compose()["services"]
    for name in (*HARDENED, *SERVICES):
        service = services[name]
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert service["mem_limit"] and int(service["pids_limit"]) > 0, name
    assert services["redis"]["user"] == "999:999"  # no root step in the container


def test_each_container_mounts_only_its_own_secrets() -> None:
    services = compose()["services"]
    mounted: dict[str, list[str]] = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            if source.startswith("secrets-"):
                mounted.setdefault(source, []).append(name)
    assert mounted.pop("secrets-operator") == ["secrets"]  # copied out for the host's `continuity`
    for volume, users in mounted.items():
        assert sorted(users) == sorted({"secrets", volume.removeprefix("secrets-")}), (volume, users)
        readers = [u for u in users if u != "secrets"]
        mode = next(v for v in services[readers[0]]["volumes"] if str(v).startswith(f"{volume}:"))
        assert str(mode).endswith(":ro"), mode
    assert {f"secrets-{s}" for s in SERVICES} <= mounted.keys()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `secrets` service's volumes, as deploy/compose/secrets.sh fills them."""
    root = tmp_path_factory.mktemp("compose-secrets")
    env = {"PATH": os.environ["PATH"], "SECRETS_ROOT": str(root), "SECRETS_SCRIPTS": str(DEPLOY)}
    done = subprocess.run(
        ["sh", str(DEPLOY / "compose" / "secrets.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # Nothing secret on its output (compose keeps it in its logs).
    for path in root.rglob("*"):
        if path.is_file() and path.suffix not in (".crt",) and path.stat().st_size:
            secret = path.read_text().strip()
            if "\n" not in secret:
                assert secret not in done.stdout + done.stderr, path
    return root


def test_secrets_are_made_once_readable_by_their_container_alone(made: Path) -> None:
    owners = {
        "nats": 0, "redis": USERS["redis"], "grafana": USERS["grafana"], "operator": 0,
        **{s: USERS["continuity"] for s in SERVICES},
    }  # fmt: skip
    running_as_root = os.getuid() == 0
    for volume, owner in owners.items():
        folder = made / volume
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, volume
        for path in folder.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
            if running_as_root:  # another user cannot give files away
                assert path.stat().st_uid == owner, path
    keys = {s: (made / s / "client.key").read_bytes() for s in (*SERVICES, "operator")}
    assert len(set(keys.values())) == len(keys), "one client key per process"
    for name in (*SERVICES, "operator"):
        subject = subprocess.run(
            ["openssl", "x509", "-in", str(made / name / "client.crt"), "-noout", "-subject"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert subject.strip().endswith(f"CN = {name}"), subject
    assert (made / "console" / "console-token").read_text().strip()
    assert not (made / "console" / "redis-password").exists()
    # The password of `monitor` is the session-store's alone.
    holders = sorted(p.parent.name for p in made.glob("*/nats-monitor-password"))
    assert holders == ["session-store"]
    # Made once: a second start leaves them as they are.
    before = (made / "classifier" / "nats-password").read_text()
    env = {"PATH": os.environ["PATH"], "SECRETS_ROOT": str(made), "SECRETS_SCRIPTS": str(DEPLOY)}
    subprocess.run(["sh", str(DEPLOY / "compose" / "secrets.sh")], env=env, check=True, capture_output=True)
    assert (made / "classifier" / "nats-password").read_text() == before


def test_every_nats_password_the_server_reads_is_made(made: Path) -> None:
    wanted = set(re.findall(r"\$(CONTINUITY_NATS_\w+_PASSWORD)", (DEPLOY / "nats" / "auth.conf").read_text()))
    made_variables = set(re.findall(r"^export (\w+)=", (made / "nats" / "passwords.env").read_text(), re.M))
    assert wanted and wanted <= made_variables


def service_env(name: str, made: Path) -> dict[str, str]:
    """A compose service's environment, its volume's paths pointed at the folder filled above."""
    env = {k: str(v) for k, v in compose()["services"][name]["environment"].items()}
    return {k: v.replace("/run/continuity/", f"{made / name}/") for k, v in env.items() if "${" not in v}


@pytest.fixture(scope="module")
def compose_redis(made: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Redis with compose's command, its files from the `secrets` volume; its port."""
    command = [str(a) for a in compose()["services"]["redis"]["command"]]
    port = free_port()
    args = [a.replace("/run/redis/", f"{made / 'redis'}/") for a in command[1:]]
    args[args.index("--tls-port") + 1] = str(port)
    data = tmp_path_factory.mktemp("compose-redis")
    proc = subprocess.Popen(
        [redis_server_binary(), *args, "--bind", "127.0.0.1", "--dir", str(data), "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        probe = healthcheck(made, port)
        for _ in range(100):
            if probe() == "PONG":
                break
            if proc.poll() is not None:
                pytest.fail(f"redis exited with {proc.returncode}")
            time.sleep(0.1)  # polling the server's start with a deadline
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def healthcheck(made: Path, port: int) -> Any:
    """compose's health check of Redis, its paths pointed at the folder."""
    test = compose()["services"]["redis"]["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL"
    shell = test[1].replace("$$", "$").replace("/run/redis/", f"{made / 'redis'}/")
    shell = shell.replace("redis-cli ", f"redis-cli -h 127.0.0.1 -p {port} ")

    def run() -> str:
        done = subprocess.run(
            ["sh", "-c", shell.replace(" | grep -qx PONG", "")], capture_output=True, text=True
        )
        return done.stdout.strip()

    return run


async def test_compose_redis_admits_each_service_as_its_user_and_nothing_more(
    made: Path, compose_redis: int
) -> None:
    assert healthcheck(made, compose_redis)() == "PONG"
    for name in STORING:
        env = service_env(name, made)
        env["REDIS_URL"] = env["REDIS_URL"].replace("@redis:6379", f"@localhost:{compose_redis}")
        config = Config.from_env(env)
        client = Redis(config.redis_url, cluster="off", ssl_context=redis_context(config))
        try:
            assert await client.ready()
            with pytest.raises(Exception, match="NOPERM"):
                await client.execute("CONFIG", "GET", "*")
            with pytest.raises(Exception, match="NOPERM"):
                await client.execute("SET", "elsewhere", "x")
        finally:
            await client.aclose()
    # The console has no Redis user, and `default` is off: a certificate alone gets nothing.
    console = service_env("console", made)
    assert "REDIS_URL" not in console
    classifier = service_env("classifier", made)
    no_user = {k: v for k, v in classifier.items() if k != "CONTINUITY_REDIS_PASSWORD_FILE"}
    no_user["REDIS_URL"] = f"rediss://localhost:{compose_redis}/0"
    config = Config.from_env(no_user)
    client = Redis(config.redis_url, cluster="off", ssl_context=redis_context(config))
    try:
        assert not await client.ready()
        with pytest.raises(Exception, match="NOAUTH"):
            await client.execute("GET", "continuity:runners")
    finally:
        await client.aclose()
    assert {u.name for u in redis_acl.USERS} == {*STORING, "probe"}


@pytest.fixture(scope="module")
def compose_nats(made: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """NATS with compose's configuration (deploy/nats), its files from the `secrets` volume and
    the passwords sourced as compose's command sources them; its port."""
    work = tmp_path_factory.mktemp("compose-nats")
    for conf in (DEPLOY / "nats").glob("*.conf"):
        shutil.copy(conf, work / conf.name)
    port, monitor = free_port(), free_port()
    server = (work / "nats-server.conf").read_text()
    server = server.replace("port: 4222", f"port: {port}\nhost: 127.0.0.1")
    server = re.sub(r"^http(_port)?:.*$", f"http: 127.0.0.1:{monitor}", server, flags=re.M)
    server = server.replace("/etc/nats-tls/", f"{made / 'nats'}/").replace(
        "store_dir: /data", f"store_dir: {work / 'js'}"
    )
    (work / "nats-server.conf").write_text(server)
    command = compose()["services"]["nats"]["command"]
    assert command[:2] == ["sh", "-c"] and ". /etc/nats-tls/passwords.env" in command[2]
    shell = command[2].replace("/etc/nats-tls/", f"{made / 'nats'}/").replace("/etc/nats/", f"{work}/")
    shell = shell.replace("exec nats-server", f"exec {nats_server_binary()}")
    proc = subprocess.Popen(["sh", "-c", shell], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(150):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/healthz", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"nats-server exited with {proc.returncode}")
                time.sleep(0.1)  # polling the server's start with a deadline
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


async def test_compose_nats_admits_the_generated_passwords_only(made: Path, compose_nats: int) -> None:
    for name in SERVICES:
        env = service_env(name, made)
        env["NATS_URL"] = env["NATS_URL"].replace("@nats:4222", f"@localhost:{compose_nats}")
        env.pop("REDIS_URL", None)
        env = {
            k: v
            for k, v in env.items()
            if not (k.startswith("CONTINUITY_REDIS_TLS") or k == "CONTINUITY_REDIS_PASSWORD_FILE")
        }
        config = Config.from_env(env)
        nc = await nats.connect(
            config.nats_url, tls=nats_context(config), tls_handshake_first=True, allow_reconnect=False,
            connect_timeout=5,
        )  # fmt: skip
        await nc.flush(timeout=5)
        await nc.close()
    # The session-store's second login, as `monitor` of SYS: every server's connections.
    await watch_as_monitor(service_env("session-store", made), compose_nats)
    # The user without its password, or with another's, is refused.
    env = service_env("classifier", made)
    another = (made / "console" / "nats-password").read_text().strip()
    env["NATS_URL"] = f"tls://classifier:{another}@localhost:{compose_nats}"
    env = {
        k: v
        for k, v in env.items()
        if k != "CONTINUITY_NATS_PASSWORD_FILE"
        and not (k.startswith("CONTINUITY_REDIS_TLS") or k == "CONTINUITY_REDIS_PASSWORD_FILE")
    }
    config = Config.from_env(env)
    with pytest.raises((NatsError, OSError, asyncio.TimeoutError)):
        nc = await nats.connect(
            config.nats_url, tls=nats_context(config), tls_handshake_first=True, allow_reconnect=False,
            connect_timeout=3, max_reconnect_attempts=0,
        )  # fmt: skip
        await nc.close()


async def watch_as_monitor(env: dict[str, str], port: int) -> None:
    """The session-store's monitor login (services/session_store/presence.py) from its compose
    environment: it signs in, and the servers answer its connections request."""
    redis = ("REDIS_URL", "CONTINUITY_REDIS_PASSWORD_FILE")
    env = {k: v for k, v in env.items() if not (k.startswith("CONTINUITY_REDIS_TLS") or k in redis)}
    env["NATS_URL"] = env["NATS_URL"].replace("@nats:4222", f"@localhost:{port}")
    config = Config.from_env(env)
    login = monitor_login(config)
    assert login is not None and login["user"] == MONITOR_USER
    url = f"tls://localhost:{port}"
    nc = await nats.connect(
        url, tls=nats_context(config), tls_handshake_first=True, allow_reconnect=False,
        connect_timeout=5, inbox_prefix=MONITOR_INBOX, **login,
    )  # fmt: skip
    try:
        answer = await nc.request(CONNZ, b"{}", timeout=5)
        assert json.loads(answer.data)["data"]["num_connections"] >= 1
    finally:
        await nc.close()


def test_a_password_file_fills_the_url_and_is_never_taken_twice(made: Path) -> None:
    env = service_env("archiver", made)
    config = Config.from_env(env)
    password = (made / "archiver" / "redis-password").read_text().strip()
    assert config.redis_url == f"rediss://archiver:{password}@redis:6379/0"
    with pytest.raises(ConfigError, match="REDIS_URL: carries a password"):
        Config.from_env({**env, "REDIS_URL": "rediss://archiver:other@redis:6379/0"})
    with pytest.raises(ConfigError, match="NATS_URL: name the user"):
        Config.from_env({**env, "NATS_URL": "tls://nats:4222"})
    with pytest.raises(ConfigError, match="CONTINUITY_REDIS_PASSWORD_FILE") as missing:
        Config.from_env({**env, "CONTINUITY_REDIS_PASSWORD_FILE": str(made / "nowhere")})
    assert password not in str(missing.value)


def test_the_dev_certificate_script_writes_keys_for_their_owner_alone(tmp_path: Path) -> None:
    """deploy/tls/make-dev-certs.sh, which the `secrets` service, the tests and tls.md use."""
    script = DEPLOY / "tls" / "make-dev-certs.sh"
    subprocess.run(
        ["sh", str(script), "--client", "a", "--client", "b", str(tmp_path / "out")],
        check=True,
        capture_output=True,
    )
    out = tmp_path / "out"
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    keys = sorted(p.name for p in out.glob("*.key"))
    assert keys == ["client-a.key", "client-b.key", "server.key"]
    assert all(stat.S_IMODE((out / k).stat().st_mode) == 0o600 for k in keys)
    assert not (out / "ca.key").exists()
