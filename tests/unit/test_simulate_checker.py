"""The simulator's checker on hand-made decision and refusal sequences that contradict the
contract."""

from __future__ import annotations

import math

import msgspec
import pytest
from continuity_runner import HarnessInfo, Refusal
from continuity_runner.types import RefusalCode

from continuity.tools.simulate.checker import Checker, Sent
from continuity.tools.simulate.outcomes import ServerRow, Truth, compare, row_key
from continuity.tools.simulate.scenarios import SCENARIOS, Facts, parse_mix
from continuity.tools.simulate.wire import ArchiveAnswer, archive_answer
from shared.contract import ArchiveCommand, Decision, SessionRef
from shared.contract.decisions import RunOutcome
from shared.contract.redaction import bounded_detail
from shared.contract.types import Action, CheckpointPolicy, DecisionReason

PREFIX = "simtest"
SESSION = SessionRef(tenant="sim", conversation_id="c1", agent_id="codex")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def checker(clock: Clock | None = None) -> Checker:
    return Checker(PREFIX, deadline_s=10, archive_timeout_s=5, clock=clock or Clock())


def sent(
    scenario: str,
    *,
    run_id: str = f"{PREFIX}-r1",
    attempt: int = 1,
    policy: CheckpointPolicy = "allow_replacement_after_resume_failure",
    governed: bool = False,
    pending: bool = False,
    epoch: int = 0,
) -> Sent:
    cls = SCENARIOS[scenario].failure_class
    facts = None if cls is None else Facts(cls, pending, attempt, policy, governed)
    return Sent(scenario, "sim-r01", run_id, attempt, SESSION, "ns-1", epoch, facts, (run_id.encode(),))


def decision(
    action: Action,
    reason: DecisionReason,
    *,
    run_id: str = f"{PREFIX}-r1",
    attempt: int = 1,
    epoch: int | None = None,
    detail: str | None = None,
    not_before: str | None = "2026-11-30T12:00:00.000Z",
    failure_class: str | None = None,
    outcome: str | None = None,
) -> Decision:
    return Decision(
        decision_id=f"{run_id}:{attempt}:{action}",
        runner_id="sim-r01",
        run_id=run_id,
        attempt=attempt,
        session=SESSION,
        action=action,
        reason=reason,
        failure_class=failure_class,  # type: ignore[arg-type]
        epoch=epoch,
        not_before=not_before if action == "retry_same_session" else None,
        detail=detail,
        reconciled_outcome=outcome,  # type: ignore[arg-type]
        decided_at="2026-11-30T12:00:00.000Z",
    )


def texts(c: Checker) -> str:
    return "\n".join(x.text for x in c.contradictions)


def archive(c: Checker, answer: ArchiveAnswer, run_id: str = f"{PREFIX}-r1", archive_id: str = "a-1") -> None:
    command = ArchiveCommand(archive_id=archive_id, run_id=run_id, session=SESSION, native_session_id="ns-1")
    state = c.archive_requested("sim-r01", command)
    assert state is not None, texts(c)
    c.archive_answered(state, answer)


def test_a_sequence_that_keeps_the_contract_has_no_contradiction() -> None:
    c = checker()
    c.sent(sent("refusal"))
    c.decision("sim-r01", decision("operator", "native_provider_state_incompatible"))
    c.operator_acting(f"{PREFIX}-r1", 1, "retry", None)
    c.decision("sim-r01", decision("continue_fresh", "operator_retry"))
    c.decision("sim-r01", decision("continue_fresh", "operator_retry"))  # redelivered: harmless
    c.sent(sent("drop", run_id=f"{PREFIX}-r2"))
    archive(c, ArchiveAnswer(0, "moved", ()), run_id=f"{PREFIX}-r2")
    c.decision(
        "sim-r01",
        decision("open_replacement", "native_session_continuity_break", run_id=f"{PREFIX}-r2", epoch=1),
    )
    assert c.contradictions == []
    assert c.outstanding() == 0
    assert c.redelivered == 1


def test_an_attach_refusal_must_never_get_open_replacement() -> None:
    c = checker()
    c.sent(sent("refusal"))
    c.decision("sim-r01", decision("open_replacement", "native_session_continuity_break", epoch=1))
    assert "a closed class must never reach replacement" in texts(c)


def test_a_closed_class_must_never_be_archived() -> None:
    c = checker()
    c.sent(sent("source"))
    command = ArchiveCommand(
        archive_id="a-1", run_id=f"{PREFIX}-r1", session=SESSION, native_session_id="ns-1"
    )
    assert c.archive_requested("sim-r01", command) is None
    assert "must never be archived" in texts(c)


