"""Explaining and trying decisions (additions, docs/contract-v1.md 9.11): compatibility
declarations, the rollout preview and the replay of recorded decisions under a candidate policy.
Generation values travel only in a declaration's or a preview's request, from an operator; no
reply, record or audit entry holds one."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from shared.contract import limits
from shared.contract.types import Name, RunnerId, Token

DeclarationId = Annotated[str, Meta(pattern=r"^compat-[0-9a-f]{16}$")]


class Declaration(msgspec.Struct, kw_only=True):
    """An operator's word that sessions saved under one generation of an adapter resume under a
    newer one: `id` is derived from the adapter and both generations, which are not kept."""

    id: DeclarationId
    adapter: Name
    declared_by: Token
    declared_at: str
    note: Name | None = None


class DeclareRequest(msgspec.Struct, kw_only=True):
    """`continuity.compatibility.declare` (operators)."""

    adapter: Name
    saved_generation: Token
    """The generation sessions were saved under."""
    ready_generation: Token
    """The newer generation that resumes them."""
    actor: Token
    note: Name | None = None


class RevokeRequest(msgspec.Struct, kw_only=True):
    """`continuity.compatibility.revoke` (operators): the declaration no longer applies."""

    id: DeclarationId
    actor: Token


class DeclarationAudit(msgspec.Struct, kw_only=True):
    """One line of the declarations' audit trail, newest first."""

    at: str
    kind: str
    """`declared` or `revoked`."""
    actor: str
    id: str
    adapter: str


class DeclarationsRequest(msgspec.Struct, kw_only=True):
    """`continuity.compatibility.list` (operators)."""

    adapter: Name | None = None


class DeclarationsReply(msgspec.Struct, kw_only=True):
    items: list[Declaration]
    audit: list[DeclarationAudit]


class PreviewRequest(msgspec.Struct, kw_only=True):
    """`continuity.sessions.preview` (operators): what a rollout of `generation` of `adapter`
    does to the saved sessions at their next turn."""

    adapter: Name
    generation: Token
    tenant: Token | None = None


class TenantPreview(msgspec.Struct, kw_only=True):
    tenant: str
    resume: int
    fresh: int
    reasons: dict[str, int]
    """The fresh ones by the reason their next decide gives."""


class PreviewReply(msgspec.Struct, kw_only=True):
    adapter: str
    policy: str
    scanned: int
    """Session records of the adapter read."""
    resume: int
    fresh: int
    by_tenant: list[TenantPreview]
    declarations: list[str]
    """The ids of the declarations that made a session resume."""


Duration = Annotated[float, Meta(ge=0, le=limits.REPLAY_MAX_SINCE_S)]


class ReplayRequest(msgspec.Struct, kw_only=True):
    """`continuity.policy.replay` (operators): re-decide the recorded decisions' inputs."""

    policy: Annotated[str, Meta(max_length=limits.POLICY_MAX_BYTES)] | None = None
    """A candidate policy file's text; null replays the running policy."""
    since_s: Duration | None = None
    runner_id: RunnerId | None = None
    tenant: Token | None = None
    max_runs: Annotated[int, Meta(ge=1, le=limits.REPLAY_MAX_RUNS)] = limits.REPLAY_MAX_RUNS
    examples: Annotated[int, Meta(ge=0, le=100)] = 10


class ReplayChange(msgspec.Struct, kw_only=True):
    """Decisions that change from one (action, reason) to another, and which runs."""

    action: str
    reason: str
    candidate_action: str
    candidate_reason: str
    rule: str
    candidate_rule: str
    count: int
    runs: list[str]
    """Up to `examples` run ids."""


class ReplayReply(msgspec.Struct, kw_only=True):
    policy: str
    """The candidate's version."""
    running_policy: str
    replayed: int
    unchanged: int
    changes: list[ReplayChange]
    skipped: int
    """Recorded decisions without an explanation (recorded before explanations existed)."""
    truncated: bool
    """`max_runs` was reached before every matching run was read."""
