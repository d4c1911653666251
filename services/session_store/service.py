"""The session-store's request endpoints (contract 3.2 to 3.5)."""

from __future__ import annotations

from shared import metrics, subjects
from shared.bus.endpoints import Endpoints
from shared.contracts.errors import conflict, not_found
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
from shared.pipeline import PipelinedRedis
from shared.runs.retention import Retention
from shared.runtime import Context

from . import rules
from .store import SessionStore

VERSION = "1.0.0"

_CONFLICT_MESSAGES = {
    "revision_conflict": "expected_revision does not match the stored revision",
    "stale_epoch": "epoch is older than the stored epoch",
    "session_held": "the session is held for an operator; commit a new native session instead",
}


class SessionStoreApp:
    name = "session-store"

    def __init__(self) -> None:
        self._endpoints: Endpoints | None = None
        self._store: SessionStore | None = None
        self._redis: PipelinedRedis | None = None

    async def start(self, ctx: Context) -> None:
        # Requests share one auto-pipelined connection: concurrent decisions cost one write.
        self._redis = PipelinedRedis(
            ctx.config.redis_url, cluster=ctx.config.redis_cluster, ssl_context=ctx.redis_tls
        )
        self._store = SessionStore(self._redis, Retention.from_config(ctx.config))
        ep = Endpoints(
            ctx.nc,
            "continuity-session-store",
            VERSION,
            "Session records and resume decisions",
            ctx.config.request_concurrency,
            reply_prefixes=ctx.config.reply_prefixes,
        )
        ep.add("decide", subjects.SESSIONS_DECIDE, DecideRequest, self.decide)
        ep.add("commit", subjects.SESSIONS_COMMIT, CommitRequest, self.commit)
        ep.add("get", subjects.SESSIONS_GET, GetRequest, self.get)
        ep.add("reject", subjects.SESSIONS_REJECT, RejectRequest, self.reject)
        await ep.start()
        self._endpoints = ep

    async def drain(self, timeout: float) -> None:
        if self._endpoints is not None:
            await self._endpoints.drain(timeout)
        if self._redis is not None:
            await self._redis.aclose()

    def ready(self) -> bool:
        return self._endpoints is not None

    @property
    def store(self) -> SessionStore:
        assert self._store is not None
        return self._store

    async def decide(self, req: DecideRequest) -> DecideReply:
        reply = rules.decide(await self.store.load(req.session.key), req)
        metrics.labelled(metrics.SESSION_DECISIONS, reply.mode, reply.reason or "none").inc()
        return reply

    async def commit(self, req: CommitRequest) -> CommitReply:
        result = await self.store.commit(req)
        metrics.labelled(metrics.SESSION_COMMITS, result.code).inc()
        if result.code != "ok":
            raise conflict(result.code, _CONFLICT_MESSAGES.get(result.code, "conflict"))
        return CommitReply(revision=result.revision, epoch=result.epoch)

    async def get(self, req: GetRequest) -> SessionView:
        stored = await self.store.load(req.session.key)
        if stored is None:
            raise not_found("no session record for this session")
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
