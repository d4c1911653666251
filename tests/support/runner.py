"""The one fake runner of the tests: its archive endpoint answering commands over real NATS, and
the events it publishes (resume failures, signed command results, tool calls)."""

from __future__ import annotations

import asyncio
import base64
import os
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from shared.contract import (
    ArchiveCommand,
    ArchiveResult,
    CommandResult,
    ErrorInfo,
    ResumeFailed,
    SessionRef,
    ToolCall,
    subjects,
)
from shared.contract.signing import sign
from shared.contract.times import now_rfc3339
from tests.support.sessions import new_session


def new_runner_id() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


KEYS: dict[str, bytes] = {"k1": os.urandom(32), "k2": os.urandom(32)}
KEYS_ENV = ",".join(f"{k}={base64.b64encode(v).decode()}" for k, v in KEYS.items())
"""The same keys as `CONTINUITY_RUNNER_KEYS`, for a service run as a process."""


def new_run_id() -> str:
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
    run_id = run_id or new_run_id()
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
