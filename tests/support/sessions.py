"""Sessions for tests: references, session-store requests, and saved records written straight to
Redis as the session-store leaves them."""

from __future__ import annotations

import uuid
from typing import Any

import redis.asyncio as aioredis

from shared.contract import CommitRequest, DecideRequest, SessionRef
from shared.contract.types import CheckpointPolicy
from shared.records import keys
from shared.records.session import generation_binding

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


async def save_session(r: aioredis.Redis, session: SessionRef, *, epoch: int = 2) -> dict[bytes, bytes]:
    """A version-2 session record as session-store commits it; returns it as stored."""
    v1 = {
        "native_session_id": "ns-1",
        "adapter": "codex",
        "model": "gpt-5-codex",
        "cwd": "/workspaces/acme/conv/codex",
        "cursor": "c-7",
        "prompt_hash": "ph-1",
        "checkpoint_policy": "allow_replacement_after_resume_failure",
        "updated_at": "2026-11-30T12:00:00.000Z",
    }
    record = {
        **v1,
        "revision": "5",
        "epoch": str(epoch),
        "state": "active",
        "compatibility_generation": "gen-1",
        "generation_binding": generation_binding(v1),
    }
    await r.hset(keys.session(session.key), mapping=record)  # type: ignore[misc, arg-type]
    stored: dict[bytes, bytes] = await r.hgetall(keys.session(session.key))  # type: ignore[misc, assignment]
    return stored


async def seed_session(
    r: aioredis.Redis, session: SessionRef, policy: CheckpointPolicy | str, *, epoch: int = 3
) -> dict[bytes, bytes]:
    """A saved session as the session-store leaves it after a commit; returns its HGETALL."""
    fields = {
        "native_session_id": "ns-saved-1",
        "adapter": "codex",
        "model": "gpt-5-codex",
        "cwd": "/workspaces/acme/codex",
        "cursor": "c-41",
        "prompt_hash": "ph-1",
        "checkpoint_policy": policy,
        "updated_at": "2026-11-30T12:00:00.000Z",
        "revision": "7",
        "epoch": str(epoch),
        "state": "active",
        "compatibility_generation": "gen-2026-11",
        "generation_binding": "0" * 64,
    }
    await r.hset(keys.session(session.key), mapping=fields)  # type: ignore[arg-type]
    stored: dict[bytes, bytes] = await r.hgetall(keys.session(session.key))  # type: ignore[assignment,misc]
    return stored
