"""The console's pages: server-rendered HTML (aiohttp and Jinja2), talking to the services with
the project's typed client, like the CLI.

Every request passes one middleware that establishes who is acting (`identity`), refuses forms
without the session's anti-forgery token or from another origin, turns a service's error into
a page that explains it, and counts the request per page and status."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlencode

import jinja2
import nats.errors
from aiohttp import web
from multidict import MultiDictProxy

from services.console.config import ConsoleConfig, trace_link
from services.console.identity import (
    COOKIE,
    CSRF_FIELD,
    LoginThrottle,
    Refused,
    Session,
    Sessions,
    client_address,
    client_bucket,
    dev_token_valid,
    expected_origin,
    origin_allowed,
    proxy_identity,
    safe_next,
)
from services.console.outcomes import OutcomesQuery, page_values, recovery
from services.console.outcomes import parse as parse_outcomes
from services.console.revocations import Revocations
from services.console.rules import rule_of
from services.console.runs_query import CURSOR_MESSAGE, REASONS, RUN_STATUSES, QueryError, count_label, parse
from services.console.streams import DecisionFeed, recent_dead_letters, recent_decisions
from shared.contract import GetRequest, ListRequest, ResolveRequest, RetryRequest, SessionRef, SessionView
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import EVIDENCE_CHARS, NAME_CHARS, POLICY_MAX_BYTES, REPLAY_MAX_SINCE_S
from shared.contract.policy import PreviewReply, PreviewRequest, ReplayReply, ReplayRequest
from shared.contract.runs import RunsListRequest, RunsStatsReply
from shared.contract.tenancy import RunnerRecord, SessionAuditRequest, TransferRequest
from shared.contract.types import RUNNER_ID_PATTERN, TOKEN_PATTERN, ActionOutcome
from shared.platform import metrics
from shared.platform.logs import Log
from shared.platform.text import age

log = Log("continuity.console")
HERE = Path(__file__).parent
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_TOKEN = re.compile(TOKEN_PATTERN)
_RUNNER_ID = re.compile(RUNNER_ID_PATTERN)
SESSION_FIELDS = ("tenant", "conversation_id", "agent_id")
OUTCOMES = ("completed", "not_performed", "mixed")
# What the middleware learns about a request, for its handler and its response.
SESSION = web.RequestKey("session", Session)
ACTOR: web.RequestKey[str | None] = web.RequestKey("actor", str)  # type: ignore[arg-type]
FORM: web.RequestKey[MultiDictProxy[Any]] = web.RequestKey("form", MultiDictProxy)  # type: ignore[arg-type]
NEW_COOKIE = web.RequestKey("new_cookie", str)
CLIENT = web.RequestKey("client", str)
"""The client's address (`identity.client_address`): the peer, or what a trusted proxy says."""
FORWARDED_FOR = "X-Forwarded-For"
PUBLIC_PAGES = frozenset({"login", "login_post", "static"})
STATUS_COUNT_CAP = 100
"""The overview counts each status's runs up to this many, and shows more as `100+`."""
LIVE_SHOWN = 10
DEAD_SHOWN = 100
FORM_BYTES = 64 * 1024
"""The largest form body read. The largest valid form, the resolve form with 2000 characters of
4-byte UTF-8 (12 bytes each once percent-encoded) and its other fields, is about 24,100 bytes;
the evidence box lets a browser send at most `EVIDENCE_BOX` UTF-16 units of at most 9 bytes
each, so whatever a browser sends is read, and a refused form comes back with its text."""
EVIDENCE_BOX = 2 * EVIDENCE_CHARS
"""The evidence box's `maxlength`. Browsers count UTF-16 units, where a character outside the
Basic Multilingual Plane (𠮷) counts 2, so `maxlength` 2000 would cut valid evidence short; the
console counts characters, as the contract does, and says when there are too many."""