def test_a_pending_tool_call_must_get_reconcile() -> None:
    c = checker()
    c.sent(sent("pending", pending=True, policy="same_session_only"))
    c.decision("sim-r01", decision("retry_same_session", "native_session_interrupted"))
    assert "expected reconcile/native_provider_side_effect_pending" in texts(c)


@pytest.mark.parametrize("scenario", ["forged", "unknown_key", "garbage"])
def test_an_unauthenticated_or_invalid_event_must_get_no_decision(scenario: str) -> None:
    c = checker()
    c.sent(sent(scenario))
    c.decision("sim-r01", decision("operator", "native_provider_state_incompatible"))
    assert "must get no decision at all" in texts(c)


def test_exactly_one_decision_per_run_and_attempt() -> None:
    c = checker()
    c.sent(sent("drop", policy="same_session_only"))
    c.decision("sim-r01", decision("retry_same_session", "native_session_interrupted"))
    c.decision("sim-r01", decision("operator", "native_session_retry_exhausted"))
    assert "two decisions for (run_id, attempt 1)" in texts(c)


def test_open_replacement_only_after_the_runner_archived_with_exit_0() -> None:
    c = checker()
    c.sent(sent("drop"))
    c.decision("sim-r01", decision("open_replacement", "native_session_continuity_break", epoch=1))
    assert "before the runner was asked to archive" in texts(c)

    c = checker()
    c.sent(sent("drop"))
    archive(c, ArchiveAnswer(2, "failed", ()))
    c.decision("sim-r01", decision("open_replacement", "native_session_continuity_break", epoch=1))
    assert "although the runner's archive exited 2" in texts(c)


def test_open_replacement_carries_the_next_epoch() -> None:
    c = checker()
    c.sent(sent("drop", epoch=3))
    archive(c, ArchiveAnswer(0, "moved", ()))
    c.decision("sim-r01", decision("open_replacement", "native_session_continuity_break", epoch=3))
    assert "expected 4" in texts(c)


def test_an_archive_failure_detail_is_bounded_redacted_and_prefixed() -> None:
    import random

    answer = archive_answer(random.Random(1), fail_rate=1.0, timeout_rate=0.0)
    assert answer.exit_code not in (0, None) and answer.fake_secrets
    good = bounded_detail("runner_continuity_break_archive_failed", answer.exit_code, False, answer.output)

    def judge(detail: str) -> str:
        c = checker()
        c.sent(sent("drop"))
        archive(c, answer)
        c.decision(
            "sim-r01", decision("retry_same_session", "runner_continuity_break_archive_failed", detail=detail)
        )
        return texts(c)

    assert judge(good) == ""
    raw = f"runner_continuity_break_archive_failed: exit={answer.exit_code} timedOut=false {answer.output}"
    assert "leaks" in judge(raw[:512])
    assert "characters (> 512)" in judge(good + "x" * 600)
    assert "does not start with" in judge("archive failed: " + good)
    assert "the runner's answer was" in judge(good.replace(f"exit={answer.exit_code}", "exit=9"))


def test_continue_fresh_only_after_an_operator_resolution() -> None:
    c = checker()
    c.sent(sent("pending", pending=True))
    c.decision("sim-r01", decision("reconcile", "native_provider_side_effect_pending"))
    c.decision("sim-r01", decision("continue_fresh", "execution_reconciled", outcome="completed"))
    assert "before any operator resolution" in texts(c)

    c = checker()
    c.sent(sent("drop", policy="same_session_only"))
    c.decision("sim-r01", decision("retry_same_session", "native_session_interrupted"))
    c.operator_acting(f"{PREFIX}-r1", 1, "retry", None)
    c.decision("sim-r01", decision("continue_fresh", "operator_retry"))
    assert "continue_fresh after retry_same_session" in texts(c)

    c = checker()
    c.sent(sent("pending", pending=True))
    c.decision("sim-r01", decision("reconcile", "native_provider_side_effect_pending"))
    c.operator_acting(f"{PREFIX}-r1", 1, "resolve", "not_performed")
    c.decision("sim-r01", decision("continue_fresh", "execution_reconciled", outcome="completed"))
    assert "expected execution_reconciled/not_performed" in texts(c)


def test_an_expected_decision_that_never_arrives_is_reported_at_its_deadline() -> None:
    clock = Clock()
    c = checker(clock)
    c.sent(sent("refusal"))
    c.sent(sent("forged", run_id=f"{PREFIX}-r2"))
    c.sent(sent("drop", run_id=f"{PREFIX}-r3"))  # archive path: its deadline includes the archive timeout
    clock.now = 9.0
    assert c.overdue() == []
    clock.now = 10.0
    late = c.overdue()
    assert sorted(x.run_id for x in late) == [f"{PREFIX}-r1", f"{PREFIX}-r2"]
    assert "expected a decision (operator/native_provider_state_incompatible)" in late[0].text
    clock.now = 15.0
    assert [x.run_id for x in c.overdue()] == [f"{PREFIX}-r3"]
    assert c.overdue() == []  # each reported once


