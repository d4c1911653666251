"""Explained decisions, the replay page and the preview page of the console, against the real
services: a run's page shows the explanation each classifier decision recorded (its row, policy
and inputs), and nothing for decisions no row made; the replay page replays the recorded
decisions under the running policy (nothing changes) or under a pasted or uploaded candidate (the
changed row's runs are listed and linked), shows a refused policy's invariant, and shows hostile
policy text as text; the preview page shows what a new generation of an adapter does to its saved
sessions (the session-store's counts, by tenant and reason, and the declarations that made
sessions resume) and never shows the generation typed back, nor logs it. Behind the console's
sign-in and anti-forgery token, as every form."""

from __future__ import annotations

import html
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
from continuity_runner.harness.compatibility import Components

from services.console.forms import REPLAY_FORM_BYTES
from services.console.links import link, session_link
from shared.contract import RetryRequest
from shared.contract.limits import NAME_CHARS, POLICY_MAX_BYTES
from shared.contract.policy import PreviewReply, PreviewRequest
from shared.policy import SHIPPED, dump
from tests.support.console import HEADER, Consoles, Rollout, Runs
from tests.support.sessions import commit_req

pytestmark = pytest.mark.asyncio
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
HOSTILE = '{"version": "x</textarea><script>alert(1)</script>", "recovery": "<img src=x onerror=alert(2)>"}'


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


def candidate(row: str = "4.4.9", **change: str) -> str:
    """The shipped policy with one row changed (by default 4.4.9 stops for an operator)."""
    doc = json.loads(dump(SHIPPED))
    doc["version"] = "candidate-operator-first"
    next(r for r in doc["recovery"] if r["id"] == row).update(
        change or {"action": "operator", "reason": "native_session_retry_exhausted"}
    )
    return json.dumps(doc, indent=2)


def cells(text: str, cls: str) -> list[str]:
    return [html.unescape(v).strip() for v in re.findall(rf'class="[^"]*\b{cls}\b[^"]*">([^<]*)<', text)]


def field(text: str, element_id: str) -> str | None:
    found = re.search(rf'id="{element_id}">([^<]*)<', text)
    return html.unescape(found.group(1)).strip() if found else None


async def page_text(http: aiohttp.ClientSession, url: str, who: str) -> str:
    async with http.get(url, headers={HEADER: who}) as r:
        text = await r.text()
        assert r.status == 200, text
        return text


async def replay(
    http: aiohttp.ClientSession,
    consoles: Consoles,
    who: str,
    *,
    policy: str = "",
    upload: bytes | None = None,
    csrf: bool = True,
    **filters: str,
) -> tuple[int, str]:
    """The replay form submitted as a browser does (multipart), after opening its page."""
    text = await page_text(http, f"{consoles.url}/replay", who)
    token = CSRF.search(text)
    assert token
    fields = {"csrf_token": token.group(1) if csrf else "0" * 64, "policy": policy, **filters}
    with aiohttp.MultipartWriter("form-data") as form:
        for name, value in fields.items():
            form.append(value).set_content_disposition("form-data", name=name)
        if upload is not None:
            part = form.append(upload, {"Content-Type": "application/json"})
            part.set_content_disposition("form-data", name="policy_file", filename="policy.json")
    async with http.post(
        f"{consoles.url}/replay", data=form, headers={HEADER: who, "Origin": consoles.url}
    ) as r:
        return r.status, await r.text()


