"""The servers' account resolver, through the system account: push an account's JWT to every
server, look one up, list them. Each server with a `full` resolver answers for itself, so a
push is confirmed by as many answers as there are servers (`expect`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

UPDATE = "$SYS.REQ.CLAIMS.UPDATE"
LIST = "$SYS.REQ.CLAIMS.LIST"
LOOKUP = "$SYS.REQ.ACCOUNT.{account}.CLAIMS.LOOKUP"


class ResolverError(RuntimeError):
    """A server refused an account's JWT, or too few servers answered in time."""


async def _gather(nc: Client, subject: str, payload: bytes, expect: int, timeout: float) -> list[Msg]:
    """Answers to one request from up to `expect` servers, within `timeout`."""
    inbox = nc.new_inbox()
    answers: list[Msg] = []
    enough = asyncio.Event()

    async def collect(msg: Msg) -> None:
        answers.append(msg)
        if len(answers) >= expect:
            enough.set()

    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish(subject, payload, reply=inbox)
        try:
            await asyncio.wait_for(enough.wait(), timeout)
        except TimeoutError:
            pass
    finally:
        await sub.unsubscribe()
    return answers


async def push(nc: Client, token: str, *, expect: int = 1, timeout: float = 5.0) -> int:
    """Send an account's JWT to every server's resolver; the number that stored it. Raises
    when any refuses it or fewer than `expect` answer."""
    answers = await _gather(nc, UPDATE, token.encode(), expect, timeout)
    stored = 0
    for msg in answers:
        reply = json.loads(msg.data or b"{}")
        if reply.get("error"):
            raise ResolverError(f"a server refused the account: {reply['error'].get('description', '')}")
        stored += 1
    if stored < expect:
        raise ResolverError(f"{stored} of {expect} servers stored the account within {timeout:g} s")
    return stored


async def lookup(nc: Client, account: str, timeout: float = 5.0) -> str | None:
    """The JWT a server holds for `account` (its public key), or None."""
    answers = await _gather(nc, LOOKUP.format(account=account), b"", 1, timeout)
    if not answers or not answers[0].data or answers[0].data.startswith(b"{"):
        return None
    return answers[0].data.decode()


async def accounts(nc: Client, timeout: float = 5.0) -> list[str]:
    """The public keys of the accounts a server's resolver holds."""
    answers = await _gather(nc, LIST, b"", 1, timeout)
    if not answers:
        raise ResolverError("no server answered the list of accounts")
    reply: dict[str, Any] = json.loads(answers[0].data or b"{}")
    return [str(a) for a in reply.get("data") or []]
