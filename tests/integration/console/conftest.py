"""The console against the real services: NATS and Redis from the session's fixtures, the
session-store, the classifier and the reconciliation service in-process with tenancy enforced
(CONTINUITY_TENANCY=enforced, as in production), and two consoles: one that trusts 127.0.0.1 as
its authenticating proxy (and has a development login), one that trusts only an address the
tests never come from. Runs are made by publishing runners' `resume_failed` events, each runner
issued for its session's tenant first, so every decision shown comes from the real classifier."""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import nats
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from continuity.devstack.servers import NatsServer, RedisServer
from services.console.config import ConsoleConfig
from services.console.service import WebConsole
from tests.support import make_config, running
from tests.support.console import (
    ARTIFACTS,
    CHROMIUM_ARGS,
    DEV_ACTOR,
    DEV_TOKEN,
    HEADER,
    RUNNER_KEY,
    RUNNER_KEY_ID,
    Consoles,
    Runs,
)


@pytest.fixture(scope="module")
async def consoles(nats_server: NatsServer, redis_server: RedisServer) -> AsyncIterator[Consoles]:
    from services import registry

    # A runner's record is read again after 50 ms, so a revocation is in force at once.
    config = replace(
        make_config(nats_server.url, redis_server.url),
        runner_keys={RUNNER_KEY_ID: RUNNER_KEY},
        tenancy="enforced",
        runner_cache_s=0.05,
    )
    base = ConsoleConfig(
        port=0,
        identity_header=HEADER,
        dev_token=DEV_TOKEN,
        dev_actor=DEV_ACTOR,
        session_key=b"s" * 32,
        trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
    )
    trusting = registry.load("console", config=base)
    untrusting = registry.load(
        "console", config=replace(base, trusted_proxies=(ipaddress.ip_network("192.0.2.1/32"),))
    )
    async with (
        running(registry.load("session-store"), config),
        running(registry.load("classifier"), config),
        running(
            registry.load("reconciliation", gauge_interval_s=0.5, outbox_grace_s=1.0, sweep_interval_s=0.2),
            config,
        ),
        running(trusting, config),
        running(untrusting, config),
    ):
        yield Consoles(
            f"http://127.0.0.1:{trusting.part(WebConsole).port}",
            f"http://127.0.0.1:{untrusting.part(WebConsole).port}",
        )


@pytest.fixture(scope="module")
async def runs(consoles: Consoles, nats_server: NatsServer) -> AsyncIterator[Runs]:
    nc = await nats.connect(nats_server.url)
    yield Runs(nc)
    await nc.close()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if shutil.which(executable) is None:
        pytest.fail("chromium is not installed: `make tools` (apt-get install chromium)", pytrace=False)
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest.fixture
async def page(browser: Browser, consoles: Consoles) -> AsyncIterator[Page]:
    """A browser page signed in with the development login (a module may define its own)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, base_url=consoles.url)
    page = await context.new_page()
    await page.goto("/login")
    await page.get_by_label("Development token").fill(DEV_TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#actor")).to_have_text(DEV_ACTOR)
    yield page
    await context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {ARTIFACTS}")
    return ARTIFACTS
