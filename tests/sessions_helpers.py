"""Builders of session-store requests for tests."""

from __future__ import annotations

import uuid
from typing import Any

from shared.contracts import CommitRequest, DecideRequest, SessionRef

CWD = "/workspaces/tenant-acme/conversation-7f3a9c/agents/codex-main"


def new_session() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


def commit_req(session: SessionRef, **kw: Any) -> CommitRequest:
    base: dict[str, Any] = dict(
        session=session,
        native_session_id="ns-1",
        adapter="deepseek-harness",
        model="dsh-pro",
        cwd=CWD,
        cursor="c-1",
        prompt_hash="ph",
        checkpoint_policy="same_session_only",
        compatibility_generation="gen-1",
    )
    base.update(kw)
    return CommitRequest(**base)


def decide_req(session: SessionRef, **kw: Any) -> DecideRequest:
    base: dict[str, Any] = dict(
        session=session,
        adapter="deepseek-harness",
        model="dsh-pro",
        cwd=CWD,
        latest_cursor="c-1",
        compatibility="profile-ready",
        ready_generation="gen-1",
    )
    base.update(kw)
    return DecideRequest(**base)
