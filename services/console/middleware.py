"""What every request passes: the security headers on every response, and one middleware that
establishes who is acting (`identity`), refuses forms without the session's anti-forgery token
or from another origin, turns a service's error into a page that explains it, and counts the
request per page and status."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import quote

import nats.errors
from aiohttp import web

from services.console.config import ConsoleConfig
from services.console.failure import Failure
from services.console.forms import REPLAY_FORM_BYTES
from services.console.identity import (
    COOKIE,
    CSRF_FIELD,
    Refused,
    Session,
    Sessions,
    client_address,
    expected_origin,
    origin_allowed,
    proxy_identity,
)
from services.console.messages import MESSAGES, NO_ANSWER, REFUSALS
from services.console.render import Renderer
from services.console.request_keys import ACTOR, CLIENT, FORM, NEW_COOKIE, SESSION
from services.console.revocations import Revocations
from shared.contract.client import RequestError
from shared.platform import metrics
from shared.platform.logs import Log

log = Log("continuity.console")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FORWARDED_FOR = "X-Forwarded-For"
PUBLIC_PAGES = frozenset({"login", "login_post", "static"})
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["X-Frame-Options"] = "DENY"
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"


class Guard:
    """The middleware. `too_large` names the pages whose form, once larger than the console
    reads, is shown again by a handler of their own rather than refused."""

    def __init__(
        self,
        config: ConsoleConfig,
        sessions: Sessions,
        revocations: Revocations | None,
        renderer: Renderer,
        too_large: Mapping[str, Handler],
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.revocations = revocations
        self.renderer = renderer
        self.too_large = too_large

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
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

    async def _guarded(self, request: web.Request, handler: Handler, page: str) -> web.StreamResponse:
        now = time.time()
        session = self.sessions.read(request.cookies.get(COOKIE), now)
        if page != "static":
            try:
                session = await self._unless_revoked(session)
            except (nats.errors.Error, TimeoutError):
                return self.renderer.error(request, 503, "The sign-in cannot be checked; retry in a moment.")
        try:
            actor = self._identify(request, session, now)
            if request.method == "POST":
                handler = await self._read_form(request, handler, page)
            if page not in PUBLIC_PAGES and actor is None:
                self._sign_in_first(request, page)
        except Refused as refused:
            return self._refused(request, refused)
        except Failure as failure:
            return self.renderer.error(request, failure.status, failure.message)
        return await self._answer(request, handler, page)

    async def _unless_revoked(self, session: Session | None) -> Session | None:
        """The cookie's session, unless it was signed out: then a copy of its cookie signs nobody in."""
        if session is None or session.actor is None or self.revocations is None:
            return session
        if await self.revocations.revoked(session.sid):
            metrics.labelled(metrics.CONSOLE_REFUSED, "session_revoked").inc()
            return None
        return session

    def _identify(self, request: web.Request, session: Session | None, now: float) -> str | None:
        """Who is acting (the proxy's identity, or the development login's), with the request's
        session (a new one if it had none) and client noted on the request."""
        cfg = self.config
        named = request.headers.getall(cfg.identity_header, []) if cfg.identity_header else []
        actor = proxy_identity(cfg, request.remote, named)
        request[CLIENT] = client_address(cfg, request.remote, request.headers.getall(FORWARDED_FOR, []))
        if actor is None and session is not None and cfg.dev_token:
            actor = session.actor
        if session is None:
            session, request[NEW_COOKIE] = self.sessions.issue(None, now)
        request[SESSION] = session
        request[ACTOR] = actor
        return actor

    async def _read_form(self, request: web.Request, handler: Handler, page: str) -> Handler:
        """The form of a POST from this console's origin with the session's anti-forgery token,
        noted on the request; the handler that answers it."""
        expected = expected_origin(self.config, request.scheme, request.host)
        if not origin_allowed(expected, request.headers.get("Origin"), request.headers.get("Referer")):
            raise Refused("origin_mismatch")
        # The replay form carries a policy file: it alone is read up to its own bound.
        reading = request.clone(client_max_size=REPLAY_FORM_BYTES) if page == "replay_post" else request
        try:
            form = await reading.post()
        except web.HTTPRequestEntityTooLarge:
            if page not in self.too_large:
                raise Failure(413, "The form is too large.") from None
            # Nothing of it is acted on: its form is shown again (a read, as its page is),
            # saying why; a browser's evidence box never sends this much.
            return self.too_large[page]
        token = form.get(CSRF_FIELD)
        if NEW_COOKIE in request or not self.sessions.csrf_valid(request[SESSION], str(token or "")):
            raise Refused("csrf_invalid")
        request[FORM] = form
        return handler

    def _sign_in_first(self, request: web.Request, page: str) -> None:
        if request.method == "GET" and self.config.dev_token and page != "events":
            raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
        raise Refused("not_signed_in", 401)

    async def _answer(self, request: web.Request, handler: Handler, page: str) -> web.StreamResponse:
        """The handler's response, or a page that explains why there is none."""
        try:
            return await handler(request)
        except Failure as failure:
            return self.renderer.error(request, failure.status, failure.message, failure.next_step)
        except RequestError as err:
            return self.renderer.error(request, err.status, MESSAGES.get(err.code, err.message))
        except (nats.errors.Error, TimeoutError):
            return self.renderer.error(request, 503, NO_ANSWER)
        except web.HTTPException:
            raise
        except Exception:
            log.error("console_page_failed", exc=True, page=page)
            return self.renderer.error(request, 500, "The console failed on this page.")

    def _refused(self, request: web.Request, refused: Refused) -> web.Response:
        metrics.labelled(metrics.CONSOLE_REFUSED, refused.reason).inc()
        request.setdefault(ACTOR, None)
        return self.renderer.error(request, refused.status, REFUSALS[refused.reason])