# What an error code of a service means for the person who pressed the button.
MESSAGES = {
    "not_found": "No such run is known.",
    "execution_reconciliation_conflict": "This reconciliation was already resolved with another outcome.",
    "execution_reconciliation_already_delivered": (
        "This reconciliation was already resolved with this outcome; its decision was delivered."
    ),
    "reconciliation_required": (
        "This run waits on a reconciliation and cannot be retried: record what the pending tool call did."
    ),
    "run_not_stopped": "This run is not stopped for an operator, so there is nothing to retry.",
    "operator_retry_already_delivered": "A fresh continuation was already delivered for this attempt.",
    "run_changed": "The run changed while the request was handled; look at it again and retry.",
    "unavailable": "A service's store is unavailable; retry in a moment.",
    "internal_error": "A service failed on this request; see its logs.",
    "invalid_replay": "The reconciliation service refused this replay's filters.",
    "invalid_preview": "The session-store refused this preview's fields.",
    "invalid_stats": "The reconciliation service refused these filters.",
}
REFUSALS = {
    "untrusted_proxy": "The identity header came from an address that is not a trusted proxy.",
    "duplicated_header": "The request carries the identity or X-Forwarded-For header more than once.",
    "invalid_forwarded_for": "The proxy's X-Forwarded-For header does not name an address.",
    "invalid_identity": "The signed-in identity is not a valid name.",
    "origin_mismatch": "The form did not come from this console.",
    "csrf_invalid": "The form's anti-forgery token is missing or wrong: reload the page and try again.",
    "not_signed_in": "Sign in first.",
    "bad_token": "That token is not valid.",
}
REPLAY_FORM_BYTES = 2 * POLICY_MAX_BYTES + 16 * 1024
"""The largest replay form read: a multipart form (its text is not percent-encoded) with a pasted
and an uploaded policy of at most `POLICY_MAX_BYTES` each, the filters and the token."""
REPLAY_TIMEOUT_S = 120.0
"""How long the console waits for a replay: it reads every matching run's audit trail."""
REPLAY_MAX_HOURS = REPLAY_MAX_SINCE_S / 3600
PREVIEW_TIMEOUT_S = 60.0
"""How long the console waits for a rollout preview: it reads every saved session."""
STATS_TIMEOUT_S = 60.0
"""How long the console waits for the outcomes: the reconciliation service reads every run of
the window."""
NO_ANSWER = "No service answered; retry in a moment."
REFUSAL_SHOWN = 1000
"""The characters of a refused policy's message shown (the service's message names the
invariant and never echoes the policy's values)."""
CLASS_SOURCES = {
    "command_result": "a signed command result",
    "error_code": "the error's code",
    "none": "nothing the runner reported",
}
RECONCILE_LINK = "Record what the pending tool call did"
BACK_TO_SESSION = "Back to the session"
NOT_A_SESSION = (
    "That is not a session: its tenant, conversation and agent are each 1 to 128 letters, digits, "
    "'.', '_', ':' or '-'."
)
NO_SESSION = "No saved session is known for this tenant, conversation and agent."


def template_environment() -> jinja2.Environment:
    """The pages' templates: every value escaped unless it is markup the console made."""
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    templates.globals.update(
        age=age,
        link=link,
        session_link=session_link,
        rule_of=rule_of,
        class_sources=CLASS_SOURCES,
        recovery=recovery,
    )
    return templates


def link(page: str, run_id: str, **query: str) -> str:
    """The console's address of a run's `page` (`run`, `run/retry`, `reconciliation`,
    `reconciliation/resolve`). The run id travels in the query: `.` and `..` are valid run ids,
    and as path segments a browser would resolve them away (`/runs/..` is `/`)."""
    return f"/{page}?{urlencode({'id': run_id, **query})}"


def session_link(session: SessionRef, page: str = "session", **query: str) -> str:
    """The console's address of a session's `page` (`session`, `session/transfer`). Its three
    ids travel in the query, like a run's: `.` and `..` are tokens too."""
    ids = {"tenant": session.tenant, "conversation_id": session.conversation_id, "agent_id": session.agent_id}
    return f"/{page}?{urlencode({**ids, **query})}"


def transfer_choices(runners: list[RunnerRecord], tenant: str, owner: str | None) -> list[str]:
    """The runners a session of `tenant` may be given to: active, issued for the tenant, and not
    its owner already (the session-store checks the same again when the transfer arrives)."""
    return [
        r.runner_id for r in runners if r.status == "active" and tenant in r.tenants and r.runner_id != owner
    ]


