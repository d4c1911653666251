"""The session slot and the session-store's requests and replies (contract sections 1 and 3):
one agent in one conversation owns one saved native session."""

from __future__ import annotations

import msgspec

from shared.contract.types import (
    CheckpointPolicy,
    Compatibility,
    ComponentDigests,
    ComponentName,
    Count,
    Cursor,
    Cwd,
    GenerationCheck,
    Mode,
    Name,
    RejectCode,
    SessionReason,
    SessionState,
    Token,
    Transcript,
)


class SessionRef(msgspec.Struct, frozen=True):
    """`{"tenant", "conversation_id", "agent_id"}` (contract section 1)."""

    tenant: Token
    conversation_id: Token
    agent_id: Token

    @property
    def key(self) -> str:
        """`<tenant>/<conversation_id>/<agent_id>`, the hash tag of every key of this session."""
        return f"{self.tenant}/{self.conversation_id}/{self.agent_id}"


class CommitRequest(msgspec.Struct, kw_only=True):
    session: SessionRef
    native_session_id: Token
    adapter: Name
    model: Name
    cwd: Cwd
    checkpoint_policy: CheckpointPolicy
    cursor: Cursor | None = None
    prompt_hash: Name | None = None
    compatibility_generation: Token | None = None
    expected_revision: Count | None = None
    epoch: Count | None = None
    cancelled: bool = False
    compatibility_components: ComponentDigests | None = None
    """The digests of the components `compatibility_generation` is made of (an addition, 3.2):
    with them, the generation must be their digest, and a later decide names what changed."""


class CommitReply(msgspec.Struct, kw_only=True):
    revision: int
    epoch: int


class DecideRequest(msgspec.Struct, kw_only=True):
    session: SessionRef
    adapter: Name
    model: Name
    cwd: Cwd
    latest_cursor: Cursor | None = None
    compatibility: Compatibility = "none"
    ready_generation: Token | None = None
    ready_components: ComponentDigests | None = None
    """The digests of the components `ready_generation` is made of (an addition, 3.3)."""


class DecideReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    mode: Mode
    resume_session_id: str | None
    transcript: Transcript
    reason: SessionReason | None
    revision: int | None
    epoch: int | None
    rule: str | None = None
    """The id of the clause that answered (an addition, 9.11): `3.3.1a` to `3.3.4` shipped."""
    policy: str | None = None
    """The version of the policy that answered."""
    generation: GenerationCheck = "not_compared"
    """How the generations compared: never a value (9.11)."""
    declaration: str | None = None
    """The id of the declaration that let it resume across a changed generation (`generation`
    is `declared`); null otherwise."""
    changed_components: list[ComponentName] | None = None
    """The names of the components that differ between the stored generation and the ready one
    (`generation` `changed` or `declared`, both sides with components); null otherwise. Never a
    value or a digest (9.11)."""


class RejectRequest(msgspec.Struct, kw_only=True):
    session: SessionRef
    native_session_id: Token
    code: RejectCode


class RejectReply(msgspec.Struct, kw_only=True):
    cleared: bool


class GetRequest(msgspec.Struct, kw_only=True):
    session: SessionRef


class SessionView(msgspec.Struct, kw_only=True):
    """A session record as `get` shows it: no generation value, only whether one is trusted."""

    native_session_id: str
    adapter: str
    model: str
    cwd: str
    cursor: str
    checkpoint_policy: str
    state: SessionState
    revision: int
    epoch: int
    updated_at: str
    has_generation: bool
    generation_trusted: bool
    owner: str | None = None
    """The runner that owns the session (contract section 10); null before its first commit."""
    components: list[ComponentName] | None = None
    """The names of the components the stored generation was committed with (9.11); null for a
    generation committed without them, or none."""
    changed_components: list[ComponentName] | None = None
    """The names of the components that changed at the commit that last changed the stored
    generation, when both commits carried components; null otherwise."""
