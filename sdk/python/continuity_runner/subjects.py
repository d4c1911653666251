"""The subjects, stream and consumer names a runner uses (contract section 2)."""

from __future__ import annotations

DECISIONS_STREAM = "CONTINUITY_DECISIONS"

SESSIONS_DECIDE = "continuity.sessions.decide"
SESSIONS_COMMIT = "continuity.sessions.commit"
SESSIONS_GET = "continuity.sessions.get"
SESSIONS_REJECT = "continuity.sessions.reject"


def event(runner_id: str, event_type: str) -> str:
    return f"continuity.events.{runner_id}.{event_type}"


def decisions(runner_id: str) -> str:
    return f"continuity.decisions.{runner_id}"


def archive(runner_id: str) -> str:
    return f"continuity.runner.{runner_id}.archive"


def inbox_prefix(runner_id: str) -> str:
    """The only prefix the shipped NATS authorization lets a runner receive replies on."""
    return f"_INBOX.{runner_id}"
