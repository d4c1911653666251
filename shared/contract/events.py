"""Runner events (contract sections 4.1 and 4.6).

A runner sends them, so each has one home, the runner SDK's `continuity_runner.contract`
(docs/architecture.md, "One home for the contract")."""

from __future__ import annotations

from continuity_runner.contract import (
    TURN_COMMAND,
    TURN_STATUS,
    CommandResult,
    ErrorInfo,
    HarnessInfo,
    ResumeFailed,
    ToolCall,
    TurnCompleted,
)

__all__ = [
    "TURN_COMMAND",
    "TURN_STATUS",
    "CommandResult",
    "ErrorInfo",
    "HarnessInfo",
    "ResumeFailed",
    "ToolCall",
    "TurnCompleted",
]
