"""Who may name an operator to the console, with the production configuration as shipped: the
console container's settings from the rendered production overlay and its Secret as
docs/operations/deploy.md creates it, served for real (NATS only: the console keeps nothing in
Redis) and asked over TCP from the address of the proxy beside it (127.0.0.1) and from another
local address (127.0.0.2), which stands for any other pod.

The reproduction was `X-Forwarded-Preferred-Username: admin` from a pod of the trusted pod
network (CONTINUITY_CONSOLE_TRUSTED_PROXIES=10.244.0.0/16), signed in as admin; and the header
sent twice, the first value taken."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from continuity.devstack.servers import NatsServer, free_port
from services import registry
from services.console.config import ConsoleConfig
from services.console.service import WebConsole
from shared.platform.config import ConfigError
from tests.deploy.conftest import by_kind, render
from tests.support import make_config, running

REPO = Path(__file__).resolve().parents[2]
DEPLOY_MD = REPO / "docs" / "operations" / "deploy.md"
PROXY, ELSEWHERE = "127.0.0.1", "127.0.0.2"
UNREACHABLE_REDIS = f"redis://127.0.0.1:{free_port()}/0"
"""Nothing listens there: a console that needed Redis would never be ready."""


def deploy_md_literals(secret: str) -> dict[str, str]:
    """The --from-literal values of `kubectl create secret generic SECRET` in deploy.md, with
    `$(openssl rand -base64 32)` made on the spot."""
    text = DEPLOY_MD.read_text().replace("\\\n", " ")
    [command] = [line for line in text.splitlines() if f"create secret generic {secret} " in line]
    values = {}
    for token in shlex.split(command):
        if token.startswith("--from-literal="):
            key, _, value = token.removeprefix("--from-literal=").partition("=")
            if value == "$(openssl rand -base64 32)":
                value = base64.b64encode(os.urandom(32)).decode()
            values[key] = value
    return values


def shipped_console_env() -> dict[str, str]:
    """The production console's environment: its container's values and its Secret."""
    console = by_kind(render("production"), "Deployment")["continuity-console"]
    [container] = [c for c in console["spec"]["template"]["spec"]["containers"] if c["name"] == "console"]
    values = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    return {**values, **deploy_md_literals("continuity-console")}


@pytest.fixture(scope="module")
async def console(nats_server: NatsServer) -> AsyncIterator[int]:
    """The production console on a free port of 127.0.0.1; its port."""
    config = ConsoleConfig.from_env({**shipped_console_env(), "CONTINUITY_CONSOLE_PORT": "0"})
    assert config.host == PROXY
    service = registry.load("console", config=config)
    async with running(service, make_config(nats_server.url, UNREACHABLE_REDIS)):
        yield service.part(WebConsole).port


async def ask(
    port: int, headers: list[tuple[str, str]], source: str = PROXY, path: str = "/replay"
) -> tuple[int, str]:
    """GET `path` (by default a page that asks no service) with exactly these header lines (a
    name may come twice), from `source`."""
    reader, writer = await asyncio.open_connection(PROXY, port, local_addr=(source, 0))
    try:
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        reply = (await asyncio.wait_for(reader.read(), 10)).decode("utf-8", "replace")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return int(reply.split()[1]), reply


HEADER = "X-Forwarded-Preferred-Username"


def signed_in_as(page: str) -> str | None:
    found = re.search(r'id="actor">([^<]+)<', page)
    return found.group(1) if found else None


async def test_the_shipped_console_trusts_the_header_from_its_sidecar_alone(console: int) -> None:
    config = ConsoleConfig.from_env(shipped_console_env())
    assert config.identity_header == HEADER
    assert [str(n) for n in config.trusted_proxies] == ["127.0.0.1/32"] and config.trusted_proxy_ranges == ()
    status, page = await ask(console, [(HEADER, "alice")])
    assert status == 200 and signed_in_as(page) == "alice"
    # The reproduction: any other address naming an operator, whoever it names.
    for who in ("admin", "alice"):
        status, page = await ask(console, [(HEADER, who)], source=ELSEWHERE)
        assert status == 403, page
        assert "not a trusted proxy" in page and signed_in_as(page) is None
    # Without the header, from elsewhere: nobody is signed in, nothing to act with.
    status, _ = await ask(console, [], source=ELSEWHERE, path="/events")
    assert status == 401


async def test_the_identity_header_sent_twice_is_refused(console: int) -> None:
    for values in (("alice", "admin"), ("admin", "alice")):
        status, page = await ask(console, [(HEADER, values[0]), (HEADER, values[1])])
        assert status == 400, page
        assert "more than once" in page and signed_in_as(page) is None
    # The same names in a different case are the same header.
    status, _ = await ask(console, [(HEADER, "alice"), (HEADER.lower(), "admin")])
    assert status == 400


async def test_x_forwarded_for_sent_twice_is_refused(console: int) -> None:
    status, page = await ask(
        console, [(HEADER, "alice"), ("X-Forwarded-For", "198.51.100.7"), ("X-Forwarded-For", "10.0.0.1")]
    )
    assert status == 400 and "more than once" in page
    status, _ = await ask(console, [(HEADER, "alice"), ("X-Forwarded-For", "198.51.100.7, 10.0.0.1")])
    assert status == 200


def test_the_old_pod_network_range_no_longer_starts_a_console() -> None:
    """The setting of the reproduction stops the start, naming the variable a range needs."""
    env = {**shipped_console_env(), "CONTINUITY_CONSOLE_TRUSTED_PROXIES": "10.244.0.0/16"}
    with pytest.raises(ConfigError, match="CONTINUITY_CONSOLE_TRUSTED_PROXY_RANGES"):
        ConsoleConfig.from_env(env)


async def test_the_console_needs_no_redis(console: int, nats_server: NatsServer) -> None:
    """The fixture's console was given a Redis nobody listens on, and is ready; its Deployment
    has no REDIS_URL, and neither has compose's console (tests/deploy)."""
    status, page = await ask(console, [(HEADER, "alice")])
    assert status == 200 and signed_in_as(page) == "alice"
    console_deployment = by_kind(render("production"), "Deployment")["continuity-console"]
    env = {
        e["name"]
        for c in console_deployment["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
    }
    assert "REDIS_URL" not in env and not any(name.startswith("CONTINUITY_REDIS_") for name in env)
