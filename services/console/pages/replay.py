"""Replaying the recorded decisions under a candidate policy."""

from __future__ import annotations

from aiohttp import web

from services.console.failure import Failure
from services.console.forms import REPLAY_FORM_BYTES, REPLAY_MAX_HOURS, ReplayForm
from services.console.messages import MESSAGES
from services.console.render import Renderer
from services.console.request_keys import FORM
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.limits import POLICY_MAX_BYTES
from shared.contract.policy import ReplayReply

REPLAY_TIMEOUT_S = 120.0
"""How long the console waits for a replay: it reads every matching run's audit trail."""
REFUSAL_SHOWN = 1000
"""The characters of a refused policy's message shown (the service's message names the
invariant and never echoes the policy's values)."""


class ReplayPages:
    def __init__(self, client: ContinuityClient, renderer: Renderer) -> None:
        # A replay reads every matching run's audit trail: it may take longer than a lookup.
        self.client = ContinuityClient(client.nc, timeout=max(client.timeout, REPLAY_TIMEOUT_S))
        self.renderer = renderer

    async def replay_form(self, request: web.Request) -> web.Response:
        return self._page(request)

    async def replay(self, request: web.Request) -> web.Response:
        """Re-decide the recorded decisions under the pasted or uploaded policy (none: the running
        one). A read: nothing changes, so nothing is audited; it is a form because a policy
        does not fit an address."""
        typed = ReplayForm(request[FORM])
        try:
            asked = typed.request()
        except Failure as bad:
            return self._page(request, bad.status, typed, error=bad.message)
        try:
            reply = await self.client.replay(asked)
        except RequestError as err:
            if err.code == "policy_refused":
                # The service's message names the invariant; shown as text, bounded.
                message = f"The policy was refused: {err.message[:REFUSAL_SHOWN]}"
                return self._page(request, err.status, typed, error=message)
            if err.code == "invalid_field":
                return self._page(request, err.status, typed, error=MESSAGES["invalid_replay"])
            raise
        return self._page(request, typed=typed, reply=reply)

    async def too_large(self, request: web.Request) -> web.Response:
        """The form again, empty, when it was larger than the console reads."""
        message = (
            f"The form was larger than the console reads ({REPLAY_FORM_BYTES // 1024} KiB), so nothing of "
            f"it was kept: a policy file holds at most {POLICY_MAX_BYTES // 1024} KiB."
        )
        return self._page(request, 413, error=message)

    def _page(
        self,
        request: web.Request,
        status: int = 200,
        typed: ReplayForm | None = None,
        error: str | None = None,
        reply: ReplayReply | None = None,
    ) -> web.Response:
        return self.renderer.page(
            request,
            "replay.html",
            status,
            typed=typed or ReplayForm(),
            error=error,
            reply=reply,
            max_bytes=POLICY_MAX_BYTES,
            max_hours=REPLAY_MAX_HOURS,
        )
