"""The session-store service: request endpoints on `continuity.sessions.*` (contract 3.2 to 3.5)."""

from __future__ import annotations

from shared import subjects
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
from shared.service import EndpointSpec, ServiceApp, ServiceSpec

from .requests import SessionRequests
from .store import SessionStore

NAME = "session-store"
VERSION = "1.0.0"


def build(ctx: Context) -> ServiceSpec:
    # Requests share one auto-pipelined connection: concurrent decisions cost one write.
    redis = PipelinedRedis(ctx.config.redis_url, cluster=ctx.config.redis_cluster, ssl_context=ctx.redis_tls)
    requests = SessionRequests(SessionStore(redis, Retention.from_config(ctx.config)))
    return ServiceSpec(
        name=NAME,
        version=VERSION,
        description="Session records and resume decisions",
        endpoints=(
            EndpointSpec(
                "decide",
                subjects.SESSIONS_DECIDE,
                DecideRequest,
                DecideReply,
                requests.decide,
                pipelined=True,
            ),
            EndpointSpec("commit", subjects.SESSIONS_COMMIT, CommitRequest, CommitReply, requests.commit),
            EndpointSpec("get", subjects.SESSIONS_GET, GetRequest, SessionView, requests.get),
            EndpointSpec("reject", subjects.SESSIONS_REJECT, RejectRequest, RejectReply, requests.reject),
        ),
        closers=(redis.aclose,),
    )


class SessionStoreApp(ServiceApp):
    def __init__(self) -> None:
        super().__init__(NAME, build)
