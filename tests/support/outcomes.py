"""Outcomes as a runner reports them (contract 4.6): a failure and the turn that followed it,
signed with the test keys, published on the runner's subjects; and the waits on a run's status
as the reconciliation service answers it."""

from __future__ import annotations

import uuid

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from shared.contract import (
    CommandResult,
    ErrorInfo,
    HarnessInfo,
    ResumeFailed,
    SessionRef,
    TurnCompleted,
    subjects,
)
from shared.contract.client import ContinuityClient, RequestError
from shared.contract.signing import sign
from shared.contract.times import now_rfc3339
from shared.platform.redis import Redis
from shared.records import history, keys
from tests.support.cli import run_cli
from tests.support.runner import KEYS, resume_failed
from tests.support.waiting import wait_for

TRANSPORT = ErrorInfo(type="transport", code="socket_closed")
HARNESS = HarnessInfo(name="claude-code", version="2.1.332")


def uid() -> str:
    return uuid.uuid4().hex[:10]


def turn(
    runner: str,
    run_id: str,
    session: SessionRef,
    attempt: int = 1,
    *,
    key: bytes | None = None,
    status: str = "completed",
    as_runner: str | None = None,
) -> TurnCompleted:
    """A `turn_completed`, signed with the test keys (or `key`), by `as_runner` if given."""
    signer = as_runner or runner
    result = CommandResult(command="turn", status=status, issued_at=now_rfc3339(), key_id="k1", signature="")
    result.signature = sign(key if key is not None else KEYS["k1"], signer, run_id, attempt, result)
    return TurnCompleted(
        type="turn_completed",
        event_id=f"ev-{uuid.uuid4().hex}",
        runner_id=signer,
        run_id=run_id,
        attempt=attempt,
        session=session,
        native_session_id="ns-saved-1",
        occurred_at=now_rfc3339(),
        result=result,
        harness=HARNESS,
    )


async def send(
    js: JetStreamContext, event: ResumeFailed | TurnCompleted, *, raw: bytes | None = None
) -> None:
    await js.publish(
        subjects.event(event.runner_id, event.type),
        raw if raw is not None else msgspec.json.encode(event),
        headers={"Nats-Msg-Id": event.event_id},
    )


async def failure(js: JetStreamContext, runner: str, **fields: object) -> ResumeFailed:
    ev = resume_failed(runner, **fields)  # type: ignore[arg-type]
    ev.harness = HARNESS
    await send(js, ev)
    return ev


async def status_of(c: ContinuityClient, run_id: str) -> str | None:
    try:
        return (await c.run(run_id)).status
    except RequestError:
        return None


async def reaches(c: ContinuityClient, run_id: str, status: str) -> None:
    async def done() -> bool:
        return await status_of(c, run_id) == status

    await wait_for(done, timeout=30, what=f"run {run_id} {status}")


async def cli(url: str, *args: str) -> tuple[int, str, str]:
    return await run_cli(url, *args, columns=250)  # every column of a row on one line


async def history_copies(js: JetStreamContext, run_id: str) -> int:
    """Messages CONTINUITY_HISTORY holds on the run's subject (none before the stream exists)."""
    try:
        info = await js.stream_info(subjects.HISTORY_STREAM, subjects_filter=history.subject(run_id))
    except NotFoundError:
        return 0
    return sum((info.state.subjects or {}).values())


async def redis_holds(redis: Redis, sk: str, run_id: str) -> list[int]:
    """How many of the run's records (run, decisions, audit, run index) Redis holds."""
    found = await redis.batch(
        [
            ("EXISTS", keys.run(sk, run_id)),
            ("EXISTS", keys.run_decisions(sk, run_id)),
            ("EXISTS", keys.run_audit(sk, run_id)),
            ("EXISTS", keys.run_index(run_id)),
        ]
    )
    return [int(x) for x in found]


async def moved_to_history(js: JetStreamContext, redis: Redis, ev: ResumeFailed) -> None:
    """Waits until the run's one copy is in CONTINUITY_HISTORY and Redis holds none of its records."""

    async def moved_and_gone() -> bool:
        if await history_copies(js, ev.run_id) != 1:
            return False
        return await redis_holds(redis, ev.session.key, ev.run_id) == [0, 0, 0, 0]

    await wait_for(moved_and_gone, timeout=30, what=f"run {ev.run_id} in the stream, then gone from Redis")


async def recovered_run(js: JetStreamContext, client: ContinuityClient, runner: str) -> ResumeFailed:
    """A run of `runner` played to `recovered`: a transport failure, retried, then its turn
    completed. Returns its failure event."""
    ev = await failure(js, runner, error=TRANSPORT)
    await reaches(client, ev.run_id, "retrying")
    await send(js, turn(runner, ev.run_id, ev.session))
    await reaches(client, ev.run_id, "recovered")
    return ev