class ReplayForm:
    """What the replay form holds, as typed: shown again with the form when it is refused."""

    def __init__(self, form: MultiDictProxy[Any] | None = None) -> None:
        self.policy = str(form.get("policy", "")) if form else ""
        self.since_hours = str(form.get("since_hours", "")).strip() if form else ""
        self.runner_id = str(form.get("runner_id", "")).strip() if form else ""
        self.tenant = str(form.get("tenant", "")).strip() if form else ""
        upload = form.get("policy_file") if form else None
        self.upload = upload if isinstance(upload, web.FileField) and upload.filename else None

    def request(self) -> ReplayRequest:
        """The replay it asks for, or `Failure` (400) saying what is wrong with it."""
        pasted = self.policy if self.policy.strip() else None
        uploaded = self._uploaded()
        if pasted is not None and uploaded is not None:
            raise Failure(400, "Paste a policy or upload one, not both.")
        policy = pasted if pasted is not None else uploaded
        if policy is not None and len(policy.encode()) > POLICY_MAX_BYTES:
            size = len(policy.encode())
            raise Failure(400, f"The policy is {size} bytes; a policy file holds at most {POLICY_MAX_BYTES}.")
        since_s = None
        if self.since_hours:
            try:
                hours = float(self.since_hours)
            except ValueError:
                hours = math.nan
            if not (math.isfinite(hours) and 0 < hours <= REPLAY_MAX_HOURS):
                raise Failure(400, f"Since is a number of hours above 0 and at most {REPLAY_MAX_HOURS:g}.")
            since_s = min(hours * 3600, REPLAY_MAX_SINCE_S)
        if self.runner_id and not _RUNNER_ID.match(self.runner_id):
            raise Failure(400, "A runner id is 1 to 64 letters, digits, '_' or '-'.")
        if self.tenant and not _TOKEN.match(self.tenant):
            raise Failure(400, "A tenant is 1 to 128 letters, digits, '.', '_', ':' or '-'.")
        return ReplayRequest(
            policy=policy, since_s=since_s, runner_id=self.runner_id or None, tenant=self.tenant or None
        )

    def _uploaded(self) -> str | None:
        if self.upload is None:
            return None
        data = self.upload.file.read(POLICY_MAX_BYTES + 1)
        if len(data) > POLICY_MAX_BYTES:
            raise Failure(400, f"The uploaded file is larger than a policy file ({POLICY_MAX_BYTES} bytes).")
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise Failure(400, "The uploaded file is not UTF-8 text.") from None
        return text if text.strip() else None


class PreviewForm:
    """What the preview form holds. The adapter and the tenant are shown again as typed; the
    generation is a compatibility generation value, read only to be sent and never shown back:
    the form comes back with its box empty, whatever happened."""

    def __init__(self, form: MultiDictProxy[Any] | None = None) -> None:
        self.adapter = str(form.get("adapter", "")).strip() if form else ""
        self.tenant = str(form.get("tenant", "")).strip() if form else ""
        self._generation = str(form.get("generation", "")).strip() if form else ""

    def request(self) -> PreviewRequest:
        """The preview it asks for, or `Failure` (400) saying which field is wrong (never with
        the generation's value)."""
        if not 0 < len(self.adapter) <= NAME_CHARS:
            raise Failure(400, f"An adapter is 1 to {NAME_CHARS} characters.")
        if not _TOKEN.match(self._generation):
            raise Failure(
                400,
                "A generation is 1 to 128 letters, digits, '.', '_', ':' or '-'; type it again "
                "(the console never shows a generation back).",
            )
        if self.tenant and not _TOKEN.match(self.tenant):
            raise Failure(400, "A tenant is 1 to 128 letters, digits, '.', '_', ':' or '-'.")
        return PreviewRequest(adapter=self.adapter, generation=self._generation, tenant=self.tenant or None)


