"""A typed request client for Continuity's endpoints, used by the CLI, the simulator, the
benchmarks and the tests: it encodes the request Struct, decodes the reply Struct, and turns
the contract's error replies into `RequestError`."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client

from shared.contract import (
    AuditReply,
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    DeliveredReply,
    ErrorBody,
    GetRequest,
    ListReply,
    ListRequest,
    ReconciliationRecord,
    RejectReply,
    RejectRequest,
    ResolveRequest,
    RetryRequest,
    RunEntry,
    RunRequest,
    RunsListReply,
    RunsListRequest,
    RunsStatsReply,
    RunsStatsRequest,
    RunView,
    SessionView,
    subjects,
)
from shared.contract.policy import (
    Declaration,
    DeclarationsReply,
    DeclarationsRequest,
    DeclareRequest,
    PreviewReply,
    PreviewRequest,
    ReplayReply,
    ReplayRequest,
    RevokeRequest,
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

R = TypeVar("R")
_encode = msgspec.json.Encoder().encode


class RequestError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def parse_reply(data: bytes, headers: dict[str, str] | None, reply_type: type[R]) -> R:
    status = (headers or {}).get("Nats-Service-Error-Code")
    if status:
        try:
            body = msgspec.json.decode(data, type=ErrorBody)
            code, message = body.error.code, body.error.message
        except msgspec.MsgspecError:
            code, message = "unknown", (headers or {}).get("Nats-Service-Error", "")
        raise RequestError(int(status), code, message)
    return msgspec.json.decode(data, type=reply_type)


class ContinuityClient:
    """Request/reply over NATS core; one instance per connection."""

    def __init__(self, nc: Client, timeout: float = 5.0) -> None:
        self.nc = nc
        self.timeout = timeout

    async def call(self, subject: str, request: Any, reply_type: type[R]) -> R:
        payload = request if isinstance(request, bytes) else _encode(request)
        msg = await self.nc.request(subject, payload, timeout=self.timeout)
        return parse_reply(msg.data, msg.headers, reply_type)

    async def decide(self, req: DecideRequest) -> DecideReply:
        return await self.call(subjects.SESSIONS_DECIDE, req, DecideReply)

    async def commit(self, req: CommitRequest) -> CommitReply:
        return await self.call(subjects.SESSIONS_COMMIT, req, CommitReply)

    async def get(self, req: GetRequest) -> SessionView:
        return await self.call(subjects.SESSIONS_GET, req, SessionView)

    async def reject(self, req: RejectRequest) -> RejectReply:
        return await self.call(subjects.SESSIONS_REJECT, req, RejectReply)

    async def transfer(self, req: TransferRequest) -> OwnershipReply:
        """An operator gives a session to another runner of its tenant (contract section 10)."""
        return await self.call(subjects.SESSIONS_TRANSFER, req, OwnershipReply)

    async def ownership(self, req: SessionAuditRequest) -> SessionAuditReply:
        return await self.call(subjects.SESSIONS_AUDIT, req, SessionAuditReply)

    async def runner_put(self, req: RunnerPutRequest) -> RunnerRecord:
        return await self.call(subjects.RUNNERS_PUT, req, RunnerRecord)

    async def runner_revoke(self, req: RunnerRevokeRequest) -> RunnerRecord:
        return await self.call(subjects.RUNNERS_REVOKE, req, RunnerRecord)

    async def runner_consumer(self, req: RunnerConsumerRequest) -> RunnerConsumerReply:
        return await self.call(subjects.RUNNERS_CONSUMER, req, RunnerConsumerReply)

    async def runner_get(self, runner_id: str) -> RunnerRecord:
        return await self.call(subjects.RUNNERS_GET, RunnerGetRequest(runner_id=runner_id), RunnerRecord)

    async def runners(self) -> RunnersListReply:
        return await self.call(subjects.RUNNERS_LIST, RunnersListRequest(), RunnersListReply)

    async def reconciliations(self, req: ListRequest) -> ListReply:
        """One page: at most `req.limit` records after `req.cursor`, and the next page's cursor."""
        return await self.call(subjects.RECONCILIATIONS_LIST, req, ListReply)

    async def reconciliations_upto(self, req: ListRequest) -> ListReply:
        """Page after page from `req.cursor` until `req.limit` records are in hand or the list
        ends; `next_cursor` is where it stopped (None at the end)."""
        items: list[ReconciliationRecord] = []
        cursor = req.cursor
        while True:
            page = await self.reconciliations(
                ListRequest(status=req.status, limit=req.limit - len(items), cursor=cursor)
            )
            items += page.items
            cursor = page.next_cursor
            if cursor is None or len(items) >= req.limit:
                return ListReply(items=items, next_cursor=cursor)

    async def reconciliation(self, run_id: str) -> ReconciliationRecord:
        return await self.call(subjects.RECONCILIATIONS_GET, RunRequest(run_id=run_id), ReconciliationRecord)

    async def resolve(self, req: ResolveRequest) -> DeliveredReply:
        return await self.call(subjects.RECONCILIATIONS_RESOLVE, req, DeliveredReply)

    async def run(self, run_id: str) -> RunView:
        return await self.call(subjects.RUNS_GET, RunRequest(run_id=run_id), RunView)

    async def declare(self, req: DeclareRequest) -> Declaration:
        return await self.call(subjects.COMPATIBILITY_DECLARE, req, Declaration)

    async def revoke_declaration(self, req: RevokeRequest) -> Declaration:
        return await self.call(subjects.COMPATIBILITY_REVOKE, req, Declaration)

    async def declarations(self, req: DeclarationsRequest) -> DeclarationsReply:
        return await self.call(subjects.COMPATIBILITY_LIST, req, DeclarationsReply)

    async def preview(self, req: PreviewRequest) -> PreviewReply:
        return await self.call(subjects.SESSIONS_PREVIEW, req, PreviewReply)

    async def runs_stats(self, req: RunsStatsRequest) -> RunsStatsReply:
        """The policy judged by outcomes (contract 4.6)."""
        return await self.call(subjects.RUNS_STATS, req, RunsStatsReply)

    async def replay(self, req: ReplayRequest) -> ReplayReply:
        return await self.call(subjects.POLICY_REPLAY, req, ReplayReply)

    async def audit(self, run_id: str) -> AuditReply:
        return await self.call(subjects.RUNS_AUDIT, RunRequest(run_id=run_id), AuditReply)

    async def retry(self, req: RetryRequest) -> DeliveredReply:
        return await self.call(subjects.OPERATOR_RETRY, req, DeliveredReply)

    async def runs(self, req: RunsListRequest) -> RunsListReply:
        """One page of `continuity.runs.list`: runs matching the filters, after `req.cursor`."""
        return await self.call(subjects.RUNS_LIST, req, RunsListReply)

    async def runs_upto(self, req: RunsListRequest) -> RunsListReply:
        """Page after page from `req.cursor` until `req.limit` runs are in hand or the list
        ends; `next_cursor` is where it stopped (None at the end)."""
        items: list[RunEntry] = []
        cursor = req.cursor
        while True:
            page = await self.runs(msgspec.structs.replace(req, limit=req.limit - len(items), cursor=cursor))
            items += page.items
            cursor = page.next_cursor
            if cursor is None or len(items) >= req.limit:
                return RunsListReply(items=items, next_cursor=cursor)


class RunnerSessions:
    """A runner's session requests, on `continuity.sessions.<runner_id>.<op>` (contract section
    10): what the runner SDKs send; here for the CLI's checks and the tests."""

    def __init__(self, client: ContinuityClient, runner_id: str) -> None:
        self._client = client
        self.runner_id = runner_id

    def _subject(self, op: str) -> str:
        return subjects.runner_sessions(self.runner_id, op)

    async def decide(self, req: DecideRequest) -> DecideReply:
        return await self._client.call(self._subject("decide"), req, DecideReply)

    async def commit(self, req: CommitRequest) -> CommitReply:
        return await self._client.call(self._subject("commit"), req, CommitReply)

    async def get(self, req: GetRequest) -> SessionView:
        return await self._client.call(self._subject("get"), req, SessionView)

    async def reject(self, req: RejectRequest) -> RejectReply:
        return await self._client.call(self._subject("reject"), req, RejectReply)

    async def claim(self, req: ClaimRequest) -> OwnershipReply:
        return await self._client.call(self._subject("claim"), req, OwnershipReply)
