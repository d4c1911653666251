"""What the middleware learns about a request, for its handler and its response."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import MultiDictProxy

from services.console.failure import Failure
from services.console.identity import Session
from services.console.messages import REFUSALS

SESSION = web.RequestKey("session", Session)
ACTOR: web.RequestKey[str | None] = web.RequestKey("actor", str)  # type: ignore[arg-type]
FORM: web.RequestKey[MultiDictProxy[Any]] = web.RequestKey("form", MultiDictProxy)  # type: ignore[arg-type]
NEW_COOKIE = web.RequestKey("new_cookie", str)
CLIENT = web.RequestKey("client", str)
"""The client's address (`identity.client_address`): the peer, or what a trusted proxy says."""


def actor(request: web.Request) -> str:
    """The signed-in identity: the middleware lets no request without one reach an action."""
    acting = request[ACTOR]
    if acting is None:
        raise Failure(401, REFUSALS["not_signed_in"])
    return acting
