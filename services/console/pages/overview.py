"""What is happening now: the overview, the dead letters, and the live feed of decisions."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from aiohttp import web

from services.console.render import Renderer
from services.console.runs_query import RUN_STATUSES, count_label
from services.console.streams import DecisionFeed, recent_dead_letters, recent_decisions
from shared.contract import ListRequest
from shared.contract.client import ContinuityClient
from shared.contract.runs import RunsListRequest
from shared.platform import metrics

STATUS_COUNT_CAP = 100
"""The overview counts each status's runs up to this many, and shows more as `100+`."""
LIVE_SHOWN = 10
DEAD_SHOWN = 100


class OverviewPages:
    def __init__(self, client: ContinuityClient, js: Any, feed: DecisionFeed, renderer: Renderer) -> None:
        self.client = client
        self.js = js
        self.feed = feed
        self.renderer = renderer

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
        return self.renderer.page(
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

    async def dead(self, request: web.Request) -> web.Response:
        letters = await recent_dead_letters(self.js, DEAD_SHOWN)
        return self.renderer.page(request, "dead.html", letters=list(reversed(letters)), shown=DEAD_SHOWN)

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
