"""Runs: the query form and its pages of runs, a run with its audit trail, and its retry."""

from __future__ import annotations

import asyncio

from aiohttp import web

from services.console import forms
from services.console.config import trace_link
from services.console.failure import Failure
from services.console.links import link
from services.console.messages import MESSAGES
from services.console.pages.sessions import session_record
from services.console.render import Renderer
from services.console.request_keys import FORM, actor
from services.console.runs_query import CURSOR_MESSAGE, REASONS, RUN_STATUSES, QueryError, parse
from shared.contract import RetryRequest
from shared.contract.client import ContinuityClient, RequestError

RECONCILE_LINK = "Record what the pending tool call did"


class RunPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer, trace_url: str) -> None:
        self.client = client
        self.renderer = renderer
        self.trace_url = trace_url
        """The address template of a run's traces (`config.trace_link`), or empty: no link."""

    async def runs(self, request: web.Request) -> web.Response:
        q = request.query
        run_id = q.get("run_id", "").strip()
        if run_id:
            raise web.HTTPSeeOther(link("run", forms.run_id(run_id)))
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
        return self.renderer.page(
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
        run_id = forms.run_id(request.query.get("id", ""))
        run, audit = await asyncio.gather(self.client.run(run_id), self.client.audit(run_id))
        session = await session_record(self.client, run.session)
        return self.renderer.page(
            request,
            "run.html",
            run=run,
            audit=audit.items,
            session=session,
            done=request.query.get("done"),
            trace_url=trace_link(self.trace_url, run.run_id) if self.trace_url else None,
        )

    async def retry(self, request: web.Request) -> web.Response:
        run_id = forms.run_id(request.query.get("id", ""))
        if request[FORM].get("confirm") != "yes":
            raise Failure(400, "Confirm that the cause was removed before retrying.")
        try:
            await self.client.retry(RetryRequest(run_id=run_id, actor=actor(request)))
        except RequestError as err:
            if err.code != "reconciliation_required":
                raise
            # The run moved on since its page was shown: what it waits on instead is one click away.
            reconcile = (link("reconciliation", run_id), RECONCILE_LINK)
            raise Failure(err.status, MESSAGES[err.code], reconcile) from None
        raise web.HTTPSeeOther(link("run", run_id, done="retried"))

    async def moved(self, request: web.Request) -> web.Response:
        """The addresses of earlier releases (`/runs/{id}`, `/reconciliations/{id}`), kept for
        links people saved."""
        page = "run" if request.path.startswith("/runs/") else "reconciliation"
        raise web.HTTPMovedPermanently(link(page, request.match_info["run_id"]))