class Failure(Exception):
    """A page that cannot be shown: an HTTP status and a message for people (never upstream text)."""

    def __init__(self, status: int, message: str, next_step: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.next_step = next_step
        """A link to what to do instead: (address, text)."""


class Console:
    def __init__(
        self,
        config: ConsoleConfig,
        client: ContinuityClient,
        js: Any,
        feed: DecisionFeed,
        revocations: Revocations | None = None,
    ) -> None:
        self.config = config
        self.client = client
        # A replay reads every matching run's audit trail: it may take longer than a lookup.
        self.replay_client = ContinuityClient(client.nc, timeout=max(client.timeout, REPLAY_TIMEOUT_S))
        # So does a preview: it reads every saved session of the adapter.
        self.preview_client = ContinuityClient(client.nc, timeout=max(client.timeout, PREVIEW_TIMEOUT_S))
        # And the outcomes: the reconciliation service reads every run of the window.
        self.stats_client = ContinuityClient(client.nc, timeout=max(client.timeout, STATS_TIMEOUT_S))
        self.js = js
        self.feed = feed
        self.sessions = Sessions(config.session_key, config.session_ttl_s)
        self.revocations = revocations
        """Signed-out sessions, with the development login (the only sessions that sign in)."""
        self.throttle = LoginThrottle(
            config.login_failures, config.login_failures_total, config.login_window_s
        )
        self.templates = template_environment()

    # The application ----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=FORM_BYTES)
        app.on_response_prepare.append(self._headers)
        r = app.router
        r.add_get("/", self.overview, name="overview")
        r.add_get("/runs", self.runs, name="runs")
        r.add_get("/run", self.run, name="run")
        r.add_post("/run/retry", self.retry, name="retry")
        r.add_get("/reconciliation", self.reconciliation, name="reconciliation")
        r.add_post("/reconciliation/resolve", self.resolve, name="resolve")
        r.add_get("/session", self.session, name="session")
        r.add_post("/session/transfer", self.transfer, name="transfer")
        r.add_get("/replay", self.replay_form, name="replay")
        r.add_post("/replay", self.replay, name="replay_post")
        r.add_get("/preview", self.preview_form, name="preview")
        r.add_post("/preview", self.preview, name="preview_post")
        r.add_get("/outcomes", self.outcomes, name="outcomes")
        # The addresses of earlier releases, kept for links people saved: to the query form.
        r.add_get("/runs/{run_id}", self.moved, name="run_moved")
        r.add_get("/reconciliations/{run_id}", self.moved, name="reconciliation_moved")
        r.add_get("/dead", self.dead, name="dead")
        r.add_get("/events", self.events, name="events")
        r.add_get("/login", self.login_form, name="login")
        r.add_post("/login", self.login, name="login_post")
        r.add_post("/logout", self.logout, name="logout")
        r.add_static("/static", HERE / "static", name="static", append_version=False)
        return app

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
            "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        if not request.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"

    def _cookie(self, request: web.Request, response: web.StreamResponse) -> None:
        """A new session cookie, on the response that answers the request it was issued for."""
        cookie = request.get(NEW_COOKIE)
        if cookie and not response.prepared:
            response.set_cookie(
                COOKIE,
                cookie,
                max_age=self.config.session_ttl_s,
                path="/",
                httponly=True,
                samesite="Strict",
                secure=self.config.secure_cookies,
            )

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.name
        page = route if route else "unknown"
        started = time.perf_counter()
        status = 500
        try:
            response = await self._guarded(request, handler, page)
            status = response.status
            self._cookie(request, response)
            return response
        except web.HTTPException as exc:
            status = exc.status
            self._cookie(request, exc)
            raise
        finally:
            metrics.labelled(metrics.CONSOLE_REQUESTS, page, str(status)).inc()
            metrics.labelled(metrics.CONSOLE_REQUEST_DURATION, page).observe(time.perf_counter() - started)

    async def _guarded(self, request: web.Request, handler: Handler, page: str) -> web.StreamResponse:
        cfg = self.config
        now = time.time()
        session = self.sessions.read(request.cookies.get(COOKIE), now)
        if (
            session is not None
            and session.actor is not None
            and self.revocations is not None
            and page != "static"
        ):
            try:
                if await self.revocations.revoked(session.sid):
                    metrics.labelled(metrics.CONSOLE_REFUSED, "session_revoked").inc()
                    session = None  # signed out: a copy of the cookie signs nobody in
            except (nats.errors.Error, TimeoutError):
                return self._page(
                    request, "error.html", 503, message="The sign-in cannot be checked; retry in a moment."
                )
        named = request.headers.getall(cfg.identity_header, []) if cfg.identity_header else []
        try:
            actor = proxy_identity(cfg, request.remote, named)
            request[CLIENT] = client_address(cfg, request.remote, request.headers.getall(FORWARDED_FOR, []))
        except Refused as refused:
            return self._refused(request, refused)
        if actor is None and session is not None and cfg.dev_token:
            actor = session.actor
        if session is None:
            session, request[NEW_COOKIE] = self.sessions.issue(None, now)
        request[SESSION] = session
        request[ACTOR] = actor
        if request.method == "POST":
            expected = expected_origin(cfg, request.scheme, request.host)
            if not origin_allowed(expected, request.headers.get("Origin"), request.headers.get("Referer")):
                return self._refused(request, Refused("origin_mismatch"))
            # The replay form carries a policy file: it alone is read up to its own bound.
            reading = request.clone(client_max_size=REPLAY_FORM_BYTES) if page == "replay_post" else request
            try:
                form = await reading.post()
            except web.HTTPRequestEntityTooLarge:
                if page not in ("resolve", "replay_post"):
                    return self._page(request, "error.html", 413, message="The form is too large.")
                # Nothing of it is acted on: its form is shown again (a read, as its page is),
                # saying why; a browser's evidence box never sends this much.
                handler = self._resolve_too_large if page == "resolve" else self._replay_too_large
            else:
                token = form.get(CSRF_FIELD)
                if NEW_COOKIE in request or not self.sessions.csrf_valid(session, str(token or "")):
                    return self._refused(request, Refused("csrf_invalid"))
                request[FORM] = form
        if page not in PUBLIC_PAGES and actor is None:
            if request.method == "GET" and cfg.dev_token and page != "events":
                raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
            return self._refused(request, Refused("not_signed_in", 401))
        try:
            return await handler(request)
        except Failure as failure:
            return self._page(
                request, "error.html", failure.status, message=failure.message, next_step=failure.next_step
            )
        except RequestError as err:
            return self._page(request, "error.html", err.status, message=MESSAGES.get(err.code, err.message))
        except (nats.errors.Error, TimeoutError):
            return self._page(request, "error.html", 503, message=NO_ANSWER)
        except web.HTTPException:
            raise
        except Exception:
            log.error("console_page_failed", exc=True, page=page)
            return self._page(request, "error.html", 500, message="The console failed on this page.")

    def _refused(self, request: web.Request, refused: Refused) -> web.Response:
        metrics.labelled(metrics.CONSOLE_REFUSED, refused.reason).inc()
        request.setdefault(ACTOR, None)
        return self._page(request, "error.html", refused.status, message=REFUSALS[refused.reason])

    def _page(self, request: web.Request, template: str, status: int = 200, **values: Any) -> web.Response:
        session: Session | None = request.get(SESSION)
        html = self.templates.get_template(template).render(
            actor=request.get(ACTOR),
            csrf=self.sessions.csrf_token(session) if session else "",
            csrf_field=CSRF_FIELD,
            dev_login=bool(self.config.dev_token),
            path=request.path,
            **values,
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    # Reading ------------------------------------------------------------------------------

    def _actor(self, request: web.Request) -> str:
        """The signed-in identity: the middleware lets no request without one reach an action."""
        actor = request[ACTOR]
        if actor is None:
            raise Failure(401, REFUSALS["not_signed_in"])
        return actor

    def _run_id(self, request: web.Request) -> str:
        run_id = request.query.get("id", "")
        if not _TOKEN.match(run_id):
            raise Failure(400, "That is not a run id.")
        return run_id

    def _session_ref(self, request: web.Request) -> SessionRef:
        values = [request.query.get(field, "") for field in SESSION_FIELDS]
        if not all(_TOKEN.match(value) for value in values):
            raise Failure(400, NOT_A_SESSION)
        return SessionRef(*values)

    async def moved(self, request: web.Request) -> web.Response:
        page = "run" if request.path.startswith("/runs/") else "reconciliation"
        raise web.HTTPMovedPermanently(link(page, request.match_info["run_id"]))

    async def overview(self, request: web.Request) -> web.Response:
        # One short listing per status: a count up to the cap, and the cap's `+` beyond it.
        counting = asyncio.gather(
            *(
                self.client.runs_upto(RunsListRequest(status=status, limit=STATUS_COUNT_CAP + 1))
                for status in RUN_STATUSES
            )
        )
        reading = asyncio.gather(
            self.client.reconciliations_upto(ListRequest(status="open", limit=50)),
            recent_dead_letters(self.js, DEAD_SHOWN),
            recent_decisions(self.js, LIVE_SHOWN),
        )
        (open_list, dead, recent), counted = await asyncio.gather(reading, counting)
        dead_reasons = Counter(d.reason for d in dead)
        live = list(self.feed.latest) or list(reversed(recent))
        return self._page(
            request,
            "overview.html",
            reconciliations=open_list.items,
            by_status=[
                (s, count_label(len(page.items), STATUS_COUNT_CAP))
                for s, page in zip(RUN_STATUSES, counted, strict=True)
            ],
            dead_reasons=sorted(dead_reasons.items()),
            dead_count=len(dead),
            live=live[:LIVE_SHOWN],
        )

    async def runs(self, request: web.Request) -> web.Response:
        q = request.query
        run_id = q.get("run_id", "").strip()
        if run_id:
            if not _TOKEN.match(run_id):
                raise Failure(400, "That is not a run id.")
            raise web.HTTPSeeOther(link("run", run_id))
        try:
            query = parse(q)
        except QueryError as bad:
            raise Failure(400, bad.message) from None
        try:
            page = await self.client.runs_upto(query.request())
        except RequestError as err:
            # Every filter was checked above: what the index refuses is a cursor it never gave.
            if err.code == "invalid_field" and query.cursor is not None:
                raise Failure(400, CURSOR_MESSAGE) from None
            raise
        return self._page(
            request,
            "runs.html",
            rows=page.items,
            filters=query.filters,
            statuses=RUN_STATUSES,
            reasons=REASONS,
            limit=query.limit,
            paged=query.cursor is not None,
            first_page=query.link(),
            next_page=query.link(page.next_cursor) if page.next_cursor else None,
        )

    async def run(self, request: web.Request) -> web.Response:
        run_id = self._run_id(request)
        run, audit = await asyncio.gather(self.client.run(run_id), self.client.audit(run_id))
        session = await self._record(run.session)
        template = self.config.trace_url
        return self._page(
            request,
            "run.html",
            run=run,
            audit=audit.items,
            session=session,
            done=request.query.get("done"),
            trace_url=trace_link(template, run.run_id) if template else None,
        )

    async def _record(self, ref: SessionRef) -> SessionView | None:
        """The session's record as the services' own account sees it (with its owner), or None."""
        try:
            return await self.client.get(GetRequest(session=ref))
        except RequestError as err:
            if err.status != 404:
                raise
            return None

    async def session(self, request: web.Request) -> web.Response:
        ref = self._session_ref(request)
        history, record, directory = await asyncio.gather(
            self.client.ownership(SessionAuditRequest(session=ref)), self._record(ref), self.client.runners()
        )
        if record is None:
            # Its ownership history may outlive the record: shown, with nothing to transfer.
            return self._page(request, "session.html", 404, ref=ref, record=None, history=history.items)
        return self._page(
            request,
            "session.html",
            ref=ref,
            record=record,
            history=history.items,
            choices=transfer_choices(directory.items, ref.tenant, record.owner),
            done=request.query.get("done"),
        )

    async def reconciliation(
        self,
        request: web.Request,
        error: str | None = None,
        status: int = 200,
        form: MultiDictProxy[Any] | None = None,
    ) -> web.Response:
        record = await self.client.reconciliation(self._run_id(request))
        return self._page(
            request,
            "reconciliation.html",
            status,
            record=record,
            outcomes=OUTCOMES,
            evidence_max=EVIDENCE_CHARS,
            evidence_box=EVIDENCE_BOX,
            error=error,
            done=request.query.get("done"),
            typed_evidence=str(form.get("evidence", "")) if form else "",
            typed_outcome=str(form.get("outcome", "")) if form else "",
        )

    async def dead(self, request: web.Request) -> web.Response:
        letters = await recent_dead_letters(self.js, DEAD_SHOWN)
        return self._page(request, "dead.html", letters=list(reversed(letters)), shown=DEAD_SHOWN)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-Sent Events: one `decision` event per decision published from now on."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
        )
        await response.prepare(request)
        queue = self.feed.listen()
        metrics.CONSOLE_LIVE_STREAMS.set(self.feed.listeners)
        try:
            await response.write(b": connected\n\n")
            while True:
                try:
                    line = await asyncio.wait_for(queue.get(), 15)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")  # finds closed connections
                    continue
                if line is None:
                    break
                await response.write(b"event: decision\ndata: " + line.as_json() + b"\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.feed.unlisten(queue)
            metrics.CONSOLE_LIVE_STREAMS.set(self.feed.listeners)
        return response

    # Acting -------------------------------------------------------------------------------

    async def resolve(self, request: web.Request) -> web.Response:
        run_id = self._run_id(request)
        form: MultiDictProxy[Any] = request[FORM]
        outcome = str(form.get("outcome", ""))
        # Browsers send a line break as CRLF and count it as one character: so does the console.
        evidence = str(form.get("evidence", "")).replace("\r\n", "\n").strip()
        error = None
        if outcome not in OUTCOMES:
            error = "Choose what the tool call did."
        elif not evidence:
            error = "Say how the outcome was checked."
        elif len(evidence) > EVIDENCE_CHARS:
            error = f"The evidence is {len(evidence)} characters; at most {EVIDENCE_CHARS}."
        if error:
            return await self.reconciliation(request, error=error, status=400, form=form)
        await self.client.resolve(
            ResolveRequest(
                run_id=run_id,
                action_outcome=cast(ActionOutcome, outcome),
                evidence=evidence,
                actor=self._actor(request),
            )
        )
        raise web.HTTPSeeOther(link("reconciliation", run_id, done="resolved"))

    async def _resolve_too_large(self, request: web.Request) -> web.Response:
        message = (
            f"The form was larger than the console reads ({FORM_BYTES // 1024} KiB), so nothing of it "
            f"was kept: the evidence is at most {EVIDENCE_CHARS} characters."
        )
        return await self.reconciliation(request, error=message, status=413)

    async def retry(self, request: web.Request) -> web.Response:
        run_id = self._run_id(request)
        if request[FORM].get("confirm") != "yes":
            raise Failure(400, "Confirm that the cause was removed before retrying.")
        try:
            await self.client.retry(RetryRequest(run_id=run_id, actor=self._actor(request)))
        except RequestError as err:
            if err.code != "reconciliation_required":
                raise
            # The run moved on since its page was shown: what it waits on instead is one click away.
            reconcile = (link("reconciliation", run_id), RECONCILE_LINK)
            raise Failure(err.status, MESSAGES[err.code], reconcile) from None
        raise web.HTTPSeeOther(link("run", run_id, done="retried"))

    async def transfer(self, request: web.Request) -> web.Response:
        ref = self._session_ref(request)
        form: MultiDictProxy[Any] = request[FORM]
        back = (session_link(ref), BACK_TO_SESSION)
        runner_id = str(form.get("runner_id", ""))
        if not _RUNNER_ID.match(runner_id):
            raise Failure(400, "Choose the runner to give the session to.", back)
        if form.get("confirm") != "yes":
            raise Failure(400, "Confirm the transfer before submitting it.", back)
        try:
            reply = await self.client.transfer(
                TransferRequest(session=ref, runner_id=runner_id, actor=self._actor(request))
            )
        except RequestError as err:
            if err.code == "runner_not_issued":
                # Revoked or issued elsewhere since the page listed it: the page lists again.
                message = (
                    f"Runner {runner_id} is not an active runner issued for tenant {ref.tenant}, so "
                    "nothing was transferred. Choose a runner the session's page lists now."
                )
                raise Failure(err.status, message, back) from None
            if err.code == "not_found":
                raise Failure(err.status, f"{NO_SESSION} Nothing was transferred.", back) from None
            raise
        done = "unchanged" if reply.previous_owner == reply.owner else "transferred"
        raise web.HTTPSeeOther(session_link(ref, done=done))

    # Replaying the recorded decisions under a candidate policy -------------------------------

    def _replay_page(
        self,
        request: web.Request,
        status: int = 200,
        typed: ReplayForm | None = None,
        error: str | None = None,
        reply: ReplayReply | None = None,
    ) -> web.Response:
        return self._page(
            request,
            "replay.html",
            status,
            typed=typed or ReplayForm(),
            error=error,
            reply=reply,
            max_bytes=POLICY_MAX_BYTES,
            max_hours=REPLAY_MAX_HOURS,
        )

    async def replay_form(self, request: web.Request) -> web.Response:
        return self._replay_page(request)

    async def replay(self, request: web.Request) -> web.Response:
        """Re-decide the recorded decisions under the pasted or uploaded policy (none: the running
        one). A read: nothing changes, so nothing is audited; it is a form because a policy
        does not fit an address."""
        typed = ReplayForm(request[FORM])
        try:
            asked = typed.request()
        except Failure as bad:
            return self._replay_page(request, bad.status, typed, error=bad.message)
        try:
            reply = await self.replay_client.replay(asked)
        except RequestError as err:
            if err.code == "policy_refused":
                # The service's message names the invariant; shown as text, bounded.
                message = f"The policy was refused: {err.message[:REFUSAL_SHOWN]}"
                return self._replay_page(request, err.status, typed, error=message)
            if err.code == "invalid_field":
                return self._replay_page(request, err.status, typed, error=MESSAGES["invalid_replay"])
            raise
        return self._replay_page(request, typed=typed, reply=reply)

    async def _replay_too_large(self, request: web.Request) -> web.Response:
        message = (
            f"The form was larger than the console reads ({REPLAY_FORM_BYTES // 1024} KiB), so nothing of "
            f"it was kept: a policy file holds at most {POLICY_MAX_BYTES // 1024} KiB."
        )
        return self._replay_page(request, 413, error=message)

    # Previewing a harness release's generation over the saved sessions -----------------------

    def _preview_page(
        self,
        request: web.Request,
        status: int = 200,
        typed: PreviewForm | None = None,
        error: str | None = None,
        reply: PreviewReply | None = None,
    ) -> web.Response:
        return self._page(
            request,
            "preview.html",
            status,
            typed=typed or PreviewForm(),
            error=error,
            reply=reply,
            name_chars=NAME_CHARS,
        )

    async def preview_form(self, request: web.Request) -> web.Response:
        return self._preview_page(request)

    async def preview(self, request: web.Request) -> web.Response:
        """What a rollout of a new generation of an adapter does to its saved sessions at their
        next turn. A read: nothing changes; it is a form so that the generation travels in no
        address (nor a browser's history, nor an access log), and it is never shown back."""
        typed = PreviewForm(request[FORM])
        try:
            asked = typed.request()
        except Failure as bad:
            return self._preview_page(request, bad.status, typed, error=bad.message)
        try:
            reply = await self.preview_client.preview(asked)
        except RequestError as err:
            if err.code == "invalid_field":
                # Its message names the field; the console's own words quote no value.
                return self._preview_page(request, err.status, typed, error=MESSAGES["invalid_preview"])
            raise
        return self._preview_page(request, typed=typed, reply=reply)

    # The policy judged by outcomes -------------------------------------------------------------

    async def outcomes(self, request: web.Request) -> web.Response:
        """The running policy judged by what followed its decisions (`continuity.runs.stats`). A
        read: the filters travel in the address, and a refused filter or a service that does not
        answer comes back as the page with its form as typed and a message."""
        query = parse_outcomes(request.query)
        try:
            asked = query.request()
        except QueryError as bad:
            return self._outcomes_page(request, 400, query, error=bad.message)
        try:
            reply = await self.stats_client.runs_stats(asked)
        except RequestError as err:
            # Every filter was checked above: a refusal here is the service's, said in its words.
            code = "invalid_stats" if err.code == "invalid_field" else err.code
            return self._outcomes_page(request, err.status, query, error=MESSAGES.get(code, err.message))
        except (nats.errors.Error, TimeoutError):
            return self._outcomes_page(request, 503, query, error=NO_ANSWER)
        return self._outcomes_page(request, 200, query, reply=reply)

    def _outcomes_page(
        self,
        request: web.Request,
        status: int,
        query: OutcomesQuery,
        reply: RunsStatsReply | None = None,
        error: str | None = None,
    ) -> web.Response:
        return self._page(request, "outcomes.html", status, **page_values(query, reply, error))

    # Signing in (development) -------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.Response:
        if not self.config.dev_token:
            raise Failure(404, "Sign in through the authenticating proxy.")
        return self._page(request, "login.html", next=safe_next(request.query.get("next")), error=None)

    async def login(self, request: web.Request) -> web.Response:
        if not self.config.dev_token:
            raise Failure(404, "Sign in through the authenticating proxy.")
        form: MultiDictProxy[Any] = request[FORM]
        target = safe_next(str(form.get("next", "/")))
        address, now = client_bucket(request[CLIENT]), time.time()
        wait_s = self.throttle.wait_s(address, now)
        if wait_s:
            # This client's own failures: refused before the token is compared, so its guesses
            # past the limit learn nothing.
            return self._throttled(request, target, wait_s)
        if not dev_token_valid(self.config, str(form.get("token", ""))):
            storm_s = self.throttle.storm_s(now)  # the failures before this one
            self.throttle.failed(address, now)
            metrics.labelled(metrics.CONSOLE_REFUSED, "bad_token").inc()
            if storm_s:  # wrong tokens from everywhere: slowed, while the right one still works
                return self._throttled(request, target, storm_s)
            return self._page(request, "login.html", 401, next=target, error=REFUSALS["bad_token"])
        _, request[NEW_COOKIE] = self.sessions.issue(self.config.dev_actor, now)
        raise web.HTTPSeeOther(target)

    def _throttled(self, request: web.Request, target: str, wait_s: int) -> web.Response:
        metrics.labelled(metrics.CONSOLE_REFUSED, "login_throttled").inc()
        error = f"Too many wrong tokens: try again in {wait_s} seconds."
        response = self._page(request, "login.html", 429, next=target, error=error)
        response.headers["Retry-After"] = str(wait_s)
        return response

    async def logout(self, request: web.Request) -> web.Response:
        session = request[SESSION]
        if session.actor is not None and self.revocations is not None:
            try:
                await self.revocations.revoke(session.sid)
            except (nats.errors.Error, TimeoutError):
                raise Failure(
                    503, "Signing out could not be recorded, so you are still signed in; retry."
                ) from None
        _, request[NEW_COOKIE] = self.sessions.issue(None, time.time())
        raise web.HTTPSeeOther("/login" if self.config.dev_token else "/")
