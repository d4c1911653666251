"""Helpers of the archiver tests: a fake runner answering archive commands over real NATS,
work items, saved sessions, and the decisions a runner receives."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import redis.asyncio as aioredis
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from shared import keys, subjects
from shared.contracts import ArchiveCommand, ArchiveResult, ArchiveWork, Decision, SessionRef
from shared.session_record import generation_binding
from tests.support import wait_for

Answer = Callable[[ArchiveCommand], Awaitable[ArchiveResult | None]]


class FakeRunner:
    """A runner's archive endpoint: counts every command per archive_id and answers with
    what `answer` returns (None: never answers). Each command is answered in its own task, so
    a slow answer does not hold back the next command."""

    def __init__(self, nc: Client, runner_id: str, answer: Answer) -> None:
        self.nc = nc
        self.runner_id = runner_id
        self.answer = answer
        self.commands: list[ArchiveCommand] = []
        self.answered: set[str] = set()
        self.received_at: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sub: Any = None

    @property
    def per_archive(self) -> Counter[str]:
        return Counter(c.archive_id for c in self.commands)

    async def start(self) -> FakeRunner:
        self._sub = await self.nc.subscribe(subjects.runner_archive(self.runner_id), cb=self._on)
        await self.nc.flush()
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
        for task in list(self._tasks):
            task.cancel()

    async def _on(self, msg: Msg) -> None:
        command = msgspec.json.decode(msg.data, type=ArchiveCommand)
        self.commands.append(command)
        self.received_at.setdefault(command.archive_id, time.monotonic())
        task = asyncio.create_task(self._reply(msg, command))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reply(self, msg: Msg, command: ArchiveCommand) -> None:
        result = await self.answer(command)
        if result is not None:
            await msg.respond(msgspec.json.encode(result))
            self.answered.add(command.archive_id)


def answer_with(exit_code: int | None, output: str = "", delay_s: float = 0.0) -> Answer:
    async def answer(_: ArchiveCommand) -> ArchiveResult:
        if delay_s:
            await asyncio.sleep(delay_s)  # a runner that takes its time to move state
        return ArchiveResult(exit_code=exit_code, timed_out=False, output=output)

    return answer


async def never_answer(_: ArchiveCommand) -> None:
    return None


def new_runner_id() -> str:
    return f"r{uuid.uuid4().hex[:10]}"


def new_session() -> SessionRef:
    return SessionRef(tenant="acme", conversation_id=f"conv-{uuid.uuid4().hex[:12]}", agent_id="codex")


def work_item(
    runner_id: str, session: SessionRef, attempt: int = 1, run_id: str | None = None
) -> ArchiveWork:
    run_id = run_id or f"run-{uuid.uuid4().hex[:12]}"
    return ArchiveWork(
        archive_id=f"{run_id}-{attempt}",
        runner_id=runner_id,
        run_id=run_id,
        attempt=attempt,
        session=session,
        native_session_id="ns-1",
        failure_class="unclassified",
        event_published_at=time.time(),
    )


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


async def publish_work(js: JetStreamContext, work: ArchiveWork, msg_id: str | None = None) -> None:
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    await js.publish(subjects.WORK_ARCHIVE, msgspec.json.encode(work), headers=headers)


class Decisions:
    """What one runner receives on `continuity.decisions.<runner_id>`, read from the stream
    (so a duplicate the stream dropped is not counted)."""

    def __init__(self, js: JetStreamContext, runner_id: str) -> None:
        self.js = js
        self.runner_id = runner_id
        self.items: list[tuple[Decision, str | None]] = []
        self._sub: Any = None

    async def _fetch(self, timeout: float) -> None:
        if self._sub is None:
            self._sub = await self.js.pull_subscribe(
                subjects.decisions(self.runner_id), stream=subjects.DECISIONS_STREAM
            )
        try:
            msgs = await self._sub.fetch(100, timeout=timeout)
        except TimeoutError:  # nats' own TimeoutError is a subclass
            return
        for m in msgs:
            await m.ack()
            msg_id = (m.headers or {}).get("Nats-Msg-Id")
            self.items.append((msgspec.json.decode(m.data, type=Decision), msg_id))

    async def wait(self, count: int, timeout: float = 10.0) -> list[Decision]:
        async def enough() -> bool:
            await self._fetch(0.2)
            return len(self.items) >= count

        await wait_for(enough, timeout=timeout, what=f"{count} decisions for {self.runner_id}")
        return [d for d, _ in self.items]

    async def all(self) -> list[Decision]:
        """Everything stored so far; call once the archiver is idle."""
        await self._fetch(0.3)
        return [d for d, _ in self.items]

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()


async def wait_idle(js: JetStreamContext, timeout: float = 20.0) -> None:
    """Until the archiver's consumer has nothing left to deliver or to acknowledge."""

    async def idle() -> bool:
        info = await js.consumer_info(subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER)
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    await wait_for(idle, timeout=timeout, interval=0.05, what="archiver consumer idle")