async def test_a_classified_run_shows_the_row_and_inputs_that_decided_it(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.stopped()
    text = await page_text(http, f"{consoles.url}{link('run', run.run_id)}", "proxy-ann")
    assert cells(text, "explain-rule") == ["4.4.4"]
    assert cells(text, "explain-policy") == ["shipped-1"]
    assert cells(text, "explain-class") == ["event_replay_conflict, from the error's code"]
    assert cells(text, "explain-attempt") == ["1 of 3"]
    assert cells(text, "explain-pending") == ["no"]
    assert cells(text, "explain-checkpoint") == ["same_session_only"]
    assert cells(text, "explain-wait") == ["not elapsed"]
    assert cells(text, "explain-budget") == ["not spent"]

    # An operator's retry is made by no row: its entry explains nothing more.
    await runs.client.retry(RetryRequest(run_id=run.run_id, actor="proxy-ann"))
    await runs.wait_status(run, "continued")
    text = await page_text(http, f"{consoles.url}{link('run', run.run_id)}", "proxy-ann")
    assert "operator_retry" in text
    assert text.count('class="fields explanation"') == 1 and cells(text, "explain-rule") == ["4.4.4"]


async def test_the_running_policy_replays_every_decision_unchanged(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    run = await runs.interrupted()
    status, text = await replay(http, consoles, "proxy-bea", runner_id=run.runner_id)
    assert status == 200, text
    assert field(text, "replay-policy") == field(text, "replay-running") == "shipped-1"
    assert (field(text, "replay-replayed"), field(text, "replay-unchanged")) == ("1", "1")
    assert 'id="replay-no-change"' in text and 'id="replay-changes"' not in text


async def test_a_candidate_changing_one_row_lists_that_rows_runs(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    run = await runs.interrupted(tenant)
    stopped = await runs.stopped(tenant)  # row 4.4.4: the candidate keeps it
    await runs.indexed(stopped, "operator")
    for how in ({"policy": candidate()}, {"upload": candidate().encode()}):
        status, text = await replay(http, consoles, "proxy-cid", tenant=run.session.tenant, **how)  # type: ignore[arg-type]
        assert status == 200, text
        assert field(text, "replay-policy") == "candidate-operator-first"
        assert (field(text, "replay-replayed"), field(text, "replay-unchanged")) == ("2", "1")
        assert cells(text, "change-rule") == ["4.4.9"] and cells(text, "change-candidate-rule") == ["4.4.9"]
        assert cells(text, "change-count") == ["1"]
        assert "retry_same_session</span> (native_session_interrupted)" in text
        assert "operator</span> (native_session_retry_exhausted)" in text
        links = re.findall(r'<a class="change-run" href="([^"]+)">([^<]+)</a>', text)
        assert [(html.unescape(h), t) for h, t in links] == [(link("run", run.run_id), run.run_id)]
    # The example run's link opens its page.
    assert run.run_id in await page_text(http, f"{consoles.url}{link('run', run.run_id)}", "proxy-cid")


async def test_a_refused_policy_names_its_invariant_and_hostile_text_stays_text(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    breaks = candidate("4.4.2", action="archive", reason="native_session_continuity_break")
    status, text = await replay(http, consoles, "proxy-dov", policy=breaks)
    assert status == 400, text
    assert "closed_refusal_never_replaced" in (field(text, "form-error") or "")
    assert 'id="replay-result"' not in text

    status, text = await replay(http, consoles, "proxy-dov", policy=HOSTILE)
    assert status == 400 and "format" in (field(text, "form-error") or "")
    assert "<script>" not in text and "<img" not in text
    typed = re.search(r'<textarea id="policy"[^>]*>([^<]*)</textarea>', text)
    assert typed and html.unescape(typed.group(1)) == HOSTILE  # kept, as text, to be fixed


async def test_the_replay_form_is_bounded_checked_and_needs_its_token(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    status, text = await replay(http, consoles, "proxy-eve", policy=candidate(), csrf=False)
    assert status == 403 and 'id="replay-result"' not in text
    big = '{"version": "big", "padding": "' + "x" * POLICY_MAX_BYTES + '"}'
    status, text = await replay(http, consoles, "proxy-eve", policy=big)
    assert status == 400 and "at most 65536" in (field(text, "form-error") or ""), text[:2000]
    status, text = await replay(http, consoles, "proxy-eve", upload=big.encode())
    assert status == 400 and "larger than a policy file" in (field(text, "form-error") or ""), text[:2000]
    status, text = await replay(http, consoles, "proxy-eve", policy="x" * REPLAY_FORM_BYTES)
    assert status == 413 and "at most 64 KiB" in (field(text, "form-error") or ""), text[:2000]
    assert "x" * 100 not in text  # nothing of a form that large is read or shown
    status, text = await replay(http, consoles, "proxy-eve", policy=candidate(), upload=candidate().encode())
    assert status == 400 and "not both" in (field(text, "form-error") or "")
    status, text = await replay(http, consoles, "proxy-eve", upload=b"\xff\xfe{}")
    assert status == 400 and "not UTF-8" in (field(text, "form-error") or "")
    for name, value, says in (
        ("since_hours", "-1", "Since is a number"),
        ("since_hours", "nan", "Since is a number"),
        ("runner_id", "<b>r</b>", "A runner id is"),
        ("tenant", "a b", "A tenant is"),
    ):
        status, text = await replay(http, consoles, "proxy-eve", **{name: value})  # type: ignore[arg-type]
        assert status == 400 and says in (field(text, "form-error") or ""), (name, value)
        assert "<b>r</b>" not in text
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.post(f"{consoles.url}/replay", headers={"Origin": consoles.url}) as r:
            assert r.status == 403  # no session's token, and no identity


# The rollout preview ----------------------------------------------------------------------------


async def preview(
    http: aiohttp.ClientSession,
    consoles: Consoles,
    who: str | None,
    fields: dict[str, str],
    *,
    csrf: bool = True,
    origin: str | None = None,
) -> tuple[int, str]:
    """The preview form submitted as a browser does (urlencoded), after opening its page as
    `who`; posted as nobody when `who` is None (the cookie and token of the page, no identity)."""
    text = await page_text(http, f"{consoles.url}/preview", who or "proxy-opener")
    token = CSRF.search(text)
    assert token
    form = {"csrf_token": token.group(1) if csrf else "0" * 64, **fields}
    headers = {"Origin": origin or consoles.url, **({HEADER: who} if who else {})}
    async with http.post(f"{consoles.url}/preview", data=form, headers=headers) as r:
        return r.status, await r.text()


def tenant_rows(text: str) -> list[tuple[str, str, str, str]]:
    """The by-tenant table as shown: (tenant, resume, fresh, fresh by reason)."""
    columns = [cells(text, c) for c in ("tenant-name", "tenant-resume", "tenant-fresh", "tenant-reasons")]
    return list(zip(*columns, strict=True))


def rows_of(reply: PreviewReply) -> list[tuple[str, str, str, str]]:
    """The same table from the session-store's reply."""
    return [
        (t.tenant, str(t.resume), str(t.fresh), ", ".join(f"{r}: {n}" for r, n in t.reasons.items()) or "-")
        for t in reply.by_tenant
    ]


def typed_generation_box(text: str) -> str:
    box = re.search(r'<input [^>]*id="preview-generation"[^>]*>', text)
    assert box, "the form's generation box"
    value = re.search(r'value="([^"]*)"', box.group(0))
    return value.group(1) if value else ""


async def test_the_preview_shows_the_session_stores_counts_by_tenant_and_never_the_generation(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rollout = Rollout()
    await rollout.commit(runs)
    expected = await runs.client.preview(PreviewRequest(adapter=rollout.adapter, generation=rollout.new))
    a, b = rollout.tenants
    assert (expected.scanned, expected.resume, expected.fresh) == (6, 2, 4)
    assert [(t.tenant, t.resume, t.fresh) for t in expected.by_tenant] == [(a, 1, 2), (b, 1, 2)]
    assert len(expected.declarations) == 1

    status, text = await preview(
        http, consoles, "proxy-fay", {"adapter": rollout.adapter, "generation": rollout.new}
    )
    assert status == 200, text
    assert field(text, "preview-adapter-shown") == rollout.adapter
    assert field(text, "preview-policy") == expected.policy == "shipped-1"
    assert field(text, "preview-scanned") == str(expected.scanned)
    assert field(text, "preview-resume") == str(expected.resume)
    assert field(text, "preview-fresh") == f"{expected.fresh} (with the full transcript)"
    assert tenant_rows(text) == rows_of(expected)
    assert [row[0] for row in tenant_rows(text)] == [a, b]
    assert "compatibility_generation_changed: 2" in tenant_rows(text)[0][3]
    assert len(expected.by_tenant[1].reasons) == 2  # tenant b's fresh ones have two reasons
    assert cells(text, "declaration") == expected.declarations
    # The adapter is kept in its box; the generation's box is empty again.
    assert re.search(rf'id="preview-adapter"[^>]*value="{rollout.adapter}"', text)
    assert typed_generation_box(text) == ""
    for generation in rollout.generations():
        assert generation not in text

    # One tenant: only its row.
    status, text = await preview(
        http, consoles, "proxy-fay", {"adapter": rollout.adapter, "generation": rollout.new, "tenant": b}
    )
    only_b = await runs.client.preview(
        PreviewRequest(adapter=rollout.adapter, generation=rollout.new, tenant=b)
    )
    assert status == 200, text
    assert tenant_rows(text) == rows_of(only_b) and [row[0] for row in tenant_rows(text)] == [b]
    assert (field(text, "preview-scanned"), field(text, "preview-resume")) == ("3", "1")
    assert field(text, "preview-tenant-shown") == b
    assert re.search(rf'id="preview-tenant"[^>]*value="{b}"', text)
    assert rollout.new not in text

    # A generation no session was saved under and nothing declared: every session starts fresh.
    status, text = await preview(
        http, consoles, "proxy-fay", {"adapter": rollout.adapter, "generation": f"{rollout.new}-next"}
    )
    assert status == 200 and (field(text, "preview-resume"), field(text, "preview-fresh")) == (
        "0",
        "6 (with the full transcript)",
    )
    assert 'id="preview-no-declarations"' in text and rollout.new not in text

    # Nothing the console or a service logged while it answered holds a generation.
    logged = "\n".join(repr(vars(record)) for record in caplog.records)
    assert caplog.records, "the console's requests were logged"
    for generation in rollout.generations():
        assert generation not in logged


async def test_the_preview_form_refuses_bad_fields_without_showing_the_generation(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    secret = f"gen-typed-{uuid.uuid4().hex[:10]}"
    for fields, says in (
        ({"adapter": "", "generation": secret}, "An adapter is 1 to"),
        ({"adapter": "a" * (NAME_CHARS + 1), "generation": secret}, "An adapter is 1 to"),
        ({"adapter": "codex", "generation": ""}, "A generation is 1 to 128"),
        ({"adapter": "codex", "generation": f"{secret} <b>x</b>"}, "A generation is 1 to 128"),
        ({"adapter": "codex", "generation": secret + "x" * 128}, "A generation is 1 to 128"),
        ({"adapter": "codex", "generation": secret, "tenant": "<img src=x onerror=alert(1)>"}, "A tenant is"),
        ({"adapter": "codex", "generation": secret, "tenant": "a/b"}, "A tenant is"),
    ):
        status, text = await preview(http, consoles, "proxy-gus", fields)
        assert status == 400 and says in (field(text, "form-error") or ""), (fields, text[:3000])
        assert 'id="preview-result"' not in text and 'action="/preview"' in text  # the form, again
        assert secret not in text and "<b>x</b>" not in text and "&lt;b&gt;x" not in text
        assert "<img" not in text
        assert typed_generation_box(text) == ""
    # The refused tenant is kept in its box, as text.
    status, text = await preview(
        http,
        consoles,
        "proxy-gus",
        {"adapter": "codex", "generation": secret, "tenant": 'x"><script>alert(1)</script>'},
    )
    assert status == 400 and "<script>" not in text
    kept = re.search(r'id="preview-tenant"[^>]*value="([^"]*)"', text)
    assert kept and html.unescape(kept.group(1)) == 'x"><script>alert(1)</script>'

    # A hostile adapter is a valid name: asked, and shown as text.
    hostile = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    status, text = await preview(http, consoles, "proxy-gus", {"adapter": hostile, "generation": secret})
    assert status == 200, text
    assert "<script>" not in text and "<img" not in text and secret not in text
    assert field(text, "preview-adapter-shown") == hostile and field(text, "preview-scanned") == "0"
    assert 'id="preview-none"' in text


async def test_the_preview_needs_the_token_the_origin_and_a_signed_in_operator(
    consoles: Consoles, http: aiohttp.ClientSession
) -> None:
    secret = f"gen-typed-{uuid.uuid4().hex[:10]}"
    fields = {"adapter": "codex", "generation": secret}
    status, text = await preview(http, consoles, "proxy-hal", fields)
    assert status == 200 and 'id="preview-result"' in text  # as a browser sends it
    status, text = await preview(http, consoles, "proxy-hal", fields, csrf=False)
    assert status == 403 and "anti-forgery token" in text and 'id="preview-result"' not in text
    status, text = await preview(http, consoles, "proxy-hal", fields, origin="http://elsewhere.example")
    assert status == 403 and "did not come from this console" in text and 'id="preview-result"' not in text
    status, text = await preview(http, consoles, None, fields)  # the page's token, no identity
    assert status == 401 and "Sign in first" in text and 'id="preview-result"' not in text
    assert secret not in text
    async with aiohttp.ClientSession() as anonymous:
        async with anonymous.post(
            f"{consoles.url}/preview", data=fields, headers={"Origin": consoles.url}
        ) as r:
            assert r.status == 403 and secret not in await r.text()
    # The page is linked from the navigation, next to Replay.
    text = await page_text(http, f"{consoles.url}/preview", "proxy-hal")
    assert re.search(
        r'<a href="/replay"[^>]*>Replay</a></li>\s*<li><a href="/preview" aria-current="page">', text
    )


async def test_the_run_and_session_pages_name_the_changed_components_never_their_values(
    consoles: Consoles, http: aiohttp.ClientSession, runs: Runs
) -> None:
    """A saved session whose generation is made of components: the run's page and the session's
    show which components it is made of and which changed at its last new generation, by name."""
    saved = Components(model_route="anthropic/claude-sonnet-4", mcp_servers=["github"], cwd="/w/acme-7c1e")
    ready = Components(
        model_route="openai/gpt-5-7c1e", mcp_servers=["github", "sentry-7c1e"], cwd="/w/acme-7c1e"
    )
    run = await runs.stopped()
    for handle, made in (("ns-2", saved), ("ns-3", ready)):
        await runs.client.commit(
            commit_req(
                run.session,
                native_session_id=handle,
                compatibility_generation=made.generation,
                compatibility_components=made.digests(),
            )
        )
    secrets = [saved.generation, ready.generation, *saved.digests().values(), *ready.digests().values()]
    secrets += ["openai", "sentry", "claude-sonnet"]
    run_page = await page_text(http, f"{consoles.url}{link('run', run.run_id)}", "proxy-ivy")
    session_page = await page_text(http, f"{consoles.url}{session_link(run.session)}", "proxy-ivy")
    for text in (run_page, session_page):
        assert field(text, "session-components") == "cwd, mcp_servers, model_route"
        assert field(text, "session-changed-components") == "mcp_servers, model_route"
        assert [s for s in secrets if s in text] == []
