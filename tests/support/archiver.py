"""The archiver's side of its tests: archive work items and its consumer's progress."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from nats.aio.client import Client
from nats.js import JetStreamContext

from shared.contract import ArchiveWork, SessionRef, subjects
from tests.support.decisions import Decisions
from tests.support.runner import Answer, FakeRunner
from tests.support.waiting import wait_for


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


async def publish_work(js: JetStreamContext, work: ArchiveWork, msg_id: str | None = None) -> None:
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    await js.publish(subjects.WORK_ARCHIVE, msgspec.json.encode(work), headers=headers)


async def wait_idle(js: JetStreamContext, timeout: float = 20.0) -> None:
    """Until the archiver's consumer has nothing left to deliver or to acknowledge."""

    async def idle() -> bool:
        info = await js.consumer_info(subjects.WORK_STREAM, subjects.ARCHIVER_CONSUMER)
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    await wait_for(idle, timeout=timeout, interval=0.05, what="archiver consumer idle")


@contextlib.asynccontextmanager
async def answering_runner(
    nc: Client, runner_id: str, answer: Answer
) -> AsyncIterator[tuple[FakeRunner, Decisions]]:
    """A fake runner answering archive commands with `answer`, and the reader of its decisions;
    both stopped when the test ends, also when an assertion fails."""
    runner = await FakeRunner(nc, runner_id, answer).start()
    decisions = Decisions(nc.jetstream(), runner_id)
    try:
        yield runner, decisions
    finally:
        await runner.stop()
        await decisions.close()
