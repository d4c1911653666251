"""The run page's link to a run's traces (CONTINUITY_CONSOLE_TRACE_URL), against the real
services: NATS and Redis from the session's fixtures, the session-store, the classifier and the
reconciliation service in-process, and two consoles, one with a trace URL template and one
without. Runs are made as runners make them (tests/support/console.py), so every run page shown
is the console's own answer for a run the classifier stopped.

Run ids the contract accepts may still be hostile in a URL (`javascript:`, `..`, `:`); ids it
does not accept (quotes, `<`, spaces, `{run_id}`) never reach a run page, and the substitution
itself is checked with them too."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import aiohttp
import nats
import pytest

from continuity.devstack.servers import NatsServer, RedisServer
from services import registry
from services.console.config import (
    RUN_ID_PLACEHOLDER,
    TRACE_URL_MAX_CHARS,
    TRACE_URL_VARIABLE,
    ConsoleConfig,
    parse_trace_url,
    trace_link,
)
from services.console.service import WebConsole
from shared.platform.config import ConfigError
from tests.support import make_config, running
from tests.support.console import DEV_TOKEN, HEADER, Runs

# A template with characters the page must escape in its attribute (`&`, `'`), the run id in
# the query of a JSON value, as for Jaeger's search.
TEMPLATE = (
    "https://traces.example:8443/search?service=continuity-classifier&q='x'"
    "&tags=%7B%22continuity.run_id%22%3A%22{run_id}%22%7D"
)
WHO = {HEADER: "proxy-tia"}


@dataclass
class TraceConsoles:
    linking: str
    """A console with CONTINUITY_CONSOLE_TRACE_URL set to `TEMPLATE`."""
    plain: str
    """A console without it."""


@pytest.fixture(scope="module")
async def consoles(nats_server: NatsServer, redis_server: RedisServer) -> AsyncIterator[TraceConsoles]:
    config = replace(make_config(nats_server.url, redis_server.url), tenancy="enforced")
    env = {
        "CONTINUITY_CONSOLE_PORT": "0",
        "CONTINUITY_CONSOLE_DEV_TOKEN": DEV_TOKEN,
        "CONTINUITY_CONSOLE_IDENTITY_HEADER": HEADER,
        "CONTINUITY_CONSOLE_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    # Read as `continuity serve console` reads them, from the variables.
    linking_config = ConsoleConfig.from_env({**env, TRACE_URL_VARIABLE: TEMPLATE})
    plain_config = ConsoleConfig.from_env(env)
    assert linking_config.trace_url == TEMPLATE and plain_config.trace_url == ""
    linking = registry.load("console", config=linking_config)
    plain = registry.load("console", config=plain_config)
    async with (
        running(registry.load("session-store"), config),
        running(registry.load("classifier"), config),
        running(registry.load("reconciliation"), config),
        running(linking, config),
        running(plain, config),
    ):
        yield TraceConsoles(
            f"http://127.0.0.1:{linking.part(WebConsole).port}",
            f"http://127.0.0.1:{plain.part(WebConsole).port}",
        )


@pytest.fixture(scope="module")
async def runs(consoles: TraceConsoles, nats_server: NatsServer) -> AsyncIterator[Runs]:
    nc = await nats.connect(nats_server.url)
    yield Runs(nc)
    await nc.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


class Links(HTMLParser):
    """Every <a> of a page: its attributes (unescaped, as a browser reads them) and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], str]] = []
        self._open: tuple[dict[str, str | None], list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = (dict(attrs), [])

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.links.append((self._open[0], "".join(self._open[1]).strip()))
            self._open = None


def trace_links(page: str) -> list[tuple[dict[str, str | None], str]]:
    parser = Links()
    parser.feed(page)
    parser.close()
    return [(attrs, text) for attrs, text in parser.links if attrs.get("id") == "trace-link"]


async def run_page(http: aiohttp.ClientSession, base: str, run_id: str) -> str:
    async with http.get(f"{base}/run?{urlencode({'id': run_id})}", headers=WHO) as r:
        text = await r.text()
        assert r.status == 200, text
    return text


@pytest.mark.parametrize(
    "prefix",
    ["javascript:alert.", "..", "a:b.c_d-"],
    ids=["javascript", "dots", "punctuation"],
)
async def test_the_run_page_links_to_the_runs_traces_in_a_new_tab(
    consoles: TraceConsoles, runs: Runs, http: aiohttp.ClientSession, prefix: str
) -> None:
    run = await runs.stopped(run_id=f"{prefix}{uuid.uuid4().hex[:8]}:x.")
    page = await run_page(http, consoles.linking, run.run_id)
    [(attrs, text)] = trace_links(page)
    href = attrs["href"]
    assert text == "Traces"
    assert attrs["target"] == "_blank"
    assert set((attrs["rel"] or "").split()) == {"noopener", "noreferrer"}
    # The template, with the run id percent-encoded where `{run_id}` was: the scheme and the
    # host are the template's, and the JSON value the trace viewer reads back is the run id.
    assert href == TEMPLATE.replace(RUN_ID_PLACEHOLDER, quote(run.run_id, safe=""))
    parts = urlsplit(href)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "traces.example:8443", "/search")
    query = parse_qs(parts.query)
    assert query["tags"] == [f'{{"continuity.run_id":"{run.run_id}"}}']
    assert query["service"] == ["continuity-classifier"] and query["q"] == ["'x'"]
    # Escaped in the page's HTML: the template's `&` and `'` as entities, the id's `:` encoded.
    raw = page[page.index('id="trace-link"') :].split(">", 1)[0]
    assert "&amp;q=&#39;x&#39;&amp;tags=" in raw and "'" not in raw
    assert run.run_id not in raw and quote(run.run_id, safe="") in raw


