"""The classifier's pure rules: closed failure classes (contract 4.3) and the decision table (4.4)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import get_args

import pytest

from services.classifier.classify import Evidence, TypedError, classify
from shared.contract.events import ErrorInfo
from shared.contract.types import CheckpointPolicy, FailureClass
from shared.policy import SHIPPED
from shared.policy import recovery as table
from shared.records import decisions

POLICIES: tuple[CheckpointPolicy, ...] = get_args(CheckpointPolicy)
CLASSES: tuple[FailureClass, ...] = get_args(FailureClass)
CLOSED: tuple[FailureClass, ...] = tuple(c for c in CLASSES if c != "unclassified")
HARNESS: tuple[FailureClass, ...] = (
    "native_session_missing",
    "context_overflow",
    "transcript_corrupt",
    "session_busy",
)
"""The classes a runner's harness adapter reads from its harness and the runner signs."""


def class_of(evidence: Evidence) -> FailureClass:
    return classify(evidence)[0]


def decide(given: table.Facts) -> tuple[str, str]:
    row = table.decide_row(SHIPPED.recovery, given)
    assert row is not None
    return row.verdict, row.reason


def by_result(classification: str | None) -> Evidence:
    return Evidence(authenticated_classification=classification, error=None)


def by_code(code: str, message: str = "") -> Evidence:
    error = ErrorInfo(type="NativeRunnerError", code=code, message=message)
    return Evidence(authenticated_classification=None, error=TypedError.of(error))


# ---- 4.3 closed failure classes ----------------------------------------------------------


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        (by_result("provider_attach_refused"), "provider_attach_refused"),
        (by_result("provider_side_effect_pending"), "provider_side_effect_pending"),
        (by_code("native_runner_source_semantic_reconciliation_required"), "source_reconciliation_required"),
        (by_code("native_runner_source_git_reconciliation_required"), "source_reconciliation_required"),
        (by_code("native_runner_source_a.b:c-9_reconciliation_required"), "source_reconciliation_required"),
        (by_code("runner_remote_provider_artifact_incompatible"), "provider_state_incompatible"),
        (by_code("native_event_replay_conflict"), "event_replay_conflict"),
        (by_result("native_session_missing"), "native_session_missing"),
        (by_result("context_overflow"), "context_overflow"),
        (by_result("transcript_corrupt"), "transcript_corrupt"),
        (by_result("session_busy"), "session_busy"),
        (by_result(None), "unclassified"),
        (by_result("transport_closed"), "unclassified"),
        (by_code("runner_transport_closed"), "unclassified"),
        (Evidence(authenticated_classification=None, error=None), "unclassified"),
    ],
)
def test_each_row_of_the_class_table(evidence: Evidence, expected: FailureClass) -> None:
    assert class_of(evidence) == expected


def test_each_value_counts_only_from_its_own_source() -> None:
    # A command-result value sent as an error code, or the reverse, is not a class.
    assert class_of(by_code("provider_attach_refused")) == "unclassified"
    assert class_of(by_code("provider_side_effect_pending")) == "unclassified"
    assert class_of(by_result("native_event_replay_conflict")) == "unclassified"
    assert class_of(by_result("native_runner_source_semantic_reconciliation_required")) == "unclassified"
    # The harness classes have no error code: only the signed command result carries them.
    for failure_class in HARNESS:
        assert class_of(by_code(failure_class)) == "unclassified", failure_class
        assert class_of(by_result(failure_class.upper())) == "unclassified", failure_class
        assert class_of(by_result(f"{failure_class} ")) == "unclassified", failure_class
    for reason in ("native_session_missing", "native_context_overflow", "native_transcript_corrupt"):
        assert class_of(by_code(reason)) == "unclassified", reason
    assert class_of(by_result("native_context_overflow")) == "unclassified"


def test_codes_match_exactly() -> None:
    assert class_of(by_code("NATIVE_EVENT_REPLAY_CONFLICT")) == "unclassified"
    assert class_of(by_code("native_event_replay_conflict ")) == "unclassified"
    assert class_of(by_code("x_native_runner_source_semantic_reconciliation_required")) == "unclassified"
    assert class_of(by_code("native_runner_source_semantic_reconciliation_required_x")) == "unclassified"


