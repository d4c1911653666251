"""The session-store's request handlers (contract 3.2 to 3.5)."""

from __future__ import annotations

from collections.abc import Awaitable

from shared import metrics
from shared.contracts.errors import CATALOGUE, NOT_FOUND
from shared.contracts.sessions import (
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    GetRequest,
    RejectReply,
    RejectRequest,
    SessionView,
)
from shared.session_record import StoredSession

from . import rules
from .store import SessionStore


class SessionRequests:
    def __init__(self, store: SessionStore) -> None:
        self.store = store

    def decide(self, req: DecideRequest) -> Awaitable[DecideReply]:
        """A pipelined endpoint: the record's read is sent now, the rules run on its reply."""
        return self._decided(self.store.read(req.session.key), req)

    @staticmethod
    async def _decided(stored: Awaitable[StoredSession | None], req: DecideRequest) -> DecideReply:
        reply = rules.decide(await stored, req)
        metrics.adder(metrics.SESSION_DECISIONS, reply.mode, reply.reason or "none")()
        return reply

    async def commit(self, req: CommitRequest) -> CommitReply:
        result = await self.store.commit(req)
        metrics.adder(metrics.SESSION_COMMITS, result.code)()
        if result.code != "ok":
            raise CATALOGUE[result.code].error()  # revision_conflict, stale_epoch, session_held
        return CommitReply(revision=result.revision, epoch=result.epoch)

    async def get(self, req: GetRequest) -> SessionView:
        stored = await self.store.read(req.session.key)
        if stored is None:
            raise NOT_FOUND.error("no session record for this session")
        v1 = stored.v1
        return SessionView(
            native_session_id=v1["native_session_id"],
            adapter=v1["adapter"],
            model=v1["model"],
            cwd=v1["cwd"],
            cursor=v1["cursor"],
            checkpoint_policy=v1["checkpoint_policy"],
            state=stored.state,  # type: ignore[arg-type]
            revision=stored.revision,
            epoch=stored.epoch,
            updated_at=v1["updated_at"],
            has_generation=stored.has_generation,
            generation_trusted=stored.generation_trusted,
        )

    async def reject(self, req: RejectRequest) -> RejectReply:
        return RejectReply(cleared=await self.store.reject(req.session.key, req.native_session_id))
