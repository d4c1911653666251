"""The console shows a finished run whose records have left Redis (contract 9.14): services whose
ended runs linger 1 s in Redis, a run played to `recovered` by its runner's signed
`turn_completed`, then, once CONTINUITY_HISTORY holds its copy and Redis none of its records, the
runs page filtered by its runner, the run's page with its audit trail, and the outcomes page
filtered by its runner all show it, read from the stream."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import aiohttp
import pytest
from nats.aio.client import Client

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.console.config import ConsoleConfig
from services.console.links import link
from services.console.service import WebConsole
from shared.contract.client import ContinuityClient
from shared.platform.redis import Redis
from tests.support import make_config, running
from tests.support.console import HEADER
from tests.support.outcomes import moved_to_history, recovered_run, uid
from tests.support.runner import KEYS

pytestmark = pytest.mark.asyncio
WHO = {HEADER: "proxy-hilda"}
LINGER_S = 1.0


@pytest.fixture(scope="module")
async def console(nats_server: NatsServer, redis_server: RedisServer) -> AsyncIterator[str]:
    """The console's address, with the services it reads; an ended run lingers 1 s in Redis."""
    config = make_config(nats_server.url, redis_server.url, runner_keys=KEYS, history_linger_s=LINGER_S)
    app = registry.load(
        "console",
        config=ConsoleConfig(
            port=0,
            identity_header=HEADER,
            session_key=b"h" * 32,
            trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
        ),
    )
    async with (
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation", sweep_interval_s=0.2), config),
        running(registry.load("session-store"), config),
        running(app, config),
    ):
        yield f"http://127.0.0.1:{app.part(WebConsole).port}"


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    store = Redis(redis_server.url)
    await store.connect()
    yield store
    await store.aclose()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=WHO) as r:
        return r.status, await r.text()


async def test_a_run_that_left_redis_is_shown_from_the_history(
    console: str, nc: Client, client: ContinuityClient, redis: Redis
) -> None:
    js = nc.jetstream()
    runner = f"r{uid()}"
    ev = await recovered_run(js, client, runner)
    await moved_to_history(js, redis, ev)

    status, html = await get(f"{console}/runs?{urlencode({'runner_id': runner})}")
    assert status == 200, html
    href, name = re.escape(link("run", ev.run_id)), re.escape(ev.run_id)
    row = rf'<a href="{href}">{name}</a></td>\s*<td>recovered</td>'
    assert re.search(row, html), html

    status, html = await get(f"{console}{link('run', ev.run_id)}")
    assert status == 200, html
    assert f'<span class="id">{ev.run_id}</span>' in html
    assert '<dd id="run-status">recovered</dd>' in html and f'<dd id="run-runner">{runner}</dd>' in html
    # The audit trail's outcome entry, with the status it gave the run.
    assert re.search(r"<strong>outcome</strong> by [^<]*, attempt 1[^<]*, status recovered", html), html

    status, html = await get(f"{console}/outcomes?{urlencode({'since': '1h', 'runner_id': runner})}")
    assert status == 200, html
    assert 'id="outcomes-runs">1<' in html and 'id="status-recovered">1<' in html
