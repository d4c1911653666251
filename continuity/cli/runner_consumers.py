"""A runner's durable pull consumer on its decisions: the session-store creates and deletes it
when asked (`continuity.runners.consumer`), so that neither the runner nor the operator's NATS
user holds a consumer-create right; JetStream lists the ones that exist.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import msgspec

from continuity.cli import exits
from shared.contract import subjects
from shared.contract.client import ContinuityClient
from shared.contract.tenancy import RunnerConsumerAction, RunnerConsumerReply, RunnerConsumerRequest


def request_consumer(
    client: ContinuityClient, runner_id: str, action: RunnerConsumerAction, actor: str
) -> Awaitable[RunnerConsumerReply]:
    """Ask the session-store to create or delete the runner's decisions consumer: it alone may
    (a consumer create request may name any deliver subject, which NATS does not check)."""
    return client.runner_consumer(RunnerConsumerRequest(runner_id=runner_id, action=action, actor=actor))


async def decisions_consumers(nc: Any, timeout: float) -> set[str]:
    """The names of CONTINUITY_DECISIONS' consumers, page after page."""
    names: set[str] = set()
    offset = 0
    while True:
        msg = await nc.request(
            f"$JS.API.CONSUMER.NAMES.{subjects.DECISIONS_STREAM}",
            msgspec.json.encode({"offset": offset}),
            timeout=timeout,
        )
        page = msgspec.json.decode(msg.data)
        if "error" in page:
            # JetStream's own words (e.g. "stream not found"); they name no secret.
            why = str(page["error"].get("description", "error"))[:200]
            raise exits.Failure(
                exits.EXIT_UNAVAILABLE,
                "unavailable",
                f"JetStream did not list the consumers of {subjects.DECISIONS_STREAM}: {why}",
            )
        batch = page.get("consumers") or []
        names.update(batch)
        offset += len(batch)
        if not batch or offset >= int(page.get("total", 0)):
            return names
