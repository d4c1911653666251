"""Constrained scalar types of the wire contract (section 1 and its Limits table).

The types a runner's messages use have one home, the runner SDK's `continuity_runner.types`
(docs/architecture.md, "One home for the contract"); they are named here with the types only
the services' own messages use. Patterns end in `\\Z`, not `$`: Python's `$` also matches before
a trailing newline, and a value with a newline must fail decoding.
"""

from __future__ import annotations

from typing import Annotated, Literal

from continuity_runner.errors import InvalidRequest
from continuity_runner.types import (
    RUNNER_ID_PATTERN,
    TIME_PATTERN,
    TOKEN_PATTERN,
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
)
from continuity_runner.types import check_time as _check_time
from msgspec import Meta

from shared.contract import limits

__all__ = [
    "RUNNER_ID_PATTERN",
    "TIME_PATTERN",
    "TOKEN_PATTERN",
    "Action",
    "ActionOutcome",
    "Attempt",
    "CheckpointPolicy",
    "ClassSource",
    "Command",
    "Compatibility",
    "ComponentDigests",
    "ComponentName",
    "Count",
    "Cursor",
    "Cwd",
    "DecisionReason",
    "Evidence",
    "ExitCode",
    "FailureClass",
    "GenerationCheck",
    "HarnessName",
    "HarnessVersion",
    "Limit",
    "Message",
    "Mode",
    "Name",
    "OutcomeStatus",
    "Output",
    "PolicyVersion",
    "QuotaKind",
    "QuotaScope",
    "ReconciliationStatus",
    "RecordedOutcome",
    "RefusalCode",
    "RejectCode",
    "RowId",
    "RunStatus",
    "RunnerId",
    "SessionReason",
    "SessionState",
    "Signature",
    "Time",
    "Token",
    "Transcript",
    "check_time",
]

Evidence = Annotated[str, Meta(max_length=limits.EVIDENCE_CHARS)]
Limit = Annotated[int, Meta(ge=1, le=1000)]


def check_time(*values: str | None) -> None:
    """Reject a `Time` that is not a real UTC instant (2026-02-30, 2025-02-29, digits of other
    scripts) by the runner SDK's rule, the one the runner messages' own Structs apply.

    Raised in `__post_init__`, the ValueError becomes a msgspec ValidationError naming the
    Struct's path, never the value."""
    for value in values:
        try:
            _check_time(value, "time")
        except InvalidRequest as err:
            raise ValueError(err.message) from None


PolicyVersion = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")]
ClassSource = Literal["command_result", "error_code", "none"]
"""Where a failure class was read: the authenticated command result, the typed error code, or
nowhere (`unclassified`)."""
ReconciliationStatus = Literal["open", "delivered"]
RunStatus = Literal[
    "running",
    "retrying",
    "replacing",
    "operator",
    "reconciling",
    "continued",
    "recovered",
    "recovered_replaced",
    "recovered_fresh",
    "abandoned",
]
"""A run's status (contract 6). The last four are final (an addition, 4.6): the attempt's
session completed a turn after `retry_same_session` (`recovered`), `open_replacement`
(`recovered_replaced`) or `continue_fresh` (`recovered_fresh`), or no outcome came within the
bound (`abandoned`)."""
OutcomeStatus = Literal["recovered", "recovered_replaced", "recovered_fresh", "abandoned"]
"""The final statuses an outcome gives a run (4.6)."""
