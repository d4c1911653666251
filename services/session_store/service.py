"""The session-store service: request endpoints on `continuity.sessions.*` (contract 3.2 to 3.5),
each runner's on `continuity.sessions.<runner_id>.*`, the operators' ownership transfers and the
runner directory on `continuity.runners.*` (section 10)."""

from __future__ import annotations

from typing import Any

from shared.contract import subjects
from shared.contract.sessions import (
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    GetRequest,
    RejectReply,
    RejectRequest,
    SessionView,
)
from shared.contract.tenancy import (
    ClaimRequest,
    OwnershipReply,
    RunnerGetRequest,
    RunnerPutRequest,
    RunnerRecord,
    RunnerRevokeRequest,
    RunnersListReply,
    RunnersListRequest,
    SessionAuditReply,
    SessionAuditRequest,
    TransferRequest,
)
from shared.platform.redis import Redis
from shared.platform.runtime import Context
from shared.platform.service import EndpointSpec, ServiceApp, ServiceSpec
from shared.records.retention import Retention
from shared.records.runners import RunnerDirectory

from .requests import SessionRequests
from .store import SessionStore

NAME = "session-store"
VERSION = "1.1.0"

_RUNNER = subjects.RUNNER_SESSIONS_TOKEN


def build(ctx: Context) -> ServiceSpec:
    # Requests share one auto-pipelined connection: concurrent decisions cost one write.
    redis = Redis.from_config(ctx.config)
    requests = SessionRequests(
        SessionStore(redis, Retention.from_config(ctx.config)),
        RunnerDirectory(redis, cache_s=ctx.config.runner_cache_s),
        enforced=ctx.config.tenancy == "enforced",
        claims_allowed=ctx.config.session_claims == "allow",
    )
    runner = subjects.runner_sessions_pattern
    endpoints: tuple[EndpointSpec[Any, Any], ...] = (
        # The services' own account: operators and the CLI.
        EndpointSpec(
            "decide", subjects.SESSIONS_DECIDE, DecideRequest, DecideReply, requests.decide, pipelined=True
        ),
        EndpointSpec("commit", subjects.SESSIONS_COMMIT, CommitRequest, CommitReply, requests.commit),
        EndpointSpec("get", subjects.SESSIONS_GET, GetRequest, SessionView, requests.get),
        EndpointSpec("reject", subjects.SESSIONS_REJECT, RejectRequest, RejectReply, requests.reject),
        EndpointSpec(
            "transfer", subjects.SESSIONS_TRANSFER, TransferRequest, OwnershipReply, requests.transfer
        ),
        EndpointSpec(
            "ownership", subjects.SESSIONS_AUDIT, SessionAuditRequest, SessionAuditReply, requests.audit
        ),
        EndpointSpec(
            "runners-put", subjects.RUNNERS_PUT, RunnerPutRequest, RunnerRecord, requests.runner_put
        ),
        EndpointSpec(
            "runners-revoke",
            subjects.RUNNERS_REVOKE,
            RunnerRevokeRequest,
            RunnerRecord,
            requests.runner_revoke,
        ),
        EndpointSpec(
            "runners-get", subjects.RUNNERS_GET, RunnerGetRequest, RunnerRecord, requests.runner_get
        ),
        EndpointSpec(
            "runners-list", subjects.RUNNERS_LIST, RunnersListRequest, RunnersListReply, requests.runners_list
        ),
        # Runners: the runner_id comes from the subject the server routed the request on.
        EndpointSpec(
            "runner-decide",
            runner("decide"),
            DecideRequest,
            DecideReply,
            requests.decide,
            pipelined=True,
            runner_token=_RUNNER,
        ),
        EndpointSpec(
            "runner-commit",
            runner("commit"),
            CommitRequest,
            CommitReply,
            requests.commit,
            runner_token=_RUNNER,
        ),
        EndpointSpec(
            "runner-get", runner("get"), GetRequest, SessionView, requests.get, runner_token=_RUNNER
        ),
        EndpointSpec(
            "runner-reject",
            runner("reject"),
            RejectRequest,
            RejectReply,
            requests.reject,
            runner_token=_RUNNER,
        ),
        EndpointSpec(
            "runner-claim",
            runner("claim"),
            ClaimRequest,
            OwnershipReply,
            requests.claim,
            runner_token=_RUNNER,
        ),
    )
    return ServiceSpec(
        name=NAME,
        version=VERSION,
        description="Session records, resume decisions, ownership and the runner directory",
        endpoints=endpoints,
        closers=(redis.aclose,),
    )


class SessionStoreApp(ServiceApp):
    def __init__(self) -> None:
        super().__init__(NAME, build)
