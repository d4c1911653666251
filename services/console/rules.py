"""Which rule made a decision, in words an operator reads on a run's page.

A decision carries its action, its reason and the failure class behind it; the rows below name
the row of the contract's decision table (section 4.4) those three match, or the section of the
contract that made it otherwise (an archive that failed, an operator's action). First match
wins, as in the table; `tests/unit/test_console_rules.py` checks every row of the classifier's
table has its line here."""

from __future__ import annotations

from shared.records.decisions import ATTEMPT_BUDGET

ANY = None
"""In the class column: whatever the failure class (or none)."""

# (action, reason, failure class or ANY, where the rule is written, what it says)
RULES: tuple[tuple[str, str, str | None, str, str], ...] = (
    (
        "reconcile",
        "native_provider_side_effect_pending",
        "provider_side_effect_pending",
        "contract 4.4, row 1",
        "the provider reported a side effect still pending: an operator records what it did",
    ),
    (
        "reconcile",
        "native_provider_side_effect_pending",
        ANY,
        "contract 4.4, row 1",
        "the event carried a pending tool call: an operator records what it did",
    ),
    (
        "operator",
        "native_provider_state_incompatible",
        "provider_attach_refused",
        "contract 4.4, row 2",
        "the provider refused to attach the saved session: stop for an operator",
    ),
    (
        "operator",
        "native_provider_state_incompatible",
        ANY,
        "contract 4.4, row 2",
        "the saved provider state is incompatible with this runner: stop for an operator",
    ),
    (
        "operator",
        "native_runner_source_reconciliation_required",
        ANY,
        "contract 4.4, row 3",
        "the runner's source needs reconciling first: stop for an operator",
    ),
    (
        "operator",
        "native_event_replay_conflict",
        ANY,
        "contract 4.4, row 4",
        "replaying the session's events conflicted: stop for an operator",
    ),
    (
        "operator",
        "tenant_recovery_budget_exhausted",
        ANY,
        "contract 4.4, row 5",
        "the tenant spent its retries and replacements of the window (the storm breaker): stop for "
        "an operator",
    ),
    (
        "operator",
        "native_session_retry_exhausted",
        "session_busy",
        "contract 4.4, row 6",
        f"another process still held the session at attempt {ATTEMPT_BUDGET}, the whole budget: stop "
        "for an operator",
    ),
    (
        "operator",
        "native_session_retry_exhausted",
        ANY,
        "contract 4.4, row 6",
        f"an unclassified failure at attempt {ATTEMPT_BUDGET}, the whole budget: stop for an operator",
    ),
    (
        "open_replacement",
        "native_session_continuity_break",
        ANY,
        "contract 4.4, rows 7 and 8",
        "an unclassified failure and a policy that allows replacing: archived, then a new session",
    ),
    (
        "retry_same_session",
        "native_session_interrupted",
        ANY,
        "contract 4.4, row 9",
        "an unclassified failure within the budget: retry the same session after a pause",
    ),
    (
        "continue_fresh",
        "native_session_missing",
        ANY,
        "contract 4.4, row 10",
        "the harness has no such session on the runner's host: its handle is rejected, continue in "
        "a fresh session with the whole transcript",
    ),
    (
        "operator",
        "native_context_overflow",
        ANY,
        "contract 4.4, row 11",
        "the session is too large for the harness to resume: stop for an operator",
    ),
    (
        "operator",
        "native_transcript_corrupt",
        ANY,
        "contract 4.4, row 12",
        "the session's transcript is broken (a tool call without its result, a torn line, an invalid "
        "signature): stop for an operator",
    ),
    (
        "retry_same_session",
        "native_session_busy",
        ANY,
        "contract 4.4, row 13",
        "another live process holds the session: retry the same session after a pause, never a second writer",
    ),
    (
        "operator",
        "runner_continuity_break_archive_failed",
        ANY,
        "contract 5",
        "archiving before a replacement failed and the attempt budget is spent: stop for an operator",
    ),
    (
        "retry_same_session",
        "runner_continuity_break_archive_failed",
        ANY,
        "contract 5",
        "archiving before a replacement failed: retry the same session",
    ),
    (
        "continue_fresh",
        "execution_reconciled",
        ANY,
        "contract 6",
        "an operator recorded what the pending tool call did: continue in a fresh session",
    ),
    (
        "continue_fresh",
        "operator_retry",
        ANY,
        "contract 6",
        "an operator retried the stopped run: continue in a fresh session",
    ),
)


def rule_of(action: str, reason: str, failure_class: str | None) -> str:
    """The rule behind a decision, e.g. "contract 4.4, row 4: replaying ... conflicted: ..."."""
    for rule_action, rule_reason, rule_class, where, says in RULES:
        if (action, reason) == (rule_action, rule_reason) and rule_class in (ANY, failure_class):
            return f"{where}: {says}"
    return "no rule of this console's release matches this decision"
