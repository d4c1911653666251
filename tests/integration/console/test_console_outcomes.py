"""The outcomes page against the real services (conftest.py): runs of a tenant of the test's own
decided by the classifier from runners' `resume_failed` events, one recovered by its runner's
signed `turn_completed`, one failed again, one stopped for an operator; the page judges them
from the reconciliation service's `continuity.runs.stats`, the runs page lists the final status
with its time to recovery, and a console whose services do not answer says so with its form.
In Debian's headless Chromium the page is reached from the navigation, filtered, and its chart
drawn with no script; a screenshot is kept under tests/artifacts/console/."""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import nats
import pytest
from playwright.async_api import Page, expect

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.console.config import ConsoleConfig
from services.console.links import link
from services.console.service import WebConsole
from shared.contract.client import ContinuityClient
from shared.contract.events import HarnessInfo
from shared.contract.runs import RunsListRequest, RunsStatsReply, RunsStatsRequest
from tests.support import make_config, running, wait_for
from tests.support.console import (
    GENERATION,
    HEADER,
    RUNNER_KEY,
    RUNNER_KEY_ID,
    Consoles,
    Run,
    Runs,
)

pytestmark = pytest.mark.asyncio
WHO = {HEADER: "proxy-olga"}
HARNESS = HarnessInfo(name="claude-code", version="2.1.332")
HOSTILE = '<script>alert("o")</script>'


@dataclass
class Judged:
    """A tenant's runs, each decided by the real classifier."""

    tenant: str
    recovered: Run
    """Interrupted at attempt 1 (row 4.4.9, retry) and its session then completed a turn."""
    failed: Run
    """Interrupted at attempt 1 and again at attempt 2: its first decision failed, the second
    waits."""
    held: Run
    """Stopped for an operator (row 4.4.4)."""


@pytest.fixture(scope="module")
async def judged(runs: Runs) -> Judged:
    tenant = f"outcomes-{uuid.uuid4().hex[:10]}"
    recovered = await runs.interrupted(tenant, HARNESS)
    await runs.turn_completed(recovered, HARNESS)
    await runs.wait_status(recovered, "recovered")
    await runs.indexed(recovered, "recovered")
    failed = await runs.interrupted(tenant, HARNESS)
    await runs.interrupted(harness=HARNESS, after=failed)

    async def decided_again() -> bool:
        page = await runs.client.runs(RunsListRequest(runner_id=failed.runner_id, limit=10))
        return [(r.attempt, r.status) for r in page.items] == [(2, "retrying")]

    await wait_for(decided_again, what=f"run {failed.run_id}'s second attempt decided and indexed")
    held = await runs.stopped(tenant)
    await runs.indexed(held, "operator")
    return Judged(tenant, recovered, failed, held)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url, headers=WHO) as r:
        return r.status, await r.text()


def cells(html: str, name: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", c) for c in re.findall(rf'<td class="[^"]*\b{name}\b[^"]*">(.*?)</td>', html)
    ]


async def stats(runs: Runs, **filters: str) -> RunsStatsReply:
    """What the reconciliation service answers the CLI for the same filters."""
    client = ContinuityClient(runs.nc, timeout=60)
    return await client.runs_stats(RunsStatsRequest(since_s=3600, bucket_s=300, **filters))


