"""What no policy may break, checked on every fact a decision can read.

The facts a decision reads are few and closed (ten classes, three checkpoint policies, a handful
of booleans, attempts up to one past the largest `min_attempt`), so each invariant is checked on
all of them: a policy that breaks one is refused with the invariant's name and a fact that
shows it. The shipped policy is checked the same way (tests/unit/test_policy.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import get_args

from shared.contract.types import CheckpointPolicy, FailureClass, SessionState

from .policy import ATTEMPT_BUDGET, Policy
from .recovery import CLOSED_CLASSES, Facts, Row, Verdict, decide_row
from .resume import COMPARED, STORED, ResumeFacts, Rule, first_rule, resumes


class PolicyRefused(ValueError):
    """A policy that cannot be loaded: `invariant` names what it breaks (or `format`)."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant


@dataclass(frozen=True, slots=True)
class Invariant:
    name: str
    text: str
    """The rule as the contract states it."""


TOTAL = Invariant("total", "every fact a decision can read meets a row (4.4) and a clause (3.3)")
CLOSED_REFUSAL = Invariant(
    "closed_refusal_never_replaced", "a closed failure class never reaches an archive and replacement"
)
PENDING_SIDE_EFFECT = Invariant(
    "pending_side_effect_never_retried",
    "a pending side effect (its class, or a pending tool call) never reaches a retry, a replacement "
    "or a fresh continuation",
)
GENERATION = Invariant(
    "no_resume_across_generation",
    "under `profile-ready`, nothing resumes across a changed or missing generation unless "
    "declared compatible",
)
ACTIVE_ONLY = Invariant("only_an_active_record_resumes", "no record, or a record not `active`, never resumes")
MISSING_SESSION = Invariant(
    "missing_session_never_retried",
    "`native_session_missing` never reaches a retry of the same session nor an archive and replacement",
)
OVERFLOW = Invariant(
    "overflow_never_resumed_whole",
    "`context_overflow` never reaches a retry of the same session nor an archive and replacement",
)
CORRUPT_TRANSCRIPT = Invariant(
    "corrupt_transcript_never_replaced_silently",
    "`transcript_corrupt` reaches only `operator` or `reconcile`",
)
BUSY_SESSION = Invariant(
    "busy_session_one_writer",
    "`session_busy` never reaches an archive and replacement nor `continue_fresh`",
)

INVARIANTS: tuple[Invariant, ...] = (
    TOTAL,
    CLOSED_REFUSAL,
    PENDING_SIDE_EFFECT,
    GENERATION,
    ACTIVE_ONLY,
    MISSING_SESSION,
    OVERFLOW,
    CORRUPT_TRANSCRIPT,
    BUSY_SESSION,
)

FORBIDDEN: dict[FailureClass, tuple[Invariant, frozenset[str]]] = {
    "native_session_missing": (MISSING_SESSION, frozenset({"retry_same_session", "archive"})),
    "context_overflow": (OVERFLOW, frozenset({"retry_same_session", "archive"})),
    "transcript_corrupt": (
        CORRUPT_TRANSCRIPT,
        frozenset(get_args(Verdict)) - {"operator", "reconcile"},
    ),
    "session_busy": (BUSY_SESSION, frozenset({"archive", "continue_fresh"})),
}
"""The harness classes of 4.3, each with its invariant and the verdicts it forbids: a session
the harness does not have is never tried again as it is, one too large to resume or with a
broken transcript is never resumed whole or replaced behind the operator's back, and one another
process holds is never written by a second process."""


def recovery_facts(rows: tuple[Row, ...]) -> Iterator[Facts]:
    """Every fact a recovery decision can read, attempts up to one past the largest threshold."""
    top = max([ATTEMPT_BUDGET, *(row.min_attempt or 0 for row in rows)]) + 1
    for cls, pending, attempt, policy, waited, spent in itertools.product(
        get_args(FailureClass),
        (False, True),
        range(1, top + 1),
        get_args(CheckpointPolicy),
        (False, True),
        (False, True),
    ):
        yield Facts(cls, pending, attempt, policy, waited, spent)


def resume_facts() -> Iterator[ResumeFacts]:
    """Every fact a resume decision can read."""
    yield ResumeFacts(record=False)

    def subsets(names: frozenset[str]) -> list[frozenset[str]]:
        ordered = sorted(names)
        return [frozenset(c) for n in range(len(ordered) + 1) for c in itertools.combinations(ordered, n)]

    for state, differs, empty in itertools.product(
        get_args(SessionState), subsets(frozenset(COMPARED)), subsets(STORED)
    ):
        yield ResumeFacts(True, state, differs, empty, "none", "not_compared")
        for generation in ("matched", "changed", "missing", "declared"):
            yield ResumeFacts(True, state, differs, empty, "profile-ready", generation)  # type: ignore[arg-type]


def check(policy: Policy) -> None:
    """Raise `PolicyRefused` naming the first invariant the policy breaks, with a fact."""
    for facts in recovery_facts(policy.recovery):
        _check_recovery(decide_row(policy.recovery, facts), facts)
    for rfacts in resume_facts():
        _check_resume(first_rule(policy.resume, rfacts), rfacts)


def _check_recovery(row: Row | None, facts: Facts) -> None:
    if row is None:
        raise PolicyRefused(TOTAL.name, f"no recovery row matches {_show(facts)}")
    forbidden = FORBIDDEN.get(facts.failure_class)
    if forbidden is not None and row.verdict in forbidden[1]:
        invariant = forbidden[0]
        raise PolicyRefused(
            invariant.name, f"row {row.id} decides {row.verdict} for {_show(facts)}; {invariant.text}"
        )
    if facts.failure_class in CLOSED_CLASSES and row.verdict == "archive":
        raise PolicyRefused(
            CLOSED_REFUSAL.name,
            f"row {row.id} archives and replaces for {_show(facts)}; {CLOSED_REFUSAL.text}",
        )
    pending = facts.pending_tool_call or facts.failure_class == "provider_side_effect_pending"
    if pending and row.verdict in ("retry_same_session", "archive", "continue_fresh"):
        raise PolicyRefused(
            PENDING_SIDE_EFFECT.name,
            f"row {row.id} decides {row.verdict} for {_show(facts)}; {PENDING_SIDE_EFFECT.text}",
        )


def _check_resume(rule: Rule | None, facts: ResumeFacts) -> None:
    if rule is None:
        raise PolicyRefused(TOTAL.name, f"no resume clause matches {_show_resume(facts)}")
    if not resumes(rule):
        return
    if not facts.record or facts.state != "active":
        raise PolicyRefused(
            ACTIVE_ONLY.name, f"clause {rule.id} resumes {_show_resume(facts)}; {ACTIVE_ONLY.text}"
        )
    if facts.compatibility == "profile-ready" and facts.generation in ("changed", "missing"):
        raise PolicyRefused(
            GENERATION.name, f"clause {rule.id} resumes {_show_resume(facts)}; {GENERATION.text}"
        )


def _show(facts: Facts) -> str:
    return (
        f"failure_class={facts.failure_class} pending_tool_call={facts.pending_tool_call} "
        f"attempt={facts.attempt} checkpoint_policy={facts.policy} "
        f"governed_wait_elapsed={facts.governed_wait_elapsed} budget_spent={facts.recovery_budget_spent}"
    )


def _show_resume(facts: ResumeFacts) -> str:
    if not facts.record:
        return "no record"
    return (
        f"state={facts.state} differs={sorted(facts.differs)} empty={sorted(facts.empty)} "
        f"compatibility={facts.compatibility} generation={facts.generation}"
    )
