"""A policy: the recovery table and the resume rules under one version, and the shipped one.

The shipped policy is the contract's tables (4.4 and 3.3), row for row. An operator may load a
candidate from a file (`shared.policy.document`); every policy, the shipped one included, is
held against `shared.policy.invariants` before any service decides by it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.contract import limits
from shared.contract.decisions import Explanation
from shared.contract.types import ClassSource

from .recovery import Facts, Row, decide_row, explanation
from .resume import Rule

ATTEMPT_BUDGET = limits.ATTEMPT_BUDGET


@dataclass(frozen=True, slots=True)
class Policy:
    version: str
    """Recorded in every explanation: which policy made a decision."""
    recovery: tuple[Row, ...]
    """Contract 4.4: first matching row wins."""
    resume: tuple[Rule, ...]
    """Contract 3.3: first matching clause wins."""


SHIPPED_VERSION = "shipped-1"

RECOVERY: tuple[Row, ...] = (
    Row(
        "4.4.1",
        ("provider_side_effect_pending",),
        or_pending_tool_call=True,
        verdict="reconcile",
        reason="native_provider_side_effect_pending",
        holds_session=True,
    ),
    Row(
        "4.4.2",
        ("provider_attach_refused", "provider_state_incompatible"),
        verdict="operator",
        reason="native_provider_state_incompatible",
        holds_session=True,
    ),
    Row(
        "4.4.3",
        ("source_reconciliation_required",),
        verdict="operator",
        reason="native_runner_source_reconciliation_required",
        holds_session=True,
    ),
    Row(
        "4.4.4",
        ("event_replay_conflict",),
        verdict="operator",
        reason="native_event_replay_conflict",
        holds_session=True,
    ),
    Row(
        "4.4.5",
        ("unclassified", "session_busy"),
        budget_spent=True,
        verdict="operator",
        reason="tenant_recovery_budget_exhausted",
        holds_session=True,
    ),
    Row(
        "4.4.6",
        ("unclassified", "session_busy"),
        min_attempt=ATTEMPT_BUDGET,
        verdict="operator",
        reason="native_session_retry_exhausted",
        holds_session=True,
    ),
    Row(
        "4.4.7",
        ("unclassified",),
        policy="allow_replacement_after_resume_failure",
        verdict="archive",
        reason="native_session_continuity_break",
        holds_session=False,
    ),
    Row(
        "4.4.8",
        ("unclassified",),
        policy="allow_replacement_after_governed_wait",
        governed_wait_elapsed=True,
        verdict="archive",
        reason="native_session_continuity_break",
        holds_session=False,
    ),
    Row(
        "4.4.9",
        ("unclassified",),
        verdict="retry_same_session",
        reason="native_session_interrupted",
        holds_session=False,
    ),
    # The harness classes (4.3): read by a runner's harness adapter, signed by the runner.
    Row(
        "4.4.10",
        ("native_session_missing",),
        verdict="continue_fresh",
        reason="native_session_missing",
        holds_session=False,
        rejects_session=True,
    ),
    Row(
        "4.4.11",
        ("context_overflow",),
        verdict="operator",
        reason="native_context_overflow",
        holds_session=True,
    ),
    Row(
        "4.4.12",
        ("transcript_corrupt",),
        verdict="operator",
        reason="native_transcript_corrupt",
        holds_session=True,
    ),
    Row(
        "4.4.13",
        ("session_busy",),
        verdict="retry_same_session",
        reason="native_session_busy",
        holds_session=False,
    ),
)

RESUME: tuple[Rule, ...] = (
    Rule("3.3.1a", 1, "no_record", "no_session"),
    Rule("3.3.1b", 1, "state", "session_held", value="held"),
    Rule("3.3.1c", 1, "state", "session_archived", value="archived"),
    Rule("3.3.1d", 1, "state", "resume_target_rejected", value="rejected"),
    Rule("3.3.2a", 2, "differs", "model_changed", request_field="model", stored_field="model"),
    Rule("3.3.2b", 2, "differs", "cwd_changed", request_field="cwd", stored_field="cwd"),
    Rule("3.3.2c", 2, "stored_empty", "missing_cursor", stored_field="cursor"),
    Rule(
        "3.3.2d", 2, "differs", "conversation_advanced", request_field="latest_cursor", stored_field="cursor"
    ),
    Rule("3.3.3a", 3, "generation_missing", "compatibility_generation_missing", only_when="profile-ready"),
    Rule("3.3.3b", 3, "generation_changed", "compatibility_generation_changed", only_when="profile-ready"),
    Rule("3.3.4", 4, "otherwise", None),
)

SHIPPED = Policy(version=SHIPPED_VERSION, recovery=RECOVERY, resume=RESUME)
"""The contract's tables: what every service decides by unless configured otherwise."""


def decide_recovery(policy: Policy, facts: Facts, source: ClassSource) -> tuple[Row, Explanation]:
    """The policy's row for `facts`, and the explanation that records it with its inputs."""
    row = decide_row(policy.recovery, facts)
    if row is None:  # a loaded policy is total (its invariants were checked)
        raise ValueError(f"no row of policy {policy.version} for failure class {facts.failure_class}")
    return row, explanation(row, policy.version, facts, source)
