"""The recovery decision (contract 4.4) as data: rows, first match wins.

Each `Row` is one line of the contract's table, written as plain values so that it can be read
against the document line by line (tests/unit/test_decision_tables.py parses the document and
compares). `decide_row` is a pure function of the facts and the rows of a policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from shared.contract.decisions import Explanation
from shared.contract.limits import ATTEMPT_BUDGET
from shared.contract.types import CheckpointPolicy, ClassSource, DecisionReason, FailureClass

SAFE_POLICY: CheckpointPolicy = "same_session_only"
"""With no record, or a policy value this release does not know, nothing may be replaced."""

Verdict = Literal["reconcile", "operator", "retry_same_session", "continue_fresh", "archive"]
"""A runner action, or `archive`: archive first, then `open_replacement` (the archiver's). A
table's `continue_fresh` rejects the saved handle (`Row.rejects_session`): the runner's next
decide answers `fresh` with the full transcript."""

CLOSED_CLASSES: frozenset[FailureClass] = frozenset(get_args(FailureClass)) - {"unclassified"}
"""The classes read from a deterministic refusal or a pending side effect (contract 4.3)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What a recovery decision reads: the event's class and fields, the session's policy."""

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

    id: str
    """The row's stable id, recorded in every explanation (the contract's `row` column)."""
    classes: tuple[FailureClass, ...]
    verdict: Verdict
    reason: DecisionReason
    holds_session: bool
    """After this verdict the saved session is left exactly as it was and its state is `held`
    (the contract's column; `shared.records.decisions.holds_session` is the rule every service
    applies, and a unit test keeps the two alike)."""
    rejects_session: bool = False
    """After this verdict the saved handle is rejected, as by `continuity.sessions.reject`
    (contract 3.4): in the same step that records the decision, its state becomes `rejected`
    while the record still saves the failed handle and is neither held nor archived, so the
    next decide answers `fresh` with the full transcript (clause 3.3.1d). Set with
    `continue_fresh`, and only with it (the contract's sentence; a unit test keeps the two
    alike)."""
    or_pending_tool_call: bool = False
    min_attempt: int | None = None
    policy: CheckpointPolicy | None = None
    governed_wait_elapsed: bool = False
    budget_spent: bool = False


def decide_row(rows: tuple[Row, ...], facts: Facts) -> Row | None:
    """The first row that matches, None when none does (a loaded policy is total: see
    `shared.policy.invariants`); plain comparisons only, as this runs for every event."""
    failure_class = facts.failure_class
    for row in rows:
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
    return None


_POLICIES: frozenset[str] = frozenset(get_args(CheckpointPolicy))


def effective_policy(raw: str | None) -> CheckpointPolicy:
    """The session record's policy; missing or unknown values fall back to the safe one."""
    return raw if raw in _POLICIES else SAFE_POLICY  # type: ignore[return-value]


def explanation(row: Row, policy_version: str, facts: Facts, source: ClassSource) -> Explanation:
    """Why `row` decided: its id and every input it read (contract 9.11)."""
    return Explanation(
        rule=row.id,
        policy=policy_version,
        failure_class=facts.failure_class,
        class_source=source,
        pending_tool_call=facts.pending_tool_call,
        attempt=facts.attempt,
        budget=ATTEMPT_BUDGET,
        checkpoint_policy=facts.policy,
        governed_wait_elapsed=facts.governed_wait_elapsed,
        budget_spent=facts.recovery_budget_spent,
    )


def facts_of(explained: Explanation) -> Facts:
    """The inputs an explanation recorded, to decide them again (a replay)."""
    return Facts(
        failure_class=explained.failure_class,
        pending_tool_call=explained.pending_tool_call,
        attempt=explained.attempt,
        policy=explained.checkpoint_policy,
        governed_wait_elapsed=explained.governed_wait_elapsed,
        recovery_budget_spent=explained.budget_spent,
    )
