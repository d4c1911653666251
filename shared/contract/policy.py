"""Explaining and trying decisions (additions, docs/contract-v1.md 9.11): compatibility
declarations, the rollout preview and the replay of recorded decisions under a candidate policy.
Generation values travel only in a declaration's or a preview's request, from an operator; no
reply, record or audit entry holds one."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from shared.contract import limits
from shared.contract.types import ComponentDigests, ComponentName, Name, RunnerId, Token

DeclarationId = Annotated[str, Meta(pattern=r"^compat-[0-9a-f]{16}$")]


class Declaration(msgspec.Struct, kw_only=True):
    """An operator's word that sessions saved under one generation of an adapter resume under a
    newer one: `id` is derived from the adapter and both generations, which are not kept. Or,
    with `component`, that a change of that component resumes, whatever its values, when every
    other component that changed is declared too (9.11)."""

    id: DeclarationId
    adapter: Name
    declared_by: Token
    declared_at: str
    note: Name | None = None
    component: ComponentName | None = None
    """The component a per-component declaration covers; null for a declaration of a pair of
    generations."""


class DeclareRequest(msgspec.Struct, kw_only=True):
    """`continuity.compatibility.declare` (operators)."""

    adapter: Name
    saved_generation: Token | None = None
    """The generation sessions were saved under (with `ready_generation`; not with
    `component`)."""
    ready_generation: Token | None = None
    """The newer generation that resumes them."""
    actor: Token
    note: Name | None = None
    component: ComponentName | None = None
    """Declare a component instead of a pair of generations: a change of the adapter's
    generation limited to declared components resumes."""


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
    component: str | None = None
    """The component of a per-component declaration; null for a pair of generations."""


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
    generation: Token | None = None
    """The new generation; or, with `components` alone, each session's own generation with
    the given components changed."""
    tenant: Token | None = None
    components: ComponentDigests | None = None
    """The digests of the new release's components; a component not given is taken as each
    session stored it (its `cwd`, say). At least one of `generation` and `components`."""


class TenantPreview(msgspec.Struct, kw_only=True):
    tenant: str
    resume: int
    fresh: int
    reasons: dict[str, int]
    """The fresh ones by the reason their next decide gives."""
    changed_components: dict[str, int] = {}
    """Sessions by each component their next decide finds changed (compared by components:
    both the preview and the record have them); names only."""


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
    results: dict[str, int] = {}
    """What actually followed these decisions under the running policy (an addition, 4.6), by
    `DecisionResult`: `recovered` (the attempt completed a turn), `failed` (the next attempt
    failed again), `abandoned`, `held` (an operator or a reconciliation) or `pending`."""


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
