"""The console's refusals at the HTTP level, against the real services: no identity, an
identity header from an address that is not the trusted proxy, a form without the session's
anti-forgery token or from another origin; and the actor recorded is the signed-in identity,
never a form field."""

from __future__ import annotations

import asyncio
import html
import json
import re
import uuid
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import aiohttp
import nats
import pytest
import redis.asyncio as aioredis
from nats.js.api import StreamConfig
from nats.js.errors import BadBucketError
from prometheus_client import REGISTRY
from yarl import URL

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.console.config import ConsoleConfig
from services.console.identity import COOKIE
from services.console.links import session_link
from services.console.pages.overview import LIVE_SHOWN, STATUS_COUNT_CAP
from services.console.revocations import BUCKET, Revocations
from services.console.runs_query import RUN_STATUSES, count_label
from services.console.service import WebConsole
from services.console.streams import recent_decisions
from shared.contract import GetRequest, RunsListRequest, SessionRef, subjects
from shared.contract.tenancy import RunnerRevokeRequest, SessionAuditRequest
from shared.records import keys
from tests.support import make_config, read_stream, running, wait_for
from tests.support.console import DEV_ACTOR, DEV_TOKEN, GENERATION, HEADER, Consoles, Runs

pytestmark = pytest.mark.asyncio
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
ROW_LINK = re.compile(r'<td><a href="(/run\?id=[^"]+)">')
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
    page = f"{consoles.url}{page_of('reconciliation', run.run_id)}"
    action = f"{consoles.url}/reconciliation/resolve?{urlencode({'id': run.run_id})}"
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
    for path in ("/", "/runs", page_of("run", run.run_id), "/dead"):
        async with http.get(f"{consoles.url}{path}", headers={HEADER: "proxy-dan"}) as r:
            text = await r.text()
            assert r.status == 200 and GENERATION not in text, path
    async with http.get(f"{consoles.url}{page_of('run', run.run_id)}", headers={HEADER: "proxy-dan"}) as r:
        assert "stored, trusted" in await r.text()