def test_a_valid_event_dead_lettered_points_at_the_keys() -> None:
    c = checker()
    c.sent(sent("refusal"))
    c.dead_letter("continuity.dead.quarantine", "unknown_key", f"{PREFIX}-r1".encode())
    assert "simulator's keys" in texts(c)


def refusal(code: RefusalCode, run_id: str = f"{PREFIX}-r1") -> Refusal:
    quota = code == "quota_exceeded"
    return Refusal(
        runner_id="sim-r01",
        run_id=run_id,
        attempt=1,
        event_id=f"{run_id}.a1",
        code=code,
        scope="runner" if quota else None,
        quota="event_rate" if quota else None,
        not_before="2026-11-30T12:00:01.000Z" if quota else None,
        refused_at="2026-11-30T12:00:00.000Z",
    )


def test_a_refusal_for_the_quota_waits_for_the_event_sent_again() -> None:
    clock = Clock()
    c = checker(clock)
    c.sent(sent("refusal"))
    clock.now = 8.0
    c.refusal("sim-r01", refusal("quota_exceeded"))
    c.resent(f"{PREFIX}-r1", 1, b"the event under a new id")
    assert c.contradictions == [] and c.refusals == {"quota_exceeded": 1}
    clock.now = 15.0  # past the first deadline, within the one the resend set
    assert c.overdue() == []
    # A dead letter of the new payload is the run's.
    assert (
        c.dead_letter("continuity.dead.quarantine", "unknown_key", b"the event under a new id")
        == f"{PREFIX}-r1"
    )
    assert "simulator's keys" in texts(c)


def test_a_final_refusal_of_a_simulated_event_is_one_contradiction() -> None:
    c = checker()
    c.sent(sent("refusal"))
    c.refusal("sim-r01", refusal("session_not_owned"))
    assert "refused session_not_owned" in texts(c) and len(c.contradictions) == 1
    # Its dead letter, which follows, and the deadline add nothing.
    c.dead_letter("continuity.dead.refused", "session_not_owned", f"{PREFIX}-r1".encode())
    assert c.overdue(now=float("inf")) == [] and len(c.contradictions) == 1
    # Another client's refusal is only counted.
    c.refusal("sim-r01", refusal("tenant_not_allowed", run_id="elsewhere-r1"))
    assert len(c.contradictions) == 1 and c.foreign == 1


def test_the_mix_is_parsed_strictly() -> None:
    assert parse_mix("drop=50,refusal=10,forged") == {"drop": 50, "refusal": 10, "forged": 1}
    for bad in ("nope=1", "drop=-1", "drop=0", "drop=x"):
        with pytest.raises(ValueError):
            parse_mix(bad)


# ---- outcomes: what followed each decision ----------------------------------------------------


HARNESS = HarnessInfo(name="claude-code", version="2.1.332+simtest")


def outcome(status: str, action: str, *, attempt: int = 1, run_id: str = f"{PREFIX}-r1") -> RunOutcome:
    return RunOutcome(
        outcome_id=f"{run_id}:{attempt}:outcome",
        runner_id="sim-r01",
        run_id=run_id,
        attempt=attempt,
        session=SESSION,
        status=status,  # type: ignore[arg-type]
        action=action,  # type: ignore[arg-type]
        reason="native_session_interrupted",
        decision_id=f"{run_id}:{attempt}:{action}",
        recorded_at="2026-11-30T12:00:02.000Z",
    )


def test_a_turn_sent_awaits_the_outcome_its_decision_gives() -> None:
    clock = Clock()
    c = checker(clock)
    c.sent(sent("drop", policy="same_session_only"))
    retry = msgspec.structs.replace(
        decision("retry_same_session", "native_session_interrupted"),
        rule="4.4.9",
        failure_class="unclassified",
    )
    c.decision("sim-r01", retry)
    c.followed(f"{PREFIX}-r1", retry, "recovered", HARNESS)
    c.turn_sent(f"{PREFIX}-r1", 1, "retry_same_session", f"{PREFIX}-r1.a1.turn")
    assert c.outstanding() == 1 and c.turns == 1
    c.outcome(outcome("recovered", "retry_same_session"))
    c.outcome(outcome("recovered", "retry_same_session"))  # seen again: harmless
    assert c.contradictions == [] and c.outstanding() == 0
    assert c.outcomes == {"recovered": 1} and c.final_statuses() == {f"{PREFIX}-r1": "recovered"}
    key = ("4.4.9", "retry_same_session", "unclassified", "claude-code", "2.1.332+simtest")
    assert c.truth.by_row() == {key: {"recovered": 1}} and c.truth.by_scenario() == {"drop": {"recovered": 1}}


