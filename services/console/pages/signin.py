"""Signing in with the development token, and signing out."""

from __future__ import annotations

import time
from typing import Any

import nats.errors
from aiohttp import web
from multidict import MultiDictProxy

from services.console.config import ConsoleConfig
from services.console.failure import Failure
from services.console.identity import LoginThrottle, Sessions, client_bucket, dev_token_valid, safe_next
from services.console.messages import REFUSALS
from services.console.render import Renderer
from services.console.request_keys import CLIENT, FORM, NEW_COOKIE, SESSION
from services.console.revocations import Revocations
from shared.platform import metrics

PROXY_SIGN_IN = "Sign in through the authenticating proxy."


class SignInPages:
    def __init__(
        self, config: ConsoleConfig, sessions: Sessions, revocations: Revocations | None, renderer: Renderer
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.revocations = revocations
        """Signed-out sessions, with the development login (the only sessions that sign in)."""
        self.throttle = LoginThrottle(
            config.login_failures, config.login_failures_total, config.login_window_s
        )
        self.renderer = renderer

    async def login_form(self, request: web.Request) -> web.Response:
        if not self.config.dev_token:
            raise Failure(404, PROXY_SIGN_IN)
        return self.renderer.page(
            request, "login.html", next=safe_next(request.query.get("next")), error=None
        )

    async def login(self, request: web.Request) -> web.Response:
        if not self.config.dev_token:
            raise Failure(404, PROXY_SIGN_IN)
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
            return self.renderer.page(request, "login.html", 401, next=target, error=REFUSALS["bad_token"])
        _, request[NEW_COOKIE] = self.sessions.issue(self.config.dev_actor, now)
        raise web.HTTPSeeOther(target)

    def _throttled(self, request: web.Request, target: str, wait_s: int) -> web.Response:
        metrics.labelled(metrics.CONSOLE_REFUSED, "login_throttled").inc()
        error = f"Too many wrong tokens: try again in {wait_s} seconds."
        response = self.renderer.page(request, "login.html", 429, next=target, error=error)
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
