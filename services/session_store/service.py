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
from .presence import Presence, listed, monitor_login
from .requests import SessionRequests
from .store import SessionStore

NAME = "session-store"
VERSION = "1.2.0"

_RUNNER = subjects.RUNNER_SESSIONS_TOKEN


_runner = subjects.runner_sessions_pattern

# The services' own account: operators and the CLI.
DECIDE = EndpointSpec("decide", subjects.SESSIONS_DECIDE, DecideRequest, DecideReply, pipelined=True)
COMMIT = EndpointSpec("commit", subjects.SESSIONS_COMMIT, CommitRequest, CommitReply)
GET = EndpointSpec("get", subjects.SESSIONS_GET, GetRequest, SessionView)
REJECT = EndpointSpec("reject", subjects.SESSIONS_REJECT, RejectRequest, RejectReply)
TRANSFER = EndpointSpec("transfer", subjects.SESSIONS_TRANSFER, TransferRequest, OwnershipReply)
OWNERSHIP = EndpointSpec("ownership", subjects.SESSIONS_AUDIT, SessionAuditRequest, SessionAuditReply)
RUNNERS_PUT = EndpointSpec("runners-put", subjects.RUNNERS_PUT, RunnerPutRequest, RunnerRecord)
RUNNERS_REVOKE = EndpointSpec("runners-revoke", subjects.RUNNERS_REVOKE, RunnerRevokeRequest, RunnerRecord)
RUNNERS_GET = EndpointSpec("runners-get", subjects.RUNNERS_GET, RunnerGetRequest, RunnerRecord)
RUNNERS_LIST = EndpointSpec("runners-list", subjects.RUNNERS_LIST, RunnersListRequest, RunnersListReply)
RUNNERS_CONSUMER = EndpointSpec(
    "runners-consumer", subjects.RUNNERS_CONSUMER, RunnerConsumerRequest, RunnerConsumerReply
)
DECLARE = EndpointSpec("declare", subjects.COMPATIBILITY_DECLARE, DeclareRequest, Declaration)
REVOKE_DECLARATION = EndpointSpec(
    "revoke-declaration", subjects.COMPATIBILITY_REVOKE, RevokeRequest, Declaration
)
DECLARATIONS = EndpointSpec(
    "declarations", subjects.COMPATIBILITY_LIST, DeclarationsRequest, DeclarationsReply
)
PREVIEW = EndpointSpec("preview", subjects.SESSIONS_PREVIEW, PreviewRequest, PreviewReply)
# Runners: the runner_id comes from the subject the server routed the request on.
RUNNER_DECIDE = EndpointSpec(
    "runner-decide",
    _runner("decide"),
    DecideRequest,
    DecideReply,
    pipelined=True,
    runner_token=_RUNNER,
)
RUNNER_COMMIT = EndpointSpec(
    "runner-commit", _runner("commit"), CommitRequest, CommitReply, runner_token=_RUNNER
)
RUNNER_GET = EndpointSpec("runner-get", _runner("get"), GetRequest, SessionView, runner_token=_RUNNER)
RUNNER_REJECT = EndpointSpec(
    "runner-reject", _runner("reject"), RejectRequest, RejectReply, runner_token=_RUNNER
)
RUNNER_CLAIM = EndpointSpec(
    "runner-claim", _runner("claim"), ClaimRequest, OwnershipReply, runner_token=_RUNNER
)

SPEC = ServiceSpec(
    name=NAME,
    version=VERSION,
    description="Session records, resume decisions, ownership and the runner directory",
    waits_for_redis=True,
    endpoints=(
        DECIDE,
        COMMIT,
        GET,
        REJECT,
        TRANSFER,
        OWNERSHIP,
        RUNNERS_PUT,
        RUNNERS_REVOKE,
        RUNNERS_GET,
        RUNNERS_LIST,
        RUNNERS_CONSUMER,
        DECLARE,
        REVOKE_DECLARATION,
        DECLARATIONS,
        PREVIEW,
        RUNNER_DECIDE,
        RUNNER_COMMIT,
        RUNNER_GET,
        RUNNER_REJECT,
        RUNNER_CLAIM,
    ),
)


def build(ctx: Context) -> Wiring:
    # Requests share one auto-pipelined connection: concurrent decisions cost one write.
    redis = Redis.from_config(ctx.config, waits=True)
    directory = RunnerDirectory(redis, cache_s=ctx.config.runner_cache_s)
    consumers = RunnerConsumers(ctx.js, directory)
    presence = Presence(ctx.config, directory) if monitor_login(ctx.config) is not None else None
    requests = SessionRequests(
        SessionStore(
            redis,
            Retention.from_config(ctx.config),
            durability=redis.durability,
        ),
        directory,
        enforced=ctx.config.tenancy == "enforced",
        claims_allowed=ctx.config.session_claims == "allow",
        policy=configured_policy(ctx.config),
        listing=lambda records: listed(records, redis, ctx.config, presence),
    )
    return Wiring(
        handlers={
            DECIDE: requests.decide,
            COMMIT: requests.commit,
            GET: requests.get,
            REJECT: requests.reject,
            TRANSFER: requests.transfer,
            OWNERSHIP: requests.audit,
            RUNNERS_PUT: requests.runner_put,
            RUNNERS_REVOKE: requests.runner_revoke,
            RUNNERS_GET: requests.runner_get,
            RUNNERS_LIST: requests.runners_list,
            RUNNERS_CONSUMER: consumers.request,
            DECLARE: requests.declare,
            REVOKE_DECLARATION: requests.revoke_declaration,
            DECLARATIONS: requests.declarations_list,
            PREVIEW: requests.preview,
            RUNNER_DECIDE: requests.decide,
            RUNNER_COMMIT: requests.commit,
            RUNNER_GET: requests.get,
            RUNNER_REJECT: requests.reject,
            RUNNER_CLAIM: requests.claim,
        },
        parts=(*((presence.part(),) if presence is not None else ()), Closer(redis.aclose)),
    )
