"""Previewing a harness release's generation over the saved sessions."""

from __future__ import annotations

from aiohttp import web

from services.console.failure import Failure
from services.console.forms import PreviewForm
from services.console.messages import MESSAGES
from services.console.render import Renderer
from services.console.request_keys import FORM
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import NAME_CHARS
from shared.contract.policy import PreviewReply

PREVIEW_TIMEOUT_S = 60.0
"""How long the console waits for a rollout preview: it reads every saved session."""


class PreviewPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer) -> None:
        # A preview reads every saved session of the adapter: it may take longer than a lookup.
        self.client = ContinuityClient(client.nc, timeout=max(client.timeout, PREVIEW_TIMEOUT_S))
        self.renderer = renderer

    async def preview_form(self, request: web.Request) -> web.Response:
        return self._page(request)

    async def preview(self, request: web.Request) -> web.Response:
        """What a rollout of a new generation of an adapter does to its saved sessions at their
        next turn. A read: nothing changes; it is a form so that the generation travels in no
        address (nor a browser's history, nor an access log), and it is never shown back."""
        typed = PreviewForm(request[FORM])
        try:
            asked = typed.request()
        except Failure as bad:
            return self._page(request, bad.status, typed, error=bad.message)
        try:
            reply = await self.client.preview(asked)
        except RequestError as err:
            if err.code == "invalid_field":
                # Its message names the field; the console's own words quote no value.
                return self._page(request, err.status, typed, error=MESSAGES["invalid_preview"])
            raise
        return self._page(request, typed=typed, reply=reply)

    def _page(
        self,
        request: web.Request,
        status: int = 200,
        typed: PreviewForm | None = None,
        error: str | None = None,
        reply: PreviewReply | None = None,
    ) -> web.Response:
        return self.renderer.page(
            request,
            "preview.html",
            status,
            typed=typed or PreviewForm(),
            error=error,
            reply=reply,
            name_chars=NAME_CHARS,
        )
