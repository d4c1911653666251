"""The archiver's decisions, as pure functions of the work item, the move's result, the
session's epoch and the clock: each returns the decision and the step that records it, and the
values of an archive's progress (`MoveResult`). Reading and recording are `store`'s, publishing
the handler's."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.contract.decisions import ArchiveWork, Decision
from shared.contract.types import Action, DecisionReason
from shared.records import decisions, names
from shared.records.session import text
from shared.records.steps import RunStep

ACTOR = "archiver"
REPLACEMENT_REASON: DecisionReason = "native_session_continuity_break"
FAILED_REASON: DecisionReason = "runner_continuity_break_archive_failed"


@dataclass(frozen=True, slots=True)
class Begin:
    """Where an archive's remote move stands (`archive_begin.lua`) and the lease left on it."""

    state: str
    lease_left_s: float


@dataclass(frozen=True, slots=True)
class MoveResult:
    """What a remote move came to; `detail` is already redacted and bounded."""

    exit_code: int | None
    timed_out: bool
    detail: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def label(self) -> str:
        """The `continuity_archive_total` result."""
        return "ok" if self.ok else "timed_out" if self.timed_out else "failed"

    def fields(self) -> dict[str, str]:
        return {
            "state": "remote_ok" if self.ok else "remote_failed",
            "exit_code": "" if self.exit_code is None else str(self.exit_code),
            "timed_out": "true" if self.timed_out else "false",
            "detail": self.detail,
        }

    @classmethod
    def from_fields(cls, raw: dict[bytes, bytes]) -> MoveResult:
        exit_code = raw.get(b"exit_code", b"")
        return cls(
            exit_code=int(exit_code) if exit_code else None,
            timed_out=raw.get(b"timed_out") == b"true",
            detail=text(raw.get(b"detail")),
        )


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
        rule=work.rule,
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


HELD_DETAIL = (
    "the runner moved the session, but its saved record is held for an operator by another "
    "run's decision: the record was not archived"
)


def held(work: ArchiveWork, epoch: int | None, now: float) -> ArchiveStep:
    """After a successful remote move whose local move found the saved record held (I5): the
    record is kept as it is, for the operator another run's decision called, and this run
    stops for an operator too, saying why."""
    decided = decisions.decision(
        work,
        "operator",
        FAILED_REASON,
        now,
        failure_class=work.failure_class,
        epoch=epoch,
        detail=HELD_DETAIL,
        rule=work.rule,
    )
    step = decisions.decision_step(decided, names.archive_slot(work.attempt), ACTOR)
    return ArchiveStep(decision=decided, step=step)
