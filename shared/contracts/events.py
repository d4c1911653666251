"""Runner events (contract section 4.1)."""

from __future__ import annotations

from typing import Literal

import msgspec

from shared.contracts.session import SessionRef
from shared.contracts.types import Attempt, RecordedOutcome, RunnerId, Time, Token


class ErrorInfo(msgspec.Struct, kw_only=True):
    """A typed runner error. `message` is carried for the runner's own logs and never read."""

    type: str
    code: str
    message: str = ""


class CommandResult(msgspec.Struct, kw_only=True):
    """A runner command's result, trusted only when `signature` verifies (section 4.2)."""

    command: str
    status: str
    classification: str | None = None
    issued_at: Time
    key_id: Token
    signature: str


class ToolCall(msgspec.Struct, kw_only=True):
    tool_call_id: Token
    tool_name: str
    started_at: Time
    recorded_outcome: RecordedOutcome | None = None


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
