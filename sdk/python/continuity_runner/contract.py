"""The messages of contract v1 that a runner sends or receives, as msgspec Structs.

They are the services' own: the server's `shared.contract` imports them from here, so what a
runner sends and what a service decodes is one definition (docs/architecture.md, "One home for
the contract"). This module, `types`, `limits`, `errors` and `signing` import nothing else of
the SDK and nothing of the server.

Making a Struct checks its times (`InvalidRequest` naming the field); every other constraint is
checked when the SDK sends the message (`continuity_runner.checks`), as the services decode it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

# The error reply's body lives with the errors it becomes; named here too, with every message.
from continuity_runner.errors import ErrorBody as ErrorBody
from continuity_runner.errors import ErrorDetail as ErrorDetail
from continuity_runner.types import (
    Action,
    ActionOutcome,
    Attempt,
    CheckpointPolicy,
    Command,
    Compatibility,
    ComponentDigests,
    ComponentName,
    Count,
    Cursor,
    Cwd,
    DecisionReason,
    ExitCode,
    FailureClass,
    GenerationCheck,
    HarnessName,
    HarnessVersion,
    Message,
    Mode,
    Name,
    Output,
    QuotaKind,
    QuotaScope,
    RecordedOutcome,
    RefusalCode,
    RejectCode,
    RowId,
    RunnerId,
    SessionReason,
    SessionState,
    Signature,
    Time,
    Token,
    Transcript,
    check_time,
)

# ---- the session slot (section 1) -------------------------------------------------------------


class SessionRef(msgspec.Struct, frozen=True):
    """`{"tenant", "conversation_id", "agent_id"}`: the slot that owns one saved native session."""

    tenant: Token
    conversation_id: Token
    agent_id: Token

    @property
    def key(self) -> str:
        """`<tenant>/<conversation_id>/<agent_id>`."""
        return f"{self.tenant}/{self.conversation_id}/{self.agent_id}"


# ---- session-store requests and replies (section 3) ------------------------------------------


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
    """The digests of the components `compatibility_generation` is made of: the generation must
    be their digest; a later decide then names the components that changed."""


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
    """The digests of the components `ready_generation` is made of."""


class DecideReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    """`resume` with the stored handle and an incremental turn, or `fresh` with the full one.

    `rule`, `policy` and `generation` explain the answer (contract 9.11); a reply of services of
    an earlier release has none of them and decodes with their defaults."""

    mode: Mode
    resume_session_id: str | None
    transcript: Transcript
    reason: SessionReason | None
    revision: int | None
    epoch: int | None
    rule: str | None = None
    """The id of the contract 3.3 clause that answered (`3.3.1a` to `3.3.4` in the shipped
    policy); None from services of an earlier release."""
    policy: str | None = None
    """The version of the policy that answered (`shipped-1`); None from an earlier release."""
    generation: GenerationCheck = "not_compared"
    """How the compatibility generations compared (never a value)."""
    declaration: str | None = None
    """The id of the operator's declaration that let it resume across a changed generation
    (`generation` is `declared`); None otherwise, and from an earlier release."""
    changed_components: list[ComponentName] | None = None
    """The names of the components that differ between the saved generation and the ready one
    (`generation` `changed` or `declared`, both with components); None otherwise."""


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
    """The runner that owns the session; null before its first commit by a runner."""
    components: list[ComponentName] | None = None
    """The names of the components the stored generation was committed with; None without."""
    changed_components: list[ComponentName] | None = None
    """The components that changed at the commit that last changed the stored generation."""


# ---- ownership (section 10.3) ------------------------------------------------------------------


class ClaimRequest(msgspec.Struct, kw_only=True):
    """`continuity.sessions.<runner_id>.claim`: the runner asks to own the session."""

    session: SessionRef


class OwnershipReply(msgspec.Struct, kw_only=True, omit_defaults=False):
    """The session's owner after a claim, and the epoch that fences the previous owner (its
    commits with an older epoch are refused `stale_epoch`)."""

    owner: str
    previous_owner: str | None
    epoch: int
    revision: int


# ---- the resume_failed event (section 4.1) ----------------------------------------------------


class ErrorInfo(msgspec.Struct, kw_only=True):
    """A typed runner error; only `type` and `code` are read, `message` never is."""

    type: Name
    code: Name
    message: Message = ""


class CommandResult(msgspec.Struct, kw_only=True):
    """A runner command's result, trusted only when `signature` verifies (section 4.2).

    `issued_at` stays the string as sent: the signature covers it byte for byte."""

    command: Command
    status: Name
    classification: Name | None = None
    issued_at: Time
    key_id: Token
    signature: Signature

    def __post_init__(self) -> None:
        check_time(self.issued_at, "command_result.issued_at")


class ToolCall(msgspec.Struct, kw_only=True):
    tool_call_id: Token
    tool_name: Name
    started_at: Time
    recorded_outcome: RecordedOutcome | None = None

    def __post_init__(self) -> None:
        check_time(self.started_at, "pending_tool_call.started_at")


class HarnessInfo(msgspec.Struct, kw_only=True):
    """The harness the run's session lives in (contract 4.6): `name` as the harness table spells
    it (`claude-code`, `codex`, ...), `version` as the harness reports it. Continuity groups the
    outcomes of its decisions by it, and never decides by it."""

    name: HarnessName
    version: HarnessVersion | None = None


class ResumeFailed(msgspec.Struct, kw_only=True):
    type: Literal["resume_failed"]
    event_id: Token
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    native_session_id: Token
    occurred_at: Time
    error: ErrorInfo | None = None
    command_result: CommandResult | None = None
    pending_tool_call: ToolCall | None = None
    governed_wait_elapsed: bool = False
    harness: HarnessInfo | None = None

    def __post_init__(self) -> None:
        check_time(self.occurred_at, "occurred_at")


# ---- the turn_completed event (section 4.6) ---------------------------------------------------

TURN_COMMAND = "turn"
TURN_STATUS = "completed"
"""The signed result of a `turn_completed` event: command `turn`, status `completed`, no
classification."""


class TurnCompleted(msgspec.Struct, kw_only=True):
    """`continuity.events.<runner_id>.turn_completed` (contract 4.6): the session of a decided
    attempt completed a turn. `attempt` is the decision's own `attempt`; `result` is signed as a
    command result is (4.2). Recorded once per `(run_id, attempt)`."""

    type: Literal["turn_completed"]
    event_id: Token
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    native_session_id: Token
    occurred_at: Time
    result: CommandResult
    harness: HarnessInfo | None = None

    def __post_init__(self) -> None:
        check_time(self.occurred_at, "occurred_at")


# ---- decisions (section 4.5) and refusals (section 10.5) --------------------------------------


class Decision(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A recovery decision (contract 4.5): what to do with the run's saved session, and why."""

    type: Literal["decision"] = "decision"
    decision_id: str
    runner_id: RunnerId
    run_id: Token
    attempt: Attempt
    session: SessionRef
    action: Action
    reason: DecisionReason
    failure_class: FailureClass | None = None
    epoch: int | None = None
    not_before: Time | None = None
    detail: str | None = None
    reconciled_outcome: ActionOutcome | None = None
    decided_at: Time
    rule: RowId | None = None
    """The id of the contract 4.4 table row that made the decision (`4.4.1` to `4.4.9` in the
    shipped policy, contract 9.11); None for an operator's or a reconciliation's decision, which
    no row makes, and for a decision of services of an earlier release."""


class Refusal(msgspec.Struct, kw_only=True, omit_defaults=False):
    """On `continuity.decisions.<runner_id>` beside the decisions: the runner's event was
    refused before any decision (contract 10.5). With `quota_exceeded`, send the same report
    again (a new `event_id`) at or after `not_before` (`Runner.report_again`); any other code is
    final for that event."""

    type: Literal["refusal"] = "refusal"
    runner_id: str
    run_id: str
    attempt: int
    event_id: str
    code: RefusalCode
    scope: QuotaScope | None = None
    quota: QuotaKind | None = None
    not_before: str | None = None
    refused_at: str


# ---- the archiver's remote move (section 5) ---------------------------------------------------


class ArchiveRequest(msgspec.Struct, kw_only=True):
    """What the archiver asks on `continuity.runner.<runner_id>.archive`."""

    archive_id: Token
    run_id: Token
    session: SessionRef
    native_session_id: Token


class ArchiveResult(msgspec.Struct, kw_only=True):
    """The runner's answer: exit code 0 only when its saved state was moved aside."""

    exit_code: ExitCode | None
    timed_out: bool = False
    output: Output = ""
