"""The decisions one runner receives, read as that runner reads them: from the decisions stream,
so a duplicate the stream dropped is not counted."""

from __future__ import annotations

import msgspec
import nats.errors
from nats.js import JetStreamContext

from shared.contract import Decision, subjects
from shared.contract.tenancy import Refusal, is_refusal
from tests.support.waiting import wait_for


class Decisions:
    """Every decision JetStream stored for `runner_id`, through an ephemeral consumer of its own;
    `items` keeps each decision with its `Nats-Msg-Id`, in stream order."""

    def __init__(self, js: JetStreamContext, runner_id: str) -> None:
        self.js = js
        self.runner_id = runner_id
        self.items: list[tuple[Decision, str | None]] = []
        self.refusals: list[Refusal] = []
        """Refusals of the runner's events (contract 10.5), kept apart from its decisions."""
        self._sub: JetStreamContext.PullSubscription | None = None

    @property
    def seen(self) -> list[Decision]:
        return [d for d, _ in self.items]

    async def _fetch(self, timeout: float) -> bool:
        """One fetch of what is stored; False when nothing arrived within `timeout`."""
        if self._sub is None:
            self._sub = await self.js.pull_subscribe(
                subjects.decisions(self.runner_id), stream=subjects.DECISIONS_STREAM
            )
        try:
            msgs = await self._sub.fetch(100, timeout=timeout)
        except (nats.errors.TimeoutError, TimeoutError):  # nats-py raises either
            return False
        for m in msgs:
            await m.ack()
            msg_id = (m.headers or {}).get("Nats-Msg-Id")
            if is_refusal(m.data):
                self.refusals.append(msgspec.json.decode(m.data, type=Refusal))
                continue
            self.items.append((msgspec.json.decode(m.data, type=Decision), msg_id))
        return True

    async def read(self, quiet_s: float = 0.2) -> list[Decision]:
        """Everything stored so far: fetches until none arrives for `quiet_s`."""
        while await self._fetch(quiet_s):
            pass
        return self.seen

    async def wait(self, count: int, timeout: float = 10.0) -> list[Decision]:
        """Until at least `count` decisions were stored, failing the test at the deadline; it
        returns as soon as they are there, even while more keep arriving."""

        async def enough() -> bool:
            await self._fetch(0.2)
            return len(self.items) >= count

        await wait_for(enough, timeout=timeout, what=f"{count} decisions for {self.runner_id}")
        return self.seen

    async def all(self) -> list[Decision]:
        """Everything stored so far; call once the deciding service is idle."""
        return await self.read(0.3)

    async def continued(self, quiet_s: float = 0.2) -> list[Decision]:
        return [d for d in await self.read(quiet_s) if d.action == "continue_fresh"]

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
