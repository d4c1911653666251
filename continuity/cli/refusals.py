"""What a NATS server refused this client, told apart from what nats-py reports: refused
credentials when connecting, a denied permission while the connection stays open."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable
from typing import Any

from continuity.cli.exits import EXIT_PERMISSION, Failure

_AUTHENTICATION_TEXT = ("authorization violation", "authentication expired", "authentication timeout")
_PERMISSION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\s\"']*)")
_SUBJECT_SAFE = re.compile(r"[^A-Za-z0-9_.$*>-]")


class Refusals:
    """What the NATS server refused this client, as nats-py reports it: an authentication
    failure (`Authorization Violation`) when connecting, a permission denial (`Permissions
    Violation for Publish to ...` / `... for Subscription to ...`) through the error callback
    while the connection stays open. The server's text is matched, never shown."""

    def __init__(self) -> None:
        self.authentication = False
        self.denial: str | None = None
        self.denied = asyncio.Event()

    async def on_error(self, err: Exception) -> None:  # the connection's error callback
        if is_authentication_failure(err):
            self.authentication = True
        elif (denial := permission_denial(err)) is not None and self.denial is None:
            self.denial = denial
            self.denied.set()

    async def race(self, work: Awaitable[Any]) -> Any:
        """`work`'s result, unless the server denies a permission first: then a Failure at
        once, instead of a wait for an answer that cannot come."""
        task = asyncio.ensure_future(work)
        denied = asyncio.create_task(self.denied.wait())
        try:
            await asyncio.wait({task, denied}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            denied.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise self.permission_failure()
        return task.result()

    def permission_failure(self) -> Failure:
        return Failure(
            EXIT_PERMISSION,
            "permission_denied",
            f"NATS denied this client permission to {self.denial}; the user of --nats-url / "
            f"NATS_URL needs that permission (docs/operations/nats-authorization.md)",
        )


def is_authentication_failure(err: BaseException) -> bool:
    import nats.errors

    if isinstance(err, nats.errors.AuthorizationError | nats.errors.InvalidUserCredentialsError):
        return True
    text = str(err).lower()
    return any(t in text for t in _AUTHENTICATION_TEXT)


def permission_denial(err: BaseException) -> str | None:
    """`publish to <subject>` or `subscribe to <subject>` for a permission violation."""
    match = _PERMISSION.search(str(err).lower())
    if match is None:
        return None
    verb, subject = match.groups()
    # nats-py lowercases the server's text, so an inbox's name is not shown as it really is.
    if subject.startswith("_inbox."):
        return "subscribe to its reply inbox (below _INBOX.operator, or CONTINUITY_NATS_INBOX_PREFIX)"
    subject = _SUBJECT_SAFE.sub("?", subject)[:128] or "a subject"
    return f"{'publish' if verb == 'publish' else 'subscribe'} to {subject}"
