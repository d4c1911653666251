"""A saved session: its record, its owner's history, and giving it to another runner."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from services.console import forms
from services.console.failure import Failure
from services.console.links import session_link
from services.console.render import Renderer
from services.console.request_keys import FORM, actor
from shared.contract import GetRequest, SessionRef, SessionView
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.tenancy import RunnerRecord, SessionAuditRequest, TransferRequest

NO_SESSION = "No saved session is known for this tenant, conversation and agent."
BACK_TO_SESSION = "Back to the session"


def transfer_choices(runners: Sequence[RunnerRecord], tenant: str, owner: str | None) -> list[str]:
    """The runners a session of `tenant` may be given to: active, issued for the tenant, and not
    its owner already (the session-store checks the same again when the transfer arrives)."""
    return [
        r.runner_id for r in runners if r.status == "active" and tenant in r.tenants and r.runner_id != owner
    ]


async def session_record(client: ContinuityClient, ref: SessionRef) -> SessionView | None:
    """The session's record as the services' own account sees it (with its owner), or None."""
    try:
        return await client.get(GetRequest(session=ref))
    except RequestError as err:
        if err.status != 404:
            raise
        return None


class SessionPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer) -> None:
        self.client = client
        self.renderer = renderer

    async def session(self, request: web.Request) -> web.Response:
        ref = forms.session_ref(request.query)
        history, record, directory = await asyncio.gather(
            self.client.ownership(SessionAuditRequest(session=ref)),
            session_record(self.client, ref),
            self.client.runners(),
        )
        if record is None:
            # Its ownership history may outlive the record: shown, with nothing to transfer.
            return self.renderer.page(
                request, "session.html", 404, ref=ref, record=None, history=history.items
            )
        return self.renderer.page(
            request,
            "session.html",
            ref=ref,
            record=record,
            history=history.items,
            choices=transfer_choices(directory.items, ref.tenant, record.owner),
            done=request.query.get("done"),
        )

    async def transfer(self, request: web.Request) -> web.Response:
        ref = forms.session_ref(request.query)
        back = (session_link(ref), BACK_TO_SESSION)
        form: MultiDictProxy[Any] = request[FORM]
        runner_id = forms.transfer_target(form, back)
        try:
            reply = await self.client.transfer(
                TransferRequest(session=ref, runner_id=runner_id, actor=actor(request))
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