def test_a_turn_whose_outcome_is_wrong_or_never_recorded_is_a_contradiction() -> None:
    clock = Clock()
    c = checker(clock)
    for n in (1, 2):
        c.sent(sent("drop", run_id=f"{PREFIX}-r{n}", policy="same_session_only"))
        c.turn_sent(f"{PREFIX}-r{n}", 1, "retry_same_session", f"{PREFIX}-r{n}.a1.turn")
    c.outcome(outcome("recovered_fresh", "continue_fresh"))
    assert "recorded recovered_fresh for continue_fresh" in texts(c)
    clock.now = 11.0  # (the events' decisions are overdue too: none was given here)
    late = [x.run_id for x in c.overdue() if "expected the outcome recovered, none arrived" in x.text]
    assert late == [f"{PREFIX}-r2"]
    # An outcome of an attempt whose session no runner reported completing a turn.
    c.outcome(outcome("recovered", "retry_same_session", attempt=2))
    assert "whose session no runner reported completing a turn" in texts(c)


def test_a_dead_lettered_or_refused_turn_is_a_contradiction_and_a_quota_refusal_is_not() -> None:
    c = checker()
    c.sent(sent("drop"))
    c.decision("sim-r01", decision("retry_same_session", "runner_continuity_break_archive_failed"))
    c.contradictions.clear()  # (no archive was asked for: not what this test is about)
    c.turn_sent(f"{PREFIX}-r1", 1, "retry_same_session", f"{PREFIX}-r1.a1.turn")
    quota = msgspec.structs.replace(refusal("quota_exceeded"), event_id=f"{PREFIX}-r1.a1.turn")
    c.refusal("sim-r01", quota)
    c.turn_resent(f"{PREFIX}-r1", 1, f"{PREFIX}-r1.a1.turn.q1")
    assert c.contradictions == [] and c.outstanding() == 1
    payload = msgspec.json.encode({"type": "turn_completed", "event_id": f"{PREFIX}-r1.a1.turn.q1"})
    assert c.dead_letter("continuity.dead.invalid", "outcome_without_decision", payload) == f"{PREFIX}-r1"
    assert "was dead-lettered on continuity.dead.invalid (outcome_without_decision)" in texts(c)
    assert c.outstanding() == 0
    final = msgspec.structs.replace(refusal("run_not_owned"), event_id=f"{PREFIX}-r1.a1.turn")
    c.refusal("sim-r01", final)
    assert "turn_completed of attempt 1 was refused run_not_owned" in texts(c)
    assert c.dead_letter("continuity.dead.invalid", "x", b"{not json") is None


def test_a_decision_is_counted_in_the_row_runs_stats_counts_it_in() -> None:
    retry = decision("retry_same_session", "runner_continuity_break_archive_failed")
    # The archiver's decision: the archive request's row and class.
    assert row_key(retry, HARNESS, ("4.4.7", "unclassified"))[:3] == (
        "4.4.7",
        "retry_same_session",
        "unclassified",
    )
    # An operator's continue_fresh: row operator, class none; no harness named: unknown.
    fresh = decision("continue_fresh", "operator_retry")
    assert row_key(fresh, None) == ("operator", "continue_fresh", "none", "unknown", "unknown")
    table = msgspec.structs.replace(retry, rule="4.4.9", failure_class="unclassified")
    assert row_key(table, HARNESS) == ("4.4.9", "retry_same_session", "unclassified", *HARNESS_KEY)


HARNESS_KEY = ("claude-code", "2.1.332+simtest")


def test_runs_stats_rows_are_held_against_the_runners_truth() -> None:
    truth = Truth()
    key = ("4.4.9", "retry_same_session", "unclassified", *HARNESS_KEY)
    other = ("4.4.7", "open_replacement", "unclassified", *HARNESS_KEY)
    for what, n in (("recovered", 9), ("failed", 1)):
        for _ in range(n):
            truth.add("drop", key, what)  # type: ignore[arg-type]
    truth.add("drop", other, "recovered")
    same = compare(truth, {key: ServerRow(9, 1, 0, 0, 0), other: ServerRow(1, 0, 0, 0, 0)})
    assert same.disagreements == []
    (drop,) = same.scenarios
    assert (drop.scenario, drop.judged, drop.recovered, drop.server_judged, drop.server_recovered) == (
        "drop",
        11,
        10,
        11,
        10,
    )
    assert drop.points_off == pytest.approx(100 * (10 / 11 - 0.9))
    assert drop.standard_error == pytest.approx(100 * math.sqrt(0.9 * 0.1 / 11))
    # A decision judged otherwise, and a row the services do not have, disagree.
    off = compare(truth, {key: ServerRow(8, 1, 0, 0, 1)})
    assert [r.key for r in off.disagreements] == [other, key]