def test_the_same_words_in_a_message_without_the_type_stay_unclassified() -> None:
    for words in (
        "native_runner_source_semantic_reconciliation_required",
        "runner_remote_provider_artifact_incompatible",
        "native_event_replay_conflict",
        "provider_attach_refused: run.attach cannot change protected launch arguments",
        "provider_side_effect_pending",
        "native_session_missing",
        "No conversation found with session ID: native_session_missing",
        "context_overflow: prompt is too long",
        "transcript_corrupt",
        "session_busy: another process holds the session",
    ):
        assert class_of(by_code("runner_error", message=words)) == "unclassified"


def test_the_classifier_holds_no_error_message() -> None:
    typed = TypedError.of(ErrorInfo(type="Error", code="runner_error", message="secret text"))
    assert typed is not None
    assert {f.name for f in dataclasses.fields(TypedError)} == {"type", "code"}
    assert "secret text" not in repr(typed)
    with pytest.raises(AttributeError):
        typed.message  # type: ignore[attr-defined]  # noqa: B018


def test_the_authenticated_classification_comes_before_the_error_code() -> None:
    error = TypedError(type="NativeRunnerError", code="native_event_replay_conflict")
    both = Evidence(authenticated_classification="provider_attach_refused", error=error)
    assert class_of(both) == "provider_attach_refused"
    unknown_result = Evidence(authenticated_classification="something_else", error=error)
    assert class_of(unknown_result) == "event_replay_conflict"


# ---- 4.4 decision table ------------------------------------------------------------------


def facts(
    failure_class: FailureClass = "unclassified",
    *,
    pending: bool = False,
    attempt: int = 1,
    policy: CheckpointPolicy = "same_session_only",
    governed: bool = False,
) -> table.Facts:
    return table.Facts(
        failure_class=failure_class,
        pending_tool_call=pending,
        attempt=attempt,
        policy=policy,
        governed_wait_elapsed=governed,
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # row 1
        (facts("provider_side_effect_pending"), ("reconcile", "native_provider_side_effect_pending")),
        (facts(pending=True), ("reconcile", "native_provider_side_effect_pending")),
        (
            facts("provider_attach_refused", pending=True),
            ("reconcile", "native_provider_side_effect_pending"),
        ),
        # row 2
        (facts("provider_attach_refused"), ("operator", "native_provider_state_incompatible")),
        (facts("provider_state_incompatible"), ("operator", "native_provider_state_incompatible")),
        # row 3
        (
            facts("source_reconciliation_required"),
            ("operator", "native_runner_source_reconciliation_required"),
        ),
        # row 4
        (facts("event_replay_conflict"), ("operator", "native_event_replay_conflict")),
        # row 5
        (facts(attempt=3), ("operator", "native_session_retry_exhausted")),
        (
            facts(attempt=4, policy="allow_replacement_after_resume_failure"),
            ("operator", "native_session_retry_exhausted"),
        ),
        (
            facts(attempt=3, policy="allow_replacement_after_governed_wait", governed=True),
            ("operator", "native_session_retry_exhausted"),
        ),
        # row 6
        (
            facts(policy="allow_replacement_after_resume_failure"),
            ("archive", "native_session_continuity_break"),
        ),
        (
            facts(attempt=2, policy="allow_replacement_after_resume_failure"),
            ("archive", "native_session_continuity_break"),
        ),
        # row 7, both ways
        (
            facts(policy="allow_replacement_after_governed_wait", governed=True),
            ("archive", "native_session_continuity_break"),
        ),
        (
            facts(policy="allow_replacement_after_governed_wait", governed=False),
            ("retry_same_session", "native_session_interrupted"),
        ),
        # row 8
        (facts(), ("retry_same_session", "native_session_interrupted")),
        (facts(attempt=2, governed=True), ("retry_same_session", "native_session_interrupted")),
        # 4.4.10: a session the harness does not have continues fresh, whatever the attempt or policy
        (facts("native_session_missing"), ("continue_fresh", "native_session_missing")),
        (
            facts("native_session_missing", attempt=3, policy="allow_replacement_after_resume_failure"),
            ("continue_fresh", "native_session_missing"),
        ),
        # 4.4.11 and 4.4.12: stop for an operator, never retried or replaced
        (
            facts("context_overflow", policy="allow_replacement_after_resume_failure"),
            ("operator", "native_context_overflow"),
        ),
        (
            facts("transcript_corrupt", policy="allow_replacement_after_governed_wait", governed=True),
            ("operator", "native_transcript_corrupt"),
        ),
        (facts("transcript_corrupt", pending=True), ("reconcile", "native_provider_side_effect_pending")),
        # 4.4.13: a busy session is retried within the budget, never replaced; then 4.4.6
        (facts("session_busy"), ("retry_same_session", "native_session_busy")),
        (
            facts("session_busy", attempt=2, policy="allow_replacement_after_resume_failure"),
            ("retry_same_session", "native_session_busy"),
        ),
        (facts("session_busy", attempt=3), ("operator", "native_session_retry_exhausted")),
    ],
)
def test_each_row_of_the_decision_table(given: table.Facts, expected: tuple[str, str]) -> None:
    assert decide(given) == expected


