"""The resume decision (contract 3.3) as a table: first matching rule wins.

Read each block against the contract's numbered rules; every non-resume answer is a fresh
session with the full transcript.
"""

from __future__ import annotations

from shared.contracts.sessions import DecideReply, DecideRequest
from shared.contracts.types import SessionReason

from .record import StoredSession

# Rule 1: the record's state.
STATE_REASONS: dict[str, SessionReason] = {
    "held": "session_held",
    "archived": "session_archived",
    "rejected": "resume_target_rejected",
}


def _guard_reason(stored: StoredSession, req: DecideRequest) -> SessionReason | None:
    """Rule 2: the guards every adapter has, in the contract's order."""
    v1 = stored.v1
    if req.model != v1["model"]:
        return "model_changed"
    if req.cwd != v1["cwd"]:
        return "cwd_changed"
    if not v1["cursor"]:
        return "missing_cursor"
    if (req.latest_cursor or "") != v1["cursor"]:
        return "conversation_advanced"
    return None


def _generation_reason(stored: StoredSession, req: DecideRequest) -> SessionReason | None:
    """Rule 3: only adapters that opted in (`profile-ready`); the ready frame is authoritative."""
    if req.compatibility != "profile-ready":
        return None
    if not stored.generation_trusted or req.ready_generation is None:
        return "compatibility_generation_missing"
    if req.ready_generation != stored.generation:
        return "compatibility_generation_changed"
    return None


def decide(stored: StoredSession | None, req: DecideRequest) -> DecideReply:
    if stored is None:
        return _fresh("no_session", None)
    reason = STATE_REASONS.get(stored.state) or _guard_reason(stored, req) or _generation_reason(stored, req)
    if reason is not None:
        return _fresh(reason, stored)
    # Rule 4.
    return DecideReply(
        mode="resume",
        resume_session_id=stored.handle,
        transcript="incremental",
        reason=None,
        revision=stored.revision,
        epoch=stored.epoch,
    )


def _fresh(reason: SessionReason, stored: StoredSession | None) -> DecideReply:
    return DecideReply(
        mode="fresh",
        resume_session_id=None,
        transcript="full",
        reason=reason,
        revision=stored.revision if stored else None,
        epoch=stored.epoch if stored else None,
    )