async def test_the_page_judges_a_tenants_decisions_as_the_service_does(
    consoles: Consoles, http: aiohttp.ClientSession, judged: Judged, runs: Runs
) -> None:
    status, html = await get(
        http, f"{consoles.url}/outcomes?{urlencode({'since': '1h', 'tenant': judged.tenant})}"
    )
    assert status == 200, html
    reply = await stats(runs, tenant=judged.tenant)
    assert reply.runs == 3
    assert 'id="outcomes-runs">3<' in html
    assert {s: n for s, n in reply.statuses.items() if n} == {"recovered": 1, "retrying": 1, "operator": 1}
    for name, count in (("recovered", 1), ("retrying", 1), ("operator", 1), ("abandoned", 0), ("running", 0)):
        assert f'id="status-{name}">{count}<' in html, name
    assert 'id="outcomes-abandoned"' not in html  # nothing abandoned: nothing highlighted

    # One line per row, class and harness; the page's lines are the service's.
    expected = sorted(
        reply.rows, key=lambda r: (r.rule, r.failure_class, r.harness, r.harness_version, r.action)
    )
    assert cells(html, "row-rule") == [r.rule for r in expected]
    assert cells(html, "row-decisions") == [str(r.decisions) for r in expected]
    retry = [r for r in reply.rows if r.action == "retry_same_session"]
    assert [(r.rule, r.harness, r.harness_version) for r in retry] == [("4.4.9", "claude-code", "2.1.332")]
    [row] = retry
    assert (row.decisions, row.recovered, row.failed, row.pending, row.success_rate) == (3, 1, 1, 1, 0.5)
    assert row.recovery_p50_s is not None and row.attempts_mean == 1.0
    held = [r for r in reply.rows if r.action == "operator"]
    assert [(r.rule, r.held, r.success_rate) for r in held] == [("4.4.4", 1, None)]
    at = [r.rule for r in expected].index("4.4.9")
    assert cells(html, "row-rate")[at] == "50%" and cells(html, "row-attempts")[at] == "1.00"
    assert cells(html, "row-p50")[at] == f"{row.recovery_p50_s:.1f} s"
    assert cells(html, "row-rate")[[r.rule for r in expected].index("4.4.4")] == "-"

    # One chart: row 4.4.9's two judged decisions, both in this hour; the operator row judged none.
    assert [s.rule for s in reply.series] == ["4.4.9"]
    assert html.count("<svg") == 1 and "1 of 2 judged decisions recovered" in html
    for run in (judged.recovered, judged.failed, judged.held):
        assert run.run_id not in html  # no run is named on the page, nor in its chart
    assert GENERATION not in html


async def test_the_filters_narrow_the_page_and_bad_ones_are_refused_with_the_form(
    consoles: Consoles, http: aiohttp.ClientSession, judged: Judged
) -> None:
    query = {"since": "24h", "tenant": judged.tenant, "runner_id": judged.held.runner_id}
    status, html = await get(http, f"{consoles.url}/outcomes?{urlencode(query)}")
    assert status == 200 and 'id="outcomes-runs">1<' in html and 'id="status-operator">1<' in html
    assert html.count("<svg") == 0 and "No row has points" in html

    nobody = {"tenant": f"none-{uuid.uuid4().hex[:8]}"}
    status, html = await get(http, f"{consoles.url}/outcomes?{urlencode(nobody)}")
    assert status == 200 and 'id="outcomes-empty"' in html and "for these filters" in html

    for bad, words in ((("since", "2y"), "Since is one of"), (("tenant", HOSTILE), "A tenant is")):
        status, html = await get(http, f"{consoles.url}/outcomes?{urlencode([bad])}")
        assert status == 400 and words in html and 'id="outcomes-error"' in html
        assert "<script>alert" not in html and 'action="/outcomes"' in html


async def test_the_runs_page_lists_the_final_statuses_with_the_time_to_recovery(
    consoles: Consoles, http: aiohttp.ClientSession, judged: Judged
) -> None:
    query = {"status": "recovered", "tenant": judged.tenant}
    status, html = await get(http, f"{consoles.url}/runs?{urlencode(query)}")
    assert status == 200 and judged.recovered.run_id in html
    [shown] = cells(html, "run-recovery")
    assert re.fullmatch(r"[0-9]+\.[0-9] s", shown), shown
    options = re.findall(r'<option value="([a-z_]+)"', html.split('id="reason"')[0])
    assert {"recovered", "recovered_replaced", "recovered_fresh", "abandoned"} <= set(options)
    status, html = await get(
        http, f"{consoles.url}/runs?{urlencode({'status': 'retrying', 'tenant': judged.tenant})}"
    )
    assert status == 200 and judged.failed.run_id in html and cells(html, "run-recovery") == [""]

    # The run's timeline: its outcome, with the status it gave and the same time to recovery.
    status, html = await get(http, f"{consoles.url}{link('run', judged.recovered.run_id)}")
    assert status == 200 and '<dd id="run-status">recovered</dd>' in html
    assert f"status recovered, recovered in {shown}" in html


async def test_a_console_whose_services_do_not_answer_says_so_with_its_form(
    fresh_servers: tuple[NatsServer, RedisServer], http: aiohttp.ClientSession
) -> None:
    nats_server, redis_server = fresh_servers  # no reconciliation service answers here
    console = registry.load(
        "console",
        config=ConsoleConfig(
            port=0,
            identity_header=HEADER,
            session_key=b"s" * 32,
            trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
        ),
    )
    async with running(console, make_config(nats_server.url, redis_server.url)):
        base = f"http://127.0.0.1:{console.part(WebConsole).port}"
        status, html = await get(http, f"{base}/outcomes?since=7d&tenant=acme")
    assert status == 503 and "No service answered" in html and 'id="outcomes-error"' in html
    assert '<option value="7d" selected>' in html and 'value="acme"' in html
    assert "outcomes-window" not in html and "<svg" not in html


