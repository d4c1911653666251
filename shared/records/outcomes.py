"""How a decided attempt ended (contract 4.6), as run steps: the classifier's outcome of a
completed turn and the reconciliation service's abandonment, each the outbox entry of a
`RunOutcome`, the run's final status and an audit entry, recorded by `run_outcome.lua` once per
`(run_id, attempt)` and only while the run still waits for that attempt's outcome."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import msgspec
from continuity_runner.harness.table import shipped_table

from shared.contract import subjects
from shared.contract.decisions import Decision, RunOutcome
from shared.contract.reconciliation import AuditEntry
from shared.contract.times import rfc3339_from_epoch
from shared.contract.types import OutcomeStatus, RunStatus
from shared.platform import metrics, tracing
from shared.records.outbox import OutboxEntry
from shared.records.session import text
from shared.records.steps import RunStep

RECOVERED_BY_ACTION: dict[str, OutcomeStatus] = {
    "retry_same_session": "recovered",
    "open_replacement": "recovered_replaced",
    "continue_fresh": "recovered_fresh",
}
"""The final status a completed turn gives a run, by the action of the decision it followed;
the other actions (`operator`, `reconcile`) wait on a person, not on a turn."""

TURN_MAY_FOLLOW: tuple[RunStatus, ...] = ("retrying", "replacing", "continued", "abandoned")
"""The statuses a run may have when its turn's outcome is recorded: a turn that comes after
the bound still recovers the run."""
ABANDONABLE: tuple[RunStatus, ...] = ("retrying", "replacing", "continued")
"""The statuses the abandonment sweep looks at."""

OutcomeKind = Literal["outcome", "abandoned"]

RUN_FACT_FIELDS = (
    "runner_id",
    "attempt",
    "status",
    "last_decision",
    "harness",
    "harness_version",
    "first_failed_at",
)
"""The run record's fields an outcome is built from (an HMGET, in this order)."""
HARNESS_FIELD = "harness"
HARNESS_VERSION_FIELD = "harness_version"
FIRST_FAILED_FIELD = "first_failed_at"
"""Epoch milliseconds at which JetStream stored the run's first `resume_failed`."""

_encode = msgspec.json.Encoder().encode
_decision = msgspec.json.Decoder(Decision)


@dataclass(frozen=True, slots=True)
class RunFacts:
    runner_id: str
    attempt: int
    status: str
    last_decision: Decision | None
    harness: str | None
    harness_version: str | None
    first_failed_ms: int | None


def run_facts(raw: list[bytes | None]) -> RunFacts | None:
    """The fields of `RUN_FACT_FIELDS` as read; None when there is no run record."""
    runner, attempt, status, last, harness, version, first = (text(v) for v in raw)
    if not runner or not attempt.isdigit():
        return None
    try:
        decision = _decision.decode(last) if last else None
    except msgspec.MsgspecError:
        decision = None
    return RunFacts(
        runner_id=runner,
        attempt=int(attempt),
        status=status,
        last_decision=decision,
        harness=harness or None,
        harness_version=version or None,
        first_failed_ms=int(first) if first.isdigit() else None,
    )


def waiting_decision(facts: RunFacts | None, attempt: int) -> Decision | None:
    """The run's decision of `attempt` that waits for a turn, if that is its last decision."""
    if facts is None or facts.last_decision is None:
        return None
    decided = facts.last_decision
    if decided.attempt != attempt or decided.action not in RECOVERED_BY_ACTION:
        return None
    return decided if facts.status in TURN_MAY_FOLLOW else None


def kind_of(status: OutcomeStatus) -> OutcomeKind:
    """The audit kind, slot and id suffix of an outcome: `abandoned` for an abandonment, else
    `outcome`."""
    return "abandoned" if status == "abandoned" else "outcome"


def outcome_slot(attempt: int, kind: OutcomeKind) -> str:
    """`<attempt>:outcome` or `<attempt>:abandoned`: each written once."""
    return f"{attempt}:{kind}"


def outcome_of(
    decided: Decision,
    status: OutcomeStatus,
    facts: RunFacts,
    now: float,
    *,
    recovery_ms: int | None = None,
) -> RunOutcome:
    kind = kind_of(status)
    return RunOutcome(
        outcome_id=f"{decided.run_id}:{decided.attempt}:{kind}",
        runner_id=decided.runner_id,
        run_id=decided.run_id,
        attempt=decided.attempt,
        session=decided.session,
        status=status,
        action=decided.action,
        reason=decided.reason,
        decision_id=decided.decision_id,
        rule=decided.rule,
        failure_class=decided.failure_class,
        harness=facts.harness,
        harness_version=facts.harness_version,
        recovery_ms=recovery_ms,
        recorded_at=rfc3339_from_epoch(now),
    )


def recovery_ms_of(facts: RunFacts, completed_ms: int | None) -> int | None:
    """From the run's first failure to the completed turn, both as JetStream stored them."""
    if facts.first_failed_ms is None or completed_ms is None:
        return None
    return max(0, completed_ms - facts.first_failed_ms)


def outcome_step(outcome: RunOutcome, actor: str, *, for_runner: str | None = None) -> RunStep:
    """The step recording `outcome`: its slot, the run's final status, its publication on
    `continuity.decisions.<runner_id>.outcome` and its audit entry."""
    kind = kind_of(outcome.status)
    payload = _encode(outcome)
    fields = {"status": outcome.status, "updated_at": outcome.recorded_at}
    if outcome.recovery_ms is not None:
        fields["recovery_ms"] = str(outcome.recovery_ms)
    return RunStep(
        slot=outcome_slot(outcome.attempt, kind),
        slot_value=payload,
        run_fields=fields,
        outbox=[
            OutboxEntry(
                subject=subjects.outcomes(outcome.runner_id),
                msg_id=outcome.outcome_id,
                payload=payload,
                trace=tracing.recorded(),
            )
        ],
        audit=AuditEntry(
            at=outcome.recorded_at,
            kind=kind,
            actor=actor,
            attempt=outcome.attempt,
            action=outcome.action,
            reason=outcome.reason,
            decision_id=outcome.decision_id,
            status=outcome.status,
            recovery_ms=outcome.recovery_ms,
        ),
        for_runner=for_runner,
    )


def harness_label(name: str | None) -> str:
    """A closed metric label for a harness a runner named: a name of the shipped harness table,
    `other` for any other, `unknown` when none was named."""
    if not name:
        return "unknown"
    return name if name in _table_names() else "other"


@functools.cache
def _table_names() -> frozenset[str]:
    return frozenset(h.name for h in shipped_table().harnesses)


def labels(outcome: RunOutcome) -> tuple[str, str, str]:
    """(rule, class, harness) of an outcome's metrics: the rule of its decision (`operator` for
    an operator's), its class (`none` without one) and its harness label."""
    return outcome.rule or "operator", outcome.failure_class or "none", harness_label(outcome.harness)


def observe(outcome: RunOutcome) -> None:
    """Count a recorded outcome in the metrics of contract 9.7 (once: by the step that recorded it)."""
    rule, klass, harness = labels(outcome)
    metrics.RUN_OUTCOMES.labels(rule, klass, harness, outcome.status).inc()
    if outcome.status != "abandoned":
        if outcome.recovery_ms is not None:
            metrics.RECOVERY_SECONDS.labels(rule, klass, harness).observe(outcome.recovery_ms / 1000)
        metrics.RECOVERY_ATTEMPTS.labels(rule, klass, harness).observe(outcome.attempt)
