"""`turn_completed` (contract 4.6): the session of a decided attempt completed a turn. Checked
as a command result is (4.2), then recorded once per `(run_id, attempt)` as the run's outcome,
only on the runner's own run and only while that attempt's decision waits for it."""

from __future__ import annotations

from collections.abc import Mapping

from shared.contract import signing, subjects
from shared.contract.events import TURN_COMMAND, TURN_STATUS, TurnCompleted
from shared.platform.bus.consumer import Reject
from shared.records import keys, outcomes, steps
from shared.records.outbox import Outbox

from .store import ClassifierStore

ACTOR = "classifier"
WITHOUT_DECISION = "outcome_without_decision"


def authenticate(event: TurnCompleted, runner_keys: Mapping[str, bytes]) -> None:
    """The signed result must verify (else the event is quarantined) and say `turn` `completed`
    with no class (else it is invalid)."""
    result = event.result
    verdict = signing.verify(runner_keys, event.runner_id, event.run_id, event.attempt, result)
    if verdict is not signing.Verdict.VALID:
        raise Reject(subjects.DEAD_QUARANTINE, verdict.value)
    if result.command != TURN_COMMAND or result.status != TURN_STATUS or result.classification is not None:
        raise Reject(subjects.DEAD_INVALID, "invalid_field")


class Turns:
    """Records the outcomes of completed turns."""

    def __init__(self, store: ClassifierStore, outbox: Outbox) -> None:
        self._redis = store.redis
        self._runs = store.runs
        self._outbox = outbox

    async def record(self, event: TurnCompleted, stored_ms: int | None, now: float) -> str:
        """The event's outcome label (`recorded`, `duplicate`); raises `steps.NotOwned` for
        another runner's run and `Reject` when no decision of the attempt waits for a turn."""
        sk = event.session.key
        raw = await self._redis.execute("HMGET", keys.run(sk, event.run_id), *outcomes.RUN_FACT_FIELDS)
        facts = outcomes.run_facts(raw)
        if facts is not None and facts.runner_id != event.runner_id:
            raise steps.NotOwned("run_not_owned")
        decided = outcomes.waiting_decision(facts, event.attempt)
        if facts is None or decided is None:
            if await self._recorded(sk, event):
                return "duplicate"
            raise Reject(subjects.DEAD_INVALID, WITHOUT_DECISION)
        outcome = outcomes.outcome_of(
            decided,
            outcomes.RECOVERED_BY_ACTION[decided.action],
            facts,
            now,
            recovery_ms=outcomes.recovery_ms_of(facts, stored_ms),
        )
        step = outcomes.outcome_step(outcome, ACTOR, for_runner=event.runner_id)
        code, _ = await self._runs.record_outcome(
            sk, event.run_id, step, attempt=event.attempt, statuses=outcomes.TURN_MAY_FOLLOW
        )
        if code == 3:
            raise steps.NotOwned("run_not_owned")
        if code == 4:
            raise Reject(subjects.DEAD_INVALID, WITHOUT_DECISION)
        if code == 0:
            # Recorded by an earlier delivery: its outcome is published once, by that delivery
            # or, if a crash stopped it first, by the first taker of its outbox entry.
            await self._outbox.flush_leftovers(sk, [outcome.outcome_id])
            return "duplicate"
        await self._outbox.flush(sk, step.outbox)
        outcomes.observe(outcome)
        return "recorded"

    async def _recorded(self, sk: str, event: TurnCompleted) -> bool:
        """Whether this attempt's outcome is recorded already (the run has moved on since)."""
        slot = outcomes.outcome_slot(event.attempt, "outcome")
        return await self._redis.execute("HGET", keys.run_decisions(sk, event.run_id), slot) is not None
