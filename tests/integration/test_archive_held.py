"""A held session is never archived (I5 of docs/protocol.md): the local move of another run,
whose decide was answered before the hold, is refused by `archive_local_move.lua` itself and
writes nothing, on real Redis."""

from __future__ import annotations

import uuid

import msgspec
import pytest
import redis.asyncio as aioredis

from shared.contract import Decision, SessionRef, subjects
from shared.contract.times import now_rfc3339
from shared.contract.types import Action
from shared.platform.redis import Redis
from shared.records import keys
from shared.records.decisions import decision_audit
from shared.records.outbox import OutboxEntry
from shared.records.steps import RunStep, run_fields
from shared.records.store import RunStore
from tests.support import seed_session

pytestmark = pytest.mark.asyncio


def _step(run_id: str, session: SessionRef, action: Action, slot: str, *, hold: str | None) -> RunStep:
    decision = Decision(
        decision_id=f"{run_id}:1:{action}",
        runner_id="r1",
        run_id=run_id,
        attempt=1,
        session=session,
        action=action,
        reason="native_provider_state_incompatible",
        failure_class="provider_attach_refused",
        decided_at=now_rfc3339(),
    )
    payload = msgspec.json.encode(decision)
    entry = OutboxEntry(subject=subjects.decisions("r1"), msg_id=decision.decision_id, payload=payload)
    return RunStep(
        slot=slot,
        slot_value=payload,
        run_fields=run_fields(run_id, "r1", session, 1, action, decision),
        outbox=[entry],
        audit=decision_audit(decision, "archiver"),
        hold=hold,
    )


async def test_the_local_move_refuses_a_session_held_by_another_run(
    redis_client: aioredis.Redis, records_redis: Redis
) -> None:
    session = SessionRef(tenant="t", conversation_id=uuid.uuid4().hex, agent_id="a")
    stored = await seed_session(redis_client, session, "allow_replacement_after_resume_failure", epoch=3)
    runs = RunStore(records_redis)
    # Run A stops for an operator: the saved session is held.
    held_by = f"run-a-{uuid.uuid4().hex}"
    await runs.index_run(held_by, session.key)
    hold = _step(held_by, session, "operator", "1", hold=stored[b"native_session_id"].decode())
    assert await runs.record_step(session.key, held_by, hold) is None
    held = await redis_client.hgetall(keys.session(session.key))  # type: ignore[misc]
    assert held[b"state"] == b"held"

    # Run B was told to resume before the hold; its failure was archived remotely, and now the
    # archiver makes the local move on the epoch it read.
    other = f"run-b-{uuid.uuid4().hex}"
    archive_id = f"ar-{uuid.uuid4().hex}"
    await runs.index_run(other, session.key)
    move = _step(other, session, "open_replacement", "1:archive", hold=None)
    status, detail = await runs.record_local_move(
        session.key, other, archive_id, move, epoch=3, progress={"state": "done"}
    )

    assert (status, detail) == ("session_held", b"3")
    assert await redis_client.hgetall(keys.session(session.key)) == held  # type: ignore[misc]
    assert not await redis_client.exists(keys.archive_copy(session.key, archive_id))
    assert not await redis_client.hexists(keys.run_decisions(session.key, other), "1:archive")  # type: ignore[misc]
    entries = await redis_client.hkeys(keys.outbox(session.key))  # type: ignore[misc]
    assert f"{other}:1:open_replacement".encode() not in entries