async def test_abandoned_runs_are_highlighted_and_listed(
    fresh_servers: tuple[NatsServer, RedisServer], http: aiohttp.ClientSession
) -> None:
    """Services of the test's own that wait 1 s for a turn: a run retried with no turn after it is
    abandoned by the reconciliation service's sweep, and the page highlights it."""
    nats_server, redis_server = fresh_servers
    config = replace(
        make_config(nats_server.url, redis_server.url),
        runner_keys={RUNNER_KEY_ID: RUNNER_KEY},
        tenancy="enforced",
        outcome_wait_s=1.0,
    )
    console = registry.load(
        "console",
        config=ConsoleConfig(
            port=0,
            identity_header=HEADER,
            session_key=b"s" * 32,
            trusted_proxies=(ipaddress.ip_network("127.0.0.1/32"),),
        ),
    )
    async with (
        running(registry.load("session-store"), config),
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation"), config),
        running(console, config),
    ):
        nc = await nats.connect(nats_server.url)
        try:
            runs = Runs(nc)
            run = await runs.interrupted("acme", HARNESS)
            await runs.wait_status(run, "abandoned")
            await runs.indexed(run, "abandoned")
            base = f"http://127.0.0.1:{console.part(WebConsole).port}"
            status, html = await get(http, f"{base}/outcomes?since=1h")
            reply = await stats(runs)
            status_page, listed = await get(http, f"{base}/runs?status=abandoned")
        finally:
            await nc.close()
    assert status == 200, html
    assert reply.statuses.get("abandoned") == 1 and 'id="status-abandoned">1<' in html
    assert re.search(r'<tr class="attention"><td><strong>abandoned</strong></td>', html)
    assert re.search(r'id="outcomes-abandoned"><strong>1 abandoned</strong>', html)
    assert 'href="/runs?status=abandoned"' in html
    [row] = reply.rows
    assert (row.rule, row.abandoned, row.success_rate) == ("4.4.9", 1, 0.0)
    assert cells(html, "row-abandoned") == ["1"] and cells(html, "row-rate") == ["0%"]
    assert html.count("<svg") == 1 and "0 of 1 judged decisions recovered" in html
    assert status_page == 200 and run.run_id in listed and cells(listed, "run-recovery") == [""]


# In the browser -------------------------------------------------------------------------------


async def test_in_the_browser_the_page_is_reached_filtered_and_drawn_without_a_script(
    page: Page, judged: Judged, artifacts: Path
) -> None:
    # What the page's policy refused, and any script error (a favicon's 404 is neither).
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.get_by_role("navigation", name="Main").get_by_role("link", name="Outcomes").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Outcomes")
    await page.get_by_label("Since").select_option("1h")
    await page.get_by_label("Tenant").fill(judged.tenant)
    await page.get_by_role("button", name="Show").click()
    await expect(page.locator("#outcomes-runs")).to_have_text("3")
    await expect(page.locator("#status-recovered")).to_have_text("1")
    chart = page.get_by_role("img", name=re.compile(r"^Row 4\.4\.9: success rate per 5 minutes"))
    await expect(chart).to_be_visible()
    box = await chart.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 20
    # Drawn by the stylesheet (CSP: style-src 'self'): the line has no fill and a stroke.
    line = chart.locator("path.chart-line, circle.chart-dot").first
    assert await line.evaluate("e => getComputedStyle(e).fill") in ("none", "rgb(11, 92, 173)")
    assert await page.locator("script").count() == 0
    await expect(page.get_by_role("link", name="Outcomes")).to_have_attribute("aria-current", "page")
    await page.screenshot(path=str(artifacts / "outcomes.png"), full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, "the page fits a phone (its wide table scrolls in its own box)"
    await page.screenshot(path=str(artifacts / "outcomes-phone.png"), full_page=True)
    assert errors == []
    assert GENERATION not in await page.content()

    await page.goto(f"/runs?{urlencode({'tenant': judged.tenant, 'status': 'recovered'})}")
    await expect(page.locator("#runs").get_by_role("link", name=judged.recovered.run_id)).to_be_visible()
    await expect(page.locator("#runs td.run-recovery")).to_have_text(re.compile(r"^[0-9]+\.[0-9] s$"))
