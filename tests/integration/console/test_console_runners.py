"""The runners page against the real services (conftest.py): a runner issued for a tenant of the
test's own, one of its runs decided by the classifier, and a revoked runner; the page shows each
with its tenants, status and usage of its quotas as the session-store reads them, and says that
connections are unknown when the session-store has no monitor user (the live connections are
tested on a cluster in tests/deploy/test_runner_presence.py). In Debian's headless Chromium the
page is reached from the navigation, with no script, and fits a phone."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Page, expect

from shared.contract.tenancy import RunnerRevokeRequest
from shared.platform.config import Config
from tests.support.console import HEADER, Consoles, Runs

pytestmark = pytest.mark.asyncio
WHO = {HEADER: "proxy-olga"}


@dataclass
class Fleet:
    tenant: str
    working: str
    """Issued for the tenant, with one run decided."""
    revoked: str


@pytest.fixture(scope="module")
async def fleet(runs: Runs) -> Fleet:
    tenant = f"runners-{uuid.uuid4().hex[:10]}"
    run = await runs.interrupted(tenant)
    revoked = await runs.runner(tenant)
    await runs.client.runner_revoke(RunnerRevokeRequest(runner_id=revoked, actor="test"))
    return Fleet(tenant, run.runner_id, revoked)


def cell(html: str, runner_id: str, name: str) -> str:
    row = re.search(rf'<tr id="runner-{runner_id}"[^>]*>(.*?)</tr>', html, re.S)
    assert row is not None, f"no row of {runner_id}"
    found = re.search(rf'<td class="[^"]*\b{name}\b[^"]*">(.*?)</td>', row.group(1), re.S)
    assert found is not None, name
    return found.group(1).strip()


async def test_the_page_shows_each_runners_tenants_status_and_usage(consoles: Consoles, fleet: Fleet) -> None:
    limits = Config()
    async with aiohttp.ClientSession() as http, http.get(f"{consoles.url}/runners", headers=WHO) as r:
        status, html = r.status, await r.text()
    assert status == 200
    assert cell(html, fleet.working, "runner-tenants") == fleet.tenant
    assert cell(html, fleet.working, "runner-status") == "active"
    assert cell(html, fleet.working, "runner-runs") == f"1 of {limits.runner_stored_runs}"
    assert re.fullmatch(
        rf"[01] of {limits.runner_event_burst} \(rate .+/s\)", cell(html, fleet.working, "runner-events")
    )
    assert cell(html, fleet.working, "runner-connections") == "unknown"
    assert 'id="runners-connections-unknown"' in html
    assert f'<tr id="runner-{fleet.revoked}" class="attention">' in html
    assert cell(html, fleet.revoked, "runner-status") == "revoked"
    assert cell(html, fleet.revoked, "runner-runs") == f"0 of {limits.runner_stored_runs}"
    # The tenant's own quota: its runs of every runner.
    tenant_runs = re.findall(
        rf'<span class="tenant-name">{fleet.tenant}</span>.*?<td class="tenant-runs">(.*?)</td>', html, re.S
    )
    assert tenant_runs and set(tenant_runs) == {f"1 of {limits.tenant_stored_runs}"}


# In the browser -------------------------------------------------------------------------------


async def test_in_the_browser_the_page_is_reached_from_the_navigation(
    page: Page, fleet: Fleet, artifacts: Path
) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.get_by_role("navigation", name="Main").get_by_role("link", name="Runners").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Runners")
    await expect(page.get_by_role("link", name="Runners")).to_have_attribute("aria-current", "page")
    row = page.locator(f"#runner-{fleet.working}")
    await expect(row.locator("td.runner-status")).to_have_text("active")
    await expect(row.locator("td.runner-runs")).to_have_text(re.compile(r"^1 of \d+$"))
    await expect(page.locator(f"#runner-{fleet.revoked} td.runner-status")).to_have_text("revoked")
    assert await page.locator("script").count() == 0
    await page.screenshot(path=str(artifacts / "runners.png"), full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, "the page fits a phone (its table scrolls in its own box)"
    assert errors == []
