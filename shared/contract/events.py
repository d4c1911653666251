"""Runner events (contract section 4.1)."""

from __future__ import annotations

from typing import Literal

import msgspec

from shared.contract.sessions import SessionRef
from shared.contract.types import (
    Attempt,
    Command,
    HarnessName,
    HarnessVersion,
    Message,
    Name,
    RecordedOutcome,
    RunnerId,
    Signature,
    Time,
    Token,
    check_time,
)


class ErrorInfo(msgspec.Struct, kw_only=True):
    """A typed runner error. `message` is carried for the runner's own logs and never read."""

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
        check_time(self.issued_at)


class ToolCall(msgspec.Struct, kw_only=True):
    tool_call_id: Token
    tool_name: Name
    started_at: Time
    recorded_outcome: RecordedOutcome | None = None

    def __post_init__(self) -> None:
        check_time(self.started_at)


class HarnessInfo(msgspec.Struct, kw_only=True):
    """The harness the run's session lives in (an addition, 4.6): what the outcome statistics
    group by. A runner's word, used for grouping only, never for a decision."""

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
        check_time(self.occurred_at)


TURN_COMMAND = "turn"
TURN_STATUS = "completed"
"""The signed result of a `turn_completed` event: command `turn`, status `completed`, no
classification (4.6)."""


class TurnCompleted(msgspec.Struct, kw_only=True):
    """Event `turn_completed` on `continuity.events.<runner_id>.turn_completed` (an addition,
    4.6): the session of a decided attempt completed a turn. Signed like a command result
    (4.2); recorded once per `(run_id, attempt)`."""

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
        check_time(self.occurred_at)