async def test_a_retry_needs_its_confirmation(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped()
    who = {HEADER: "proxy-erin", "Origin": consoles.url}
    token = await csrf_of(http, f"{consoles.url}{page_of('run', run.run_id)}", **who)
    retry = f"{consoles.url}/run/retry?{urlencode({'id': run.run_id})}"
    async with http.post(retry, data={"csrf_token": token}, headers=who) as r:
        assert r.status == 400
    assert (await runs.client.run(run.run_id)).status == "operator"
    async with http.post(retry, data={"csrf_token": token, "confirm": "yes"}, headers=who) as r:
        assert r.status == 200
    assert (await runs.client.run(run.run_id)).status == "continued"
    async with http.post(retry, data={"csrf_token": token, "confirm": "yes"}, headers=who) as r:
        assert r.status == 409


async def test_bad_run_ids_and_unknown_runs_are_clear_errors(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{consoles.url}/run?id=not%20a%20token", headers={HEADER: "proxy-fay"}) as r:
        assert r.status == 400
    async with http.get(f"{consoles.url}/run?id=run-unknown-1", headers={HEADER: "proxy-fay"}) as r:
        assert r.status == 404 and "No such run" in await r.text()


async def runs_page(http: aiohttp.ClientSession, url: str) -> tuple[list[str], str | None]:
    """The run ids a runs page lists, in order, and its "next page" link."""
    async with http.get(url, headers={HEADER: "proxy-gus"}) as r:
        text = await r.text()
        assert r.status == 200, text
    table = text.split('<table id="runs">', 1)[1].split("</table>", 1)[0] if 'id="runs"' in text else ""
    found = NEXT.search(text)
    links = [html.unescape(link) for link in ROW_LINK.findall(table)]
    return links, html.unescape(found.group(1)) if found else None


async def test_the_runs_page_lists_the_index_with_the_clis_filters_and_pages_with_its_cursor(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    stopped = [await runs.stopped(tenant) for _ in range(3)]
    pending = await runs.reconciling(tenant)
    for run in stopped:
        await runs.indexed(run, "operator")
    await runs.indexed(pending, "reconciling")
    everyone = [page_of("run", r.run_id) for r in (*stopped, pending)]
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
    assert (await runs_page(http, f"{by}&status=reconciling"))[0] == everyone[3:]
    assert (await runs_page(http, f"{by}&reason=native_provider_side_effect_pending"))[0] == everyone[3:]
    assert (await runs_page(http, f"{by}&runner_id={stopped[1].runner_id}"))[0] == [everyone[1]]
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
    return dict(re.findall(r'<td class="num" id="count-([a-z_]+)">([0-9]+\+?)</td>', text))


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


def page_of(kind: str, run_id: str) -> str:
    """A run's page (`run`) or its reconciliation's (`reconciliation`): the id in the query."""
    return f"/{kind}?{urlencode({'id': run_id})}"


@pytest.mark.parametrize(
    "target",
    ["/\t/evil.example", "/%09/evil.example", "/\\evil.example", "//evil.example", "/%2F%2Fevil.example"],
)
async def test_the_login_never_sends_the_browser_off_the_console(consoles: Consoles, target: str) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        token = await csrf_of(http, f"{consoles.url}/login?{urlencode({'next': target})}")
        form = {"csrf_token": token, "token": DEV_TOKEN, "next": target}
        async with http.post(
            f"{consoles.url}/login", data=form, headers={"Origin": consoles.url}, allow_redirects=False
        ) as r:
            assert r.status == 303 and r.headers["Location"] == "/"


async def resolve_form(
    http: aiohttp.ClientSession, url: str, run_id: str, evidence: str, outcome: str = "completed"
) -> aiohttp.ClientResponse:
    """Post the resolve form of `run_id`'s reconciliation as its page names it."""
    who = {HEADER: "proxy-jo"}
    async with http.get(f"{url}{page_of('reconciliation', run_id)}", headers=who) as r:
        text = await r.text()
        assert r.status == 200, text
    action = html.unescape(re.search(r'<form method="post" action="([^"]+/resolve[^"]*)"', text).group(1))  # type: ignore[union-attr]
    token = CSRF.search(text).group(1)  # type: ignore[union-attr]
    form = {"csrf_token": token, "outcome": outcome, "evidence": evidence}
    return await http.post(f"{url}{action}", data=form, headers={**who, "Origin": url})


async def test_the_longest_evidence_of_four_byte_characters_is_recorded(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.reconciling()
    # 2000 characters of 4-byte UTF-8 (12 bytes each once percent-encoded), line breaks sent as
    # CRLF as browsers send them, each one character like the browser's own counter.
    evidence = "\r\n".join(["𠮷" * 999, "𠮷" * 1000])
    async with await resolve_form(http, consoles.url, run.run_id, evidence) as r:
        assert r.status == 200 and r.url.query.get("done") == "resolved", await r.text()
    record = await runs.client.reconciliation(run.run_id)
    assert record.resolution is not None and record.resolution.evidence == evidence.replace("\r\n", "\n")


async def test_evidence_over_the_limit_is_refused_with_the_text_kept(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.reconciling()
    evidence = "確認済み" * 501  # 2004 characters
    async with await resolve_form(http, consoles.url, run.run_id, evidence) as r:
        text = await r.text()
        assert r.status == 400 and "2004 characters; at most 2000" in text
        assert 'name="evidence"' in text and evidence in text
        assert 'value="completed" required checked' in text
        assert 'maxlength="4000"' in text  # UTF-16 units: 2000 characters outside the BMP fit
    async with await resolve_form(http, consoles.url, run.run_id, evidence, outcome="") as r:
        text = await r.text()
        assert r.status == 400 and "Choose what the tool call did." in text and evidence in text
    async with await resolve_form(http, consoles.url, run.run_id, " \r\n ", outcome="mixed") as r:
        text = await r.text()
        assert r.status == 400 and "Say how the outcome was checked." in text
        assert 'value="mixed" required checked' in text
    # More than any browser sends for the textarea: refused with the form, not a bare status.
    async with await resolve_form(http, consoles.url, run.run_id, "x" * 70_000) as r:
        text = await r.text()
        assert r.status == 413 and 'id="form-error"' in text and 'name="evidence"' in text
        assert "nothing of it was kept" in text
    assert (await runs.client.reconciliation(run.run_id)).status == "open"


def cookie_of(http: aiohttp.ClientSession, url: str) -> str:
    return http.cookie_jar.filter_cookies(URL(url))[COOKIE].value


async def test_a_signed_out_session_is_refused_by_every_console(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    origin = {"Origin": consoles.url}
    token = await csrf_of(http, f"{consoles.url}/login")
    async with http.post(
        f"{consoles.url}/login", data={"csrf_token": token, "token": DEV_TOKEN}, headers=origin
    ) as r:
        assert r.status == 200 and r.url.path == "/"
    copied = cookie_of(http, consoles.url)
    for base in (consoles.url, consoles.untrusting_url):  # two consoles, one session key
        async with aiohttp.ClientSession() as thief:
            async with thief.get(f"{base}/runs", cookies={COOKIE: copied}, allow_redirects=False) as r:
                assert r.status == 200 and DEV_ACTOR in await r.text()
    before = refused("session_revoked")
    token = await csrf_of(http, f"{consoles.url}/runs")
    async with http.post(
        f"{consoles.url}/logout", data={"csrf_token": token}, headers=origin, allow_redirects=False
    ) as r:
        assert r.status == 303 and r.headers["Location"] == "/login"
    for base in (consoles.url, consoles.untrusting_url):
        async with aiohttp.ClientSession() as thief:
            async with thief.get(f"{base}/runs", cookies={COOKIE: copied}, allow_redirects=False) as r:
                assert r.status == 303 and r.headers["Location"] == "/login?next=/runs"
    assert refused("session_revoked") == before + 2
    # Kept in JetStream as long as a cookie can be valid, for every replica (8 hours here).
    info = await runs.js.stream_info(f"KV_{BUCKET}")
    assert info.config.max_age == 8 * 3600 and info.config.max_msgs_per_subject == 1
    assert info.config.num_replicas == 1  # CONTINUITY_STREAM_REPLICAS of the tests


async def test_wrong_tokens_are_slowed_and_the_right_one_works_after_the_window(
    consoles: Consoles, nats_server: NatsServer, redis_server: RedisServer
) -> None:
    console = registry.load(
        "console",
        config=ConsoleConfig.from_env(
            {
                "CONTINUITY_CONSOLE_PORT": "0",
                "CONTINUITY_CONSOLE_DEV_TOKEN": DEV_TOKEN,
                "CONTINUITY_CONSOLE_LOGIN_FAILURES": "3",
                "CONTINUITY_CONSOLE_LOGIN_WINDOW_S": "2",
            }
        ),
    )
    async with (
        running(console, make_config(nats_server.url, redis_server.url)),
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
    ):
        base = f"http://127.0.0.1:{console.part(WebConsole).port}"
        token = await csrf_of(http, f"{base}/login")
        before = refused("login_throttled")

        async def login(typed: str) -> tuple[int, str, str | None]:
            data = {"csrf_token": token, "token": typed}
            async with http.post(
                f"{base}/login", data=data, headers={"Origin": base}, allow_redirects=False
            ) as r:
                return r.status, await r.text(), r.headers.get("Retry-After")

        for _ in range(3):
            assert (await login("wrong" * 5))[0] == 401
        status, text, retry_after = await login("wrong" * 5)
        assert status == 429 and "Too many wrong tokens" in text
        assert retry_after is not None and 1 <= int(retry_after) <= 2
        assert (await login(DEV_TOKEN))[0] == 429  # refused unchecked while the window lasts
        assert refused("login_throttled") == before + 2

        async def signed_in() -> bool:
            return (await login(DEV_TOKEN))[0] == 303

        await wait_for(signed_in, timeout=10, interval=0.25, what="the right token accepted after the window")


async def test_a_stopped_run_shows_its_failure_class_and_the_rule_that_stopped_it(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped()
    async with http.get(f"{consoles.url}{page_of('run', run.run_id)}", headers={HEADER: "proxy-kim"}) as r:
        text = await r.text()
        assert r.status == 200, text
    assert re.search(r'id="failure-class">\s*event_replay_conflict\s*<', text)
    rule = re.search(r'id="rule">([^<]+)<', text)
    assert rule and "replay" in rule.group(1) and "4.4" in rule.group(1)


async def test_a_retry_refused_for_a_reconciliation_links_to_it(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped()
    who = {HEADER: "proxy-lee", "Origin": consoles.url}
    async with http.get(f"{consoles.url}/runs/{run.run_id}", headers=who) as r:
        text = await r.text()  # the page as an operator opened it, with its Retry form
    action = html.unescape(re.search(r'<form method="post" action="([^"]+/retry[^"]*)"', text).group(1))  # type: ignore[union-attr]
    token = CSRF.search(text).group(1)  # type: ignore[union-attr]
    await runs.reconciling(after=run)  # meanwhile the runner's next attempt waits on a tool call
    async with http.post(
        f"{consoles.url}{action}", data={"csrf_token": token, "confirm": "yes"}, headers=who
    ) as r:
        text = await r.text()
        assert r.status == 409 and "waits on a reconciliation" in text
    link = re.search(r'<a id="next-step" href="([^"]+)">', text)
    assert link is not None
    async with http.get(f"{consoles.url}{html.unescape(link.group(1))}", headers=who) as r:
        text = await r.text()
        assert r.status == 200 and "Record what happened" in text and run.run_id in text


async def test_run_links_carry_the_run_id_in_their_query(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    # A browser resolves the dot-segments `.` and `..` of a path (`/runs/..` is `/`): a run id,
    # which may be `..`, travels in the query instead, where nothing is resolved.
    run = await runs.stopped(run_id=f"..{uuid.uuid4().hex[:8]}:x.")
    await runs.indexed(run, "operator")
    who = {HEADER: "proxy-max"}
    listed, _ = await runs_page(http, f"{consoles.url}/runs?runner_id={run.runner_id}")
    assert listed == [page_of("run", run.run_id)]
    async with http.get(f"{consoles.url}{listed[0]}", headers=who) as r:
        assert r.status == 200 and f'<span class="id">{run.run_id}</span>' in await r.text()
    async with http.get(f"{consoles.url}/runs?run_id=..", headers=who, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/run?id=.."
    async with http.get(f"{consoles.url}/runs/{run.run_id}", headers=who) as r:  # an older link
        assert r.status == 200 and r.url.path == "/run" and r.url.query["id"] == run.run_id
    async with http.get(f"{consoles.url}/reconciliations/{run.run_id}", headers=who) as r:
        assert r.url.path == "/reconciliation" and r.url.query["id"] == run.run_id
        assert [h.status for h in r.history] == [301]
        assert r.status == 404  # a run stopped for an operator has no reconciliation
    async with http.get(f"{consoles.url}/run", headers=who) as r:
        assert r.status == 400 and "not a run id" in await r.text()


async def test_while_signed_out_sessions_cannot_be_looked_up_signed_in_pages_are_refused(
    fresh_servers: tuple[NatsServer, RedisServer],
) -> None:
    nats_server, redis_server = fresh_servers  # servers of the test's own: NATS is stopped below
    console = registry.load(
        "console",
        config=ConsoleConfig(port=0, dev_token=DEV_TOKEN, dev_actor=DEV_ACTOR, session_key=b"s" * 32),
    )
    async with (
        running(console, make_config(nats_server.url, redis_server.url)),
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
    ):
        base, origin = (
            f"http://127.0.0.1:{console.part(WebConsole).port}",
            {"Origin": f"http://127.0.0.1:{console.part(WebConsole).port}"},
        )
        token = await csrf_of(http, f"{base}/login")
        login = {"csrf_token": token, "token": DEV_TOKEN}
        async with http.post(f"{base}/login", data=login, headers=origin, allow_redirects=False) as r:
            assert r.status == 303  # to the overview, which needs services this test does not run
        token = await csrf_of(http, f"{base}/login")

        async def signed_in() -> bool:
            async with http.get(f"{base}/dead", allow_redirects=False) as r:
                return r.status == 200 and DEV_ACTOR in await r.text()

        assert await signed_in()
        nats_server.stop()
        page, sign_out = await asyncio.gather(
            http.get(f"{base}/dead"), http.post(f"{base}/logout", data={"csrf_token": token}, headers=origin)
        )
        for r in (page, sign_out):
            async with r:
                assert r.status == 503 and "cannot be checked" in await r.text()
        nats_server.start()
        await wait_for(signed_in, timeout=20, interval=0.2, what="the session checked again")  # kept
        async with http.post(f"{base}/logout", data={"csrf_token": token}, headers=origin) as r:
            assert r.status == 200 and r.url.path == "/login"
        assert not await signed_in()


async def test_a_bucket_that_cannot_hold_revocations_fails_the_start(
    fresh_servers: tuple[NatsServer, RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    nats_server, _ = fresh_servers
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        # A stream of the bucket's name that keeps no message per key: not a key-value bucket.
        await js.add_stream(
            StreamConfig(name=f"KV_{BUCKET}", subjects=[f"$KV.{BUCKET}.>"], max_msgs_per_subject=-1)
        )
        with pytest.raises(BadBucketError):
            await Revocations.open(js, ttl_s=3600, replicas=1)
    finally:
        await nc.close()
    assert "console_revocations_unavailable" in caplog.text


# Tenancy: tenants and owners on the pages, the session page and its transfer ---------------

OPTION = re.compile(r'<option value="([^"]+)">')


def field(text: str, element_id: str) -> str:
    """The text of the element `element_id` of a page, unescaped, its markup removed."""
    found = re.search(rf'id="{element_id}">(.*?)</d[dt]>', text, re.S)
    assert found, element_id
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


async def page_text(http: aiohttp.ClientSession, url: str, who: str, status: int = 200) -> str:
    async with http.get(url, headers={HEADER: who}) as r:
        text = await r.text()
        assert r.status == status, text
        return text


def transfer_action(text: str) -> str:
    found = re.search(r'<form method="post" action="([^"]+/transfer[^"]*)"', text)
    assert found, "the page has no transfer form"
    return html.unescape(found.group(1))


async def test_a_run_page_shows_its_tenant_and_owner_and_links_its_session_page(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped(f"t-{uuid.uuid4().hex[:10]}")
    text = await page_text(http, f"{consoles.url}{page_of('run', run.run_id)}", "proxy-nia")
    assert field(text, "run-tenant") == run.session.tenant
    assert field(text, "session-owner") == f"{run.runner_id}, the run's runner"
    found = re.search(r'<a id="session-link" href="([^"]+)">', text)
    assert found
    target = urlsplit(html.unescape(found.group(1)))
    assert target.path == "/session"
    assert parse_qs(target.query) == {
        "tenant": [run.session.tenant],
        "conversation_id": [run.session.conversation_id],
        "agent_id": [run.session.agent_id],
    }

    text = await page_text(http, f"{consoles.url}{html.unescape(found.group(1))}", "proxy-nia")
    assert field(text, "session-tenant") == run.session.tenant
    assert field(text, "session-conversation") == run.session.conversation_id
    assert field(text, "session-owner") == run.runner_id
    assert field(text, "session-handle") == "ns-1"
    assert field(text, "session-generation") == "stored, trusted"
    assert "c-1" in text and "dsh-pro" in text  # the cursor and the model
    view = await runs.client.get(GetRequest(session=run.session))
    assert field(text, "session-epoch") == str(view.epoch)
    assert field(text, "session-revision") == str(view.revision)
    assert f"<strong>bound</strong> by {run.runner_id}: from no owner to {run.runner_id}" in text
    assert GENERATION not in text


async def test_the_transfer_lists_only_active_runners_of_the_sessions_tenant(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    run = await runs.stopped(tenant)
    same, both = await runs.runner(tenant), await runs.runner("t-other", tenant)
    other, revoked = await runs.runner("t-other"), await runs.runner(tenant)
    await runs.client.runner_revoke(RunnerRevokeRequest(runner_id=revoked, actor="tests-issuer"))
    text = await page_text(http, f"{consoles.url}{session_link(run.session)}", "proxy-oli")
    form = text.split('id="transfer-title"', 1)[1]
    # Not the owner itself, not another tenant's runner, not a revoked one.
    assert sorted(OPTION.findall(form)) == sorted([same, both])
    assert other not in text and revoked not in text

    lonely = await runs.stopped(f"t-{uuid.uuid4().hex[:10]}")
    text = await page_text(http, f"{consoles.url}{session_link(lonely.session)}", "proxy-oli")
    assert 'id="no-runner"' in text and "/transfer" not in text


async def test_a_transfer_moves_the_session_as_the_signed_in_operator_and_is_audited(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    run = await runs.stopped(tenant)
    heir, stranger = await runs.runner(tenant), await runs.runner(f"t-{uuid.uuid4().hex[:10]}")
    who = {HEADER: "proxy-pat", "Origin": consoles.url}
    text = await page_text(http, f"{consoles.url}{session_link(run.session)}", "proxy-pat")
    action, token = f"{consoles.url}{transfer_action(text)}", CSRF.search(text).group(1)  # type: ignore[union-attr]
    before = await runs.client.get(GetRequest(session=run.session))

    async def post(**form: str) -> tuple[int, str]:
        async with http.post(action, data={"csrf_token": token, **form}, headers=who) as r:
            return r.status, await r.text()

    status, text = await post(runner_id=heir)
    assert status == 400 and "Confirm the transfer" in text
    status, text = await post(confirm="yes")
    assert status == 400 and "Choose the runner" in text
    status, text = await post(runner_id=heir, confirm="yes", csrf_token="0" * 64)
    assert status == 403
    status, text = await post(runner_id=stranger, confirm="yes")  # issued for another tenant
    assert status == 409 and f"Runner {stranger} is not an active runner issued for tenant {tenant}" in text
    assert "nothing was transferred" in text
    back = re.search(r'<a id="next-step" href="([^"]+)">Back to the session</a>', text)
    assert back and html.unescape(back.group(1)) == session_link(run.session)
    assert await runs.client.get(GetRequest(session=run.session)) == before

    # The actor is the signed-in identity: a form field naming another is ignored.
    async with http.post(
        action,
        data={"csrf_token": token, "runner_id": heir, "confirm": "yes", "actor": "mallory"},
        headers=who,
    ) as r:
        text = await r.text()
        assert r.status == 200 and r.url.path == "/session" and r.url.query["done"] == "transferred"
    after = await runs.client.get(GetRequest(session=run.session))
    assert (after.owner, after.epoch, after.revision) == (heir, before.epoch + 1, before.revision + 1)
    assert field(text, "session-owner") == heir and field(text, "session-epoch") == str(after.epoch)
    assert f"runner {heir} owns this session now, at epoch {after.epoch}" in text
    trail = (await runs.client.ownership(SessionAuditRequest(session=run.session))).items
    assert [(e.kind, e.actor, e.previous_owner, e.owner) for e in trail] == [
        ("bound", run.runner_id, None, run.runner_id),
        ("transferred", "proxy-pat", run.runner_id, heir),
    ]
    assert (
        f"<strong>transferred</strong> by proxy-pat: from {run.runner_id} to {heir}, epoch {after.epoch}"
        in text
    )

    # The run's page says its runner no longer owns the session.
    text = await page_text(http, f"{consoles.url}{page_of('run', run.run_id)}", "proxy-pat")
    assert field(text, "session-owner").startswith(f"{heir}, not the run's runner")

    # Giving it to its owner again changes nothing, and says so.
    status, text = await post(runner_id=heir, confirm="yes")
    assert status == 200 and "already owned this session: nothing changed" in text
    assert await runs.client.get(GetRequest(session=run.session)) == after

    # A session with no record: its page says so, and a transfer of it is refused.
    nobody = SessionRef(tenant=tenant, conversation_id=f"c-{uuid.uuid4().hex[:8]}", agent_id="codex")
    text = await page_text(http, f"{consoles.url}{session_link(nobody)}", "proxy-pat", status=404)
    assert 'id="no-record"' in text and "/transfer" not in text
    async with http.post(
        f"{consoles.url}{session_link(nobody, 'session/transfer')}",
        data={"csrf_token": token, "runner_id": heir, "confirm": "yes"},
        headers=who,
    ) as r:
        text = await r.text()
        assert r.status == 404 and "No saved session is known" in text and "Nothing was transferred" in text


def console_label_values() -> set[str]:
    """Every label value of the console's metrics in this process."""
    return {
        value
        for family in REGISTRY.collect()
        if family.name.startswith("continuity_console")
        for sample in family.samples
        for value in sample.labels.values()
    }


async def test_the_consoles_metric_labels_name_no_runner_tenant_or_session(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    run = await runs.stopped(tenant)
    heir = await runs.runner(tenant)
    text = await page_text(http, f"{consoles.url}{session_link(run.session)}", "proxy-quinn")
    token = CSRF.search(text).group(1)  # type: ignore[union-attr]
    form = {"csrf_token": token, "runner_id": heir, "confirm": "yes"}
    async with http.post(
        f"{consoles.url}{transfer_action(text)}",
        data=form,
        headers={HEADER: "proxy-quinn", "Origin": consoles.url},
    ) as r:
        assert r.status == 200 and r.url.query["done"] == "transferred"
    await page_text(http, f"{consoles.url}{page_of('run', run.run_id)}", "proxy-quinn")
    labels = console_label_values()
    assert {"session", "transfer", "run"} <= labels  # the pages, by their route's name
    named = {run.runner_id, heir, tenant, run.session.conversation_id, run.run_id}
    assert not {value for value in labels if any(n in value for n in named)}


@pytest.mark.parametrize(
    "query",
    [
        "tenant=%3Cscript%3Ealert(1)%3C%2Fscript%3E&conversation_id=c&agent_id=a",
        "tenant=acme&conversation_id=%252e%252e&agent_id=a",  # `%2e%2e` once decoded: not a token
        "tenant=acme&conversation_id=c&agent_id=..%2F..",
        "tenant=acme&conversation_id=" + "c" * 129 + "&agent_id=a",
        "tenant=acme&conversation_id=c",
        "tenant=acme&conversation_id=c%0A&agent_id=a",
    ],
)
async def test_a_session_page_refuses_what_is_not_a_session_and_repeats_none_of_it(
    consoles: Consoles, http: aiohttp.ClientSession, query: str
) -> None:
    async with http.get(
        URL(f"{consoles.url}/session?{query}", encoded=True), headers={HEADER: "proxy-ray"}
    ) as r:
        text = await r.text()
        assert r.status == 400 and "That is not a session" in text
    assert "<script>" not in text and "%2e" not in text and "..%2F" not in text and "c" * 129 not in text


async def test_hostile_session_ids_are_escaped_and_their_page_opens(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    # Tokens a browser would resolve away in a path, or read as more than text.
    session = SessionRef(tenant="..", conversation_id=".", agent_id=f"..:{uuid.uuid4().hex[:8]}-._")
    run = await runs.stopped(session=session)
    text = await page_text(http, f"{consoles.url}{page_of('run', run.run_id)}", "proxy-sam")
    found = re.search(r'<a id="session-link" href="([^"]+)">', text)
    assert found and html.unescape(found.group(1)) == session_link(session)
    # The same page however the ids are percent-encoded in the query.
    spelled = (
        f"/session?tenant=%2E%2E&conversation_id=%2e&agent_id={quote(session.agent_id, safe='')}",
        html.unescape(found.group(1)),
    )
    for path in spelled:
        async with http.get(URL(f"{consoles.url}{path}", encoded=True), headers={HEADER: "proxy-sam"}) as r:
            text = await r.text()
            assert r.status == 200, text
        assert field(text, "session-tenant") == ".." and field(text, "session-conversation") == "."
        assert field(text, "session-agent") == session.agent_id
        assert field(text, "session-owner") == run.runner_id


# Refusals share the decisions stream (contract 10.5): they are not decisions of a run. -------


async def live_decisions(response: aiohttp.ClientResponse, until: str, seen: list[dict[str, object]]) -> None:
    """Read the `/events` stream into `seen` until a decision of the run `until` arrives."""
    async with asyncio.timeout(20):
        event = ""
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                assert event == "decision", line
                seen.append(json.loads(line.removeprefix("data: ")))
                if seen[-1]["run_id"] == until:
                    return


async def test_refusals_on_the_decisions_stream_are_left_out_of_the_live_and_recent_decisions(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, object]] = []
    async with http.get(f"{consoles.url}/events", headers={HEADER: "proxy-tia"}) as stream:
        assert stream.status == 200
        assert await stream.content.readline() == b": connected\n"  # listening from here on
        before = await runs.stopped()
        # More refusals than the overview shows decisions, after the last decision.
        refused = await runs.refused(LIVE_SHOWN + 2)
        told = await read_stream(runs.js, subjects.DECISIONS_STREAM, subjects.decisions(refused.runner_id))
        assert all(m.data.startswith(b'{"type":"refusal"') for m in told)

        recent = await recent_decisions(runs.js, LIVE_SHOWN)
        assert recent and recent[-1].run_id == before.run_id  # not hidden behind the refusals
        assert refused.run_id not in {line.run_id for line in recent}
        # It looks back through `scan` messages, no further.
        assert await recent_decisions(runs.js, LIVE_SHOWN, scan=LIVE_SHOWN + 2) == []
        assert (await recent_decisions(runs.js, LIVE_SHOWN, scan=LIVE_SHOWN + 3))[-1].run_id == before.run_id

        # What is neither a decision nor a refusal is skipped too, and that is worth a warning.
        await runs.js.publish(subjects.decisions(f"r{uuid.uuid4().hex[:10]}"), b'{"type":"unknown"}')

        def warned() -> bool:
            # Both consoles of the fixture follow the stream, and each warns once.
            return caplog.text.count("console_undecodable_decision") >= 2

        await wait_for(warned, what="each console's warning of a message that is not a decision")
        caplog.clear()

        after = await runs.stopped()  # the live view goes on after them
        await live_decisions(stream, after.run_id, seen)
    shown = [d["run_id"] for d in seen]
    assert before.run_id in shown and refused.run_id not in shown
    assert "console_undecodable_decision" not in caplog.text  # expected on this stream: no warning

    text = await page_text(http, f"{consoles.url}/", "proxy-tia")
    live = text.split('id="live"', 1)[1]
    assert after.run_id in live and before.run_id in live and refused.run_id not in text


async def test_a_session_without_an_owner_or_without_a_record_says_so(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs, redis_client: aioredis.Redis
) -> None:
    run = await runs.stopped(f"t-{uuid.uuid4().hex[:10]}")
    key = keys.session(run.session.key)
    # A record as an earlier release left it: no owner field.
    assert await redis_client.hdel(key, "owner") == 1  # type: ignore[misc]
    text = await page_text(http, f"{consoles.url}{page_of('run', run.run_id)}", "proxy-uma")
    assert field(text, "session-owner") == "none yet: the next runner's commit binds it"
    text = await page_text(http, f"{consoles.url}{session_link(run.session)}", "proxy-uma")
    assert field(text, "session-owner") == "none yet: the next runner's commit binds it"

    # The record gone (its retention ended): a 404 page that still shows who owned it.
    assert await redis_client.delete(key) == 1
    text = await page_text(http, f"{consoles.url}{session_link(run.session)}", "proxy-uma", status=404)
    assert 'id="no-record"' in text and "/transfer" not in text
    assert f"<strong>bound</strong> by {run.runner_id}: from no owner to {run.runner_id}" in text
    text = await page_text(http, f"{consoles.url}{page_of('run', run.run_id)}", "proxy-uma")
    assert "No saved session for this run's slot." in text and 'id="session-link"' in text
