"""The console in headless Chromium (Debian's package, driven by Playwright) against the real
services: an operator signs in, resolves a reconciliation and retries a stopped run, and the
runner reads `continue_fresh` from CONTINUITY_DECISIONS; a decision appears live on the
overview; the runs page filters the runs index and pages through it; a session is transferred
to another runner of its tenant; hostile session ids open and are shown as text; a run shows the
row that decided it, and a replay lists a candidate's changes and shows hostile policy text as
text; a rollout preview shows its counts by tenant and never the generation typed. A screenshot
of every page is kept under tests/artifacts/console/."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from playwright.async_api import Browser, Page, expect

from services.console.links import link, session_link
from shared.contract import GetRequest, SessionRef, subjects
from shared.contract.tenancy import RunnerRevokeRequest, SessionAuditRequest
from shared.policy import SHIPPED, dump
from tests.support import wait_for
from tests.support.console import DEV_ACTOR, DEV_TOKEN, GENERATION, ISSUER, Consoles, Rollout, Run, Runs

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def page(browser: Browser, consoles: Consoles) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900}, base_url=consoles.url)
    page = await context.new_page()
    await page.goto("/")
    await expect(page).to_have_url(f"{consoles.url}/login?next=/")
    await page.get_by_label("Development token").fill(DEV_TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#actor")).to_have_text(DEV_ACTOR)
    yield page
    await context.close()


async def shot(page: Page, artifacts: Path, name: str) -> None:
    await page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
    assert GENERATION not in await page.content()


async def test_resolving_a_reconciliation_continues_the_run_fresh(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    run = await runs.reconciling()
    await page.goto("/")
    await shot(page, artifacts, "overview")
    await page.get_by_role("link", name=run.run_id).first.click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(run.run_id)
    await expect(page.locator("#tool-name")).to_have_text("paperclip_call_assigned_tool")
    await shot(page, artifacts, "reconciliation")

    await page.get_by_label("It was not performed").check()
    await page.get_by_label("Evidence").fill("The ticket system has no ticket for call-1.")
    await page.get_by_role("button", name="Record outcome and continue").click()
    await expect(page.locator("#done")).to_be_visible()
    await expect(page.locator("#resolved-by")).to_have_text(DEV_ACTOR)
    await shot(page, artifacts, "reconciliation-resolved")

    async def continued() -> bool:
        return any(d.action == "continue_fresh" for d in await runs.decisions(run))

    await wait_for(continued, what="continue_fresh for the runner")
    fresh = [d for d in await runs.decisions(run) if d.action == "continue_fresh"]
    assert [(d.reason, d.reconciled_outcome) for d in fresh] == [("execution_reconciled", "not_performed")]

    await page.get_by_role("link", name=run.run_id).click()
    timeline = page.locator("#timeline")
    await expect(timeline).to_contain_text(f"operator_resolve by {DEV_ACTOR}")
    await expect(page.locator("#session-state")).to_have_text("held")
    await shot(page, artifacts, "run")


async def test_a_stopped_run_is_retried_with_the_keyboard_after_a_confirmation(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    run = await runs.stopped()
    await runs.indexed(run, "operator")
    await page.goto(f"/runs?runner_id={run.runner_id}")
    await page.locator("#runs").get_by_role("link", name=run.run_id).click()
    await expect(page.locator("#run-status")).to_have_text("operator")
    await expect(page.locator("#failure-class")).to_have_text("event_replay_conflict")
    await expect(page.locator("#rule")).to_contain_text("replay")
    await shot(page, artifacts, "run-stopped")

    button = page.get_by_role("button", name="Retry run")
    await button.focus()
    await page.keyboard.press("Enter")  # unconfirmed: the browser keeps the form
    await expect(page.locator("#run-status")).to_have_text("operator")
    assert await runs.decisions(run) == [d for d in await runs.decisions(run) if d.action != "continue_fresh"]

    await page.get_by_label("I removed the cause").focus()
    await page.keyboard.press("Space")
    await page.keyboard.press("Tab")
    await expect(button).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("#done")).to_be_visible()
    await expect(page.locator("#run-status")).to_have_text("continued")
    await expect(page.locator("#timeline")).to_contain_text(f"operator_retry by {DEV_ACTOR}")
    fresh = [d for d in await runs.decisions(run) if d.action == "continue_fresh"]
    assert [d.reason for d in fresh] == ["operator_retry"]


async def test_a_decision_appears_live_on_the_overview(page: Page, runs: Runs, artifacts: Path) -> None:
    await page.goto("/")
    live = page.locator("#live")
    await expect(live).to_have_attribute("aria-live", "polite")
    await expect(page.locator("#live-state")).to_contain_text("Connected")
    run = await runs.stopped()
    await expect(live.get_by_role("link", name=run.run_id)).to_be_visible(timeout=10_000)
    await expect(live.locator("li").first).to_contain_text("operator")
    await shot(page, artifacts, "overview-live")


async def test_every_page_renders_and_is_keyboard_and_phone_ready(
    page: Page, runs: Runs, artifacts: Path, consoles: Consoles
) -> None:
    run = await runs.stopped()
    await runs.js.publish(subjects.event(run.runner_id, "resume_failed"), b"{not json")

    async def dead_lettered() -> bool:
        info = await runs.js.stream_info(subjects.DEAD_STREAM)
        return bool(info.state.messages)

    await wait_for(dead_lettered, what="a dead letter")
    await page.goto("/dead")
    await expect(page.locator("#dead-letters")).to_contain_text("malformed_json")
    assert "{not json" not in await page.content()  # a runner's bytes are not shown
    await shot(page, artifacts, "dead-letters")

    await runs.indexed(run, "operator")
    await page.goto(f"/runs?runner_id={run.runner_id}&status=operator")
    await expect(page.get_by_role("link", name=run.run_id)).to_be_visible()

    # The first Tab reaches the skip link, which moves the focus to the content.
    await page.goto("/")
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("link", name="Skip to the content")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.locator("main")).to_be_focused()
    for landmark in ("banner", "navigation", "main", "contentinfo"):
        await expect(page.get_by_role(landmark).first).to_be_visible()

    # A phone: nothing wider than the screen but the tables' own scroll boxes.
    await page.set_viewport_size({"width": 390, "height": 844})
    phone = (
        ("/", "overview-phone"),
        ("/runs?status=operator", "runs-phone"),
        (f"/runs/{run.run_id}", "run-phone"),
        (session_link(run.session), "session-phone"),
    )
    for path, name in phone:
        await page.goto(path)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
        await shot(page, artifacts, name)

    login = await page.context.browser.new_page(base_url=consoles.url)  # type: ignore[union-attr]
    await login.goto("/login")
    await shot(login, artifacts, "login")
    await login.close()


async def test_a_cross_site_form_is_refused_in_the_browser(
    page: Page, runs: Runs, consoles: Consoles
) -> None:
    run = await runs.stopped()
    # Another page (here about:blank, origin "null") posts the retry form with a guessed token.
    other = await page.context.new_page()
    await other.set_content(
        f'<form method="post" action="{consoles.url}/runs/{run.run_id}/retry">'
        '<input name="confirm" value="yes"><input name="csrf_token" value="guess">'
        '<button type="submit">Go</button></form>'
    )
    await other.get_by_role("button", name="Go").click()
    await expect(other.get_by_role("alert")).to_contain_text("did not come from this console")
    assert (await runs.client.run(run.run_id)).status == "operator"
    await other.close()


async def test_the_runs_page_filters_the_index_and_pages_with_its_links(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    made = [await runs.stopped(tenant) for _ in range(3)]
    other = await runs.reconciling(tenant)
    for run in made:
        await runs.indexed(run, "operator")
    await runs.indexed(other, "reconciling")

    await page.goto("/")
    await page.locator("#by-status").locator("..").get_by_role("link", name="operator").click()
    await expect(page.get_by_label("Status")).to_have_value("operator")
    await page.get_by_label("Tenant").fill(tenant)
    await page.get_by_label("Per page").fill("2")
    await page.get_by_label("Newer than").fill("1h")
    await page.get_by_role("button", name="Filter").click()
    rows = page.locator("#runs tbody tr")
    await expect(rows).to_have_count(2)
    for row, run in zip(await rows.all(), made[:2], strict=True):  # oldest last decision first
        await expect(row).to_contain_text(run.run_id)
        await expect(row).to_contain_text("operator")
    await shot(page, artifacts, "runs")

    await page.get_by_role("link", name="Next page").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text(made[2].run_id)
    await expect(page.get_by_role("link", name="Next page")).to_have_count(0)
    await expect(page.get_by_label("Tenant")).to_have_value(tenant)  # the filters travel with the cursor
    await expect(page.get_by_label("Status")).to_have_value("operator")
    assert GENERATION not in page.url
    await shot(page, artifacts, "runs-page-2")

    await page.get_by_role("link", name="First page").click()
    await expect(rows).to_have_count(2)
    await page.get_by_label("Status").select_option("reconciling")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text(other.run_id)
    await page.get_by_label("Newer than").fill("")
    await page.get_by_label("Older than").fill("1h")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.get_by_text("No run matches.")).to_be_visible()


async def test_a_hostile_next_after_signing_in_stays_on_the_console(
    browser: Browser, consoles: Consoles
) -> None:
    context = await browser.new_context(base_url=consoles.url)
    elsewhere: list[str] = []
    context.on(
        "request",
        lambda request: None if request.url.startswith(consoles.url) else elsewhere.append(request.url),
    )
    await context.route("http://evil.example/**", lambda route: route.abort())
    page = await context.new_page()
    await page.goto("/login?next=%2F%09%2Fevil.example")  # `/<tab>/evil.example`
    await page.get_by_label("Development token").fill(DEV_TOKEN)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#actor")).to_have_text(DEV_ACTOR)
    await expect(page).to_have_url(f"{consoles.url}/")
    assert elsewhere == []
    await context.close()


def japanese(chars: int) -> str:
    """`chars` characters of Japanese with line breaks; 𠮷 is 4 bytes in UTF-8."""
    line = "𠮷野家の注文システムでcall-1の記録を確認しました。注文は作成されていません。\n"
    return (line * (chars // len(line) + 1))[: chars - 1] + "。"


async def test_evidence_of_2000_japanese_characters_resolves(page: Page, runs: Runs) -> None:
    run = await runs.reconciling()
    await page.goto("/")
    await (
        page.get_by_role("region", name="Open reconciliations, oldest first")
        .get_by_role("link", name=run.run_id)
        .click()
    )
    evidence = japanese(2000)
    assert len(evidence) == 2000
    await page.get_by_label("It was not performed").check()
    await page.get_by_label("Evidence").fill(evidence)
    await page.get_by_role("button", name="Record outcome and continue").click()
    await expect(page.locator("#done")).to_be_visible()
    record = await runs.client.reconciliation(run.run_id)
    assert record.resolution is not None and record.resolution.evidence == evidence


async def test_evidence_over_the_limit_comes_back_with_what_was_typed(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    run = await runs.reconciling()
    await page.goto("/")
    await (
        page.get_by_role("region", name="Open reconciliations, oldest first")
        .get_by_role("link", name=run.run_id)
        .click()
    )
    evidence = japanese(2100)
    await page.get_by_label("Part of it took effect").check()
    await page.get_by_label("Evidence").fill(evidence)
    await page.get_by_role("button", name="Record outcome and continue").click()
    await expect(page.get_by_role("alert")).to_contain_text("2100 characters; at most 2000")
    await expect(page.get_by_label("Evidence")).to_have_value(evidence)
    await expect(page.get_by_label("Part of it took effect")).to_be_checked()
    await shot(page, artifacts, "reconciliation-evidence-too-long")
    assert (await runs.client.reconciliation(run.run_id)).status == "open"


async def test_runs_named_dot_and_dot_dot_are_opened_retried_and_resolved(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    # `.` and `..` are valid run ids; as path segments a browser would resolve them away.
    dots, dot = await runs.stopped(run_id=".."), await runs.stopped(run_id=".")
    await runs.indexed(dots, "operator")
    await runs.indexed(dot, "operator")

    # `..` from the runs list: retried after the confirmation.
    await page.goto(f"/runs?runner_id={dots.runner_id}")
    await page.locator("#runs").get_by_role("link", name="..", exact=True).click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Run ..")
    await expect(page.locator("#run-status")).to_have_text("operator")
    await page.get_by_label("I removed the cause").check()
    await page.get_by_role("button", name="Retry run").click()
    await expect(page.locator("#done")).to_be_visible()
    await expect(page.locator("#run-status")).to_have_text("continued")

    # `.` by its id; while its page is open, the runner's next attempt waits on a tool call.
    await page.goto("/runs")
    await page.get_by_label("Run id").fill(".")
    await page.get_by_role("button", name="Open").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Run .")
    await expect(page.locator("#run-status")).to_have_text("operator")
    await runs.reconciling(after=dot)
    await page.get_by_label("I removed the cause").check()
    await page.get_by_role("button", name="Retry run").click()
    await expect(page.get_by_role("alert")).to_contain_text("waits on a reconciliation")
    await shot(page, artifacts, "retry-refused-reconciliation")
    await page.get_by_role("link", name="Record what the pending tool call did").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Reconciliation of run .")
    await page.get_by_label("It completed").check()
    await page.get_by_label("Evidence").fill("The ticket exists.")
    await page.get_by_role("button", name="Record outcome and continue").click()
    await expect(page.locator("#done")).to_be_visible()
    await page.get_by_role("link", name=".", exact=True).click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Run .")
    await expect(page.locator("#timeline")).to_contain_text(f"operator_resolve by {DEV_ACTOR}")

    # `..`'s next attempt waits on a tool call too: resolved from the overview.
    await runs.reconciling(after=dots)
    await page.goto("/")
    await (
        page.get_by_role("region", name="Open reconciliations, oldest first")
        .get_by_role("link", name="..", exact=True)
        .click()
    )
    await expect(page.get_by_role("heading", level=1)).to_have_text("Reconciliation of run ..")
    await page.get_by_label("It was not performed").check()
    await page.get_by_label("Evidence").fill("No ticket.")
    await page.get_by_role("button", name="Record outcome and continue").click()
    await expect(page.locator("#done")).to_be_visible()

    for run, reasons in ((dots, ["operator_retry", "execution_reconciled"]), (dot, ["execution_reconciled"])):

        async def continued(run: Run = run, reasons: list[str] = reasons) -> bool:
            fresh = [d.reason for d in await runs.decisions(run) if d.action == "continue_fresh"]
            return fresh == reasons

        await wait_for(continued, what=f"continue_fresh for run {run.run_id}")


async def test_a_session_is_transferred_in_the_browser_and_kept_in_its_history(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    run = await runs.stopped(tenant)
    heir, revoked = await runs.runner(tenant), await runs.runner(tenant)
    await page.goto(link("run", run.run_id))
    await expect(page.locator("#run-tenant")).to_have_text(tenant)
    await expect(page.locator("#session-owner")).to_have_text(f"{run.runner_id}, the run's runner")
    await page.locator("#session-link").click()
    s = run.session
    await expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Session {s.tenant}/{s.conversation_id}/{s.agent_id}"
    )
    await expect(page.locator("#session-tenant")).to_have_text(tenant)
    await expect(page.locator("#session-owner")).to_have_text(run.runner_id)
    await expect(page.locator("#session-generation")).to_have_text("stored, trusted")
    await expect(page.locator("#history")).to_contain_text(f"bound by {run.runner_id}")
    await shot(page, artifacts, "session")
    before = await runs.client.get(GetRequest(session=s))

    # Revoked while the page is open: the session-store refuses, and the page says why.
    await runs.client.runner_revoke(RunnerRevokeRequest(runner_id=revoked, actor=ISSUER))
    await page.get_by_label("New owner").select_option(revoked)
    await page.get_by_label("I stopped the current owner's work").check()
    await page.get_by_role("button", name="Transfer session").click()
    await expect(page.get_by_role("alert")).to_contain_text(
        f"Runner {revoked} is not an active runner issued for tenant {tenant}"
    )
    await shot(page, artifacts, "session-transfer-refused")
    assert await runs.client.get(GetRequest(session=s)) == before
    await page.get_by_role("link", name="Back to the session").click()
    choices = page.get_by_label("New owner").locator("option")
    await expect(choices).to_have_text(["choose a runner", heir])  # listed again: no longer the revoked one

    button = page.get_by_role("button", name="Transfer session")
    await page.get_by_label("New owner").select_option(heir)
    await button.click()  # unconfirmed: the browser keeps the form
    await expect(page.locator("#session-owner")).to_have_text(run.runner_id)
    assert await runs.client.get(GetRequest(session=s)) == before
    await page.get_by_label("I stopped the current owner's work").check()
    await button.click()
    await expect(page.locator("#done")).to_contain_text(
        f"runner {heir} owns this session now, at epoch {before.epoch + 1}"
    )
    after = await runs.client.get(GetRequest(session=s))  # what the session-store holds
    assert (after.owner, after.epoch) == (heir, before.epoch + 1)
    await expect(page.locator("#session-owner")).to_have_text(heir)
    await expect(page.locator("#history li").last).to_contain_text(
        f"transferred by {DEV_ACTOR}: from {run.runner_id} to {heir}, epoch {after.epoch}"
    )
    trail = (await runs.client.ownership(SessionAuditRequest(session=s))).items
    assert [(e.kind, e.actor, e.owner) for e in trail][-1] == ("transferred", DEV_ACTOR, heir)
    await shot(page, artifacts, "session-transferred")

    await page.goto(link("run", run.run_id))
    await expect(page.locator("#session-owner")).to_contain_text(f"{heir}, not the run's runner")


async def test_hostile_session_ids_are_escaped_and_their_page_opens_in_the_browser(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    session = SessionRef(tenant="..", conversation_id=".", agent_id=f"..:{uuid.uuid4().hex[:8]}-._")
    run = await runs.stopped(session=session)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    await page.goto(link("run", run.run_id))
    await page.locator("#session-link").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(f"Session .././{session.agent_id}")
    await expect(page.locator("#session-tenant")).to_have_text("..")
    await expect(page.locator("#session-conversation")).to_have_text(".")
    await expect(page.locator("#session-owner")).to_have_text(run.runner_id)
    assert urlsplit(page.url).path == "/session"
    await shot(page, artifacts, "session-dots")

    # Percent-encoded dots in the query are the same session.
    await page.goto(f"/session?tenant=%2E%2E&conversation_id=%2e&agent_id={quote(session.agent_id, safe='')}")
    await expect(page.locator("#session-agent")).to_have_text(session.agent_id)
    await expect(page.locator("#session-owner")).to_have_text(run.runner_id)

    # Markup in the address is refused and shown as nothing: no script runs.
    await page.goto(
        "/session?tenant=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
        "&conversation_id=%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E&agent_id=a"
    )
    await expect(page.get_by_role("alert")).to_contain_text("That is not a session")
    content = await page.content()
    assert "alert(1)" not in content and "onerror" not in content and dialogs == []


async def test_replay_in_the_browser_lists_changes_and_keeps_hostile_policy_text_as_text(
    page: Page, runs: Runs, artifacts: Path, tmp_path: Path
) -> None:
    run = await runs.interrupted()
    await page.goto(link("run", run.run_id))
    await expect(page.locator(".explain-rule")).to_have_text("4.4.9")
    await expect(page.locator(".explain-attempt")).to_have_text("1 of 3")

    await page.get_by_role("link", name="Replay").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Replay the recorded decisions")
    await page.get_by_label("Runner").fill(run.runner_id)
    await page.get_by_role("button", name="Replay").click()
    await expect(page.locator("#replay-no-change")).to_be_visible()
    await expect(page.locator("#replay-replayed")).to_have_text("1")

    doc = json.loads(dump(SHIPPED))
    doc["version"] = "candidate-operator-first"
    next(r for r in doc["recovery"] if r["id"] == "4.4.9").update(
        action="operator", reason="native_session_retry_exhausted"
    )
    upload = tmp_path / "candidate.json"
    upload.write_text(json.dumps(doc))
    await page.get_by_label("Or upload it").set_input_files(str(upload))
    await page.get_by_role("button", name="Replay").click()
    await expect(page.locator("#replay-policy")).to_have_text("candidate-operator-first")
    await expect(page.locator(".change-count")).to_have_text("1")
    await shot(page, artifacts, "replay-changes")
    await page.locator("#replay-changes").get_by_role("link", name=run.run_id).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(run.run_id)

    # Markup in a pasted policy is refused as not a policy and shown back as text: no script runs.
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    hostile = (
        '{"version": "x</textarea><script>alert(1)</script>", "recovery": "<img src=x onerror=alert(2)>"}'
    )
    await page.goto("/replay")
    await page.get_by_label("Paste the policy file").fill(hostile)
    await page.get_by_role("button", name="Replay").click()
    await expect(page.get_by_role("alert")).to_contain_text("format")
    await expect(page.get_by_label("Paste the policy file")).to_have_value(hostile)
    assert await page.locator("script").count() == 0 and await page.locator("main img").count() == 0
    assert dialogs == []
    await shot(page, artifacts, "replay-refused")


async def test_a_rollout_preview_in_the_browser_counts_by_tenant_and_never_shows_the_generation(
    page: Page, runs: Runs, artifacts: Path
) -> None:
    rollout = Rollout()
    await rollout.commit(runs)
    a, b = rollout.tenants
    await page.goto("/")
    await page.get_by_role("link", name="Preview").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Preview a harness release")
    await page.get_by_label("Adapter").fill(rollout.adapter)
    await page.get_by_label("New generation").fill(rollout.new)
    await page.get_by_role("button", name="Preview").click()
    await expect(page.locator("#preview-scanned")).to_have_text("6")
    await expect(page.locator("#preview-resume")).to_have_text("2")
    await expect(page.locator("#preview-fresh")).to_contain_text("4")
    await expect(page.locator(".tenant-name")).to_have_text([a, b])
    await expect(page.locator(".tenant-resume")).to_have_text(["1", "1"])
    await expect(page.locator(".tenant-fresh")).to_have_text(["2", "2"])
    await expect(page.locator(".tenant-reasons").first).to_have_text("compatibility_generation_changed: 2")
    await expect(page.locator(".declaration")).to_have_count(1)
    # The adapter is kept; the generation's box is empty, and the generation is nowhere.
    await expect(page.get_by_label("Adapter")).to_have_value(rollout.adapter)
    await expect(page.get_by_label("New generation")).to_have_value("")
    content = await page.content()
    assert all(generation not in content for generation in rollout.generations())
    await shot(page, artifacts, "preview")

    # A refused tenant: the form again, saying why, without the generation.
    await page.get_by_label("New generation").fill(rollout.new)
    await page.get_by_label("Tenant (optional)").fill("<img src=x onerror=alert(1)>")
    await page.get_by_role("button", name="Preview").click()
    await expect(page.get_by_role("alert")).to_contain_text("A tenant is")
    await expect(page.get_by_label("New generation")).to_have_value("")
    assert rollout.new not in await page.content()
    assert await page.locator("main img").count() == 0
    await shot(page, artifacts, "preview-refused")
