"""The session-store service: request endpoints on `continuity.sessions.*` (contract 3.2 to 3.5),
each runner's on `continuity.sessions.<runner_id>.*`, the operators' ownership transfers and the
runner directory and the runners' decisions consumers on `continuity.runners.*` (section 10)."""

from __future__ import annotations

from shared.contract import subjects
from shared.contract.policy import (
    Declaration,
    DeclarationsReply,
    DeclarationsRequest,
    DeclareRequest,
    PreviewReply,
    PreviewRequest,
    RevokeRequest,
)
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
    RunnerConsumerReply,
    RunnerConsumerRequest,
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
from shared.platform.parts import Closer
from shared.platform.redis import Redis
from shared.platform.runtime import Context
from shared.platform.service import EndpointSpec, ServiceSpec, Wiring
from shared.policy.configured import configured_policy
from shared.records.retention import Retention
from shared.records.runners import RunnerDirectory

from .consumers import RunnerConsumers
from .requests import SessionRequests
from .store import SessionStore

NAME = "session-store"
VERSION = "1.2.0"

_RUNNER = subjects.RUNNER_SESSIONS_TOKEN


_runner = subjects.runner_sessions_pattern

SPEC = ServiceSpec(
    name=NAME,
    version=VERSION,
    description="Session records, resume decisions, ownership and the runner directory",
    endpoints=(
        # The services' own account: operators and the CLI.
        EndpointSpec("decide", subjects.SESSIONS_DECIDE, DecideRequest, DecideReply, pipelined=True),
        EndpointSpec("commit", subjects.SESSIONS_COMMIT, CommitRequest, CommitReply),
        EndpointSpec("get", subjects.SESSIONS_GET, GetRequest, SessionView),
        EndpointSpec("reject", subjects.SESSIONS_REJECT, RejectRequest, RejectReply),
        EndpointSpec("transfer", subjects.SESSIONS_TRANSFER, TransferRequest, OwnershipReply),
        EndpointSpec("ownership", subjects.SESSIONS_AUDIT, SessionAuditRequest, SessionAuditReply),
        EndpointSpec("runners-put", subjects.RUNNERS_PUT, RunnerPutRequest, RunnerRecord),
        EndpointSpec("runners-revoke", subjects.RUNNERS_REVOKE, RunnerRevokeRequest, RunnerRecord),
        EndpointSpec("runners-get", subjects.RUNNERS_GET, RunnerGetRequest, RunnerRecord),
        EndpointSpec("runners-list", subjects.RUNNERS_LIST, RunnersListRequest, RunnersListReply),
        EndpointSpec(
            "runners-consumer", subjects.RUNNERS_CONSUMER, RunnerConsumerRequest, RunnerConsumerReply
        ),
        EndpointSpec("declare", subjects.COMPATIBILITY_DECLARE, DeclareRequest, Declaration),
        EndpointSpec("revoke-declaration", subjects.COMPATIBILITY_REVOKE, RevokeRequest, Declaration),
        EndpointSpec("declarations", subjects.COMPATIBILITY_LIST, DeclarationsRequest, DeclarationsReply),
        EndpointSpec("preview", subjects.SESSIONS_PREVIEW, PreviewRequest, PreviewReply),
        # Runners: the runner_id comes from the subject the server routed the request on.
        EndpointSpec(
            "runner-decide",
            _runner("decide"),
            DecideRequest,
            DecideReply,
            pipelined=True,
            runner_token=_RUNNER,
        ),
        EndpointSpec("runner-commit", _runner("commit"), CommitRequest, CommitReply, runner_token=_RUNNER),
        EndpointSpec("runner-get", _runner("get"), GetRequest, SessionView, runner_token=_RUNNER),
        EndpointSpec("runner-reject", _runner("reject"), RejectRequest, RejectReply, runner_token=_RUNNER),
        EndpointSpec("runner-claim", _runner("claim"), ClaimRequest, OwnershipReply, runner_token=_RUNNER),
    ),
)


def build(ctx: Context) -> Wiring:
    # Requests share one auto-pipelined connection: concurrent decisions cost one write.
    redis = Redis.from_config(ctx.config)
    directory = RunnerDirectory(redis, cache_s=ctx.config.runner_cache_s)
    consumers = RunnerConsumers(ctx.js, directory)
    requests = SessionRequests(
        SessionStore(
            redis,
            Retention.from_config(ctx.config),
            wait_replicas=ctx.config.redis_wait_replicas,
            wait_timeout_ms=ctx.config.redis_wait_timeout_ms,
        ),
        directory,
        enforced=ctx.config.tenancy == "enforced",
        claims_allowed=ctx.config.session_claims == "allow",
        policy=configured_policy(ctx.config),
    )
    return Wiring(
        handlers={
            "decide": requests.decide,
            "commit": requests.commit,
            "get": requests.get,
            "reject": requests.reject,
            "transfer": requests.transfer,
            "ownership": requests.audit,
            "runners-put": requests.runner_put,
            "runners-revoke": requests.runner_revoke,
            "runners-get": requests.runner_get,
            "runners-list": requests.runners_list,
            "runners-consumer": consumers.request,
            "declare": requests.declare,
            "revoke-declaration": requests.revoke_declaration,
            "declarations": requests.declarations_list,
            "preview": requests.preview,
            "runner-decide": requests.decide,
            "runner-commit": requests.commit,
            "runner-get": requests.get,
            "runner-reject": requests.reject,
            "runner-claim": requests.claim,
        },
        parts=(Closer(redis.aclose),),
    )
