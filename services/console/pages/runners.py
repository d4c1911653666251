"""The runners: each one's tenants, status, live connections and usage of its quotas, as
`continuity runners list` shows them (`continuity.runners.list`, contract 10.2)."""

from __future__ import annotations

from typing import Any

import nats.errors
from aiohttp import web

from services.console.messages import MESSAGES, NO_ANSWER
from services.console.render import Renderer
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.tenancy import ListedRunner, QuotaUsage


def events(u: QuotaUsage) -> str:
    """Of the burst, spent lately: `3 of 50 (rate 0.5/s)`."""
    return f"{u.events_spent:.0f} of {u.event_burst} (rate {u.event_rate:g}/s)"


def row(r: ListedRunner) -> dict[str, Any]:
    own = next((u for u in r.usage if u.scope == "runner"), None)
    return {
        "runner": r,
        "connections": "unknown" if r.connections is None else str(r.connections),
        "events": events(own) if own else "",
        "runs": f"{own.stored_runs} of {own.stored_runs_limit}" if own else "",
        "tenants": [
            (u.owner, events(u), f"{u.stored_runs} of {u.stored_runs_limit}")
            for u in r.usage
            if u.scope == "tenant"
        ],
    }


class RunnersPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer) -> None:
        self.client = client
        self.renderer = renderer

    async def runners(self, request: web.Request) -> web.Response:
        try:
            reply = await self.client.runners()
        except RequestError as err:
            return self._page(request, err.status, error=MESSAGES.get(err.code, err.message))
        except (nats.errors.Error, TimeoutError):
            return self._page(request, 503, error=NO_ANSWER)
        rows = [row(r) for r in reply.items]
        known = any(r.connections is not None for r in reply.items)
        return self._page(request, 200, rows=rows, connections_known=known)

    def _page(self, request: web.Request, status: int, **values: Any) -> web.Response:
        values.setdefault("rows", None)
        values.setdefault("connections_known", False)
        values.setdefault("error", None)
        return self.renderer.page(request, "runners.html", status, **values)
