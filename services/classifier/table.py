"""The decision table (contract 4.4) as data: first matching row wins.

Each `Row` is one line of the contract's table, in the same order, written as plain values so
that it can be read against the document line by line (tests/unit/test_decision_tables.py
parses the document and compares). `decide` is a pure function of the facts; recording and
publishing are the handler's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from shared.contract.types import CheckpointPolicy, DecisionReason, FailureClass
from shared.records.decisions import ATTEMPT_BUDGET

SAFE_POLICY: CheckpointPolicy = "same_session_only"
"""With no record, or a policy value this release does not know, nothing may be replaced."""

Verdict = Literal["reconcile", "operator", "retry_same_session", "archive"]
"""A runner action, or `archive`: archive first, then `open_replacement` (the archiver's)."""


@dataclass(frozen=True, slots=True)
class Facts:
    failure_class: FailureClass
    pending_tool_call: bool
    attempt: int
    policy: CheckpointPolicy
    governed_wait_elapsed: bool
    recovery_budget_spent: bool = False
    """The session's tenant has spent its retries and replacements of the window (the storm
    breaker, contract 10.6)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table. A row matches when the event's class is one of `classes` (or,
    with `or_pending_tool_call`, whenever the event carries a pending tool call) and every
    condition that is set holds: `attempt >= min_attempt`, the session's policy is `policy`,
    `governed_wait_elapsed` is true when required, the tenant's recovery budget is spent when
    required."""

    classes: tuple[FailureClass, ...]
    verdict: Verdict
    reason: DecisionReason
    holds_session: bool
    """After this verdict the saved session is left exactly as it was and its state is `held`
    (the contract's column; `shared.records.decisions.holds_session` is the rule every service
    applies, and a unit test keeps the two alike)."""
    or_pending_tool_call: bool = False
    min_attempt: int | None = None
    policy: CheckpointPolicy | None = None
    governed_wait_elapsed: bool = False
    budget_spent: bool = False


TABLE: tuple[Row, ...] = (
    Row(
        ("provider_side_effect_pending",),
        or_pending_tool_call=True,
        verdict="reconcile",
        reason="native_provider_side_effect_pending",
        holds_session=True,
    ),
    Row(
        ("provider_attach_refused", "provider_state_incompatible"),
        verdict="operator",
        reason="native_provider_state_incompatible",
        holds_session=True,
    ),
    Row(
        ("source_reconciliation_required",),
        verdict="operator",
        reason="native_runner_source_reconciliation_required",
        holds_session=True,
    ),
    Row(
        ("event_replay_conflict",),
        verdict="operator",
        reason="native_event_replay_conflict",
        holds_session=True,
    ),
    Row(
        ("unclassified",),
        budget_spent=True,
        verdict="operator",
        reason="tenant_recovery_budget_exhausted",
        holds_session=True,
    ),
    Row(
        ("unclassified",),
        min_attempt=ATTEMPT_BUDGET,
        verdict="operator",
        reason="native_session_retry_exhausted",
        holds_session=True,
    ),
    Row(
        ("unclassified",),
        policy="allow_replacement_after_resume_failure",
        verdict="archive",
        reason="native_session_continuity_break",
        holds_session=False,
    ),
    Row(
        ("unclassified",),
        policy="allow_replacement_after_governed_wait",
        governed_wait_elapsed=True,
        verdict="archive",
        reason="native_session_continuity_break",
        holds_session=False,
    ),
    Row(
        ("unclassified",),
        verdict="retry_same_session",
        reason="native_session_interrupted",
        holds_session=False,
    ),
)


def decide_row(facts: Facts) -> Row:
    """The first row that matches; plain comparisons only, as this runs for every event."""
    failure_class = facts.failure_class
    for row in TABLE:
        if failure_class not in row.classes and not (row.or_pending_tool_call and facts.pending_tool_call):
            continue
        if row.min_attempt is not None and facts.attempt < row.min_attempt:
            continue
        if row.policy is not None and facts.policy != row.policy:
            continue
        if row.governed_wait_elapsed and not facts.governed_wait_elapsed:
            continue
        if row.budget_spent and not facts.recovery_budget_spent:
            continue
        return row
    # Every class has a row above; reaching here means a class was added without one.
    raise ValueError(f"no decision row for failure class {facts.failure_class}")


def decide(facts: Facts) -> tuple[Verdict, DecisionReason]:
    row = decide_row(facts)
    return row.verdict, row.reason


_POLICIES: frozenset[str] = frozenset(get_args(CheckpointPolicy))


def effective_policy(raw: str | None) -> CheckpointPolicy:
    """The session record's policy; missing or unknown values fall back to the safe one."""
    return raw if raw in _POLICIES else SAFE_POLICY  # type: ignore[return-value]
