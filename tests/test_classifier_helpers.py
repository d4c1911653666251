"""Builders and bus readers shared by the classifier's integration tests (no tests here)."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Mapping
from typing import Any

import msgspec
import redis.asyncio as aioredis
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from shared import keys, subjects
from shared.contracts import CommandResult, ErrorInfo, ResumeFailed, SessionRef, ToolCall
from shared.contracts.types import CheckpointPolicy
from shared.signing import sign
from shared.times import now_rfc3339
from tests.support import wait_for

KEYS: dict[str, bytes] = {"k1": os.urandom(32), "k2": os.urandom(32)}
KEYS_ENV = ",".join(f"{k}={base64.b64encode(v).decode()}" for k, v in KEYS.items())
"""The same keys as `CONTINUITY_RUNNER_KEYS`, for a service run as a process."""


def new_runner() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


def new_session() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


def new_run() -> str:
    return f"run-{uuid.uuid4().hex[:16]}"


def command_result(
    runner: str,
    run_id: str,
    attempt: int,
    classification: str | None,
    *,
    key_id: str = "k1",
    key: bytes | None = None,
) -> CommandResult:
    unsigned = CommandResult(
        command="run.attach",
        status="refused",
        classification=classification,
        issued_at=now_rfc3339(),
        key_id=key_id,
        signature="",
    )
    secret = key if key is not None else KEYS[key_id]
    unsigned.signature = sign(secret, runner, run_id, attempt, unsigned)
    return unsigned


def resume_failed(
    runner: str,
    *,
    session: SessionRef | None = None,
    run_id: str | None = None,
    attempt: int = 1,
    classification: str | None = None,
    signed: bool = False,
    key_id: str = "k1",
    key: bytes | None = None,
    error: ErrorInfo | None = None,
    pending: ToolCall | None = None,
    governed_wait_elapsed: bool = False,
    event_id: str | None = None,
) -> ResumeFailed:
    run_id = run_id or new_run()
    result = None
    if signed or classification is not None:
        result = command_result(runner, run_id, attempt, classification, key_id=key_id, key=key)
    return ResumeFailed(
        type="resume_failed",
        event_id=event_id or f"ev-{uuid.uuid4().hex}",
        runner_id=runner,
        run_id=run_id,
        attempt=attempt,
        session=session or new_session(),
        native_session_id="ns-saved-1",
        occurred_at=now_rfc3339(),
        error=error,
        command_result=result,
        pending_tool_call=pending,
        governed_wait_elapsed=governed_wait_elapsed,
    )


def tool_call(recorded_outcome: str | None = None) -> ToolCall:
    return ToolCall(
        tool_call_id=f"call-{uuid.uuid4().hex[:8]}",
        tool_name="paperclip_call_assigned_tool",
        started_at=now_rfc3339(),
        recorded_outcome=recorded_outcome,  # type: ignore[arg-type]
    )


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


class Bus:
    """A runner's and an operator's view of the streams, for assertions."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self._work: dict[str, dict[str, list[bytes]]] = {}
        self._work_durables: dict[str, str] = {}

    async def publish(
        self, event: ResumeFailed | bytes, *, subject: str | None = None, msg_id: str | None = None
    ) -> int:
        """Publish as a runner does; returns the stream sequence of the stored event."""
        if isinstance(event, ResumeFailed):
            subject = subject or subjects.event(event.runner_id, "resume_failed")
            data = msgspec.json.encode(event)
        else:
            assert subject is not None
            data = event
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        ack = await self.js.publish(subject, data, headers=headers)
        return int(ack.seq)

    async def settled(self, seq: int, timeout: float = 10.0) -> None:
        """Every event up to `seq` was handled and acknowledged by the classifier."""

        async def done() -> bool:
            info = await self.js.consumer_info(subjects.EVENTS_STREAM, subjects.CLASSIFIER_CONSUMER)
            return info.ack_floor is not None and (info.ack_floor.stream_seq or 0) >= seq

        await wait_for(done, timeout=timeout, what=f"classifier acknowledged event seq {seq}")

    async def read_all(self, stream: str, subject: str) -> list[Msg]:
        """Every message stored on `subject`, through a fresh consumer (as a runner reads)."""
        sub = await self.js.pull_subscribe(subject, stream=stream)
        try:
            pending = (await sub.consumer_info()).num_pending or 0
            msgs: list[Msg] = []
            while len(msgs) < pending:
                msgs.extend(await sub.fetch(pending - len(msgs), timeout=5))
            for m in msgs:
                await m.ack()
            return msgs
        finally:
            await sub.unsubscribe()

    async def decisions(self, runner: str) -> list[dict[str, Any]]:
        msgs = await self.read_all(subjects.DECISIONS_STREAM, subjects.decisions(runner))
        return [msgspec.json.decode(m.data) for m in msgs]

    async def dead(self, subject: str, needle: str) -> list[Msg]:
        """Dead letters on `subject` whose original bytes contain `needle`."""
        msgs = await self.read_all(subjects.DEAD_STREAM, subject)
        return [m for m in msgs if needle.encode() in m.data]

    async def work(self, subject: str, run_id: str) -> list[dict[str, Any]]:
        """Work items for `run_id`; a work-queue stream allows one consumer per subject, so one
        durable per subject collects every item for the whole module."""
        durable = self._work_durables.get(subject)
        if durable is None:
            durable = f"test-{uuid.uuid4().hex[:8]}"
            await self.js.add_consumer(
                subjects.WORK_STREAM,
                ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT, filter_subject=subject),
            )
            self._work_durables[subject] = durable
        sub = await self.js.pull_subscribe_bind(durable, subjects.WORK_STREAM)
        try:
            pending = (await sub.consumer_info()).num_pending or 0
            store = self._work.setdefault(subject, {})
            fetched = 0
            while fetched < pending:
                for m in await sub.fetch(pending - fetched, timeout=5):
                    fetched += 1
                    item = msgspec.json.decode(m.data)
                    store.setdefault(item["run_id"], []).append(m.data)
                    await m.ack()
        finally:
            await sub.unsubscribe()
        return [msgspec.json.decode(d) for d in self._work.get(subject, {}).get(run_id, [])]


def header(msg: Msg, name: str) -> str | None:
    headers: Mapping[str, str] = msg.headers or {}
    return headers.get(name)
