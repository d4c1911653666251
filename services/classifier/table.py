"""The decision table (contract 4.4): first matching row wins.

Each row below is one line of the contract's table, in the same order. `decide` is a pure
function of the facts; recording and publishing are the handler's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from shared.contracts.types import CheckpointPolicy, DecisionReason, FailureClass

ATTEMPT_BUDGET = 3
"""Bootstrap retries, exact resumes and replacements of one run share this many tries (4.1)."""

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

    @property
    def unclassified(self) -> bool:
        return self.failure_class == "unclassified"


@dataclass(frozen=True, slots=True)
class Row:
    when: Callable[[Facts], bool]
    verdict: Verdict
    reason: DecisionReason


TABLE: tuple[Row, ...] = (
    Row(
        lambda f: f.failure_class == "provider_side_effect_pending" or f.pending_tool_call,
        "reconcile",
        "native_provider_side_effect_pending",
    ),
    Row(
        lambda f: f.failure_class in ("provider_attach_refused", "provider_state_incompatible"),
        "operator",
        "native_provider_state_incompatible",
    ),
    Row(
        lambda f: f.failure_class == "source_reconciliation_required",
        "operator",
        "native_runner_source_reconciliation_required",
    ),
    Row(
        lambda f: f.failure_class == "event_replay_conflict",
        "operator",
        "native_event_replay_conflict",
    ),
    Row(
        lambda f: f.unclassified and f.attempt >= ATTEMPT_BUDGET,
        "operator",
        "native_session_retry_exhausted",
    ),
    Row(
        lambda f: f.unclassified and f.policy == "allow_replacement_after_resume_failure",
        "archive",
        "native_session_continuity_break",
    ),
    Row(
        lambda f: (
            f.unclassified and f.policy == "allow_replacement_after_governed_wait" and f.governed_wait_elapsed
        ),
        "archive",
        "native_session_continuity_break",
    ),
    Row(
        lambda f: f.unclassified,
        "retry_same_session",
        "native_session_interrupted",
    ),
)


def decide(facts: Facts) -> tuple[Verdict, DecisionReason]:
    for row in TABLE:
        if row.when(facts):
            return row.verdict, row.reason
    # Every class has a row above; reaching here means a class was added without one.
    raise ValueError(f"no decision row for failure class {facts.failure_class}")


def effective_policy(raw: str | None) -> CheckpointPolicy:
    """The session record's policy; missing or unknown values fall back to the safe one."""
    for policy in get_args(CheckpointPolicy):
        if raw == policy:
            return policy  # type: ignore[no-any-return]
    return SAFE_POLICY


def retry_delay_s(base_s: float, attempt: int) -> float:
    """Backoff of `retry_same_session`: the base, doubled for every earlier attempt."""
    return base_s * 2.0 ** (attempt - 1)
