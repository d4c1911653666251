"""Who may act on what (contract section 10): runners issued for tenants, session ownership,
claims and transfers, and the runner directory's requests.

A runner's claim, its reply and a refusal have one home, the runner SDK's
`continuity_runner.contract` (docs/architecture.md, "One home for the contract"); the rest is
the services' own."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from continuity_runner.contract import ClaimRequest, OwnershipReply, Refusal
from msgspec import Meta

from shared.contract.sessions import SessionRef
from shared.contract.types import QuotaScope, RunnerId, Token

__all__ = [
    "MAX_TENANTS",
    "ClaimRequest",
    "ListedRunner",
    "OwnershipChange",
    "OwnershipEntry",
    "OwnershipReply",
    "QuotaUsage",
    "Refusal",
    "RunnerConsumerAction",
    "RunnerConsumerReply",
    "RunnerConsumerRequest",
    "RunnerConsumerState",
    "RunnerGetRequest",
    "RunnerPutRequest",
    "RunnerRecord",
    "RunnerRevokeRequest",
    "RunnerStatus",
    "RunnersListReply",
    "RunnersListRequest",
    "SessionAuditReply",
    "SessionAuditRequest",
    "Tenants",
    "TransferRequest",
    "is_refusal",
]

MAX_TENANTS = 64
"""Tenants one runner may be issued for: a runner serves a team or a few, not a whole fleet."""

Tenants = Annotated[list[Token], Meta(min_length=1, max_length=MAX_TENANTS)]
RunnerStatus = Literal["active", "revoked"]
OwnershipChange = Literal["bound", "claimed", "transferred"]


class TransferRequest(msgspec.Struct, kw_only=True):
    """`continuity.sessions.transfer` (operators): give the session to `runner_id`."""

    session: SessionRef
    runner_id: RunnerId
    actor: Token


class SessionAuditRequest(msgspec.Struct, kw_only=True):
    session: SessionRef


class OwnershipEntry(msgspec.Struct, kw_only=True, omit_defaults=False):
    """One change of a session's owner, kept with the session (the last 100)."""

    at: str
    kind: OwnershipChange
    actor: str
    previous_owner: str | None
    owner: str
    epoch: int


class SessionAuditReply(msgspec.Struct, kw_only=True):
    items: list[OwnershipEntry]


class RunnerRecord(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A runner as the directory holds it: the tenants it acts for, and whether it is revoked."""

    runner_id: str
    tenants: list[str]
    status: RunnerStatus
    added_at: str
    actor: str
    revoked_at: str | None = None


class RunnerPutRequest(msgspec.Struct, kw_only=True):
    """`continuity.runners.put` (operators): issue a runner for tenants, or change them."""

    runner_id: RunnerId
    tenants: Tenants
    actor: Token


class RunnerRevokeRequest(msgspec.Struct, kw_only=True):
    """`continuity.runners.revoke` (operators)."""

    runner_id: RunnerId
    actor: Token


RunnerConsumerAction = Literal["create", "delete"]
RunnerConsumerState = Literal["created", "deleted", "absent"]


class RunnerConsumerRequest(msgspec.Struct, kw_only=True):
    """`continuity.runners.consumer` (operators): create or delete the runner's durable
    decisions consumer. Its configuration is the session-store's, never the request's."""

    runner_id: RunnerId
    action: RunnerConsumerAction
    actor: Token


class RunnerConsumerReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    """`created`: the consumer exists, with the service's configuration (made now or before);
    `deleted`; `absent`: a delete found none."""

    runner_id: str
    consumer: RunnerConsumerState


class RunnerGetRequest(msgspec.Struct, kw_only=True):
    runner_id: RunnerId


class RunnersListRequest(msgspec.Struct, kw_only=True):
    pass


class QuotaUsage(msgspec.Struct, kw_only=True, omit_defaults=False):
    """What a runner, or one of its tenants, holds of its quotas now (section 10.6), as the
    session-store reads it from the shared buckets and run sets."""

    scope: QuotaScope
    owner: str
    event_rate: float
    """The budget: events per second, all classifier replicas together."""
    event_burst: int
    events_spent: float
    """Of the burst, events let through lately above the rate and not regained yet."""
    stored_runs: int
    stored_runs_limit: int


class ListedRunner(RunnerRecord, kw_only=True, omit_defaults=False):
    """A record of `continuity.runners.list`, with what operators watch (additions)."""

    usage: list[QuotaUsage] = msgspec.field(default_factory=list)
    """The runner's, then each of its tenants'."""
    connections: int | None = None
    """Its client connections open on the servers now; None when unknown (no monitor user is
    configured, or no server answered)."""


class RunnersListReply(msgspec.Struct, kw_only=True):
    items: list[ListedRunner]


class _Kind(msgspec.Struct):
    type: str | None = None


_decode_kind = msgspec.json.Decoder(_Kind).decode


def is_refusal(data: bytes) -> bool:
    """Whether a message on a runner's decisions subject is a refusal (told apart by `type`),
    not a decision: readers of the decisions skip it."""
    try:
        return _decode_kind(data).type == "refusal"
    except (msgspec.MsgspecError, ValueError):
        return False