async def test_without_a_trace_url_the_run_page_has_no_trace_link(
    consoles: TraceConsoles, runs: Runs, http: aiohttp.ClientSession
) -> None:
    run = await runs.stopped()
    page = await run_page(http, consoles.plain, run.run_id)
    assert trace_links(page) == [] and "Traces" not in page
    # The same run on the console that has the setting: the page is the same page otherwise.
    assert len(trace_links(await run_page(http, consoles.linking, run.run_id))) == 1


@pytest.mark.parametrize(
    "run_id",
    ['"><script>alert(1)</script>', "a b", "{run_id}", "javascript:alert(1)", "x'onmouseover='y"],
)
async def test_an_id_no_run_can_have_gets_no_trace_link(
    consoles: TraceConsoles, http: aiohttp.ClientSession, run_id: str
) -> None:
    async with http.get(f"{consoles.linking}/run?{urlencode({'id': run_id})}", headers=WHO) as r:
        page = await r.text()
        assert r.status == 400 and "That is not a run id." in page
    assert trace_links(page) == [] and "traces.example" not in page
    assert "<script>" not in page and " onmouseover=" not in page


@pytest.mark.parametrize(
    "run_id",
    ['"><script>alert(1)</script>', "a b", "{run_id}", "javascript:alert(1)", "x'&y=1#z", "é/..?%"],
)
def test_the_substitution_leaves_a_hostile_id_no_way_out_of_its_place(run_id: str) -> None:
    link = trace_link(TEMPLATE, run_id)
    before, after = TEMPLATE.split(RUN_ID_PLACEHOLDER)
    assert link.startswith(before) and link.endswith(after)
    inserted = link[len(before) : len(link) - len(after)]
    assert set(inserted) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~%")
    assert RUN_ID_PLACEHOLDER not in link  # substituted once, never again
    assert parse_qs(urlsplit(link).query)["tags"] == [f'{{"continuity.run_id":"{run_id}"}}']


GOOD = [
    TEMPLATE,
    "https://grafana.example/explore?left=%7B%22query%22%3A%22{run_id}%22%7D",
    "https://traces.example/runs/{run_id}#{run_id}",
    "  https://traces.example/?run={run_id}  ",
]


@pytest.mark.parametrize("template", GOOD)
def test_a_trace_url_template_is_accepted(template: str) -> None:
    config = ConsoleConfig.from_env({"CONTINUITY_CONSOLE_DEV_TOKEN": DEV_TOKEN, TRACE_URL_VARIABLE: template})
    assert config.trace_url == template.strip() == parse_trace_url(template)


BAD = {
    "ftp": "ftp://traces.example/{run_id}",
    "javascript": "javascript:alert(1)//{run_id}",
    "relative": "/search?run={run_id}",
    "no host": "https:///search?run={run_id}",
    "no placeholder": "https://traces.example/search",
    "other placeholder": "https://traces.example/{run_id}/{trace_id}",
    "upper-case placeholder": "https://traces.example/{RUN_ID}",
    "stray brace": "https://traces.example/{run_id}}",
    "raw JSON": 'https://traces.example/search?tags={"continuity.run_id":"{run_id}"}',
    "placeholder in host": "https://{run_id}.traces.example/",
    "placeholder as port": "https://traces.example:{run_id}/",
    "space": "https://traces.example/search?run= {run_id}",
    "newline": "https://traces.example/\n{run_id}",
    "quote": 'https://traces.example/"{run_id}',
    "angle bracket": "https://traces.example/<{run_id}>",
    "backslash": "https://traces.example\\{run_id}",
    "non-ASCII": "https://traces.example/é/{run_id}",
    "too long": "https://traces.example/" + "a" * TRACE_URL_MAX_CHARS + "{run_id}",
    "bad IPv6 host": "https://[traces.example/{run_id}",
}


@pytest.mark.parametrize("template", BAD.values(), ids=BAD.keys())
def test_a_bad_trace_url_is_a_configuration_error_that_names_the_variable(template: str) -> None:
    with pytest.raises(ConfigError, match=f"^{TRACE_URL_VARIABLE}: ") as raised:
        ConsoleConfig.from_env({"CONTINUITY_CONSOLE_DEV_TOKEN": DEV_TOKEN, TRACE_URL_VARIABLE: template})
    assert "traces.example" not in str(raised.value)  # says what is wrong, never repeats it


def test_a_bad_trace_url_stops_the_console_before_it_connects() -> None:
    nobody = "nats://127.0.0.1:9"  # nothing listens: the start must stop before connecting
    env = {
        **os.environ,
        "NATS_URL": nobody,
        "CONTINUITY_CONSOLE_DEV_TOKEN": DEV_TOKEN,
        TRACE_URL_VARIABLE: BAD["other placeholder"],
    }
    done = subprocess.run(
        [sys.executable, "-m", "continuity", "serve", "console"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"continuity: configuration error: {TRACE_URL_VARIABLE}: " in done.stderr
    assert "{run_id} is the only placeholder" in done.stderr
    assert "traces.example" not in done.stderr
