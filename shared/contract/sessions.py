"""The session slot and the session-store's requests and replies (contract sections 1 and 3):
one agent in one conversation owns one saved native session.

Every one of them is a runner's message, so each has one home, the runner SDK's
`continuity_runner.contract` (docs/architecture.md, "One home for the contract")."""

from __future__ import annotations

from continuity_runner.contract import (
    CommitReply,
    CommitRequest,
    DecideReply,
    DecideRequest,
    GetRequest,
    RejectReply,
    RejectRequest,
    SessionRef,
    SessionView,
)

__all__ = [
    "CommitReply",
    "CommitRequest",
    "DecideReply",
    "DecideRequest",
    "GetRequest",
    "RejectReply",
    "RejectRequest",
    "SessionRef",
    "SessionView",
]
