"""Helpers of the cluster tests: a load of runner events published through node failures, and
what came of it on the streams (no tests here)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg

from shared.contract import ResumeFailed, SessionRef, subjects
from tests.support.runner import resume_failed
from tests.support.streams import read_stream
from tests.support.waiting import wait_for


def event(runner: str, run_id: str) -> ResumeFailed:
    """An unclassified resume failure of a session of its own: it gets one decision."""
    session = SessionRef(tenant="acme", conversation_id=f"conv-{run_id}", agent_id="codex")
    return resume_failed(runner, run_id=run_id, session=session)


async def publish_until_stored(js: JetStreamContext, subject: str, data: bytes, msg_id: str) -> int:
    """Publish as a runner does through a NATS node failure: again with the same id until
    JetStream acknowledges (its duplicate window keeps one copy); the stream sequence."""
    result: list[int] = []

    async def stored() -> bool:
        try:
            ack = await js.publish(subject, data, timeout=2, headers={"Nats-Msg-Id": msg_id})
        except Exception:
            return False
        result.append(int(ack.seq))
        return True

    await wait_for(stored, timeout=30, what=f"event {msg_id} stored")
    return result[0]


async def publish_events(js: JetStreamContext, runner: str, count: int) -> list[str]:
    """`count` events of `runner`, one run each; their run ids."""
    runs = [f"run-{uuid.uuid4().hex[:16]}" for _ in range(count)]
    for run_id in runs:
        e = event(runner, run_id)
        await publish_until_stored(
            js, subjects.event(runner, "resume_failed"), msgspec.json.encode(e), e.event_id
        )
    return runs


# Every message stored on a subject, through a fresh consumer: the one stream reader.
read_all = read_stream


async def read_by_get(js: JetStreamContext, stream: str, subject: str) -> list[RawStreamMsg]:
    """Every message stored in `stream` on `subject` (wildcards allowed), one get after the
    other. Only the stream's leader answers a get; a new consumer also needs the meta leader to
    place it, and JetStream 2.9 may go on placing it on a node just killed for half a minute."""
    msgs: list[RawStreamMsg] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return msgs
        msgs.append(msg)
        seq = (msg.seq or seq) + 1


async def read_settled(js: JetStreamContext, stream: str, subject: str) -> list[Any]:
    """Every message on `subject`, again while JetStream is still recovering from a lost node."""
    result: list[Any] = []

    async def read() -> bool:
        try:
            result[:] = await read_by_get(js, stream, subject)
        except (nats.errors.Error, TimeoutError):
            return False
        return True

    await wait_for(read, timeout=30, interval=0.5, what=f"reading {subject}")
    return result


async def decisions_per_run(js: JetStreamContext, runner: str) -> Counter[tuple[str, int]]:
    """How many decisions each (run_id, attempt) of `runner` received."""
    msgs = await read_settled(js, subjects.DECISIONS_STREAM, subjects.decisions(runner))
    decoded = [msgspec.json.decode(m.data) for m in msgs]
    return Counter((d["run_id"], d["attempt"]) for d in decoded)


async def dead_letters_of(js: JetStreamContext, runner: str) -> list[Any]:
    """Dead letters whose original bytes name `runner`."""
    msgs = await read_settled(js, subjects.DEAD_STREAM, "continuity.dead.>")
    return [m for m in msgs if runner.encode() in m.data]


async def wait_decided(js: JetStreamContext, runner: str, runs: list[str], timeout: float) -> None:
    async def all_decided() -> bool:
        got = await decisions_per_run(js, runner)
        return all((r, 1) in got for r in runs)

    await wait_for(all_decided, timeout=timeout, interval=0.5, what=f"decisions for {len(runs)} runs")
