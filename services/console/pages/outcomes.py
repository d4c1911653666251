"""The running policy judged by what followed its decisions (the page's query and charts are
`services.console.outcomes`)."""

from __future__ import annotations

import nats.errors
from aiohttp import web

from services.console.messages import MESSAGES, NO_ANSWER
from services.console.outcomes import OutcomesQuery, page_values, parse
from services.console.render import Renderer
from services.console.runs_query import QueryError
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.runs import RunsStatsReply

STATS_TIMEOUT_S = 60.0
"""How long the console waits for the outcomes: the reconciliation service reads every run of
the window."""


class OutcomesPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer) -> None:
        self.client = ContinuityClient(client.nc, timeout=max(client.timeout, STATS_TIMEOUT_S))
        self.renderer = renderer

    async def outcomes(self, request: web.Request) -> web.Response:
        """The running policy judged by what followed its decisions (`continuity.runs.stats`). A
        read: the filters travel in the address, and a refused filter or a service that does not
        answer comes back as the page with its form as typed and a message."""
        query = parse(request.query)
        try:
            asked = query.request()
        except QueryError as bad:
            return self._page(request, 400, query, error=bad.message)
        try:
            reply = await self.client.runs_stats(asked)
        except RequestError as err:
            # Every filter was checked above: a refusal here is the service's, said in its words.
            code = "invalid_stats" if err.code == "invalid_field" else err.code
            return self._page(request, err.status, query, error=MESSAGES.get(code, err.message))
        except (nats.errors.Error, TimeoutError):
            return self._page(request, 503, query, error=NO_ANSWER)
        return self._page(request, 200, query, reply=reply)

    def _page(
        self,
        request: web.Request,
        status: int,
        query: OutcomesQuery,
        reply: RunsStatsReply | None = None,
        error: str | None = None,
    ) -> web.Response:
        return self.renderer.page(request, "outcomes.html", status, **page_values(query, reply, error))
