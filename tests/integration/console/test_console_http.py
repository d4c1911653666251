"""The console's refusals at the HTTP level, against the real services: no identity, an
identity header from an address that is not the trusted proxy, a form without the session's
anti-forgery token or from another origin; and the actor recorded is the signed-in identity,
never a form field."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from prometheus_client import REGISTRY

from services.console.runs_query import RUN_STATUSES, count_label
from services.console.web import STATUS_COUNT_CAP
from shared.contracts import RunsListRequest
from tests.support import wait_for
from tests.support.console import DEV_TOKEN, GENERATION, HEADER, Consoles, Runs

pytestmark = pytest.mark.asyncio
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
ROW_LINK = re.compile(r'<td><a href="/runs/([^"]+)">')
NEXT = re.compile(r'<a href="([^"]+)" rel="next">')


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # unsafe: keep cookies set by an IP address (127.0.0.1), as a browser does.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


async def csrf_of(http: aiohttp.ClientSession, url: str, **headers: str) -> str:
    async with http.get(url, headers=headers) as r:
        assert r.status == 200, await r.text()
        match = CSRF.search(await r.text())
        assert match
        return match.group(1)


async def test_without_an_identity_pages_redirect_to_the_login_and_the_stream_is_refused(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{consoles.url}/runs", allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/login?next=/runs"
    async with http.get(f"{consoles.url}/events") as r:
        assert r.status == 401
    async with http.get(f"{consoles.url}/", cookies={"continuity_console": "forged.00"}) as r:
        assert r.url.path == "/login"


async def test_the_login_needs_the_token_and_the_forms_token(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    origin = {"Origin": consoles.url}
    token = await csrf_of(http, f"{consoles.url}/login")
    async with http.post(
        f"{consoles.url}/login", data={"csrf_token": token, "token": "wrong" * 5}, headers=origin
    ) as r:
        assert r.status == 401
    async with http.post(f"{consoles.url}/login", data={"token": DEV_TOKEN}, headers=origin) as r:
        assert r.status == 403
    data = {"csrf_token": token, "token": DEV_TOKEN}
    async with http.post(f"{consoles.url}/login", data=data, headers={"Origin": "http://evil.example"}) as r:
        assert r.status == 403
    async with http.post(f"{consoles.url}/login", data=data, headers=origin) as r:
        assert r.status == 200 and r.url.path == "/"


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("continuity_console_refused_total", {"reason": reason}) or 0.0


async def test_the_identity_header_counts_only_from_the_trusted_proxy(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    before = refused("untrusted_proxy")
    async with http.get(f"{consoles.url}/runs", headers={HEADER: "proxy-bob"}) as r:
        assert r.status == 200 and "proxy-bob" in await r.text()
    async with http.get(f"{consoles.untrusting_url}/runs", headers={HEADER: "proxy-bob"}) as r:
        assert r.status == 403 and "proxy-bob" not in await r.text()
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    assert refused("untrusted_proxy") == before + 1
    async with http.get(f"{consoles.url}/runs", headers={HEADER: "bob <script>"}) as r:
        assert r.status == 403


async def test_a_form_without_its_token_or_from_elsewhere_is_refused_and_changes_nothing(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.reconciling()
    who = {HEADER: "proxy-carol"}
    page = f"{consoles.url}/reconciliations/{run.run_id}"
    action = f"{page}/resolve"
    token = await csrf_of(http, page, **who)
    form = {"outcome": "completed", "evidence": "checked", "csrf_token": token, "actor": "mallory"}
    async with http.post(
        action, data={**form, "csrf_token": "0" * 64}, headers={**who, "Origin": consoles.url}
    ) as r:
        assert r.status == 403
    async with http.post(action, data=form, headers={**who, "Origin": "http://evil.example"}) as r:
        assert r.status == 403
    async with http.post(action, data=form, headers=who) as r:  # neither Origin nor Referer
        assert r.status == 403
    async with aiohttp.ClientSession() as stranger:  # another browser: no session, a copied token
        async with stranger.post(action, data=form, headers={**who, "Origin": consoles.url}) as r:
            assert r.status == 403
    assert (await runs.client.reconciliation(run.run_id)).status == "open"

    async with http.post(action, data=form, headers={**who, "Origin": consoles.url}) as r:
        assert r.status == 200 and r.url.query.get("done") == "resolved"
    record = await runs.client.reconciliation(run.run_id)
    assert record.resolution is not None and record.resolution.actor == "proxy-carol"


async def test_no_page_shows_a_generation_value(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped()
    for path in ("/", "/runs", f"/runs/{run.run_id}", "/dead"):
        async with http.get(f"{consoles.url}{path}", headers={HEADER: "proxy-dan"}) as r:
            text = await r.text()
            assert r.status == 200 and GENERATION not in text, path
    async with http.get(f"{consoles.url}/runs/{run.run_id}", headers={HEADER: "proxy-dan"}) as r:
        assert "stored, trusted" in await r.text()


async def test_a_retry_needs_its_confirmation(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped()
    who = {HEADER: "proxy-erin", "Origin": consoles.url}
    page = f"{consoles.url}/runs/{run.run_id}"
    token = await csrf_of(http, page, **who)
    async with http.post(f"{page}/retry", data={"csrf_token": token}, headers=who) as r:
        assert r.status == 400
    assert (await runs.client.run(run.run_id)).status == "operator"
    async with http.post(f"{page}/retry", data={"csrf_token": token, "confirm": "yes"}, headers=who) as r:
        assert r.status == 200
    assert (await runs.client.run(run.run_id)).status == "continued"
    async with http.post(f"{page}/retry", data={"csrf_token": token, "confirm": "yes"}, headers=who) as r:
        assert r.status == 409


async def test_bad_run_ids_and_unknown_runs_are_clear_errors(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{consoles.url}/runs/not%20a%20token", headers={HEADER: "proxy-fay"}) as r:
        assert r.status == 400
    async with http.get(f"{consoles.url}/runs/run-unknown-1", headers={HEADER: "proxy-fay"}) as r:
        assert r.status == 404 and "No such run" in await r.text()


async def runs_page(http: aiohttp.ClientSession, url: str) -> tuple[list[str], str | None]:
    """The run ids a runs page lists, in order, and its "next page" link."""
    async with http.get(url, headers={HEADER: "proxy-gus"}) as r:
        text = await r.text()
        assert r.status == 200, text
    table = text.split('<table id="runs">', 1)[1].split("</table>", 1)[0] if 'id="runs"' in text else ""
    found = NEXT.search(text)
    return ROW_LINK.findall(table), html.unescape(found.group(1)) if found else None


async def test_the_runs_page_lists_the_index_with_the_clis_filters_and_pages_with_its_cursor(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    stopped = [await runs.stopped(tenant) for _ in range(3)]
    pending = await runs.reconciling(tenant)
    for run in stopped:
        await runs.indexed(run, "operator")
    await runs.indexed(pending, "reconciling")
    everyone = [r.run_id for r in (*stopped, pending)]
    base = consoles.url

    first, next_link = await runs_page(http, f"{base}/runs?tenant={tenant}&limit=3")
    assert first == everyone[:3] and next_link is not None  # oldest last decision first
    target = urlsplit(next_link)
    assert target.path == "/runs"
    query = parse_qs(target.query)
    assert sorted(query) == ["cursor", "limit", "tenant"]  # the filters and the opaque cursor only
    assert GENERATION not in next_link and pending.session.conversation_id not in next_link
    second, after = await runs_page(http, f"{base}{next_link}")
    assert second == everyone[3:] and after is None

    by = f"{base}/runs?tenant={tenant}"
    assert (await runs_page(http, f"{by}&status=operator"))[0] == everyone[:3]
    assert (await runs_page(http, f"{by}&status=reconciling"))[0] == [pending.run_id]
    assert (await runs_page(http, f"{by}&reason=native_provider_side_effect_pending"))[0] == [pending.run_id]
    assert (await runs_page(http, f"{by}&runner_id={stopped[1].runner_id}"))[0] == [stopped[1].run_id]
    assert (await runs_page(http, f"{by}&newer_than=1h"))[0] == everyone
    assert (await runs_page(http, f"{by}&older_than=1h"))[0] == []
    assert (await runs_page(http, f"{base}/runs?tenant=t-nobody-{uuid.uuid4().hex[:6]}"))[0] == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=bogus-status", "Unknown status."),
        ("runner_id=bad%20runner", "A runner id is"),
        ("tenant=" + "t" * 200, "A tenant is"),
        ("tenant=%3Cscript%3E", "A tenant is"),
        ("reason=bogus-reason", "Unknown reason."),
        ("older_than=15", "Ages are a number and a unit"),
        ("newer_than=2weeks", "Ages are a number and a unit"),
        ("cursor=bogus-cursor", "start again from the first page"),
        ("cursor=" + "c" * 2000, "start again from the first page"),
    ],
)
async def test_bad_runs_filters_and_cursors_are_clear_errors_that_repeat_nothing(
    consoles: Consoles, http: aiohttp.ClientSession, query: str, message: str
) -> None:
    async with http.get(f"{consoles.url}/runs?{query}", headers={HEADER: "proxy-hal"}) as r:
        text = await r.text()
        assert r.status == 400 and message in text
    value = query.split("=", 1)[1]
    assert (len(value) < 5 or value not in text) and "bogus" not in text and "<script>" not in text


def counts(text: str) -> dict[str, str]:
    return dict(re.findall(r'<td class="num" id="count-([a-z]+)">([0-9]+\+?)</td>', text))


async def test_the_overview_counts_runs_by_status_from_the_index(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    async def shown() -> dict[str, str]:
        async with http.get(f"{consoles.url}/", headers={HEADER: "proxy-ivy"}) as r:
            assert r.status == 200
            return counts(await r.text())

    before = await shown()
    assert sorted(before) == sorted(RUN_STATUSES)
    for status in RUN_STATUSES:
        listed = await runs.client.runs_upto(RunsListRequest(status=status, limit=1000))
        assert before[status] == count_label(len(listed.items), STATUS_COUNT_CAP), status
    assert not before["operator"].endswith("+"), "this module makes fewer than 100 stopped runs"
    run = await runs.stopped()
    await runs.indexed(run, "operator")

    async def one_more() -> bool:
        return (await shown())["operator"] == str(int(before["operator"]) + 1)

    await wait_for(one_more, what="the overview counting the new stopped run")