def test_a_closed_class_never_reaches_replacement_whatever_the_policy() -> None:
    # The refusals stop for a person; a missing session continues fresh (its handle rejected) and
    # a busy one is retried as it is: none is ever archived and replaced.
    allowed = {"native_session_missing": {"continue_fresh"}, "session_busy": {"retry_same_session"}}
    for failure_class, policy, governed, pending, attempt in itertools.product(
        CLOSED, POLICIES, (False, True), (False, True), (1, 2, 3, 4)
    ):
        given = facts(failure_class, pending=pending, attempt=attempt, policy=policy, governed=governed)
        verdict, _ = decide(given)
        assert verdict in {"operator", "reconcile", *allowed.get(failure_class, ())}, given


def test_a_pending_tool_call_always_reconciles() -> None:
    for failure_class, policy, governed, attempt in itertools.product(
        CLASSES, POLICIES, (False, True), (1, 2, 3, 4)
    ):
        given = facts(failure_class, pending=True, attempt=attempt, policy=policy, governed=governed)
        assert decide(given) == ("reconcile", "native_provider_side_effect_pending"), given


def test_every_class_and_condition_has_a_row() -> None:
    for failure_class, policy, governed, pending, attempt in itertools.product(
        CLASSES, POLICIES, (False, True), (False, True), (1, 2, 3, 7)
    ):
        decide(facts(failure_class, pending=pending, attempt=attempt, policy=policy, governed=governed))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "same_session_only"),
        ("", "same_session_only"),
        ("same_session_only", "same_session_only"),
        ("allow_replacement_after_resume_failure", "allow_replacement_after_resume_failure"),
        ("allow_replacement_after_governed_wait", "allow_replacement_after_governed_wait"),
        ("allow_replacement_always", "same_session_only"),
        ("ALLOW_REPLACEMENT_AFTER_RESUME_FAILURE", "same_session_only"),
    ],
)
def test_missing_or_unknown_policy_is_the_safe_one(raw: str | None, expected: CheckpointPolicy) -> None:
    assert table.effective_policy(raw) == expected


def test_retry_backoff_doubles_per_attempt() -> None:
    assert [decisions.retry_delay_s(5.0, attempt) for attempt in (1, 2, 3)] == [5.0, 10.0, 20.0]
    assert decisions.retry_delay_s(0.5, 1) == 0.5


def test_archive_id_stays_a_token_for_the_longest_run_id() -> None:
    import re

    from shared.contract.types import TOKEN_PATTERN
    from shared.records.names import archive_id

    assert archive_id("run-1", 2) == "run-1-2"
    longest = "r" * 128
    ids = {archive_id(longest, attempt) for attempt in (1, 2, 3)}
    assert len(ids) == 3 and all(re.search(TOKEN_PATTERN, i) for i in ids)
    assert archive_id(longest, 1) != archive_id("r" * 127 + "s", 1)


def test_the_source_of_each_class_is_the_field_it_was_read_from() -> None:
    assert classify(by_result("provider_attach_refused")) == ("provider_attach_refused", "command_result")
    assert classify(by_code("native_event_replay_conflict")) == ("event_replay_conflict", "error_code")
    assert classify(by_code("runner_transport_closed")) == ("unclassified", "none")
    for failure_class in HARNESS:
        assert classify(by_result(failure_class)) == (failure_class, "command_result")
