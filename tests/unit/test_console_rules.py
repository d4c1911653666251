"""The console's words for the rule behind a decision: one line for every row of the decision
table (contract 4.4, as the classifier holds it), and for the decisions made outside it."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from services.console.rules import RULES, rule_of
from shared.contract.types import DecisionReason, FailureClass
from shared.policy import policy as shipped
from shared.policy import recovery as table

CLASSES: tuple[str, ...] = get_args(FailureClass)


@pytest.mark.parametrize(("number", "row"), list(enumerate(shipped.RECOVERY, start=1)))
def test_every_row_of_the_decision_table_is_named_with_its_number(number: int, row: table.Row) -> None:
    action = "open_replacement" if row.verdict == "archive" else row.verdict
    # A pending tool call matches row 1 whatever the class the event's error gave.
    classes = CLASSES if row.or_pending_tool_call else row.classes
    for failure_class in classes:
        rule = rule_of(action, row.reason, failure_class)
        where = rule.split(":", 1)[0]
        assert where.startswith("contract 4.4, row") and re.search(rf"\b{number}\b", where), (
            rule,
            failure_class,
        )


def test_the_class_tells_the_rows_own_cases_apart() -> None:
    refused = rule_of("operator", "native_provider_state_incompatible", "provider_attach_refused")
    incompatible = rule_of("operator", "native_provider_state_incompatible", "provider_state_incompatible")
    assert "refused to attach" in refused and "incompatible" in incompatible and refused != incompatible
    pending = rule_of("reconcile", "native_provider_side_effect_pending", "provider_side_effect_pending")
    tool_call = rule_of("reconcile", "native_provider_side_effect_pending", "unclassified")
    assert "side effect" in pending and "pending tool call" in tool_call
    busy = rule_of("operator", "native_session_retry_exhausted", "session_busy")
    exhausted = rule_of("operator", "native_session_retry_exhausted", "unclassified")
    assert busy.startswith("contract 4.4, row 6:") and exhausted.startswith("contract 4.4, row 6:")
    assert "another process" in busy and "unclassified" in exhausted


def test_every_reason_has_a_rule_and_an_unknown_decision_says_so() -> None:
    assert {reason for _, reason, *_ in RULES} == set(get_args(DecisionReason))
    assert rule_of("operator", "runner_continuity_break_archive_failed", None).startswith("contract 5:")
    assert rule_of("continue_fresh", "operator_retry", None).startswith("contract 6:")
    assert rule_of("operator", "native_session_interrupted", "unclassified").startswith("no rule")
