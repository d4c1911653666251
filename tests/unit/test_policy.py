"""Policies as data: the shipped one holds every invariant and round-trips through its file; a
policy that breaks an invariant is refused naming it; a replay of recorded decisions under the
policy that made them finds no change, and a candidate changing one row reports exactly its runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.contract.decisions import Explanation
from shared.policy import INVARIANTS, SHIPPED, PolicyRefused, dump, load
from shared.policy.invariants import recovery_facts
from shared.policy.recovery import Facts, decide_row, explanation
from shared.policy.replay import Recorded, ordered, replay


def shipped_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(dump(SHIPPED))
    return doc


def loaded(doc: dict[str, Any]) -> Any:
    return load(json.dumps(doc).encode())


def test_the_shipped_policy_round_trips_through_its_file() -> None:
    assert load(dump(SHIPPED)) == SHIPPED


def test_a_candidate_may_leave_out_a_table_which_stays_shipped() -> None:
    policy = loaded({"version": "only-a-version"})
    assert (policy.version, policy.recovery, policy.resume) == (
        "only-a-version",
        SHIPPED.recovery,
        SHIPPED.resume,
    )


def row(doc: dict[str, Any], row_id: str) -> dict[str, Any]:
    return next(r for r in doc["recovery"] + doc["resume"] if r["id"] == row_id)


def broken(change: str) -> dict[str, Any]:
    """The shipped policy with one planted violation of an invariant."""
    doc = shipped_doc()
    doc["version"] = f"broken-{change}"
    if change == "closed_refusal_replaced":
        row(doc, "4.4.2").update(action="archive", reason="native_session_continuity_break")
    elif change == "pending_retried":
        row(doc, "4.4.1").update(action="retry_same_session", reason="native_session_interrupted")
    elif change == "pending_row_after_retry":
        # Moving the pending row below the catch-all lets a pending tool call of an
        # unclassified event reach a retry.
        first = doc["recovery"].pop(0)
        doc["recovery"].append(first)
    elif change == "generation_changed_resumes":
        row(doc, "3.3.3b")["reason"] = None
    elif change == "generation_missing_dropped":
        doc["resume"] = [c for c in doc["resume"] if c["id"] != "3.3.3a"]
    elif change == "held_resumes":
        doc["resume"] = [c for c in doc["resume"] if c["id"] != "3.3.1b"]
    elif change == "no_catch_all":
        doc["recovery"] = [r for r in doc["recovery"] if r["id"] != "4.4.9"]
    elif change == "missing_session_retried":
        row(doc, "4.4.10").update(action="retry_same_session", reason="native_session_interrupted")
    elif change == "missing_session_replaced":
        row(doc, "4.4.10").update(action="archive", reason="native_session_continuity_break")
    elif change == "missing_session_as_unclassified":
        # Left out of its own row, the class falls to no row at all: the table is not total.
        doc["recovery"] = [r for r in doc["recovery"] if r["id"] != "4.4.10"]
    elif change == "overflow_retried":
        row(doc, "4.4.11").update(action="retry_same_session", reason="native_session_interrupted")
    elif change == "overflow_replaced":
        # Listed with the unclassified rows: replaced by the full transcript under a permissive policy.
        row(doc, "4.4.7")["classes"].append("context_overflow")
    elif change == "corrupt_continued_fresh":
        row(doc, "4.4.12").update(action="continue_fresh", reason="native_session_missing")
    elif change == "corrupt_retried":
        row(doc, "4.4.12").update(action="retry_same_session", reason="native_session_interrupted")
    elif change == "busy_continued_fresh":
        row(doc, "4.4.13").update(action="continue_fresh", reason="native_session_missing")
    elif change == "busy_replaced":
        row(doc, "4.4.8")["classes"].append("session_busy")
    elif change == "pending_continued_fresh":
        row(doc, "4.4.1").update(action="continue_fresh", reason="native_session_missing")
    return doc


@pytest.mark.parametrize(
    ("change", "invariant"),
    [
        ("closed_refusal_replaced", "closed_refusal_never_replaced"),
        ("pending_retried", "pending_side_effect_never_retried"),
        ("pending_row_after_retry", "pending_side_effect_never_retried"),
        ("generation_changed_resumes", "no_resume_across_generation"),
        ("generation_missing_dropped", "no_resume_across_generation"),
        ("held_resumes", "only_an_active_record_resumes"),
        ("no_catch_all", "total"),
        ("missing_session_retried", "missing_session_never_retried"),
        ("missing_session_replaced", "missing_session_never_retried"),
        ("missing_session_as_unclassified", "total"),
        ("overflow_retried", "overflow_never_resumed_whole"),
        ("overflow_replaced", "overflow_never_resumed_whole"),
        ("corrupt_continued_fresh", "corrupt_transcript_never_replaced_silently"),
        ("corrupt_retried", "corrupt_transcript_never_replaced_silently"),
        ("busy_continued_fresh", "busy_session_one_writer"),
        ("busy_replaced", "busy_session_one_writer"),
        ("pending_continued_fresh", "pending_side_effect_never_retried"),
    ],
)
def test_a_policy_breaking_an_invariant_is_refused_naming_it(change: str, invariant: str) -> None:
    with pytest.raises(PolicyRefused) as refused:
        loaded(broken(change))
    assert refused.value.invariant == invariant
    assert str(refused.value).startswith(f"{invariant}: ")


def test_every_invariant_has_a_planted_violation_above() -> None:
    planted = {
        "closed_refusal_never_replaced",
        "pending_side_effect_never_retried",
        "no_resume_across_generation",
        "only_an_active_record_resumes",
        "total",
        "missing_session_never_retried",
        "overflow_never_resumed_whole",
        "corrupt_transcript_never_replaced_silently",
        "busy_session_one_writer",
    }
    assert {i.name for i in INVARIANTS} == planted


def test_every_invariant_is_named_in_the_contract_and_the_policy_reference() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    contract = " ".join((docs / "contract-v1.md").read_text().split())
    reference = (docs / "policies.md").read_text()
    for invariant in INVARIANTS:
        assert f"`{invariant.name}`" in contract, invariant.name
        assert f"| `{invariant.name}` | " in reference, invariant.name


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (b"not json", "format: "),
        (
            b'{"version": "v", "recovery": [{"id": "x", "classes": ["nope"], "action": "operator", '
            b'"reason": "native_event_replay_conflict"}]}',
            "format: ",
        ),
        (b'{"version": "v", "extra": 1}', "format: "),
        (b'{"version": "<script>"}', "format: "),
        (
            b'{"version": "v", "resume": [{"id": "a", "rule": 2, "check": "differs", "field": "adapter", '
            b'"reason": "model_changed"}]}',
            "`differs` compares one of",
        ),
        (b" " * (64 * 1024 + 1), "at most 65536 bytes"),
    ],
)
def test_a_file_that_is_not_a_policy_is_refused_without_echoing_it(text: bytes, fragment: str) -> None:
    with pytest.raises(PolicyRefused) as refused:
        load(text)
    assert refused.value.invariant == "format" and fragment in str(refused.value)
    assert "<script>" not in str(refused.value)


def test_a_candidate_retrying_a_missing_session_names_the_row_and_the_fact() -> None:
    doc = shipped_doc()
    row(doc, "4.4.10").update(action="retry_same_session", reason="native_session_interrupted")
    with pytest.raises(PolicyRefused) as refused:
        loaded(doc)
    assert refused.value.invariant == "missing_session_never_retried"
    assert "row 4.4.10 decides retry_same_session" in str(refused.value)
    assert "failure_class=native_session_missing" in str(refused.value)


def test_the_shipped_harness_rows_decide_as_the_contract_says() -> None:
    def decided(failure_class: Any, **facts: Any) -> tuple[str, str, str, bool]:
        given = Facts(
            failure_class,
            facts.get("pending", False),
            facts.get("attempt", 1),
            facts.get("policy", "allow_replacement_after_resume_failure"),
            True,
            facts.get("spent", False),
        )
        found = decide_row(SHIPPED.recovery, given)
        assert found is not None
        return found.id, found.verdict, found.reason, found.rejects_session

    assert decided("native_session_missing") == ("4.4.10", "continue_fresh", "native_session_missing", True)
    assert decided("native_session_missing", attempt=3)[0] == "4.4.10"
    assert decided("context_overflow") == ("4.4.11", "operator", "native_context_overflow", False)
    assert decided("transcript_corrupt") == ("4.4.12", "operator", "native_transcript_corrupt", False)
    assert decided("transcript_corrupt", pending=True)[:3] == (
        "4.4.1",
        "reconcile",
        "native_provider_side_effect_pending",
    )
    assert decided("session_busy") == ("4.4.13", "retry_same_session", "native_session_busy", False)
    assert decided("session_busy", attempt=2)[0] == "4.4.13"
    assert decided("session_busy", attempt=3)[:3] == ("4.4.6", "operator", "native_session_retry_exhausted")
    assert decided("session_busy", spent=True)[:3] == (
        "4.4.5",
        "operator",
        "tenant_recovery_budget_exhausted",
    )


def test_a_continue_fresh_row_of_a_file_rejects_the_saved_handle_and_no_other_does() -> None:
    policy = load(dump(SHIPPED))
    assert [r.id for r in policy.recovery if r.rejects_session] == ["4.4.10"]
    assert all(r.rejects_session == (r.verdict == "continue_fresh") for r in policy.recovery)
    assert b'"action": "continue_fresh"' in dump(SHIPPED)
    # The flag follows from the action: a file cannot set it.
    doc = shipped_doc()
    row(doc, "4.4.10")["rejects_session"] = False
    with pytest.raises(PolicyRefused) as refused:
        loaded(doc)
    assert refused.value.invariant == "format"


def test_duplicate_row_ids_are_refused() -> None:
    doc = shipped_doc()
    doc["recovery"][1]["id"] = "4.4.1"
    with pytest.raises(PolicyRefused, match=r"the id 4\.4\.1 names two rows"):
        loaded(doc)


# ---- replay ---------------------------------------------------------------------------------


def recorded_under(policy: Any) -> list[Recorded]:
    """Every fact the table reads, decided and explained by `policy`: a recorded history."""
    history = []
    for n, facts in enumerate(recovery_facts(policy.recovery)):
        decided = decide_row(policy.recovery, facts)
        assert decided is not None
        source = "none" if facts.failure_class == "unclassified" else "error_code"
        why: Explanation = explanation(decided, policy.version, facts, source)
        history.append(Recorded(f"run-{n}", decided.verdict, decided.reason, why))
    return history


def test_replaying_the_policy_that_decided_finds_no_change() -> None:
    history = recorded_under(SHIPPED)
    outcome = replay(history, SHIPPED)
    assert (outcome.replayed, outcome.unchanged, outcome.changes) == (len(history), len(history), {})


def test_a_candidate_changing_one_row_reports_exactly_the_runs_of_that_row() -> None:
    history = recorded_under(SHIPPED)
    doc = shipped_doc()
    doc["version"] = "candidate-1"
    row(doc, "4.4.9").update(action="operator", reason="native_session_retry_exhausted")
    outcome = replay(history, loaded(doc), examples=100_000)
    changes = ordered(outcome)
    assert len(changes) == 1
    change = changes[0]
    expected = {r.run_id for r in history if r.explanation.rule == "4.4.9"}
    assert set(change.runs) == expected and change.count == len(expected) > 0
    assert (change.action, change.reason, change.rule) == (
        "retry_same_session",
        "native_session_interrupted",
        "4.4.9",
    )
    assert (change.candidate_action, change.candidate_reason, change.candidate_rule) == (
        "operator",
        "native_session_retry_exhausted",
        "4.4.9",
    )
    assert outcome.unchanged == len(history) - len(expected)


def test_a_replay_names_at_most_the_examples_asked_for() -> None:
    doc = shipped_doc()
    row(doc, "4.4.9").update(action="operator", reason="native_session_retry_exhausted")
    outcome = replay(recorded_under(SHIPPED), loaded(doc), examples=3)
    (change,) = ordered(outcome)
    assert len(change.runs) == 3 and change.count > 3
