"""The development login's throttle against lock-outs, on a real console with the shipped limits
(5 wrong tokens a client, 50 of all clients, in 60 s) behind a proxy on 127.0.0.1, as `continuity
up`'s and compose's consoles take the token from a file.

The reproduction was: past 50 wrong tokens a minute from all addresses together every sign-in
was refused, the right token included; and behind a proxy every client shared the proxy's one
address, so one attacker locked every operator out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from continuity.devstack.servers import NatsServer, free_port
from services import registry
from services.console.config import ConsoleConfig
from services.console.service import WebConsole
from tests.support import make_config, running

TOKEN = "the-right-development-token-7f3a"
CSRF = "csrf_token"


@pytest.fixture(scope="module")
async def console(nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    folder = tmp_path_factory.mktemp("console-login")
    token = Path(folder) / "console-token"
    token.write_text(TOKEN + "\n")
    config = ConsoleConfig.from_env(
        {
            "CONTINUITY_CONSOLE_PORT": "0",
            "CONTINUITY_CONSOLE_DEV_TOKEN_FILE": str(token),
            # The proxy beside it (127.0.0.1, by default) says who its clients are.
            "CONTINUITY_CONSOLE_IDENTITY_HEADER": "X-Forwarded-User",
        }
    )
    assert (config.login_failures, config.login_failures_total, config.login_window_s) == (5, 50, 60)
    service = registry.load("console", config=config)
    async with running(service, make_config(nats_server.url, f"redis://127.0.0.1:{free_port()}/0")):
        yield f"http://127.0.0.1:{service.part(WebConsole).port}"


async def sign_in(base: str, token: str, *, client: str | None = None, source: str = "127.0.0.1") -> int:
    """One sign-in from a fresh browser: its status (303 signed in, 401 wrong, 429 held back).
    `client` is the address the proxy forwards; `source` the connection's own address."""
    headers = {"X-Forwarded-For": client} if client else {}
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(f"{base}/login", headers=headers) as r:
            page = await r.text()
            assert r.status == 200, page
        csrf = page.split(f'name="{CSRF}" value="', 1)[1].split('"', 1)[0]
        async with http.post(
            f"{base}/login",
            data={CSRF: csrf, "token": token, "next": "/"},
            headers={**headers, "Origin": base},
            allow_redirects=False,
        ) as r:
            return r.status


async def test_an_attacker_behind_the_proxy_locks_nobody_else_out(console: str) -> None:
    # Twelve attacker addresses, five wrong tokens each: 60 failures, past the 50 of everyone.
    attackers = [f"203.0.113.{n}" for n in range(1, 13)]
    statuses = [
        await sign_in(console, "wrong-token-guess-0000", client=a) for a in attackers for _ in range(5)
    ]
    assert statuses == [401] * 50 + [429] * 10  # past all clients' 50, wrong tokens are slowed
    # Each attacker is held back, even with the right token...
    assert await sign_in(console, "wrong-token-guess-0000", client=attackers[0]) == 429
    assert await sign_in(console, TOKEN, client=attackers[0]) == 429
    # ...a wrong token from anyone else is slowed (429, not 401) while the storm lasts...
    assert await sign_in(console, "wrong-token-guess-0000", client="198.51.100.9") == 429
    # ...and an operator behind the same proxy signs in with the right token.
    assert await sign_in(console, TOKEN, client="198.51.100.7") == 303
    assert await sign_in(console, TOKEN, client="2001:db8:7:7::1") == 303


async def test_a_client_not_behind_the_proxy_cannot_claim_new_addresses(console: str) -> None:
    """X-Forwarded-For is read from the trusted proxy only: a client connecting itself is its
    own address whatever it claims, and is held back after its own five."""
    for n in range(5):
        status = await sign_in(console, "wrong-token-guess-1111", client=f"192.0.2.{n}", source="127.0.0.3")
        assert status in (401, 429)
    assert await sign_in(console, "wrong-token-guess-1111", client="192.0.2.99", source="127.0.0.3") == 429
    assert await sign_in(console, TOKEN, client="192.0.2.100", source="127.0.0.3") == 429
    # Another IPv6 address of the same /64 is the same client.
    for n in range(5):
        await sign_in(console, "wrong-token-guess-2222", client=f"2001:db8:66:1::{n + 1}")
    assert await sign_in(console, TOKEN, client="2001:db8:66:1::ffff") == 429
