"""The archiver's decisions, as pure functions of the work item, the move's result, the
session's epoch and the clock: each returns the decision and the step that records it.
Reading, recording and publishing are the handler's."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.contract.decisions import ArchiveWork, Decision
from shared.contract.types import Action, DecisionReason
from shared.records import decisions, names
from shared.records.steps import RunStep

from .progress import MoveResult

ACTOR = "archiver"
REPLACEMENT_REASON: DecisionReason = "native_session_continuity_break"
FAILED_REASON: DecisionReason = "runner_continuity_break_archive_failed"


@dataclass(frozen=True, slots=True)
class ArchiveStep:
    """A decision of the archiver and the run step that records it."""

    decision: Decision
    step: RunStep
    progress: dict[str, str] = field(default_factory=dict)
    """The archive progress the local move writes with the step (a replacement only)."""


def replacement(work: ArchiveWork, result: MoveResult, epoch: int | None, now: float) -> ArchiveStep:
    """After a successful remote move: `open_replacement` with the epoch the local move sets
    (one above `epoch`, the session's epoch as read; None without a record)."""
    decided = decisions.decision(
        work,
        "open_replacement",
        REPLACEMENT_REASON,
        now,
        failure_class=work.failure_class,
        epoch=(epoch or 0) + 1,
    )
    progress = {
        "state": "done",
        "decision_id": decided.decision_id,
        "updated_at": decided.decided_at,
        **{k: v for k, v in result.fields().items() if k != "state"},
    }
    step = decisions.decision_step(decided, names.archive_slot(work.attempt), ACTOR)
    return ArchiveStep(decision=decided, step=step, progress=progress)


def refusal(
    work: ArchiveWork, result: MoveResult, epoch: int | None, now: float, *, backoff_s: float
) -> ArchiveStep:
    """After a failed move the local record stays as it is: retry while the attempt budget
    lasts, then an operator, who finds the saved session held."""
    action: Action = "retry_same_session" if decisions.within_budget(work.attempt) else "operator"
    decided = decisions.decision(
        work,
        action,
        FAILED_REASON,
        now,
        backoff_s=backoff_s,
        failure_class=work.failure_class,
        epoch=epoch,
        detail=result.detail,
    )
    step = decisions.decision_step(
        decided, names.archive_slot(work.attempt), ACTOR, native_session_id=work.native_session_id
    )
    return ArchiveStep(decision=decided, step=step)
