"""Judging a run's decisions by what followed them (shared/policy/outcomes.py, contract 4.6):
pure functions of an audit trail, checked case by case against the table in the module."""

from __future__ import annotations

import pytest

from shared.contract.decisions import Explanation
from shared.contract.reconciliation import AuditEntry
from shared.policy.outcomes import Tally, judge, quantile


def why(rule: str, failure_class: str = "unclassified", attempt: int = 1) -> Explanation:
    return Explanation(rule=rule, policy="shipped-1", failure_class=failure_class, attempt=attempt)  # type: ignore[arg-type]


def decided(attempt: int, action: str, rule: str | None = "4.4.9", kind: str = "decision") -> AuditEntry:
    return AuditEntry(
        at=f"2026-12-06T10:00:0{attempt}Z",
        kind=kind,
        actor="classifier",
        attempt=attempt,
        action=action,
        reason="r",
        explanation=why(rule, attempt=attempt) if rule else None,
    )


def outcome(attempt: int, status: str = "recovered", ms: int = 1500) -> AuditEntry:
    return AuditEntry(
        at="2026-12-06T10:01:00Z",
        kind="outcome",
        actor="classifier",
        attempt=attempt,
        status=status,
        recovery_ms=ms,
    )


def abandoned(attempt: int) -> AuditEntry:
    return AuditEntry(at="2026-12-06T11:00:00Z", kind="abandoned", actor="reconciliation", attempt=attempt)


def results(trail: list[AuditEntry]) -> list[tuple[int, str, str, str]]:
    return [(j.attempt, j.action, j.rule, j.result) for j in judge(trail)]


def test_a_retry_whose_turn_completed_is_recovered_with_its_time() -> None:
    (j,) = judge([decided(1, "retry_same_session"), outcome(1)])
    assert (j.result, j.recovery_ms, j.rule) == ("recovered", 1500, "4.4.9")


def test_a_retry_followed_by_another_failure_failed() -> None:
    trail = [decided(1, "retry_same_session"), decided(2, "retry_same_session"), outcome(2)]
    assert results(trail) == [
        (1, "retry_same_session", "4.4.9", "failed"),
        (2, "retry_same_session", "4.4.9", "recovered"),
    ]


def test_holding_decisions_are_held_even_when_an_operator_continues_them() -> None:
    trail = [
        decided(1, "operator", "4.4.2"),
        decided(1, "continue_fresh", None, kind="operator_resolve"),
        outcome(1, "recovered_fresh"),
    ]
    assert results(trail) == [
        (1, "operator", "4.4.2", "held"),
        (1, "continue_fresh", "operator", "recovered"),
    ]


def test_an_archive_takes_the_archivers_decision_and_keeps_its_row() -> None:
    archiver = decided(1, "open_replacement", None)
    (j,) = judge([decided(1, "archive", "4.4.7"), archiver, outcome(1, "recovered_replaced")])
    assert (j.action, j.rule, j.recorded_action, j.result) == (
        "open_replacement",
        "4.4.7",
        "archive",
        "recovered",
    )
    # Before the archiver decides, nothing has been put to the test.
    (waiting,) = judge([decided(1, "archive", "4.4.7")])
    assert waiting.result == "pending"


def test_abandoned_pending_and_a_late_turn() -> None:
    assert results([decided(1, "retry_same_session"), abandoned(1)])[0][3] == "abandoned"
    assert results([decided(1, "retry_same_session")])[0][3] == "pending"
    assert results([decided(1, "retry_same_session"), abandoned(1), outcome(1)])[0][3] == "recovered"


def test_a_tally_counts_rates_times_and_points() -> None:
    tally = Tally(bucket_s=3600)
    trails = [
        [decided(1, "retry_same_session"), outcome(1, ms=1000)],
        [decided(1, "retry_same_session"), outcome(1, ms=3000)],
        [decided(1, "retry_same_session"), decided(2, "operator", "4.4.6")],
        [decided(1, "retry_same_session"), abandoned(1)],
    ]
    for trail in trails:
        for item in judge(trail):
            tally.count(item, "codex", "0.171.0", 7200.0)
    group = tally.groups[("4.4.9", "retry_same_session", "unclassified", "codex", "0.171.0")]
    assert group.counts == {"recovered": 2, "failed": 1, "abandoned": 1, "held": 0, "pending": 0}
    assert group.success_rate == pytest.approx(0.5)
    assert sorted(group.recovery_ms) == [1000, 3000] and group.attempts == [1, 1]
    assert tally.series["4.4.9"] == {2: [2, 4]}
    assert tally.groups[("4.4.6", "operator", "unclassified", "codex", "0.171.0")].success_rate is None


def test_quantile_is_the_nearest_rank() -> None:
    assert quantile([], 0.5) is None
    assert quantile([5, 1, 3], 0.5) == 3.0
    assert quantile(list(range(1, 101)), 0.95) == 95.0
