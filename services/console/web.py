"""The console's pages: server-rendered HTML (aiohttp and Jinja2), talking to the services with
the project's typed client, like the CLI.

`Console` assembles the application: the pages of each subject (`pages`), drawn by one
`Renderer` (`render`), behind the middleware (`middleware`) that every request passes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.console.config import ConsoleConfig
from services.console.forms import FORM_BYTES
from services.console.identity import Sessions
from services.console.middleware import Guard, security_headers
from services.console.pages.outcomes import OutcomesPages
from services.console.pages.overview import OverviewPages
from services.console.pages.preview import PreviewPages
from services.console.pages.reconciliations import ReconciliationPages
from services.console.pages.replay import ReplayPages
from services.console.pages.runners import RunnersPages
from services.console.pages.runs import RunPages
from services.console.pages.sessions import SessionPages
from services.console.pages.signin import SignInPages
from services.console.render import HERE, Renderer
from services.console.revocations import Revocations
from services.console.streams import DecisionFeed
from shared.contract.client import ContinuityClient


class Console:
    def __init__(
        self,
        config: ConsoleConfig,
        client: ContinuityClient,
        js: Any,
        feed: DecisionFeed,
        revocations: Revocations | None = None,
    ) -> None:
        sessions = Sessions(config.session_key, config.session_ttl_s)
        renderer = Renderer(config, sessions)
        self.overview = OverviewPages(client, js, feed, renderer)
        self.runs = RunPages(client, renderer, config.trace_url)
        self.reconciliation = ReconciliationPages(client, renderer)
        self.session = SessionPages(client, renderer)
        self.replay = ReplayPages(client, renderer)
        self.preview = PreviewPages(client, renderer)
        self.outcomes = OutcomesPages(client, renderer)
        self.runners = RunnersPages(client, renderer)
        self.signin = SignInPages(config, sessions, revocations, renderer)
        too_large = {"resolve": self.reconciliation.too_large, "replay_post": self.replay.too_large}
        self.guard = Guard(config, sessions, revocations, renderer, too_large)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard.middleware], client_max_size=FORM_BYTES)
        app.on_response_prepare.append(security_headers)
        r = app.router
        r.add_get("/", self.overview.overview, name="overview")
        r.add_get("/runs", self.runs.runs, name="runs")
        r.add_get("/run", self.runs.run, name="run")
        r.add_post("/run/retry", self.runs.retry, name="retry")
        r.add_get("/reconciliation", self.reconciliation.reconciliation, name="reconciliation")
        r.add_post("/reconciliation/resolve", self.reconciliation.resolve, name="resolve")
        r.add_get("/session", self.session.session, name="session")
        r.add_post("/session/transfer", self.session.transfer, name="transfer")
        r.add_get("/replay", self.replay.replay_form, name="replay")
        r.add_post("/replay", self.replay.replay, name="replay_post")
        r.add_get("/preview", self.preview.preview_form, name="preview")
        r.add_post("/preview", self.preview.preview, name="preview_post")
        r.add_get("/outcomes", self.outcomes.outcomes, name="outcomes")
        r.add_get("/runners", self.runners.runners, name="runners")
        # The addresses of earlier releases, kept for links people saved: to the query form.
        r.add_get("/runs/{run_id}", self.runs.moved, name="run_moved")
        r.add_get("/reconciliations/{run_id}", self.runs.moved, name="reconciliation_moved")
        r.add_get("/dead", self.overview.dead, name="dead")
        r.add_get("/events", self.overview.events, name="events")
        r.add_get("/login", self.signin.login_form, name="login")
        r.add_post("/login", self.signin.login, name="login_post")
        r.add_post("/logout", self.signin.logout, name="logout")
        r.add_static("/static", HERE / "static", name="static", append_version=False)
        return app
