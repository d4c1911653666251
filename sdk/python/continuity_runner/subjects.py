"""The subjects, stream and consumer names a runner uses (contract sections 2 and 10.1)."""

from __future__ import annotations

from typing import Literal

DECISIONS_STREAM = "CONTINUITY_DECISIONS"

SessionOp = Literal["decide", "commit", "get", "reject", "claim"]


def sessions(runner_id: str, op: SessionOp) -> str:
    """`continuity.sessions.<runner_id>.<op>` (contract 10.1): the services take the runner's
    identity from this token only, never from a body."""
    return f"continuity.sessions.{runner_id}.{op}"


def event(runner_id: str, event_type: str) -> str:
    return f"continuity.events.{runner_id}.{event_type}"


def decisions(runner_id: str) -> str:
    return f"continuity.decisions.{runner_id}"


def archive(runner_id: str) -> str:
    return f"continuity.runner.{runner_id}.archive"


def inbox_prefix(runner_id: str) -> str:
    """The only prefix the shipped NATS authorization lets a runner receive replies on."""
    return f"_INBOX.{runner_id}"
