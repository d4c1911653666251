"""A reconciliation: what a run's pending tool call waits on, and recording what it did."""

from __future__ import annotations

from typing import Any, cast

from aiohttp import web
from multidict import MultiDictProxy

from services.console import forms
from services.console.forms import EVIDENCE_BOX, FORM_BYTES, OUTCOMES
from services.console.links import link
from services.console.render import Renderer
from services.console.request_keys import FORM, actor
from shared.contract import ResolveRequest
from shared.contract.client import ContinuityClient
from shared.contract.limits import EVIDENCE_CHARS
from shared.contract.types import ActionOutcome


class ReconciliationPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer) -> None:
        self.client = client
        self.renderer = renderer

    async def reconciliation(self, request: web.Request) -> web.Response:
        return await self._page(request)

    async def resolve(self, request: web.Request) -> web.Response:
        run_id = forms.run_id(request.query.get("id", ""))
        form: MultiDictProxy[Any] = request[FORM]
        outcome = str(form.get("outcome", ""))
        evidence = forms.resolve_evidence(form)
        error = forms.resolve_error(outcome, evidence)
        if error:
            return await self._page(request, error=error, status=400, form=form)
        await self.client.resolve(
            ResolveRequest(
                run_id=run_id,
                action_outcome=cast(ActionOutcome, outcome),
                evidence=evidence,
                actor=actor(request),
            )
        )
        raise web.HTTPSeeOther(link("reconciliation", run_id, done="resolved"))

    async def too_large(self, request: web.Request) -> web.Response:
        """The page again, when its resolve form was larger than the console reads."""
        message = (
            f"The form was larger than the console reads ({FORM_BYTES // 1024} KiB), so nothing of it "
            f"was kept: the evidence is at most {EVIDENCE_CHARS} characters."
        )
        return await self._page(request, error=message, status=413)

    async def _page(
        self,
        request: web.Request,
        error: str | None = None,
        status: int = 200,
        form: MultiDictProxy[Any] | None = None,
    ) -> web.Response:
        """The reconciliation's page; with a refused form, its message and the form as typed."""
        record = await self.client.reconciliation(forms.run_id(request.query.get("id", "")))
        return self.renderer.page(
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
